//! `[relay]`: the outbox relay's polling of the ledger for events to publish.

use serde::Deserialize;

use super::Bound;
use super::bounds::DAY_MS;

/// `[relay]`: how the outbox is published to RabbitMQ.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySettings {
    /// How often the relay looks for unpublished events when no notification woke it.
    pub poll_ms: u64,
    /// Events published per round.
    pub batch: u32,
}

pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "relay.poll_ms",
        1.0,
        DAY_MS,
        Milliseconds,
        |s| s.relay.poll_ms,
        whole
    ),
    bound!(
        "relay.batch",
        1.0,
        100_000.0,
        Count,
        |s| s.relay.batch,
        whole
    ),
];
