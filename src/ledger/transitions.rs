//! The transitions of the protocol (`docs/protocol.md`), one SQL statement each.
//!
//! Each statement is a SQL function of the same name (its text as it runs:
//! `src/ledger/live/<name>.sql`), called through its builder in `ledger::sql` (prepared once per
//! session); this module and [`super::commit`] are their only callers, `docs/protocol.md`
//! describes each, and `tests/model/ledger.rs` mirrors each statement in the
//! model check. Each reads time only through the ledger clock (`ops.now()`, `ops.clock()`:
//! [`super::clock`]), which only tests move. Every function takes
//! `&mut AsyncPgConnection` and runs in its own short autocommit transaction, except
//! [`commit`], which opens the one transaction the protocol allows: the compare-and-swap, the
//! frame insert and the embedding application's own writes.
//!
//! A claim's identity is its token *and* its run id: every fenced statement compares both, so
//! a token number handed out twice (a restore that lost the last claims) still fences the old
//! holder. The lease is the claimer's, written on the row as a deadline.

use std::time::Duration;

use diesel::sql_types::{BigInt, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

pub use super::commit::Landed;
#[cfg(feature = "testing")]
pub use super::commit::{Commit, ExtraWrites, Frame, commit, settle};
use super::models::Claim;
use super::sql::{self, Flag, Number, Numbers, bounded};
use super::states::{ClaimKind, RunStatus};
use crate::db::Pool;
use crate::db::batch::Batcher;
use crate::error::{Error, Result};

/// What a claim needs to know besides the matter.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    /// The claimer's lease: the claim writes `ops.now() + lease` on the row as its deadline, and
    /// every heartbeat renews it by the same length. Other nodes compare with the row, never
    /// with their own setting.
    pub lease: Duration,
    /// Recorded on the run: which process holds the claim.
    pub node_id: String,
    /// Trace id of the demand(s) this build serves, recorded on the run.
    pub trace_id: Option<String>,
    /// Event ids of the coalesced demands this build serves, recorded on the run.
    pub event_ids: Vec<Uuid>,
    /// A new demand, or serving the demands already recorded (the trigger's and every retry's
    /// claim: without it, every node that heard a burst would add its own follow-up).
    pub kind: ClaimKind,
    /// With [`ClaimKind::ServeRecorded`]: a row that has failed this many times
    /// in a row is not claimed, whoever nudged (reconcile, the sweeper after a lease expired, a
    /// late nudge): retries stop until a new demand restarts them. The retry policy's
    /// `max_attempts`. A plain claim is a new demand and ignores it.
    pub max_attempts: u32,
}

/// How failing builds are retried (config section `retry`).
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl From<&crate::config::RetrySettings> for RetryPolicy {
    fn from(s: &crate::config::RetrySettings) -> Self {
        Self {
            max_attempts: s.max_attempts,
            backoff_base: crate::config::seconds(s.backoff_base_seconds),
            backoff_max: crate::config::seconds(s.backoff_max_seconds),
        }
    }
}

/// **demand**: bump the dispenser; mid-build, leave the breadcrumb. Returns the new
/// `requested_generation`, the number a landed frame must reach to serve this demand.
pub async fn demand(conn: &mut AsyncPgConnection, firm_id: Uuid, matter_id: Uuid) -> Result<i64> {
    let r = sql::demand(firm_id, matter_id, None)
        .get_result::<Number>(conn)
        .await?;
    r.number
        .ok_or_else(|| Error::internal("a demand without an event came back covered"))
}

/// **demand** for an event recorded by transaction `xact` (the outbox row's `xact_id`).
/// `None`: the running claim's build, or the build that landed last, was claimed after that
/// transaction committed, so it reads the fact already: the demand is covered and changes
/// nothing.
#[cfg(feature = "testing")]
pub async fn demand_for_event(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    xact: i64,
) -> Result<Option<i64>> {
    let r = sql::demand(firm_id, matter_id, Some(xact))
        .get_result::<Number>(conn)
        .await?;
    Ok(r.number)
}

/// **claim**: the seed's conditional upsert. `Some(claim)` is the winner's token; `None`
/// means a live build holds the matter and this demand is not yet recorded: call
/// [`record_lost_claim`] (or use [`claim_or_record`], which does the whole dance).
pub async fn claim(conn: &mut AsyncPgConnection, req: &ClaimRequest) -> Result<Option<Claim>> {
    claim_as(conn, req, Uuid::new_v4()).await
}

