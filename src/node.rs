//! A node: the one way to start briefrail, for `briefrail run`, the demo, the benchmark, the
//! tests and every embedding application.
//!
//! A node owns its actors (supervisor, build runners, sweeper), its transport (the one its
//! settings name, delivering nudges to the actors) and, when asked, its surfaces (the HTTP admin
//! endpoint: `.surface(briefrail::http_admin())`). It starts them in the order that
//! loses nothing (actors before the transport that feeds them) and stops them in one shutdown:
//! stop intake (the transport), drain in-flight builds for `shutdown.grace_seconds`, cancel the
//! rest (their claims handed back by token), then stop the surfaces. A surface is anything that
//! can be started from the node's context and stopped ([`Surface`]): the node knows no HTTP.

use std::sync::Arc;
use std::time::Duration;

use actix::Recipient;

use crate::actors::{ActorOptions, Actors, NodeContext, RetentionReport, SweepReport};
use crate::builders::Builder;
use crate::config::Settings;
use crate::db::{self, Pool};
use crate::error::Result;
use crate::metrics::Metrics;
use crate::nudge::Nudge;
use crate::transport;

/// How to start a [`Node`]; made by [`Node::builder`].
pub struct NodeBuilder {
    settings: Arc<Settings>,
    builder: Arc<dyn Builder>,
    pool: Option<Pool>,
    metrics: Arc<Metrics>,
    transport: bool,
    periodic_sweeper: bool,
    surfaces: Vec<StartSurface>,
}

/// Something a node serves besides its actors and transport (the HTTP admin endpoint, an
/// embedder's own): started once the actors run, stopped last at shutdown.
pub trait Surface {
    /// The address it listens on, if any (useful with port 0).
    fn addr(&self) -> Option<std::net::SocketAddr> {
        None
    }
    /// Stops it; called after the builds have drained.
    fn stop(&self) -> futures_util::future::LocalBoxFuture<'_, ()>;
}

/// How a surface is started: from the node's context (settings, pool, metrics, node id).
pub type StartSurface = Box<dyn FnOnce(&Arc<NodeContext>) -> Result<Box<dyn Surface>>>;

impl NodeBuilder {
    /// Share an existing pool (an embedder's, or a test database's) instead of opening one
    /// from `database.*`.
    pub fn pool(mut self, pool: Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Share the metrics with something else that renders them.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Start no transport: nudges come only from [`Node::nudge`] (or from a transport the
    /// caller starts itself with [`Node::nudges`]), and from the sweeper.
    pub fn without_transport(mut self) -> Self {
        self.transport = false;
        self
    }

    /// Run sweeps only when asked ([`Node::sweep_now`]), not every `sweeper.interval_seconds`.
    pub fn without_periodic_sweeper(mut self) -> Self {
        self.periodic_sweeper = false;
        self
    }

    /// Also serve `surface` (e.g. `briefrail::http_admin()`, the HTTP admin endpoint
    /// on `http.bind`).
    pub fn surface(mut self, start: StartSurface) -> Self {
        self.surfaces.push(start);
        self
    }

    /// Starts the node on the current actix system. Refuses a database it cannot reach (naming
    /// the server and the cause: [`crate::Error::Unreachable`]) and one with migrations of this
    /// binary pending ([`crate::Error::Unmigrated`]): a node must never run statements its schema
    /// does not have.
    /// Settings past their bounds ([`crate::config::BOUNDS`]) are refused first
    /// ([`crate::Error::Config`]): an embedder may build them without `validate`, and a value
    /// past its bound would crash an actor after the node reported itself started.
    pub async fn start(self) -> Result<Node> {
        let settings = self.settings;
        settings.validate_bounds()?;
        let url = settings.database.url.expose();
        db::reach::reach(url, db::reach::TIMEOUT).await?;
        db::migrate::require_current(url).await?;
        let pool = match self.pool {
            Some(p) => p,
            None => db::connect(&db::PoolOptions::from(&settings.database)).await?,
        };
        let mut opts = ActorOptions::new(self.builder);
        opts.metrics = self.metrics.clone();
        opts.sweeper = self.periodic_sweeper;
        let actors = Actors::start(settings.clone(), pool.clone(), opts);
        let mut node = Node {
            settings,
            actors,
            transport: None,
            surfaces: Vec::new(),
        };
        // Whatever fails to start, what did start is stopped by the one shutdown.
        if let Err(e) = node.attach(self.transport, self.surfaces).await {
            node.shutdown_within(Duration::ZERO).await;
            return Err(e);
        }
        tracing::info!(node_id = %node.node_id(), transport = ?node.settings.transport.kind,
                       with_transport = node.transport.is_some(), "node started");
        Ok(node)
    }
}

/// A running node: its actors, its transport and its surfaces, started in the order that loses
/// nothing (actors before the transport that feeds them) and stopped in one shutdown (stop
/// intake, drain in-flight builds for `shutdown.grace_seconds`, cancel the rest, their claims
/// handed back by token, then stop the surfaces).
///
/// ```no_run
/// # async fn start(settings: std::sync::Arc<briefrail::config::Settings>) -> briefrail::Result<()> {
/// use std::sync::Arc;
/// use briefrail::{BriefBuilder, Node};
///
/// let node = Node::builder(settings, Arc::new(BriefBuilder))
///     .surface(briefrail::http_admin())
///     .start()
///     .await?;
/// // ... the application runs; facts recorded through the outbox reach the Brief ...
/// node.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Node {
    settings: Arc<Settings>,
    actors: Actors,
    transport: Option<transport::Running>,
    surfaces: Vec<Box<dyn Surface>>,
}

impl Node {
    /// Starts the transport (when asked) and the surfaces, in that order, on running actors.
    async fn attach(&mut self, transport: bool, surfaces: Vec<StartSurface>) -> Result<()> {
        if transport {
            let ctx = &self.actors.context;
            let t = transport::start(
                &self.settings,
                ctx.pool.clone(),
                ctx.metrics.clone(),
                self.actors.nudges(),
            )
            .await?;
            self.transport = Some(t);
        }
        for start in surfaces {
            let surface = start(&self.actors.context)?;
            self.surfaces.push(surface);
        }
        Ok(())
    }

