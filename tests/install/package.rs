//! The Debian package, installed into this machine as an operator installs it.
//!
//! `cargo deb` packages a `briefrail` binary built from this package alone (no test hooks),
//! `dpkg -i` installs it, and then: the binary runs, the system user exists, the unit is
//! `deploy/briefrail.service` unchanged, disabled, and passes `systemd-analyze verify`, the
//! configuration is conffiles in /etc/briefrail with the recipe's modes, the guide's migrate
//! line migrates a fresh database as the unit's user, and the unit's `ExecStart` serves
//! `/healthz` as systemd would run it. `dpkg --purge` then removes the package, and nothing of
//! it is left but the system user (kept, as Debian's packages keep theirs).
//!
//! The binary is built in the dev profile, into a target directory of its own under this run's
//! build directory (shared, so dependencies whose features match are reused): a release build
//! would cost CI minutes and proves nothing more about the package. `cargo deb --no-build`
//! then packages it.
//!
//! Global state: dpkg's database, /usr/bin/briefrail, /etc/briefrail, /var/lib/briefrail,
//! /usr/lib/systemd/system/briefrail.service, /usr/share/doc/briefrail and the system user
//! briefrail. The test holds the machine-wide lock tests/install/deploy.rs takes for its whole run,
//! refuses to start when a `briefrail` package or any of these paths is already there (it would
//! replace an operator's install), and when it ends, also on failure, purges the package and
//! removes the user if it created it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::system::{
    MANIFEST, build_dir, cargo, find_tool, migrate_and_serve, read, require_root, system_lock,
    tool, unit_value,
};
use crate::common::{BrokerScope, scratch_dir};
use briefrail::testing::drop_database_now;

/// Where the package puts its files; none may exist before it is installed or after it is
/// purged.
const PACKAGED: [&str; 5] = [
    "/usr/bin/briefrail",
    "/etc/briefrail",
    "/var/lib/briefrail",
    "/usr/lib/systemd/system/briefrail.service",
    "/usr/share/doc/briefrail",
];