/// [`claim`] with the run id the caller chose (so it can find its claim again).
async fn claim_as(
    conn: &mut AsyncPgConnection,
    req: &ClaimRequest,
    run_id: Uuid,
) -> Result<Option<Claim>> {
    let token = sql::claim(
        req.firm_id,
        req.matter_id,
        req.lease.as_secs_f64(),
        run_id,
        &req.node_id,
        req.trace_id.as_deref(),
        &req.event_ids,
        req.kind.only_unserved(),
        i32::try_from(req.max_attempts).unwrap_or(i32::MAX),
    )
    .get_result::<Number>(conn)
    .await?;
    Ok(token.number.map(|token| Claim {
        firm_id: req.firm_id,
        matter_id: req.matter_id,
        token,
        run_id,
    }))
}

/// **lost claim**: record the loser's demand on the running row. `Some(requested_generation)`
/// when recorded; `None` when the row is no longer running (claim again).
pub async fn record_lost_claim(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<Option<i64>> {
    let r = sql::record_lost_claim(firm_id, matter_id)
        .get_result::<Number>(conn)
        .await?;
    Ok(r.number)
}

/// The result of [`claim_or_record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This caller holds the matter; build it and commit with the claim's token.
    Won(Claim),
    /// A live build holds the matter; this demand is recorded on its row (`rebuild_needed`), so
    /// the build's commit will re-claim for it.
    Recorded { requested_generation: i64 },
    /// Only with [`ClaimKind::ServeRecorded`]: every demand is already served.
    Served,
    /// Only with [`ClaimKind::ServeRecorded`]: the matter failed `max_attempts` times in a
    /// row; it waits for a new demand (the row shows it as unserved and failed).
    RetriesExhausted { consecutive_failures: i32 },
    /// The record says the matter is archived: the rail builds it no more, on any node.
    Archived,
}

/// **claim**, then the **lost-claim loop**: claim; if a build is running, record the demand on
/// it; if that finds the build finished in between, claim again. Every call either wins or
/// leaves its demand on the row: none is dropped in the window between the two statements.
#[cfg(feature = "testing")]
pub async fn claim_or_record(
    conn: &mut AsyncPgConnection,
    req: &ClaimRequest,
) -> Result<ClaimOutcome> {
    claim_or_record_after(conn, req, None).await
}

/// [`claim_or_record`] whose first claim was already made (in a batch: [`claim_batch`]) and
/// answered `first`; `None` makes it here.
pub async fn claim_or_record_after(
    conn: &mut AsyncPgConnection,
    req: &ClaimRequest,
    mut first: Option<Option<Claim>>,
) -> Result<ClaimOutcome> {
    // Each lap needs a build to start *and* finish between our two statements; a bound only
    // guards against a bug turning this into a spin.
    for _ in 0..1000 {
        let won = match first.take() {
            Some(answer) => answer,
            None => claim(conn, req).await?,
        };
        if let Some(c) = won {
            return Ok(ClaimOutcome::Won(c));
        }
        if super::facts::is_archived(conn, req.firm_id, req.matter_id).await? {
            return Ok(ClaimOutcome::Archived);
        }
        if req.kind == ClaimKind::ServeRecorded {
            // Not claimed: either a live build holds the matter (and the demand is on its row)
            // or every demand is served. Anything else changed in between: claim again.
            match super::reads::job(conn, req.firm_id, req.matter_id).await? {
                Some(j) if j.run_status == RunStatus::Running => {
                    return Ok(ClaimOutcome::Recorded {
                        requested_generation: j.requested_generation,
                    });
                }
                Some(j) if !j.unserved() => return Ok(ClaimOutcome::Served),
                Some(j) if i64::from(j.consecutive_failures) >= i64::from(req.max_attempts) => {
                    return Ok(ClaimOutcome::RetriesExhausted {
                        consecutive_failures: j.consecutive_failures,
                    });
                }
                _ => continue,
            }
        }
        if let Some(requested_generation) =
            record_lost_claim(conn, req.firm_id, req.matter_id).await?
        {
            return Ok(ClaimOutcome::Recorded {
                requested_generation,
            });
        }
    }
    Err(Error::internal(format!(
        "claim of matter {} did not settle after 1000 rounds",
        req.matter_id
    )))
}

/// **claim** for many matters in one statement and one transaction (`ops.claim_batch`, one
/// set-based statement; `ops.claim` is the same statement with one member): each member's
/// compare-and-swap is a condition on its own row with its own arguments, so each decides for
/// itself, and element `i` answers `reqs[i]` as [`claim`] would. The members lock their rows in
/// the global `(firm_id, matter_id)` order. Callers send distinct matters (a node claims a
/// matter once at a time); a repeated one answers as a second claim after the first would.
#[cfg(feature = "testing")]
pub async fn claim_batch(
    conn: &mut AsyncPgConnection,
    reqs: &[ClaimRequest],
) -> Result<Vec<Option<Claim>>> {
    let run_ids: Vec<Uuid> = reqs.iter().map(|_| Uuid::new_v4()).collect();
    claim_batch_as(conn, reqs, &run_ids).await
}

