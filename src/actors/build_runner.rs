//! Build runners: the actors that run the builds, each build carrying its token from claim to
//! commit. The work itself is a [`Builder`]'s (`crate::builders`): a runner hosts it, bounded
//! by the node's slots, heartbeats it and settles its claim.
//!
//! A matter actor takes a [`Hold`] *before* it claims, so the node never holds more claims than
//! its [`Capacity`] grants (what a crash leaves to wait out a lease). The builder's own work
//! takes one of `builders.concurrency` slots, and only for as long as it runs: the claim's round
//! trip before it and the commit's after it (each a WAL flush) do not keep a builder idle, so
//! the claims and commits of many matters go to the ledger together while the builders build.
//! A claim that waits for a slot is heartbeated like a running build, so its lease never runs
//! out in that queue.
//!
//! The build heartbeats every `lease.heartbeat_seconds` (fenced by token) from the claim on,
//! and stops at once when a heartbeat finds the token stale, when `builder.timeout_seconds` of
//! building pass, or when shutdown cancels it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::watch;
use tracing::Instrument;
use uuid::Uuid;

pub use super::capacity::{Capacity, Hold};
use crate::builders::context::{RecordQueue, record_bytes};
use crate::builders::{BuildContext, Builder};
use crate::db::Pool;
use crate::error::{Error, ErrorKind};
use crate::ledger::limits;
#[cfg(feature = "otel")]
use crate::ledger::reads;
use crate::ledger::transitions::{self as t, Landed, RetryPolicy};
use crate::ledger::{Claim, Commit, CommitQueue, Frame};
use crate::metrics::Metrics;
#[cfg(feature = "otel")]
use crate::trace::Traceparent;

/// Upper bound on settling a build (commit, fail or release, with their retries).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound on reading the served events' trace context before a build: past it the build
/// starts without (its span then begins a trace of its own).
#[cfg(feature = "otel")]
const LINK_TIMEOUT: Duration = Duration::from_secs(2);

/// What every build needs from its node.
pub struct BuildEnv {
    pub pool: Pool,
    pub builder: Arc<dyn Builder>,
    pub metrics: Arc<Metrics>,
    pub node_id: String,
    pub heartbeat: Duration,
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// Where frames without extra writes are committed, together with the others ready at the
    /// same time; `None`: each commits alone.
    pub commits: Option<CommitQueue>,
    /// Where builds read their records ahead, together with the others claimed at the same
    /// time, when the builder reads them ([`Builder::reads_record`]); `None`: each build reads
    /// its own when it runs.
    pub records: Option<RecordQueue>,
    /// The node's slots (a build takes one while it builds) and holds.
    pub capacity: Arc<Capacity>,
    /// Who takes the node's next hold: told at once when the builder asks the rail to wait.
    pub admission: Arc<super::admission::Admission>,
    /// Flips to true when shutdown's grace has passed: in-flight builds are cancelled and their
    /// claims released by token.
    pub cancel: watch::Receiver<bool>,
}

/// The build runners, and the node's capacity they share.
#[derive(Clone)]
pub struct BuildRunners {
    runners: Arc<Vec<Addr<BuildRunner>>>,
    /// The next runner to host a build (round robin: a runner hosts any number of
    /// builds; the slots, not the actors, bound how many build at once).
    next: Arc<AtomicUsize>,
    capacity: Arc<Capacity>,
}

impl BuildRunners {
    /// Starts one runner per slot of `env.capacity` on the current arbiter.
    pub fn start(env: Arc<BuildEnv>) -> Self {
        let capacity = env.capacity.clone();
        let runners: Vec<_> = (0..capacity.concurrency())
            .map(|_| BuildRunner { env: env.clone() }.start())
            .collect();
        Self {
            runners: Arc::new(runners),
            next: Arc::new(AtomicUsize::new(0)),
            capacity,
        }
    }

    /// The node's slots and holds.
    pub fn capacity(&self) -> &Arc<Capacity> {
        &self.capacity
    }

    /// The runner that hosts the next build.
    pub fn host(&self) -> Addr<BuildRunner> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.runners.len();
        self.runners[i].clone()
    }

    pub fn size(&self) -> usize {
        self.runners.len()
    }

    /// Builds running right now (holding a slot).
    pub fn busy(&self) -> usize {
        self.capacity.busy()
    }

    /// The most claims the node holds at once (`builders.held_claims`).
    pub fn max_held(&self) -> usize {
        self.capacity.max_holds()
    }

    /// Claims held right now: claiming, waiting for a slot, building or settling.
    pub fn held(&self) -> usize {
        self.capacity.held()
    }

    /// Waits until no claim is held, or `timeout` passes. Returns whether all are settled.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        self.capacity.wait_idle(timeout).await
    }
}

