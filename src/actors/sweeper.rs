//! The sweeper: every `sweeper.interval_seconds` it fails expired claims (their runs become
//! `lease_expired`) and finds rows with unserved demand that nobody is serving, and nudges
//! their matters. This is what makes a dropped nudge, a crashed node or a lost actor harmless.
//! [`Sweeper::run_once`] is the whole job; the actor's timer only calls it.
//!
//! On a second timer (`retention.interval_seconds`) it runs retention passes
//! ([`super::retention`]), spawned beside the sweeps so a long pass never delays one, and
//! never two at once.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::context::NodeContext;
use super::retention::{Retention, RetentionReport};
use crate::error::Result;
use crate::ledger::DemandClass;
use crate::ledger::transitions as t;
use crate::metrics::Metrics;
use crate::nudge::Nudge;

/// What one sweep pass did ([`crate::Node::sweep_now`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Claims whose lease ran out, failed by the sweep (their late commits are fenced).
    pub expired: usize,
    /// Matters with unserved demand that were nudged again (a lost message only delays work).
    pub unserved: usize,
}

/// Run one pass now (tests call this instead of waiting for the timer).
#[derive(Message)]
#[rtype(result = "Result<SweepReport>")]
pub struct SweepNow;

/// Run one retention pass now (tests, and operators through the library).
#[derive(Message)]
#[rtype(result = "Result<RetentionReport>")]
pub struct RetainNow;

pub struct Sweeper {
    node: Arc<NodeContext>,
    nudges: Recipient<Nudge>,
    /// Run a pass every `sweeper.interval_seconds`; without it passes run only on [`SweepNow`].
    periodic: bool,
    /// Between passes; `None` while a pass runs (it owns the state meanwhile).
    retention: Option<Retention>,
    watch: super::liveness::Watch,
}

impl Sweeper {
    pub fn new(node: Arc<NodeContext>, nudges: Recipient<Nudge>, periodic: bool) -> Self {
        Self {
            watch: node.liveness.watch("sweeper"),
            node,
            nudges,
            periodic,
            retention: Some(Retention::default()),
        }
    }

    /// Starts a retention pass unless one is running; the pass hands its state back when done.
    fn retain(&mut self, ctx: &mut Context<Self>) {
        let Some(mut state) = self.retention.take() else {
            return;
        };
        let node = self.node.clone();
        ctx.spawn(
            async move {
                if let Err(e) = state.pass(&node).await {
                    tracing::warn!(error = %e, "retention pass failed; retrying next interval");
                }
                state
            }
            .into_actor(self)
            .map(|state, act, _| act.retention = Some(state)),
        );
    }

    /// One pass: sweep, then reconcile; nudge every matter found.
    pub async fn run_once(node: &NodeContext, nudges: &Recipient<Nudge>) -> Result<SweepReport> {
        if *node.draining.borrow() {
            return Ok(SweepReport::default());
        }
        let batch = node.settings.sweeper.batch;
        let mut conn = node.pool.get().await?;
        // Each row carries its claimer's deadline: this node's lease setting plays no part.
        let expired = t::sweep(&mut conn, batch).await?;
        for (m, token) in &expired {
            Metrics::inc(&node.metrics.counters.builds_lease_expired);
            tracing::warn!(firm_id = %m.firm_id, matter_id = %m.matter_id, token, "lease expired; claim failed by the sweep");
        }
        // A fresh demand's own nudge is on its way: leave it a debounce cap and a second.
        let quiet =
            Duration::from_millis(node.settings.trigger.max_wait_ms) + Duration::from_secs(1);
        let unserved =
            t::unserved(&mut conn, node.settings.retry.max_attempts, batch, quiet).await?;
        drop(conn);
        // Recovery and reconciliation are background work: served after counsel's uploads,
        // and promoted with age like any background demand (docs/protocol.md, "Who is served
        // next").
        for (m, _) in &expired {
            nudges.do_send(Nudge::matter(m.firm_id, m.matter_id).class(DemandClass::Background));
        }
        // The ledger found no change to these rows for `quiet`: their demands are at least that
        // old, so their debounce windows have passed.
        for m in &unserved {
            nudges.do_send(
                Nudge::matter(m.firm_id, m.matter_id)
                    .recorded_ago(quiet)
                    .class(DemandClass::Background),
            );
        }
        Ok(SweepReport {
            expired: expired.len(),
            unserved: unserved.len(),
        })
    }
}

impl Actor for Sweeper {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        let at_shutdown = *self.node.draining.borrow();
        self.watch.stopped(at_shutdown);
    }

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.periodic {
            return;
        }
        let every = crate::config::seconds(self.node.settings.sweeper.interval_seconds);
        ctx.run_interval(every, |act, ctx| {
            let (node, nudges) = (act.node.clone(), act.nudges.clone());
            // `wait`: passes never overlap; a slow pass delays the next instead of piling up.
            ctx.wait(
                async move {
                    if let Err(e) = Sweeper::run_once(&node, &nudges).await {
                        tracing::warn!(error = %e, "sweep pass failed; retrying next interval");
                    }
                }
                .into_actor(act),
            );
        });
        let every = crate::config::seconds(self.node.settings.retention.interval_seconds);
        ctx.run_interval(every, |act, ctx| act.retain(ctx));
    }
}

impl Handler<RetainNow> for Sweeper {
    type Result = ResponseActFuture<Self, Result<RetentionReport>>;

    fn handle(&mut self, _: RetainNow, _: &mut Context<Self>) -> Self::Result {
        let node = self.node.clone();
        // A periodic pass may be running (it holds the state): this one then walks from the
        // first matter, and its state is dropped.
        let taken = self.retention.take();
        let owned = taken.is_some();
        let mut state = taken.unwrap_or_default();
        Box::pin(
            async move {
                let result = state.pass(&node).await;
                (state, result)
            }
            .into_actor(self)
            .map(move |(state, result), act, _| {
                if owned {
                    act.retention = Some(state);
                }
                result
            }),
        )
    }
}

impl Handler<SweepNow> for Sweeper {
    type Result = ResponseFuture<Result<SweepReport>>;

    fn handle(&mut self, _: SweepNow, _: &mut Context<Self>) -> Self::Result {
        let (node, nudges) = (self.node.clone(), self.nudges.clone());
        Box::pin(async move { Sweeper::run_once(&node, &nudges).await })
    }
}
