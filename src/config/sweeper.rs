//! `[sweeper]`: the pass that takes over claims whose lease ran out.

use serde::Deserialize;

use super::Bound;
use super::bounds::DAY_S;

/// `[sweeper]`: the timer that expires dead claims and nudges unserved demand, so a lost
/// message or a crashed node only delays work.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweeperSettings {
    /// Seconds between sweeps.
    pub interval_seconds: f64,
    /// At most this many rows are swept or reconciled per pass.
    pub batch: u32,
}

pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "sweeper.interval_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.sweeper.interval_seconds,
        real
    ),
    bound!(
        "sweeper.batch",
        1.0,
        100_000.0,
        Count,
        |s| s.sweeper.batch,
        whole
    ),
];
