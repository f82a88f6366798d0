//! The short configuration of the multi-process fault suite (`briefrail-faults`): three real
//! nodes, a seeded schedule of bursts and faults, every invariant checked over the tables.
//! It stops RabbitMQ's app, so it is the only test in this binary: cargo runs test binaries one
//! at a time, never beside the parallel suite. The harness restarts the broker on every exit.

use std::process::Command;

#[test]
fn the_short_fault_schedule_keeps_every_invariant() {
    let out = Command::new(env!("CARGO_BIN_EXE_briefrail-faults"))
        .args(["--seed", "7", "--binary", env!("CARGO_BIN_EXE_briefrail")])
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
