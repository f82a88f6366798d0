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
//! `cluster_partition_handling = autoheal`, so a member paused past the net tick (~60 s) heals.
//!
//! Every process call is a `tokio::process::Command`; every `rabbitmqctl` call has a deadline and
//! is killed with its future. Dropping the cluster SIGCONTs and kill -9s every member's
//! `beam.smp` and removes the cluster's directory (unless `BRIEFRAIL_FAULTS_KEEP` is set).
#![allow(dead_code)]

use std::fmt::Write as _;
use std::future::Future;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const CTL: &str = "/usr/lib/rabbitmq/bin/rabbitmqctl";
/// How long a member may take to boot (and cluster) before its start counts as failed.
const BOOT_DEADLINE: Duration = Duration::from_secs(180);
/// Deadline of one `rabbitmqctl` call (its own Erlang VM boot included).
const CTL_DEADLINE: Duration = Duration::from_secs(120);
/// Ports are picked in this window: below the ephemeral range (32768-60999), above the usual
/// services. The machine broker's ports are skipped explicitly.
const PORT_WINDOW: (u16, u16) = (20000, 32000);
const FORBIDDEN_PORTS: &[u16] = &[4369, 5672, 15672, 25672];
/// Ports available to the CLI's own Erlang distribution listener (one per concurrent call).
const CTL_PORT_SPAN: u16 = 24;

struct Member {
    name: String,
    amqp_port: u16,
    dist_port: u16,
    /// `<root>/n<k>`: `mnesia/`, `log/`, `pid`, `server.out`.
    dir: PathBuf,
    config: PathBuf,
    /// The `beam.smp` of the running member (the pid file's content); None once killed/stopped.
    pid: Option<u32>,
    /// The `rabbitmq-server` shell wrapper, parent of the beam.
    child: Option<Child>,
    paused: AtomicBool,
}

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
}

impl BrokerCluster {
    /// Starts `n` nodes (names `brf<k>-<tag>@localhost`) under `dir` (in a fresh subdirectory
    /// `rabbitmq-<tag>`), clustered together, and waits until every member has booted and sees
    /// all `n` as running (the data of `cluster_status`). The nodes boot in parallel.
    pub async fn start(dir: &Path, n: usize) -> Result<Self, String> {
        if n == 0 {
            return Err("a broker cluster needs at least one member".into());
        }
        check_binaries()?;
        let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
        let root = dir.join(format!("rabbitmq-{tag}"));
        let home = root.join("home");
        std::fs::create_dir_all(&home).map_err(|e| format!("creating {}: {e}", home.display()))?;
        let mut cluster = BrokerCluster {
            env_file: root.join("rabbitmq-env.conf"),
            plugins_file: root.join("enabled_plugins"),
            root,
            tag,
            home,
            ctl_ports: (0, 0),
            members: Vec::new(),
        };
        // From here on, an error drops `cluster`, which kills whatever did start.
        cluster.prepare(n)?;
        for i in 0..n {
            cluster.spawn_member(i)?;
        }
        let names = cluster.all_names();
        let results = join_all(
            (0..n)
                .map(|i| cluster.wait_ready(i, &names))
                .collect::<Vec<_>>(),
        )
        .await;
        all_ok(results, "starting the broker cluster")?;
        for i in 0..n {
            cluster.members[i].pid = Some(cluster.read_pid(i)?);
        }
        Ok(cluster)
    }

    /// Writes cookie, env file, plugins file and every member's config; picks the ports.
    fn prepare(&mut self, n: usize) -> Result<(), String> {
        let cookie = uuid::Uuid::new_v4().simple().to_string().to_uppercase();
        let cookie_path = self.home.join(".erlang.cookie");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&cookie_path)
            .and_then(|mut f| f.write_all(cookie.as_bytes()))
            .map_err(|e| format!("writing {}: {e}", cookie_path.display()))?;
        write_file(&self.env_file, "")?;
        write_file(&self.plugins_file, "")?;

