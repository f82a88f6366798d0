//! Limits toward the builder, shared by every node through the ledger's rail row
//! (`ops.take_permit`, `ops.hold_builder`, `src/ledger/live/take_permit.sql`, `hold_builder.sql`).
//!
//! A model endpoint accepts so many builds at once and so many a minute; each node counts only
//! its own build slots, so a fleet sends it more than that and every refusal used to be a failed
//! build that spent a retry. Three limits hold for the fleet together:
//!
//! 1. **A cap** ([`Limits::max_running`]): builds running at once on every node.
//! 2. **A rate** ([`Limits::starts_per_minute`]): builds started per minute on every node, a
//!    token bucket that refills continuously (a burst of up to one minute's worth).
//! 3. **A hold** ([`Limits::builder_held_for`]): the builder asked the rail to wait (an HTTP 429
//!    or 503 with `Retry-After`, the command builder's exit code 75, or an embedder's
//!    [`crate::Error::Backpressure`]); no build starts before the time it gave.
//!
//! While any is set, a node asks for a permit ([`take_permit`]) before each claim, and the
//! ledger grants permits one at a time across the fleet, so two nodes deciding at once cannot
//! both take the last slot. With none set, nothing is asked: the limits cost an idle install
//! one small read a second. A permit is a promise of a slot, not a claim: the claim is still the
//! fenced compare-and-swap, and order among waiting demands is still the fair order.

use std::time::Duration;

use diesel::OptionalExtension;
use diesel::sql_types::{Double, Integer, Nullable, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::prepared::prepared;
use crate::error::{Error, Result};
use crate::nudge::MatterKey;

/// The most a builder may make the rail wait at once: a `Retry-After` of a day is taken as
/// this, so a misconfigured endpoint cannot stop the rail for longer than an operator notices.
pub const MAX_BUILDER_HOLD: Duration = Duration::from_secs(15 * 60);

/// The largest cap and rate the ledger accepts.
pub const MAX_RUNNING: u32 = 100_000;
pub const MAX_STARTS_PER_MINUTE: u32 = 1_000_000;

/// The limits in force now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Builds running at once on every node together; `None`: no cap.
    pub max_running: Option<u32>,
    /// Builds started per minute on every node together; `None`: no rate limit.
    pub starts_per_minute: Option<u32>,
    /// How much longer the builder asked the rail to wait, when it did.
    pub builder_held_for: Option<Duration>,
}

impl Limits {
    /// Whether a node must ask for a permit before it claims.
    pub fn active(&self) -> bool {
        self.max_running.is_some() || self.gates_starts()
    }

    /// Whether every build start must pass the ledger, follow-ups included: a rate counts
    /// every start, and a held builder takes none. (A cap does not: a follow-up replaces the
    /// build it follows.)
    pub fn gates_starts(&self) -> bool {
        self.starts_per_minute.is_some() || self.builder_held_for.is_some()
    }
}

#[derive(diesel::QueryableByName)]
struct LimitsRow {
    #[diesel(sql_type = Nullable<Integer>)]
    max_running: Option<i32>,
    #[diesel(sql_type = Nullable<Integer>)]
    starts_per_minute: Option<i32>,
    #[diesel(sql_type = Nullable<Double>)]
    held_for_s: Option<f64>,
    #[diesel(sql_type = Nullable<Text>)]
    held_reason: Option<String>,
}

/// The limits in force and why the builder is held, if it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitsStatus {
    pub limits: Limits,
    pub held_reason: Option<String>,
}

/// The limits in force now (one read of the rail row).
pub async fn read(conn: &mut AsyncPgConnection) -> Result<LimitsStatus> {
    let row: Option<LimitsRow> = prepared(
        "SELECT r.max_running, r.starts_per_minute,
                CASE WHEN r.builder_held_until > ops.clock()
                     THEN extract(epoch FROM r.builder_held_until - ops.clock())::float8 END
                  AS held_for_s,
                CASE WHEN r.builder_held_until > ops.clock() THEN r.builder_held_reason END
                  AS held_reason
           FROM ops.rail r",
    )
    .get_result(conn)
    .await
    .optional()?;
    let Some(row) = row else {
        return Ok(LimitsStatus::default());
    };
    let count = |v: Option<i32>| v.and_then(|n| u32::try_from(n).ok());
    Ok(LimitsStatus {
        limits: Limits {
            max_running: count(row.max_running),
            starts_per_minute: count(row.starts_per_minute),
            builder_held_for: row
                .held_for_s
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64),
        },
        held_reason: row.held_reason,
    })
}