/// Run this claim's build. The reply comes back as [`BuildDone`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct RunBuild {
    pub claim: Claim,
    pub trace_id: Option<String>,
    pub event_ids: Vec<Uuid>,
    pub hold: Hold,
    pub reply: Recipient<BuildDone>,
}

/// How a build ended, as the ledger saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildOutcome {
    /// The frame landed; maybe with a follow-up claim to build at once.
    Landed(Landed),
    /// The token was stale (heartbeat or commit refused); nothing was written.
    Fenced,
    /// The build failed (error or timeout); the claim was failed by token, with backoff.
    Failed(String),
    /// Shutdown cancelled the build; the claim was handed back by token.
    Released,
    /// The builder asked the rail to wait this long (backpressure): the claim was handed back
    /// without spending a retry, and the ledger holds every node's next build until then.
    HeldBack(Duration),
    /// The ledger could not be reached to settle the claim; its lease will expire.
    Unsettled(String),
}

impl BuildOutcome {
    /// The outcome's name, as the build's span (and its exported trace) carries it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Landed(_) => "landed",
            Self::Fenced => "fenced",
            Self::Failed(_) => "failed",
            Self::Released => "released",
            Self::HeldBack(_) => "held_back",
            Self::Unsettled(_) => "unsettled",
        }
    }
}

/// A build finished. Its hold comes back with it: a follow-up claim rides on it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct BuildDone {
    pub claim: Claim,
    pub outcome: BuildOutcome,
    pub hold: Option<Hold>,
}

/// Hosts builds: takes a slot, runs the [`Builder`], commits or closes the claim.
pub struct BuildRunner {
    env: Arc<BuildEnv>,
}

impl Actor for BuildRunner {
    type Context = Context<Self>;
}

impl Handler<RunBuild> for BuildRunner {
    type Result = ();

    fn handle(&mut self, msg: RunBuild, ctx: &mut Context<Self>) {
        let env = self.env.clone();
        let RunBuild {
            claim,
            trace_id,
            event_ids,
            hold,
            reply,
        } = msg;
        // `outcome` and `error` are recorded at the end, after the log lines they would only
        // repeat: they are for the exported trace (crate::otel).
        let span = tracing::info_span!(parent: None, "build", firm_id = %claim.firm_id, matter_id = %claim.matter_id,
                                       token = claim.token, run_id = %claim.run_id, node_id = %env.node_id,
                                       trace_id = trace_id.as_deref().unwrap_or(""),
                                       outcome = tracing::field::Empty, error = tracing::field::Empty);
        let fut = async move {
            #[cfg(feature = "otel")]
            if crate::otel::exported(&tracing::Span::current()) {
                link_served_demands(&env.pool, &event_ids).await;
            }
            let outcome = run_build(&env, claim, trace_id, event_ids).await;
            // The matter actor may have gone (stopped or restarted): the hold then just drops.
            // `do_send`, not `try_send`: a mailbox full of nudges must not lose the build's end
            // (the actor would stay in its cycle and ignore every later nudge).
            reply.do_send(BuildDone {
                claim,
                outcome,
                hold: Some(hold),
            });
        }
        .instrument(span);
        ctx.spawn(fut.into_actor(self));
    }
}

enum Stopped {
    Built(crate::Result<Frame>),
    HeartbeatFenced,
    TimedOut,
    Cancelled,
    /// Waited for a slot past [`Capacity::wait_limit`]: handed back, so a node (this one
    /// included) with a free builder takes it.
    Overdue,
}

