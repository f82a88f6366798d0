//! A model of admission: who is served next when build slots are scarce (docs/protocol.md,
//! "Who is served next" and "Limits toward the builder"), checked exhaustively by `stateright`.
//!
//! The protocol model (`super::Rail`) holds one matter and no limits; this one holds the
//! demands of a few firms competing for the build slots of two nodes under the fleet's cap.
//! It checks the order, not the claim: every grant here stands for a claim that the fenced
//! compare-and-swap makes safe, which the protocol model checks.
//!
//! # What is modelled, and what each step mirrors
//!
//! | model action | what runs | SQL | Rust |
//! |---|---|---|---|
//! | `Arrive(firm, class)` | a fact records its demand with its class; the demand waits on the ledger | `INSERT ops.domain_event_outbox (… demand_class)`; `ops.demand` | `ledger::outbox`, `ledger::fairness::DemandClass` |
//! | `Grant(n)` | a free slot of node `n` goes to the demand the fair order names, if the cap lets a build start: pick, permit and claim in one step | `ops.fair_order`; `ops.take_permit` (rail row locked: one grant at a time); `ops.claim_batch` | `actors::admission::Admission::hand_out` |
//! | `Ask(n)` | only in the flaw `PermitNotAtomic`: the permit's count, read apart from its grant | `ops.take_permit` without `FOR UPDATE` | — |
//! | `Finish(n, d)` | the build of demand `d` lands; its slot frees | `ops.commit_claim` | `transitions::commit` |
//! | `Tick` | time passes: every unserved background demand ages toward promotion | `ops.now()` less the fact's `created_at` | `Candidate::waited` |
//! | `PauseFirm(f)` / `ResumeFirm(f)` | an operator pauses a firm (a fault) or resumes it | `ops.firms.paused` | `fairness::set_firm` |
//! | `PauseRail` / `ResumeRail` | an operator pauses the rail (a fault) or resumes it | `ops.rail.paused` | `fairness::set_rail_paused` |
//! | `Crash(n)` | node `n` dies (a fault): its builds stop, their rows stay running until the lease lapses | — | — |
//! | `Restart(n)` | a new process takes its place with every slot free | — | — |
//! | `Expire(d)` | the lease of a dead node's build of `d` lapses: the row stops counting as running and the demand waits again, unserved | `lease_expires_at < ops.now()`; `ops.sweep` | `actors::sweeper` |
//!
//! # Abstractions (each keeps the schedules that decide the order, or says why not)
//!
//! - One pool of waiting demands that every node picks from. A real node picks among the
//!   demands nudged to it, and reconcile re-nudges what a dead node had, so a demand reaches
//!   some live node; the pool is what the order promises about demands competing for the same
//!   slot. The per-node queues are tested in `tests/rail/fairness.rs`.
//! - A demand is one matter's unserved demand: demands of one matter coalesce into one claim,
//!   so a matter never competes with itself.
//! - Pick, permit and claim are one step. The real node counts its own granted, unclaimed
//!   holds as running (`p_pending`), and the ledger counts a permit as running until its claim
//!   is made, so each grant is seen by every later pick and permit exactly as here. The flaw
//!   `PermitNotAtomic` splits the permit to show the cap needs the lock.
//! - Time is the one comparison the order makes against it: a background demand has waited
//!   `promote` ticks or not (`waited >= background_promote_seconds`). Unserved demands age
//!   together, so the oldest demand is the one that arrived first: `Demand::id` orders age.
//! - Builds do not fail: a failed build is a demand that waits again, which `Expire` already
//!   produces; retries are the protocol model's.
//! - Arrivals, ticks (a demand ages only until promoted) and faults are bounded, and every
//!   step moves a measure that never moves back, so every execution is finite (the test
//!   `the_admission_model_has_no_cycles` checks it): "eventually" is decided where each
//!   execution ends. After the last fault the operators resume what they paused, which is the
//!   fairness assumption of the liveness property.
//!
//! # Bounded wait, and why the bound is zero
//!
//! Counting every later grant that passes a promoted background demand gives no useful bound:
//! fair share rightly passes a demand whose firm holds slots each time another firm's build
//! ends, as often as that firm has demands, while its own firm is being served. What must not
//! happen is a pass with no fair-share reason, and that bound is tight at zero: once promoted,
//! the demand is in the top tier, where a later demand comes after it unless its firm has
//! strictly fewer builds running per unit of weight. Such passes raise the passing firm's load
//! while the waiting firm's load only falls as its builds end, so after at most one build's
//! time of each of its firm's builds the demand is next. The fair-share property is the same
//! statement for a firm with nothing running: no grant of its tier goes to a loaded firm while
//! it waits, so it takes the next slot that frees (or the one after, if another idle firm's
//! older demand ties with it).

