//! A model of the Brief rail protocol (`PROTOCOL.md`), checked exhaustively by `stateright`.
//!
//! Tests show the code does what we meant on the schedules we tried; this shows the protocol
//! is right on *every* schedule up to a bound: every interleaving of two nodes (three in the
//! runtime trigger's larger bound), the sweeper, the relay, the broker and the clock, with up to `faults`
//! injected faults.
//!
//! # What is modelled, and the statement each step mirrors
//!
//! | model action | what runs | SQL (`src/ledger/live/`) | Rust |
//! |---|---|---|---|
//! | `CommitFact` | the application records a fact and its outbox row in one transaction | `INSERT record.* ; INSERT ops.domain_event_outbox` | `ledger::facts` |
//! | `Publish(f)` | the relay publishes an outbox row (confirmed) and marks it | `UPDATE … SET published_at` | `transport::amqp::relay` |
//! | `Republish(f)` | reconciliation republishes an event no consumer recorded | outbox ⟕ `ops.consumed_events` | `transport::amqp::relay` |
//! | `Deliver(n, f)` (trigger `DemandThenClaim`) | the consumer's inbox transaction: inbox row, then the demand; ack | `INSERT ops.consumed_events`; `ops.demand(…, p_xact)` | `ledger::inbox::apply` |
//! | `Deliver(n, f)` (trigger `ClaimAsDemand`) | the consumer takes the delivery; it acks after the claim settles | — | `transitions::claim_or_record(demand_recorded = false)` |
//! | `Claim(n)` for a delivery (trigger `ClaimAsDemand`) | the plain claim, itself a demand | `ops.claim(…, p_only_unserved = false)` (restarts retries) | `transitions::claim` |
//! | `DeliverPoke(n)` | a reconcile nudge reaches a matter actor | — | `actors::matter` |
//! | `Claim(n)` otherwise | the matter actor claims for a recorded demand or a retry | `ops.claim(…, p_only_unserved = true)` | `transitions::claim` |
//! | `ReadRow(n)` | a claim that returned NULL reads why | `SELECT … FROM ops.matter_frame_jobs` | `transitions::claim_or_record` |
//! | `RecordLostClaim(n)` | a lost plain claim records its demand | `ops.record_lost_claim` | `transitions::record_lost_claim` |
//! | `Heartbeat(n)` | the builder renews its lease | `ops.heartbeat` | `transitions::heartbeat` |
//! | `Commit(n)` | CAS + frame insert in one transaction | `ops.commit_claim`; `INSERT ops.matter_frames` | `transitions::commit` |
//! | `Fail(n, permanent)` | the build errs (a fault) | `ops.fail_claim` | `transitions::fail` |
//! | `Shutdown(n)` | SIGTERM: the node releases its claim and restarts (a fault) | `ops.release_claim` | `transitions::release` |
//! | `Crash(n)` | kill -9: the node's memory is gone, its unacked delivery returns (a fault) | — | — |
//! | `Pause(n)` / `Resume(n)` | SIGSTOP / SIGCONT: the zombie (pausing is a fault) | — | — |
//! | `Tick` | the ledger clock passes a lease / a backoff | `ops.now()` | — |
//! | `Sweep` | the sweeper fails a running row whose lease expired, and nudges its matter | `ops.sweep` | `transitions::sweep`, `actors::sweeper` |
//! | `Reconcile` | the sweeper nudges a matter with unserved demand | `ops.unserved` | `transitions::unserved` |
//! | `LoseEvent(f)`, `LosePoke`, `Duplicate(f)` | the broker drops or redelivers (faults) | — | — |
//! | `Forge(f)` | (with `forgeries`) a publisher puts a forged nudge on the bus: fact `f`'s real event id, the earliest transaction id (a fault) | — | — |
//! | `DeliverForged(n, f)` | the consumer's inbox transaction for it: the outbox row by id disagrees, so it is refused and nothing changes (in the flaw `TrustTheWire`: believed, the demand judged by the wire's transaction id) | `SELECT … FROM ops.domain_event_outbox WHERE event_id = …` | `ledger::inbox::apply` |
//! | `DeleteRow` | only in the ABA flaw: the no-delete trigger is gone | `DELETE` (refused by the trigger) | — |
//!
//! # Abstractions (each keeps every schedule the real system has, or says why not)
//!
//! - One matter: rows of different matters share nothing.
//! - Time is the two comparisons ever made against `ops.now()`: a lease is expired or not, a
//!   backoff has passed or not. `Tick` expires a lease only when no *running* node holds it:
//!   a live holder heartbeats every third of the lease, so expiring its lease under it is the
//!   same schedule as pausing it (`Pause`), which the model has.
//! - Facts commit one at a time, so a snapshot is the number of facts committed when it was
//!   taken; `pg_visible_in_snapshot` is `fact <= snapshot`.
//! - A build sends at most `heartbeats` heartbeats; a reconcile nudge is not sent while one is
//!   in flight and not delivered to an actor that already has one pending (it would coalesce).
//!   These bounds make every execution finite (the test `the_model_has_no_cycles` checks it),
//!   which is what lets "eventually" be checked exactly: every maximal execution ends in a
//!   state with no step left, and that state must have served every demand (or show that
//!   retries stopped after the allowed failures).
//! - Faults are bounded by `faults`; after the last one the environment is fault-free, which
//!   is the fairness assumption of the liveness property.
//!
//! # Properties: see [`Rail::properties`]. Tokens order writes; they do not give mutual
//! exclusion: "two builds of one matter run at once" is *reachable*, and must stay so.

