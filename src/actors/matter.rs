//! The matter actor: the single in-process owner of its matter's claim.
//!
//! It coalesces nudges: the first starts a `trigger.debounce_ms` window that each further
//! nudge extends, capped at `trigger.max_wait_ms` after the first, so a steady stream of
//! uploads still produces builds. A window counts from when the ledger recorded the demand
//! (`Nudge::recorded_ago`), so the nudge of a backlog is claimed at once. Then it takes a hold
//! (one of the node's `builders.held_claims`), checks the row for unserved demand, and runs the
//! claim (with the lost-claim path). A won token goes to a builder, which waits for a slot; a
//! commit that re-claimed (demands piled up mid-build) is dispatched again at once on the same
//! hold.
//!
//! Interleaving is made harmless by explicit state rather than by holding the mailbox: while a
//! cycle is in flight (`cycle_running`), nudges only add to `pending`; no second claim starts
//! until the first cycle has ended.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use uuid::Uuid;

use super::admission::Grant;
use super::build_runner::{BuildDone, BuildOutcome, Hold, RunBuild};
use super::context::NodeContext;
use crate::ledger::transitions::{self as t, ClaimOutcome, ClaimRequest, Landed};
use crate::ledger::{Claim, ClaimKind, DemandClass};
use crate::metrics::Metrics;
use crate::nudge::{MatterKey, Nudge};
use crate::trace::Traceparent;

/// Upper bound on claiming once a hold is granted. The wait for a hold has none: it is a place
/// in the fair order (`super::admission`), which a matter would lose by giving up; a node that
/// drains lets every waiter go.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(300);

/// A matter actor reports that it has gone idle (its cycle ended with nothing pending); its
/// supervisor asks it to stop once `trigger.idle_seconds` have passed. At most one report per
/// actor waits at a time (a matter built again meanwhile adds none), and there is no timer per
/// actor: a node holding 100,000 matter actors keeps no 100,000 timers.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Idle {
    pub key: MatterKey,
}

/// Stop if there is nothing to do and nothing was done for `trigger.idle_seconds`; replies
/// whether it stopped.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct StopIfIdle;

/// Test hook: panic inside a handler, to prove a restarted actor starts clean.
#[cfg(feature = "testing")]
#[derive(Message)]
#[rtype(result = "()")]
pub struct Crash;

/// Demands waiting for the next claim.
#[derive(Debug, Default)]
struct Pending {
    /// When the first of them arrived: the max-wait cap counts from here.
    since: Option<Instant>,
    /// When the debounce window of the newest demand among them ends: its nudge's arrival plus
    /// `trigger.debounce_ms`, less the time the ledger says passed since it was recorded.
    quiet_at: Option<Instant>,
    event_ids: Vec<Uuid>,
    /// The trace of every coalesced demand: the build links to all of them.
    traceparents: Vec<String>,
    /// The most urgent class among them: one interactive demand makes the claim interactive.
    class: Option<DemandClass>,
    /// When the ledger recorded the oldest of them (as an instant of this process): its age
    /// orders it among the matters waiting for a hold.
    recorded_at: Option<Instant>,
}

pub struct MatterActor {
    key: MatterKey,
    node: Arc<NodeContext>,
    /// Where it reports being idle (its supervisor).
    supervisor: Recipient<Idle>,
    /// Nudges not yet served by a claim. Cleared when a cycle starts (it takes them).
    pending: Option<Pending>,
    /// The debounce timer; replaced by each nudge, cancelled when a cycle starts.
    timer: Option<SpawnHandle>,
    /// A cycle (hold → claim → build → commit, and follow-ups) is in flight. Only the cycle's
    /// end clears it, so no two claims of this matter overlap in this process.
    cycle_running: bool,
    last_activity: Instant,
    /// Its supervisor holds an idle report of this actor that has not been answered yet: one
    /// report at a time, however often the matter is built meanwhile.
    reported_idle: bool,
    /// The class and age of the demand the cycle in flight serves: a claim handed back
    /// because the builder is held (or the fleet's rate) asks again with them.
    cycle_demand: Option<(DemandClass, Instant)>,
}

