//! `[retry]`: how often and how patiently a failed build is tried again.

use serde::Deserialize;

use super::bounds::DAY_S;
use super::{Bound, ConfigError};

/// `[retry]`: how a failed build is retried, so a flaky builder recovers and a broken one
/// stops.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    /// Attempts before the matter is left failed until a new demand.
    pub max_attempts: u32,
    /// The first backoff; it doubles with each failure.
    pub backoff_base_seconds: f64,
    /// The longest backoff.
    pub backoff_max_seconds: f64,
}

pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "retry.max_attempts",
        1.0,
        1000.0,
        Count,
        |s| s.retry.max_attempts,
        whole
    ),
    bound!(
        "retry.backoff_base_seconds",
        0.001,
        DAY_S,
        Seconds,
        |s| s.retry.backoff_base_seconds,
        real
    ),
    bound!(
        "retry.backoff_max_seconds",
        0.001,
        DAY_S,
        Seconds,
        |s| s.retry.backoff_max_seconds,
        real
    ),
];

impl RetrySettings {
    /// The ceiling of the backoff is no lower than its base.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.backoff_max_seconds < self.backoff_base_seconds {
            return Err(ConfigError::new(
                "retry.backoff_max_seconds",
                "must be at least retry.backoff_base_seconds",
            ));
        }
        Ok(())
    }
}
