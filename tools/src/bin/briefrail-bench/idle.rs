//! Idle latency on the path a user waits on, and what the `latency` section leaves out of it.
//!
//! Counsel uploads a document to a matter the rail has served before and starts waiting when
//! the upload's transaction starts: the outbox row's `created_at`. The wait ends when the build
//! that reads the upload starts: its run's `started_at`. Both are read from the database. The
//! node is the release binary as users run it (`briefrail run`, JSON logs at info, the brief
//! builder), with `trigger.debounce_ms = 0` and every other setting at its default.
//!
//! The `latency` section measures something narrower: new matters (a row the ledger has never
//! served), one at a time, from the clock read just before COMMIT. Each variant here changes one
//! of those choices, so the table shows which one the difference comes from:
//!
//! * what the fact is: an upload on a matter served before, or a new matter;
//! * who records it: the library, or `briefrail document add` (a process per upload, on the
//!   same cores as the node; its clock before COMMIT is unknown, so only "from record");
//! * how far apart facts come: 100 ms (a person) or 10 ms;
//! * whether the library's call is the transaction (as an application calls it, and as the
//!   headline row does), or runs inside the application's own (where the clock just before its
//!   COMMIT can be read);
//! * where the wait starts: the transaction's start (`created_at`), or just before its COMMIT.

use std::path::Path;
use std::time::Duration;

use briefrail::db::{Pool, admin};
use briefrail::ledger::facts;
use diesel_async::{AsyncConnection, RunQueryDsl};
use serde_json::json;
use uuid::Uuid;

use super::e2e::{self, Run};
use super::{R, pct, scalar};

/// What a fact is, and who records it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fact {
    /// A document on a matter served before, through the library.
    Upload,
    /// A document on a matter served before, by `briefrail document add` (a process each).
    CliUpload,
    /// A document on a matter served before, through the library on a new connection each
    /// (a new server session, as the CLI's).
    FreshUpload,
    /// A new matter, through the library.
    NewMatter,
}

/// One way of sending facts.
#[derive(Debug, Clone, Copy)]
struct Variant {
    fact: Fact,
    /// Between one fact's commit (the CLI's exit) and the next fact.
    spacing: Duration,
    /// The library's call runs inside a transaction of the application's, which reads the
    /// clock before its COMMIT; otherwise the call is the transaction, as an application that
    /// records only the fact makes it.
    in_app_transaction: bool,
}

impl Variant {
    fn label(&self) -> String {
        let what = match self.fact {
            Fact::Upload => "upload on a served matter",
            Fact::CliUpload => "CLI upload on a served matter",
            Fact::FreshUpload => "upload on a new session, served matter",
            Fact::NewMatter => "new matter",
        };
        let inside = if self.in_app_transaction {
            ", in the app's transaction"
        } else {
            ""
        };
        format!("{what}, {} ms apart{inside}", self.spacing.as_millis())
    }
}

const VARIANTS: [Variant; 6] = [
    Variant {
        fact: Fact::Upload,
        spacing: Duration::from_millis(100),
        in_app_transaction: false,
    },
    Variant {
        fact: Fact::Upload,
        spacing: Duration::from_millis(100),
        in_app_transaction: true,
    },
    Variant {
        fact: Fact::CliUpload,
        spacing: Duration::from_millis(100),
        in_app_transaction: false,
    },
    Variant {
        fact: Fact::FreshUpload,
        spacing: Duration::from_millis(100),
        in_app_transaction: false,
    },
    Variant {
        fact: Fact::NewMatter,
        spacing: Duration::from_millis(100),
        in_app_transaction: false,
    },
    Variant {
        fact: Fact::Upload,
        spacing: Duration::from_millis(10),
        in_app_transaction: false,
    },
];

/// Facts per variant.
const FACTS: usize = 60;

/// What one variant measured, ms.
struct Waits {
    /// From the upload's transaction start (`created_at`) to its build's start.
    from_record: Vec<f64>,
    /// From the clock just before COMMIT to its build's start.
    from_commit: Vec<f64>,
    /// The fact's own transaction: `created_at` to the clock before COMMIT.
    transaction: Vec<f64>,
}

