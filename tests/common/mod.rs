//! Helpers for tests that run real `briefrail run` processes.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use briefrail::testing::TestDb;
use uuid::Uuid;

pub mod cluster;
pub mod flaky;
pub mod mutations;
pub mod shell;
pub mod system;

/// A claim as a new demand makes it: this node, a ten-minute lease, five attempts.
pub fn claim_request(node: &str, firm: Uuid, matter: Uuid) -> briefrail::ledger::ClaimRequest {
    briefrail::ledger::ClaimRequest {
        firm_id: firm,
        matter_id: matter,
        lease: Duration::from_secs(600),
        node_id: node.into(),
        trace_id: None,
        event_ids: vec![],
        kind: briefrail::ledger::ClaimKind::NewDemand,
        max_attempts: 5,
    }
}

/// A `briefrail run` child process; killed (SIGKILL) when dropped, also if the test panics.
pub struct NodeProcess {
    pub id: String,
    pub child: Child,
    pub log: PathBuf,
}

impl NodeProcess {
    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill {sig} {} failed", self.pid());
    }

    /// Waits for the process to exit; `None` if it is still running after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.pid()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A shell script builder: reads the context, sleeps `BUILD_SECONDS`, prints a frame.
pub fn builder_script(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("builder.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\ncat > /dev/null\nsleep \"${BUILD_SECONDS:-0}\"\nprintf '{\"built_by\":\"%s\",\"token\":%s}' \"$NODE\" \"$BRIEFRAIL_TOKEN\"\n",
    )
    .expect("write builder script");
    path
}

pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "briefrail-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Starts `briefrail run` as node `id` on `db`, with the `command` builder and the embedded
/// transport; `extra` overrides any setting (`BRIEFRAIL__...`).
pub fn spawn_node(
    db: &TestDb,
    dir: &std::path::Path,
    id: &str,
    extra: &[(&str, &str)],
) -> NodeProcess {
    let script = builder_script(dir);
    let log = dir.join(format!("{id}.log"));
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_briefrail"));
    cmd.arg("run")
        .env("BRIEFRAIL__DATABASE__URL", &db.url)
        .env("BRIEFRAIL__DATABASE__POOL_SIZE", "4")
        .env("BRIEFRAIL__NODE__ID", id)
        .env("NODE", id)
        .env("BRIEFRAIL__TRANSPORT__KIND", "postgres")
        .env("BRIEFRAIL__BUILDER__KIND", "command")
        .env(
            "BRIEFRAIL__BUILDER__COMMAND",
            format!("/bin/sh {}", script.display()),
        )
        .env("BRIEFRAIL__BUILDERS__CONCURRENCY", "2")
        .env("BRIEFRAIL__TRIGGER__DEBOUNCE_MS", "20")
        .env("BRIEFRAIL__TRIGGER__MAX_WAIT_MS", "100")
        .env("BRIEFRAIL__RELAY__POLL_MS", "200")
        .env("BRIEFRAIL__SWEEPER__INTERVAL_SECONDS", "0.25")
        .env("BRIEFRAIL__HTTP__BIND", "127.0.0.1:0")
        .env("BRIEFRAIL__LOG__LEVEL", "info,briefrail=debug")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn briefrail run");
    NodeProcess {
        id: id.to_owned(),
        child,
        log,
    }
}

/// Polls `f` every 50 ms until it returns `Some`, or panics with `what` after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A topology of its own for one test, deleted (queues and exchanges) when dropped.
pub struct BrokerScope {
    pub topology: briefrail::transport::amqp::Topology,
    pub prefix: String,
}

pub const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

impl BrokerScope {
    pub fn new() -> Self {
        let prefix = format!("t{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        Self {
            topology: briefrail::transport::amqp::Topology::new(&prefix),
            prefix,
        }
    }
}

impl Drop for BrokerScope {
    fn drop(&mut self) {
        let t = self.topology.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(t.delete(&briefrail::secret::SecretUrl::new(AMQP_URL)));
        })
        .join();
    }
}

/// A port nothing listens on (bound, read, released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Bytes as lowercase hex, as W3C trace context and AMQP ids write them.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A row of one bigint column `n`.
#[derive(diesel::QueryableByName)]
pub struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub n: i64,
}

/// The `n` that `sql` (one row, a bigint column `n`) answers on `c`; pass a pooled connection
/// as `&mut db.pool.get().await.unwrap()`.
pub async fn count(c: &mut diesel_async::AsyncPgConnection, sql: &str) -> i64 {
    use diesel_async::RunQueryDsl;
    diesel::sql_query(sql)
        .get_result::<Count>(c)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .n
}

#[derive(diesel::QueryableByName)]
struct Id {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: Uuid,
}

/// The set of `id`s (a uuid column) that `sql` answers on `c`.
pub async fn ids(
    c: &mut diesel_async::AsyncPgConnection,
    sql: &str,
) -> std::collections::BTreeSet<Uuid> {
    use diesel_async::RunQueryDsl;
    diesel::sql_query(sql)
        .load::<Id>(c)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .map(|i| i.id)
        .collect()
}

/// Records a document `title` on `matter` (its text: "the text of `title`"); its id.
pub async fn add_document(
    c: &mut diesel_async::AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
    title: &str,
) -> Uuid {
    let id = Uuid::new_v4();
    briefrail::ledger::facts::add_document(
        c,
        briefrail::ledger::facts::NewDocument {
            document_id: id,
            firm_id: firm,
            matter_id: matter,
            title: title.into(),
            dated: None,
            body: format!("the text of {title}"),
        },
    )
    .await
    .unwrap();
    id
}

/// Whether the matter's job has landed a frame and owes no build.
pub async fn served(db: &TestDb, firm: Uuid, matter: Uuid) -> bool {
    let mut c = db.pool.get().await.unwrap();
    briefrail::ledger::reads::job(&mut c, firm, matter)
        .await
        .unwrap()
        .is_some_and(|j| !j.unserved() && j.landed_generation > 0)
}
