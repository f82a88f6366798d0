//! **commit**: the one transaction the protocol allows, and the one home of *settling* it.
//!
//! A commit is the compare-and-swap on the claim's identity, the frame insert and the embedding
//! application's extra writes, in one transaction (without extra writes, the first two are one
//! statement: `ops.commit_frame`). Its outcome can be unknown to the caller only when the error
//! came *at* COMMIT (the server may have committed and the answer been lost); any error before
//! COMMIT rolled the transaction back. An unknown outcome is settled by
//! reading the ledger (the frame this claim's run would have landed, and the follow-up run the
//! commit would have opened), never by building again blindly.
//!
//! A [`Commit`] keeps the follow-up's run id fixed across its attempts, so a retry after an
//! unknown outcome that finds the token moved on can tell "an earlier attempt of mine landed
//! (and here is the follow-up claim it made)" from "another build superseded me". The builder
//! only asks and retries; this module decides what happened.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use diesel::{ExpressionMethods, OptionalExtension, QueryDsl};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use futures_util::future::BoxFuture;
use uuid::Uuid;

use super::models::Claim;
use super::sql::{self, Flag, Number, Numbers, Refusal, bounded};
use super::states::RunOutcome;
use crate::db::Pool;
use crate::db::batch::{Batcher, Unanswered};
use crate::db::flight::{self, Flight};
use crate::error::{Error, Result};
use crate::schema::ops;

/// Writes an embedding application adds to the fenced commit: they run inside the commit's
/// transaction after the compare-and-swap succeeded, so they land only if the token is current
/// and roll back with the frame otherwise.
/// It may be called more than once if a commit is retried after a transient error (each call
/// in a fresh transaction), so it must not consume its inputs.
pub type ExtraWrites = Box<
    dyn for<'c> Fn(&'c mut AsyncPgConnection, Claim) -> BoxFuture<'c, Result<()>> + Send + Sync,
>;

/// What a build produced.
pub struct Frame {
    /// The Brief (or any derived artifact) as JSON; stored in `ops.matter_frames.body`.
    pub body: serde_json::Value,
    /// The embedding application's own writes, fenced with the frame.
    pub extra: Option<ExtraWrites>,
}

impl Frame {
    /// A frame with this body.
    pub fn new(body: serde_json::Value) -> Self {
        Self { body, extra: None }
    }
    /// Adds the application's own writes, run inside the fenced commit: they land only if the
    /// token is current, in the frame's transaction.
    pub fn with_extra(mut self, extra: ExtraWrites) -> Self {
        self.extra = Some(extra);
        self
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("body", &self.body)
            .field("extra", &self.extra.is_some())
            .finish()
    }
}

/// What a landed commit left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// The frame landed and no demand was pending: the row is idle.
    Idle,
    /// The frame landed and demands had piled up during the build: the commit re-claimed the
    /// matter in the same statement. Build again, at once, with this claim.
    FollowUp(Claim),
}

/// The commit of one claim, over as many attempts as the caller makes.
#[derive(Debug)]
pub struct Commit {
    claim: Claim,
    node_id: String,
    /// The run id a follow-up claim gets: the same for every attempt, so any attempt's
    /// follow-up can be found again.
    next_run_id: Uuid,
    attempts: u32,
    /// Where a frame without extra writes is committed ([`commits_in_batches`]); `None`: alone.
    queue: Option<CommitQueue>,
}

impl std::fmt::Debug for CommitQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitQueue")
    }
}

impl Commit {
    pub fn new(claim: Claim, node_id: &str) -> Self {
        Self {
            claim,
            node_id: node_id.to_owned(),
            next_run_id: Uuid::new_v4(),
            attempts: 0,
            queue: None,
        }
    }

    /// Commits a frame without extra writes together with the others ready at the same time
    /// (one transaction, each compare-and-swap deciding for its own row). Frames with extra
    /// writes always commit alone: the application's writes need the transaction to themselves.
    pub fn in_batches(mut self, queue: Option<CommitQueue>) -> Self {
        self.queue = queue;
        self
    }