/// `briefrail-bench idle`: both transports, every variant; printed, and returned for
/// `bench/results.json`.
pub async fn idle_section(server: &str) -> R<serde_json::Value> {
    let mut out = serde_json::Map::new();
    println!(
        "\nidle latency to build start, ms ({FACTS} facts per row, one node, debounce 0)\n{:<80} {:>15} {:>15} {:>12}",
        "", "from record", "from commit", "transaction"
    );
    for transport in ["postgres", "amqp"] {
        let mut rows = Vec::new();
        for v in VARIANTS {
            let w = measure(server, transport, v).await?;
            let (r, c, t) = (
                sorted(w.from_record),
                sorted(w.from_commit),
                sorted(w.transaction),
            );
            println!(
                "{:<80} {:>6} / {:>6} {:>6} / {:>6} {:>12}",
                format!("{transport}: {}", v.label()),
                ms(pct(&r, 0.5)),
                ms(pct(&r, 0.99)),
                ms(pct(&c, 0.5)),
                ms(pct(&c, 0.99)),
                ms(pct(&t, 0.5)),
            );
            rows.push(json!({
                "variant": v.label(),
                "from_record_ms": {"p50": pct(&r, 0.5), "p99": pct(&r, 0.99)},
                "from_commit_ms": {"p50": pct(&c, 0.5), "p99": pct(&c, 0.99)},
                "transaction_ms_p50": pct(&t, 0.5),
            }));
        }
        out.insert(transport.into(), json!(rows));
    }
    println!("(p50 / p99; \"from record\" is where counsel starts waiting)");
    Ok(json!(out))
}

