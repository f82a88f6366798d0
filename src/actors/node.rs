//! A node: the actors of one `briefrail run` process (or of one embedding application), wired
//! to one ledger. Several nodes on one database are normal; exclusivity comes only from the
//! ledger's tokens.
//!
//! Shutdown is two-phase: [`Node::shutdown`] first stops new claims and lets in-flight builds
//! finish for `shutdown.grace_seconds`, then cancels the rest, whose claims are handed back by
//! token so another node takes over at once instead of waiting out the lease.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;

use super::builder::{BuildEnv, BuilderPool};
use super::supervisor::{ActorCount, Nudge, Supervisor};
use super::sweeper::{SweepNow, SweepReport, Sweeper};
use crate::build::Builder;
use crate::config::Settings;
use crate::db::Pool;
use crate::error::{Error, Result};
use crate::ledger::transitions::RetryPolicy;
use crate::metrics::Metrics;

/// What the actors of a node share. Read-only after start, except the two shutdown signals.
pub struct NodeContext {
    pub settings: Arc<Settings>,
    pub pool: Pool,
    pub node_id: String,
    pub metrics: Arc<Metrics>,
    pub slots: BuilderPool,
    /// True once shutdown began: no new claims; follow-ups are released instead of built.
    pub draining: watch::Receiver<bool>,
}

/// How to start a node beyond its settings.
pub struct NodeOptions {
    pub builder: Arc<dyn Builder>,
    /// Shared with the HTTP surface; a fresh one by default.
    pub metrics: Arc<Metrics>,
    /// Start the periodic sweeper (tests that drive sweeps by hand turn it off).
    pub sweeper: bool,
}

impl NodeOptions {
    pub fn new(builder: Arc<dyn Builder>) -> Self {
        Self {
            builder,
            metrics: Arc::new(Metrics::default()),
            sweeper: true,
        }
    }
}

/// A running node. Must be started inside an actix `System`.
pub struct Node {
    pub context: Arc<NodeContext>,
    pub supervisor: Addr<Supervisor>,
    pub sweeper: Addr<Sweeper>,
    draining: watch::Sender<bool>,
    cancel: watch::Sender<bool>,
}

impl Node {
    /// Starts the supervisor, the builder pool and the sweeper on the current arbiter.
    pub fn start(settings: Arc<Settings>, pool: Pool, opts: NodeOptions) -> Self {
        let (draining_tx, draining) = watch::channel(false);
        let (cancel_tx, cancel) = watch::channel(false);
        let node_id = settings.node_id();
        let env = Arc::new(BuildEnv {
            pool: pool.clone(),
            builder: opts.builder,
            metrics: opts.metrics.clone(),
            node_id: node_id.clone(),
            heartbeat: settings.lease.heartbeat(),
            timeout: Duration::from_secs_f64(settings.builder.timeout_seconds),
            retry: RetryPolicy::from(&settings.retry),
            cancel,
        });
        let slots = BuilderPool::start(settings.builders.concurrency, env);
        let context = Arc::new(NodeContext {
            settings,
            pool,
            node_id,
            metrics: opts.metrics,
            slots,
            draining,
        });
        let supervisor = Supervisor::new(context.clone()).start();
        let sweeper = Sweeper::new(context.clone(), supervisor.clone(), opts.sweeper).start();
        tracing::info!(node_id = %context.node_id, builders = context.slots.size(), "node started");
        Self {
            context,
            supervisor,
            sweeper,
            draining: draining_tx,
            cancel: cancel_tx,
        }
    }

    /// Tells the node to look at a matter (what the transport does for every consumed event).
    pub fn nudge(&self, nudge: Nudge) {
        self.supervisor.do_send(nudge);
    }

    /// Runs one sweep + reconcile pass now.
    pub async fn sweep_now(&self) -> Result<SweepReport> {
        self.sweeper
            .send(SweepNow)
            .await
            .map_err(|e| Error::internal_from("the sweeper did not answer", e))?
    }

    /// Matter actors alive now.
    pub async fn actor_count(&self) -> usize {
        self.supervisor.send(ActorCount).await.unwrap_or(0)
    }

    /// Two-phase stop: no new claims, in-flight builds get `grace`, then the rest are cancelled
    /// and their claims released by token. Returns whether everything finished within grace.
    pub async fn shutdown(&self, grace: Duration) -> bool {
        tracing::info!(
            grace_s = grace.as_secs_f64(),
            busy = self.context.slots.busy(),
            "shutdown: draining"
        );
        let _ = self.draining.send(true);
        let drained = self.context.slots.wait_idle(grace).await;
        if !drained {
            tracing::warn!(
                busy = self.context.slots.busy(),
                "grace passed: cancelling in-flight builds"
            );
            let _ = self.cancel.send(true);
            self.context.slots.wait_idle(Duration::from_secs(10)).await;
        }
        self.sweeper.do_send(StopActor);
        tracing::info!("shutdown complete");
        drained
    }
}

/// Stops the actor that receives it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopActor;

/// Every actor that can be told to stop.
macro_rules! stoppable {
    ($($t:ty),*) => {$(
        impl Handler<StopActor> for $t {
            type Result = ();
            fn handle(&mut self, _: StopActor, ctx: &mut Context<Self>) {
                ctx.stop();
            }
        }
    )*};
}
stoppable!(Sweeper, crate::transport::postgres::PgTransport);
