//! `[builders]`: how many builds run at once and how many claims wait for them.

use serde::Deserialize;

use super::{Bound, ConfigError};

/// `[builders]`: how many builds a node runs at once.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildersSettings {
    /// Builds running at once (the builder's own work).
    pub concurrency: usize,
    /// The most claims the node holds at once: being claimed, waiting for a builder, building
    /// or committing (fewer while builds are slow: `crate::actors::capacity`). Unset: 32
    /// per builder. What a crashed node leaves to wait out a lease.
    #[serde(default)]
    pub held_claims: Option<usize>,
}

pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "builders.concurrency",
        1.0,
        1024.0,
        Count,
        |s| s.builders.concurrency,
        whole
    ),
    // The default, 32 per builder, stays inside it at the most builders.
    bound!(
        "builders.held_claims",
        1.0,
        32_768.0,
        Count,
        |s| s.builders.held_claims,
        opt_whole
    ),
];

impl BuildersSettings {
    /// 32 claims per builder unless set: with builds of a few milliseconds, the claims and
    /// commits of that many matters on the wire meet in batches (CHANGELOG.md, "Performance",
    /// has the measurements behind the choice).
    pub fn held_claims(&self) -> usize {
        self.held_claims.unwrap_or(32 * self.concurrency)
    }

    /// Room for each build's own claim.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.held_claims() < self.concurrency {
            return Err(ConfigError::new(
                "builders.held_claims",
                format!(
                    "must be at least builders.concurrency ({}): each build holds its claim",
                    self.concurrency
                ),
            ));
        }
        Ok(())
    }
}
