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
/// it applied.
pub async fn run_pending(url: &str) -> Result<Vec<String>> {
    on_migration_thread(url, |conn| {
        let applied = conn
            .run_pending_migrations(MIGRATIONS)
            .map_err(|e| Error::migration("applying the pending migrations", Some(e)))?;
        Ok(applied.iter().map(|v| v.to_string()).collect())
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
