//! A private PostgreSQL cluster for the suite: `initdb` into the run's directory, its own port
//! and socket directory, so the suite can `pg_ctl restart -m immediate` under load and move
//! the ledger into a second cluster by dump and restore, never touching the machine's server.
//!
//! `synchronous_commit` stays on: a commit the database reported is in its WAL before the
//! answer, so an immediate restart loses nothing a node was told had landed. `fsync` is off:
//! the suite kills the server, never the machine, and the kernel keeps what was written.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

pub struct PgCluster {
    pub name: String,
    pub port: u16,
    dir: PathBuf,
    bindir: PathBuf,
}

/// Where the server's programs are (`pg_config --bindir`); each one missing is named.
pub fn bindir() -> Result<PathBuf, String> {
    let out = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .map_err(|e| format!("pg_config: {e} (install PostgreSQL's server package)"))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let missing: Vec<&str> = ["initdb", "pg_ctl", "pg_dump", "pg_restore", "postgres"]
        .into_iter()
        .filter(|p| !dir.join(p).exists())
        .collect();
    if missing.is_empty() {
        Ok(dir)
    } else {
        Err(format!(
            "{} missing from {} (PostgreSQL's server and client packages)",
            missing.join(", "),
            dir.display()
        ))
    }
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a server program, as the `postgres` user when we are root (initdb refuses root).
async fn run_pg(program: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{} {args:?} failed: {text}", program.display()))
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

impl PgCluster {
    /// initdb and start under `dir/<name>`; returns once it accepts connections.
    pub async fn start(dir: &Path, name: &str) -> Result<Self, String> {
        let bindir = bindir()?;
        let home = dir.join(format!("pg-{name}"));
        std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
        if is_root() {
            run_chown(&home).await?;
        }
        let data = home.join("data");
        let data_s = data.to_string_lossy().to_string();
        run_pg(
            &bindir.join("initdb"),
            &[
                "-D",
                &data_s,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )
        .await?;
        let port = free_port()?;
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nsynchronous_commit = on\nmax_connections = 200\n\
             log_line_prefix = '%m [%p] %a '\nlog_lock_waits = on\n",
            home.display()
        );
        let auto = data.join("postgresql.auto.conf");
        let mut existing = std::fs::read_to_string(&auto).unwrap_or_default();
        existing.push_str(&conf);
        std::fs::write(&auto, existing).map_err(|e| format!("{}: {e}", auto.display()))?;
        let cluster = Self {
            name: name.into(),
            port,
            dir: home,
            bindir,
        };
        cluster.pg_ctl(&["-w", "start"]).await?;
        Ok(cluster)
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().to_string()
    }

    fn log(&self) -> PathBuf {
        self.dir.join("log")
    }

    async fn pg_ctl(&self, args: &[&str]) -> Result<String, String> {
        let (data, log) = (self.data(), self.log().to_string_lossy().to_string());
        let mut all = vec!["-D", data.as_str(), "-l", log.as_str()];
        all.extend_from_slice(args);
        run_pg(&self.bindir.join("pg_ctl"), &all).await
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The postmaster's pid (first line of `postmaster.pid`).
    pub fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("data").join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// `pg_ctl restart -m immediate`: every backend dies at once, the server recovers from
    /// its WAL. Returns the postmaster's pid before and after.
    pub async fn restart_immediate(&self) -> Result<(u32, u32), String> {
        let before = self
            .postmaster_pid()
            .ok_or("no postmaster.pid before the restart")?;
        self.pg_ctl(&["-w", "-m", "immediate", "restart"]).await?;
        let after = self
            .postmaster_pid()
            .ok_or("no postmaster.pid after the restart")?;
        if before == after {
            return Err(format!(
                "the postmaster is still pid {before} after the restart"
            ));
        }
        Ok((before, after))
    }

    /// `pg_dump -Fc` of `db` into `file` (a consistent snapshot, taken while nodes write).
    pub async fn dump(&self, db: &str, file: &Path) -> Result<(), String> {
        let url = self.url(db);
        let out = Command::new(self.bindir.join("pg_dump"))
            .args(["-Fc", "-f"])
            .arg(file)
            .arg(&url)
            .output()
            .await
            .map_err(|e| format!("pg_dump: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_dump failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Creates `db` and restores `file` into it.
    pub async fn restore(&self, db: &str, file: &Path) -> Result<(), String> {
        briefrail::db::admin::create_database_if_missing(&self.url(db))
            .await
            .map_err(|e| format!("create {db} on {}: {e}", self.name))?;
        let out = Command::new(self.bindir.join("pg_restore"))
            .args(["--exit-on-error", "--no-owner", "-d"])
            .arg(self.url(db))
            .arg(file)
            .output()
            .await
            .map_err(|e| format!("pg_restore: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_restore failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The server's log so far (the suite looks for "deadlock detected").
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    pub async fn stop(&self) -> Result<(), String> {
        self.pg_ctl(&["-w", "-m", "fast", "stop"]).await.map(|_| ())
    }
}

async fn run_chown(dir: &Path) -> Result<(), String> {
    let ok = Command::new("chown")
        .arg("postgres:postgres")
        .arg(dir)
        .status()
        .await
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(format!("chown postgres {} failed", dir.display()))
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let mut cmd = if is_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bindir.join("pg_ctl"));
            c
        } else {
            std::process::Command::new(self.bindir.join("pg_ctl"))
        };
        let _ = cmd
            .args(["-D", &self.data(), "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