use stateright::{Model, Property};

/// A demand's class (`demand_class`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Interactive,
    Background,
}

/// A deliberate bug, for the negative controls: the checker must find each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    None,
    /// The pick without `-- rule: interactive first`'s promotion: a background demand counts
    /// as background however long it waited.
    NoPromotion,
    /// `ops.take_permit` without the rail row's lock: two nodes count the running builds, both
    /// see room, both grant.
    PermitNotAtomic,
    /// The pick without `-- rule: paused firms wait` and `-- rule: rail paused`.
    PauseIgnored,
    /// The pick without `-- rule: fair share`: a firm's load does not order its demands.
    FairShareIgnored,
}

/// The bound and the variant to check.
#[derive(Clone, Debug)]
pub struct Admission {
    /// Each firm's weight (its share of scarce slots).
    pub weights: Vec<u8>,
    pub nodes: usize,
    pub slots: usize,
    /// `max_running`: builds running at once on every node together.
    pub cap: u8,
    /// Demands that arrive in all.
    pub demands: u8,
    /// Ticks a background demand waits before it counts as interactive.
    pub promote: u8,
    pub faults: u8,
    pub flaw: Flaw,
}

/// A demand waiting or being built. `id` is its arrival order, which is its age order.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Demand {
    pub id: u8,
    pub firm: u8,
    pub class: Class,
    pub age: u8,
}

/// A briefrail process's build slots.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Node {
    pub up: bool,
    /// The demands its slots build, by id.
    pub builds: Vec<Demand>,
    /// Only in the flaw `PermitNotAtomic`: it read room under the cap and will grant.
    pub permit: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The ledger's unserved demands no build runs for, by id.
    pub waiting: Vec<Demand>,
    pub nodes: Vec<Node>,
    /// Running rows whose node died, lease not lapsed yet: they still count as running.
    pub orphans: Vec<Demand>,
    pub arrived: u8,
    pub firm_paused: Vec<bool>,
    pub rail_paused: bool,
    pub faults_left: u8,
    /// Ghost: a demand was granted while its firm or the rail was paused.
    pub granted_while_paused: bool,
    /// Ghost: a later demand of a firm at least as loaded was granted ahead of a promoted
    /// background demand.
    pub promoted_passed: bool,
    /// Ghost: a grant went to a loaded firm while a firm with nothing running waited in the
    /// same tier.
    pub idle_firm_passed: bool,
    /// Ghost: an interactive demand was granted ahead of an older background one.
    pub interactive_first: bool,
    /// Ghost: a promoted background demand was granted ahead of a younger interactive one.
    pub promotion_served: bool,
    /// Ghost: a firm with nothing running was granted ahead of an older demand of a loaded firm.
    pub fair_share_served: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Arrive(u8, Class),
    Grant(usize),
    Ask(usize),
    Finish(usize, u8),
    Tick,
    PauseFirm(u8),
    ResumeFirm(u8),
    PauseRail,
    ResumeRail,
    Crash(usize),
    Restart(usize),
    Expire(u8),
}

impl Admission {
    /// The bound `cargo test` checks: two firms of weights 1 and 2, two nodes of two slots
    /// each under a cap of three (so the cap, not the slots, binds), four demands (enough for
    /// a backlog and interactive pressure on a background demand), promotion after one tick,
    /// two faults.
    pub fn default_bound() -> Admission {
        Admission {
            weights: vec![1, 2],
            nodes: 2,
            slots: 2,
            cap: 3,
            demands: 4,
            promote: 1,
            faults: 2,
            flaw: Flaw::None,
        }
    }

    pub fn with_flaw(mut self, flaw: Flaw) -> Admission {
        self.flaw = flaw;
        self
    }

    fn firms(&self) -> u8 {
        self.weights.len() as u8
    }

    /// Builds counted as running by the ledger: on live nodes and orphaned with a live lease.
    pub fn running(s: &State) -> impl Iterator<Item = &Demand> {
        s.nodes.iter().flat_map(|n| &n.builds).chain(&s.orphans)
    }

    fn running_of(s: &State, firm: u8) -> u8 {
        Self::running(s).filter(|d| d.firm == firm).count() as u8
    }

    /// Firm `a`'s load against firm `b`'s: running builds per unit of weight, cross-multiplied.
    fn load_cmp(&self, s: &State, a: u8, b: u8) -> std::cmp::Ordering {
        let la = Self::running_of(s, a) as u16 * self.weights[b as usize] as u16;
        let lb = Self::running_of(s, b) as u16 * self.weights[a as usize] as u16;
        la.cmp(&lb)
    }

