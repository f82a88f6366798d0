//! What an operator looks at (the console's pages, `matter list`, `brief show`) and the one
//! thing an operator does besides asking for a Brief: **retry** a matter whose retries ran out.
//!
//! A matter's state is derived in SQL from its job row and its record, in [`STATE_SQL`] only,
//! so the overview's counts, the search filter and each row's badge can never disagree.

use std::fmt;

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Double, Integer, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::models::BRIEF_RAIL;
use crate::error::{Error, Result};

#[cfg(any(feature = "cli", feature = "http", feature = "testing"))]
pub mod bulk;

/// A matter's state as an operator reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatterState {
    /// Every demand is served: the Brief reflects every fact recorded so far.
    Fresh,
    /// Every demand recorded is served, but a fact of the matter was recorded over
    /// [`OWED_AFTER`] ago and the trigger has not consumed it yet: the Brief may be missing it
    /// (a stalled consumer, a lost message before reconcile republishes it). Never `fresh`.
    Owed,
    /// Some demand is not served yet and nothing is building it right now (it will be).
    Unserved,
    /// A build holds the claim.
    Running,
    /// The last build failed; a retry waits for its backoff.
    Failed,
    /// It failed `retry.max_attempts` times in a row: nothing retries it until a new demand
    /// (an upload, a Brief request, or **retry**).
    RetriesExhausted,
    /// Archived: never rebuilt.
    Archived,
}

impl MatterState {
    pub const ALL: &'static [MatterState] = &[
        MatterState::Fresh,
        MatterState::Owed,
        MatterState::Unserved,
        MatterState::Running,
        MatterState::Failed,
        MatterState::RetriesExhausted,
        MatterState::Archived,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MatterState::Fresh => "fresh",
            MatterState::Owed => "owed",
            MatterState::Unserved => "unserved",
            MatterState::Running => "running",
            MatterState::Failed => "failed",
            MatterState::RetriesExhausted => "retries_exhausted",
            MatterState::Archived => "archived",
        }
    }

    /// What a person reads.
    pub fn label(self) -> &'static str {
        match self {
            MatterState::Fresh => "fresh",
            MatterState::Owed => "owed",
            MatterState::Unserved => "unserved",
            MatterState::Running => "running",
            MatterState::Failed => "failed, retrying",
            MatterState::RetriesExhausted => "retries exhausted",
            MatterState::Archived => "archived",
        }
    }
}

impl fmt::Display for MatterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MatterState {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        MatterState::ALL
            .iter()
            .copied()
            .find(|v| v.as_str() == s.trim())
            .ok_or_else(|| {
                let valid: Vec<_> = MatterState::ALL.iter().map(|v| v.as_str()).collect();
                Error::InvalidInput(format!("state {s:?} is not one of: {}", valid.join(", ")))
            })
    }
}

/// How long a recorded fact may go unconsumed by the trigger before its matter is [owed]
/// (`MatterState::Owed`) rather than fresh, and before `briefrail_facts_owed` counts it: longer
/// than a healthy rail takes to publish and consume one under load, shorter than the
/// reconcile's first republication, so a stall shows before reconcile repairs it.
///
/// [owed]: MatterState::Owed
pub const OWED_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// The state of `m` (record.matters) and `j` (its job row, LEFT JOINed), given
/// `retry.max_attempts` as `$1`. The one definition; see [`MatterState`]. A matter whose demands
/// are served is `owed`, not `fresh`, while a fact of it recorded over [`OWED_AFTER`] ago is
/// unconsumed by the trigger (consumer `brief-rail`). A claim whose lease
/// has passed (its node died) is `failed`: the sweep is about to record it so.
pub const STATE_SQL: &str = "CASE
      WHEN m.archived_at IS NOT NULL THEN 'archived'
      WHEN j.firm_id IS NULL THEN 'unserved'
      WHEN j.run_status = 'running' AND j.lease_expires_at >= ops.now() THEN 'running'
      WHEN j.run_status = 'running' THEN 'failed'
      WHEN j.landed_generation >= j.requested_generation
           AND EXISTS (SELECT 1 FROM ops.domain_event_outbox o
                        WHERE o.firm_id = j.firm_id AND o.matter_id = j.matter_id
                          AND o.created_at < ops.now() - interval '30 seconds'
                          AND NOT EXISTS (SELECT 1 FROM ops.consumed_events c
                                           WHERE c.consumer = 'brief-rail'
                                             AND c.event_id = o.event_id)) THEN 'owed'
      WHEN j.landed_generation >= j.requested_generation THEN 'fresh'
      WHEN j.run_status = 'failed' AND j.consecutive_failures >= $1 THEN 'retries_exhausted'
      WHEN j.run_status = 'failed' THEN 'failed'
      ELSE 'unserved'
    END";

