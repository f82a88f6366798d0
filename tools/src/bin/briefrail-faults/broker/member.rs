//! One member's server process: `rabbitmq-server` spawned with the member's own data, log, pid
//! file, config and ports; its AMQP port waited for; its exit reaped; signals and `/proc` state.
//! The pid file names the member's `beam.smp`, not the shell wrapper we spawn: kill -9 and
//! SIGSTOP/SIGCONT must reach the Erlang VM itself.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::{BrokerCluster, SERVER, tail};

pub(super) struct Member {
    pub(super) name: String,
    pub(super) amqp_port: u16,
    pub(super) dist_port: u16,
    /// `<root>/n<k>`: `mnesia/`, `log/`, `pid`, `server.out`.
    pub(super) dir: PathBuf,
    pub(super) config: PathBuf,
    /// The `beam.smp` of the running member (the pid file's content); None once killed/stopped.
    pub(super) pid: Option<u32>,
    /// The `rabbitmq-server` shell wrapper, parent of the beam.
    pub(super) child: Option<Child>,
    pub(super) paused: AtomicBool,
}

impl BrokerCluster {
    /// Spawns member i's `rabbitmq-server` (in the foreground of its shell wrapper).
    pub(super) fn spawn_member(&mut self, i: usize) -> Result<(), String> {
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
                self.root.join("advanced.config"),
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

    /// Waits until member i's AMQP port answers (its listener starts late in the boot), failing
    /// early if its server process exits.
    pub(super) async fn wait_port(&self, i: usize, deadline: Instant) -> Result<(), String> {
        let m = &self.members[i];
        while !port_answers(m.amqp_port).await {
            if self.server_exited(i) {
                return Err(format!(
                    "member {i} ({}) exited while booting: {}",
                    m.name,
                    self.diagnostics(i)
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "member {i} ({}): AMQP port {} not answering: {}",
                    m.name,
                    m.amqp_port,
                    self.diagnostics(i)
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }

    /// kill -9 of whatever member i's last start left running (its pid file's beam, its wrapper).
    pub(super) async fn abort_member(&mut self, i: usize) {
        if let Ok(pid) = self.read_pid(i) {
            let _ = signal("-KILL", pid).await;
        }
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
        self.members[i].pid = None;
        let _ = std::fs::remove_file(self.members[i].dir.join("pid"));
    }

    /// Whether member i's server wrapper has exited (or was never started).
    pub(super) fn server_exited(&self, i: usize) -> bool {
        // `try_wait` needs `&mut`; the exit shows in /proc as well (gone or zombie).
        match self.members[i].child.as_ref().and_then(|c| c.id()) {
            Some(pid) => !matches!(proc_state(pid), Some(s) if s != 'Z'),
            None => true,
        }
    }

    /// Waits for member i's server wrapper (and with it its beam) to exit.
    pub(super) async fn reap(&mut self, i: usize, within: Duration) -> Result<(), String> {
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

    pub(super) async fn wait_refuses(&self, i: usize, within: Duration) -> Result<(), String> {
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

    pub(super) fn read_pid(&self, i: usize) -> Result<u32, String> {
        let path = self.members[i].dir.join("pid");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        text.trim()
            .parse()
            .map_err(|e| format!("{}: bad pid {text:?}: {e}", path.display()))
    }

    /// The tails of member i's server output and log, for error messages.
    pub(super) fn diagnostics(&self, i: usize) -> String {
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

async fn port_answers(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    matches!(
        tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

pub(super) async fn signal(sig: &str, pid: u32) -> Result<(), String> {
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
pub(super) fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}