    /// How many attempts were made.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// One attempt. `Err(Fenced)` when the claim is stale and no attempt of this commit landed:
    /// nothing was written, and the run is recorded `fenced`. `Err(FrameRefused)` when the
    /// database refused the frame's body (its SQLSTATE says why): fail the claim, retrying
    /// cannot help. Any other error left nothing behind (it came before COMMIT, or it came at
    /// COMMIT and the ledger shows the commit did not happen): the caller may attempt again.
    pub async fn attempt(&mut self, pool: &Pool, frame: &Frame) -> Result<Landed> {
        self.attempts += 1;
        let reached_commit = Arc::new(AtomicBool::new(false));
        // jsonb is parsed from text inside ops.insert_frame, where a refusal keeps its SQLSTATE.
        let body = serde_json::to_string(&frame.body)
            .map_err(|e| Error::internal_from("the frame is not serialisable", e))?;
        let result = match self.in_a_batch(frame, &body, &reached_commit).await {
            Some(result) => result,
            None => {
                let mut conn = pool.get().await?;
                self.transaction(&mut conn, frame, &body, reached_commit.clone())
                    .await
            }
        };
        match result {
            Err(Error::Fenced { .. }) => {
                let mut conn = pool.get().await?;
                if self.attempts > 1 {
                    // An earlier attempt's answer was lost at COMMIT: it may have landed and
                    // moved the token on itself.
                    if let Some(landed) = settle(&mut conn, &self.claim, self.next_run_id).await? {
                        tracing::warn!("an earlier commit attempt had landed");
                        return Ok(landed);
                    }
                }
                let c = self.claim;
                let why = format!(
                    "commit refused: token {} (run {}) is no longer the current claim",
                    c.token, c.run_id
                );
                sql::record_fenced(c.run_id, bounded(&why))
                    .get_result::<Flag>(&mut conn)
                    .await?;
                Err(c.fenced())
            }
            Err(e) if AtomicBool::load(&reached_commit, Ordering::SeqCst) => {
                // The error came from COMMIT itself: read what the ledger holds, on a fresh
                // connection (the one that failed may be gone).
                tracing::warn!(error = %e, "commit outcome unknown; settling it from the ledger");
                let mut fresh = pool.get().await?;
                settle(&mut fresh, &self.claim, self.next_run_id)
                    .await?
                    .ok_or(e)
            }
            other => other,
        }
    }

    /// The attempt through the queue, when there is one and the frame has no extra writes.
    /// `None`: commit alone (no queue, extra writes, or the batch left nothing behind and the
    /// frame must hear its own answer, e.g. a body the database refuses). A lost answer comes
    /// back as an error at COMMIT, which [`Commit::attempt`] settles from the ledger.
    async fn in_a_batch(
        &self,
        frame: &Frame,
        body: &str,
        reached_commit: &AtomicBool,
    ) -> Option<Result<Landed>> {
        let (Some(queue), None) = (&self.queue, &frame.extra) else {
            return None;
        };
        let member = Member {
            claim: self.claim,
            next_run_id: self.next_run_id,
            node_id: self.node_id.clone(),
            body: body.to_owned(),
        };
        let c = self.claim;
        match queue.ask(member).await {
            Ok(Batched::Answered(Some(after))) => {
                reached_commit.store(true, Ordering::SeqCst);
                Some(Ok(landed_from(&c, after, self.next_run_id)))
            }
            Ok(Batched::Answered(None)) => Some(Err(c.fenced())),
            Ok(Batched::AtCommit(why)) => {
                reached_commit.store(true, Ordering::SeqCst);
                Some(Err(Error::connection(why)))
            }
            // Nothing of it was written: commit alone (a refused body hears its refusal).
            Ok(Batched::RolledBack) | Err(Unanswered::NotSent) => None,
            // Its batch may have committed: settled from the ledger, as an error at COMMIT.
            Err(Unanswered::Lost) => {
                reached_commit.store(true, Ordering::SeqCst);
                Some(Err(Error::connection("the commit batch's answer was lost")))
            }
        }
    }

    /// The transaction itself. `reached_commit` is set just before COMMIT is sent.
    async fn transaction(
        &self,
        conn: &mut AsyncPgConnection,
        frame: &Frame,
        body: &str,
        reached_commit: Arc<AtomicBool>,
    ) -> Result<Landed> {
        let (c, next_run_id, node) = (self.claim, self.next_run_id, self.node_id.as_str());
        let Some(extra) = &frame.extra else {
            return self.one_statement(conn, body, reached_commit).await;
        };
        conn.transaction(async move |tx| {
            let after =
                sql::commit_claim(c.firm_id, c.matter_id, c.token, c.run_id, next_run_id, node)
                    .get_result::<Number>(tx)
                    .await?
                    .number;
            let Some(after) = after else {
                return Err(c.fenced());
            };
            let refused = sql::insert_frame(c.firm_id, c.matter_id, c.token, c.run_id, body)
                .get_result::<Refusal>(tx)
                .await?
                .refused;
            if let Some(why) = refused {
                return Err(Error::FrameRefused(why));
            }
            extra(tx, c).await?;
            if after != 0 {
                // The follow-up's lease starts now, not before the application's writes.
                sql::start_lease(c.firm_id, c.matter_id, next_run_id)
                    .get_result::<Flag>(tx)
                    .await?;
            }
            reached_commit.store(true, Ordering::SeqCst);
            Ok(landed_from(&c, after, next_run_id))
        })
        .await
    }