impl MatterActor {
    pub fn new(key: MatterKey, node: Arc<NodeContext>, supervisor: Recipient<Idle>) -> Self {
        Self {
            key,
            node,
            supervisor,
            pending: None,
            timer: None,
            cycle_running: false,
            last_activity: Instant::now(),
            reported_idle: false,
            cycle_demand: None,
        }
    }

    fn schedule(&mut self, ctx: &mut Context<Self>) {
        let Some(p) = &self.pending else { return };
        let trigger = &self.node.settings.trigger;
        let now = Instant::now();
        let cap = p.since.unwrap_or(now) + Duration::from_millis(trigger.max_wait_ms);
        let quiet = p
            .quiet_at
            .unwrap_or_else(|| now + Duration::from_millis(trigger.debounce_ms));
        let delay = quiet.min(cap).saturating_duration_since(now);
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        if delay.is_zero() {
            // No window to wait for (`debounce_ms = 0`, or the cap reached): a zero-length timer
            // would still wait for the timer wheel's next tick (about a millisecond).
            self.start_cycle(ctx);
            return;
        }
        self.timer = Some(ctx.run_later(delay, |act, ctx| {
            act.timer = None;
            act.start_cycle(ctx);
        }));
    }

    fn start_cycle(&mut self, ctx: &mut Context<Self>) {
        if self.cycle_running || self.pending.is_none() || *self.node.draining.borrow() {
            return;
        }
        let pending = self.pending.take().unwrap_or_default();
        self.cycle_running = true;
        self.cycle_demand = Some((
            pending.class.unwrap_or_default(),
            pending.recorded_at.unwrap_or_else(Instant::now),
        ));
        let node = self.node.clone();
        let key = self.key;
        // The claim talks to the ledger only; a half-open connection must not leave this actor
        // in a cycle forever (it would ignore every later nudge).
        let fut = async move {
            let recorded_at = pending.recorded_at.unwrap_or_else(Instant::now);
            let grant = node
                .admission
                .admit(key, pending.class.unwrap_or_default(), recorded_at)
                .await?;
            if *node.draining.borrow() {
                return None;
            }
            tokio::time::timeout(CLAIM_TIMEOUT, claim_cycle(&node, key, pending, grant)).await.unwrap_or_else(|_| {
                tracing::warn!(firm_id = %key.firm_id, matter_id = %key.matter_id, "claim timed out; reconcile will retry");
                None
            })
        };
        ctx.spawn(fut.into_actor(self).map(|started, act, ctx| match started {
            Some((claim, hold, trace_id, event_ids)) => {
                act.node.runners.host().do_send(RunBuild {
                    claim,
                    trace_id,
                    event_ids,
                    hold,
                    reply: ctx.address().recipient(),
                });
            }
            None => act.end_cycle(ctx),
        }));
    }

    fn end_cycle(&mut self, ctx: &mut Context<Self>) {
        self.cycle_running = false;
        self.last_activity = Instant::now();
        if self.pending.is_some() {
            self.schedule(ctx);
        } else {
            self.report_idle();
        }
    }

    /// Tells the supervisor this actor is idle, unless a report of it is still waiting there.
    fn report_idle(&mut self) {
        if !self.reported_idle {
            self.reported_idle = true;
            self.supervisor.do_send(Idle { key: self.key });
        }
    }

    fn idle(&self) -> bool {
        !self.cycle_running && self.pending.is_none()
    }

    /// The cycle's claim was handed back unbuilt (the builder asked the rail to wait, or the
    /// fleet's limits gate a follow-up): its demand is still unserved on the ledger, so the
    /// matter asks for a hold again, in its place by class and age, after `after`. The ledger's
    /// permit makes every node wait out the builder's hold; `after` only keeps this actor from
    /// asking sooner if the hold could not be recorded.
    fn ask_again(&mut self, ctx: &mut Context<Self>, after: Duration) {
        let (class, recorded_at) = self
            .cycle_demand
            .unwrap_or((DemandClass::default(), Instant::now()));
        let now = Instant::now();
        let p = self.pending.get_or_insert_with(Pending::default);
        p.since.get_or_insert(now);
        p.class = Some(p.class.map_or(class, |c| c.max(class)));
        p.recorded_at = Some(p.recorded_at.map_or(recorded_at, |r| r.min(recorded_at)));
        self.cycle_running = false;
        self.last_activity = now;
        if let Some(h) = self.timer.take() {
            ctx.cancel_future(h);
        }
        self.timer = Some(ctx.run_later(after, |act, ctx| {
            act.timer = None;
            act.start_cycle(ctx);
        }));
    }
}

