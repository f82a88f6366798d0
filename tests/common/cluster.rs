//! A private PostgreSQL cluster for one test: `initdb` into a temporary directory, its own
//! port and socket directory, stopped (`-m immediate`) and removed on drop. The machine's
//! cluster is never touched. Run as the `postgres` user when the test runs as root (initdb
//! refuses root). A missing binary fails the test, naming it.

use super::free_port;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct PrivateCluster {
    pub dir: PathBuf,
    pub port: u16,
    bindir: PathBuf,
}

fn bindir() -> PathBuf {
    let out = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("pg_config is missing: install PostgreSQL's server package (initdb, pg_ctl)");
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        dir.join("initdb").exists() && dir.join("pg_ctl").exists(),
        "initdb and pg_ctl are missing from {} (PostgreSQL's server package)",
        dir.display()
    );
    dir
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a PostgreSQL program as the `postgres` user when we are root.
fn run_pg(program: &Path, args: &[&str]) -> Output {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    let out = cmd
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl PrivateCluster {
    /// initdb + start; waits until it accepts connections.
    pub fn start(name: &str) -> Self {
        let bindir = bindir();
        let dir = std::env::temp_dir().join(format!(
            "briefrail-pg-{name}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        if is_root() {
            let ok = Command::new("chown")
                .args(["postgres:postgres", dir.to_str().unwrap()])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "chown postgres {} failed", dir.display());
        }
        let data = dir.join("data");
        run_pg(
            &bindir.join("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        let port = free_port();
        let opts = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off",
            dir.display()
        );
        run_pg(
            &bindir.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                dir.join("log").to_str().unwrap(),
                "-w",
                "start",
            ],
        );
        Self { dir, port, bindir }
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates role `role` with `password` and makes TCP connections authenticate by password
    /// (scram-sha-256); the `postgres` superuser keeps trust over the cluster's socket. What a
    /// test of a refused password needs: the machine's cluster trusts every local connection.
    pub fn require_password(&self, role: &str, password: &str) {
        let socket = self.dir.display().to_string();
        let port = self.port.to_string();
        self.client(
            "psql",
            &[
                "-h",
                &socket,
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                &format!("CREATE ROLE {role} LOGIN PASSWORD '{password}'"),
            ],
        );
        let hba = self.dir.join("data").join("pg_hba.conf");
        std::fs::write(
            &hba,
            "local all postgres trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
        )
        .expect("write pg_hba.conf");
        self.client(
            "pg_ctl",
            &["-D", self.dir.join("data").to_str().unwrap(), "reload"],
        );
    }

    /// Runs a client program of this PostgreSQL installation (pg_dump, pg_restore, psql).
    pub fn client(&self, program: &str, args: &[&str]) -> Output {
        run_pg(&self.bindir.join(program), args)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bindir.join("pg_ctl"));
            c
        } else {
            Command::new(self.bindir.join("pg_ctl"))
        };
        let _ = cmd
            .args([
                "-D",
                data.to_str().unwrap_or_default(),
                "-m",
                "immediate",
                "stop",
            ])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
