//! What the members boot from, written before any of them starts: the cluster's own cookie, an
//! empty env file and plugins file (in place of the machine's under `/etc/rabbitmq`), the
//! advanced config, each member's directories and config file, and free ports for all of it.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use super::member::Member;
use super::{BrokerCluster, NET_TICKTIME};

/// Ports are picked in this window: below the ephemeral range (32768-60999), above the usual
/// services. The machine broker's ports are skipped explicitly.
const PORT_WINDOW: (u16, u16) = (20000, 32000);
const FORBIDDEN_PORTS: &[u16] = &[4369, 5672, 15672, 25672];
/// Ports available to the CLI's own Erlang distribution listener (one per concurrent call).
const CTL_PORT_SPAN: u16 = 24;

impl BrokerCluster {
    /// Writes cookie, env file, plugins file and every member's config; picks the ports.
    pub(super) fn prepare(&mut self, n: usize) -> Result<(), String> {
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
        // A member paused past the net tick comes back partitioned; autoheal restarts it. Its
        // loser waits for a "safe to start" from the winner that may never come (the winner
        // saw it down already): 5 s instead of the default 60 s before it restarts anyway.
        write_file(
            &self.root.join("advanced.config"),
            "[{rabbit, [{autoheal_state_transition_timeout, 5000}]}].\n",
        )?;

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
                 net_ticktime = {NET_TICKTIME}\n\
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

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}