/// What an owed matter means and what to look at (`status` says it; the overview the same).
pub fn owed_advice() -> String {
    format!(
        "owed: a fact of this matter was recorded over {} s ago and the trigger has not consumed \
         it, so the Brief may be missing it; look at the trigger consumer (briefrail_consumer_\
         sessions_ended_total, the node's log), the broker's queue and dead-letter queue; \
         reconcile republishes it after reconcile.after_seconds",
        OWED_AFTER.as_secs()
    )
}

/// What to do about a matter out of retries (`status` and the node's log say these words; the matter's page the same in HTML).
pub fn exhausted_advice(firm: Uuid, matter: Uuid, max_attempts: u32) -> String {
    format!(
        "retries exhausted: the last {max_attempts} builds failed in a row (retry.max_attempts), so \
         nothing rebuilds this matter until a new demand; fix the cause the last run names, then \
         run `briefrail matter retry --firm {firm} --matter {matter}` (or press Retry in the console)"
    )
}

/// The overview's figures, from the ledger.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Overview {
    pub matters: Vec<(MatterState, i64)>,
    pub outbox_backlog: i64,
    pub oldest_unpublished_seconds: f64,
    pub dead_letters: i64,
    pub live_nodes: i64,
    /// Frames landed in the last minute, and per minute over the last fifteen.
    pub builds_last_minute: i64,
    pub builds_per_minute_15: f64,
}

impl Overview {
    pub fn count(&self, state: MatterState) -> i64 {
        self.matters
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n)
    }
}

pub async fn overview(conn: &mut AsyncPgConnection, max_attempts: u32) -> Result<Overview> {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = Text)]
        state: String,
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let counts: Vec<Count> = diesel::sql_query(format!(
        "SELECT {STATE_SQL} AS state, count(*) AS n
           FROM record.matters m
           LEFT JOIN ops.matter_frame_jobs j USING (firm_id, matter_id)
          GROUP BY 1"
    ))
    .bind::<Integer, _>(attempts(max_attempts))
    .load(conn)
    .await?;
    #[derive(diesel::QueryableByName)]
    struct Figures {
        #[diesel(sql_type = BigInt)]
        outbox_backlog: i64,
        #[diesel(sql_type = Double)]
        oldest_unpublished_seconds: f64,
        #[diesel(sql_type = BigInt)]
        dead_letters: i64,
        #[diesel(sql_type = BigInt)]
        live_nodes: i64,
        #[diesel(sql_type = BigInt)]
        builds_last_minute: i64,
        #[diesel(sql_type = BigInt)]
        builds_15: i64,
    }
    let f: Figures = diesel::sql_query(
        "SELECT
           (SELECT count(*) FROM ops.domain_event_outbox WHERE published_at IS NULL) AS outbox_backlog,
           coalesce((SELECT extract(epoch FROM ops.now() - min(created_at))::float8
                       FROM ops.domain_event_outbox WHERE published_at IS NULL), 0) AS oldest_unpublished_seconds,
           (SELECT count(*) FROM ops.dead_letters WHERE resolved_at IS NULL) AS dead_letters,
           (SELECT count(*) FROM ops.nodes n WHERE n.stopped_at IS NULL
               AND n.last_seen_at >= ops.now() - make_interval(secs => $1 * n.heartbeat_seconds)) AS live_nodes,
           (SELECT count(*) FROM ops.matter_frames WHERE created_at >= ops.now() - interval '1 minute') AS builds_last_minute,
           (SELECT count(*) FROM ops.matter_frames WHERE created_at >= ops.now() - interval '15 minutes') AS builds_15",
    )
    .bind::<Double, _>(super::presence::MISSED_HEARTBEATS)
    .get_result(conn)
    .await?;
    let mut matters = Vec::new();
    for state in MatterState::ALL {
        let n = counts
            .iter()
            .find(|c| c.state == state.as_str())
            .map_or(0, |c| c.n);
        matters.push((*state, n));
    }
    Ok(Overview {
        matters,
        outbox_backlog: f.outbox_backlog,
        oldest_unpublished_seconds: f.oldest_unpublished_seconds,
        dead_letters: f.dead_letters,
        live_nodes: f.live_nodes,
        builds_last_minute: f.builds_last_minute,
        builds_per_minute_15: f.builds_15 as f64 / 15.0,
    })
}

