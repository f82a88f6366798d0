//! `[retention]`: what the sweeper removes once no guarantee needs it.

use std::time::Duration;

use serde::Deserialize;

use super::bounds::DAY_S;
use super::{Bound, seconds};

/// What the sweeper removes once no guarantee needs it (docs/protocol.md, "Retention").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Published outbox events the rail consumed, older than this, go with their inbox rows.
    /// Unpublished and unconsumed events are never removed. 0: keep every event.
    pub events_days: f64,
    /// Runs older than this go, except each matter's latest and any still open. 0: keep all.
    pub runs_days: f64,
    /// Each matter keeps its newest N frames (its newest is never removed). 0: keep every
    /// frame (a firm may need to show which Brief counsel saw on a given day).
    pub frames_keep: u32,
    /// Seconds between retention passes.
    pub interval_seconds: f64,
    /// Rows (frames: matters) per statement; each statement is its own short transaction.
    pub batch: u32,
}

pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "retention.events_days",
        0.0,
        36_500.0,
        Days,
        |s| s.retention.events_days,
        real
    ),
    bound!(
        "retention.runs_days",
        0.0,
        36_500.0,
        Days,
        |s| s.retention.runs_days,
        real
    ),
    bound!(
        "retention.frames_keep",
        0.0,
        1_000_000.0,
        Count,
        |s| s.retention.frames_keep,
        whole
    ),
    bound!(
        "retention.interval_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.retention.interval_seconds,
        real
    ),
    // One statement per batch must stay a short transaction.
    bound!(
        "retention.batch",
        1.0,
        100_000.0,
        Count,
        |s| s.retention.batch,
        whole
    ),
];

impl RetentionSettings {
    /// The age past which consumed events go; `None`: kept forever.
    pub(crate) fn events_after(&self) -> Option<Duration> {
        days(self.events_days)
    }
    /// The age past which runs go; `None`: kept forever.
    pub(crate) fn runs_after(&self) -> Option<Duration> {
        days(self.runs_days)
    }
    /// How many frames each matter keeps; `None`: every frame.
    pub(crate) fn frames_kept(&self) -> Option<u32> {
        (self.frames_keep > 0).then_some(self.frames_keep)
    }
}

/// `d` days as a duration; `None` for zero: kept forever.
fn days(d: f64) -> Option<Duration> {
    (d > 0.0).then(|| seconds(d * DAY_S))
}