/// Runs `program args`, failing with its output unless it exits 0.
fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn installed() -> bool {
    Command::new(tool("dpkg-query"))
        .args(["-W", "-f=${Status}", "briefrail"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
}

fn user_exists() -> bool {
    Command::new(tool("id"))
        .args(["-u", "briefrail"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Puts the machine back as the test found it: the package purged, the user removed if the
/// test created it, the test's database dropped.
struct Restore {
    user_was_there: bool,
    database: String,
    scratch: PathBuf,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if installed() {
            let _ = Command::new(tool("dpkg"))
                .args(["--purge", "briefrail"])
                .output();
        }
        if !self.user_was_there && user_exists() {
            let _ = Command::new(tool("userdel")).arg("briefrail").output();
            let _ = Command::new(tool("groupdel")).arg("briefrail").output();
        }
        drop_database_now(&self.database);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// The .deb of this checkout: the binary built without the test hooks, packaged by cargo deb.
fn build_package(out_dir: &Path) -> PathBuf {
    let deb = cargo().args(["deb", "--version"]).output();
    assert!(
        deb.as_ref().is_ok_and(|o| o.status.success()),
        "cargo-deb is missing: tests/install/package.rs builds the Debian package with it; install it \
         with `cargo install --locked cargo-deb` ({deb:?})"
    );
    let (build_dir, _) = build_dir();
    let target = build_dir.join("debian-package");
    // `-p briefrail --bin briefrail`: the `tools` member is not selected, so its `testing`
    // feature is not unified in. The dev profile, with this run's intermediate artifacts.
    run(cargo()
        .current_dir(MANIFEST)
        .args(["build", "--locked", "-p", "briefrail", "--bin", "briefrail"])
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_BUILD_BUILD_DIR", &build_dir));
    // cargo deb packages `<target dir>/release/briefrail` (it refuses the dev profile): this
    // target directory is the test's own, so the dev binary goes there.
    std::fs::create_dir_all(target.join("release")).unwrap();
    std::fs::copy(
        target.join("debug/briefrail"),
        target.join("release/briefrail"),
    )
    .expect("copy the binary where cargo deb takes it");
    run(cargo()
        .current_dir(MANIFEST)
        .args(["deb", "-p", "briefrail", "--no-build", "--fast"])
        .arg("--output")
        .arg(out_dir)
        .env("CARGO_TARGET_DIR", &target));
    let debs: Vec<PathBuf> = std::fs::read_dir(out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "cargo deb wrote {debs:?}");
    debs[0].clone()
}

/// Mode, owner and group of `path` as dpkg left them.
fn check(path: &str, mode: u32, user: &str, group: &str) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let id = |flag: &str, name: &str| -> u32 {
        let out = run(Command::new(tool("getent")).args([flag, name]));
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        line.split(':').nth(2).unwrap().parse().unwrap()
    };
    assert_eq!(
        m.mode() & 0o7777,
        mode,
        "{path}: mode {:o}",
        m.mode() & 0o7777
    );
    assert_eq!(
        (m.uid(), m.gid()),
        (id("passwd", user), id("group", group)),
        "{path}: owner, not {user}:{group}"
    );
}

/// Neither a `briefrail` package nor any of its paths is on this machine: the test would
/// replace and purge an operator's install.
fn assert_no_briefrail_package_or_file_is_here() {
    assert!(
        !installed(),
        "a briefrail package is installed on this machine: tests/install/package.rs would replace and \
         purge it (remove it first, or run the test elsewhere)"
    );
    for p in PACKAGED {
        assert!(
            !Path::new(p).exists(),
            "{p} exists: tests/install/package.rs would overwrite it (an install by hand?)"
        );
    }
}

/// The binary, without the test hooks' build; the system user, with no login shell; the
/// configuration: conffiles, the modes of the by-hand recipe, the repository's contents.
fn assert_the_installed_binary_user_and_configuration() {
    // The binary, without the test hooks' build.
    let out = run(Command::new("/usr/bin/briefrail").arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("briefrail {}", env!("CARGO_PKG_VERSION"))
    );
    // The system user: no login shell.
    let passwd = run(Command::new(tool("getent")).args(["passwd", "briefrail"]));
    let passwd = String::from_utf8_lossy(&passwd.stdout).into_owned();
    assert!(
        passwd.trim_end().ends_with(":/usr/sbin/nologin"),
        "{passwd}"
    );
    // The configuration: conffiles, the modes of the by-hand recipe.
    check("/etc/briefrail", 0o750, "root", "briefrail");
    check("/etc/briefrail/briefrail.toml", 0o640, "root", "briefrail");
    check("/etc/briefrail/env", 0o640, "root", "briefrail");
    check("/var/lib/briefrail", 0o750, "briefrail", "briefrail");
    check("/usr/bin/briefrail", 0o755, "root", "root");
    let conffiles =
        run(Command::new(tool("dpkg-query")).args(["-W", "-f=${Conffiles}", "briefrail"]));
    let conffiles = String::from_utf8_lossy(&conffiles.stdout).into_owned();
    for f in ["/etc/briefrail/briefrail.toml", "/etc/briefrail/env"] {
        assert!(conffiles.contains(f), "{f} is not a conffile:\n{conffiles}");
    }
    assert_eq!(
        std::fs::read_to_string("/etc/briefrail/briefrail.toml").unwrap(),
        read("config/default.toml")
    );
    assert_eq!(
        std::fs::read_to_string("/etc/briefrail/env").unwrap(),
        read("deploy/env")
    );
}

/// The unit: the repository's, installed disabled, running the installed binary, passing
/// `systemd-analyze verify` where it is installed. Its text.
fn the_installed_unit() -> String {
    let unit_path = "/usr/lib/systemd/system/briefrail.service";
    let unit = std::fs::read_to_string(unit_path).unwrap();
    assert_eq!(unit, read("deploy/briefrail.service"), "{unit_path}");
    assert!(
        !Path::new("/etc/systemd/system/multi-user.target.wants/briefrail.service").exists(),
        "the unit is enabled on a first install, before its database is set"
    );
    let exec = unit_value(&unit, "ExecStart");
    assert!(exec.starts_with("/usr/bin/briefrail "), "{exec}");
    match find_tool("systemd-analyze") {
        Some(analyze) => {
            let out = run(Command::new(analyze).arg("verify").arg(unit_path));
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(said.trim().is_empty(), "systemd-analyze verify: {said}");
        }
        None => eprintln!(
            "systemd-analyze is missing: the unit is checked against the repository's only"
        ),
    }
    unit
}

#[test]
fn the_debian_package_installs_a_disabled_unit_that_serves_then_purges_cleanly() {
    require_root(
        "tests/install/package.rs",
        "installs the Debian package into this machine with dpkg",
    );
    for t in [
        "dpkg",
        "dpkg-query",
        "setpriv",
        "runuser",
        "userdel",
        "getent",
    ] {
        tool(t);
    }
    let _lock = system_lock();
    assert_no_briefrail_package_or_file_is_here();
    let scratch = scratch_dir("package");
    let database = format!(
        "br_package_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let restore = Restore {
        user_was_there: user_exists(),
        database: database.clone(),
        scratch: scratch.clone(),
    };

    let deb = build_package(&scratch);
    let out = run(Command::new(tool("dpkg")).arg("-i").arg(&deb));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("systemctl enable --now briefrail"),
        "a first install says how to start:\n{said}"
    );
    // Again, as an upgrade runs the maintainer scripts: idempotent, and silent about starting.
    let out = run(Command::new(tool("dpkg")).arg("-i").arg(&deb));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("systemctl enable"),
        "a reinstall repeats the first install's advice"
    );

    // The binary, without the test hooks' build; the system user; the configuration.
    assert_the_installed_binary_user_and_configuration();
    // The unit: the repository's, installed disabled.
    let unit = the_installed_unit();

    // The operator's edit of the secrets, the guide's migrate line, the unit serving.
    let broker = BrokerScope::new();
    migrate_and_serve(
        &unit,
        &|p: &str| PathBuf::from(p),
        &|script| run(Command::new(tool("sh")).arg("-c").arg(script)),
        &database,
        &broker.prefix,
        &scratch.join("journal.stderr"),
    );
    check("/etc/briefrail/env", 0o640, "root", "briefrail");

    // Purged: nothing of the package is left (the user stays, by design).
    run(Command::new(tool("dpkg")).args(["--purge", "briefrail"]));
    assert!(!installed(), "dpkg still lists briefrail after --purge");
    for p in PACKAGED {
        assert!(!Path::new(p).exists(), "{p} is left after dpkg --purge");
    }
    assert!(user_exists(), "the purge removed the system user");
    drop(restore);
}