/// Claim, on a granted hold. `Some` when this process won the matter; `None` when there was
/// nothing to do, a live build elsewhere took the demand, or the ledger could not be reached
/// (the sweeper's reconcile brings the matter back).
async fn claim_cycle(
    node: &NodeContext,
    key: MatterKey,
    pending: Pending,
    grant: Grant,
) -> Option<(Claim, Hold, Option<String>, Vec<Uuid>)> {
    // The run records the first demand's trace; the build span links every coalesced trace.
    let traces: Vec<String> = pending
        .traceparents
        .iter()
        .filter_map(|t| Traceparent::parse(t))
        .map(|t| t.trace_id_hex())
        .collect();
    let trace_id = traces.first().cloned();
    if traces.len() > 1 {
        tracing::info!(firm_id = %key.firm_id, matter_id = %key.matter_id, links = %traces.join(","),
                       "one build serves {} traced demands", traces.len());
    }
    let req = ClaimRequest {
        firm_id: key.firm_id,
        matter_id: key.matter_id,
        lease: node.settings.lease.lease(),
        node_id: node.node_id.clone(),
        trace_id: trace_id.clone(),
        event_ids: pending.event_ids.clone(),
        // A nudge is a hint that follows a demand the trigger already recorded.
        kind: ClaimKind::ServeRecorded,
        max_attempts: node.settings.retry.max_attempts,
    };
    // The futures below are boxed: a cycle waiting for a hold holds only this function's own
    // state, not the largest future it will await (100,000 waiting matters stay small).
    // The claim goes with the others asked for meanwhile; only one not won there (a live build
    // holds the matter, or nothing to do) takes a connection of its own for the rest.
    let first = Box::pin(node.claims.ask(req.clone())).await.ok();
    if let Some(Some(claim)) = first {
        tracing::debug!(firm_id = %key.firm_id, matter_id = %key.matter_id, token = claim.token,
                        class = %pending.class.unwrap_or_default(), "claimed");
        return Some((claim, grant.into_hold(true)?, trace_id, pending.event_ids));
    }
    let mut conn = match Box::pin(node.pool.get()).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(firm_id = %key.firm_id, matter_id = %key.matter_id, error = %e, "no connection for the claim");
            return None;
        }
    };
    let outcome = Box::pin(t::claim_or_record_after(&mut conn, &req, first)).await;
    let hold = grant.into_hold(matches!(outcome, Ok(ClaimOutcome::Won(_))))?;
    match outcome {
        Ok(ClaimOutcome::Won(claim)) => Some((claim, hold, trace_id, pending.event_ids)),
        Ok(ClaimOutcome::Served) => None,
        Ok(ClaimOutcome::Archived) => {
            tracing::info!(firm_id = %key.firm_id, matter_id = %key.matter_id, "archived: not rebuilt");
            None
        }
        Ok(ClaimOutcome::RetriesExhausted {
            consecutive_failures,
        }) => {
            tracing::info!(firm_id = %key.firm_id, matter_id = %key.matter_id, consecutive_failures,
                           "retries exhausted; the matter waits for a new demand");
            None
        }
        Ok(ClaimOutcome::Recorded {
            requested_generation,
        }) => {
            Metrics::inc(&node.metrics.counters.claim_conflicts);
            tracing::debug!(firm_id = %key.firm_id, matter_id = %key.matter_id, requested_generation,
                            "a live build holds the matter; demand recorded on it");
            None
        }
        Err(e) => {
            tracing::warn!(firm_id = %key.firm_id, matter_id = %key.matter_id, error = %e, "claim failed");
            None
        }
    }
}

impl Actor for MatterActor {
    type Context = Context<Self>;
}

impl Handler<Nudge> for MatterActor {
    type Result = ();

