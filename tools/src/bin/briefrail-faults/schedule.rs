//! The schedule: every fault kind of the catalogue the suite injects, and the seeded order of
//! demand bursts and faults. The same seed gives the same schedule.

use std::collections::BTreeMap;
use std::time::Duration;

/// splitmix64: small, seedable, good enough for schedules.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One kind of fault, named as the summary prints it, with the catalogue rows
/// (`../shared/design/FAULTS.md`) it injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// SIGSTOP the node holding a build for twice its lease, then SIGCONT.
    Stop,
    /// The node's build COMMIT is held by the proxy until the database's
    /// idle-in-transaction timeout ends the session (a stall between CAS and COMMIT).
    StallInCommit,
    /// kill -9 of the node holding a build, then restart.
    Kill,
    /// kill -9 of a node the moment the database answered its build's COMMIT.
    KillAfterCommit,
    /// The proxy stops every byte between the node holding a build and the database for
    /// twice the lease (heartbeats cannot reach the ledger).
    Partition,
    /// The build's COMMIT reaches the database, its answer never reaches the node.
    CommitAnswerLost,
    /// pg_terminate_backend on every briefrail connection.
    BackendKill,
    /// `pg_ctl restart -m immediate` of the ledger's cluster under load.
    DbRestart,
    /// 1,000 demands over all matters at once.
    WideLoad,
    /// A node restarted under libfaketime (the first nodes start at -2 h and +2 h).
    ClockSkew,
    /// kill -9 of a node while the relays are publishing a backlog.
    RelayCrash,
    /// `stop_app` on every broker member, then `start_app`.
    BrokerDown,
    /// `close_all_connections` on every broker member.
    BrokerConnectionsClosed,
    /// A memory alarm on the broker (publishers blocked), then cleared.
    MemoryAlarm,
    /// The trigger queue unbound from the exchange while demands are recorded.
    Unroutable,
    /// Published events published again, and one event's message published five times.
    DuplicateDelivery,
    /// The trigger queue purged: nudges lost.
    QueuePurge,
    /// Non-JSON, wrong schema, 10 MB, unknown event and no-traceparent messages.
    Malformed,
    /// A real event id with forged firm, matter and transaction id.
    Forged,
    /// pg_dump while running, pg_restore into a new cluster, nodes moved there.
    LogicalMove,
    /// A builder's frame the database refuses (a \u0000 in jsonb) on one matter.
    RefusedFrame,
    /// kill -9 of the broker member leading the trigger queue, then restart.
    BrokerLeaderKill,
    /// SIGSTOP of the trigger queue's leader for five seconds.
    BrokerLeaderPause,
    /// Every broker member stopped and started in turn.
    BrokerRollingRestart,
    /// A node that runs with a pool of two connections for six builders (configuration).
    PoolExhaustion,
    /// Nodes with leases of 2 s and 8 s on one ledger (configuration).
    MixedLeases,
}

impl Fault {
    /// The faults the schedule places; [`Fault::PoolExhaustion`], [`Fault::MixedLeases`] and
    /// the first [`Fault::ClockSkew`]s are injected by the nodes' configuration at start.
    pub const SCHEDULED: [Fault; 24] = [
        Fault::Stop,
        Fault::StallInCommit,
        Fault::Kill,
        Fault::KillAfterCommit,
        Fault::Partition,
        Fault::CommitAnswerLost,
        Fault::BackendKill,
        Fault::DbRestart,
        Fault::WideLoad,
        Fault::ClockSkew,
        Fault::RelayCrash,
        Fault::BrokerDown,
        Fault::BrokerConnectionsClosed,
        Fault::MemoryAlarm,
        Fault::Unroutable,
        Fault::DuplicateDelivery,
        Fault::QueuePurge,
        Fault::Malformed,
        Fault::Forged,
        Fault::LogicalMove,
        Fault::RefusedFrame,
        Fault::BrokerLeaderKill,
        Fault::BrokerLeaderPause,
        Fault::BrokerRollingRestart,
    ];

    pub const ALL: [Fault; 26] = {
        let mut all = [Fault::PoolExhaustion; 26];
        let mut i = 0;
        while i < 24 {
            all[i] = Fault::SCHEDULED[i];
            i += 1;
        }
        all[25] = Fault::MixedLeases;
        all
    };