/// Who is served next when slots are scarce: a second, separate model.
pub mod admission;
pub mod ledger;
pub mod state;

use ledger::Committed;
use state::{Build, Node, Phase, State, Status, bit, slot};
use stateright::{Model, Property};

/// How a delivered event becomes a demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// What the runtime does: the consumer records the demand (`ops.demand`) in its inbox
    /// transaction and acks; the matter actor then claims with `p_only_unserved` and, when the
    /// claim returns NULL, reads the row.
    DemandThenClaim,
    /// PROTOCOL.md's plain path: the claim is the demand; a lost claim records itself with
    /// `ops.record_lost_claim`; the delivery is acked once that settled.
    ClaimAsDemand,
}

/// A deliberate bug, for the negative controls: the checker must find each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    None,
    /// The seed's single conditional upsert: a lost claim drops its demand (no lost-claim step).
    SeedUpsert,
    /// The commit's compare-and-swap checks `run_status` but not the token.
    CasWithoutToken,
    /// Job rows may be deleted once not running: a re-created row restarts its tokens (ABA).
    RowDeletion,
    /// The sweeper never reconciles: a nudge lost after its demand was recorded is never
    /// followed up. Safety holds (the row still owes the demand); liveness must not.
    NoReconcile,
    /// The pre-release claim without a retry limit: a claim for a recorded demand ignored the retry limit,
    /// so the sweeper's nudge retried a matter whose builds kept losing their lease forever.
    RetryWithoutLimit,
    /// `ops.demand` without the snapshot: every demand mid-build owes a follow-up, even for a
    /// fact the running build reads already.
    NoCoverage,
    /// The pre-release plain claim and lost-claim record: a new demand on the plain
    /// path did not restart the retries of a failing matter.
    PlainDemandKeepsRetries,
    /// The pre-release fail and sweep: the failure of a build claimed before a demand
    /// arrived counted against that demand's retries.
    FailureCountsAgainstNewDemand,
    /// The consumer before "trust only the ledger": it took a nudge's transaction id from the
    /// message, so a forged one was judged covered and its inbox row swallowed the real nudge.
    TrustTheWire,
}

/// The bound and the variant to check.
#[derive(Clone, Debug)]
pub struct Rail {
    pub nodes: usize,
    pub facts: u8,
    pub faults: u8,
    pub heartbeats: u8,
    pub max_attempts: u8,
    pub trigger: Trigger,
    pub flaw: Flaw,
    /// The environment may forge nudges (`Forge`, a fault): real event ids, forged fields.
    pub forgeries: bool,
}

