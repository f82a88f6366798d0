//! What a node counts for `/metrics`, kept and rendered by the Prometheus client crate
//! (`prometheus-client`, OpenMetrics text). Counters are process-local and reset on restart,
//! as Prometheus counters are; anything that must survive lives in the ledger (the runs
//! table). The ledger's own gauges (backlog, unserved matters...) are read from the database
//! at each scrape and set on [`LedgerGauges`] just before rendering.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the build-duration histogram buckets.
pub const BUILD_SECONDS_BUCKETS: [f64; 10] =
    [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// A gauge holding a float.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Declares a struct of metrics and its registration: each field with the name it is
/// registered under (the client adds `briefrail_` and, for counters, `_total`) and its help.
macro_rules! metric_set {
    ($(#[$meta:meta])* $name:ident of $ty:ty { $($(#[$fmeta:meta])* $field:ident => $help:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)+
        }

        impl $name {
            /// Registers a clone of each (clones share their value with the field).
            fn register(&self, r: &mut Registry) {
                $(r.register(stringify!($field), $help, self.$field.clone());)+
            }
        }
    };
}

metric_set! {
    /// What this node counts.
    Counters of Counter {
        builds_started => "Builds started (claims won)",
        builds_landed => "Frames landed",
        builds_fenced => "Builds refused at the ledger: stale token",
        builds_failed => "Builds that failed (error or timeout)",
        builds_released => "Claims handed back at shutdown",
        /// The builder asked the rail to wait (429, 503 with Retry-After, exit code 75).
        builds_held_back => "Claims handed back because the builder asked the rail to wait",
        builds_lease_expired => "Claims this node's sweeper expired",
        /// Claims that found a live build and recorded their demand on it instead.
        claim_conflicts => "Claims that found a live build and recorded their demand",
        /// Nudges absorbed by a pending or running build of the same matter.
        demands_coalesced => "Nudges absorbed by a pending or running build",
        nudges_received => "Nudges delivered to matter actors",
        events_published => "Outbox events confirmed by the broker",
        events_consumed => "Events applied by the trigger",
        events_duplicate => "Duplicate deliveries acked with no effect",
        events_republished => "Events republished by reconciliation",
        dead_lettered => "Messages sent to the dead-letter queue",
        /// Each ended session waits longer before the next (the reconnect backoff), and its
        /// unacked messages come back: a steady rate means the trigger is falling behind.
        consumer_sessions_ended => "Trigger consumer sessions ended by a failure (each followed by a reconnect)",
        /// A dead letter the ledger refused to file (after retries): kept in the broker's
        /// dead-letter queue only, with the reason in `x-briefrail-unrecorded`.
        dead_letters_unrecorded => "Dead letters the ledger refused to file, kept in the broker's dead-letter queue only",
        /// One ack frame may settle many deliveries (`multiple`): deliveries acked over this
        /// is how many each frame settled.
        ack_frames => "Ack frames the trigger consumer sent the broker (one may settle many deliveries)",
        /// Nudges whose event id the ledger does not know, or whose fields disagree with the
        /// event's outbox row: refused to the dead-letter queue, with no effect.
        nudges_refused => "Nudges the ledger does not confirm (unknown event id or forged fields), dead-lettered",
        /// Late copies of events retention removed: acked, with no effect.
        nudges_expired => "Nudges for events retention removed, acked with no effect",
        retention_events_removed => "Published, consumed outbox events removed by retention",
        retention_inbox_removed => "Inbox rows removed with their events by retention",
        retention_runs_removed => "Runs removed by retention",
        retention_frames_removed => "Frames removed by retention (retention.frames_keep)",
    }
}

metric_set! {
    /// The ledger's state as gauges, set from `ledger::reads::gauges` at each scrape.
    LedgerGauges of FloatGauge {
        outbox_backlog => "Outbox events not yet published",
        outbox_oldest_unpublished_seconds => "Age of the oldest unpublished event",
        matters_unserved => "Matters whose landed frame is behind their demand",
        builds_running => "Matters with a build in flight (any node)",
        matters_failed => "Matters whose last build failed with demand unserved",
        events_stranded => "Events republished to the cap and still not consumed: facts that may be missing from a Brief",
        facts_owed => "Published facts recorded over 30 s ago the trigger has not consumed: their matters show as owed, not fresh",
        oldest_owed_fact_seconds => "Age of the oldest published fact the trigger has not consumed after 30 s (0: none)",
        retention_oldest_event_seconds => "Age of the oldest outbox event kept",
        retention_oldest_run_seconds => "Age of the oldest run kept",
        /// The alert: how long counsel's oldest unserved upload or click has waited.
        oldest_interactive_demand_seconds => "Age of the oldest unserved interactive demand of any firm (0: none)",
        /// Whether this node could read the ledger for these gauges.
        ledger_up => "Whether this node could read the ledger for these gauges",
    }
}

/// How many firms the per-firm gauges label at most: those whose oldest interactive demand
/// is oldest (then the most unserved). A fleet of thousands of firms keeps this many series
/// per gauge; the unlabelled gauges count every firm.
pub const FIRM_LABELS: i64 = 20;

/// A firm's label: its name when it has one, else its id.
pub type FirmLabels = Vec<(&'static str, String)>;

/// The per-firm gauges, labelled `firm`, reset at each scrape to the [`FIRM_LABELS`] busiest.
#[derive(Debug, Default)]
pub struct FirmGauges {
    pub unserved: Family<FirmLabels, FloatGauge>,
    pub running: Family<FirmLabels, FloatGauge>,
    pub oldest_interactive_seconds: Family<FirmLabels, FloatGauge>,
}

impl FirmGauges {
    fn register(&self, r: &mut Registry) {
        r.register(
            "firm_unserved",
            "Matters of the firm whose demand is not served (the busiest firms only)",
            self.unserved.clone(),
        );
        r.register(
            "firm_builds_running",
            "Builds of the firm running on every node (the busiest firms only)",
            self.running.clone(),
        );
        r.register(
            "firm_oldest_interactive_demand_seconds",
            "Age of the firm's oldest unserved interactive demand (the busiest firms only)",
            self.oldest_interactive_seconds.clone(),
        );
    }

    /// Forgets every firm's series (before the next scrape's are set).
    pub fn clear(&self) {
        self.unserved.clear();
        self.running.clear();
        self.oldest_interactive_seconds.clear();
    }
}

/// This node's metrics and the registry that renders them.
#[derive(Debug)]
pub struct Metrics {
    /// What the node counts (builds, commits, fenced writes, events).
    pub counters: Counters,
    /// How long builds take.
    pub build_seconds: Histogram,
    /// The ledger's gauges, refreshed when `/metrics` is read.
    pub ledger: LedgerGauges,
    /// Per-firm gauges.
    pub firms: FirmGauges,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let counters = Counters::default();
        let build_seconds = Histogram::new(BUILD_SECONDS_BUCKETS);
        let ledger = LedgerGauges::default();
        let mut registry = Registry::with_prefix("briefrail");
        counters.register(&mut registry);
        registry.register(
            "build_duration_seconds",
            "Build duration, claim to commit",
            build_seconds.clone(),
        );
        ledger.register(&mut registry);
        let firms = FirmGauges::default();
        firms.register(&mut registry);
        Metrics {
            counters,
            build_seconds,
            ledger,
            firms,
            registry,
        }
    }
}

impl std::ops::Deref for Metrics {
    type Target = Counters;
    /// `metrics.counters.builds_landed` reads as the counter it is.
    fn deref(&self) -> &Counters {
        &self.counters
    }
}

impl Metrics {
    /// Counts one.
    pub fn inc(counter: &Counter) {
        counter.inc();
    }

    /// Records one build's duration.
    pub fn observe_build(&self, d: std::time::Duration) {
        self.build_seconds.observe(d.as_secs_f64());
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
        Metrics::inc(&m.counters.builds_landed);
        Metrics::inc(&m.counters.builds_landed);
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

    #[test]
    fn per_firm_gauges_carry_the_firm_label_and_clear() {
        let m = Metrics::default();
        let acme = vec![("firm", "Acme LLP".to_owned())];
        m.firms.unserved.get_or_create(&acme).set(4.0);
        let text = m.render();
        assert!(
            text.contains("briefrail_firm_unserved{firm=\"Acme LLP\"} 4"),
            "{text}"
        );
        m.firms.clear();
        assert!(!m.render().contains("Acme"));
    }

    /// Operators' dashboards and alerts name these: a rename is a breaking change.
    #[test]
    fn every_published_name_is_rendered() {
        let text = Metrics::default().render();
        for name in [
            "briefrail_builds_started_total",
            "briefrail_builds_landed_total",
            "briefrail_builds_fenced_total",
            "briefrail_builds_failed_total",
            "briefrail_builds_released_total",
            "briefrail_builds_held_back_total",
            "briefrail_builds_lease_expired_total",
            "briefrail_claim_conflicts_total",
            "briefrail_demands_coalesced_total",
            "briefrail_nudges_received_total",
            "briefrail_events_published_total",
            "briefrail_events_consumed_total",
            "briefrail_events_duplicate_total",
            "briefrail_events_republished_total",
            "briefrail_dead_lettered_total",
            "briefrail_dead_letters_unrecorded_total",
            "briefrail_consumer_sessions_ended_total",
            "briefrail_nudges_refused_total",
            "briefrail_build_duration_seconds_count",
            "briefrail_build_duration_seconds_sum",
            "briefrail_outbox_backlog",
            "briefrail_outbox_oldest_unpublished_seconds",
            "briefrail_matters_unserved",
            "briefrail_builds_running",
            "briefrail_matters_failed",
            "briefrail_events_stranded",
            "briefrail_facts_owed",
            "briefrail_oldest_owed_fact_seconds",
            "briefrail_ledger_up",
            "briefrail_oldest_interactive_demand_seconds",
        ] {
            assert!(
                text.contains(&format!("\n{name} ")),
                "{name} missing:\n{text}"
            );
        }
    }
}