    /// In the top tier: interactive, or background that waited `promote`. What the properties
    /// judge by, whatever the flaw.
    fn top_tier(&self, d: &Demand) -> bool {
        d.class == Class::Interactive || d.age >= self.promote
    }

    /// The tier the pick orders by (`-- rule: interactive first`).
    fn tier(&self, d: &Demand) -> bool {
        match self.flaw {
            Flaw::NoPromotion => d.class == Class::Interactive,
            _ => self.top_tier(d),
        }
    }

    fn paused(&self, s: &State, d: &Demand) -> bool {
        s.rail_paused || s.firm_paused[d.firm as usize]
    }

    /// `ops.fair_order`: the index in `s.waiting` of the demand served next, or `None`.
    fn pick(&self, s: &State) -> Option<usize> {
        let ignore_pause = self.flaw == Flaw::PauseIgnored;
        if s.rail_paused && !ignore_pause {
            return None;
        }
        let mut best: Option<usize> = None;
        for (i, d) in s.waiting.iter().enumerate() {
            if self.paused(s, d) && !ignore_pause {
                continue;
            }
            let Some(b) = best else {
                best = Some(i);
                continue;
            };
            let e = &s.waiting[b];
            // `d` is served before the best so far: a higher tier, or a less loaded firm in
            // the same one (`waiting` is in age order, so of two equal the older stays best).
            let tier = self.tier(d).cmp(&self.tier(e));
            let load = if self.flaw == Flaw::FairShareIgnored {
                std::cmp::Ordering::Equal
            } else {
                self.load_cmp(s, e.firm, d.firm)
            };
            if tier.then(load).is_gt() {
                best = Some(i);
            }
        }
        best
    }

    /// A node with a free slot may take a build under the cap; in the flaw `PermitNotAtomic`
    /// it grants on the count it read earlier.
    fn may_grant(&self, s: &State, n: usize) -> bool {
        let node = &s.nodes[n];
        if !node.up || node.builds.len() >= self.slots {
            return false;
        }
        match self.flaw {
            Flaw::PermitNotAtomic => node.permit,
            _ => (Self::running(s).count() as u8) < self.cap,
        }
    }

    /// The ghosts a grant of `g` sets in `s`, judged on the state `seen` the pick saw.
    fn judge_grant(&self, seen: &State, s: &mut State, g: Demand) {
        if self.paused(seen, &g) {
            s.granted_while_paused = true;
        }
        let others = seen.waiting.iter();
        for d in others.filter(|d| d.id != g.id && !self.paused(seen, d)) {
            let g_load = self.load_cmp(seen, g.firm, d.firm);
            let same_tier = self.top_tier(&g) == self.top_tier(d);
            if d.class == Class::Background && self.top_tier(d) && g.id > d.id && g_load.is_ge() {
                s.promoted_passed = true;
            }
            let d_idle = Self::running_of(seen, d.firm) == 0;
            if d_idle && self.top_tier(d) >= self.top_tier(&g) && g_load.is_gt() {
                s.idle_firm_passed = true;
            }
            if d.id < g.id && d.class == Class::Background && g.class == Class::Interactive {
                s.interactive_first = true;
            }
            if d.id > g.id && g.class == Class::Background && d.class == Class::Interactive {
                s.promotion_served = true;
            }
            if d.id < g.id && same_tier && g_load.is_lt() && Self::running_of(seen, g.firm) == 0 {
                s.fair_share_served = true;
            }
        }
    }

    /// Every demand that arrived is served: none waits, none is built or orphaned.
    pub fn all_served(&self, s: &State) -> bool {
        s.arrived == self.demands && s.waiting.is_empty() && Self::running(s).next().is_none()
    }

    /// Nothing can happen any more.
    pub fn is_terminal(&self, s: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(s, &mut actions);
        actions.into_iter().all(|a| self.next_state(s, a).is_none())
    }
}

/// Puts `d` back among the waiting demands in age order.
fn wait_again(waiting: &mut Vec<Demand>, d: Demand) {
    let at = waiting.partition_point(|w| w.id < d.id);
    waiting.insert(at, d);
}