/// One build, claim to settled outcome: waits for a slot, builds, gives the slot back, settles.
/// The lease is renewed from the claim on, through the wait for a slot and the build.
pub async fn run_build(
    env: &BuildEnv,
    claim: Claim,
    trace_id: Option<String>,
    event_ids: Vec<Uuid>,
) -> BuildOutcome {
    let mut ctx = BuildContext::new(
        claim.firm_id,
        claim.matter_id,
        claim.token,
        claim.run_id,
        env.pool.clone(),
    );
    ctx.trace_id = trace_id;
    ctx.event_ids = event_ids;
    // The record is read now, with the others claimed at the same time, while this build waits
    // for its slot: the claim has committed, so the read holds every fact the claim covers,
    // and the slot is not held through the round trip.
    let ahead = env
        .records
        .as_ref()
        .filter(|_| env.builder.reads_record())
        .map(|records| {
            let (records, capacity) = (records.clone(), env.capacity.clone());
            let key = (claim.firm_id, claim.matter_id);
            tokio::task::spawn_local(async move {
                let record = records.ask(key).await.ok().flatten()?;
                // Past the node's budget of records waiting in memory, it is let go, and the
                // build reads it when it runs.
                let kept = capacity.keep_ahead(record_bytes(&record))?;
                Some((record, kept))
            })
        });
    Metrics::inc(&env.metrics.counters.builds_started);
    let mut started = Instant::now();
    let stopped = {
        let heartbeat = heartbeat_until_fenced(&env.pool, &claim, env.heartbeat);
        tokio::pin!(heartbeat);
        let mut cancel = env.cancel.clone();
        let waited = tokio::select! {
            s = env.capacity.slot() => s.ok_or(Stopped::Cancelled),
            () = &mut heartbeat => Err(Stopped::HeartbeatFenced),
            _ = cancel.wait_for(|c| *c) => Err(Stopped::Cancelled),
            () = tokio::time::sleep(env.capacity.wait_limit()) => Err(Stopped::Overdue),
        };
        match waited {
            Err(stopped) => stopped,
            Ok(slot) => {
                started = Instant::now();
                tracing::info!("build started");
                let build = async {
                    if let Some(ahead) = ahead
                        && let Ok(Some((record, _kept))) = ahead.await
                    {
                        ctx.hand_record(record);
                    }
                    env.builder.build(&ctx).await
                };
                tokio::pin!(build);
                let stopped = tokio::select! {
                    r = &mut build => Stopped::Built(r),
                    () = &mut heartbeat => Stopped::HeartbeatFenced,
                    () = tokio::time::sleep(env.timeout) => Stopped::TimedOut,
                    _ = cancel.wait_for(|c| *c) => Stopped::Cancelled,
                };
                // The slot goes back before the commit: the next build starts while this one's
                // frame is on its way to the ledger. Only a build that ran to its end tells the
                // node how long builds take (a fenced or cancelled one says nothing of it).
                if matches!(stopped, Stopped::Built(_) | Stopped::TimedOut) {
                    env.capacity.built(started.elapsed());
                }
                drop(slot);
                stopped
            }
        }
        // Leaving this block drops the build future: a command builder's child is killed here.
    };
    // Settling talks to the ledger only; a half-open connection must not hold the claim forever.
    let outcome = match tokio::time::timeout(SETTLE_TIMEOUT, conclude(env, &claim, stopped)).await {
        Ok(o) => o,
        Err(_) => BuildOutcome::Unsettled(format!(
            "the ledger did not answer within {SETTLE_TIMEOUT:?}"
        )),
    };
    env.metrics.observe_build(started.elapsed());
    match &outcome {
        BuildOutcome::Landed(l) => {
            Metrics::inc(&env.metrics.counters.builds_landed);
            tracing::info!(
                follow_up = matches!(l, Landed::FollowUp(_)),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "frame landed"
            );
        }
        BuildOutcome::Fenced => {
            Metrics::inc(&env.metrics.counters.builds_fenced);
            tracing::warn!("fenced: the token is stale; nothing was written");
        }
        BuildOutcome::Failed(e) => {
            Metrics::inc(&env.metrics.counters.builds_failed);
            tracing::warn!(error = %e, "build failed");
        }
        BuildOutcome::Released => {
            Metrics::inc(&env.metrics.counters.builds_released);
            tracing::info!("claim released at shutdown");
        }
        BuildOutcome::HeldBack(wait) => {
            Metrics::inc(&env.metrics.counters.builds_held_back);
            tracing::warn!(
                wait_ms = wait.as_millis() as u64,
                "the builder asked the rail to wait: claim handed back, no retry spent"
            );
        }
        BuildOutcome::Unsettled(e) => {
            tracing::error!(error = %e, "could not settle the claim; its lease will expire")
        }
    }
    let span = tracing::Span::current();
    span.record("outcome", outcome.name());
    if let BuildOutcome::Failed(e) | BuildOutcome::Unsettled(e) = &outcome {
        span.record("error", e.as_str());
    }
    outcome
}