/// Sets the cap and the rate (`None` lifts one). Refuses a value outside 1 to its maximum,
/// naming it.
pub async fn set(
    conn: &mut AsyncPgConnection,
    max_running: Option<u32>,
    starts_per_minute: Option<u32>,
) -> Result<()> {
    check("max_running", max_running, MAX_RUNNING)?;
    check(
        "starts_per_minute",
        starts_per_minute,
        MAX_STARTS_PER_MINUTE,
    )?;
    let as_sql = |v: Option<u32>| v.map(|n| n as i32);
    diesel::sql_query(
        "INSERT INTO ops.rail AS r (only_row, max_running, starts_per_minute)
         VALUES (true, $1, $2)
         ON CONFLICT (only_row) DO UPDATE
            SET max_running = $1, starts_per_minute = $2,
                -- A new rate starts with a full bucket.
                tokens = CASE WHEN r.starts_per_minute IS DISTINCT FROM $2 THEN NULL
                              ELSE r.tokens END,
                updated_at = ops.now()",
    )
    .bind::<Nullable<Integer>, _>(as_sql(max_running))
    .bind::<Nullable<Integer>, _>(as_sql(starts_per_minute))
    .execute(conn)
    .await?;
    tracing::info!(?max_running, ?starts_per_minute, "build limits changed");
    Ok(())
}

fn check(key: &str, value: Option<u32>, max: u32) -> Result<()> {
    match value {
        Some(n) if n == 0 || n > max => Err(Error::InvalidInput(format!(
            "{key} = {n} is out of range: 1 to {max} (or none, for no limit)"
        ))),
        _ => Ok(()),
    }
}

/// Lifts the builder's hold at once (an operator who knows the endpoint is back).
pub async fn release_builder(conn: &mut AsyncPgConnection) -> Result<()> {
    diesel::sql_query(
        "UPDATE ops.rail SET builder_held_until = NULL, builder_held_reason = NULL,
                updated_at = ops.now()",
    )
    .execute(conn)
    .await?;
    tracing::info!("builder hold lifted");
    Ok(())
}

use super::sql::Wait;

/// May a build of `key` start now? `None` when it may (a permit is recorded while a cap is
/// set; it lapses after `ttl` if no claim follows); otherwise how long to wait before asking
/// again.
pub async fn take_permit(
    conn: &mut AsyncPgConnection,
    key: MatterKey,
    node_id: &str,
    ttl: Duration,
) -> Result<Option<Duration>> {
    let w = super::sql::take_permit(key.firm_id, key.matter_id, node_id, ttl.as_secs_f64())
        .get_result::<Wait>(conn)
        .await?;
    Ok((w.wait_s.is_finite() && w.wait_s > 0.0).then(|| permit_wait(w.wait_s)))
}

/// The longest a node waits before asking for a permit again, whatever the ledger answered: a
/// rate's bucket an operator emptied by hand (`ops.rail.tokens` far below zero) can answer a
/// wait no `Duration` holds, and asking again is always safe.
pub const MAX_PERMIT_WAIT: Duration = Duration::from_secs(60);

/// `secs` (finite, positive) as a wait, at most [`MAX_PERMIT_WAIT`].
fn permit_wait(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs).map_or(MAX_PERMIT_WAIT, |d| d.min(MAX_PERMIT_WAIT))
}

/// Gives back `key`'s permit: its claim found nothing to build (served, recorded on a live
/// build elsewhere, or failed), so the slot it promised is free at once.
pub async fn return_permit(
    conn: &mut AsyncPgConnection,
    key: MatterKey,
    node_id: &str,
) -> Result<()> {
    prepared(
        "DELETE FROM ops.build_permits
          WHERE firm_id = $1 AND matter_id = $2 AND node_id = $3",
    )
    .bind::<SqlUuid, _>(key.firm_id)
    .bind::<SqlUuid, _>(key.matter_id)
    .bind::<Text, _>(node_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records that the builder asked the rail to wait `wait` (at most [`MAX_BUILDER_HOLD`]):
/// no build starts on any node before then. A shorter hold never cuts a longer one short.
/// Answers how long the rail now waits.
pub async fn hold_builder(
    conn: &mut AsyncPgConnection,
    wait: Duration,
    reason: &str,
) -> Result<Duration> {
    let wait = wait.min(MAX_BUILDER_HOLD);
    let w = super::sql::hold_builder(
        wait.as_secs_f64(),
        crate::ledger::text::storable_within(reason, 500),
    )
    .get_result::<Wait>(conn)
    .await?;
    tracing::warn!(
        wait_s = w.wait_s,
        reason,
        "the builder asked the rail to wait"
    );
    Ok(Duration::try_from_secs_f64(w.wait_s).unwrap_or(wait))
}
