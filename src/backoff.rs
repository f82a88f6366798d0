//! Backoff between retries of a failing call (a reconnect, a commit, a ledger call): one
//! policy, from the `backon` crate, so every retry loop backs off the same way: exponential
//! from `min`, capped at `max`, with jitter so that nodes that failed together do not retry
//! together.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// The delays before each retry: `min`, about `2·min`, ... up to `max`, then `max` forever.
pub fn delays(min: Duration, max: Duration) -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
        .build()
}

/// The wait before reopening a session (a listener, a broker connection) that ended: backs off
/// while sessions keep failing, and starts again from the shortest wait after a session that
/// lasted (the outage was over).
pub struct Reconnect {
    min: Duration,
    max: Duration,
    delays: Box<dyn Iterator<Item = Duration> + Send>,
}

impl Reconnect {
    /// A session that lasted this long counts as healthy: the next failure waits `min` again.
    pub const HEALTHY: Duration = Duration::from_secs(30);

    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            delays: Box::new(delays(min, max)),
        }
    }

    /// The wait after a session that lasted `lasted`.
    pub fn after(&mut self, lasted: Duration) -> Duration {
        if lasted > Self::HEALTHY {
            self.delays = Box::new(delays(self.min, self.max));
        }
        self.delays.next().unwrap_or(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_capped() {
        let d: Vec<_> = delays(Duration::from_millis(100), Duration::from_secs(1))
            .take(12)
            .collect();
        assert_eq!(d.len(), 12, "the iterator never ends");
        assert!(d[0] >= Duration::from_millis(100), "{d:?}");
        assert!(
            d.iter().all(|x| *x <= Duration::from_secs(2)),
            "capped (with jitter): {d:?}"
        );
        assert!(d[11] >= Duration::from_secs(1), "reaches the cap: {d:?}");
    }

    #[test]
    fn a_healthy_session_resets_the_reconnect_wait() {
        let (min, max) = (Duration::from_millis(100), Duration::from_secs(10));
        let mut r = Reconnect::new(min, max);
        let failing: Vec<_> = (0..6).map(|_| r.after(Duration::ZERO)).collect();
        assert!(failing[5] >= Duration::from_millis(1600), "{failing:?}");
        let after_health = r.after(Reconnect::HEALTHY + Duration::from_secs(1));
        assert!(
            after_health < Duration::from_millis(200),
            "{after_health:?}"
        );
    }
}
