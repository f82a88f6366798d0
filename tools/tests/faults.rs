//! The short configuration of the multi-process fault suite (`briefrail-faults`): three real
//! nodes, a seeded schedule of bursts and faults, every invariant checked over the tables.
//! It stops RabbitMQ's app, so it is the only test in this binary: cargo runs test binaries one
//! at a time, never beside the parallel suite. The harness restarts the broker on every exit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The `briefrail` binary the suite runs as its nodes: built into the same target directory
/// as the suite (`cargo test` at the workspace root builds it for the main crate's tests).
/// Missing, or older than any source file of the main crate, fails with what to run: a fault
/// run against stale code proves nothing.
fn node_binary() -> PathBuf {
    let suite = Path::new(env!("CARGO_BIN_EXE_briefrail-faults"));
    let binary = suite.with_file_name("briefrail");
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; build it first (`cargo build --bin briefrail`, or run `cargo test` at the workspace root)",
                binary.display()
            )
        });
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let newest = newest_source(&[
        root.join("src"),
        root.join("migrations"),
        root.join("Cargo.toml"),
    ]);
    assert!(
        built >= newest,
        "{} is older than the main crate's sources: rebuild it (`cargo build --bin briefrail`)",
        binary.display()
    );
    binary
}

fn newest_source(paths: &[PathBuf]) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut stack: Vec<PathBuf> = paths.to_vec();
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        } else if let Ok(m) = meta.modified() {
            newest = newest.max(m);
        }
    }
    newest
}

#[test]
fn the_short_fault_schedule_keeps_every_invariant() {
    let binary = node_binary();
    let out = Command::new(env!("CARGO_BIN_EXE_briefrail-faults"))
        .args(["--seed", "7", "--binary"])
        .arg(&binary)
        .output()
        .expect("run briefrail-faults");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Whatever happened, the broker must answer again for the tests that follow.
    let _ = Command::new("rabbitmqctl").arg("start_app").output();
    assert!(
        out.status.success(),
        "fault suite failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("all invariants held"), "{stdout}");
    for fault in [
        "SIGSTOP",
        "kill -9",
        "stop_app",
        "pg_terminate_backend",
        "published again",
        "purged",
        "memory alarm",
    ] {
        assert!(
            stdout.contains(fault),
            "fault {fault:?} was not injected:\n{stdout}"
        );
    }
    assert!(!stdout.contains("DID NOT LAND"), "{stdout}");
    assert!(
        stdout.contains("✓ every scheduled fault took effect"),
        "{stdout}"
    );
    assert_eq!(stdout.matches('✓').count(), 8, "{stdout}");
}