    /// A node with these settings, building with `builder`.
    pub fn builder(settings: Arc<Settings>, builder: Arc<dyn Builder>) -> NodeBuilder {
        NodeBuilder {
            settings,
            builder,
            pool: None,
            metrics: Arc::new(Metrics::default()),
            transport: true,
            periodic_sweeper: true,
            surfaces: Vec::new(),
        }
    }

    /// Tells the node to look at a matter (what the transport does for every consumed event).
    pub fn nudge(&self, nudge: Nudge) {
        self.actors.nudge(nudge);
    }

    /// Where a transport sends its nudges (for a transport the caller runs itself).
    pub fn nudges(&self) -> Recipient<Nudge> {
        self.actors.nudges()
    }

    /// Runs one sweep + reconcile pass now.
    pub async fn sweep_now(&self) -> Result<SweepReport> {
        self.actors.sweep_now().await
    }

    /// Runs one retention pass now (`retention.*`: what goes and when).
    pub async fn retain_now(&self) -> Result<RetentionReport> {
        self.actors.retain_now().await
    }

    /// Matter actors alive now.
    pub async fn actor_count(&self) -> usize {
        self.actors.actor_count().await
    }

    /// What the actors share: settings, pool, node id, metrics, builder slots.
    #[cfg(feature = "testing")]
    pub fn context(&self) -> &Arc<NodeContext> {
        &self.actors.context
    }

    /// The metrics the node counts into (`/metrics` renders them).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.actors.context.metrics
    }

    /// The node's pool: an embedder records facts through it.
    pub fn pool(&self) -> &Pool {
        &self.actors.context.pool
    }

    /// This node's id in the ledger's runs and logs.
    pub fn node_id(&self) -> &str {
        &self.actors.context.node_id
    }

    /// The first address a surface listens on (the HTTP admin endpoint's, with port 0).
    pub fn surface_addr(&self) -> Option<std::net::SocketAddr> {
        self.surfaces.iter().find_map(|s| s.addr())
    }

    /// The matter actor serving `key`, if one is alive (a test hook).
    #[cfg(feature = "testing")]
    pub async fn lookup(
        &self,
        key: crate::nudge::MatterKey,
    ) -> Option<actix::Addr<crate::actors::matter::MatterActor>> {
        self.actors.lookup(key).await
    }

    /// Panics the node's supervisor (a test hook): its death must show on `/readyz`.
    #[cfg(feature = "testing")]
    pub fn crash_supervisor(&self) {
        self.actors.crash_supervisor();
    }

    /// How many idle reports of matter actors wait in the supervisor (a test hook).
    #[cfg(feature = "testing")]
    pub async fn idle_reports(&self) -> usize {
        self.actors.idle_reports().await
    }

    /// Stops the transport only (intake), leaving the actors running: what a test of a lost
    /// transport, or an operator pausing intake, does. [`Node::shutdown`] does it too.
    pub async fn stop_intake(&self) {
        if let Some(t) = &self.transport {
            t.stop().await;
        }
    }

    /// The one shutdown, with `shutdown.grace_seconds` for in-flight builds. Returns whether
    /// every build finished within the grace.
    pub async fn shutdown(&self) -> bool {
        self.shutdown_within(crate::config::seconds(self.settings.shutdown.grace_seconds))
            .await
    }

    /// The one shutdown: stop intake, drain for `grace`, cancel the rest (claims handed back
    /// by token), stop the surfaces.
    pub async fn shutdown_within(&self, grace: Duration) -> bool {
        self.stop_intake().await;
        let drained = self.actors.drain(grace).await;
        for s in &self.surfaces {
            s.stop().await;
        }
        tracing::info!(node_id = %self.node_id(), drained, "node stopped");
        drained
    }
}