pub(super) fn attempts(max_attempts: u32) -> i32 {
    i32::try_from(max_attempts).unwrap_or(i32::MAX)
}

/// What to look for.
#[derive(Debug, Clone, Default)]
pub struct MatterQuery {
    pub firm_id: Option<Uuid>,
    /// A case-insensitive substring of the title.
    pub text: Option<String>,
    pub state: Option<MatterState>,
    pub limit: i64,
    pub offset: i64,
}

/// One matter in a list.
#[derive(Debug, Clone, Serialize, diesel::QueryableByName)]
pub struct MatterListing {
    #[diesel(sql_type = SqlUuid)]
    pub firm_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub matter_id: Uuid,
    #[diesel(sql_type = Text)]
    pub title: String,
    #[diesel(sql_type = Text)]
    #[serde(skip)]
    pub state_text: String,
    #[diesel(sql_type = BigInt)]
    pub requested_generation: i64,
    #[diesel(sql_type = BigInt)]
    pub landed_generation: i64,
    #[diesel(sql_type = Integer)]
    pub consecutive_failures: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub updated_at: Option<DateTime<Utc>>,
}

impl MatterListing {
    pub fn state(&self) -> MatterState {
        self.state_text.parse().unwrap_or(MatterState::Unserved)
    }
}

/// `%` and `_` in a search are letters, not wildcards.
pub(super) fn like_pattern(text: &str) -> String {
    let mut p = String::from("%");
    // Lowercased by Postgres (`lower($3)`), as the titles are: Rust's lowercase differs for
    // some letters.
    for c in text.trim().chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// The matters `q` selects by firm and title, each with its state (`state_text`), as the
/// subquery `s` that listing, counting and bulk retry all read, so a page's rows, its total and
/// "retry all matching" can never disagree. Binds `$1` (max attempts), `$2` (firm), `$3` (title
/// pattern); `WHERE_STATE` binds `$4`.
fn matching() -> String {
    format!(
        "(SELECT m.firm_id, m.matter_id, m.title, {STATE_SQL} AS state_text,
                 coalesce(j.requested_generation, 0) AS requested_generation,
                 coalesce(j.landed_generation, 0) AS landed_generation,
                 coalesce(j.consecutive_failures, 0) AS consecutive_failures,
                 j.updated_at
            FROM record.matters m
            LEFT JOIN ops.matter_frame_jobs j USING (firm_id, matter_id)
           WHERE ($2::uuid IS NULL OR m.firm_id = $2)
             AND ($3::text IS NULL OR lower(m.title) LIKE lower($3))) s"
    )
}

/// The state filter of [`matching`]'s rows.
const WHERE_STATE: &str = "($4::text IS NULL OR s.state_text = $4)";

