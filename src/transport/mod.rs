//! The nudge transport: how a committed fact reaches the matter actor of some node.
//!
//! The queue is never the truth. A message carries IDs and trace context only; losing one
//! delays work (reconciliation and the sweeper find the demand), duplicating one changes
//! nothing (the inbox dedupes on event id). Nudges commute: nothing downstream relies on
//! their order.
//!
//! A transport knows the ledger and a `Recipient<Nudge>`, nothing of the actors: it is started
//! by [`start`] (or by a node, which calls it) and stopped through the [`Running`] handle.
//!
//! * [`amqp`]: RabbitMQ: relay with confirms, quorum queue, dead letters, reconciliation
//!   (`feature = "amqp"`).
//! * [`postgres`]: LISTEN/NOTIFY on the ledger itself, for a box with no broker or an
//!   application that embeds briefrail.

#[cfg(feature = "amqp")]
pub mod amqp;
pub mod postgres;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::config::{Settings, TransportKind};
use crate::db::Pool;
use crate::error::Result;
use crate::metrics::Metrics;
use crate::nudge::Nudge;

/// Stops a transport's actor: it hears no more events.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Stop;

/// A started transport: stop it to stop intake.
pub struct Running {
    /// In the order they are stopped (intake first).
    actors: Vec<Recipient<Stop>>,
}

impl Running {
    pub fn new(actors: Vec<Recipient<Stop>>) -> Self {
        Self { actors }
    }

    /// Stops every actor of the transport, in order, waiting for each.
    pub async fn stop(&self) {
        for a in &self.actors {
            let _ = a.send(Stop).await;
        }
    }
}

/// Starts the transport `settings.transport.kind` names, delivering nudges to `nudges`.
pub async fn start(
    settings: &Settings,
    pool: Pool,
    metrics: Arc<Metrics>,
    nudges: Recipient<Nudge>,
) -> Result<Running> {
    match settings.transport.kind {
        TransportKind::Postgres => {
            let opts = postgres::PgTransportOptions {
                url: settings.database.url.clone(),
                pool,
                poll: Duration::from_millis(settings.relay.poll_ms),
                batch: settings.relay.batch as i64,
                metrics,
            };
            let t = postgres::PgTransport::new(opts, nudges).start();
            Ok(Running::new(vec![t.recipient()]))
        }
        #[cfg(feature = "amqp")]
        TransportKind::Amqp => {
            amqp::start(
                amqp::AmqpOptions::from_settings(settings, pool, metrics),
                nudges,
            )
            .await
        }
        #[cfg(not(feature = "amqp"))]
        TransportKind::Amqp => Err(crate::Error::InvalidInput(
            "transport.kind = \"amqp\", but this build of briefrail has no amqp feature".into(),
        )),
    }
}