    /// A frame with no extra writes: `ops.commit_frame`, the compare-and-swap and the frame in
    /// one statement, in its transaction, with BEGIN in the statement's flight (two round
    /// trips, [`crate::db::flight`]). A refused body comes back as SQLSTATE BRF01 with the hint
    /// [`FRAME_REFUSED_HINT`]; as with every statement the server refused, nothing was written.
    /// A failed COMMIT sets `reached_commit`: the outcome is settled from the ledger.
    async fn one_statement(
        &self,
        conn: &mut AsyncPgConnection,
        body: &str,
        reached_commit: Arc<AtomicBool>,
    ) -> Result<Landed> {
        let (c, next_run_id, node) = (self.claim, self.next_run_id, self.node_id.as_str());
        flight::hold(conn);
        let flown = {
            let shared: &AsyncPgConnection = conn;
            let mut on = shared;
            let statement = sql::commit_frame(
                c.firm_id,
                c.matter_id,
                c.token,
                c.run_id,
                next_run_id,
                node,
                body,
            )
            .get_result::<Number>(&mut on);
            flight::begin_with(shared, statement)
                .await
                .map(|answer| answer.number)
        };
        flight::release(conn, &flown);
        match flown {
            Flight::Committed(Some(after)) => Ok(landed_from(&c, after, next_run_id)),
            Flight::Committed(None) => Err(c.fenced()),
            Flight::Refused(diesel::result::Error::DatabaseError(_, info))
                if info.hint() == Some(FRAME_REFUSED_HINT) =>
            {
                Err(Error::FrameRefused(info.message().to_owned()))
            }
            Flight::Refused(e) | Flight::NotCommitted(e) => Err(e.into()),
            Flight::Unknown(e) => {
                reached_commit.store(true, Ordering::SeqCst);
                Err(e.into())
            }
        }
    }
}

/// One frame in a commit batch.
pub struct Member {
    claim: Claim,
    next_run_id: Uuid,
    node_id: String,
    body: String,
}

/// A member's answer from its batch.
pub enum Batched {
    /// What `ops.commit_frame` answered for it, and the batch committed: `None` fenced (nothing
    /// written for it), `Some(0)` landed and idle, else the follow-up's token.
    Answered(Option<i64>),
    /// The batch's COMMIT failed: whether it landed is unknown until settled from the ledger.
    AtCommit(String),
    /// The batch failed before its COMMIT, which rolled all of it back: commit alone.
    RolledBack,
}

/// A node's commits of frames without extra writes that are ready while earlier ones are on
/// the wire go in one transaction (`ops.commit_frames`). A member whose batch rolled back, or
/// that never reached one, commits alone; one whose answer was lost settles it from the ledger
/// ([`crate::db::batch::Unanswered`]).
pub type CommitQueue = Batcher<Member, Batched>;

/// Starts a [`CommitQueue`] on the current thread: `lanes` batches in flight, each on a pooled
/// connection, at most `max` frames each.
pub fn commits_in_batches(pool: Pool, lanes: usize, max: usize) -> CommitQueue {
    Batcher::start(lanes, max, move |members: Vec<Member>| {
        let pool = pool.clone();
        async move {
            let reached_commit = AtomicBool::new(false);
            let answers = async {
                let mut conn = pool.get().await?;
                commit_frames(&mut conn, &members, &reached_commit).await
            };
            match answers.await {
                Ok(answers) => answers.into_iter().map(Batched::Answered).collect(),
                Err(e) if AtomicBool::load(&reached_commit, Ordering::SeqCst) => {
                    let why = e.to_string();
                    members
                        .iter()
                        .map(|_| Batched::AtCommit(why.clone()))
                        .collect()
                }
                Err(e) => {
                    tracing::debug!(members = members.len(), error = %e, "a commit batch failed before its COMMIT; its members commit alone");
                    members.iter().map(|_| Batched::RolledBack).collect()
                }
            }
        }
    })
}

