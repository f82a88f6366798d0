//! `[reconcile]`: when the broker transport looks again at demands it may have missed.

use serde::Deserialize;

use super::Bound;
use super::bounds::DAY_S;

/// `[reconcile]`: finds events that were recorded but never consumed (a lost message).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileSettings {
    /// How old an unconsumed event must be before it is delivered again.
    pub after_seconds: f64,
}

pub(super) const BOUNDS: &[Bound] = &[bound!(
    "reconcile.after_seconds",
    0.01,
    DAY_S,
    Seconds,
    |s| s.reconcile.after_seconds,
    real
)];