/// The order matters are listed (and retried) in.
const ORDER: &str = "ORDER BY lower(s.title), s.firm_id, s.matter_id";

/// Checks a query's text: at most 200 characters, no NUL.
fn checked(q: &MatterQuery) -> Result<()> {
    if q.text.as_ref().is_some_and(|t| t.len() > 200) {
        return Err(Error::InvalidInput(
            "a search is at most 200 characters".into(),
        ));
    }
    if let Some(t) = &q.text {
        super::text::refuse_nul("a search", t)?;
    }
    Ok(())
}

/// Binds [`matching`]'s and [`WHERE_STATE`]'s parameters `$1` to `$4` onto `query`.
macro_rules! bind_matching {
    ($query:expr, $q:expr, $max_attempts:expr) => {
        $query
            .bind::<diesel::sql_types::Integer, _>($crate::ledger::matters::attempts($max_attempts))
            .bind::<diesel::sql_types::Nullable<diesel::sql_types::Uuid>, _>($q.firm_id)
            .bind::<diesel::sql_types::Nullable<diesel::sql_types::Text>, _>(
                $q.text
                    .as_deref()
                    .filter(|t| !t.trim().is_empty())
                    .map($crate::ledger::matters::like_pattern),
            )
            .bind::<diesel::sql_types::Nullable<diesel::sql_types::Text>, _>(
                $q.state.map(|s| s.as_str()),
            )
    };
}
pub(super) use bind_matching;

/// Matters matching `q`, by title. Returns at most `q.limit` rows and whether more follow.
pub async fn search(
    conn: &mut AsyncPgConnection,
    q: &MatterQuery,
    max_attempts: u32,
) -> Result<(Vec<MatterListing>, bool)> {
    checked(q)?;
    let limit = q.limit.clamp(1, 500);
    let mut rows: Vec<MatterListing> = bind_matching!(
        diesel::sql_query(format!(
            "SELECT * FROM {} WHERE {WHERE_STATE} {ORDER} LIMIT $5 OFFSET $6",
            matching()
        )),
        q,
        max_attempts
    )
    .bind::<BigInt, _>(limit + 1)
    .bind::<BigInt, _>(q.offset.max(0))
    .load(conn)
    .await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    Ok((rows, more))
}

/// How many matters match `q` (its limit and offset aside): the total a page shows.
pub async fn count(
    conn: &mut AsyncPgConnection,
    q: &MatterQuery,
    max_attempts: u32,
) -> Result<i64> {
    checked(q)?;
    let n: Count = bind_matching!(
        diesel::sql_query(format!(
            "SELECT count(*) AS n FROM {} WHERE {WHERE_STATE}",
            matching()
        )),
        q,
        max_attempts
    )
    .get_result(conn)
    .await?;
    Ok(n.n)
}

/// A `count(*) AS n`.
#[derive(diesel::QueryableByName)]
pub(super) struct Count {
    #[diesel(sql_type = BigInt)]
    pub(super) n: i64,
}

/// The state of one matter (`None`: no such matter in the record).
pub async fn state_of(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    max_attempts: u32,
) -> Result<Option<MatterState>> {
    #[derive(diesel::QueryableByName)]
    struct S {
        #[diesel(sql_type = Text)]
        state: String,
    }
    let rows: Vec<S> = diesel::sql_query(format!(
        "SELECT {STATE_SQL} AS state
           FROM record.matters m
           LEFT JOIN ops.matter_frame_jobs j USING (firm_id, matter_id)
          WHERE m.firm_id = $2 AND m.matter_id = $3"
    ))
    .bind::<Integer, _>(attempts(max_attempts))
    .bind::<SqlUuid, _>(firm_id)
    .bind::<SqlUuid, _>(matter_id)
    .load(conn)
    .await?;
    Ok(rows.into_iter().next().and_then(|s| s.state.parse().ok()))
}

