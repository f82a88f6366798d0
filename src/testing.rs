//! Test support, public so the integration tests, the fault suite and the benchmark share it:
//! a database per test, cloned from a migrated template, and (feature `testing`) a ledger clock
//! a test moves instead of sleeping ([`advance_ledger_clock`]).
//!
//! The template's name carries a hash of `migrations/`, so a changed migration gets a new
//! template; creating it is serialized across concurrently running test binaries with an
//! advisory lock. Each [`TestDb`] drops its database when it goes out of scope (also when the
//! test panics), terminating any connection still open to it.

use std::hash::{Hash, Hasher};
use std::path::Path;

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};

use crate::db::{self, Pool, PoolOptions, admin};
use crate::error::{Error, Result};

/// The server tests run against; `BRIEFRAIL_TEST_DATABASE_URL` overrides it.
pub fn server_url() -> String {
    std::env::var("BRIEFRAIL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// SQL that [`TestDb::new`] runs on every database it creates, when set: how the mutation
/// controls (`tests/common/mutations.rs`) give a test run a deliberate bug in the ledger.
pub const MUTATION_ENV: &str = "BRIEFRAIL_TEST_MUTATION_SQL";

/// Runs the SQL of [`MUTATION_ENV`], if set, on the database at `url`. [`TestDb::new`] calls
/// it; a test that migrates a database of its own (a private cluster) calls it after migrating.
pub async fn plant_mutation(url: &str) -> Result<()> {
    let Ok(sql) = std::env::var(MUTATION_ENV) else {
        return Ok(());
    };
    let mut c = AsyncPgConnection::establish(url)
        .await
        .map_err(Error::connection)?;
    c.batch_execute(&sql)
        .await
        .map_err(|e| Error::migration("the test mutation does not apply", Some(e.into())))
}

/// A database of one's own, migrated, dropped on drop.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: Pool,
}

impl TestDb {
    /// A fresh migrated database and a pool of `pool_size` connections to it.
    pub async fn new(pool_size: u32) -> Result<Self> {
        let server = server_url();
        let template = ensure_template(&server).await?;
        let name = format!("br_t_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
        admin::create_from_template(&server, &name, &template).await?;
        let url = admin::with_database(&server, &name)?;
        plant_mutation(&url).await?;
        let pool = db::connect(&PoolOptions::new(url.clone()).size(pool_size)).await?;
        Ok(Self { name, url, pool })
    }

    /// A dedicated connection (not from the pool).
    pub async fn connection(&self) -> Result<AsyncPgConnection> {
        AsyncPgConnection::establish(&self.url)
            .await
            .map_err(Error::connection)
    }

    /// [`advance_ledger_clock`] on this database, through a pooled connection.
    #[cfg(feature = "testing")]
    pub async fn advance_ledger_clock(&self, by: std::time::Duration) -> Result<()> {
        let mut c = self.pool.get().await?;
        advance_ledger_clock(&mut c, by).await
    }
}

/// Moves the ledger clock (`ops.now()`, `ops.clock()`: [`crate::ledger::clock`]) forward by
/// `by`, for every connection and every process on the database: the offset is a row of
/// `ops.ledger_clock`, added to the database clock by every statement of the ledger. What a
/// test does instead of sleeping past a lease, a backoff or a quiet period; it never moves
/// back. Inside an open transaction the advance holds for that transaction at once and for
/// everyone else when it commits.
///
/// For tests only (feature `testing`): production never writes `ops.ledger_clock`, so its
/// ledger clock is the database clock, and status and readiness never look at the table.
#[cfg(feature = "testing")]
pub async fn advance_ledger_clock(
    conn: &mut AsyncPgConnection,
    by: std::time::Duration,
) -> Result<()> {
    use diesel_async::RunQueryDsl;
    // The ledger reads the offset once per transaction (`ops.clock_offset`): the new one is
    // also this transaction's from now on.
    diesel::sql_query(
        "WITH moved AS (
             INSERT INTO ops.ledger_clock (offset_seconds) VALUES ($1)
             ON CONFLICT (only_row)
             DO UPDATE SET offset_seconds = ops.ledger_clock.offset_seconds + EXCLUDED.offset_seconds
             RETURNING offset_seconds)
         SELECT set_config('briefrail.clock_offset', offset_seconds::text, true) FROM moved",
    )
    .bind::<diesel::sql_types::Double, _>(by.as_secs_f64())
    .execute(conn)
    .await?;
    Ok(())
}

/// How far tests have moved the ledger clock ahead of the database clock on this database
/// (zero when it was never advanced).
#[cfg(feature = "testing")]
pub async fn ledger_clock_offset(conn: &mut AsyncPgConnection) -> Result<std::time::Duration> {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Offset {
        #[diesel(sql_type = diesel::sql_types::Double)]
        secs: f64,
    }
    let o: Offset = diesel::sql_query(
        "SELECT coalesce((SELECT offset_seconds FROM ops.ledger_clock), 0) AS secs",
    )
    .get_result(conn)
    .await?;
    Ok(std::time::Duration::from_secs_f64(o.secs))
}

impl Drop for TestDb {
    fn drop(&mut self) {
        drop_database_now(&self.name);
    }
}

/// Drops database `name` on the test server, terminating its connections, from any context
/// (a `Drop` inside a test's runtime, where blocking on the runtime itself would panic: a
/// thread with its own runtime may block). Errors are ignored: this is clean-up.
pub fn drop_database_now(name: &str) {
    let (server, name) = (server_url(), name.to_owned());
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            let _ = rt.block_on(admin::drop_database(&server, &name));
        }
    })
    .join();
}

fn migrations_hash() -> u64 {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<_> = walk(&dir);
    files.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in files {
        f.hash(&mut h);
        std::fs::read(&f).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p))
            } else {
                out.push(p)
            }
        }
    }
    out
}

/// Creates (once per migration set) and returns the name of the migrated template database.
pub async fn ensure_template(server: &str) -> Result<String> {
    let template = format!("br_tpl_{:016x}", migrations_hash());
    let (_, admin_url) = admin::split_url(&admin::with_database(server, "postgres")?)?;
    let mut lock_conn = AsyncPgConnection::establish(&admin_url)
        .await
        .map_err(Error::connection)?;
    // One creator at a time across every test binary running now.
    lock_conn
        .batch_execute("SELECT pg_advisory_lock(727274)")
        .await?;
    let result = async {
        let url = admin::with_database(server, &template)?;
        if admin::create_database_if_missing(&url).await? {
            if let Err(e) = db::migrate::run_pending(&url).await {
                admin::drop_database(server, &template).await?;
                return Err(e);
            }
        } else if !db::migrate::pending(&url).await?.is_empty() {
            // A half-built template from an interrupted run: rebuild it.
            admin::drop_database(server, &template).await?;
            admin::create_database_if_missing(&url).await?;
            db::migrate::run_pending(&url).await?;
        }
        Ok(template.clone())
    }
    .await;
    lock_conn
        .batch_execute("SELECT pg_advisory_unlock(727274)")
        .await?;
    result
}
