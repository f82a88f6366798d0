//! Embedded migrations, applied through diesel's synchronous harness on a dedicated thread.
//!
//! diesel-async's own harness uses `block_in_place`, which panics on actix-rt's
//! current-thread runtime (PITFALLS.md); a plain thread with its own runtime works under any
//! caller and never blocks an arbiter.

use diesel::Connection;
use diesel_async::AsyncPgConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::error::{Error, Result};

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Applies every pending migration to the database at `url`. Idempotent. Returns the versions
/// it applied: the baseline among them when it adopted a database the pre-release migrations
/// built (`db::baseline`).
pub async fn run_pending(url: &str) -> Result<Vec<String>> {
    on_migration_thread(url, |conn| {
        let mut applied = Vec::new();
        if crate::db::baseline::adopt_pre_release(conn)? {
            applied.push(crate::db::baseline::BASELINE.to_owned());
        }
        let ran = conn
            .run_pending_migrations(MIGRATIONS)
            .map_err(|e| Error::migration("applying the pending migrations", Some(e)))?;
        applied.extend(ran.iter().map(|v| v.to_string()));
        Ok(applied)
    })
    .await
}

/// Versions embedded in this binary that the database at `url` has not applied (readiness).
pub async fn pending(url: &str) -> Result<Vec<String>> {
    on_migration_thread(url, |conn| {
        let pending = conn
            .pending_migrations(MIGRATIONS)
            .map_err(|e| Error::migration("reading the applied migrations", Some(e)))?;
        Ok(pending
            .iter()
            .map(|m| m.name().version().to_string())
            .collect())
    })
    .await
}

/// Runs `f` on a synchronous connection, on a thread of its own.
async fn on_migration_thread<T: Send + 'static>(
    url: &str,
    f: impl FnOnce(&mut AsyncConnectionWrapper<AsyncPgConnection>) -> Result<T> + Send + 'static,
) -> Result<T> {
    let url = url.to_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("briefrail-migrate".into())
        .spawn(move || {
            let result = AsyncConnectionWrapper::<AsyncPgConnection>::establish(&url)
                .map_err(Error::connection)
                .and_then(|mut conn| f(&mut conn));
            let _ = tx.send(result);
        })
        .map_err(|e| Error::io("starting the migration thread", e))?;
    rx.await
        .map_err(|e| Error::internal_from("the migration thread died", e))?
}

/// Where one migration stands on a database (`briefrail migrate --status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationState {
    /// Embedded in this binary and applied, at the time the database recorded
    /// (`__diesel_schema_migrations.run_on`, the server's local time).
    Applied { run_on: chrono::NaiveDateTime },
    /// Embedded in this binary, not applied: `briefrail migrate` applies it.
    Pending,
    /// Applied, but not embedded in this binary: a newer release ran `briefrail migrate`. Fine
    /// during a rolling upgrade (a release's migrations keep every statement the previous
    /// release calls); this binary runs beside it.
    AppliedByNewerRelease { run_on: chrono::NaiveDateTime },
    /// Applied by a pre-release build: one of the migrations 0.1.0 squashed into its baseline
    /// ([`crate::db::baseline`]), which `briefrail migrate` records as applied beside them.
    PreRelease { run_on: chrono::NaiveDateTime },
}

/// One migration and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    /// diesel's version: the directory name's date and number without dashes.
    pub version: String,
    /// The directory name, when this binary embeds the migration.
    pub name: Option<String>,
    pub state: MigrationState,
}

/// Every migration embedded in this binary (applied or pending) and every version the database
/// has applied that this binary does not know, in version order. Reads only: it neither
/// creates the database nor applies anything; a database that does not exist is an error.
pub async fn status(url: &str) -> Result<Vec<MigrationStatus>> {
    let (name, server, user) = crate::db::reach::identify(url)?;
    if !crate::db::admin::database_exists(url).await? {
        return Err(Error::migration(
            format!(
                "database {name:?} at {server} as user {user:?} does not exist (`briefrail migrate` creates it)"
            ),
            None,
        ));
    }
    read_status(url).await
}

/// Refuses a database with migrations of this binary pending ([`Error::Unmigrated`]), so a
/// command reading the ledger says to run `briefrail migrate` instead of failing on a missing
/// relation. Reads only: unlike [`pending`] (diesel's harness, which creates its table on a
/// bare database), it changes nothing. Versions a newer release applied are fine.
pub async fn require_current(url: &str) -> Result<()> {
    let pending: Vec<String> = read_status(url)
        .await?
        .into_iter()
        .filter(|m| m.state == MigrationState::Pending)
        .map(|m| m.version)
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    let (database, server, user) = crate::db::reach::identify(url)?;
    Err(Error::Unmigrated {
        database,
        server,
        user,
        pending,
    })
}

/// [`status`] of a database known to exist.
async fn read_status(url: &str) -> Result<Vec<MigrationStatus>> {
    use diesel::RunQueryDsl;
    use diesel::migration::MigrationSource;

    #[derive(diesel::QueryableByName)]
    struct Applied {
        #[diesel(sql_type = diesel::sql_types::Text)]
        version: String,
        #[diesel(sql_type = diesel::sql_types::Timestamp)]
        run_on: chrono::NaiveDateTime,
    }
    #[derive(diesel::QueryableByName)]
    struct Table {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        present: bool,
    }
    on_migration_thread(url, |conn| {
        let read = |e: diesel::result::Error| {
            Error::migration("reading the applied migrations", Some(e.into()))
        };
        // diesel creates its table on the first `migrate`; before that nothing is applied.
        let table: Table = diesel::sql_query(
            "SELECT to_regclass('__diesel_schema_migrations') IS NOT NULL AS present",
        )
        .get_result(conn)
        .map_err(read)?;
        let mut applied: std::collections::BTreeMap<String, chrono::NaiveDateTime> =
            if table.present {
                diesel::sql_query(
                    "SELECT version::text AS version, run_on FROM __diesel_schema_migrations",
                )
                .load::<Applied>(conn)
                .map_err(read)?
                .into_iter()
                .map(|a| (a.version, a.run_on))
                .collect()
            } else {
                Default::default()
            };
        let embedded = MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
            .map_err(|e| Error::migration("reading the embedded migrations", Some(e)))?;
        let mut out: Vec<MigrationStatus> = embedded
            .iter()
            .map(|m| {
                let version = m.name().version().to_string();
                let state = match applied.remove(&version) {
                    Some(run_on) => MigrationState::Applied { run_on },
                    None => MigrationState::Pending,
                };
                MigrationStatus {
                    version,
                    name: Some(m.name().to_string()),
                    state,
                }
            })
            .collect();
        out.extend(
            applied
                .into_iter()
                .map(|(version, run_on)| MigrationStatus {
                    state: if crate::db::baseline::is_pre_release(&version) {
                        MigrationState::PreRelease { run_on }
                    } else {
                        MigrationState::AppliedByNewerRelease { run_on }
                    },
                    version,
                    name: None,
                }),
        );
        out.sort_by(|a, b| a.version.cmp(&b.version));
        Ok(out)
    })
    .await
}