/// **commit** of many frames in one transaction (BEGIN in the flight of `ops.commit_frames`,
/// then COMMIT: [`crate::db::flight`]): one compare-and-swap for all members (`ops.commit_claims`,
/// what `ops.commit_frame` runs for one), each a condition on its own row with its own claim,
/// so each fences its own row; element `i` answers `members[i]`. Any error
/// before COMMIT rolled the whole batch back; a failed COMMIT (or answers that cannot be
/// matched to the members, after it) sets `reached_commit`, and each member settles it.
async fn commit_frames(
    conn: &mut AsyncPgConnection,
    members: &[Member],
    reached_commit: &AtomicBool,
) -> Result<Vec<Option<i64>>> {
    flight::hold(conn);
    let shared: &AsyncPgConnection = conn;
    let mut on = shared;
    let flown = if let [m] = members {
        // A batch of one is the frame's own statement (no loop to enter).
        let statement = sql::commit_frame(
            m.claim.firm_id,
            m.claim.matter_id,
            m.claim.token,
            m.claim.run_id,
            m.next_run_id,
            m.node_id.as_str(),
            m.body.as_str(),
        )
        .get_result::<Number>(&mut on);
        flight::begin_with(shared, statement)
            .await
            .map(|answer| vec![answer.number])
    } else {
        let statement = sql::commit_frames(
            members.iter().map(|m| m.claim.firm_id).collect::<Vec<_>>(),
            members
                .iter()
                .map(|m| m.claim.matter_id)
                .collect::<Vec<_>>(),
            members.iter().map(|m| m.claim.token).collect::<Vec<_>>(),
            members.iter().map(|m| m.claim.run_id).collect::<Vec<_>>(),
            members.iter().map(|m| m.next_run_id).collect::<Vec<_>>(),
            members
                .iter()
                .map(|m| m.node_id.as_str())
                .collect::<Vec<_>>(),
            members.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        )
        .get_result::<Numbers>(&mut on);
        flight::begin_with(shared, statement)
            .await
            .map(|answers| answers.numbers)
    };
    flight::release(conn, &flown);
    match flown {
        Flight::Committed(answers) if answers.len() == members.len() => Ok(answers),
        Flight::Committed(answers) => {
            // Committed, but the answers cannot be matched to the members: each settles.
            reached_commit.store(true, Ordering::SeqCst);
            Err(Error::internal(format!(
                "ops.commit_frames answered {} of {} frames",
                answers.len(),
                members.len()
            )))
        }
        Flight::Refused(e) | Flight::NotCommitted(e) => Err(e.into()),
        Flight::Unknown(e) => {
            reached_commit.store(true, Ordering::SeqCst);
            Err(e.into())
        }
    }
}

/// The hint `ops.commit_frame` gives a body the database refused (its message is the refusal,
/// `SQLSTATE: message`): what tells a refused frame from any other error of that statement.
pub const FRAME_REFUSED_HINT: &str = "briefrail: frame refused";

/// **commit** in one attempt (see [`Commit::attempt`]); a caller that retries keeps a
/// [`Commit`] instead, so a retry can settle an earlier attempt.
#[cfg(feature = "testing")]
pub async fn commit(pool: &Pool, claim: &Claim, node_id: &str, frame: &Frame) -> Result<Landed> {
    Commit::new(*claim, node_id).attempt(pool, frame).await
}

fn landed_from(c: &Claim, after: i64, next_run_id: Uuid) -> Landed {
    if after == 0 {
        Landed::Idle
    } else {
        Landed::FollowUp(Claim {
            firm_id: c.firm_id,
            matter_id: c.matter_id,
            token: after,
            run_id: next_run_id,
        })
    }
}

/// Settles a commit whose outcome is unknown, by reading what the ledger holds for this claim.
/// `Some(landed)` if this claim's own frame is there (with the follow-up claim if the commit
/// opened run `next_run_id` and it is still running), `None` if it is not (the commit did not
/// happen). A frame a reused token number landed for another run is not this claim's.
pub async fn settle(
    conn: &mut AsyncPgConnection,
    claim: &Claim,
    next_run_id: Uuid,
) -> Result<Option<Landed>> {
    let frame = super::reads::frame_meta(conn, claim.firm_id, claim.matter_id, claim.token).await?;
    if frame.is_none_or(|f| f.run_id != claim.run_id) {
        return Ok(None);
    }
    let follow_up: Option<i64> = ops::matter_frame_runs::table
        .filter(ops::matter_frame_runs::run_id.eq(next_run_id))
        .filter(ops::matter_frame_runs::outcome.eq(RunOutcome::Running))
        .select(ops::matter_frame_runs::token)
        .first(conn)
        .await
        .optional()?;
    Ok(Some(match follow_up {
        Some(token) => landed_from(claim, token, next_run_id),
        None => Landed::Idle,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_shows_its_body_and_whether_it_carries_extra_writes() {
        let plain = format!("{:?}", Frame::new(serde_json::json!({"summary": "ok"})));
        assert!(
            plain.contains("summary") && plain.contains("extra: false"),
            "{plain}"
        );
        let extra: ExtraWrites = Box::new(|_, _| Box::pin(async { Ok(()) }));
        let with = format!("{:?}", Frame::new(serde_json::json!({})).with_extra(extra));
        assert!(with.contains("extra: true"), "{with}");
    }
}
