//! The three `briefrail run` processes: each with its own settings (leases of 2 s and 8 s, a
//! starved pool, clocks under libfaketime), its own database proxy and its own log file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// What a node is started with; kept so a restart starts the same node.
#[derive(Clone)]
pub struct NodeSpec {
    pub id: String,
    pub env: Vec<(String, String)>,
    /// `FAKETIME` for libfaketime (`+2h`, `-2h`, `+0 x10`), or none.
    pub skew: Option<String>,
    /// The lease this node writes on its claims, in seconds.
    pub lease_seconds: f64,
}

pub struct NodeProc {
    pub spec: NodeSpec,
    pub child: Child,
}

impl NodeProc {
    pub fn id(&self) -> &str {
        &self.spec.id
    }
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a node; its output is appended to `dir/<id>.log`. libfaketime is preloaded into the
/// node itself (not through the `faketime` wrapper, whose child would outlive a kill).
pub fn spawn(bin: &Path, spec: &NodeSpec, dir: &Path) -> Result<NodeProc, String> {
    let log = dir.join(format!("{}.log", spec.id));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(bin);
    if let Some(ft) = &spec.skew {
        cmd.env("LD_PRELOAD", FAKETIME_LIB)
            .env("FAKETIME", ft)
            .env("FAKETIME_NO_CACHE", "1");
    }
    cmd.arg("run")
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env("BRIEFRAIL__NODE__ID", &spec.id)
        .env("BRIEFRAIL__LEASE__SECONDS", spec.lease_seconds.to_string())
        .env(
            "BRIEFRAIL__LEASE__HEARTBEAT_SECONDS",
            (spec.lease_seconds / 5.0).to_string(),
        )
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out);
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting {} ({}): {e}", spec.id, bin.display()))?;
    Ok(NodeProc {
        spec: spec.clone(),
        child,
    })
}

/// Whether libfaketime is mapped into process `pid` (the skew really applies to it).
pub fn runs_faketime(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.contains("libfaketime"))
        .unwrap_or(false)
}

/// The node binary: `--binary`, or `briefrail` beside this program.
pub fn binary(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("briefrail")))
            .unwrap_or_else(|| "briefrail".into())
    })
}
