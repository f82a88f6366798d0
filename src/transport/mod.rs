//! The nudge transport: how a committed fact reaches the matter actor of some node.
//!
//! The queue is never the truth. A message carries IDs and trace context only; losing one
//! delays work (reconciliation and the sweeper find the demand), duplicating one changes
//! nothing (the inbox dedupes on event id). Nudges commute: nothing downstream relies on
//! their order.
//!
//! * [`amqp`]: RabbitMQ: relay with confirms, quorum queue, dead letters, reconciliation.
//! * [`postgres`]: LISTEN/NOTIFY on the ledger itself, for a box with no broker or an
//!   application that embeds briefrail.

pub mod amqp;
pub mod postgres;
