//! A private RabbitMQ cluster on loopback for the fault suite: `n` nodes named
//! `brf<k>-<tag>@localhost` (the tag is drawn per run, so two suites never collide), each with its
//! own data, log, config and ports, sharing a cookie of their own. The machine's broker
//! (`rabbit@…`, ports 5672/25672, its CLI ports 35672-35682) is never stopped, reconfigured or
//! connected to: the nodes and their CLI calls run from
//! `/usr/lib/rabbitmq/bin/` directly (not the `/usr/sbin` wrappers that `su` to the `rabbitmq`
//! user and its cookie) with a private `HOME`, a private env file and ports picked free below the
//! kernel's ephemeral range (so no outgoing connection can take a member's port between a kill and
//! its restart).
//!
//! Clustering: member 0 is the seed and boots standalone; the others list every member in
//! `cluster_formation.classic_config` with a long discovery retry, so they join the seed once its
//! database is up (all boot in parallel, with no race: only the seed may start standalone). A
//! member that is killed or stopped and started again on its own data directory is no longer
//! blank: it skips peer discovery and rejoins the cluster recorded in its database by itself.
//!
//! Pauses: the net tick is 10 s (not 60), so a SIGSTOPped member is declared down after 10-13 s;
//! until then Mnesia writes block cluster-wide, and a quorum queue whose leader is paused takes
//! that long to serve again (a paused follower costs nothing). A member resumed after it was
//! declared down comes back partitioned; `cluster_partition_handling = autoheal` restarts its
//! broker app within ~5-10 s (`wait_clustered` waits for that).
//!
//! Every process call is a `tokio::process::Command`; every `rabbitmqctl` call has a deadline and
//! is killed with its future. Dropping the cluster SIGCONTs and kill -9s every member's
//! `beam.smp` and removes the cluster's directory (unless `BRIEFRAIL_FAULTS_KEEP` is set). A
//! watchdog shell does the same if this process dies without dropping it (kill -9, abort).
//!
//! Layout: [`config`] writes what the members boot from (cookie, env and config files, ports);
//! [`member`] runs one member's server process (spawn, reap, signals, pid file); [`ctl`] runs
//! `rabbitmqctl` and the checks built on it (booted and clustered, queue leader and replicas);
//! [`faults`] is what the injectors do to the cluster; [`cleanup`] makes sure no member outlives
//! the suite (Drop and the watchdog).

mod cleanup;
mod config;
mod ctl;
mod faults;
mod member;

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use tokio::process::Child;

use member::Member;

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const CTL: &str = "/usr/lib/rabbitmq/bin/rabbitmqctl";
/// How long a member may take to boot (and cluster) before its start counts as failed.
const BOOT_DEADLINE: Duration = Duration::from_secs(180);
/// How many times a cluster start is made when a member exits while booting (see `start`).
const BOOT_ATTEMPTS: u32 = 3;
/// Erlang distribution tick (default 60 s): a paused (SIGSTOP) member is declared down after
/// NET_TICKTIME..1.25 × NET_TICKTIME. Until then Mnesia writes that need every member block
/// cluster-wide (e.g. the record of a quorum queue's new leader).
const NET_TICKTIME: u32 = 10;

/// A private RabbitMQ cluster; see the module documentation.
pub struct BrokerCluster {
    /// `<dir>/rabbitmq-<tag>`, removed on drop.
    root: PathBuf,
    tag: String,
    home: PathBuf,
    env_file: PathBuf,
    plugins_file: PathBuf,
    ctl_ports: (u16, u16),
    members: Vec<Member>,
    /// Kills the members if this process dies without dropping the cluster (kill -9, abort).
    watchdog: Option<Child>,
}