    fn handle(&mut self, msg: Nudge, ctx: &mut Context<Self>) {
        Metrics::inc(&self.node.metrics.counters.nudges_received);
        self.last_activity = Instant::now();
        let coalesced = self.pending.is_some() || self.cycle_running;
        let debounce = Duration::from_millis(self.node.settings.trigger.debounce_ms);
        let now = Instant::now();
        let quiet = now + debounce.saturating_sub(msg.recorded_ago.unwrap_or_default());
        let p = self.pending.get_or_insert_with(Pending::default);
        p.since.get_or_insert(now);
        let recorded = now
            .checked_sub(msg.recorded_ago.unwrap_or_default())
            .unwrap_or(now);
        p.recorded_at = Some(p.recorded_at.map_or(recorded, |r| r.min(recorded)));
        p.class = Some(p.class.map_or(msg.class, |c| c.max(msg.class)));
        p.quiet_at = Some(p.quiet_at.map_or(quiet, |q| q.max(quiet)));
        p.event_ids.extend(msg.event_ids);
        if let Some(tp) = msg.traceparent
            && !p.traceparents.contains(&tp)
        {
            p.traceparents.push(tp);
        }
        if coalesced {
            Metrics::inc(&self.node.metrics.counters.demands_coalesced);
        }
        if !self.cycle_running {
            self.schedule(ctx);
        }
    }
}

impl Handler<BuildDone> for MatterActor {
    type Result = ();

    fn handle(&mut self, msg: BuildDone, ctx: &mut Context<Self>) {
        self.last_activity = Instant::now();
        match (msg.outcome, msg.hold) {
            (BuildOutcome::Landed(Landed::FollowUp(next)), Some(hold)) => {
                if *self.node.draining.borrow() {
                    // Shutting down: hand the follow-up claim back so another node takes it now.
                    let pool = self.node.pool.clone();
                    let fut = async move {
                        if let Ok(mut c) = pool.get().await {
                            let _ = t::release(&mut c, &next, "node shutting down").await;
                        }
                        drop(hold);
                    };
                    ctx.spawn(fut.into_actor(self).map(|(), act, ctx| act.end_cycle(ctx)));
                    return;
                }
                if self.node.admission.limits().gates_starts() {
                    // A rate or a held builder counts every start: the follow-up goes back
                    // through admission for its permit, its claim handed back (no retry spent).
                    let pool = self.node.pool.clone();
                    let fut = async move {
                        if let Ok(mut c) = pool.get().await {
                            let _ = t::release(&mut c, &next, "waits for the fleet's build limits")
                                .await;
                        }
                        drop(hold);
                    };
                    ctx.spawn(
                        fut.into_actor(self)
                            .map(|(), act, ctx| act.ask_again(ctx, Duration::ZERO)),
                    );
                    return;
                }
                // Every demand that piled up during the build is served by this one follow-up;
                // nudges for them that are still pending add nothing.
                self.node.runners.host().do_send(RunBuild {
                    claim: next,
                    trace_id: None,
                    event_ids: self.pending.take().map(|p| p.event_ids).unwrap_or_default(),
                    hold,
                    reply: ctx.address().recipient(),
                });
            }
            (BuildOutcome::HeldBack(wait), _) if !*self.node.draining.borrow() => {
                self.ask_again(ctx, wait)
            }
            _ => self.end_cycle(ctx),
        }
    }
}

impl Handler<StopIfIdle> for MatterActor {
    type Result = bool;

    fn handle(&mut self, _: StopIfIdle, ctx: &mut Context<Self>) -> bool {
        // The supervisor has answered this actor's report: the next idle spell reports again.
        self.reported_idle = false;
        if !self.idle() {
            // Busy again: the end of its cycle reports.
            return false;
        }
        if self.last_activity.elapsed() >= self.node.settings.trigger.idle_after() {
            ctx.stop();
            true
        } else {
            // Idle, but it worked since its report: report again, due a full window from now.
            self.report_idle();
            false
        }
    }
}

#[cfg(feature = "testing")]
impl Handler<Crash> for MatterActor {
    type Result = ();

    fn handle(&mut self, _: Crash, _: &mut Context<Self>) {
        panic!(
            "matter actor {} asked to crash (test hook)",
            self.key.matter_id
        );
    }
}
