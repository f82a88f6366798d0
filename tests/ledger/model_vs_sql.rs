//! The model and the code agree: random sequences of ledger steps (facts committed, demands,
//! claims plain and nudged, lost claims, heartbeats, commits and fails and releases with current
//! and stale tokens, sweeps, reconcile, the database clock passing a lease or a backoff) run
//! through both the model's ledger (`tests/model/ledger.rs`, what `model_check.rs` checks) and
//! the real SQL functions on Postgres. After every step the answers and the job row, abstracted
//! the way the model sees it, must be equal. A divergence fails with the shortest sequence that
//! still diverges, so a change to a SQL function the model does not share (or the other way
//! round) fails here even though each side alone looks fine.

use crate::common;

use briefrail::ledger::ClaimKind;
use std::time::Duration;

use crate::model::Flaw;
use crate::model::ledger::Committed;
use crate::model::state::{Row, State, Status};
use briefrail::ledger::outbox::{NewEvent, record_event};
use briefrail::ledger::transitions::{self as t, ClaimRequest, Frame, Landed, RetryPolicy};
use briefrail::ledger::{Claim, EventName, reads};
use briefrail::testing::TestDb;
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use uuid::Uuid;

const MAX_ATTEMPTS: u8 = 2;
const MAX_FACTS: u8 = 4;

/// One step. Claims are named by the order they were handed out (`i`-th, modulo how many).
#[derive(Debug, Clone, Copy)]
enum Step {
    CommitFact,
    Demand(u8),
    Claim { only_unserved: bool },
    RecordLostClaim,
    Heartbeat(usize),
    Commit(usize),
    Fail(usize, bool),
    Release(usize),
    Sweep,
    Reconcile,
    Tick,
}

/// A tiny deterministic generator (xorshift64*): the same seed, the same sequences.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_steps(rng: &mut Rng, len: usize) -> Vec<Step> {
    (0..len)
        .map(|_| match rng.below(11) {
            0 => Step::CommitFact,
            1 => Step::Demand(1 + rng.below(MAX_FACTS as u64) as u8),
            2 | 3 => Step::Claim {
                only_unserved: rng.below(2) == 0,
            },
            4 => Step::RecordLostClaim,
            5 => Step::Heartbeat(rng.below(4) as usize),
            6 => Step::Commit(rng.below(4) as usize),
            7 => Step::Fail(rng.below(4) as usize, rng.below(3) == 0),
            8 => Step::Release(rng.below(4) as usize),
            9 => {
                if rng.below(2) == 0 {
                    Step::Sweep
                } else {
                    Step::Reconcile
                }
            }
            _ => Step::Tick,
        })
        .collect()
}

/// The real job row as the model sees it.
async fn observed(
    c: &mut AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
    xacts: &[i64],
) -> Option<Row> {
    #[derive(diesel::QueryableByName)]
    struct Clock {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        lease_expired: bool,
        #[diesel(sql_type = diesel::sql_types::Bool)]
        backing_off: bool,
    }
    let j = reads::job(c, firm, matter).await.unwrap()?;
    let clock: Clock = diesel_async::RunQueryDsl::get_result(
        diesel::sql_query(
            "SELECT coalesce(lease_expires_at < ops.now(), false) AS lease_expired,
                    coalesce(not_before > ops.now(), false) AS backing_off
               FROM ops.matter_frame_jobs WHERE firm_id = $1 AND matter_id = $2",
        )
        .bind::<diesel::sql_types::Uuid, _>(firm)
        .bind::<diesel::sql_types::Uuid, _>(matter),
        c,
    )
    .await
    .unwrap();
    let status = match j.run_status.as_str() {
        "idle" => Status::Idle,
        "running" => Status::Running,
        _ => Status::Failed,
    };
    Some(Row {
        status,
        rebuild_needed: j.rebuild_needed,
        requested: j.requested_generation as u8,
        claimed: j.claimed_generation as u8,
        // The lease is only ever asked about while running; the backoff only while not.
        lease_expired: status == Status::Running && clock.lease_expired,
        landed: j.landed_generation as u8,
        failures: j.consecutive_failures as u8,
        backing_off: clock.backing_off,
        claimed_snapshot: j
            .claimed_snapshot
            .as_deref()
            .map(|s| xacts.iter().filter(|x| visible(**x, s)).count() as u8),
        piled_up: 0,
    })
}

/// `pg_visible_in_snapshot` for a snapshot in its text form `xmin:xmax:xip,...`.
fn visible(xact: i64, snapshot: &str) -> bool {
    let mut parts = snapshot.split(':');
    let xmin: i64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let xmax: i64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let in_progress: Vec<i64> = parts
        .next()
        .unwrap_or("")
        .split(',')
        .filter_map(|x| x.parse().ok())
        .collect();
    xact < xmin || (xact < xmax && !in_progress.contains(&xact))
}

/// The model's row as it can be compared (its ghost counter left out; the lease and the
/// backoff asked about only when they mean something).
fn modelled(s: &State) -> Option<Row> {
    s.row.clone().map(|mut r| {
        r.piled_up = 0;
        r.lease_expired = r.status == Status::Running && r.lease_expired;
        r
    })
}

