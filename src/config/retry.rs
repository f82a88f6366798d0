//! `[retry]`: how often and how patiently a failed build is tried again.

use serde::Deserialize;

use super::bounds::DAY_S;
use super::{Bound, ConfigError, positive};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    pub max_attempts: u32,
    pub backoff_base_seconds: f64,
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
    /// At least one attempt, a positive base, and a ceiling no lower than the base.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("retry.max_attempts", self.max_attempts as f64)?;
        positive("retry.backoff_base_seconds", self.backoff_base_seconds)?;
        if self.backoff_max_seconds < self.backoff_base_seconds {
            return Err(ConfigError::new(
                "retry.backoff_max_seconds",
                "must be at least retry.backoff_base_seconds",
            ));
        }
        Ok(())
    }
}
