//! Counters a node keeps in memory for `/metrics`. Process-local and reset on restart, as
//! Prometheus counters are; anything that must survive lives in the ledger (the runs table).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds (seconds) of the build-duration histogram buckets.
pub const BUILD_SECONDS_BUCKETS: [f64; 10] =
    [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

#[derive(Debug, Default)]
pub struct Metrics {
    pub builds_started: AtomicU64,
    pub builds_landed: AtomicU64,
    pub builds_fenced: AtomicU64,
    pub builds_failed: AtomicU64,
    pub builds_released: AtomicU64,
    pub builds_lease_expired: AtomicU64,
    /// Claims that found a live build and recorded their demand on it instead.
    pub claim_conflicts: AtomicU64,
    /// Nudges absorbed by a pending or running build of the same matter.
    pub demands_coalesced: AtomicU64,
    pub nudges_received: AtomicU64,
    pub events_published: AtomicU64,
    pub events_consumed: AtomicU64,
    pub events_duplicate: AtomicU64,
    pub events_republished: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// Nudges whose event id the ledger does not know, or whose fields disagree with the
    /// event's outbox row: refused to the dead-letter queue, with no effect.
    pub nudges_refused: AtomicU64,
    build_seconds_buckets: [AtomicU64; BUILD_SECONDS_BUCKETS.len()],
    build_seconds_count: AtomicU64,
    build_micros_sum: AtomicU64,
}

impl Metrics {
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub fn observe_build(&self, d: std::time::Duration) {
        let s = d.as_secs_f64();
        for (i, le) in BUILD_SECONDS_BUCKETS.iter().enumerate() {
            if s <= *le {
                self.build_seconds_buckets[i].fetch_add(1, Relaxed);
            }
        }
        self.build_seconds_count.fetch_add(1, Relaxed);
        self.build_micros_sum
            .fetch_add(d.as_micros().min(u64::MAX as u128) as u64, Relaxed);
    }

    /// Prometheus text format for the counters and the histogram (gauges read from the ledger
    /// are appended by the HTTP surface).
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let counters: [(&str, &str, &AtomicU64); 15] = [
            (
                "briefrail_builds_started_total",
                "Builds started (claims won)",
                &self.builds_started,
            ),
            (
                "briefrail_builds_landed_total",
                "Frames landed",
                &self.builds_landed,
            ),
            (
                "briefrail_builds_fenced_total",
                "Builds refused at the ledger: stale token",
                &self.builds_fenced,
            ),
            (
                "briefrail_builds_failed_total",
                "Builds that failed (error or timeout)",
                &self.builds_failed,
            ),
            (
                "briefrail_builds_released_total",
                "Claims handed back at shutdown",
                &self.builds_released,
            ),
            (
                "briefrail_builds_lease_expired_total",
                "Claims this node's sweeper expired",
                &self.builds_lease_expired,
            ),
            (
                "briefrail_claim_conflicts_total",
                "Claims that found a live build and recorded their demand",
                &self.claim_conflicts,
            ),
            (
                "briefrail_demands_coalesced_total",
                "Nudges absorbed by a pending or running build",
                &self.demands_coalesced,
            ),
            (
                "briefrail_nudges_received_total",
                "Nudges delivered to matter actors",
                &self.nudges_received,
            ),
            (
                "briefrail_events_published_total",
                "Outbox events confirmed by the broker",
                &self.events_published,
            ),
            (
                "briefrail_events_consumed_total",
                "Events applied by the trigger",
                &self.events_consumed,
            ),
            (
                "briefrail_events_duplicate_total",
                "Duplicate deliveries acked with no effect",
                &self.events_duplicate,
            ),
            (
                "briefrail_events_republished_total",
                "Events republished by reconciliation",
                &self.events_republished,
            ),
            (
                "briefrail_dead_lettered_total",
                "Messages sent to the dead-letter queue",
                &self.dead_lettered,
            ),
            (
                "briefrail_nudges_refused_total",
                "Nudges the ledger does not confirm (unknown event id or forged fields), dead-lettered",
                &self.nudges_refused,
            ),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                c.load(Relaxed)
            );
        }
        let name = "briefrail_build_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Build duration, claim to commit\n# TYPE {name} histogram"
        );
        for (i, le) in BUILD_SECONDS_BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{le}\"}} {}",
                self.build_seconds_buckets[i].load(Relaxed)
            );
        }
        let count = self.build_seconds_count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.build_micros_sum.load(Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {count}");
    }
}