/// Runs `steps` on a fresh matter of `db`, in the model and in SQL; `Err(step, why)` at the
/// first divergence.
/// What the sequences reached, so the test can show it is not vacuous.
#[derive(Debug, Default)]
struct Reached {
    follow_ups: usize,
    fenced_commits: usize,
    covered_demands: usize,
    swept: usize,
    exhausted_refusals: usize,
}

async fn run(db: &TestDb, steps: &[Step], seen: &mut Reached) -> Result<(), (usize, String)> {
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    let mut m = State::initial(1, MAX_FACTS, 0);
    let mut xacts: Vec<i64> = Vec::new();
    let mut claims: Vec<Claim> = Vec::new();
    let policy = RetryPolicy {
        max_attempts: MAX_ATTEMPTS as u32,
        backoff_base: Duration::from_secs(60),
        backoff_max: Duration::from_secs(600),
    };
    let req = |only_unserved: bool| ClaimRequest {
        firm_id: firm,
        matter_id: matter,
        lease: Duration::from_secs(600),
        node_id: "model-vs-sql".into(),
        trace_id: None,
        event_ids: vec![],
        kind: if only_unserved {
            ClaimKind::ServeRecorded
        } else {
            ClaimKind::NewDemand
        },
        max_attempts: MAX_ATTEMPTS as u32,
    };
    let fenced = |r: &briefrail::Result<()>| match r {
        Ok(()) => true,
        Err(e) if e.is_fenced() => false,
        Err(e) => panic!("the ledger failed: {e}"),
    };
    for (i, step) in steps.iter().enumerate() {
        let pick = |k: usize| (!claims.is_empty()).then(|| claims[k % claims.len()]);
        let answers: Option<(String, String)> = match *step {
            Step::CommitFact => {
                if m.facts >= MAX_FACTS {
                    None
                } else {
                    m.facts += 1;
                    use diesel_async::AsyncConnection;
                    let event = NewEvent::new(firm, matter, EventName::BRIEF_REQUESTED).unwrap();
                    let id = c
                        .transaction(async |tx| record_event(tx, &event).await)
                        .await
                        .unwrap();
                    let row = briefrail::ledger::outbox::event(&mut c, id)
                        .await
                        .unwrap()
                        .unwrap();
                    xacts.push(row.xact_id);
                    None
                }
            }
            Step::Demand(f) => {
                if f as usize > xacts.len() {
                    None
                } else {
                    let model = m.demand(f, Flaw::None);
                    let real = t::demand_for_event(&mut c, firm, matter, xacts[f as usize - 1])
                        .await
                        .unwrap();
                    seen.covered_demands += real.is_none() as usize;
                    Some((format!("{model:?}"), format!("{:?}", real.map(|g| g as u8))))
                }
            }
            Step::Claim { only_unserved } => {
                let exhausted = m
                    .row
                    .as_ref()
                    .is_some_and(|j| j.failures >= MAX_ATTEMPTS && j.status != Status::Running);
                let model = m.claim(only_unserved, MAX_ATTEMPTS, Flaw::None);
                let real = t::claim(&mut c, &req(only_unserved)).await.unwrap();
                seen.exhausted_refusals += (only_unserved && exhausted && real.is_none()) as usize;
                if let Some(cl) = real {
                    claims.push(cl);
                }
                Some((
                    format!("{model:?}"),
                    format!("{:?}", real.map(|cl| cl.token as u8)),
                ))
            }
            Step::RecordLostClaim => {
                let model = m.record_lost_claim(Flaw::None);
                let real = t::record_lost_claim(&mut c, firm, matter).await.unwrap();
                Some((format!("{model:?}"), format!("{:?}", real.map(|g| g as u8))))
            }
            Step::Heartbeat(k) => match pick(k) {
                None => None,
                Some(cl) => {
                    let model = m.heartbeat(cl.token as u8);
                    let real = fenced(&t::heartbeat(&mut c, &cl).await);
                    Some((format!("{model}"), format!("{real}")))
                }
            },
            Step::Commit(k) => match pick(k) {
                None => None,
                Some(cl) => {
                    let model = match m.commit_claim(cl.token as u8, m.facts, Flaw::None) {
                        Committed::Fenced => "fenced".to_owned(),
                        Committed::Idle => "idle".to_owned(),
                        Committed::FollowUp { token, .. } => format!("follow-up {token}"),
                    };
                    let real = match t::commit(
                        &db.pool,
                        &cl,
                        "model-vs-sql",
                        &Frame::new(serde_json::json!({})),
                    )
                    .await
                    {
                        Err(e) if e.is_fenced() => {
                            seen.fenced_commits += 1;
                            "fenced".to_owned()
                        }
                        Err(e) => panic!("the ledger failed: {e}"),
                        Ok(Landed::Idle) => "idle".to_owned(),
                        Ok(Landed::FollowUp(next)) => {
                            seen.follow_ups += 1;
                            claims.push(next);
                            format!("follow-up {}", next.token)
                        }
                    };
                    Some((model, real))
                }
            },
            Step::Fail(k, permanent) => match pick(k) {
                None => None,
                Some(cl) => {
                    let model = m.fail_claim(cl.token as u8, permanent, MAX_ATTEMPTS, Flaw::None);
                    let real =
                        fenced(&t::fail(&mut c, &cl, "model-vs-sql", permanent, &policy).await);
                    Some((format!("{model}"), format!("{real}")))
                }
            },
            Step::Release(k) => match pick(k) {
                None => None,
                Some(cl) => {
                    let model = m.release_claim(cl.token as u8);
                    let real = fenced(&t::release(&mut c, &cl, "model-vs-sql").await);
                    Some((format!("{model}"), format!("{real}")))
                }
            },
            Step::Sweep => {
                let model = m.sweep(Flaw::None);
                let real = t::sweep(&mut c, 1000)
                    .await
                    .unwrap()
                    .iter()
                    .any(|(r, _)| r.matter_id == matter);
                seen.swept += real as usize;
                Some((format!("{model}"), format!("{real}")))
            }
            Step::Reconcile => {
                let model = m.unserved(MAX_ATTEMPTS);
                let real = t::unserved(&mut c, MAX_ATTEMPTS as u32, 100_000, Duration::ZERO)
                    .await
                    .unwrap()
                    .iter()
                    .any(|r| r.matter_id == matter);
                Some((format!("{model}"), format!("{real}")))
            }
            Step::Tick => {
                // The ledger clock passes the lease of a running row, or the backoff of a row
                // that is not running (the model's two questions of time). Moved on the row,
                // not by advancing the ledger clock, which would pass both at once.
                if let Some(j) = m.row.as_mut() {
                    if j.status == Status::Running {
                        j.lease_expired = true;
                    } else {
                        j.backing_off = false;
                    }
                }
                c.batch_execute(&format!(
                    "UPDATE ops.matter_frame_jobs
                        SET lease_expires_at = CASE WHEN run_status = 'running'
                                                    THEN ops.now() - interval '1 millisecond' ELSE lease_expires_at END,
                            not_before = CASE WHEN run_status <> 'running' AND not_before > ops.now()
                                              THEN ops.now() - interval '1 millisecond' ELSE not_before END
                      WHERE firm_id = '{firm}' AND matter_id = '{matter}'"
                ))
                .await
                .unwrap();
                None
            }
        };
        if let Some((model, real)) = answers
            && model != real
        {
            return Err((
                i,
                format!("{step:?}: the model answered {model}, the SQL {real}"),
            ));
        }
        let (want, got) = (modelled(&m), observed(&mut c, firm, matter, &xacts).await);
        if want != got {
            return Err((
                i,
                format!("{step:?}: the row differs\n  model: {want:?}\n  SQL:   {got:?}"),
            ));
        }
    }
    // Leave nothing running for later sequences' sweeps.
    c.batch_execute(&format!(
        "UPDATE ops.matter_frame_jobs SET run_status = 'idle' WHERE matter_id = '{matter}'"
    ))
    .await
    .unwrap();
    Ok(())
}

