//! Exchange and queue names, and their idempotent declaration.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use super::broker;
use crate::error::Result;

/// How many times a quorum queue redelivers a message before dead-lettering it.
pub const DELIVERY_LIMIT: i64 = 5;

/// The names, all under one prefix so installations (and parallel tests) never collide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Durable topic exchange for every domain event; routing key = event name.
    pub events_exchange: String,
    /// The Brief rail's trigger queue (durable, quorum), bound to every event (`#`).
    pub trigger_queue: String,
    /// Dead-letter exchange (fanout) and queue.
    pub dead_exchange: String,
    pub dead_queue: String,
}

impl Topology {
    pub fn new(prefix: &str) -> Self {
        Self {
            events_exchange: format!("{prefix}.events"),
            trigger_queue: format!("{prefix}.brief-rail.trigger"),
            dead_exchange: format!("{prefix}.dead"),
            dead_queue: format!("{prefix}.brief-rail.dead"),
        }
    }

    /// Declares everything; safe to repeat (every node does it at start).
    pub async fn declare(&self, ch: &Channel) -> Result<()> {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.exchange_declare(
            self.events_exchange.as_str().into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await
        .map_err(broker)?;
        ch.exchange_declare(
            self.dead_exchange.as_str().into(),
            ExchangeKind::Fanout,
            durable,
            FieldTable::default(),
        )
        .await
        .map_err(broker)?;
        let durable_q = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let mut dead_args = FieldTable::default();
        dead_args.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
        ch.queue_declare(self.dead_queue.as_str().into(), durable_q, dead_args)
            .await
            .map_err(broker)?;
        ch.queue_bind(
            self.dead_queue.as_str().into(),
            self.dead_exchange.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(broker)?;
        let mut args = FieldTable::default();
        args.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(self.dead_exchange.as_str().into()),
        );
        args.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(DELIVERY_LIMIT),
        );
        ch.queue_declare(self.trigger_queue.as_str().into(), durable_q, args)
            .await
            .map_err(broker)?;
        // Every fact, not only those the rail hears: a fact no queue listened to would come back
        // unroutable and stay in the outbox for ever. The trigger consumes the others with no
        // effect. (Installations declared before this binding keep their per-name bindings; a
        // message matching several bindings of one queue is delivered to it once.)
        ch.queue_bind(
            self.trigger_queue.as_str().into(),
            self.events_exchange.as_str().into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(broker)?;
        Ok(())
    }
}

impl Topology {
    /// Deletes the queues and exchanges (tests, the demo and the benchmark clean up with it).
    /// Best effort: what is already gone is not an error.
    pub async fn delete(&self, url: &crate::secret::SecretUrl) {
        let Ok(conn) = super::connect(url, "briefrail-cleanup").await else {
            return;
        };
        if let Ok(ch) = conn.create_channel().await {
            for q in [&self.trigger_queue, &self.dead_queue] {
                let _ = ch.queue_delete(q.as_str().into(), Default::default()).await;
            }
            for x in [&self.events_exchange, &self.dead_exchange] {
                let _ = ch
                    .exchange_delete(x.as_str().into(), Default::default())
                    .await;
            }
        }
        let _ = conn.close(200, "cleanup".into()).await;
    }
}
