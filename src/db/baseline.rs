//! The 0.1.0 baseline, and the databases built before it.
//!
//! 0.1.0 squashed the pre-release migrations into one baseline migration that builds the
//! catalog they built (tests/ledger/schema_drift.rs holds both to `src/ledger/live/`). A database
//! those migrations built already has that catalog, so `briefrail migrate` *adopts* it: it
//! records the baseline as applied without running a statement of it (which would fail on the
//! tables already there). The squashed versions stay recorded, so nodes of the pre-release
//! build find every migration they know applied and keep serving beside 0.1.0's during a
//! rolling upgrade. A database part-way through them has a catalog no release builds; it is
//! refused, naming the last version it has, and left as it was.

use diesel::{Connection, RunQueryDsl};

use crate::error::{Error, Result};

/// The baseline's version (`migrations/2026-12-06-000001_baseline`).
pub const BASELINE: &str = "20261206000001";

/// The versions the baseline squashed, in order.
pub const PRE_RELEASE: [&str; 24] = [
    "20261129000001",
    "20261129000002",
    "20261129000003",
    "20261201000004",
    "20261201000005",
    "20261201000006",
    "20261201000007",
    "20261201000008",
    "20261201000009",
    "20261201000010",
    "20261202000011",
    "20261202000012",
    "20261202000013",
    "20261202000014",
    "20261202000015",
    "20261203000016",
    "20261203000017",
    "20261203000018",
    "20261203000019",
    "20261203000020",
    "20261204000021",
    "20261204000022",
    "20261205000023",
    "20261205000024",
];

/// Whether `version` is one of the squashed pre-release migrations.
pub fn is_pre_release(version: &str) -> bool {
    PRE_RELEASE.contains(&version)
}

#[derive(diesel::QueryableByName)]
struct Version {
    #[diesel(sql_type = diesel::sql_types::Text)]
    version: String,
}

/// Adopts a database the pre-release migrations built (see the module's comment); returns
/// whether it did. A fresh database, or one already at the baseline, is left alone. Runs before
/// diesel's harness, on the migration thread's connection.
pub(crate) fn adopt_pre_release<C>(conn: &mut C) -> Result<bool>
where
    C: Connection<Backend = diesel::pg::Pg> + diesel::connection::LoadConnection,
{
    let read = |e: diesel::result::Error| {
        Error::migration("reading the applied migrations", Some(e.into()))
    };
    conn.transaction(|conn| {
        // diesel creates its table on the first `migrate`; without it nothing was applied.
        let table = diesel::sql_query(
            "SELECT 'present'::text AS version \
             WHERE to_regclass('__diesel_schema_migrations') IS NOT NULL",
        )
        .load::<Version>(conn)
        .map_err(read)?;
        if table.is_empty() {
            return Ok(false);
        }
        // Two `briefrail migrate` adopting the same database at once: the second waits, then
        // finds the baseline recorded.
        conn.batch_execute("LOCK TABLE __diesel_schema_migrations IN EXCLUSIVE MODE")
            .map_err(read)?;
        let applied: Vec<String> =
            diesel::sql_query("SELECT version::text AS version FROM __diesel_schema_migrations")
                .load::<Version>(conn)
                .map_err(read)?
                .into_iter()
                .map(|v| v.version)
                .collect();
        let squashed: Vec<&str> = PRE_RELEASE
            .iter()
            .copied()
            .filter(|v| applied.iter().any(|a| a == v))
            .collect();
        if squashed.is_empty() || applied.iter().any(|a| a == BASELINE) {
            return Ok(false);
        }
        if squashed.len() < PRE_RELEASE.len() {
            let last = squashed.last().copied().unwrap_or_default();
            return Err(Error::migration(
                format!(
                    "this database was migrated by a pre-release build of briefrail, only up to \
                     version {last} of the {} pre-release migrations that release 0.1.0 squashed \
                     into its baseline; finish with that build's `briefrail migrate` (to version \
                     {}), then run this one, or restore the data into a fresh database",
                    PRE_RELEASE.len(),
                    PRE_RELEASE[PRE_RELEASE.len() - 1]
                ),
                None,
            ));
        }
        conn.batch_execute(&format!(
            "INSERT INTO __diesel_schema_migrations (version) VALUES ('{BASELINE}')"
        ))
        .map_err(|e| Error::migration("adopting the pre-release schema", Some(e.into())))?;
        tracing::info!(
            baseline = BASELINE,
            squashed = PRE_RELEASE.len(),
            "adopted a database built by the pre-release migrations: its catalog is the baseline's"
        );
        Ok(true)
    })
}
