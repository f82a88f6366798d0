//! **Retention**: removing what no guarantee needs any more, so an install that runs for years
//! keeps bounded tables. Each call is one statement (`ops.prune_events`, `ops.prune_runs`,
//! `ops.prune_frames`: the SQL and its reasons are in `src/ledger/live/`), removing at most
//! a batch, oldest first, skipping rows another transaction holds. The sweeper drives the
//! passes ([`crate::actors::retention`]); docs/protocol.md ("Retention") says what is removed
//! when, and why nothing a guarantee needs ever is.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Nullable, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::transitions::MatterRef;
use crate::error::Result;

/// A frame this young is never removed: a builder that lost its commit's answer reads its own
/// frame back to settle the outcome (`ledger::commit::settle`), seconds later at most.
pub const YOUNG_FRAME: Duration = Duration::from_secs(3600);

/// What one statement of [`prune_events`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, diesel::QueryableByName)]
pub struct EventsRemoved {
    /// Outbox rows.
    #[diesel(sql_type = BigInt)]
    pub events: i64,
    /// Their inbox rows (every consumer's).
    #[diesel(sql_type = BigInt)]
    pub inbox_rows: i64,
}

/// Removes up to `limit` events the rail (`consumer`) consumed that were published more than
/// `older_than` ago, with their inbox rows. Unpublished and unconsumed events stay, whatever
/// their age.
pub async fn prune_events(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    older_than: Duration,
    limit: u32,
) -> Result<EventsRemoved> {
    Ok(
        super::sql::prune_events(consumer, older_than.as_secs_f64(), clamp(limit))
            .get_result(conn)
            .await?,
    )
}

/// Removes up to `limit` runs started more than `older_than` ago, keeping each matter's
/// latest run and every open one. Returns how many.
pub async fn prune_runs(
    conn: &mut AsyncPgConnection,
    older_than: Duration,
    limit: u32,
) -> Result<i64> {
    let c = super::sql::prune_runs(older_than.as_secs_f64(), clamp(limit))
        .get_result::<super::sql::Number>(conn)
        .await?;
    Ok(c.number.unwrap_or_default())
}

/// One step of the walk over matters that [`prune_frames`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramesStep {
    pub removed: i64,
    /// Where the next step starts; `None`: the walk reached the last matter.
    pub next: Option<MatterRef>,
}

/// For up to `matters` matters after `after` (from the first when `None`), removes every frame
/// but the newest `keep` (at least one) and any younger than [`YOUNG_FRAME`].
pub async fn prune_frames(
    conn: &mut AsyncPgConnection,
    keep: u32,
    after: Option<MatterRef>,
    matters: u32,
) -> Result<FramesStep> {
    #[derive(diesel::QueryableByName)]
    struct Step {
        #[diesel(sql_type = BigInt)]
        frames: i64,
        #[diesel(sql_type = Nullable<SqlUuid>)]
        last_firm: Option<Uuid>,
        #[diesel(sql_type = Nullable<SqlUuid>)]
        last_matter: Option<Uuid>,
    }
    let from = after.unwrap_or(MatterRef {
        firm_id: Uuid::nil(),
        matter_id: Uuid::nil(),
    });
    let s: Step = super::sql::prune_frames(
        clamp(keep),
        YOUNG_FRAME.as_secs_f64(),
        from.firm_id,
        from.matter_id,
        clamp(matters),
    )
    .get_result(conn)
    .await?;
    let next = match (s.last_firm, s.last_matter) {
        (Some(firm_id), Some(matter_id)) => Some(MatterRef { firm_id, matter_id }),
        _ => None,
    };
    Ok(FramesStep {
        removed: s.frames,
        next,
    })
}

/// The oldest rows retention keeps: what an operator checks against the policy.
#[cfg(feature = "testing")]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, diesel::QueryableByName)]
pub struct OldestKept {
    /// The oldest outbox row's fact (by sequence: an index read, never a scan).
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub event: Option<DateTime<Utc>>,
    /// The oldest run's start.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub run: Option<DateTime<Utc>>,
    /// The newest fact retention removed (`ops.retention_horizon`); `None`: none yet.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub events_removed_through: Option<DateTime<Utc>>,
}

/// The statement of [`oldest_kept`]: index reads only (a test EXPLAINs it at a million rows).
#[cfg(feature = "testing")]
pub const OLDEST_KEPT: &str =
    "SELECT (SELECT created_at FROM ops.domain_event_outbox ORDER BY seq LIMIT 1) AS event,
            (SELECT started_at FROM ops.matter_frame_runs ORDER BY started_at LIMIT 1) AS run,
            (SELECT events_removed_through FROM ops.retention_horizon) AS events_removed_through";

/// [`OldestKept`], in one statement of index reads.
#[cfg(feature = "testing")]
pub async fn oldest_kept(conn: &mut AsyncPgConnection) -> Result<OldestKept> {
    Ok(diesel::sql_query(OLDEST_KEPT).get_result(conn).await?)
}

/// Whether a message that names an event the outbox does not hold, and says it occurred at
/// `occurred_at`, is a late copy of an event retention removed: the ledger has removed events
/// that occurred that late or later. Decides only where a nudge that changes nothing goes
/// (acked and counted, or dead-lettered), never whether a fact is served.
pub async fn removed_by_retention(
    conn: &mut AsyncPgConnection,
    occurred_at: DateTime<Utc>,
) -> Result<bool> {
    #[derive(diesel::QueryableByName)]
    struct Late {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        late: bool,
    }
    let l: Late = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM ops.retention_horizon WHERE $1 <= events_removed_through) AS late",
    )
    .bind::<Timestamptz, _>(occurred_at)
    .get_result(conn)
    .await?;
    Ok(l.late)
}

fn clamp(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