impl Model for Admission {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            waiting: Vec::new(),
            nodes: vec![
                Node {
                    up: true,
                    builds: Vec::new(),
                    permit: false,
                };
                self.nodes
            ],
            orphans: Vec::new(),
            arrived: 0,
            firm_paused: vec![false; self.weights.len()],
            rail_paused: false,
            faults_left: self.faults,
            granted_while_paused: false,
            promoted_passed: false,
            idle_firm_passed: false,
            interactive_first: false,
            promotion_served: false,
            fair_share_served: false,
        }]
    }

    /// Candidate actions; `next_state` returns `None` for those that change nothing.
    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.arrived < self.demands {
            for f in 0..self.firms() {
                out.push(Action::Arrive(f, Class::Interactive));
                out.push(Action::Arrive(f, Class::Background));
            }
        }
        for (n, node) in s.nodes.iter().enumerate() {
            if !node.up {
                out.push(Action::Restart(n));
                continue;
            }
            out.push(Action::Grant(n));
            if self.flaw == Flaw::PermitNotAtomic {
                out.push(Action::Ask(n));
            }
            out.extend(node.builds.iter().map(|d| Action::Finish(n, d.id)));
            if s.faults_left > 0 && !node.builds.is_empty() {
                out.push(Action::Crash(n));
            }
        }
        out.extend(s.orphans.iter().map(|d| Action::Expire(d.id)));
        out.push(Action::Tick);
        for f in 0..self.firms() {
            if s.firm_paused[f as usize] {
                out.push(Action::ResumeFirm(f));
            } else if s.faults_left > 0 {
                out.push(Action::PauseFirm(f));
            }
        }
        if s.rail_paused {
            out.push(Action::ResumeRail);
        } else if s.faults_left > 0 {
            out.push(Action::PauseRail);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Arrive(firm, class) => {
                s.waiting.push(Demand {
                    id: s.arrived,
                    firm,
                    class,
                    age: 0,
                });
                s.arrived += 1;
            }
            Action::Grant(n) => {
                if !self.may_grant(&s, n) {
                    return None;
                }
                let i = self.pick(&s)?;
                let g = s.waiting[i];
                self.judge_grant(last, &mut s, g);
                s.waiting.remove(i);
                let node = &mut s.nodes[n];
                node.permit = false;
                let at = node.builds.partition_point(|b| b.id < g.id);
                node.builds.insert(at, g);
            }
            Action::Ask(n) => {
                let node = &s.nodes[n];
                let room = (Self::running(&s).count() as u8) < self.cap;
                if node.permit || !room || node.builds.len() >= self.slots {
                    return None;
                }
                s.nodes[n].permit = true;
            }
            Action::Finish(n, id) => s.nodes[n].builds.retain(|d| d.id != id),
            Action::Tick => {
                let mut aged = false;
                let promote = self.promote;
                let unserved = s
                    .waiting
                    .iter_mut()
                    .chain(s.nodes.iter_mut().flat_map(|n| &mut n.builds))
                    .chain(&mut s.orphans);
                for d in unserved.filter(|d| d.class == Class::Background && d.age < promote) {
                    d.age += 1;
                    aged = true;
                }
                if !aged {
                    return None;
                }
            }
            Action::PauseFirm(f) => {
                s.firm_paused[f as usize] = true;
                s.faults_left -= 1;
            }
            Action::ResumeFirm(f) => s.firm_paused[f as usize] = false,
            Action::PauseRail => {
                s.rail_paused = true;
                s.faults_left -= 1;
            }
            Action::ResumeRail => s.rail_paused = false,
            Action::Crash(n) => {
                let node = &mut s.nodes[n];
                node.up = false;
                node.permit = false;
                s.orphans.append(&mut node.builds);
                s.orphans.sort_unstable();
                s.faults_left -= 1;
            }
            Action::Restart(n) => s.nodes[n].up = true,
            Action::Expire(id) => {
                let i = s.orphans.iter().position(|d| d.id == id)?;
                let d = s.orphans.remove(i);
                wait_again(&mut s.waiting, d);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always("builds running never exceed the cap", |m, s| {
                Self::running(s).count() as u8 <= m.cap
            }),
            Property::<Self>::always("no demand is granted while paused", |_, s| {
                !s.granted_while_paused
            }),
            // No starvation, as a bound: see the module.
            Property::<Self>::always(
                "a promoted demand is passed only by a less loaded firm",
                |_, s| !s.promoted_passed,
            ),
            Property::<Self>::always(
                "a firm with nothing running waits behind no loaded firm",
                |_, s| !s.idle_firm_passed,
            ),
            // Every execution is finite: the state where nothing can happen any more (every
            // pause lifted, every node up) has served every demand of either class.
            Property::<Self>::eventually("every demand is eventually served", |m, s| {
                m.all_served(s) && m.is_terminal(s)
            }),
            Property::<Self>::sometimes(
                "an interactive demand is served before an older background one",
                |_, s| s.interactive_first,
            ),
            Property::<Self>::sometimes(
                "a promoted background demand is served before a younger interactive one",
                |_, s| s.promotion_served,
            ),
            Property::<Self>::sometimes(
                "an idle firm is served before an older demand of a loaded firm",
                |_, s| s.fair_share_served,
            ),
            Property::<Self>::sometimes("the cap is reached", |m, s| {
                Self::running(s).count() as u8 == m.cap
            }),
        ]
    }
}
