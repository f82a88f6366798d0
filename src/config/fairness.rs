//! `[fairness]`: who is served next when build slots are scarce.

use std::time::Duration;

use serde::Deserialize;

use super::bounds::DAY_S;
use super::{Bound, seconds};

/// Who is served next when build slots are scarce (`crate::ledger::fairness`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FairnessSettings {
    /// A background demand that has waited this long is served as if interactive: the bound
    /// on how long interactive work can hold background work back.
    pub background_promote_seconds: f64,
}

pub(super) const BOUNDS: &[Bound] = &[bound!(
    "fairness.background_promote_seconds",
    0.0,
    DAY_S,
    Seconds,
    |s| s.fairness.background_promote_seconds,
    real
)];

impl FairnessSettings {
    /// [`Self::background_promote_seconds`] as a duration.
    pub(crate) fn promote_after(&self) -> Duration {
        seconds(self.background_promote_seconds)
    }
}