/// Joins the current (build) span to the traces of the demands it serves: its parent becomes
/// the first served event's traceparent (the upload that caused the build, so the build shows
/// under it in Jaeger or Tempo) and its links all of them, read from the ledger in one
/// statement (the events' outbox rows: what the run's `event_ids` name). Only for a span that
/// is exported; a failed read costs the links, never the build.
#[cfg(feature = "otel")]
async fn link_served_demands(pool: &Pool, event_ids: &[Uuid]) {
    if event_ids.is_empty() {
        return;
    }
    let read = async {
        let mut c = pool.get().await?;
        reads::event_traceparents(&mut c, event_ids).await
    };
    let rows = match tokio::time::timeout(LINK_TIMEOUT, read).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "no trace context for the build's span: it starts its own trace");
            return;
        }
        Err(_) => {
            tracing::debug!(
                "the trace context read timed out: the build's span starts its own trace"
            );
            return;
        }
    };
    let served: Vec<Traceparent> = rows
        .iter()
        .filter_map(|(_, tp)| tp.as_deref().and_then(Traceparent::parse))
        .collect();
    crate::otel::join(&tracing::Span::current(), served.first(), &served);
}

/// Closes the claim on the ledger according to how the build stopped.
async fn conclude(env: &BuildEnv, claim: &Claim, stopped: Stopped) -> BuildOutcome {
    match stopped {
        Stopped::Built(Ok(frame)) => commit_with_retry(env, claim, frame).await,
        Stopped::Built(Err(Error::Backpressure {
            retry_after,
            message,
        })) => held_back(env, claim, retry_after, &message).await,
        Stopped::Built(Err(e)) => fail(env, claim, &e.to_string(), e.is_permanent()).await,
        Stopped::HeartbeatFenced => {
            match ledger_call(
                env,
                claim,
                Close::Fenced("heartbeat found the token stale: cancelled"),
            )
            .await
            {
                Ok(()) => BuildOutcome::Fenced,
                Err(e) => BuildOutcome::Unsettled(e.to_string()),
            }
        }
        Stopped::TimedOut => {
            let message = format!(
                "timed out after {:.1}s (builder.timeout_seconds)",
                env.timeout.as_secs_f64()
            );
            fail(env, claim, &message, false).await
        }
        Stopped::Cancelled => release(env, claim, "node shutting down").await,
        Stopped::Overdue => {
            release(
                env,
                claim,
                "waited too long for a builder (builds slowed down): handed back",
            )
            .await
        }
    }
}

/// Hands the claim back by token (released, not failed: no backoff, no retry counted).
async fn release(env: &BuildEnv, claim: &Claim, reason: &str) -> BuildOutcome {
    match ledger_call(env, claim, Close::Release(reason)).await {
        Ok(()) => BuildOutcome::Released,
        Err(Error::Fenced { .. }) => BuildOutcome::Fenced,
        Err(e) => BuildOutcome::Unsettled(e.to_string()),
    }
}

/// The builder asked the rail to wait: the hold goes on the ledger first (every node's next
/// build waits for it), then the claim is handed back by token, as at shutdown (no retry
/// spent). If the hold cannot be recorded the claim is still handed back; the matter waits out
/// `retry_after` on this node before it asks again.
async fn held_back(
    env: &BuildEnv,
    claim: &Claim,
    retry_after: Duration,
    message: &str,
) -> BuildOutcome {
    let reason = format!(
        "builder asked to wait {:.1}s: {message}",
        retry_after.as_secs_f64()
    );
    let recorded = async {
        let mut c = env.pool.get().await?;
        limits::hold_builder(&mut c, retry_after, &reason).await
    };
    let wait = recorded.await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "could not record the builder's hold");
        retry_after.min(limits::MAX_BUILDER_HOLD)
    });
    env.admission.note_builder_hold(wait);
    match release(env, claim, &reason).await {
        BuildOutcome::Released => BuildOutcome::HeldBack(wait),
        other => other,
    }
}

/// How many times a commit is tried before a transient error counts as a failed build.
const COMMIT_ATTEMPTS: u32 = 4;

