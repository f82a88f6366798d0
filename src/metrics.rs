//! What a node counts for `/metrics`, kept and rendered by the Prometheus client crate
//! (`prometheus-client`, OpenMetrics text). Counters are process-local and reset on restart,
//! as Prometheus counters are; anything that must survive lives in the ledger (the runs
//! table). The ledger's own gauges (backlog, unserved matters...) are read from the database
//! at each scrape and set on [`LedgerGauges`] just before rendering.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the build-duration histogram buckets.
pub const BUILD_SECONDS_BUCKETS: [f64; 10] =
    [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// A gauge holding a float.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// The ledger's state as gauges, set from `ledger::reads::gauges` at each scrape.
#[derive(Debug, Default)]
pub struct LedgerGauges {
    pub outbox_backlog: FloatGauge,
    pub oldest_unpublished_seconds: FloatGauge,
    pub matters_unserved: FloatGauge,
    pub builds_running: FloatGauge,
    pub matters_failed: FloatGauge,
    pub events_stranded: FloatGauge,
    /// Whether this node could read the ledger for these gauges.
    pub ledger_up: FloatGauge,
}

/// This node's metrics and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    pub builds_started: Counter,
    pub builds_landed: Counter,
    pub builds_fenced: Counter,
    pub builds_failed: Counter,
    pub builds_released: Counter,
    pub builds_lease_expired: Counter,
    /// Claims that found a live build and recorded their demand on it instead.
    pub claim_conflicts: Counter,
    /// Nudges absorbed by a pending or running build of the same matter.
    pub demands_coalesced: Counter,
    pub nudges_received: Counter,
    pub events_published: Counter,
    pub events_consumed: Counter,
    pub events_duplicate: Counter,
    pub events_republished: Counter,
    pub dead_lettered: Counter,
    /// Nudges whose event id the ledger does not know, or whose fields disagree with the
    /// event's outbox row: refused to the dead-letter queue, with no effect.
    pub nudges_refused: Counter,
    pub build_seconds: Histogram,
    pub ledger: LedgerGauges,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Metrics {
            builds_started: Counter::default(),
            builds_landed: Counter::default(),
            builds_fenced: Counter::default(),
            builds_failed: Counter::default(),
            builds_released: Counter::default(),
            builds_lease_expired: Counter::default(),
            claim_conflicts: Counter::default(),
            demands_coalesced: Counter::default(),
            nudges_received: Counter::default(),
            events_published: Counter::default(),
            events_consumed: Counter::default(),
            events_duplicate: Counter::default(),
            events_republished: Counter::default(),
            dead_lettered: Counter::default(),
            nudges_refused: Counter::default(),
            build_seconds: Histogram::new(BUILD_SECONDS_BUCKETS),
            ledger: LedgerGauges::default(),
            registry: Registry::with_prefix("briefrail"),
        };
        m.register();
        m
    }
}

impl Metrics {
    /// Counts one.
    pub fn inc(counter: &Counter) {
        counter.inc();
    }

    pub fn observe_build(&self, d: std::time::Duration) {
        self.build_seconds.observe(d.as_secs_f64());
    }

    /// Every metric with its name (the client adds `briefrail_` and, for counters, `_total`)
    /// and help. The registry holds clones: they share their values with the fields.
    fn register(&mut self) {
        let r = &mut self.registry;
        let counters: [(&str, &str, &Counter); 15] = [
            (
                "builds_started",
                "Builds started (claims won)",
                &self.builds_started,
            ),
            ("builds_landed", "Frames landed", &self.builds_landed),
            (
                "builds_fenced",
                "Builds refused at the ledger: stale token",
                &self.builds_fenced,
            ),
            (
                "builds_failed",
                "Builds that failed (error or timeout)",
                &self.builds_failed,
            ),
            (
                "builds_released",
                "Claims handed back at shutdown",
                &self.builds_released,
            ),
            (
                "builds_lease_expired",
                "Claims this node's sweeper expired",
                &self.builds_lease_expired,
            ),
            (
                "claim_conflicts",
                "Claims that found a live build and recorded their demand",
                &self.claim_conflicts,
            ),
            (
                "demands_coalesced",
                "Nudges absorbed by a pending or running build",
                &self.demands_coalesced,
            ),
            (
                "nudges_received",
                "Nudges delivered to matter actors",
                &self.nudges_received,
            ),
            (
                "events_published",
                "Outbox events confirmed by the broker",
                &self.events_published,
            ),
            (
                "events_consumed",
                "Events applied by the trigger",
                &self.events_consumed,
            ),
            (
                "events_duplicate",
                "Duplicate deliveries acked with no effect",
                &self.events_duplicate,
            ),
            (
                "events_republished",
                "Events republished by reconciliation",
                &self.events_republished,
            ),
            (
                "dead_lettered",
                "Messages sent to the dead-letter queue",
                &self.dead_lettered,
            ),
            (
                "nudges_refused",
                "Nudges the ledger does not confirm (unknown event id or forged fields), dead-lettered",
                &self.nudges_refused,
            ),
        ];
        for (name, help, c) in counters {
            r.register(name, help, c.clone());
        }
        r.register(
            "build_duration_seconds",
            "Build duration, claim to commit",
            self.build_seconds.clone(),
        );
        let g = &self.ledger;
        let gauges: [(&str, &str, &FloatGauge); 7] = [
            (
                "outbox_backlog",
                "Outbox events not yet published",
                &g.outbox_backlog,
            ),
            (
                "outbox_oldest_unpublished_seconds",
                "Age of the oldest unpublished event",
                &g.oldest_unpublished_seconds,
            ),
            (
                "matters_unserved",
                "Matters whose landed frame is behind their demand",
                &g.matters_unserved,
            ),
            (
                "builds_running",
                "Matters with a build in flight (any node)",
                &g.builds_running,
            ),
            (
                "matters_failed",
                "Matters whose last build failed with demand unserved",
                &g.matters_failed,
            ),
            (
                "events_stranded",
                "Events republished to the cap and still not consumed: facts that may be missing from a Brief",
                &g.events_stranded,
            ),
            (
                "ledger_up",
                "Whether this node could read the ledger for these gauges",
                &g.ledger_up,
            ),
        ];
        for (name, help, gauge) in gauges {
            r.register(name, help, gauge.clone());
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histogram_and_gauges_by_their_names() {
        let m = Metrics::default();
        Metrics::inc(&m.builds_landed);
        Metrics::inc(&m.builds_landed);
        m.observe_build(std::time::Duration::from_millis(70));
        m.ledger.matters_unserved.set(3.0);
        let text = m.render();
        assert!(text.contains("briefrail_builds_landed_total 2"), "{text}");
        assert!(
            text.contains("briefrail_build_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("briefrail_build_duration_seconds_bucket{le=\"0.1\"} 1"),
            "{text}"
        );
        assert!(text.contains("briefrail_matters_unserved 3"), "{text}");
        assert!(
            text.contains("# TYPE briefrail_builds_fenced counter"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