/// A figure to one decimal, or `-` where the variant cannot measure it.
fn ms(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{x:.1}")
    }
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// One variant on a fresh database: `FACTS` matters served once, a node at idle, then one fact
/// per matter (or one new matter each) every `spacing`, without waiting for their builds.
async fn measure(server: &str, transport: &'static str, v: Variant) -> R<Waits> {
    let run = Run {
        transport,
        matters: FACTS,
        concurrency: 8,
        nodes: 1,
        lanes: None,
    };
    let name = format!("{}_idle", admin::split_url(server)?.0);
    let (url, pool) = e2e::fresh(server, &name).await?;
    e2e::trial_sql(&pool).await?;
    let (firm, served) = e2e::load(&pool, FACTS).await?;
    let dir = std::env::temp_dir().join(format!("briefrail-bench-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let prefix = format!("bench-{}", &Uuid::new_v4().simple().to_string()[..8]);
    let bin = e2e::binary()?;
    let mut node = e2e::spawn_with(
        &bin,
        &url,
        &run,
        0,
        &dir,
        &prefix,
        &[("BRIEFRAIL__TRIGGER__DEBOUNCE_MS", "0")],
    )?;
    let result = async {
        wait_served(&pool, firm, FACTS, &dir).await?;
        // At idle: every build done, the node's timers and the broker quiet.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut c = pool.get().await?;
        let mut sent = Vec::new();
        for &earlier in &served {
            let matter = match v.fact {
                Fact::NewMatter => Uuid::new_v4(),
                Fact::Upload | Fact::CliUpload | Fact::FreshUpload => earlier,
            };
            let committing = match v.fact {
                Fact::CliUpload => {
                    cli_upload(&bin, &url, firm, matter)?;
                    None
                }
                Fact::FreshUpload => {
                    let mut fresh = diesel_async::AsyncPgConnection::establish(&url).await?;
                    fact(&mut fresh, firm, matter, true, v.in_app_transaction).await?
                }
                Fact::Upload => fact(&mut c, firm, matter, true, v.in_app_transaction).await?,
                Fact::NewMatter => fact(&mut c, firm, matter, false, v.in_app_transaction).await?,
            };
            sent.push((matter, committing));
            tokio::time::sleep(v.spacing).await;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(w) = waits(&pool, &sent).await? {
                return Ok(w);
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "not every fact's build started within 120 s; node log in {}",
                    dir.display()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    .await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status();
    let _ = node.child.wait();
    drop(pool);
    if transport == "amqp" {
        let s = briefrail::config::Settings::defaults();
        briefrail::transport::amqp::Topology::new(&prefix)
            .delete(&s.transport.amqp_url)
            .await;
    }
    admin::drop_database(server, &name).await?;
    result
}

/// `briefrail document add`, as counsel's tooling would run it; waits for its exit.
fn cli_upload(bin: &Path, url: &str, firm: Uuid, matter: Uuid) -> R<()> {
    let out = std::process::Command::new(bin)
        .args(["document", "add", "--firm", &firm.to_string(), "--matter"])
        .arg(matter.to_string())
        .args(["--title", "Deposition of the witness", "--text"])
        .arg("The witness saw the truck at noon. It was red.")
        .env("BRIEFRAIL__DATABASE__URL", url)
        .env_remove("RUST_LOG")
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "briefrail document add failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

/// One fact: the library's call alone (`None`: the call is the transaction, and the clock
/// before its COMMIT cannot be read), or inside a transaction of the application's, which
/// returns the database clock (ms) just before its COMMIT.
async fn fact(
    c: &mut diesel_async::AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
    upload: bool,
    in_app_transaction: bool,
) -> R<Option<f64>> {
    #[derive(diesel::QueryableByName)]
    struct T {
        #[diesel(sql_type = diesel::sql_types::Double)]
        t: f64,
    }
    async fn record(
        c: &mut diesel_async::AsyncPgConnection,
        firm: Uuid,
        matter: Uuid,
        upload: bool,
    ) -> briefrail::Result<()> {
        if upload {
            e2e::upload(c, firm, matter).await?;
        } else {
            facts::create_matter(c, firm, matter, "Idle v. Latency").await?;
        }
        Ok(())
    }
    if !in_app_transaction {
        record(c, firm, matter, upload).await?;
        return Ok(None);
    }
    Ok(Some(
        c.transaction(async move |tx| {
            record(tx, firm, matter, upload).await?;
            let t: T = diesel::sql_query(
                "SELECT extract(epoch FROM clock_timestamp())::float8 * 1000 AS t",
            )
            .get_result(tx)
            .await?;
            Ok::<_, briefrail::Error>(t.t)
        })
        .await?,
    ))
}

/// Until `n` matters of the firm have a frame and no build runs.
async fn wait_served(pool: &Pool, firm: Uuid, n: usize, dir: &Path) -> R<()> {
    let sql = format!(
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM ops.matter_frame_jobs
                                   WHERE firm_id = '{firm}' AND run_status = 'running')
                     THEN 0
                     ELSE (SELECT count(DISTINCT matter_id) FROM ops.matter_frames
                            WHERE firm_id = '{firm}') END AS n"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while (scalar(pool, &sql).await? as usize) < n {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "{n} not reached within 120 s ({sql}); node logs in {}",
                dir.display()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Each fact's waits, from its matter's newest event and the first run that started after the
/// fact's COMMIT was sent (a run that started earlier could not read it; for the CLI, whose
/// clock before COMMIT is not known, after the event's record, as no other fact is on the
/// matter; so for a call that is its own transaction); `None` while a fact's build has not
/// started.
async fn waits(pool: &Pool, sent: &[(Uuid, Option<f64>)]) -> R<Option<Waits>> {
    #[derive(diesel::QueryableByName)]
    struct W {
        #[diesel(sql_type = diesel::sql_types::Double)]
        created: f64,
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Double>)]
        started: Option<f64>,
    }
    let mut c = pool.get().await?;
    let mut w = Waits {
        from_record: Vec::new(),
        from_commit: Vec::new(),
        transaction: Vec::new(),
    };
    for (matter, committing) in sent {
        let after = committing.map_or_else(
            || "o.created_at".to_owned(),
            |ms| format!("to_timestamp({ms} / 1000.0)"),
        );
        let row: W = diesel::sql_query(format!(
            "SELECT extract(epoch FROM o.created_at)::float8 * 1000 AS created,
                    (SELECT extract(epoch FROM min(r.started_at))::float8 * 1000
                       FROM ops.matter_frame_runs r
                      WHERE r.matter_id = o.matter_id AND r.started_at > {after}) AS started
               FROM ops.domain_event_outbox o WHERE o.matter_id = '{matter}'
              ORDER BY o.seq DESC LIMIT 1"
        ))
        .get_result(&mut c)
        .await?;
        let Some(started) = row.started else {
            return Ok(None);
        };
        w.from_record.push(started - row.created);
        if let Some(committing) = committing {
            w.from_commit.push(started - committing);
            w.transaction.push(committing - row.created);
        }
    }
    Ok(Some(w))
}
