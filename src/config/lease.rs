//! `[lease]`: how long a node's claim stays its own without a heartbeat.

use std::time::Duration;

use serde::Deserialize;

use super::bounds::DAY_S;
use super::{Bound, ConfigError, seconds};

/// `[lease]`: how long a claim lives without a heartbeat, so a dead node's claims expire.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSettings {
    /// The lease of this node's claims: each claim and heartbeat writes `ops.now() + seconds` on
    /// the row as its deadline (the ledger clock: the database clock); once it passes, any node
    /// may take the claim over. Other nodes compare with the row, never with their own setting.
    pub seconds: f64,
    /// Seconds between heartbeats of a running build; defaults to a third of the lease.
    pub heartbeat_seconds: Option<f64>,
}

pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "lease.seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.lease.seconds,
        real
    ),
    bound!(
        "lease.heartbeat_seconds",
        0.005,
        DAY_S,
        Seconds,
        |s| s.lease.heartbeat_seconds,
        opt_real
    ),
];

impl LeaseSettings {
    pub(crate) fn lease(&self) -> Duration {
        seconds(self.seconds)
    }
    pub(crate) fn heartbeat(&self) -> Duration {
        seconds(self.heartbeat_seconds.unwrap_or(self.seconds / 3.0))
    }

    /// A heartbeat, when set, renews the lease before it runs out.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        match self.heartbeat_seconds {
            Some(hb) if hb >= self.seconds => Err(ConfigError::new(
                "lease.heartbeat_seconds",
                format!("must be shorter than lease.seconds ({})", self.seconds),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Settings, env};

    #[test]
    fn heartbeat_must_be_shorter_than_lease() {
        let e = Settings::load_with_env(
            None,
            env(&[
                ("BRIEFRAIL__LEASE__SECONDS", "10"),
                ("BRIEFRAIL__LEASE__HEARTBEAT_SECONDS", "10"),
            ]),
        )
        .expect_err("heartbeat == lease");
        assert_eq!(e.key, "lease.heartbeat_seconds");
    }
}