/// The shortest sequence (greedily, one step removed at a time) that still diverges.
async fn shrink(db: &TestDb, mut steps: Vec<Step>) -> (Vec<Step>, String) {
    let seen = &mut Reached::default();
    let mut why = run(db, &steps, seen).await.expect_err("diverges").1;
    let mut i = 0;
    while i < steps.len() {
        let mut fewer = steps.clone();
        fewer.remove(i);
        match run(db, &fewer, seen).await {
            Err((at, w)) => {
                fewer.truncate(at + 1);
                steps = fewer;
                why = w;
            }
            Ok(()) => i += 1,
        }
    }
    (steps, why)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_and_the_sql_agree_on_random_sequences() {
    let db = TestDb::new(4).await.unwrap();
    let seed = std::env::var("BRIEFRAIL_MODEL_VS_SQL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_b41e_f00d_u64);
    let mut rng = Rng(seed);
    let (sequences, len) = (300, 30);
    let mut seen = Reached::default();
    for n in 0..sequences {
        let steps = random_steps(&mut rng, len);
        if let Err((at, _)) = run(&db, &steps, &mut seen).await {
            let (shortest, why) = shrink(&db, steps[..=at].to_vec()).await;
            panic!(
                "sequence {n} (seed {seed:#x}): the model and the SQL diverge after {} steps: {why}\n  steps: {shortest:?}",
                shortest.len()
            );
        }
    }
    eprintln!("{sequences} sequences of {len} steps agree (seed {seed:#x}): {seen:?}");
    // Not vacuous: the sequences reached what the ledger exists for.
    assert!(
        seen.follow_ups > 0
            && seen.fenced_commits > 0
            && seen.covered_demands > 0
            && seen.swept > 0
            && seen.exhausted_refusals > 0,
        "the sequences did not reach every kind of step: {seen:?}"
    );
}

/// The mutation controls (`tests/common/mutations.rs`): a bug in the live SQL that the model
/// does not share makes the two disagree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_a_guarantee_test() {
    common::mutations::assert_caught(module_path!()).await;
}
