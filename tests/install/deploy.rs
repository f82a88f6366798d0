//! The deploy recipes as written.
//!
//! * The systemd install block of docs/operations.md, extracted and run as root (twice: it is
//!   idempotent) with every path it installs to under a scratch root of this run, the unit
//!   checked (`systemd-analyze verify`, and against what the block installed), the guide's migrate
//!   line run, then the unit's `ExecStart` run as the unit would: as its `User`/`Group`, with
//!   only its `EnvironmentFile`'s variables, in its `WorkingDirectory`, stderr not a terminal
//!   (as the journal is not). It must serve `/healthz` and `/readyz` and write no colour codes.
//! * The container health check, taken from the Dockerfile and docker-compose.yml, run as the
//!   image would run it (exec form, the binary itself) against a live node and a dead one.
//!
//! Global state: the system user `briefrail` (created if missing, left in place), used under
//! the machine-wide lock tests/install/package.rs takes too. Everything else is under the scratch root,
//! removed at the end.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::system::{
    MANIFEST, environment_file, find_tool, guide_block, migrate_and_serve, read, require_root,
    system_lock, tool, unit_value, unit_values,
};
use crate::common::{BrokerScope, free_port, scratch_dir, spawn_node};
use briefrail::testing::{TestDb, drop_database_now};

/// The paths the install block writes to; each is moved under the scratch root.
const INSTALLED: [&str; 4] = [
    "/usr/bin/briefrail",
    "/etc/briefrail",
    "/var/lib/briefrail",
    "/etc/systemd/system",
];

/// `text` with every installed path under `root`; fails if any path outside it remains, so
/// an edit of the guide can never make this test write to the machine's /etc.
fn under_root(text: &str, root: &Path) -> String {
    let root = root.display().to_string();
    for p in INSTALLED {
        assert!(!root.contains(p), "scratch root {root} contains {p}");
    }
    let mut out = text.to_owned();
    for p in INSTALLED {
        out = out.replace(p, &format!("{root}{p}"));
    }
    let marked = out.replace(&root, "\u{1}");
    for system in [
        "/etc/",
        "/var/",
        "/usr/local/",
        "/usr/bin/",
        "/opt/",
        "/srv/",
    ] {
        for (i, _) in marked.match_indices(system) {
            assert!(
                marked[..i].ends_with('\u{1}'),
                "the recipe writes to {system}... outside the paths this test moves under its \
                 scratch root ({INSTALLED:?}): add the path to INSTALLED.\n{text}"
            );
        }
    }
    out
}

