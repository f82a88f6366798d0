//! Helpers of the tests that install briefrail into this machine as an operator would
//! (tests/install/deploy.rs: the documented recipe; tests/install/package.rs: the Debian package).

use super::free_port;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// A file of the checkout, as text.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(MANIFEST).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Where program `name` is, on PATH or in the system directories root's PATH has.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A program the test needs, or a failure naming it.
pub fn tool(name: &str) -> PathBuf {
    find_tool(name).unwrap_or_else(|| panic!("{name} is missing: this test needs it (install it)"))
}

/// Fails unless the test runs as root, saying why `test` needs it.
pub fn require_root(test: &str, why: &str) {
    let uid = String::from_utf8_lossy(&Command::new(tool("id")).arg("-u").output().unwrap().stdout)
        .trim()
        .to_owned();
    assert_eq!(
        uid,
        "0",
        "{test} {why}: run it as root (e.g. `sudo -E cargo test --test {}`)",
        test.trim_start_matches("tests/").trim_end_matches(".rs")
    );
}

/// The machine-wide lock of the tests that use this machine's system user `briefrail` or
/// install into its system paths: two such runs at once would create, use or remove them
/// under each other. Held until dropped.
pub struct SystemLock(std::fs::File);

pub fn system_lock() -> SystemLock {
    let path = std::env::temp_dir().join("briefrail-deploy-test.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // flock(2), as flock(1) takes it; std's File::lock is newer than the crate's rust-version.
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this File owns, held open for the lock's life.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        locked,
        0,
        "lock {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    SystemLock(file)
}

/// The ```sh block that follows `<!-- deploy-test: {marker}` in docs/operations.md.
pub fn guide_block(marker: &str) -> String {
    let guide = read("docs/operations.md");
    let tag = format!("<!-- deploy-test: {marker}");
    let after = guide
        .split_once(&tag)
        .unwrap_or_else(|| panic!("docs/operations.md has no `{tag}` marker"))
        .1;
    let body = after
        .split_once("```sh\n")
        .unwrap_or_else(|| panic!("no ```sh block after `{tag}` in docs/operations.md"))
        .1;
    body.split_once("\n```")
        .unwrap_or_else(|| panic!("the block after `{tag}` is not closed"))
        .0
        .to_owned()
}

/// The line of the guide's start block that migrates as the service user.
pub fn guide_migrate_line() -> String {
    let start = guide_block("start");
    assert!(
        start.contains("systemctl enable --now briefrail"),
        "the start block starts the unit the install block installed:\n{start}"
    );
    start
        .lines()
        .find(|l| l.starts_with("runuser") && l.contains(" migrate"))
        .expect("the start block migrates as the service user")
        .to_owned()
}

/// `[Service]`'s values of `key` in a unit file.
pub fn unit_values(unit: &str, key: &str) -> Vec<String> {
    let mut in_service = false;
    let mut out = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            in_service = line == "[Service]";
        } else if in_service && let Some(v) = line.strip_prefix(&format!("{key}=")) {
            out.push(v.trim().to_owned());
        }
    }
    out
}

pub fn unit_value(unit: &str, key: &str) -> String {
    let v = unit_values(unit, key);
    assert_eq!(v.len(), 1, "[Service] {key}= set {} times", v.len());
    v[0].clone()
}

/// The variables of a systemd `EnvironmentFile` (KEY=value, value optionally in single or
/// double quotes; `#` comments and blank lines ignored).
pub fn environment_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=value: {l}"));
            let v = v.trim();
            let v = ['\'', '"']
                .iter()
                .find_map(|q| v.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
                .unwrap_or(v);
            (k.trim().to_owned(), v.to_owned())
        })
        .collect()
}