impl Rail {
    /// The bound `cargo test` checks for `trigger`: two nodes, two faults, and three facts
    /// for the runtime's trigger (two for the plain one, whose lost claims already pile up
    /// several demands on one build; three facts there is its larger bound).
    pub fn default_bound(trigger: Trigger) -> Rail {
        Rail {
            nodes: 2,
            facts: match trigger {
                Trigger::DemandThenClaim => 3,
                Trigger::ClaimAsDemand => 2,
            },
            faults: 2,
            heartbeats: 1,
            max_attempts: 2,
            trigger,
            flaw: Flaw::None,
            forgeries: false,
        }
    }

    /// The bound of the ignored test `larger_bound`: three nodes, three facts, two faults.
    pub fn larger_bound(trigger: Trigger) -> Rail {
        Rail {
            nodes: 3,
            facts: 3,
            ..Rail::default_bound(trigger)
        }
    }

    pub fn with_flaw(mut self, flaw: Flaw) -> Rail {
        self.flaw = flaw;
        self
    }

    /// The bound for forged nudges: the runtime's trigger (the plain trigger's claim reads
    /// every committed fact, whatever the nudge says) at its default bound.
    pub fn forging() -> Rail {
        Rail {
            forgeries: true,
            ..Rail::default_bound(Trigger::DemandThenClaim)
        }
    }

    /// Every property is decided at this state: nothing can happen any more.
    pub fn is_terminal(&self, s: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(s, &mut actions);
        actions.into_iter().all(|a| self.next_state(s, a).is_none())
    }

