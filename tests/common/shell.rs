//! The real binary from a test, as an operator runs it: one command against a database, its
//! output checked with its exit code.

use std::process::{Command, Output};

/// `briefrail ARGS` with `database.url` set, logs at warn.
pub fn briefrail(db_url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .args(args)
        .env("BRIEFRAIL__DATABASE__URL", db_url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run briefrail")
}

/// Its stdout; fails the test, showing both streams, unless it exited 0.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Its stderr; fails the test unless it exited with `code`.
pub fn fails(out: &Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}