/// The titles of the given matters (the overview's run tables name matters by title).
pub async fn titles(
    conn: &mut AsyncPgConnection,
    keys: &[(Uuid, Uuid)],
) -> Result<std::collections::HashMap<(Uuid, Uuid), String>> {
    #[derive(diesel::QueryableByName)]
    struct T {
        #[diesel(sql_type = SqlUuid)]
        firm_id: Uuid,
        #[diesel(sql_type = SqlUuid)]
        matter_id: Uuid,
        #[diesel(sql_type = Text)]
        title: String,
    }
    if keys.is_empty() {
        return Ok(Default::default());
    }
    let (firms, matters): (Vec<Uuid>, Vec<Uuid>) = keys.iter().copied().unzip();
    let rows: Vec<T> = diesel::sql_query(
        "SELECT m.firm_id, m.matter_id, m.title
           FROM unnest($1::uuid[], $2::uuid[]) AS k(firm_id, matter_id)
           JOIN record.matters m USING (firm_id, matter_id)",
    )
    .bind::<diesel::sql_types::Array<SqlUuid>, _>(firms)
    .bind::<diesel::sql_types::Array<SqlUuid>, _>(matters)
    .load(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|t| ((t.firm_id, t.matter_id), t.title))
        .collect())
}

/// One of a matter's recent events, as the ledger has it.
#[derive(Debug, Clone, Serialize, diesel::QueryableByName)]
pub struct EventLine {
    #[diesel(sql_type = SqlUuid)]
    pub event_id: Uuid,
    #[diesel(sql_type = Text)]
    pub event_name: String,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub published_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub consumed_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    pub traceparent: Option<String>,
}

/// A matter's latest events, newest first, with when the trigger consumed each.
pub async fn events_of(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    limit: i64,
) -> Result<Vec<EventLine>> {
    Ok(diesel::sql_query(
        "SELECT o.event_id, o.event_name, o.created_at, o.published_at, c.consumed_at, o.traceparent
           FROM ops.domain_event_outbox o
           LEFT JOIN ops.consumed_events c ON c.consumer = $3 AND c.event_id = o.event_id
          WHERE o.firm_id = $1 AND o.matter_id = $2
          ORDER BY o.seq DESC
          LIMIT $4",
    )
    .bind::<SqlUuid, _>(firm_id)
    .bind::<SqlUuid, _>(matter_id)
    .bind::<Text, _>(BRIEF_RAIL)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// **retry** a matter whose retries ran out (or that is failing): one transaction that checks
/// its state, under the row's lock (so the check sees no claim landing meanwhile), and records
/// `brief.requested`, a new demand that restarts its retries when the trigger consumes it
/// (`ops.demand` sets `consecutive_failures = 0`). Two retries pressed at once both record a
/// demand (harmless: demands coalesce). Refused (a conflict naming the state) for a matter with
/// nothing to retry; an unknown matter is not found.
pub async fn retry(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    max_attempts: u32,
) -> Result<Uuid> {
    conn.transaction(async move |tx| {
        diesel::sql_query(
            "SELECT 1 FROM ops.matter_frame_jobs WHERE firm_id = $1 AND matter_id = $2 FOR UPDATE",
        )
        .bind::<SqlUuid, _>(firm_id)
        .bind::<SqlUuid, _>(matter_id)
        .execute(tx)
        .await?;
        match state_of(tx, firm_id, matter_id, max_attempts).await? {
            None => Err(Error::NotFound(format!(
                "matter {matter_id} of firm {firm_id}"
            ))),
            Some(MatterState::RetriesExhausted | MatterState::Failed) => {
                super::facts::request_brief(tx, firm_id, matter_id).await
            }
            Some(other) => Err(Error::Conflict(format!(
                "matter {matter_id} is {}: nothing to retry (ask for a rebuild instead)",
                other.label()
            ))),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_sql_names_the_trigger_and_the_owed_threshold() {
        assert!(STATE_SQL.contains(&format!("c.consumer = '{BRIEF_RAIL}'")));
        assert!(STATE_SQL.contains(&format!("interval '{} seconds'", OWED_AFTER.as_secs())));
    }
}