impl BrokerCluster {
    /// Starts `n` nodes (names `brf<k>-<tag>@localhost`) under `dir` (in a fresh subdirectory
    /// `rabbitmq-<tag>`), clustered together, and waits until every member has booted and sees
    /// all `n` as running (the data of `cluster_status`). The nodes boot in parallel.
    ///
    /// RabbitMQ 3.10 members that boot together sometimes race the cluster's feature-flag
    /// migration: one exits at once with `schema_integrity_check_failed` (its tables were made
    /// before the others' migration). Such a start is torn down and made again in a fresh
    /// directory, up to [`BOOT_ATTEMPTS`] times, each retry said on stderr with its reason; any
    /// other failure, or the last attempt's, is the error.
    pub async fn start(dir: &Path, n: usize) -> Result<Self, String> {
        let mut attempt = 1;
        loop {
            match Self::start_once(dir, n).await {
                Err(e) if attempt < BOOT_ATTEMPTS && e.contains("exited while booting") => {
                    eprintln!(
                        "briefrail-faults: broker cluster start {attempt} of {BOOT_ATTEMPTS} failed, starting a fresh one: {}",
                        e.chars().take(600).collect::<String>()
                    );
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn start_once(dir: &Path, n: usize) -> Result<Self, String> {
        if n == 0 {
            return Err("a broker cluster needs at least one member".into());
        }
        check_binaries()?;
        let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
        let root = dir.join(format!("rabbitmq-{tag}"));
        std::fs::create_dir_all(root.join("home"))
            .map_err(|e| format!("creating {}: {e}", root.display()))?;
        // Absolute: the processes run with the cluster's directory as their working directory.
        let root = std::fs::canonicalize(&root)
            .map_err(|e| format!("resolving {}: {e}", root.display()))?;
        let home = root.join("home");
        let mut cluster = BrokerCluster {
            env_file: root.join("rabbitmq-env.conf"),
            plugins_file: root.join("enabled_plugins"),
            root,
            tag,
            home,
            ctl_ports: (0, 0),
            members: Vec::new(),
            watchdog: None,
        };
        // From here on, an error drops `cluster`, which kills whatever did start.
        cluster.prepare(n)?;
        cluster.watchdog = Some(cluster.spawn_watchdog()?);
        for i in 0..n {
            cluster.spawn_member(i)?;
        }
        let names = cluster.all_names();
        let ready = join_all(
            (0..n)
                .map(|i| cluster.wait_ready(i, &names))
                .collect::<Vec<_>>(),
        );
        // A member that exits while booting never joins: the others would wait out their whole
        // deadline for it. Watched apart, it ends the attempt at once.
        let exited = async {
            loop {
                if let Some(i) = (0..n).find(|&i| cluster.server_exited(i)) {
                    return i;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        };
        tokio::select! {
            results = ready => all_ok(results, "starting the broker cluster")?,
            i = exited => {
                return Err(format!(
                    "starting the broker cluster: member {i} ({}) exited while booting: {}",
                    cluster.members[i].name,
                    cluster.diagnostics(i)
                ));
            }
        }
        for i in 0..n {
            cluster.members[i].pid = Some(cluster.read_pid(i)?);
        }
        Ok(cluster)
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The cluster's own directory (`<dir>/rabbitmq-<tag>`): configs, data, logs.
    // Not called by the suite; kept for investigating a run.
    #[allow(dead_code)]
    pub fn dir(&self) -> &Path {
        &self.root
    }

    pub fn node_name(&self, i: usize) -> &str {
        &self.members[i].name
    }

    /// Member i's main log file.
    pub fn log_file(&self, i: usize) -> PathBuf {
        let m = &self.members[i];
        m.dir.join("log").join(format!("{}.log", m.name))
    }

    /// Whether member i's Erlang node is running (not killed, not stopped; paused counts as up).
    pub fn is_up(&self, i: usize) -> bool {
        self.members[i].pid.is_some()
    }

    pub fn is_paused(&self, i: usize) -> bool {
        self.members[i].paused.load(Ordering::SeqCst)
    }

    // Not called by the suite; kept for investigating a run.
    #[allow(dead_code)]
    pub fn amqp_port(&self, i: usize) -> u16 {
        self.members[i].amqp_port
    }

    pub fn amqp_url(&self, i: usize) -> String {
        format!(
            "amqp://guest:guest@127.0.0.1:{}/%2f",
            self.members[i].amqp_port
        )
    }

    pub fn amqp_url_list(&self) -> String {
        (0..self.len())
            .map(|i| self.amqp_url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Whether member i's AMQP port accepts a TCP connection within 1 s.
    pub fn answers(&self, i: usize) -> bool {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.members[i].amqp_port));
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
    }

    // ---- internals: which members, by index or name (the submodules use these too) ----

    fn all_names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    fn up_members(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.is_up(i)).collect()
    }

    fn up_names(&self) -> Vec<String> {
        self.up_members()
            .into_iter()
            .map(|i| self.members[i].name.clone())
            .collect()
    }

    /// Member i and every member that is up and not paused (a paused one stops counting as
    /// running once the net tick declares it down).
    fn up_names_with(&self, i: usize) -> Vec<String> {
        (0..self.len())
            .filter(|&j| j == i || (self.is_up(j) && !self.is_paused(j)))
            .map(|j| self.members[j].name.clone())
            .collect()
    }

    /// Members a CLI call can reach: up and not paused.
    fn askable_members(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| self.is_up(i) && !self.is_paused(i))
            .collect()
    }

    fn index_of(&self, node: &str) -> Option<usize> {
        self.members.iter().position(|m| m.name == node)
    }

    fn running_pid(&self, i: usize, what: &str) -> Result<u32, String> {
        self.members[i].pid.ok_or_else(|| {
            format!(
                "{what}: member {i} ({}) is not running",
                self.members[i].name
            )
        })
    }

    fn check_none_paused(&self, what: &str) -> Result<(), String> {
        match (0..self.len()).find(|&i| self.is_paused(i)) {
            Some(i) => Err(format!("{what}: member {i} is paused (resume it first)")),
            None => Ok(()),
        }
    }
}

fn check_binaries() -> Result<(), String> {
    let mut missing: Vec<String> = [SERVER, CTL]
        .iter()
        .filter(|p| !Path::new(p).is_file())
        .map(|p| p.to_string())
        .collect();
    let erl_found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("erl").is_file()))
        .unwrap_or(false);
    if !erl_found {
        missing.push("erl (Erlang, on PATH)".into());
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "RabbitMQ cluster: missing {} (install rabbitmq-server)",
            missing.join(", ")
        ))
    }
}

/// The last `lines` lines of `s` (at most 2,000 characters).
fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.trim_end().lines().collect();
    let t = v[v.len().saturating_sub(lines)..].join(" | ");
    let chars: Vec<char> = t.chars().collect();
    if chars.len() > 2000 {
        chars[chars.len() - 2000..].iter().collect()
    } else {
        t
    }
}

fn all_ok(results: Vec<Result<(), String>>, what: &str) -> Result<(), String> {
    let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{what}: {}", errors.join("; ")))
    }
}

/// Polls every future until all are done (no spawning: they may borrow).
async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outs.into_iter()
        .map(|o| o.expect("polled to completion"))
        .collect()
}