/// Runs `script` with `sh` from the checkout (the recipes' relative paths are the repo's).
fn sh(script: &str) -> std::process::Output {
    let out = Command::new(tool("sh"))
        .arg("-c")
        .arg(script)
        .current_dir(MANIFEST)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "the recipe failed ({:?}):\n{script}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn id(flag: &str, user: &str) -> u32 {
    let out = Command::new(tool("id"))
        .args([flag, user])
        .output()
        .unwrap();
    assert!(out.status.success(), "no user {user}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// What the test leaves behind, removed when it ends (also when it panics).
struct Cleanup {
    root: PathBuf,
    database: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        drop_database_now(&self.database);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The installed unit runs as briefrail:briefrail with the required secrets file, in a
/// working directory and with writable paths the block set up, and its `ExecStart` runs the
/// installed binary with the installed configuration.
fn assert_the_unit_points_at_what_the_block_set_up(
    unit: &str,
    at: &dyn Fn(&str) -> PathBuf,
    config: &Path,
) {
    let (user, group) = (unit_value(unit, "User"), unit_value(unit, "Group"));
    assert_eq!((user.as_str(), group.as_str()), ("briefrail", "briefrail"));
    let env_file = unit_value(unit, "EnvironmentFile");
    assert!(
        !env_file.starts_with('-'),
        "the secrets are required: EnvironmentFile={env_file}"
    );
    assert_eq!(env_file, "/etc/briefrail/env");
    let workdir = unit_value(unit, "WorkingDirectory");
    assert!(at(&workdir).is_dir(), "WorkingDirectory={workdir}");
    for p in unit_values(unit, "ReadWritePaths") {
        assert!(
            at(&p).is_dir(),
            "ReadWritePaths={p} is not set up by the block"
        );
    }
    let exec: Vec<String> = unit_value(unit, "ExecStart")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(exec[0], "/usr/bin/briefrail", "{exec:?}");
    let config_arg = exec
        .iter()
        .position(|a| a == "--config")
        .map(|i| exec[i + 1].clone())
        .expect("ExecStart passes --config");
    assert_eq!(at(&config_arg), config, "ExecStart's --config");
    assert_eq!(exec.last().map(String::as_str), Some("run"));
}

/// `systemd-analyze verify` of the installed unit under `root` (systemd resolves the unit's
/// dependencies, sysinit.target..., under the root too); without systemd-analyze, says so.
fn verify_with_systemd_analyze(root: &Path, at: &dyn Fn(&str) -> PathBuf) {
    match find_tool("systemd-analyze") {
        Some(analyze) => {
            // systemd resolves the unit's dependencies (sysinit.target...) under the root too.
            let units = Path::new("/usr/lib/systemd/system");
            assert!(
                units.is_dir(),
                "systemd-analyze is here but {} is not: cannot verify the unit",
                units.display()
            );
            std::fs::create_dir_all(at("/usr/lib/systemd")).unwrap();
            sh(&format!(
                "cp -r {} {}",
                units.display(),
                at("/usr/lib/systemd").display()
            ));
            let out = Command::new(analyze)
                .arg("verify")
                .arg(format!("--root={}", root.display()))
                .arg(at("/etc/systemd/system/briefrail.service"))
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.status.success() && said.trim().is_empty(),
                "systemd-analyze verify: {said}"
            );
        }
        None => eprintln!(
            "systemd-analyze is missing: the unit is checked against what the block installed only"
        ),
    }
}

#[test]
fn the_documented_systemd_recipe_installs_a_unit_that_starts_serves_and_logs_plain_text() {
    require_root(
        "tests/install/deploy.rs",
        "runs the systemd recipe of docs/operations.md, which creates the system user briefrail",
    );
    for t in ["useradd", "install", "runuser", "setpriv", "id", "kill"] {
        tool(t);
    }
    let _lock = system_lock();

    let root = scratch_dir("deploy-root");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let database = format!(
        "br_deploy_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let cleanup = Cleanup {
        root: root.clone(),
        database: database.clone(),
    };

    // The install block, as written but for the binary's path and the scratch root.
    let block = guide_block("install");
    let release = "target/release/briefrail";
    assert!(block.contains(release), "the block installs {release}");
    let script = under_root(
        &block.replace(release, env!("CARGO_BIN_EXE_briefrail")),
        &root,
    );
    sh(&script);
    sh(&script); // idempotent: the user exists, the config and the secrets are kept

    // What it set up.
    let (user_uid, user_gid) = (id("-u", "briefrail"), id("-g", "briefrail"));
    let at = |p: &str| PathBuf::from(format!("{}{p}", root.display()));
    let check = |p: &str, mode: u32, uid: u32, gid: u32| {
        let m = std::fs::metadata(at(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(m.mode() & 0o7777, mode, "{p}: mode {:o}", m.mode() & 0o7777);
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{p}: owner");
    };
    check("/etc/briefrail", 0o750, 0, user_gid);
    check("/etc/briefrail/env", 0o640, 0, user_gid);
    check("/etc/briefrail/briefrail.toml", 0o640, 0, user_gid);
    check("/var/lib/briefrail", 0o750, user_uid, user_gid);
    check("/usr/bin/briefrail", 0o755, 0, 0);
    let shipped = read("deploy/briefrail.service");
    let unit = std::fs::read_to_string(at("/etc/systemd/system/briefrail.service")).unwrap();
    assert_eq!(unit, shipped, "the block installs deploy/briefrail.service");

    // The env file the block wrote names only known settings (a typo is refused).
    let config = at("/etc/briefrail/briefrail.toml");
    let written = environment_file(&std::fs::read_to_string(at("/etc/briefrail/env")).unwrap());
    assert!(
        written.iter().any(|(k, _)| k == "BRIEFRAIL__DATABASE__URL"),
        "{written:?}"
    );
    briefrail::config::Settings::load_with_env(Some(&config), written.clone())
        .unwrap_or_else(|e| panic!("the recipe's config and env file: {e}"));

    // The unit: what systemd makes of it, and what it points at.
    assert_the_unit_points_at_what_the_block_set_up(&unit, &at, &config);
    verify_with_systemd_analyze(&root, &at);

    // The operator's edit of the secrets, the guide's migrate line, the unit serving.
    let broker = BrokerScope::new();
    migrate_and_serve(
        &unit,
        &at,
        &|script| sh(&under_root(script, &root)),
        &database,
        &broker.prefix,
        &root.join("journal.stderr"),
    );
    check("/etc/briefrail/env", 0o640, 0, user_gid);
    drop(cleanup);
}

/// The JSON array after `CMD` of the Dockerfile's HEALTHCHECK (continuation lines joined).
fn dockerfile_healthcheck() -> Vec<String> {
    let text = read("Dockerfile").replace("\\\n", " ");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("HEALTHCHECK"))
        .expect("the Dockerfile has a HEALTHCHECK");
    let json = line
        .split_once(" CMD ")
        .unwrap_or_else(|| panic!("HEALTHCHECK without CMD: {line}"))
        .1
        .trim();
    serde_json::from_str(json).unwrap_or_else(|e| {
        panic!("HEALTHCHECK CMD must be the exec form (a JSON array, no shell): {json}: {e}")
    })
}

/// The nodes' `healthcheck: test:` array of docker-compose.yml.
fn compose_healthcheck() -> Vec<String> {
    let text = read("docker-compose.yml");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("test:") && l.contains("briefrail"))
        .expect("docker-compose.yml's nodes have a healthcheck");
    let json = line.trim_start().trim_start_matches("test:").trim();
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// Runs a health check argv with the image's binary replaced by the built one.
fn run_check(argv: &[String], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let image_binary = "/usr/local/bin/briefrail";
    assert_eq!(
        argv[0], image_binary,
        "the health check runs the binary itself"
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_briefrail"));
    cmd.args(&argv[1..]).env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_container_health_check_is_the_binary_itself_and_names_what_is_wrong() {
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile
            .contains("COPY --from=build /src/target/release/briefrail /usr/local/bin/briefrail"),
        "the image has the binary where its health check runs it"
    );
    let image = dockerfile_healthcheck();
    let compose = compose_healthcheck();
    assert_eq!(
        compose.first().map(String::as_str),
        Some("CMD"),
        "compose's check is exec form: the image's /bin/sh (dash) has no /dev/tcp"
    );
    assert_eq!(
        compose[1..],
        image[..],
        "compose runs the image's own check"
    );

    let db = TestDb::new(2).await.unwrap();
    let dir = scratch_dir("healthcheck");
    let port = free_port();
    let node_bind = format!("127.0.0.1:{port}");
    let mut node = spawn_node(&db, &dir, "hc", &[("BRIEFRAIL__HTTP__BIND", &node_bind)]);
    // As in compose: the node's environment, bound to every address, with its token.
    let any_bind = format!("0.0.0.0:{port}");
    let env = [
        ("BRIEFRAIL__HTTP__BIND", any_bind.as_str()),
        ("BRIEFRAIL__HTTP__TOKEN", "change-me"),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    let (stdout, stderr) = loop {
        let (code, stdout, stderr) = run_check(&image, &env);
        if code == Some(0) {
            break (stdout, stderr);
        }
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            Instant::now() < deadline,
            "not healthy within 60 s: {stderr}\n{}",
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        stdout.starts_with(&format!(
            "healthy: http://127.0.0.1:{port}/readyz answered HTTP/1."
        )) && stdout.contains(" 200 OK: ")
            && stdout.contains("\"ready\":true"),
        "{stdout}{stderr}"
    );
    let mut live = image.clone();
    live.push("--live".into());
    let (code, stdout, _) = run_check(&live, &env);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("/healthz answered"), "{stdout}");

    node.signal("-TERM");
    assert!(node.wait_exit(Duration::from_secs(30)).is_some());
    let (code, _, stderr) = run_check(&image, &env);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "nothing answers at http://127.0.0.1:{port}/readyz"
        )) && stderr.contains(&format!("http.bind {any_bind}")),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    // A health check exits 0 or 1 only (Docker reserves 2), even for a bad config.
    let (code, _, stderr) = run_check(&image, &[("BRIEFRAIL__HTTP__BIND", "nowhere")]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("http.bind"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The binary `cargo build --release` (the README's, the Dockerfile's) builds carries no test
/// hooks: the workspace's default members resolve `briefrail` without its `testing` feature.
/// `tools` (the benchmark and the fault suite) turns it on, so it must not be a default member:
/// cargo unifies features across the packages a command selects.
#[test]
fn a_release_build_resolves_the_crate_without_its_test_hooks() {
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "--edges",
            "normal,features",
            "--invert",
            "briefrail",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        tree.contains("briefrail feature \"default\""),
        "cargo tree listed briefrail's features: {tree}"
    );
    assert!(
        !tree.contains("briefrail feature \"testing\""),
        "a default build turns on briefrail's test hooks:\n{tree}"
    );
}
