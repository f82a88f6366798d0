//! The actors of one node, wired to one ledger: supervisor, build runners, sweeper. Started and
//! stopped by [`crate::node::Node`], which adds the transport and the HTTP surface. Several
//! nodes on one database are normal; exclusivity comes only from the ledger's tokens.
//!
//! Stopping is two-phase: [`Actors::drain`] first stops new claims and lets in-flight builds
//! finish for the grace period, then cancels the rest, whose claims are handed back by token so
//! another node takes over at once instead of waiting out the lease.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;

use super::admission::Admission;
use super::build_runner::{BuildEnv, BuildRunners, Capacity};
pub use super::context::NodeContext;
use super::presence::{Depart, Presence};
use super::retention::RetentionReport;
use super::supervisor::{ActorCount, Supervisor};
use super::sweeper::{RetainNow, SweepNow, SweepReport, Sweeper};
use crate::builders::Builder;
use crate::builders::context::records_in_batches;
use crate::config::Settings;
use crate::db::Pool;
use crate::error::{Error, Result};
use crate::ledger::commits_in_batches;
use crate::ledger::transitions::{RetryPolicy, claims_in_batches};
use crate::metrics::Metrics;
use crate::nudge::Nudge;

/// At most this many members per batch (a batch holds its rows' locks until it commits).
const BATCH_MAX: usize = 64;

/// How to start the actors beyond the node's settings.
pub struct ActorOptions {
    pub builder: Arc<dyn Builder>,
    /// Shared with the HTTP surface; a fresh one by default.
    pub metrics: Arc<Metrics>,
    /// Start the periodic sweeper (tests that drive sweeps by hand turn it off).
    pub sweeper: bool,
}

impl ActorOptions {
    pub fn new(builder: Arc<dyn Builder>) -> Self {
        Self {
            builder,
            metrics: Arc::new(Metrics::default()),
            sweeper: true,
        }
    }
}

/// The running actors of a node. Must be started inside an actix `System`.
pub struct Actors {
    pub context: Arc<NodeContext>,
    supervisor: Addr<Supervisor>,
    sweeper: Addr<Sweeper>,
    presence: Addr<Presence>,
    draining: watch::Sender<bool>,
    cancel: watch::Sender<bool>,
}

impl Actors {
    /// Starts the supervisor, the build runners and the sweeper on the current arbiter.
    pub fn start(settings: Arc<Settings>, pool: Pool, opts: ActorOptions) -> Self {
        let (draining_tx, draining) = watch::channel(false);
        let (cancel_tx, cancel) = watch::channel(false);
        let node_id = settings.node_id();
        // Claims (and commits) asked for while this many batches of them are on the wire wait
        // for the next (`database.batch_lanes`).
        let lanes = settings.database.batch_lanes as usize;
        let capacity = Capacity::new(
            settings.builders.concurrency,
            settings.builders.held_claims(),
        );
        let admission = Admission::new(
            capacity.clone(),
            pool.clone(),
            settings.fairness.promote_after(),
            node_id.clone(),
            settings.lease.lease(),
        );
        let env = Arc::new(BuildEnv {
            pool: pool.clone(),
            builder: opts.builder,
            metrics: opts.metrics.clone(),
            node_id: node_id.clone(),
            heartbeat: settings.lease.heartbeat(),
            timeout: crate::config::seconds(settings.builder.timeout_seconds),
            retry: RetryPolicy::from(&settings.retry),
            commits: Some(commits_in_batches(pool.clone(), lanes, BATCH_MAX)),
            records: Some(records_in_batches(pool.clone(), lanes, BATCH_MAX)),
            capacity,
            admission: admission.clone(),
            cancel,
        });
        let runners = BuildRunners::start(env);
        actix::spawn(admission.clone().run(draining.clone()));
        let context = Arc::new(NodeContext {
            admission,
            settings,
            claims: claims_in_batches(pool.clone(), lanes, BATCH_MAX),
            pool,
            node_id,
            metrics: opts.metrics,
            runners,
            draining,
            liveness: Default::default(),
        });
        let supervisor = Supervisor::new(context.clone()).start();
        let sweeper = Sweeper::new(
            context.clone(),
            supervisor.clone().recipient(),
            opts.sweeper,
        )
        .start();
        let presence = Presence::new(context.clone()).start();
        tracing::info!(node_id = %context.node_id, builders = context.runners.size(),
                       held_claims = context.runners.max_held(), "actors started");
        Self {
            context,
            supervisor,
            sweeper,
            presence,
            draining: draining_tx,
            cancel: cancel_tx,
        }
    }

    /// Tells the node to look at a matter (what the transport does for every consumed event).
    pub fn nudge(&self, nudge: Nudge) {
        self.supervisor.do_send(nudge);
    }

    /// Where a transport sends its nudges.
    pub fn nudges(&self) -> Recipient<Nudge> {
        self.supervisor.clone().recipient()
    }

    /// The matter actor serving `key`, if one is alive (a test hook).
    #[cfg(feature = "testing")]
    pub async fn lookup(
        &self,
        key: crate::nudge::MatterKey,
    ) -> Option<Addr<super::matter::MatterActor>> {
        self.supervisor
            .send(super::supervisor::Lookup(key))
            .await
            .ok()
            .flatten()
    }

    /// Panics the supervisor (a test hook).
    #[cfg(feature = "testing")]
    pub fn crash_supervisor(&self) {
        self.supervisor.do_send(super::supervisor::Crash);
    }

    /// How many idle reports of matter actors wait in the supervisor (a test hook).
    #[cfg(feature = "testing")]
    pub async fn idle_reports(&self) -> usize {
        self.supervisor
            .send(super::supervisor::IdleReports)
            .await
            .unwrap_or(0)
    }

    /// Runs one sweep + reconcile pass now.
    pub async fn sweep_now(&self) -> Result<SweepReport> {
        self.sweeper
            .send(SweepNow)
            .await
            .map_err(|e| Error::internal_from("the sweeper did not answer", e))?
    }

    /// Runs one retention pass now.
    pub async fn retain_now(&self) -> Result<RetentionReport> {
        self.sweeper
            .send(RetainNow)
            .await
            .map_err(|e| Error::internal_from("the sweeper did not answer", e))?
    }

    /// Matter actors alive now.
    pub async fn actor_count(&self) -> usize {
        self.supervisor.send(ActorCount).await.unwrap_or(0)
    }

    /// Two-phase stop: no new claims, in-flight builds get `grace`, then the rest are cancelled
    /// and their claims released by token. Returns whether everything finished within grace.
    pub async fn drain(&self, grace: Duration) -> bool {
        tracing::info!(
            grace_s = grace.as_secs_f64(),
            busy = self.context.runners.busy(),
            held = self.context.runners.held(),
            "shutdown: draining"
        );
        let _ = self.draining.send(true);
        let drained = self.context.runners.wait_idle(grace).await;
        if !drained {
            tracing::warn!(
                busy = self.context.runners.busy(),
                held = self.context.runners.held(),
                "grace passed: cancelling in-flight builds"
            );
            let _ = self.cancel.send(true);
            self.context
                .runners
                .wait_idle(Duration::from_secs(10))
                .await;
        }
        self.sweeper.do_send(StopSweeper);
        let _ = self.presence.send(Depart).await;
        drained
    }
}

/// Stops the sweeper's timer for good.
#[derive(Message)]
#[rtype(result = "()")]
struct StopSweeper;

impl Handler<StopSweeper> for Sweeper {
    type Result = ();
    fn handle(&mut self, _: StopSweeper, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
