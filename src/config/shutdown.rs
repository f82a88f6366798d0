//! `[shutdown]`: how long a stopping node lets running builds finish.

use serde::Deserialize;

use super::Bound;
use super::bounds::DAY_S;

/// `[shutdown]`: how a node stops.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownSettings {
    /// How long in-flight builds may finish before they are cancelled.
    pub grace_seconds: f64,
}

pub(super) const BOUNDS: &[Bound] = &[bound!(
    "shutdown.grace_seconds",
    0.0,
    DAY_S,
    Seconds,
    |s| s.shutdown.grace_seconds,
    real
)];
