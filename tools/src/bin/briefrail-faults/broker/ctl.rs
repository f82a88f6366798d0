//! `rabbitmqctl` against our members, and what is read through it: the environment every
//! process of ours shares (private HOME and cookie, loopback distribution, CLI ports of our own),
//! a deadline on every call, readiness (booted, clustered), a quorum queue's leader and replicas,
//! parsed from the CLI's JSON output.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

use super::{BOOT_DEADLINE, BrokerCluster, CTL, NET_TICKTIME, tail};

/// Deadline of one `rabbitmqctl` call (its own Erlang VM boot included).
const CTL_DEADLINE: Duration = Duration::from_secs(120);

impl BrokerCluster {
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
    // Not called by the suite; kept for investigating a run.
    #[allow(dead_code)]
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

    /// The environment every process of ours gets: nothing inherited but PATH, a private HOME
    /// (cookie), an empty env file (not /etc/rabbitmq/rabbitmq-env.conf), loopback distribution
    /// and CLI distribution ports of our own.
    pub(super) fn base_env(&self, cmd: &mut Command) {
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
            // The CLI ticks as often as the nodes expect (NET_TICKTIME), or a long call
            // (`start_app`) would be dropped as a dead peer.
            .env(
                "RABBITMQ_CTL_ERL_ARGS",
                format!("-kernel net_ticktime {NET_TICKTIME}"),
            )
            .current_dir(&self.root);
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

    /// Waits until member i's AMQP port answers, then until it has booted and lists every node
    /// of `expected` as running. Fails early if its server process exits.
    pub(super) async fn wait_ready(&self, i: usize, expected: &[String]) -> Result<(), String> {
        let m = &self.members[i];
        let deadline = Instant::now() + BOOT_DEADLINE;
        self.wait_port(i, deadline).await?;
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
    pub(super) async fn wait_quorum_queues_online(
        &self,
        via: usize,
        within: Duration,
    ) -> Result<(), String> {
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
                        "15",
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
}

fn parse_json_list(out: &str) -> Result<Vec<serde_json::Value>, String> {
    let start = out
        .find('[')
        .ok_or_else(|| format!("no JSON list in {}", tail(out, 5)))?;
    serde_json::from_str(&out[start..]).map_err(|e| format!("bad JSON ({e}) in {}", tail(out, 5)))
}
