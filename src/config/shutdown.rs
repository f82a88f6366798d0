//! `[shutdown]`: how long a stopping node lets running builds finish.

use serde::Deserialize;

use super::bounds::DAY_S;
use super::{Bound, ConfigError};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownSettings {
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

impl ShutdownSettings {
    /// The grace period is finite and not negative.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.grace_seconds < 0.0 || !self.grace_seconds.is_finite() {
            return Err(ConfigError::new(
                "shutdown.grace_seconds",
                "must be zero or more",
            ));
        }
        Ok(())
    }
}
