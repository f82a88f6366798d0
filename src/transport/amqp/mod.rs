//! The RabbitMQ transport (`transport.kind = "amqp"`).
//!
//! * [`topology`]: a durable topic exchange for domain events, the Brief rail's durable quorum
//!   queue bound to the event names it hears, a dead-letter exchange and queue. Declared at
//!   start, idempotently.
//! * [`relay`]: the outbox → broker relay, with publisher confirms and `mandatory`.
//! * [`consumer`]: the trigger's consumer: inbox, gates, demand, then ack, then nudge.
//! * [`message`]: the wire format: IDs and trace context only.

pub mod consumer;
pub mod message;
pub mod relay;
pub mod topology;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::config::Settings;
use crate::db::Pool;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::nudge::Nudge;
use crate::secret::SecretUrl;

pub use topology::Topology;

/// Opens a connection to the broker. Errors never carry the password.
pub async fn connect(url: &SecretUrl, name: &str) -> Result<lapin::Connection> {
    // No automatic recovery: our sessions reconnect themselves and re-read the ledger, which
    // is the truth; a transparently recovered channel could hide lost confirms.
    let props = lapin::ConnectionProperties::default().with_connection_name(name.to_owned().into());
    lapin::Connection::connect(url.expose(), props)
        .await
        .map_err(Error::from)
}

pub(crate) fn broker(e: lapin::Error) -> Error {
    Error::from(e)
}

/// Options shared by the relay and the consumer.
#[derive(Clone)]
pub struct AmqpOptions {
    pub url: SecretUrl,
    pub topology: Topology,
    pub db_url: SecretUrl,
    pub pool: Pool,
    pub metrics: Arc<Metrics>,
    pub relay_batch: i64,
    pub relay_poll: Duration,
    pub reconcile_after: Duration,
    pub prefetch: u16,
    pub node_id: String,
}

impl AmqpOptions {
    pub fn from_settings(settings: &Settings, pool: Pool, metrics: Arc<Metrics>) -> Self {
        Self {
            url: settings.transport.amqp_url.clone(),
            topology: Topology::new(&settings.transport.prefix),
            db_url: settings.database.url.clone(),
            pool,
            metrics,
            relay_batch: settings.relay.batch as i64,
            relay_poll: Duration::from_millis(settings.relay.poll_ms),
            reconcile_after: Duration::from_secs_f64(settings.reconcile.after_seconds),
            prefetch: 32,
            node_id: settings.node_id(),
        }
    }
}

/// Declares the topology (failing fast if the broker does not answer at start), then starts
/// the relay and the consumer. Both reconnect on their own after a broker outage.
pub async fn start(opts: AmqpOptions, nudges: Recipient<Nudge>) -> Result<super::Running> {
    let conn = connect(&opts.url, &format!("briefrail-{}-setup", opts.node_id)).await?;
    let ch = conn.create_channel().await.map_err(broker)?;
    opts.topology.declare(&ch).await?;
    let _ = ch.close(200, "topology declared".into()).await;
    let _ = conn.close(200, "topology declared".into()).await;
    // The consumer stops first (no more intake), then the relay.
    let consumer = consumer::TriggerConsumer::new(opts.clone(), nudges).start();
    let relay = relay::Relay::new(opts).start();
    Ok(super::Running::new(vec![
        consumer.recipient(),
        relay.recipient(),
    ]))
}