        let seed = u64::from_str_radix(&self.tag, 16).unwrap_or(0);
        let (ports, ctl_ports) = pick_ports(2 * n, seed)?;
        self.ctl_ports = ctl_ports;
        let names: Vec<String> = (1..=n)
            .map(|k| format!("brf{k}-{}@localhost", self.tag))
            .collect();
        for (i, name) in names.iter().enumerate() {
            let dir = self.root.join(format!("n{}", i + 1));
            for sub in ["mnesia", "log"] {
                let d = dir.join(sub);
                std::fs::create_dir_all(&d)
                    .map_err(|e| format!("creating {}: {e}", d.display()))?;
            }
            let amqp_port = ports[2 * i];
            let dist_port = ports[2 * i + 1];
            let mut conf = format!(
                "listeners.tcp.default = 127.0.0.1:{amqp_port}\n\
                 loopback_users = none\n\
                 vm_memory_high_watermark.relative = 0.4\n\
                 log.console = false\n\
                 log.file.level = info\n\
                 cluster_partition_handling = autoheal\n\
                 cluster_formation.peer_discovery_backend = classic_config\n"
            );
            if i > 0 {
                // Non-seed members wait (up to 2 minutes) for the seed's database; only the seed
                // may ever start as a blank standalone node.
                for (j, other) in names.iter().enumerate() {
                    let _ = writeln!(
                        conf,
                        "cluster_formation.classic_config.nodes.{} = {other}",
                        j + 1
                    );
                }
                conf.push_str(
                    "cluster_formation.discovery_retry_limit = 240\n\
                     cluster_formation.discovery_retry_interval = 500\n",
                );
            }
            let config = self.root.join(format!("n{}.conf", i + 1));
            write_file(&config, &conf)?;
            self.members.push(Member {
                name: name.clone(),
                amqp_port,
                dist_port,
                dir,
                config,
                pid: None,
                child: None,
                paused: AtomicBool::new(false),
            });
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The cluster's own directory (`<dir>/rabbitmq-<tag>`): configs, data, logs.
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

    /// `rabbitmqctl -n <member i> <args…>`; its stdout.
    pub async fn ctl(&self, i: usize, args: &[&str]) -> Result<String, String> {
        self.run_ctl(&self.members[i].name, args, CTL_DEADLINE)
            .await
    }

    /// Index of the member leading quorum queue `queue` (vhost "/"), as the queue's record says
    /// (`list_queues name leader`). Right after the leader's node died the record may still name
    /// it for a moment: poll until it names a member that is up.
    pub async fn leader(&self, queue: &str) -> Result<usize, String> {
        let q = self.queue_info(queue).await?;
        let leader = q
            .get("leader")
            .and_then(|l| l.as_str())
            .ok_or_else(|| format!("queue {queue} has no leader in {q}"))?;
        self.index_of(leader)
            .ok_or_else(|| format!("queue {queue}: leader {leader} is not a member"))
    }

    /// Members whose replica of quorum queue `queue` is running (`list_queues name online`).
    pub async fn queue_online_members(&self, queue: &str) -> Result<Vec<usize>, String> {
        let q = self.queue_info(queue).await?;
        let online = q
            .get("online")
            .and_then(|o| o.as_array())
            .ok_or_else(|| format!("queue {queue} has no online list in {q}"))?;
        let mut out: Vec<usize> = online
            .iter()
            .filter_map(|n| n.as_str())
            .filter_map(|n| self.index_of(n))
            .collect();
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// kill -9 of member i's beam; Ok once it is gone and its AMQP port refuses.
    pub async fn kill(&mut self, i: usize) -> Result<(), String> {
        let name = self.members[i].name.clone();
        let pid = self.members[i]
            .pid
            .ok_or_else(|| format!("kill: member {i} ({name}) is not running"))?;
        signal("-KILL", pid).await?;
        self.members[i].paused.store(false, Ordering::SeqCst);
        self.reap(i, Duration::from_secs(15)).await?;
        self.members[i].pid = None;
        self.wait_refuses(i, Duration::from_secs(10)).await
    }

    /// Starts member i again on its own data directory and waits until it has booted and is
    /// clustered with every member that is up.
    pub async fn restart(&mut self, i: usize) -> Result<(), String> {
        if self.members[i].pid.is_some() {
            return Err(format!(
                "restart: member {i} ({}) is still running",
                self.members[i].name
            ));
        }
        self.spawn_member(i)?;
        let expected = self.up_names_with(i);
        self.wait_ready(i, &expected).await?;
        self.members[i].pid = Some(self.read_pid(i)?);
        Ok(())
    }

    /// SIGSTOP of member i's beam; Ok once `/proc/<pid>/stat` shows state T.
    pub async fn pause(&self, i: usize) -> Result<(), String> {
        let pid = self.running_pid(i, "pause")?;
        signal("-STOP", pid).await?;
        self.members[i].paused.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match proc_state(pid) {
                Some('T') | Some('t') => return Ok(()),
                None => return Err(format!("pause: beam {pid} of member {i} is gone")),
                Some(_) if Instant::now() > deadline => {
                    return Err(format!("pause: beam {pid} of member {i} did not stop"));
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// SIGCONT of member i's beam; Ok once it no longer shows state T.
    pub async fn resume(&self, i: usize) -> Result<(), String> {
        let pid = self.running_pid(i, "resume")?;
        signal("-CONT", pid).await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match proc_state(pid) {
                Some('T') | Some('t') if Instant::now() > deadline => {
                    return Err(format!("resume: beam {pid} of member {i} stays stopped"));
                }
                Some('T') | Some('t') => tokio::time::sleep(Duration::from_millis(20)).await,
                None => return Err(format!("resume: beam {pid} of member {i} is gone")),
                Some(_) => {
                    self.members[i].paused.store(false, Ordering::SeqCst);
                    return Ok(());
                }
            }
        }
    }

    /// Each member in turn: `rabbitmqctl stop` (graceful), start again on its data, wait until it
    /// has booted and is clustered, and until every quorum queue has all its replicas online
    /// again, before the next member goes down (so a rolling restart never costs a quorum).
    pub async fn rolling_restart(&mut self) -> Result<(), String> {
        self.check_none_paused("rolling_restart")?;
        for i in 0..self.len() {
            if self.members[i].pid.is_none() {
                continue;
            }
            self.ctl(i, &["stop"])
                .await
                .map_err(|e| format!("rolling_restart: stopping member {i}: {e}"))?;
            self.reap(i, Duration::from_secs(60))
                .await
                .map_err(|e| format!("rolling_restart: {e}"))?;
            self.members[i].pid = None;
            self.restart(i)
                .await
                .map_err(|e| format!("rolling_restart: {e}"))?;
            self.wait_quorum_queues_online(i, Duration::from_secs(60))
                .await
                .map_err(|e| format!("rolling_restart: after member {i}: {e}"))?;
        }
        Ok(())
    }

    /// `stop_app` on every running member (concurrently): the Erlang nodes stay up, the broker
    /// application (listeners, queues) stops.
    pub async fn stop_app_all(&self) -> Result<(), String> {
        self.check_none_paused("stop_app_all")?;
        let up = self.up_members();
        let results = join_all(
            up.iter()
                .map(|&i| self.ctl(i, &["stop_app"]))
                .collect::<Vec<_>>(),
        )
        .await;
        all_ok(
            results.into_iter().map(|r| r.map(|_| ())).collect(),
            "stop_app_all",
        )
    }

    /// `start_app` on every running member *concurrently* (members that all stopped must find
    /// each other again: each waits for the others' tables), then waits until each has booted
    /// (what `await_startup` waits for) and sees every member running.
    pub async fn start_app_all(&self) -> Result<(), String> {
        self.check_none_paused("start_app_all")?;
        let up = self.up_members();
        let results = join_all(
            up.iter()
                .map(|&i| self.ctl(i, &["start_app"]))
                .collect::<Vec<_>>(),
        )
        .await;
        all_ok(
            results.into_iter().map(|r| r.map(|_| ())).collect(),
            "start_app_all",
        )?;
        let expected = self.up_names();
        let results = join_all(
            up.iter()
                .map(|&i| self.wait_ready(i, &expected))
                .collect::<Vec<_>>(),
        )
        .await;
        all_ok(results, "start_app_all: awaiting startup")
    }

    /// `set_vm_memory_high_watermark <fraction>` on member i (0.4 is the configured default).
    pub async fn set_memory_watermark(&self, i: usize, fraction: f64) -> Result<(), String> {
        if !fraction.is_finite() || fraction < 0.0 {
            return Err(format!("set_memory_watermark: bad fraction {fraction}"));
        }
        self.ctl(i, &["set_vm_memory_high_watermark", &format!("{fraction}")])
            .await
            .map(|_| ())
    }

    /// Whether any running member reports a memory alarm (`rabbit_alarm:get_alarms()` on every
    /// running node, asked through one member). False when no member can be asked.
    pub async fn memory_alarm_on(&self) -> bool {
        let expr = "rpc:multicall(rabbit_mnesia:cluster_nodes(running), rabbit_alarm, get_alarms, [], 10000).";
        for i in self.askable_members() {
            if let Ok(out) = self.ctl(i, &["eval", expr]).await {
                return out.contains("memory");
            }
        }
        false
    }

    /// Closes every client connection on member i (all vhosts: `close_all_connections --global`).
    pub async fn close_all_connections(&self, i: usize) -> Result<(), String> {
        self.ctl(
            i,
            &[
                "close_all_connections",
                "--global",
                "closed by briefrail-faults",
            ],
        )
        .await
        .map(|_| ())
    }

    // ---- internals ----

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

    fn up_names_with(&self, i: usize) -> Vec<String> {
        (0..self.len())
            .filter(|&j| j == i || self.is_up(j))
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

    /// The environment every process of ours gets: nothing inherited but PATH, a private HOME
    /// (cookie), an empty env file (not /etc/rabbitmq/rabbitmq-env.conf), loopback distribution
    /// and CLI distribution ports of our own.
    fn base_env(&self, cmd: &mut Command) {
        cmd.env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into()),
            )
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .env("LC_ALL", "C.UTF-8")
            .env("RABBITMQ_CONF_ENV_FILE", &self.env_file)
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("ERL_FLAGS", "-kernel inet_dist_use_interface {127,0,0,1}")
            .env("RABBITMQ_CTL_DIST_PORT_MIN", self.ctl_ports.0.to_string())
            .env("RABBITMQ_CTL_DIST_PORT_MAX", self.ctl_ports.1.to_string())
            .current_dir(&self.root);
    }

    /// Spawns member i's `rabbitmq-server` (in the foreground of its shell wrapper).
    fn spawn_member(&mut self, i: usize) -> Result<(), String> {
        let m = &self.members[i];
        let pid_file = m.dir.join("pid");
        let _ = std::fs::remove_file(&pid_file);
        let out_path = m.dir.join("server.out");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out_path)
            .map_err(|e| format!("opening {}: {e}", out_path.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("opening {}: {e}", out_path.display()))?;
        let mut cmd = Command::new(SERVER);
        self.base_env(&mut cmd);
        cmd.env("RABBITMQ_NODENAME", &m.name)
            .env("RABBITMQ_DIST_PORT", m.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", m.dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", m.dir.join("log"))
            .env("RABBITMQ_PID_FILE", &pid_file)
            .env("RABBITMQ_CONFIG_FILE", &m.config)
            .env("RABBITMQ_CONFIG_FILES", m.dir.join("conf.d"))
            .env(
                "RABBITMQ_ADVANCED_CONFIG_FILE",
                m.dir.join("advanced.config"),
            )
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", &self.plugins_file)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawning {SERVER} for {}: {e}", m.name))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Waits until member i's AMQP port answers, then until it has booted and lists every node
    /// of `expected` as running. Fails early if its server process exits.
    async fn wait_ready(&self, i: usize, expected: &[String]) -> Result<(), String> {
        let m = &self.members[i];
        let deadline = Instant::now() + BOOT_DEADLINE;
        let mut last = String::new();
        loop {
            if self.server_exited(i) {
                return Err(format!(
                    "member {i} ({}) exited while booting: {}",
                    m.name,
                    self.diagnostics(i)
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "member {i} ({}) not ready within {BOOT_DEADLINE:?} (last check: {last}): {}",
                    m.name,
                    self.diagnostics(i)
                ));
            }
            if !port_answers(m.amqp_port).await {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            let expr = "{rabbit:is_booted(), rabbit_mnesia:cluster_nodes(running)}.";
            match self.run_ctl(&m.name, &["eval", expr], CTL_DEADLINE).await {
                Ok(out) => {
                    let booted = out.trim_start().starts_with("{true");
                    let missing: Vec<&String> = expected
                        .iter()
                        .filter(|n| !out.contains(&format!("'{n}'")))
                        .collect();
                    if booted && missing.is_empty() {
                        return Ok(());
                    }
                    last = format!("booted {booted}, running {}", out.trim());
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Waits (asking member `via`) until every quorum queue has each of its replicas online.
    async fn wait_quorum_queues_online(&self, via: usize, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            let out = self
                .ctl(
                    via,
                    &[
                        "-q",
                        "list_queues",
                        "-p",
                        "/",
                        "name",
                        "type",
                        "members",
                        "online",
                        "--formatter",
                        "json",
                    ],
                )
                .await;
            let lagging = match out.and_then(|o| parse_json_list(&o)) {
                Ok(queues) => queues
                    .iter()
                    .filter(|q| q.get("type").and_then(|t| t.as_str()) == Some("quorum"))
                    .filter(|q| {
                        let set = |k: &str| -> Vec<String> {
                            let mut v: Vec<String> = q
                                .get(k)
                                .and_then(|a| a.as_array())
                                .map(|a| {
                                    a.iter()
                                        .filter_map(|s| s.as_str().map(str::to_owned))
                                        .collect()
                                })
                                .unwrap_or_default();
                            v.sort();
                            v
                        };
                        set("members") != set("online")
                    })
                    .map(|q| {
                        q.get("name")
                            .and_then(|n| n.as_str())
                            .unwrap_or("?")
                            .to_owned()
                    })
                    .collect::<Vec<_>>(),
                Err(e) => vec![format!("(list_queues failed: {e})")],
            };
            if lagging.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "quorum queues not fully online within {within:?}: {}",
                    lagging.join(", ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The `list_queues` row of `queue` (vhost "/"), asked of the first reachable member.
    async fn queue_info(&self, queue: &str) -> Result<serde_json::Value, String> {
        let mut errors = Vec::new();
        for i in self.askable_members() {
            let out = self
                .ctl(
                    i,
                    &[
                        "-q",
                        "list_queues",
                        "-p",
                        "/",
                        "name",
                        "type",
                        "leader",
                        "members",
                        "online",
                        "--formatter",
                        "json",
                        "-t",
                        "30",
                    ],
                )
                .await;
            match out.and_then(|o| parse_json_list(&o)) {
                Ok(queues) => {
                    return queues
                        .into_iter()
                        .find(|q| q.get("name").and_then(|n| n.as_str()) == Some(queue))
                        .ok_or_else(|| format!("queue {queue} not found (asked member {i})"));
                }
                Err(e) => errors.push(format!("member {i}: {e}")),
            }
        }
        if errors.is_empty() {
            Err(format!("queue {queue}: no member can be asked"))
        } else {
            Err(format!("queue {queue}: {}", errors.join("; ")))
        }
    }

    async fn run_ctl(&self, node: &str, args: &[&str], within: Duration) -> Result<String, String> {
        let what = format!("rabbitmqctl -n {node} {}", args.join(" "));
        let mut cmd = Command::new(CTL);
        self.base_env(&mut cmd);
        cmd.arg("-n")
            .arg(node)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| format!("{what}: spawn: {e}"))?;
        match tokio::time::timeout(within, child.wait_with_output()).await {
            Err(_) => Err(format!("{what}: no answer within {within:?} (killed)")),
            Ok(Err(e)) => Err(format!("{what}: {e}")),
            Ok(Ok(out)) => {
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                if out.status.success() {
                    Ok(stdout)
                } else {
                    Err(format!(
                        "{what}: {}; stderr: {}; stdout: {}",
                        out.status,
                        tail(&String::from_utf8_lossy(&out.stderr), 12),
                        tail(&stdout, 12)
                    ))
                }
            }
        }
    }

    /// Whether member i's server wrapper has exited (or was never started).
    fn server_exited(&self, i: usize) -> bool {
        // `try_wait` needs `&mut`; the exit shows in /proc as well (gone or zombie).
        match self.members[i].child.as_ref().and_then(|c| c.id()) {
            Some(pid) => !matches!(proc_state(pid), Some(s) if s != 'Z'),
            None => true,
        }
    }

    /// Waits for member i's server wrapper (and with it its beam) to exit.
    async fn reap(&mut self, i: usize, within: Duration) -> Result<(), String> {
        let name = self.members[i].name.clone();
        let beam = self.members[i].pid;
        if let Some(mut child) = self.members[i].child.take() {
            match tokio::time::timeout(within, child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    self.members[i].child = Some(child);
                    return Err(format!(
                        "member {i} ({name}) did not exit within {within:?}"
                    ));
                }
            }
        }
        // The wrapper waits for its beam; make sure of it all the same.
        if let Some(pid) = beam {
            let deadline = Instant::now() + within;
            while matches!(proc_state(pid), Some(s) if s != 'Z') {
                if Instant::now() > deadline {
                    return Err(format!("beam {pid} of member {i} ({name}) still alive"));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    async fn wait_refuses(&self, i: usize, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        while port_answers(self.members[i].amqp_port).await {
            if Instant::now() > deadline {
                return Err(format!(
                    "member {i}: AMQP port {} still answers",
                    self.members[i].amqp_port
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    fn read_pid(&self, i: usize) -> Result<u32, String> {
        let path = self.members[i].dir.join("pid");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        text.trim()
            .parse()
            .map_err(|e| format!("{}: bad pid {text:?}: {e}", path.display()))
    }

    /// The tails of member i's server output and log, for error messages.
    fn diagnostics(&self, i: usize) -> String {
        let m = &self.members[i];
        let out = std::fs::read_to_string(m.dir.join("server.out")).unwrap_or_default();
        let log = std::fs::read_to_string(self.log_file(i)).unwrap_or_default();
        format!(
            "server output: {}; log ({}): {}",
            tail(&out, 10),
            self.log_file(i).display(),
            tail(&log, 10)
        )
    }
}

impl Drop for BrokerCluster {
    fn drop(&mut self) {
        let mut beams: Vec<u32> = Vec::new();
        for i in 0..self.members.len() {
            let pid = self.members[i].pid.or_else(|| {
                // A member still booting (or failed to): its pid file, if written already.
                self.members[i]
                    .child
                    .as_ref()
                    .and_then(|_| self.read_pid(i).ok())
            });
            beams.extend(pid);
        }
        if !beams.is_empty() {
            let pids: Vec<String> = beams.iter().map(u32::to_string).collect();
            for sig in ["-CONT", "-KILL"] {
                let _ = std::process::Command::new("kill")
                    .arg(sig)
                    .args(&pids)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        for m in &mut self.members {
            if let Some(child) = m.child.as_mut() {
                let _ = child.start_kill();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for m in &mut self.members {
            if let Some(child) = m.child.as_mut() {
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            m.child = None;
        }
        for pid in beams {
            while matches!(proc_state(pid), Some(s) if s != 'Z') && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if std::env::var_os("BRIEFRAIL_FAULTS_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
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

/// `count` single ports plus a run of CTL_PORT_SPAN ports for the CLI, all free (bindable on
/// 127.0.0.1) at the time of the call, in PORT_WINDOW, starting at a seeded offset.
fn pick_ports(count: usize, seed: u64) -> Result<(Vec<u16>, (u16, u16)), String> {
    let (lo, hi) = PORT_WINDOW;
    let width = u64::from(hi - lo);
    let start = lo + (seed % width) as u16;
    // Hold every chosen port bound until all are chosen, so none is chosen twice.
    let mut held: Vec<TcpListener> = Vec::new();
    let bind = |p: u16| -> Option<TcpListener> {
        if FORBIDDEN_PORTS.contains(&p) || (35672..=35682).contains(&p) {
            return None;
        }
        TcpListener::bind((Ipv4Addr::LOCALHOST, p)).ok()
    };
    let mut candidates = (0..width as u16).map(|k| lo + (start - lo + k) % (hi - lo));
    // The CLI run first (it needs contiguity).
    let mut ctl: Option<(u16, u16)> = None;
    for base in candidates.by_ref() {
        if base + CTL_PORT_SPAN > hi {
            continue;
        }
        let run: Vec<TcpListener> = (base..base + CTL_PORT_SPAN).map_while(bind).collect();
        if run.len() == usize::from(CTL_PORT_SPAN) {
            held.extend(run);
            ctl = Some((base, base + CTL_PORT_SPAN - 1));
            break;
        }
    }
    let ctl = ctl.ok_or("no free port run for the RabbitMQ CLI")?;
    let mut ports = Vec::with_capacity(count);
    for p in candidates {
        if ports.len() == count {
            break;
        }
        if (ctl.0..=ctl.1).contains(&p) {
            continue;
        }
        if let Some(l) = bind(p) {
            held.push(l);
            ports.push(p);
        }
    }
    if ports.len() < count {
        return Err(format!(
            "only {} free ports found for the RabbitMQ cluster",
            ports.len()
        ));
    }
    drop(held);
    Ok((ports, ctl))
}

async fn port_answers(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    matches!(
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

async fn signal(sig: &str, pid: u32) -> Result<(), String> {
    let out = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("kill {sig} {pid}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "kill {sig} {pid}: {}: {}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 5)
        ))
    }
}

/// The state letter of /proc/<pid>/stat (R, S, D, T, Z…), None if there is no such process.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

fn parse_json_list(out: &str) -> Result<Vec<serde_json::Value>, String> {
    let start = out
        .find('[')
        .ok_or_else(|| format!("no JSON list in {}", tail(out, 5)))?;
    serde_json::from_str(&out[start..]).map_err(|e| format!("bad JSON ({e}) in {}", tail(out, 5)))
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
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
