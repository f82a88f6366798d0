//! The short configuration of the multi-process fault suite (`briefrail-faults`): three real
//! nodes, a seeded schedule of bursts and faults, every invariant checked over the tables.
//! It runs its own Postgres cluster and its own 3-node RabbitMQ cluster (the machine's are never
//! touched), and it is the only test in this binary: cargo runs test binaries one at a time, so
//! its load never competes with the parallel suite.

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

/// Every fault kind the suite must inject, by the name its summary prints (catalogue rows in
/// `../shared/design/FAULTS.md`; docs/testing.md maps each row to what covers it).
const KINDS: [&str; 26] = [
    "sigstop-past-lease",
    "stall-before-commit",
    "kill-mid-build",
    "kill-after-commit",
    "db-partition",
    "commit-answer-lost",
    "backend-kill",
    "db-restart",
    "wide-load",
    "clock-skew",
    "relay-crash",
    "broker-down",
    "broker-connections-closed",
    "memory-alarm",
    "unroutable",
    "duplicate-delivery",
    "queue-purge",
    "malformed-message",
    "forged-nudge",
    "logical-move",
    "refused-frame",
    "broker-leader-kill",
    "broker-leader-pause",
    "broker-rolling-restart",
    "pool-exhaustion",
    "mixed-leases",
];

#[test]
fn the_short_fault_schedule_keeps_every_invariant() {
    let binary = node_binary();
    let out = Command::new(env!("CARGO_BIN_EXE_briefrail-faults"))
        .args(["--seed", "7", "--binary"])
        .arg(&binary)
        .output()
        .expect("run briefrail-faults");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fault suite failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("all invariants held"), "{stdout}");
    assert!(!stdout.contains("DID NOT LAND"), "{stdout}");
    assert!(!stdout.contains('✗'), "{stdout}");
    for kind in KINDS {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("fault {kind}: ")))
            .unwrap_or_else(|| panic!("no summary line for fault {kind}:\n{stdout}"));
        let n: usize = line
            .trim_start_matches(&format!("fault {kind}: "))
            .trim_end_matches(" injected")
            .parse()
            .unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert!(n >= 1, "fault {kind} was never injected:\n{stdout}");
    }
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("fault ")).count(),
        KINDS.len(),
        "the summary lists a fault kind this test does not know:\n{stdout}"
    );
    assert!(stdout.contains("✓ every fault took effect"), "{stdout}");
    assert!(stdout.matches('✓').count() >= 15, "{stdout}");
}
