//! The embedding examples run as docs/embedding.md says they do: each ends with its Brief landed
//! and exits 0. `cargo test` builds the examples before it runs any test; a run that selects
//! only this binary (`--test surface`) needs `cargo build --examples` first, and fails naming it.

use std::path::PathBuf;
use std::process::Command;

/// The built example beside this test's binary (`target/<profile>/examples/<name>`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: `cargo test` builds the examples, a run of `--test surface` alone \
         needs `cargo build --examples` first",
        path.display()
    );
    path
}

/// Runs an example to its end (at most two minutes, under coreutils' `timeout`) and returns its
/// output.
fn run(name: &str) -> String {
    let out = Command::new("timeout")
        .args(["--kill-after=5", "120"])
        .arg(example(name))
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("starting example {name} under timeout: {e}"));
    assert_ne!(
        out.status.code(),
        Some(124),
        "example {name} did not finish within 120 s; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "example {name} failed ({}); stdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_tokio_application_hosts_a_node_and_records_facts_with_its_own_driver() {
    let out = run("tokio_host");
    assert!(
        out.contains("reads the document"),
        "the tokio host did not report its Brief: {out}"
    );
}

#[test]
fn an_actix_application_adds_its_own_write_to_the_fenced_commit() {
    let out = run("embedded");
    assert!(
        out.contains("with the application's index row"),
        "the embedded example did not report its index row: {out}"
    );
}