    /// Every fact is in the Brief, or the row shows that retries stopped, after as many
    /// failures as the policy allows since the last demand.
    pub fn all_served(&self, s: &State) -> bool {
        let gave_up =
            s.exhausted(self.max_attempts) && s.failures_since_demand >= self.max_attempts;
        (1..=s.facts).all(|f| s.served(f)) || gave_up
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    CommitFact,
    Publish(u8),
    Republish(u8),
    Deliver(usize, u8),
    DeliverPoke(usize),
    Claim(usize),
    ReadRow(usize),
    RecordLostClaim(usize),
    Heartbeat(usize),
    Commit(usize),
    Fail(usize, bool),
    Shutdown(usize),
    Crash(usize),
    Pause(usize),
    Resume(usize),
    Tick,
    Sweep,
    Reconcile,
    LoseEvent(u8),
    LosePoke,
    Duplicate(u8),
    Forge(u8),
    DeliverForged(usize, u8),
    DeleteRow,
}

impl Model for Rail {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::initial(self.nodes, self.facts, self.faults)]
    }

    /// Candidate actions; `next_state` returns `None` for those that change nothing.
    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.facts < self.facts {
            out.push(Action::CommitFact);
        }
        for f in 1..=s.facts {
            out.push(Action::Publish(f));
            out.push(Action::Republish(f));
            if s.faults_left > 0 && s.in_flight[slot(f)] > 0 {
                out.push(Action::LoseEvent(f));
                out.push(Action::Duplicate(f));
            }
            if self.forgeries && s.faults_left > 0 && s.forged & bit(f) == 0 {
                out.push(Action::Forge(f));
            }
        }
        for n in 0..self.nodes {
            let node = &s.nodes[n];
            if node.paused {
                out.push(Action::Resume(n));
                continue;
            }
            for f in 1..=s.facts {
                if s.in_flight[slot(f)] > 0 {
                    out.push(Action::Deliver(n, f));
                }
                if s.forged & bit(f) != 0 {
                    out.push(Action::DeliverForged(n, f));
                }
            }
            if s.pokes > 0 && !node.pending {
                out.push(Action::DeliverPoke(n));
            }
            match node.phase {
                Phase::Idle if node.pending => out.push(Action::Claim(n)),
                Phase::Idle => {}
                Phase::LostRead => out.push(Action::ReadRow(n)),
                Phase::LostClaim => out.push(Action::RecordLostClaim(n)),
                Phase::Building(_) => {
                    out.push(Action::Heartbeat(n));
                    out.push(Action::Commit(n));
                    if s.faults_left > 0 {
                        out.push(Action::Fail(n, false));
                        out.push(Action::Fail(n, true));
                    }
                }
            }
            // A fault on a node with nothing in hand changes nothing but the budget.
            if s.faults_left > 0 && *node != Node::FRESH {
                out.push(Action::Pause(n));
                out.push(Action::Crash(n));
                out.push(Action::Shutdown(n));
            }
        }
        out.push(Action::Tick);
        out.push(Action::Sweep);
        out.push(Action::Reconcile);
        if s.faults_left > 0 && s.pokes > 0 {
            out.push(Action::LosePoke);
        }
        if self.flaw == Flaw::RowDeletion {
            out.push(Action::DeleteRow);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let changed = match action {
            Action::CommitFact => {
                s.facts += 1;
                true
            }
            Action::Publish(f) => {
                let fresh = s.published & bit(f) == 0;
                if fresh {
                    s.published |= bit(f);
                    s.in_flight[slot(f)] += 1;
                }
                fresh
            }
            Action::Republish(f) => {
                let lost = s.published & bit(f) != 0
                    && s.consumed & bit(f) == 0
                    && s.in_flight[slot(f)] == 0
                    && !s.nodes.iter().any(|n| n.in_hand == Some(f));
                if lost {
                    s.in_flight[slot(f)] += 1;
                }
                lost
            }
            Action::Deliver(n, f) => self.deliver(&mut s, n, f),
            Action::Forge(f) => {
                s.forged |= bit(f);
                s.faults_left -= 1;
                true
            }
            Action::DeliverForged(n, f) => {
                s.forged &= !bit(f);
                // The runtime reads the outbox row by the message's event id: its transaction
                // is not the message's, so the nudge is refused (dead-lettered), nothing else.
                if self.flaw == Flaw::TrustTheWire && s.consumed & bit(f) == 0 {
                    s.consumed |= bit(f);
                    s.failures_since_demand = 0;
                    // The forged transaction id: the earliest fact's.
                    if s.demand(1, self.flaw).is_some() {
                        s.nodes[n].pending = true;
                    }
                }
                true
            }
            Action::DeliverPoke(n) => {
                s.pokes -= 1;
                s.nodes[n].pending = true;
                true
            }
            Action::Claim(n) => self.claim(&mut s, n),
            Action::ReadRow(n) => {
                // claim_or_record: running → Recorded; all served → Served; retries exhausted
                // → RetriesExhausted; else claim again.
                let j = s.row.as_ref();
                let again = j.is_none_or(|j| {
                    j.status != Status::Running
                        && j.landed < j.requested
                        && j.failures < self.max_attempts
                });
                s.nodes[n].phase = Phase::Idle;
                s.nodes[n].pending |= again;
                true
            }
            Action::RecordLostClaim(n) => {
                if s.record_lost_claim(self.flaw).is_some() {
                    ack(&mut s, n);
                } else {
                    s.nodes[n].pending = true; // the build finished in between: claim again
                }
                s.nodes[n].phase = Phase::Idle;
                true
            }
            Action::Heartbeat(n) => {
                let b = *s.nodes[n].build()?;
                if b.heartbeats_left == 0 {
                    return None;
                }
                if s.heartbeat(b.token) {
                    if let Phase::Building(b) = &mut s.nodes[n].phase {
                        b.heartbeats_left -= 1;
                    }
                } else {
                    s.nodes[n].phase = Phase::Idle; // fenced: cancel the build now
                }
                true
            }
            Action::Commit(n) => {
                let b = *s.nodes[n].build()?;
                let outcome = s.commit_claim(b.token, b.snapshot, self.flaw);
                if !matches!(outcome, Committed::Fenced) {
                    s.failures_since_demand = 0;
                }
                if b.serves >= 2 && !matches!(outcome, Committed::Fenced) {
                    s.follow_up_served_many = true;
                }
                s.nodes[n].phase = match outcome {
                    Committed::Fenced | Committed::Idle => Phase::Idle,
                    Committed::FollowUp {
                        token,
                        snapshot,
                        serves,
                    } => {
                        // The actor hands its pending nudges to the follow-up: they add nothing.
                        s.nodes[n].pending = false;
                        Phase::Building(Build {
                            token,
                            snapshot,
                            heartbeats_left: self.heartbeats,
                            serves,
                        })
                    }
                };
                true
            }
            Action::Fail(n, permanent) => {
                let b = *s.nodes[n].build()?;
                if s.fail_claim(b.token, permanent, self.max_attempts, self.flaw) {
                    let weight = if permanent { self.max_attempts } else { 1 };
                    s.count_failure(b.snapshot, weight, self.max_attempts);
                }
                s.nodes[n].phase = Phase::Idle;
                s.faults_left -= 1;
                true
            }
            Action::Shutdown(n) => {
                if let Some(b) = s.nodes[n].build().cloned() {
                    s.release_claim(b.token);
                }
                restart(&mut s, n);
                true
            }
            Action::Crash(n) => {
                restart(&mut s, n);
                true
            }
            Action::Pause(n) => {
                s.nodes[n].paused = true;
                s.faults_left -= 1;
                true
            }
            Action::Resume(n) => {
                s.nodes[n].paused = false;
                true
            }
            Action::Tick => {
                let holder = s.live_holder();
                let j = s.row.as_mut()?;
                let mut changed = false;
                if j.status == Status::Running && !j.lease_expired && !holder {
                    j.lease_expired = true;
                    changed = true;
                }
                if j.status != Status::Running && j.backing_off {
                    j.backing_off = false;
                    changed = true;
                }
                changed
            }
            Action::Sweep => {
                let snapshot = s.row.as_ref().and_then(|j| j.claimed_snapshot);
                let swept = s.sweep(self.flaw);
                if swept {
                    s.count_failure(snapshot.unwrap_or(0), 1, self.max_attempts);
                    s.pokes = 1; // the sweeper nudges the matter it swept
                }
                swept
            }
            Action::Reconcile => {
                let nudge =
                    self.flaw != Flaw::NoReconcile && s.pokes == 0 && s.unserved(self.max_attempts);
                if nudge {
                    s.pokes = 1;
                }
                nudge
            }
            Action::LoseEvent(f) => {
                s.in_flight[slot(f)] -= 1;
                s.faults_left -= 1;
                true
            }
            Action::Duplicate(f) => {
                s.in_flight[slot(f)] += 1;
                s.faults_left -= 1;
                true
            }
            Action::LosePoke => {
                s.pokes -= 1;
                s.faults_left -= 1;
                true
            }
            Action::DeleteRow => {
                let deletable = s.row.as_ref().is_some_and(|j| j.status != Status::Running);
                if deletable {
                    s.row = None;
                }
                deletable
            }
        };
        changed.then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            // Guarantee 1: the zombie never lands.
            Property::<Self>::always(
                "a frame lands only with the current claim's token",
                |_, s| s.frames.iter().all(|f| f.was_current),
            ),
            // Guarantee 2.
            Property::<Self>::always("at most one frame per token", |_, s| {
                let mut tokens: Vec<u8> = s.frames.iter().map(|f| f.token).collect();
                tokens.sort_unstable();
                tokens.windows(2).all(|w| w[0] != w[1])
            }),
            Property::<Self>::always("landed frames increase", |_, s| {
                s.frames.windows(2).all(|w| w[0].token < w[1].token)
            }),
            Property::<Self>::always("tokens strictly increase", |_, s| !s.token_reused),
            // PROTOCOL.md, fail: retries stop after the configured attempts until a new demand,
            // whoever nudges (reconcile, the sweeper, a late or duplicated nudge).
            Property::<Self>::always("a failing matter is not retried past its limit", |_, s| {
                !s.retried_after_giving_up
            }),
            Property::<Self>::always("landed_generation <= requested_generation", |_, s| {
                s.row.as_ref().is_none_or(|j| j.landed <= j.requested)
            }),
            // Guarantee 3: demands during a build cost one follow-up and no more; stronger,
            // no build starts that reads nothing the Brief lacks. The runtime's trigger only:
            // the plain one cannot tell a duplicate delivery's claim from a new demand's.
            Property::<Self>::always("every build reads a fact the Brief lacks", |m, s| {
                m.trigger == Trigger::ClaimAsDemand || !s.needless_build
            }),
            // Guarantee 4's safety half: a demand, once recorded (its
            // delivery acked), is in the Brief or owed by the row.
            Property::<Self>::always("a recorded demand is never lost", |_, s| {
                (1..=s.facts).all(|f| s.consumed & bit(f) == 0 || s.served(f) || s.owed(f))
            }),
            // Guarantee 4 (and 5: every event is consumed before the end). Every execution is
            // finite, so "eventually" is: the state where nothing can happen any more serves
            // every fact. The condition holds only there, so no earlier state can satisfy it.
            Property::<Self>::eventually("every demand is eventually served", |m, s| {
                m.all_served(s) && m.is_terminal(s)
            }),
            // Reachability: the model is not vacuous.
            Property::<Self>::sometimes("a zombie's commit is refused", |_, s| s.zombie_refused),
            Property::<Self>::sometimes("two builds of one matter run at once", |_, s| {
                s.nodes
                    .iter()
                    .filter(|n| !n.paused && n.build().is_some())
                    .count()
                    >= 2
            }),
            Property::<Self>::sometimes("one follow-up build serves several demands", |_, s| {
                s.follow_up_served_many
            }),
        ]
    }
}

