//! The node's presence in the ledger (`ops.nodes`): announced when the actors start, a
//! heartbeat every `node.heartbeat_seconds`, and a clean departure at shutdown, so the console
//! and `briefrail nodes` show every node that runs against this ledger, and which are gone.
//! A failed heartbeat is logged and tried again at the next tick: presence is for operators,
//! and no guarantee depends on it.

use std::sync::Arc;

use actix::prelude::*;

use super::context::NodeContext;
use crate::error::Result;
use crate::ledger::presence::{self, Announcement};

pub struct Presence {
    node: Arc<NodeContext>,
    /// Whether the announcement (or a heartbeat after it) reached the ledger yet.
    announced: bool,
    /// Set at departure: no heartbeat after it may bring the row back to life.
    departed: bool,
    watch: super::liveness::Watch,
}

impl Presence {
    pub fn new(node: Arc<NodeContext>) -> Self {
        Self {
            watch: node.liveness.watch("presence"),
            node,
            announced: false,
            departed: false,
        }
    }
}

fn transport_name(node: &NodeContext) -> &'static str {
    match node.settings.transport.kind {
        crate::config::TransportKind::Amqp => "amqp",
        crate::config::TransportKind::Postgres => "postgres",
    }
}

fn announcement(node: &NodeContext) -> Announcement<'_> {
    Announcement {
        node_id: &node.node_id,
        version: env!("CARGO_PKG_VERSION"),
        transport: transport_name(node),
        heartbeat_seconds: node.settings.node.heartbeat_seconds,
    }
}

async fn beat(node: &NodeContext, first: bool) -> Result<()> {
    let a = announcement(node);
    let mut conn = node.pool.get().await?;
    if first {
        presence::announce(&mut conn, &a).await
    } else {
        presence::heartbeat(&mut conn, &a).await
    }
}

/// One heartbeat (the timer's tick).
#[derive(Message)]
#[rtype(result = "()")]
struct Beat;

impl Actor for Presence {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        let at_shutdown = *self.node.draining.borrow();
        self.watch.stopped(at_shutdown);
    }

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.notify(Beat);
        let every = crate::config::seconds(self.node.settings.node.heartbeat_seconds);
        ctx.run_interval(every, |_, ctx| ctx.notify(Beat));
    }
}

// Both handlers are atomic (one at a time, in order), so a heartbeat still in flight can
// never land after the departure and bring the row back.
impl Handler<Beat> for Presence {
    type Result = AtomicResponse<Self, ()>;
    fn handle(&mut self, _: Beat, _: &mut Context<Self>) -> Self::Result {
        let node = self.node.clone();
        let (first, departed) = (!self.announced, self.departed);
        AtomicResponse::new(Box::pin(
            async move {
                if departed {
                    return Ok(());
                }
                beat(&node, first).await
            }
            .into_actor(self)
            .map(|r, this, _| match r {
                Ok(()) => this.announced = true,
                Err(e) => tracing::warn!(error = %e, "node heartbeat not recorded"),
            }),
        ))
    }
}

/// Records the clean departure and stops the timer; answers once the ledger has it (or the
/// attempt failed: the node then shows as gone after three missed heartbeats).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Depart;

impl Handler<Depart> for Presence {
    type Result = AtomicResponse<Self, ()>;
    fn handle(&mut self, _: Depart, _: &mut Context<Self>) -> Self::Result {
        self.departed = true;
        let node = self.node.clone();
        AtomicResponse::new(Box::pin(
            async move {
                let r = async {
                    let mut conn = node.pool.get().await?;
                    presence::depart(&mut conn, &announcement(&node)).await
                }
                .await;
                if let Err(e) = r {
                    tracing::warn!(error = %e, "node departure not recorded");
                }
            }
            .into_actor(self)
            .map(|_, _, ctx| ctx.stop()),
        ))
    }
}