/// [`claim_batch`] with the members' run ids chosen by the caller, so that a batch whose
/// answer was lost can be found again ([`claims_held`]).
async fn claim_batch_as(
    conn: &mut AsyncPgConnection,
    reqs: &[ClaimRequest],
    run_ids: &[Uuid],
) -> Result<Vec<Option<Claim>>> {
    if let ([one], [run_id]) = (reqs, run_ids) {
        // A batch of one is the claim itself (its arguments need no arrays).
        return Ok(vec![claim_as(conn, one, *run_id).await?]);
    }
    if reqs.is_empty() {
        return Ok(Vec::new());
    }
    // An array of arrays must be rectangular in SQL: each member's event ids travel as the
    // literal of a uuid[] (hex and dashes only, nothing to escape).
    let event_ids: Vec<String> = reqs
        .iter()
        .map(|r| {
            let ids: Vec<String> = r.event_ids.iter().map(Uuid::to_string).collect();
            format!("{{{}}}", ids.join(","))
        })
        .collect();
    let tokens = sql::claim_batch(
        reqs.iter().map(|r| r.firm_id).collect::<Vec<_>>(),
        reqs.iter().map(|r| r.matter_id).collect::<Vec<_>>(),
        reqs.iter()
            .map(|r| r.lease.as_secs_f64())
            .collect::<Vec<_>>(),
        run_ids,
        reqs.iter().map(|r| r.node_id.as_str()).collect::<Vec<_>>(),
        reqs.iter()
            .map(|r| r.trace_id.as_deref())
            .collect::<Vec<_>>(),
        event_ids,
        reqs.iter()
            .map(|r| r.kind.only_unserved())
            .collect::<Vec<_>>(),
        reqs.iter()
            .map(|r| i32::try_from(r.max_attempts).unwrap_or(i32::MAX))
            .collect::<Vec<_>>(),
    )
    .get_result::<Numbers>(conn)
    .await?
    .numbers;
    if tokens.len() != reqs.len() {
        return Err(Error::internal(format!(
            "ops.claim_batch answered {} of {} claims",
            tokens.len(),
            reqs.len()
        )));
    }
    Ok(reqs
        .iter()
        .zip(run_ids.iter().copied())
        .zip(tokens)
        .map(|((r, run_id), token)| {
            token.map(|token| Claim {
                firm_id: r.firm_id,
                matter_id: r.matter_id,
                token,
                run_id,
            })
        })
        .collect())
}

/// A node's claims asked for while earlier ones are on the wire go in one [`claim_batch`]
/// ([`crate::db::batch`]). A batch whose statement failed is settled from the ledger before
/// anyone acts: its members' run ids are known, so each claim that did commit (the answer lost
/// with the connection) is answered as won, and every other member as not claimed (its caller
/// goes on alone, as after a lost claim). Only when even that read fails is a member left
/// without an answer ([`crate::db::batch::Unanswered`]); it then claims alone, and a claim of
/// its that had committed waits out its lease, as a single claim's lost answer always did.
pub type ClaimQueue = Batcher<ClaimRequest, Option<Claim>>;

/// Starts a [`ClaimQueue`] on the current thread: `lanes` batches in flight, each on a pooled
/// connection, at most `max` claims each.
pub fn claims_in_batches(pool: Pool, lanes: usize, max: usize) -> ClaimQueue {
    Batcher::start(lanes, max, move |reqs: Vec<ClaimRequest>| {
        let pool = pool.clone();
        async move {
            let run_ids: Vec<Uuid> = reqs.iter().map(|_| Uuid::new_v4()).collect();
            let answers = async {
                let mut conn = pool.get().await?;
                claim_batch_as(&mut conn, &reqs, &run_ids).await
            };
            match answers.await {
                Ok(answers) => answers,
                Err(e) => {
                    tracing::debug!(members = reqs.len(), error = %e, "a claim batch failed; settling it from the ledger");
                    let held = async {
                        let mut conn = pool.get().await?;
                        claims_held(&mut conn, &reqs, &run_ids).await
                    };
                    held.await.unwrap_or_default()
                }
            }
        }
    })
}