/// The commit, retried on transient errors: the compare-and-swap makes a retry safe, and the
/// ledger's [`Commit`] settles an unknown outcome (also one an earlier attempt left). Errors are
/// classified by what the database said: an input error (a refused frame, a constraint
/// violation) fails the claim at once (retrying cannot help); anything else is retried, and if
/// it persists the claim is failed with its error (a failure, with backoff), never left to run
/// out its lease.
async fn commit_with_retry(env: &BuildEnv, claim: &Claim, frame: Frame) -> BuildOutcome {
    let mut commit = Commit::new(*claim, &env.node_id).in_batches(env.commits.clone());
    let mut delays = crate::backoff::delays(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        match commit.attempt(&env.pool, &frame).await {
            Ok(landed) => return BuildOutcome::Landed(landed),
            Err(Error::Fenced { .. }) => return BuildOutcome::Fenced,
            Err(e) if e.is_permanent() => {
                return fail(env, claim, &format!("commit refused: {e}"), true).await;
            }
            Err(e) if commit.attempts() >= COMMIT_ATTEMPTS => {
                let message = format!("commit failed {COMMIT_ATTEMPTS} times: {e}");
                return fail(env, claim, &message, false).await;
            }
            Err(e) => {
                tracing::warn!(attempt = commit.attempts(), error = %e, "commit failed; retrying");
                tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(2))).await;
            }
        }
    }
}

async fn fail(env: &BuildEnv, claim: &Claim, message: &str, permanent: bool) -> BuildOutcome {
    match ledger_call(env, claim, Close::Fail { message, permanent }).await {
        Ok(()) => {
            warn_if_exhausted(env, claim).await;
            BuildOutcome::Failed(message.to_owned())
        }
        Err(Error::Fenced { .. }) => BuildOutcome::Fenced,
        Err(e) => BuildOutcome::Unsettled(e.to_string()),
    }
}

/// A failure that used up the matter's retries says so, with what to do: nothing rebuilds it
/// until a new demand. Read from the row the failure just wrote (one read, on failures only).
async fn warn_if_exhausted(env: &BuildEnv, claim: &Claim) {
    let Ok(mut c) = env.pool.get().await else {
        return;
    };
    if let Ok(Some(job)) = crate::ledger::reads::job(&mut c, claim.firm_id, claim.matter_id).await {
        let max = env.retry.max_attempts;
        if job.run_status == crate::ledger::RunStatus::Failed
            && i64::from(job.consecutive_failures) >= i64::from(max)
        {
            tracing::warn!(
                firm_id = %claim.firm_id, matter_id = %claim.matter_id, token = claim.token,
                failures = job.consecutive_failures, max_attempts = max,
                "{}",
                crate::ledger::matters::exhausted_advice(claim.firm_id, claim.matter_id, max)
            );
        }
    }
}

/// How a claim that did not land is closed on the ledger.
#[derive(Clone, Copy)]
enum Close<'a> {
    Fail { message: &'a str, permanent: bool },
    Release(&'a str),
    Fenced(&'a str),
}

/// How many times a claim's close is tried while the database is unreachable.
const CLOSE_ATTEMPTS: usize = 4;

/// Closes the claim, retrying a few times while the database is unreachable (the shared
/// backoff, from 100 ms). Every call is fenced by token, so a retry can never close someone
/// else's claim.
async fn ledger_call(env: &BuildEnv, claim: &Claim, close: Close<'_>) -> crate::Result<()> {
    let mut delays = crate::backoff::delays(Duration::from_millis(100), Duration::from_secs(1));
    let mut last = Error::internal("no attempt was made");
    for attempt in 1..=CLOSE_ATTEMPTS {
        let result = match env.pool.get().await {
            Ok(mut c) => match close {
                Close::Fail { message, permanent } => {
                    t::fail(&mut c, claim, message, permanent, &env.retry).await
                }
                Close::Release(reason) => t::release(&mut c, claim, reason).await,
                Close::Fenced(why) => t::record_fenced(&mut c, claim.run_id, why)
                    .await
                    .map(|_| ()),
            },
            Err(e) => Err(e.into()),
        };
        match result {
            Err(e) if e.kind() == ErrorKind::Transient => last = e,
            other => return other,
        }
        if attempt < CLOSE_ATTEMPTS {
            tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(1))).await;
        }
    }
    Err(last)
}

/// Renews the lease every `interval`; returns only when a heartbeat finds the token stale.
/// A heartbeat that fails for another reason (database briefly unreachable) is retried at the
/// next tick: if the outage outlasts the lease, the next successful heartbeat reports fenced.
async fn heartbeat_until_fenced(pool: &Pool, claim: &Claim, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let result = match pool.get().await {
            Ok(mut c) => t::heartbeat(&mut c, claim).await,
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(()) => tracing::debug!("heartbeat"),
            Err(Error::Fenced { .. }) => return,
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; will retry"),
        }
    }
}
