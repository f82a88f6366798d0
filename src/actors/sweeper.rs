//! The sweeper: every `sweeper.interval_seconds` it fails expired claims (their runs become
//! `lease_expired`) and finds rows with unserved demand that nobody is serving, and nudges
//! their matters. This is what makes a dropped nudge, a crashed node or a lost actor harmless.
//! [`Sweeper::run_once`] is the whole job; the actor's timer only calls it.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::context::NodeContext;
use crate::error::Result;
use crate::ledger::transitions as t;
use crate::metrics::Metrics;
use crate::nudge::Nudge;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    pub expired: usize,
    pub unserved: usize,
}

/// Run one pass now (tests call this instead of waiting for the timer).
#[derive(Message)]
#[rtype(result = "Result<SweepReport>")]
pub struct SweepNow;

pub struct Sweeper {
    node: Arc<NodeContext>,
    nudges: Recipient<Nudge>,
    /// Run a pass every `sweeper.interval_seconds`; without it passes run only on [`SweepNow`].
    periodic: bool,
}

impl Sweeper {
    pub fn new(node: Arc<NodeContext>, nudges: Recipient<Nudge>, periodic: bool) -> Self {
        Self {
            node,
            nudges,
            periodic,
        }
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
        for m in expired.iter().map(|(m, _)| m).chain(unserved.iter()) {
            nudges.do_send(Nudge::matter(m.firm_id, m.matter_id));
        }
        Ok(SweepReport {
            expired: expired.len(),
            unserved: unserved.len(),
        })
    }
}

impl Actor for Sweeper {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if !self.periodic {
            return;
        }
        let every = Duration::from_secs_f64(self.node.settings.sweeper.interval_seconds);
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
    }
}

impl Handler<SweepNow> for Sweeper {
    type Result = ResponseFuture<Result<SweepReport>>;

    fn handle(&mut self, _: SweepNow, _: &mut Context<Self>) -> Self::Result {
        let (node, nudges) = (self.node.clone(), self.nudges.clone());
        Box::pin(async move { Sweeper::run_once(&node, &nudges).await })
    }
}
