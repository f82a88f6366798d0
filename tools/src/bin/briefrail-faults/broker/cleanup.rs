//! No member outlives the suite: dropping the cluster SIGCONTs and kill -9s every member's beam
//! and removes the cluster's directory; a watchdog shell does the same if this process dies
//! without dropping it (kill -9, abort), when no Drop runs.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::BrokerCluster;
use super::member::proc_state;

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
        for m in &self.members {
            let _ = std::fs::remove_file(m.dir.join("pid"));
        }
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.start_kill();
            let _ = w.try_wait();
        }
        if std::env::var_os("BRIEFRAIL_FAULTS_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

impl BrokerCluster {
    /// A shell that outlives nothing: once this process is gone (without Drop having run), it
    /// kill -9s every member whose pid file names a live beam started with that pid file, and
    /// removes the cluster's directory (unless BRIEFRAIL_FAULTS_KEEP was set).
    pub(super) fn spawn_watchdog(&self) -> Result<Child, String> {
        let script = r#"
suite=$1; root=$2; keep=$3
while kill -0 "$suite" 2>/dev/null; do sleep 2; done
for f in "$root"/n*/pid; do
  [ -f "$f" ] || continue
  p=$(cat "$f")
  if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "RABBITMQ_PID_FILE=$f"; then
    kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
  fi
done
[ -n "$keep" ] || { sleep 1; rm -rf "$root"; }
"#;
        let keep = if std::env::var_os("BRIEFRAIL_FAULTS_KEEP").is_some() {
            "1"
        } else {
            ""
        };
        let mut cmd = Command::new("/bin/sh");
        cmd.env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into()),
            )
            .arg("-c")
            .arg(script)
            .arg("briefrail-broker-watchdog")
            .arg(std::process::id().to_string())
            .arg(&self.root)
            .arg(keep)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn()
            .map_err(|e| format!("spawning the broker watchdog (/bin/sh): {e}"))
    }
}