    pub fn name(self) -> &'static str {
        match self {
            Fault::Stop => "sigstop-past-lease",
            Fault::StallInCommit => "stall-before-commit",
            Fault::Kill => "kill-mid-build",
            Fault::KillAfterCommit => "kill-after-commit",
            Fault::Partition => "db-partition",
            Fault::CommitAnswerLost => "commit-answer-lost",
            Fault::BackendKill => "backend-kill",
            Fault::DbRestart => "db-restart",
            Fault::WideLoad => "wide-load",
            Fault::ClockSkew => "clock-skew",
            Fault::RelayCrash => "relay-crash",
            Fault::BrokerDown => "broker-down",
            Fault::BrokerConnectionsClosed => "broker-connections-closed",
            Fault::MemoryAlarm => "memory-alarm",
            Fault::Unroutable => "unroutable",
            Fault::DuplicateDelivery => "duplicate-delivery",
            Fault::QueuePurge => "queue-purge",
            Fault::Malformed => "malformed-message",
            Fault::Forged => "forged-nudge",
            Fault::LogicalMove => "logical-move",
            Fault::RefusedFrame => "refused-frame",
            Fault::BrokerLeaderKill => "broker-leader-kill",
            Fault::BrokerLeaderPause => "broker-leader-pause",
            Fault::BrokerRollingRestart => "broker-rolling-restart",
            Fault::PoolExhaustion => "pool-exhaustion",
            Fault::MixedLeases => "mixed-leases",
        }
    }

    /// The rows of the catalogue this fault injects.
    pub fn rows(self) -> &'static [u8] {
        match self {
            Fault::Stop => &[1],
            Fault::StallInCommit => &[2],
            Fault::Kill => &[3],
            Fault::KillAfterCommit => &[4],
            Fault::Partition => &[5],
            Fault::CommitAnswerLost => &[7],
            Fault::BackendKill => &[8],
            Fault::DbRestart => &[8, 33],
            Fault::WideLoad => &[11],
            Fault::ClockSkew => &[14],
            Fault::RelayCrash => &[18],
            Fault::BrokerDown | Fault::BrokerConnectionsClosed => &[19],
            Fault::MemoryAlarm => &[20],
            Fault::Unroutable => &[21],
            Fault::DuplicateDelivery => &[23],
            Fault::QueuePurge => &[21, 22],
            Fault::Malformed => &[25],
            Fault::Forged => &[27],
            Fault::LogicalMove => &[28, 29],
            Fault::RefusedFrame => &[30],
            Fault::BrokerLeaderKill | Fault::BrokerLeaderPause | Fault::BrokerRollingRestart => {
                &[32]
            }
            Fault::PoolExhaustion => &[16],
            Fault::MixedLeases => &[31],
        }
    }
}

#[derive(Debug, Clone)]
pub enum Step {
    Burst { matter: usize, demands: usize },
    Fault(Fault),
    Pause(Duration),
}

/// The whole schedule, from the seed alone: bursts of demands on one matter at a time, and
/// every scheduled fault (eight times each in the long configuration) at seeded rounds.
pub fn schedule(seed: u64, long: bool, matters: usize) -> Vec<Step> {
    let mut rng = Rng(seed);
    let copies = if long { 8 } else { 1 };
    let faults: Vec<Fault> = Fault::SCHEDULED.repeat(copies);
    let rounds = faults.len() as u64 * 2 + 10;
    let mut at: BTreeMap<u64, Fault> = BTreeMap::new();
    for f in faults {
        loop {
            let r = 3 + rng.below(rounds - 6);
            if let std::collections::btree_map::Entry::Vacant(e) = at.entry(r) {
                e.insert(f);
                break;
            }
        }
    }
    let mut steps = Vec::new();
    let mut last_burst: Vec<i64> = vec![-100; matters];
    for r in 0..rounds {
        // A burst on a matter that has had none for the last 8 rounds (its builds can settle).
        let mut m = rng.below(matters as u64) as usize;
        while (r as i64) - last_burst[m] < 8 {
            m = (m + 1) % matters;
        }
        last_burst[m] = r as i64;
        let demands = match rng.below(10) {
            0 => 300 + rng.below(700) as usize, // up to 1,000
            1..=3 => 10 + rng.below(90) as usize,
            _ => 1 + rng.below(9) as usize,
        };
        steps.push(Step::Burst { matter: m, demands });
        if let Some(f) = at.get(&r) {
            steps.push(Step::Fault(*f));
        }
        steps.push(Step::Pause(Duration::from_millis(150 + rng.below(300))));
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheduled_fault_is_placed_and_the_seed_decides_the_order() {
        let faults = |seed| {
            schedule(seed, false, 300)
                .into_iter()
                .filter_map(|s| match s {
                    Step::Fault(f) => Some(f),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let mut placed = faults(7);
        assert_eq!(placed, faults(7));
        assert_ne!(placed, faults(8));
        placed.sort();
        let mut all = Fault::SCHEDULED.to_vec();
        all.sort();
        assert_eq!(placed, all);
        let names: std::collections::BTreeSet<_> = Fault::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(names.len(), Fault::ALL.len(), "fault names are unique");
    }
}