impl Rail {
    fn deliver(&self, s: &mut State, n: usize, f: u8) -> bool {
        if self.trigger == Trigger::ClaimAsDemand && s.nodes[n].in_hand.is_some() {
            return false;
        }
        s.in_flight[slot(f)] -= 1;
        if s.consumed & bit(f) != 0 {
            return true; // the inbox knows it: a duplicate, acked with no second effect
        }
        match self.trigger {
            Trigger::DemandThenClaim => {
                s.consumed |= bit(f);
                s.failures_since_demand = 0;
                if s.demand(f, self.flaw).is_some() {
                    s.nodes[n].pending = true; // covered demands nudge nobody
                }
            }
            Trigger::ClaimAsDemand => {
                s.nodes[n].in_hand = Some(f);
                s.nodes[n].pending = true;
            }
        }
        true
    }

    fn claim(&self, s: &mut State, n: usize) -> bool {
        s.nodes[n].pending = false;
        // With the plain trigger a delivery's claim is its demand; a reconcile nudge's claim
        // is a retry, and claims as the runtime does (`demand_recorded = true`).
        let as_demand = self.trigger == Trigger::ClaimAsDemand && s.nodes[n].in_hand.is_some();
        let only_unserved = !as_demand;
        if let Some(token) = s.claim(only_unserved, self.max_attempts, self.flaw) {
            s.nodes[n].phase = Phase::Building(Build {
                token,
                snapshot: s.facts,
                heartbeats_left: self.heartbeats,
                serves: 0,
            });
            ack(s, n);
            return true;
        }
        s.nodes[n].phase = match (as_demand, self.flaw) {
            (false, _) => Phase::LostRead,
            (true, Flaw::SeedUpsert) => {
                ack(s, n); // the seed: the loser's demand is gone
                Phase::Idle
            }
            (true, _) => Phase::LostClaim,
        };
        true
    }
}

impl State {
    /// A failure counts against the demands only if the failed build read all of them: a build
    /// claimed before a demand arrived failing says nothing about that demand.
    fn count_failure(&mut self, snapshot: u8, weight: u8, max_attempts: u8) {
        let newest_demand = (u8::BITS - self.consumed.leading_zeros()) as u8;
        if snapshot >= newest_demand {
            self.failures_since_demand = (self.failures_since_demand + weight).min(max_attempts);
        }
    }
}

/// The delivery in hand is acked: the inbox records it. A fact acked for the first time was
/// a new demand (its claim or lost-claim record restarted the retries).
fn ack(s: &mut State, n: usize) {
    if let Some(f) = s.nodes[n].in_hand.take() {
        if s.consumed & bit(f) == 0 {
            s.failures_since_demand = 0;
        }
        s.consumed |= bit(f);
    }
}

/// The process is gone and a new one takes its place: memory lost, an unacked delivery goes
/// back to the broker. A claim it held stays on the row until its lease expires.
fn restart(s: &mut State, n: usize) {
    if let Some(f) = s.nodes[n].in_hand {
        s.in_flight[slot(f)] += 1;
    }
    s.nodes[n] = Node::FRESH;
    s.faults_left -= 1;
}
