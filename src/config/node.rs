//! `[node]`: this process's name in the ledger and how often it says it is alive.

use serde::Deserialize;

use super::bounds::DAY_S;
use super::{Bound, ConfigError, Settings};

/// `[node]`: this node's identity in the ledger's runs and logs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSettings {
    /// Recorded on every run this node starts. Empty: `hostname-pid`.
    pub id: String,
    /// How often the node writes its heartbeat to `ops.nodes` (the console's nodes page); it
    /// shows as gone after three of its own intervals without one.
    pub heartbeat_seconds: f64,
}

pub(super) const BOUNDS: &[Bound] = &[bound!(
    "node.heartbeat_seconds",
    0.01,
    DAY_S,
    Seconds,
    |s| s.node.heartbeat_seconds,
    real
)];

/// The longest `node.id`: `briefrail-<id>` is the trigger's consumer tag, an AMQP short string
/// (at most 255 bytes).
pub const MAX_ID_LEN: usize = 200;

impl NodeSettings {
    /// `id` has no control characters (it is written in every run and log line) and is at
    /// most [`MAX_ID_LEN`] bytes.
    pub(super) fn validate_id(&self) -> Result<(), ConfigError> {
        let len = self.id.trim().len();
        if len > MAX_ID_LEN {
            return Err(ConfigError::new(
                "node.id",
                format!(
                    "is {len} bytes, longer than {MAX_ID_LEN}: it names the node's consumer on \
                     the broker, an AMQP short string of at most 255 bytes"
                ),
            ));
        }
        if let Some(c) = self.id.chars().find(|c| c.is_control()) {
            return Err(ConfigError::new(
                "node.id",
                format!(
                    "must not contain control characters (found U+{:04X}): it is written in \
                     every run and log line",
                    c as u32
                ),
            ));
        }
        Ok(())
    }
}

impl Settings {
    /// This node's id: `node.id`, or `hostname-pid`. An embedder passes it to
    /// [`crate::otel::start`], so its spans name the node the way the node's logs do.
    pub fn node_id(&self) -> String {
        if !self.node.id.trim().is_empty() {
            return self.node.id.trim().to_owned();
        }
        let host = hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "node".into());
        format!("{host}-{}", std::process::id())
    }
}
