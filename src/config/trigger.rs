//! `[trigger]`: how demands on one matter collapse into one build.

use std::time::Duration;

use serde::Deserialize;

use super::bounds::{DAY_MS, DAY_S};
use super::{Bound, ConfigError, seconds};

/// `[trigger]`: how a matter's demands are coalesced, so a burst of facts costs one build.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSettings {
    /// Quiet time after a demand before the claim.
    pub debounce_ms: u64,
    /// The longest a demand waits while demands keep arriving.
    pub max_wait_ms: u64,
    /// An idle matter's actor stops after this long, freeing its memory.
    pub idle_seconds: f64,
}

pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "trigger.debounce_ms",
        0.0,
        DAY_MS,
        Milliseconds,
        |s| s.trigger.debounce_ms,
        whole
    ),
    bound!(
        "trigger.max_wait_ms",
        0.0,
        DAY_MS,
        Milliseconds,
        |s| s.trigger.max_wait_ms,
        whole
    ),
    bound!(
        "trigger.idle_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.trigger.idle_seconds,
        real
    ),
];

impl TriggerSettings {
    /// How long a matter actor stays idle before its supervisor stops it.
    pub(crate) fn idle_after(&self) -> Duration {
        seconds(self.idle_seconds)
    }

    /// The longest wait is at least the debounce window.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_wait_ms < self.debounce_ms {
            return Err(ConfigError::new(
                "trigger.max_wait_ms",
                "must be at least trigger.debounce_ms",
            ));
        }
        Ok(())
    }
}
