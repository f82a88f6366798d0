//! The model check of the rail protocol: the model is `tests/model` (its module doc maps every
//! step to the SQL statement it mirrors); this file states the bounds and what must hold.
//!
//! - The runtime's trigger and PROTOCOL.md's plain trigger keep every property on every
//!   schedule up to the default bound (`Rail::default_bound`).
//! - With forged nudges on the bus (real event ids, forged fields), the runtime's trigger keeps
//!   every property, because the consumer reads the event's row from the ledger.
//! - Nine deliberate bugs each produce a counterexample, so the checker is known to be able to
//!   fail: the seed's upsert, a CAS without the token, deletable job rows, no reconcile, a
//!   demand without snapshot coverage, a consumer that trusts the wire, and three that are the
//!   pre-release code before retries were limited: a retry claim without the limit, a plain demand that keeps
//!   the failure count, an old build's failure counted against a new demand.
//! - Admission (`tests/model/admission.rs`): the fair order, the pauses and the fleet's cap keep
//!   their properties at the default bound, and removing promotion, the permit's lock, the
//!   pause rules or fair share each produces a counterexample.
//! - Both models have no cycles, which is what makes their "eventually" exact.
//! - `cargo test --release --test model_check -- --ignored` checks the larger bound.

mod model;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

use model::admission::{self, Admission};
use model::{Flaw, Rail, Trigger};
use stateright::{Checker, HasDiscoveries, Model};

/// What a check prints first: the variant and its bound.
trait Labelled {
    fn label(&self) -> String;
}

impl Labelled for Rail {
    fn label(&self) -> String {
        format!(
            "{:?}/{:?}: {} nodes, {} facts, {} faults",
            self.trigger, self.flaw, self.nodes, self.facts, self.faults
        )
    }
}

impl Labelled for Admission {
    fn label(&self) -> String {
        format!(
            "admission/{:?}: weights {:?}, {} nodes of {} slots, cap {}, {} demands, {} faults",
            self.flaw, self.weights, self.nodes, self.slots, self.cap, self.demands, self.faults
        )
    }
}

/// Checks `model` exhaustively (or until every property in `stop_at` has a discovery) and
/// prints what it explored.
fn check<M>(model: M, stop_at: &[&'static str]) -> impl Checker<M>
where
    M: Model + Labelled + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let label = model.label();
    let started = Instant::now();
    let mut builder = model.checker().threads(2);
    if !stop_at.is_empty() {
        builder = builder.finish_when(HasDiscoveries::AllOf(
            stop_at.iter().copied().collect::<BTreeSet<_>>(),
        ));
    }
    let checker = builder.spawn_bfs().join();
    println!(
        "{label}: {} states ({} unique), depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    for (name, path) in checker.discoveries() {
        println!("  {name}: {:?}", path.into_actions());
    }
    checker
}

/// Every always/eventually property holds on every schedule; every sometimes is reached.
fn holds<M>(model: M)
where
    M: Model + Labelled + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let checker = check(model, &[]);
    assert!(
        checker.is_done(),
        "the check stopped before exploring every state"
    );
    checker.assert_properties();
}

