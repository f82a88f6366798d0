//! Who runs against this ledger: each node writes its own row of `ops.nodes`
//! when it starts, at every heartbeat and when it stops cleanly; the console and
//! `briefrail nodes` read every row.
//!
//! Liveness is a ledger fact: a node is gone when it said so (`stopped_at`) or when three of
//! *its own* heartbeat intervals (stored on its row) have passed on the ledger clock without
//! one. No reader's settings and no process clock decide it. Builds in flight are counted from
//! the runs the node holds, not from anything it reports.

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Bool, Double, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

use crate::error::Result;

/// How many of its own heartbeat intervals a node may miss before it shows as gone.
pub const MISSED_HEARTBEATS: f64 = 3.0;

/// A stopped (or silent) node's row is removed this long after it was last seen.
pub const FORGET_AFTER_DAYS: f64 = 7.0;

/// What a node says about itself.
#[derive(Debug, Clone)]
pub struct Announcement<'a> {
    pub node_id: &'a str,
    pub version: &'a str,
    pub transport: &'a str,
    pub heartbeat_seconds: f64,
}

/// **announce** (start): the node's row, started now; rows of nodes gone for
/// [`FORGET_AFTER_DAYS`] are removed in the same statement (a fleet restarted daily for years
/// does not grow the table).
pub async fn announce(conn: &mut AsyncPgConnection, a: &Announcement<'_>) -> Result<()> {
    diesel::sql_query(
        "WITH forgotten AS (
             DELETE FROM ops.nodes
              WHERE last_seen_at < ops.now() - make_interval(days => $5::int)
         )
         INSERT INTO ops.nodes AS n (node_id, version, transport, heartbeat_seconds,
                                     started_at, last_seen_at)
         VALUES ($1, $2, $3, $4, ops.now(), ops.now())
         ON CONFLICT (node_id) DO UPDATE SET
             version = EXCLUDED.version, transport = EXCLUDED.transport,
             heartbeat_seconds = EXCLUDED.heartbeat_seconds,
             started_at = ops.now(), last_seen_at = ops.now(), stopped_at = NULL",
    )
    .bind::<Text, _>(a.node_id)
    .bind::<Text, _>(a.version)
    .bind::<Text, _>(a.transport)
    .bind::<Double, _>(a.heartbeat_seconds)
    .bind::<diesel::sql_types::Integer, _>(FORGET_AFTER_DAYS as i32)
    .execute(conn)
    .await?;
    Ok(())
}

/// **heartbeat**: the node is still here. Re-creates its row if someone removed it (a restore,
/// an operator), keeping the start time otherwise.
pub async fn heartbeat(conn: &mut AsyncPgConnection, a: &Announcement<'_>) -> Result<()> {
    diesel::sql_query(
        "INSERT INTO ops.nodes AS n (node_id, version, transport, heartbeat_seconds,
                                     started_at, last_seen_at)
         VALUES ($1, $2, $3, $4, ops.now(), ops.now())
         ON CONFLICT (node_id) DO UPDATE SET last_seen_at = ops.now(), stopped_at = NULL",
    )
    .bind::<Text, _>(a.node_id)
    .bind::<Text, _>(a.version)
    .bind::<Text, _>(a.transport)
    .bind::<Double, _>(a.heartbeat_seconds)
    .execute(conn)
    .await?;
    Ok(())
}

/// **depart** (clean stop): the node says it is gone (its row is written if its announcement
/// never reached the ledger: it ran, so it is listed).
pub async fn depart(conn: &mut AsyncPgConnection, a: &Announcement<'_>) -> Result<()> {
    diesel::sql_query(
        "INSERT INTO ops.nodes AS n (node_id, version, transport, heartbeat_seconds,
                                     started_at, last_seen_at, stopped_at)
         VALUES ($1, $2, $3, $4, ops.now(), ops.now(), ops.now())
         ON CONFLICT (node_id) DO UPDATE SET stopped_at = ops.now(), last_seen_at = ops.now()",
    )
    .bind::<Text, _>(a.node_id)
    .bind::<Text, _>(a.version)
    .bind::<Text, _>(a.transport)
    .bind::<Double, _>(a.heartbeat_seconds)
    .execute(conn)
    .await?;
    Ok(())
}

/// A node as the ledger knows it.
#[derive(Debug, Clone, Serialize, diesel::QueryableByName)]
pub struct NodeRow {
    #[diesel(sql_type = Text)]
    pub node_id: String,
    #[diesel(sql_type = Text)]
    pub version: String,
    #[diesel(sql_type = Text)]
    pub transport: String,
    #[diesel(sql_type = Double)]
    pub heartbeat_seconds: f64,
    #[diesel(sql_type = Timestamptz)]
    pub started_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub last_seen_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub stopped_at: Option<DateTime<Utc>>,
    /// Seconds since its last heartbeat, on the ledger clock.
    #[diesel(sql_type = Double)]
    pub silent_seconds: f64,
    /// Alive: it has not said it stopped, and it was seen within three of its own intervals.
    #[diesel(sql_type = Bool)]
    pub alive: bool,
    /// Its runs still `running` in the ledger.
    #[diesel(sql_type = BigInt)]
    pub builds_in_flight: i64,
}

/// Every node the ledger remembers, the live ones first, then by last seen.
pub async fn nodes(conn: &mut AsyncPgConnection) -> Result<Vec<NodeRow>> {
    Ok(diesel::sql_query(
        "SELECT n.node_id, n.version, n.transport, n.heartbeat_seconds, n.started_at,
                n.last_seen_at, n.stopped_at,
                greatest(extract(epoch FROM ops.now() - n.last_seen_at)::float8, 0) AS silent_seconds,
                (n.stopped_at IS NULL
                 AND n.last_seen_at >= ops.now() - make_interval(secs => $1 * n.heartbeat_seconds)) AS alive,
                (SELECT count(*) FROM ops.matter_frame_runs r
                  WHERE r.node_id = n.node_id AND r.outcome = 'running') AS builds_in_flight
           FROM ops.nodes n
          ORDER BY alive DESC, n.last_seen_at DESC, n.node_id",
    )
    .bind::<Double, _>(MISSED_HEARTBEATS)
    .load(conn)
    .await?)
}