/// The claims of `run_ids` (member `i` asked with `run_ids[i]`) that hold their rows: what a
/// claim batch whose answer was lost did.
async fn claims_held(
    conn: &mut AsyncPgConnection,
    reqs: &[ClaimRequest],
    run_ids: &[Uuid],
) -> Result<Vec<Option<Claim>>> {
    use crate::schema::ops::matter_frame_jobs::dsl as j;
    use diesel::{ExpressionMethods, QueryDsl};
    let held: Vec<(Option<Uuid>, i64)> = j::matter_frame_jobs
        .filter(j::claimed_run_id.eq_any(run_ids))
        .filter(j::run_status.eq(RunStatus::Running))
        .select((j::claimed_run_id, j::claimed_generation))
        .load(conn)
        .await?;
    Ok(reqs
        .iter()
        .zip(run_ids)
        .map(|(r, run_id)| {
            held.iter()
                .find(|(id, _)| *id == Some(*run_id))
                .map(|(_, token)| Claim {
                    firm_id: r.firm_id,
                    matter_id: r.matter_id,
                    token: *token,
                    run_id: *run_id,
                })
        })
        .collect())
}

/// **heartbeat**: renew the lease, fenced by token. `Err(Fenced)`: stop building now.
pub async fn heartbeat(conn: &mut AsyncPgConnection, claim: &Claim) -> Result<()> {
    let current = sql::heartbeat(claim.firm_id, claim.matter_id, claim.token, claim.run_id)
        .get_result::<Flag>(conn)
        .await?;
    still_current(current, claim)
}

/// A fenced statement's answer: the claim was current (done), or a newer one holds the row.
fn still_current(current: Flag, claim: &Claim) -> Result<()> {
    if current.flag {
        Ok(())
    } else {
        Err(claim.fenced())
    }
}

/// **fail**: the build ended without a frame. Fenced by token; sets the backoff; the run is
/// closed as `failed` (or `fenced` when the token was stale, which returns `Err(Fenced)`).
/// `permanent` failures (bad input, SQLSTATE 23514) are not retried until a new demand.
pub async fn fail(
    conn: &mut AsyncPgConnection,
    claim: &Claim,
    error: &str,
    permanent: bool,
    policy: &RetryPolicy,
) -> Result<()> {
    let current = sql::fail_claim(
        claim.firm_id,
        claim.matter_id,
        claim.token,
        claim.run_id,
        bounded(error),
        permanent,
        policy.max_attempts.min(i32::MAX as u32) as i32,
        policy.backoff_base.as_secs_f64(),
        policy.backoff_max.as_secs_f64(),
    )
    .get_result::<Flag>(conn)
    .await?;
    still_current(current, claim)
}

/// **release**: a node shutting down hands its claim back, fenced by token, so another node
/// can take the matter at once. Not counted as a failure.
pub async fn release(conn: &mut AsyncPgConnection, claim: &Claim, reason: &str) -> Result<()> {
    let current = sql::release_claim(
        claim.firm_id,
        claim.matter_id,
        claim.token,
        claim.run_id,
        bounded(reason),
    )
    .get_result::<Flag>(conn)
    .await?;
    still_current(current, claim)
}

/// Records a run as `fenced` (its commit or heartbeat was refused). Returns whether the run
/// was still open.
pub async fn record_fenced(conn: &mut AsyncPgConnection, run_id: Uuid, why: &str) -> Result<bool> {
    let open = sql::record_fenced(run_id, bounded(why))
        .get_result::<Flag>(conn)
        .await?;
    Ok(open.flag)
}

/// A matter whose claim the sweep failed, or that reconcile found unserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, diesel::QueryableByName)]
pub struct MatterRef {
    #[diesel(sql_type = SqlUuid)]
    pub firm_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    pub matter_id: Uuid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, diesel::QueryableByName)]
struct SweptRow {
    #[diesel(sql_type = SqlUuid)]
    firm_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    matter_id: Uuid,
    #[diesel(sql_type = BigInt)]
    token: i64,
}

/// **sweep**: fail every running row whose own deadline has passed (the claimer's lease, on the
/// row: this node's `lease.seconds` plays no part), at most `limit`, closing its run as
/// `lease_expired`. Returns the matters and the tokens that were swept, to nudge.
pub async fn sweep(conn: &mut AsyncPgConnection, limit: u32) -> Result<Vec<(MatterRef, i64)>> {
    let rows: Vec<SweptRow> = sql::sweep(limit.min(i32::MAX as u32) as i32)
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                MatterRef {
                    firm_id: r.firm_id,
                    matter_id: r.matter_id,
                },
                r.token,
            )
        })
        .collect())
}

/// **reconcile**: matters with unserved demand that nobody is building, past their backoff and
/// below the retry limit, untouched for `quiet` (at most `limit`).
pub async fn unserved(
    conn: &mut AsyncPgConnection,
    max_attempts: u32,
    limit: u32,
    quiet: Duration,
) -> Result<Vec<MatterRef>> {
    Ok(sql::unserved(
        max_attempts.min(i32::MAX as u32) as i32,
        limit.min(i32::MAX as u32) as i32,
        quiet.as_secs_f64(),
    )
    .load(conn)
    .await?)
}
