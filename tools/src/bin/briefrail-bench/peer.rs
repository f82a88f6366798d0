//! The best peer, measured in the same run: `graphile_worker` (its Rust port, pinned in
//! `tools/peer/graphile-worker-rs`), tuned as its own benchmarks run it (poll every 10 ms, a
//! local queue of 100), with one job queue per matter so that, like briefrail, a matter builds
//! once at a time. Its figure is the harness's `jobs_per_s`: N jobs already enqueued, from just
//! before the worker starts to the N-th one-frame build.
//!
//! The harness is its own cargo package, outside the workspace, so SQLx never enters the
//! product's build: it is built here on first use, into `target/peer`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use briefrail::db::admin;

use super::R;

/// The peer's settings the comparison is held to (its README: "The comparison briefrail is
/// held to").
const TUNED: [&str; 4] = ["--poll-interval", "10", "--local-queue-size", "100"];

/// The harness's package, next to this benchmark's own.
fn package() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peer/graphile-worker-rs")
}

/// The harness's binary: `BRIEFRAIL_BENCH_PEER_BIN`, or built (once; cargo skips an up-to-date
/// build) from the package with its own lock file.
pub fn binary() -> R<PathBuf> {
    if let Ok(bin) = std::env::var("BRIEFRAIL_BENCH_PEER_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let pkg = package();
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/peer");
    eprintln!(
        "building the peer harness ({}; the first build takes minutes)",
        pkg.display()
    );
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--manifest-path",
        ])
        .arg(pkg.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run cargo to build the peer harness: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the peer harness in {} failed ({status}); set BRIEFRAIL_BENCH_PEER_BIN \
             to a built binary to skip the build",
            pkg.display()
        )
        .into());
    }
    Ok(target.join("release/peer-graphile-worker-rs"))
}

/// What one peer run measured.
#[derive(Debug, Clone, Copy)]
pub struct PeerRun {
    /// Jobs per second, worker start to the N-th frame.
    pub per_s: f64,
    /// The same, without the worker's start-up.
    pub per_s_excl_startup: f64,
}

/// Runs the peer's throughput scenario (`queue_per_matter`) at `n` matters and `concurrency`
/// workers in its own database on `server`, which it drops after.
pub async fn throughput(bin: &Path, server: &str, n: usize, concurrency: usize) -> R<PeerRun> {
    let name = format!("{}_peer", admin::split_url(server)?.0);
    let url = admin::with_database(server, &name)?;
    admin::drop_database(server, &name).await?;
    let out = tokio::process::Command::new(bin)
        .args(["--db", &url, "--scenarios", "throughput"])
        .args(["--throughput-variants", "queue_per_matter"])
        .args(["--n", &n.to_string()])
        .args(["--concurrency", &concurrency.to_string()])
        .args(TUNED)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run the peer harness {}: {e}", bin.display()))?;
    admin::drop_database(server, &name).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("the peer harness failed ({}):\n{stderr}", out.status).into());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["variant"] == "queue_per_matter")
        .ok_or_else(|| format!("the peer harness printed no queue_per_matter line:\n{stdout}"))?;
    if line["ok"] != true {
        return Err(format!("the peer's run was not ok: {line}").into());
    }
    let field = |k: &str| {
        line[k]
            .as_f64()
            .ok_or_else(|| format!("the peer's line has no number {k}: {line}"))
    };
    Ok(PeerRun {
        per_s: field("jobs_per_s")?,
        per_s_excl_startup: field("jobs_per_s_excl_startup")?,
    })
}