/// The flaw is caught: each named property has a counterexample.
fn caught<M>(model: M, properties: &[&'static str])
where
    M: Model + Labelled + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let checker = check(model, properties);
    for p in properties {
        let path = checker
            .discovery(p)
            .unwrap_or_else(|| panic!("no counterexample for {p:?}"));
        assert!(!path.into_actions().is_empty());
    }
}

#[test]
fn the_runtime_trigger_keeps_every_guarantee() {
    holds(Rail::default_bound(Trigger::DemandThenClaim));
}

#[test]
fn the_protocols_plain_claim_keeps_every_guarantee() {
    holds(Rail::default_bound(Trigger::ClaimAsDemand));
}

#[test]
fn the_seeds_single_upsert_drops_a_demand() {
    let rail = Rail::default_bound(Trigger::ClaimAsDemand).with_flaw(Flaw::SeedUpsert);
    caught(
        rail,
        &[
            "a recorded demand is never lost",
            "every demand is eventually served",
        ],
    );
}

#[test]
fn a_cas_without_the_token_lands_a_zombie() {
    let rail = Rail::default_bound(Trigger::DemandThenClaim).with_flaw(Flaw::CasWithoutToken);
    caught(rail, &["a frame lands only with the current claim's token"]);
}

#[test]
fn deleting_job_rows_reuses_tokens() {
    let rail = Rail::default_bound(Trigger::DemandThenClaim).with_flaw(Flaw::RowDeletion);
    caught(rail, &["tokens strictly increase"]);
}

#[test]
fn a_claim_that_ignores_the_retry_limit_retries_forever() {
    let rail = Rail::default_bound(Trigger::DemandThenClaim).with_flaw(Flaw::RetryWithoutLimit);
    caught(rail, &["a failing matter is not retried past its limit"]);
}

#[test]
fn a_plain_demand_that_keeps_the_failure_count_gives_up_too_early() {
    let rail = Rail::default_bound(Trigger::ClaimAsDemand).with_flaw(Flaw::PlainDemandKeepsRetries);
    caught(rail, &["every demand is eventually served"]);
}

#[test]
fn an_old_builds_failure_that_counts_against_a_new_demand_strands_it() {
    for trigger in [Trigger::DemandThenClaim, Trigger::ClaimAsDemand] {
        let rail = Rail::default_bound(trigger).with_flaw(Flaw::FailureCountsAgainstNewDemand);
        caught(rail, &["every demand is eventually served"]);
    }
}

#[test]
fn a_demand_without_snapshot_coverage_costs_needless_builds() {
    let rail = Rail::default_bound(Trigger::DemandThenClaim).with_flaw(Flaw::NoCoverage);
    caught(rail, &["every build reads a fact the Brief lacks"]);
}

#[test]
fn forged_nudges_change_nothing_when_the_consumer_reads_the_ledger() {
    holds(Rail::forging());
}

#[test]
fn a_consumer_that_trusts_the_wire_loses_a_fact() {
    caught(
        Rail::forging().with_flaw(Flaw::TrustTheWire),
        &[
            "a recorded demand is never lost",
            "every demand is eventually served",
        ],
    );
}

#[test]
fn without_reconcile_a_lost_nudge_is_never_served() {
    for trigger in [Trigger::DemandThenClaim, Trigger::ClaimAsDemand] {
        // One exhaustive run: liveness breaks, while safety, which does not depend on
        // reconcile, holds (the demand stays owed on the row).
        let checker = check(
            Rail::default_bound(trigger).with_flaw(Flaw::NoReconcile),
            &[],
        );
        assert!(
            checker
                .discovery("every demand is eventually served")
                .is_some(),
            "no counterexample for \"every demand is eventually served\""
        );
        checker.assert_no_discovery("a recorded demand is never lost");
    }
}

/// Depth-first search for a step back onto the current path. Returns the states explored,
/// or the actions of a cycle.
fn find_cycle<M>(model: &M) -> Result<usize, Vec<M::Action>>
where
    M: Model,
    M::State: Hash,
    M::Action: Clone,
{
    const ON_PATH: bool = true;
    let fingerprint = |s: &M::State| {
        let mut h = DefaultHasher::new();
        s.hash(&mut h);
        h.finish()
    };
    let mut marks: HashMap<u64, bool> = HashMap::new();
    // Each level: the state's fingerprint, the step that reached it, its unexplored steps.
    let mut path = Vec::new();
    for init in model.init_states() {
        let id = fingerprint(&init);
        if marks.contains_key(&id) {
            continue;
        }
        marks.insert(id, ON_PATH);
        path.push((id, None::<M::Action>, model.next_steps(&init)));
        while let Some((id, _, steps)) = path.last_mut() {
            let Some((action, next)) = steps.pop() else {
                marks.insert(*id, !ON_PATH);
                path.pop();
                continue;
            };
            let f = fingerprint(&next);
            match marks.get(&f) {
                Some(&ON_PATH) => {
                    let mut cycle: Vec<M::Action> =
                        path.iter().filter_map(|(_, a, _)| a.clone()).collect();
                    cycle.push(action);
                    return Err(cycle);
                }
                Some(_) => {}
                None => {
                    marks.insert(f, ON_PATH);
                    let steps = model.next_steps(&next);
                    path.push((f, Some(action), steps));
                }
            }
        }
    }
    Ok(marks.len())
}

/// stateright's "eventually" ignores executions that end in a cycle; with no cycle, every
/// execution ends in a terminal state, where the property is decided.
#[test]
fn the_model_has_no_cycles() {
    for trigger in [Trigger::DemandThenClaim, Trigger::ClaimAsDemand] {
        match find_cycle(&Rail::default_bound(trigger)) {
            Ok(states) => println!("{trigger:?}: acyclic, {states} states"),
            Err(cycle) => panic!("{trigger:?}: a cycle: {cycle:?}"),
        }
    }
}

/// The cycle search is not vacuous: it finds the cycle of a model that has one (a diamond
/// with a way back) and passes a model that has only joins (the same diamond without it).
#[test]
fn the_cycle_search_finds_a_cycle_and_only_a_cycle() {
    struct Diamond {
        way_back: bool,
    }
    impl Model for Diamond {
        type State = u8;
        type Action = u8;
        fn init_states(&self) -> Vec<u8> {
            vec![0]
        }
        fn actions(&self, s: &u8, out: &mut Vec<u8>) {
            match s {
                0 => out.extend([1, 2]),
                1 | 2 => out.push(3),
                _ if self.way_back => out.push(0),
                _ => {}
            }
        }
        fn next_state(&self, _: &u8, to: u8) -> Option<u8> {
            Some(to)
        }
    }
    assert_eq!(find_cycle(&Diamond { way_back: false }), Ok(4));
    let cycle = find_cycle(&Diamond { way_back: true }).unwrap_err();
    assert_eq!(
        cycle.last(),
        Some(&0),
        "the cycle returns to the start: {cycle:?}"
    );
}

/// Admission (`tests/model/admission.rs`): the fair order and the cap keep every property on
/// every schedule of the default bound, and each ordering rule's removal is caught.
#[test]
fn admission_keeps_the_order_the_cap_and_the_pauses() {
    holds(Admission::default_bound());
}

/// Each ordering rule removed, and the permit decided without the rail row's lock, is caught
/// by the property that rule exists for.
#[test]
fn admission_without_each_rule_has_a_counterexample() {
    use admission::Flaw::*;
    for (flaw, property) in [
        // Background starves under interactive load.
        (
            NoPromotion,
            "a promoted demand is passed only by a less loaded firm",
        ),
        // Two nodes both take the cap's last slot.
        (PermitNotAtomic, "builds running never exceed the cap"),
        (PauseIgnored, "no demand is granted while paused"),
        // A firm's one upload waits behind another firm's backlog.
        (
            FairShareIgnored,
            "a firm with nothing running waits behind no loaded firm",
        ),
    ] {
        caught(Admission::default_bound().with_flaw(flaw), &[property]);
    }
}

/// As `the_model_has_no_cycles`, for admission: its "eventually" is exact too.
#[test]
fn the_admission_model_has_no_cycles() {
    match find_cycle(&Admission::default_bound()) {
        Ok(states) => println!("admission: acyclic, {states} states"),
        Err(cycle) => panic!("admission: a cycle: {cycle:?}"),
    }
}

/// The larger bound, or `BRIEFRAIL_MODEL_BOUND=nodes,facts,faults` (at most 3 nodes, 4 facts):
/// both triggers, every property, and no cycles at that bound either.
#[test]
#[ignore = "the larger bound: a few minutes in a release build"]
fn larger_bound() {
    let custom: Option<Vec<u8>> = std::env::var("BRIEFRAIL_MODEL_BOUND").ok().map(|v| {
        v.split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("BRIEFRAIL_MODEL_BOUND: nodes,facts,faults")
            })
            .collect()
    });
    for trigger in [Trigger::DemandThenClaim, Trigger::ClaimAsDemand] {
        let rail = match (&custom, trigger) {
            (Some(b), _) => Rail {
                nodes: b[0] as usize,
                facts: b[1],
                faults: b[2],
                ..Rail::default_bound(trigger)
            },
            (None, Trigger::DemandThenClaim) => Rail::larger_bound(trigger),
            // The plain trigger with three nodes: set BRIEFRAIL_MODEL_BOUND=3,3,2.
            (None, Trigger::ClaimAsDemand) => Rail {
                facts: 3,
                ..Rail::default_bound(trigger)
            },
        };
        holds(rail.clone());
        match find_cycle(&rail) {
            Ok(states) => println!("{trigger:?}: acyclic, {states} states"),
            Err(cycle) => panic!("{trigger:?}: a cycle: {cycle:?}"),
        }
    }
}