/// `GET path` on `addr`; the status code, if anything answered.
pub fn http_status(addr: &str, path: &str) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// A process killed when dropped (also when the test panics).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a unit's `ExecStart` as systemd would: as its `User` and `Group`, with only its
/// `EnvironmentFile`'s variables (and a PATH), in its `WorkingDirectory`, stderr not a terminal
/// (the journal is not one). `at` maps a path the unit names to where it is on this machine.
/// Checks that it serves `/healthz` and `/readyz` on `addr` as the unit's user, stops with exit
/// 0 on SIGTERM (the unit's `KillSignal`), and writes no colour codes; returns its stderr.
pub fn serve_as_unit(unit: &str, at: &dyn Fn(&str) -> PathBuf, addr: &str, log: &Path) -> String {
    let (user, group) = (unit_value(unit, "User"), unit_value(unit, "Group"));
    let env_file = unit_value(unit, "EnvironmentFile");
    let workdir = unit_value(unit, "WorkingDirectory");
    let exec: Vec<String> = unit_value(unit, "ExecStart")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let vars = environment_file(&std::fs::read_to_string(at(&env_file)).unwrap());
    let mut cmd = Command::new(tool("setpriv"));
    cmd.args(["--reuid", &user, "--regid", &group, "--init-groups", "--"])
        .arg(at(&exec[0]))
        .args(exec[1..].iter().map(|a| {
            if a.starts_with('/') {
                at(a).display().to_string()
            } else {
                a.clone()
            }
        }))
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .envs(vars)
        .current_dir(at(&workdir))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    let mut child = Killed(cmd.spawn().expect("start ExecStart"));
    let pid = child.0.id();
    let journal = || std::fs::read_to_string(log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("ExecStart exited ({status}) before serving:\n{}", journal());
        }
        if http_status(addr, "/healthz") == Some(200) && http_status(addr, "/readyz") == Some(200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/healthz and /readyz did not answer 200 within 60 s:\n{}",
            journal()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // It runs as the unit's user.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let uid = Command::new(tool("id"))
        .args(["-u", &user])
        .output()
        .unwrap();
    assert_eq!(
        uid_line.split_whitespace().nth(1),
        Some(String::from_utf8_lossy(&uid.stdout).trim()),
        "{uid_line}"
    );
    let killed = Command::new(tool("kill"))
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit 30 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    let journal = journal();
    assert!(status.success(), "exit {status} after SIGTERM:\n{journal}");
    assert!(journal.contains("briefrail is running"), "{journal}");
    assert!(
        !journal.contains('\u{1b}'),
        "colour codes in what the journal would get:\n{journal:?}"
    );
    journal
}

/// `cargo` for a build from inside a test, without what cargo set for this test's run (it
/// would describe this crate to the build).
pub fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut cmd = Command::new(cargo);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&&*key)
        {
            cmd.env_remove(&*key);
        }
    }
    cmd
}

/// This test run's build directory (the target directory unless `build.build-dir` says
/// otherwise) and its profile directory's name: the test runs from
/// `<build dir>/<profile dir>/deps/<test>`.
pub fn build_dir() -> (PathBuf, String) {
    let exe = std::env::current_exe().expect("the test's executable");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("<build dir>/<profile>/deps/<test>");
    let profile = profile_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    (
        profile_dir.parent().expect("<build dir>").to_owned(),
        profile,
    )
}

/// What an operator does once a unit is installed, with a database and a port of the test's
/// own: writes the secrets file the unit names (database `database`, which the migrate creates,
/// the broker scope `prefix`, a free port), checks the configuration loads with them, runs the
/// guide's migrate line with `sh` (which maps the unit's paths to this machine), then runs the
/// unit's `ExecStart` and checks it serves (see [`serve_as_unit`]).
pub fn migrate_and_serve(
    unit: &str,
    at: &dyn Fn(&str) -> PathBuf,
    sh: &dyn Fn(&str) -> std::process::Output,
    database: &str,
    prefix: &str,
    log: &Path,
) {
    let port = free_port();
    let db_url =
        briefrail::db::admin::with_database(&briefrail::testing::server_url(), database).unwrap();
    let env_file = at(&unit_value(unit, "EnvironmentFile"));
    let env_text = format!(
        "# written by the test\nBRIEFRAIL__DATABASE__URL='{db_url}'\n\
         BRIEFRAIL__TRANSPORT__AMQP_URL='{}'\nBRIEFRAIL__TRANSPORT__PREFIX='{prefix}'\n\
         BRIEFRAIL__HTTP__BIND='127.0.0.1:{port}'\nBRIEFRAIL__NODE__ID=\"deploy-test\"\n",
        super::AMQP_URL,
    );
    std::fs::write(&env_file, env_text).unwrap();
    let exec = unit_value(unit, "ExecStart");
    let config = exec
        .split_whitespace()
        .skip_while(|a| *a != "--config")
        .nth(1)
        .expect("ExecStart passes --config");
    let vars = environment_file(&std::fs::read_to_string(&env_file).unwrap());
    briefrail::config::Settings::load_with_env(Some(&at(config)), vars)
        .unwrap_or_else(|e| panic!("the installed config with the test's secrets: {e}"));

    // The guide's migrate line, as written (as the service user, with the service's env).
    let out = sh(&guide_migrate_line());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("created") && said.contains("applied"),
        "{said}"
    );
    // ExecStart as systemd runs it, serving, then stopped as `systemctl stop` stops it.
    serve_as_unit(unit, at, &format!("127.0.0.1:{port}"), log);
}
