//! Reads of the ledger: what `briefrail status`, the HTTP API and the tests look at.
//! Reads never change state and take no locks.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::models::{FrameMeta, FrameRow, JobRow, RunRow};
use super::states::RunOutcome;
use crate::error::Result;
use crate::schema::ops;

/// The matter's job row (its demand, its claim, its last landed token), if it has one.
pub async fn job(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<Option<JobRow>> {
    use ops::matter_frame_jobs::dsl as j;
    Ok(j::matter_frame_jobs
        .filter(j::firm_id.eq(firm_id).and(j::matter_id.eq(matter_id)))
        .select(JobRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The most recent runs of a matter, newest first.
pub async fn runs(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    limit: i64,
) -> Result<Vec<RunRow>> {
    use ops::matter_frame_runs::dsl as r;
    Ok(r::matter_frame_runs
        .filter(r::firm_id.eq(firm_id).and(r::matter_id.eq(matter_id)))
        .order(r::token.desc())
        .limit(limit)
        .select(RunRow::as_select())
        .load(conn)
        .await?)
}

#[cfg(feature = "testing")]
pub async fn run(conn: &mut AsyncPgConnection, run_id: Uuid) -> Result<Option<RunRow>> {
    use ops::matter_frame_runs::dsl as r;
    Ok(r::matter_frame_runs
        .filter(r::run_id.eq(run_id))
        .select(RunRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The trace context each of `event_ids` was recorded with, oldest event first (outbox order;
/// `None`: recorded without one). What a build's span links to: the first is the demand that
/// caused the build. Events retention already removed are simply absent.
pub async fn event_traceparents(
    conn: &mut AsyncPgConnection,
    event_ids: &[Uuid],
) -> Result<Vec<(Uuid, Option<String>)>> {
    use ops::domain_event_outbox::dsl as o;
    Ok(o::domain_event_outbox
        .filter(o::event_id.eq_any(event_ids))
        .order(o::seq.asc())
        .select((o::event_id, o::traceparent))
        .load(conn)
        .await?)
}

/// The frame a token landed, if it did.
pub async fn frame_meta(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    token: i64,
) -> Result<Option<FrameMeta>> {
    use ops::matter_frames::dsl as f;
    Ok(f::matter_frames
        .filter(
            f::firm_id
                .eq(firm_id)
                .and(f::matter_id.eq(matter_id))
                .and(f::generation.eq(token)),
        )
        .select(FrameMeta::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The latest landed frame of a matter, with its body: the current Brief.
pub async fn latest_frame(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<Option<FrameRow>> {
    use ops::matter_frames::dsl as f;
    Ok(f::matter_frames
        .filter(f::firm_id.eq(firm_id).and(f::matter_id.eq(matter_id)))
        .order(f::generation.desc())
        .select(FrameRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// The latest landed frame's metadata.
pub async fn latest_frame_meta(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<Option<FrameMeta>> {
    use ops::matter_frames::dsl as f;
    Ok(f::matter_frames
        .filter(f::firm_id.eq(firm_id).and(f::matter_id.eq(matter_id)))
        .order(f::generation.desc())
        .select(FrameMeta::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Every frame of a matter in landing order (oldest first).
pub async fn frames(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<Vec<FrameMeta>> {
    use ops::matter_frames::dsl as f;
    Ok(f::matter_frames
        .filter(f::firm_id.eq(firm_id).and(f::matter_id.eq(matter_id)))
        .order(f::created_at.asc())
        .then_order_by(f::generation.asc())
        .select(FrameMeta::as_select())
        .load(conn)
        .await?)
}

/// One matter as an operator sees it.
#[derive(Debug, Clone, Serialize)]
pub struct MatterStatus {
    /// The matter's job row, if any.
    pub job: Option<JobRow>,
    /// `landed_generation < requested_generation`.
    pub unserved: bool,
    /// The latest runs, newest first.
    pub runs: Vec<RunRow>,
    /// The latest frame's metadata, if one landed.
    pub latest_frame: Option<FrameMeta>,
}

/// What an operator asks about a matter: its job, its latest runs and frame.
pub async fn status(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    run_limit: i64,
) -> Result<MatterStatus> {
    let job = job(conn, firm_id, matter_id).await?;
    let runs = runs(conn, firm_id, matter_id, run_limit).await?;
    let latest_frame = latest_frame_meta(conn, firm_id, matter_id).await?;
    Ok(MatterStatus {
        unserved: job.as_ref().is_some_and(JobRow::unserved),
        job,
        runs,
        latest_frame,
    })
}

/// Fleet-wide figures for `/metrics` and the status page, read from the ledger (so every node
/// reports the same truth).
#[derive(Debug, Clone, Default, Serialize, diesel::QueryableByName)]
pub struct LedgerGauges {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub outbox_backlog: i64,
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub oldest_unpublished_seconds: f64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub unserved_matters: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub running_builds: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub failed_matters: i64,
    /// Events reconcile republished [`super::outbox::REPUBLISH_CAP`] times that the trigger
    /// still has not consumed: facts that may be missing from a Brief. Alert on any.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub stranded_events: i64,
    /// Published facts recorded over [`super::matters::OWED_AFTER`] ago that the trigger has
    /// not consumed: facts a Brief may be missing while its matter looks served. Alert on a
    /// value that stays above 0.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub owed_facts: i64,
    /// Age of the oldest of them (0: none): how long the longest-waiting upload has waited.
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub oldest_owed_seconds: f64,
    /// Age of the oldest outbox row kept (0: none): what retention.events_days bounds, apart
    /// from unpublished and unconsumed facts, which are never removed.
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub oldest_event_seconds: f64,
    /// Age of the oldest run kept (0: none): what retention.runs_days bounds, apart from each
    /// matter's latest run.
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub oldest_run_seconds: f64,
}

pub async fn gauges(conn: &mut AsyncPgConnection) -> Result<LedgerGauges> {
    Ok(diesel::sql_query(
        "SELECT
           (SELECT count(*) FROM ops.domain_event_outbox WHERE published_at IS NULL) AS outbox_backlog,
           coalesce((SELECT extract(epoch FROM ops.now() - min(created_at))::float8
                       FROM ops.domain_event_outbox WHERE published_at IS NULL), 0) AS oldest_unpublished_seconds,
           (SELECT count(*) FROM ops.matter_frame_jobs j WHERE landed_generation < requested_generation
                                                         AND NOT ops.is_archived(j.firm_id, j.matter_id)) AS unserved_matters,
           (SELECT count(*) FROM ops.matter_frame_jobs WHERE run_status = 'running') AS running_builds,
           (SELECT count(*) FROM ops.matter_frame_jobs j WHERE run_status = 'failed'
                                                         AND landed_generation < requested_generation
                                                         AND NOT ops.is_archived(j.firm_id, j.matter_id)) AS failed_matters,
           (SELECT count(*) FROM ops.domain_event_outbox e
             WHERE e.republish_count >= $1 AND e.published_at IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM ops.consumed_events c
                                WHERE c.consumer = $2 AND c.event_id = e.event_id)) AS stranded_events,
           owed.n AS owed_facts, owed.oldest AS oldest_owed_seconds,
           coalesce((SELECT extract(epoch FROM ops.now() - created_at)::float8
                       FROM ops.domain_event_outbox ORDER BY seq LIMIT 1), 0) AS oldest_event_seconds,
           coalesce((SELECT extract(epoch FROM ops.now() - started_at)::float8
                       FROM ops.matter_frame_runs ORDER BY started_at LIMIT 1), 0) AS oldest_run_seconds
         FROM (SELECT count(*) AS n,
                      coalesce(extract(epoch FROM ops.now() - min(e.created_at))::float8, 0) AS oldest
                 FROM ops.domain_event_outbox e
                -- Published ones only (the unpublished are the outbox backlog's), within the
                -- reconcile window: the published_at index bounds the scan.
                WHERE e.published_at > ops.now() - make_interval(secs => $4)
                  AND e.created_at < ops.now() - make_interval(secs => $3)
                  AND NOT EXISTS (SELECT 1 FROM ops.consumed_events c
                                   WHERE c.consumer = $2 AND c.event_id = e.event_id)) owed",
    )
    .bind::<diesel::sql_types::Integer, _>(super::outbox::REPUBLISH_CAP)
    .bind::<diesel::sql_types::Text, _>(super::models::BRIEF_RAIL)
    .bind::<diesel::sql_types::Double, _>(super::matters::OWED_AFTER.as_secs_f64())
    .bind::<diesel::sql_types::Double, _>(super::outbox::RECONCILE_WINDOW.as_secs_f64())
    .get_result(conn)
    .await?)
}

/// Recent runs with one of `outcomes`, newest first (the status page).
pub async fn recent_runs(
    conn: &mut AsyncPgConnection,
    outcomes: &[RunOutcome],
    limit: i64,
) -> Result<Vec<RunRow>> {
    use ops::matter_frame_runs::dsl as r;
    Ok(r::matter_frame_runs
        .filter(r::outcome.eq_any(outcomes))
        .order(r::started_at.desc())
        .limit(limit)
        .select(RunRow::as_select())
        .load(conn)
        .await?)
}
