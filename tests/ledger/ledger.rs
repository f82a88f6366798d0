//! The ledger's guarantees (PROTOCOL.md), against a real Postgres, one database per test.
//! Races are real: many tasks on many pooled connections, released together by a barrier.

use crate::common;

use briefrail::ledger::{ClaimKind, RunOutcome, RunStatus};
use std::sync::Arc;
use std::time::Duration;

use briefrail::Error;
use briefrail::ledger::transitions::{
    self as t, ClaimOutcome, ClaimRequest, Frame, Landed, RetryPolicy,
};
use briefrail::ledger::{Claim, facts, reads};
use briefrail::testing::TestDb;
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use serde_json::json;
use tokio::sync::Barrier;
use uuid::Uuid;

const NODE: &str = "test-node";

fn req(firm: Uuid, matter: Uuid, lease: Duration) -> ClaimRequest {
    ClaimRequest {
        firm_id: firm,
        matter_id: matter,
        lease,
        node_id: NODE.into(),
        trace_id: None,
        event_ids: vec![],
        kind: ClaimKind::NewDemand,
        max_attempts: 5,
    }
}

fn long() -> Duration {
    Duration::from_secs(600)
}

/// A claim as a nudge makes it: the demand is already on the row; retries stop at `max_attempts`.
fn nudged(firm: Uuid, matter: Uuid, max_attempts: u32) -> ClaimRequest {
    ClaimRequest {
        kind: ClaimKind::ServeRecorded,
        max_attempts,
        ..req(firm, matter, long())
    }
}

/// A retry, as reconcile's nudge makes it: the demand is already on the row.
async fn retried(db: &TestDb, firm: Uuid, matter: Uuid) -> Claim {
    let mut c = db.pool.get().await.expect("conn");
    t::claim(&mut c, &nudged(firm, matter, 5))
        .await
        .expect("claim")
        .expect("the matter is free and unserved")
}

async fn won(db: &TestDb, firm: Uuid, matter: Uuid) -> Claim {
    let mut c = db.pool.get().await.expect("conn");
    t::claim(&mut c, &req(firm, matter, long()))
        .await
        .expect("claim")
        .expect("the matter is free")
}

async fn commit(db: &TestDb, claim: &Claim) -> briefrail::Result<Landed> {
    t::commit(
        &db.pool,
        claim,
        NODE,
        &Frame::new(json!({ "token": claim.token })),
    )
    .await
}

/// Moves every running claim's deadline into the past, as if its lease had run out (the
/// deadline is the claimer's, on the row; no sleep needed). Unlike advancing the ledger clock
/// (`TestDb::advance_ledger_clock`), it leaves every backoff and quiet period as it is.
async fn expire_leases(c: &mut diesel_async::AsyncPgConnection) {
    c.batch_execute(
        "UPDATE ops.matter_frame_jobs SET lease_expires_at = ops.now() - interval '1 millisecond'
          WHERE run_status = 'running'",
    )
    .await
    .expect("expire leases");
}

/// The server process behind a session: which session a pool handed out.
async fn backend_pid(c: &mut diesel_async::AsyncPgConnection) -> i32 {
    diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>(
        "pg_backend_pid()",
    ))
    .get_result(c)
    .await
    .expect("its backend")
}

async fn job(db: &TestDb, firm: Uuid, matter: Uuid) -> briefrail::ledger::JobRow {
    let mut c = db.pool.get().await.expect("conn");
    reads::job(&mut c, firm, matter)
        .await
        .expect("read")
        .expect("row exists")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_on_one_matter_yield_one_token_and_record_every_loser() {
    let db = TestDb::new(16).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let barrier = Arc::new(Barrier::new(64));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (pool, barrier) = (db.pool.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            // Released together; the 16 connections are then fought over for real.
            barrier.wait().await;
            let mut c = pool.get().await.expect("conn");
            t::claim_or_record(&mut c, &req(firm, matter, long()))
                .await
                .expect("claim")
        }));
    }
    let mut winners = Vec::new();
    let mut recorded = 0;
    for task in tasks {
        match task.await.expect("task") {
            ClaimOutcome::Won(c) => winners.push(c),
            ClaimOutcome::Recorded { .. } => recorded += 1,
            ClaimOutcome::Served
            | ClaimOutcome::RetriesExhausted { .. }
            | ClaimOutcome::Archived => {
                panic!("the plain claim never reports Served")
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one token: {winners:?}");
    assert_eq!(recorded, 63);
    let row = job(&db, firm, matter).await;
    assert_eq!(
        row.requested_generation, 64,
        "every one of the 64 demands is accounted for"
    );
    assert_eq!(row.claimed_generation, winners[0].token);
    assert!(row.rebuild_needed, "the losers left the breadcrumb");
    assert_eq!(row.run_status, RunStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_commit_is_fenced_after_the_sweep() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.expect("conn");
    t::demand(&mut c, firm, matter).await.expect("demand");
    let zombie = won(&db, firm, matter).await;

    // The zombie stalls past its lease: the sweep fails the claim.
    expire_leases(&mut c).await;
    let swept = t::sweep(&mut c, 100).await.expect("sweep");
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].1, zombie.token);
    assert_eq!(
        reads::run(&mut c, zombie.run_id)
            .await
            .unwrap()
            .unwrap()
            .outcome,
        RunOutcome::LeaseExpired
    );

    let successor = won(&db, firm, matter).await;
    assert_eq!(
        successor.token,
        zombie.token + 1,
        "the sweep's reclaim hands out n+1"
    );

    // The zombie wakes and writes while the successor's claim runs (the row is `running`
    // again, so only the claim's identity can refuse it): refused at the ledger.
    assert!(
        matches!(
            t::heartbeat(&mut c, &zombie).await,
            Err(Error::Fenced { .. })
        ),
        "the zombie's heartbeat tells it, while the successor runs"
    );
    let err = commit(&db, &zombie).await.expect_err("stale token");
    assert!(
        matches!(err, Error::Fenced { token, .. } if token == zombie.token),
        "{err}"
    );
    assert_eq!(
        commit(&db, &successor).await.expect("successor lands"),
        Landed::Idle
    );
    assert!(
        reads::frame_meta(&mut c, firm, matter, zombie.token)
            .await
            .unwrap()
            .is_none(),
        "no frame for token n"
    );
    assert_eq!(
        reads::run(&mut c, zombie.run_id)
            .await
            .unwrap()
            .unwrap()
            .outcome,
        RunOutcome::Fenced
    );
    let row = job(&db, firm, matter).await;
    assert_eq!(row.landed_generation, successor.token);
    assert!(matches!(
        t::heartbeat(&mut c, &zombie).await,
        Err(Error::Fenced { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_over_an_expired_lease_fences_the_old_token_without_a_sweep() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.expect("conn");
    let zombie = won(&db, firm, matter).await;
    // The zombie's lease runs out (its deadline, on the row, passes).
    expire_leases(&mut c).await;
    let successor = t::claim(&mut c, &req(firm, matter, long()))
        .await
        .unwrap()
        .expect("expired lease");
    assert!(successor.token > zombie.token);
    assert_eq!(
        reads::run(&mut c, zombie.run_id)
            .await
            .unwrap()
            .unwrap()
            .outcome,
        RunOutcome::LeaseExpired
    );
    assert!(
        matches!(
            t::heartbeat(&mut c, &zombie).await,
            Err(Error::Fenced { .. })
        ),
        "heartbeat tells the zombie"
    );
    t::heartbeat(&mut c, &successor)
        .await
        .expect("the successor's heartbeat renews");
    assert!(commit(&db, &zombie).await.unwrap_err().is_fenced());
    commit(&db, &successor).await.expect("lands");
    let frames = reads::frames(&mut c, firm, matter).await.unwrap();
    assert_eq!(
        frames.iter().map(|f| f.generation).collect::<Vec<_>>(),
        vec![successor.token]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_demands_during_a_build_cost_exactly_one_follow_up() {
    let db = TestDb::new(8).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let first = won(&db, firm, matter).await;
    let barrier = Arc::new(Barrier::new(20));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (pool, barrier) = (db.pool.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut c = pool.get().await.expect("conn");
            // Half arrive as trigger demands, half as claims that lose.
            if i % 2 == 0 {
                t::demand(&mut c, firm, matter).await.expect("demand");
                None
            } else {
                Some(
                    t::claim_or_record(&mut c, &req(firm, matter, long()))
                        .await
                        .expect("claim"),
                )
            }
        }));
    }
    for task in tasks {
        if let Some(outcome) = task.await.unwrap() {
            assert!(
                matches!(outcome, ClaimOutcome::Recorded { .. }),
                "a build is running: {outcome:?}"
            );
        }
    }
    let Landed::FollowUp(follow_up) = commit(&db, &first).await.expect("lands") else {
        panic!("twenty demands during the build must re-claim once");
    };
    assert!(follow_up.token > first.token);
    let row = job(&db, firm, matter).await;
    assert_eq!(
        (row.run_status, row.claimed_generation, row.rebuild_needed),
        (RunStatus::Running, follow_up.token, false)
    );
    assert_eq!(
        commit(&db, &follow_up).await.expect("follow-up lands"),
        Landed::Idle,
        "nothing left pending"
    );
    let row = job(&db, firm, matter).await;
    assert!(!row.unserved(), "{row:?}");
    let mut c = db.pool.get().await.unwrap();
    assert!(
        t::unserved(&mut c, 5, 100, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    let runs = reads::runs(&mut c, firm, matter, 100).await.unwrap();
    assert_eq!(
        runs.len(),
        2,
        "two builds in all: the first and one follow-up"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_demand_racing_a_commit_is_never_dropped() {
    let db = TestDb::new(8).await.expect("test db");
    let firm = Uuid::new_v4();
    let rounds = 1500;
    let (mut won_after, mut recorded_during) = (0, 0);
    for _ in 0..rounds {
        let matter = Uuid::new_v4();
        let running = won(&db, firm, matter).await;
        let barrier = Arc::new(Barrier::new(2));
        let (p1, b1) = (db.pool.clone(), barrier.clone());
        let committer = tokio::spawn(async move {
            b1.wait().await;
            t::commit(&p1, &running, NODE, &Frame::new(json!({})))
                .await
                .expect("current token lands")
        });
        let (p2, b2) = (db.pool.clone(), barrier.clone());
        let demander = tokio::spawn(async move {
            let mut c = p2.get().await.expect("conn");
            b2.wait().await;
            t::claim_or_record(&mut c, &req(firm, matter, long()))
                .await
                .expect("claim")
        });
        let landed = committer.await.unwrap();
        match demander.await.unwrap() {
            ClaimOutcome::Served
            | ClaimOutcome::RetriesExhausted { .. }
            | ClaimOutcome::Archived => {
                panic!("the plain claim never reports Served")
            }
            ClaimOutcome::Won(c) => {
                won_after += 1;
                assert_eq!(landed, Landed::Idle);
                assert_eq!(commit(&db, &c).await.unwrap(), Landed::Idle);
            }
            ClaimOutcome::Recorded {
                requested_generation,
            } => {
                recorded_during += 1;
                let Landed::FollowUp(f) = landed else {
                    panic!(
                        "demand {requested_generation} was recorded but the commit did not re-claim: dropped"
                    );
                };
                assert_eq!(commit(&db, &f).await.unwrap(), Landed::Idle);
            }
        }
        let row = job(&db, firm, matter).await;
        assert_eq!(
            row.landed_generation, row.requested_generation,
            "every demand served: {row:?}"
        );
        assert_eq!(row.run_status, RunStatus::Idle);
    }
    eprintln!(
        "{rounds} rounds: the demand won after the commit {won_after} times, was recorded during it {recorded_during} times"
    );
    // The race it is named for happened both ways (else it proved nothing about the window).
    assert!(
        won_after > 0 && recorded_during > 0,
        "the race did not happen both ways: won after {won_after}, recorded during {recorded_during}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_increase_and_frames_land_in_token_order_under_zombie_races() {
    let db = TestDb::new(12).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for i in 0..40u64 {
                let mut c = pool.get().await.expect("conn");
                // Some workers claim with a lease that has run out at once: the next claim
                // takes their build over, turning them into zombies whose commits must be fenced.
                let lease = if (w + i) % 3 == 0 {
                    Duration::ZERO
                } else {
                    long()
                };
                if (w * 7 + i) % 11 == 0 {
                    expire_leases(&mut c).await;
                    t::sweep(&mut c, 10).await.expect("sweep");
                }
                if let ClaimOutcome::Won(claim) =
                    t::claim_or_record(&mut c, &req(firm, matter, lease))
                        .await
                        .expect("claim")
                {
                    tokens.push(claim.token);
                    drop(c);
                    tokio::task::yield_now().await;
                    match t::commit(&pool, &claim, NODE, &Frame::new(json!({"t": claim.token})))
                        .await
                    {
                        Ok(Landed::FollowUp(f)) => {
                            tokens.push(f.token);
                            let _ = t::commit(&pool, &f, NODE, &Frame::new(json!({"t": f.token})))
                                .await;
                        }
                        Ok(Landed::Idle) | Err(Error::Fenced { .. }) => {}
                        Err(e) => panic!("commit failed: {e}"),
                    }
                }
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let tokens = task.await.unwrap();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "one worker saw tokens go backwards: {tokens:?}"
        );
        all.extend(tokens);
    }
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a token was handed out twice");

    let mut c = db.pool.get().await.unwrap();
    let frames = reads::frames(&mut c, firm, matter).await.unwrap();
    assert!(frames.len() > 1);
    assert!(
        frames.windows(2).all(|w| w[0].generation < w[1].generation),
        "frames landed out of token order: {:?}",
        frames.iter().map(|f| f.generation).collect::<Vec<_>>()
    );
    let runs = reads::runs(&mut c, firm, matter, 10_000).await.unwrap();
    for f in &frames {
        let run = runs
            .iter()
            .find(|r| r.token == f.generation)
            .expect("every frame has its run");
        assert_eq!(
            run.outcome,
            RunOutcome::Landed,
            "frame {} has a run that is not landed",
            f.generation
        );
        assert_eq!(run.run_id, f.run_id);
    }
    for r in runs
        .iter()
        .filter(|r| r.outcome == RunOutcome::Fenced || r.outcome == RunOutcome::LeaseExpired)
    {
        assert!(
            !frames.iter().any(|f| f.generation == r.token),
            "a {} run has a frame",
            r.outcome
        );
    }
    assert!(
        runs.iter().any(|r| r.outcome == RunOutcome::Fenced),
        "the race produced no zombie; the test proves nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_one_frame_per_token() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let claim = won(&db, firm, matter).await;
    assert_eq!(commit(&db, &claim).await.unwrap(), Landed::Idle);
    assert!(
        commit(&db, &claim).await.unwrap_err().is_fenced(),
        "a second commit with the same token"
    );
    let mut c = db.pool.get().await.unwrap();
    // Defeat the compare-and-swap (the row running again with the very same claim, as a bug in
    // the CAS or a lost update would leave it): only the frames' key can refuse a second frame.
    c.batch_execute(&format!(
        "UPDATE ops.matter_frame_jobs SET run_status = 'running', lease_expires_at = now() + interval '1 hour'
          WHERE firm_id = '{firm}' AND matter_id = '{matter}'"
    ))
    .await
    .unwrap();
    let again = commit(&db, &claim).await;
    assert!(
        matches!(
            &again,
            Err(Error::Database(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _
            )))
        ),
        "a second frame for one token is refused by the key: {again:?}"
    );
    assert_eq!(reads::frames(&mut c, firm, matter).await.unwrap().len(), 1);
    c.batch_execute(&format!(
        "UPDATE ops.matter_frame_jobs SET run_status = 'idle'
          WHERE firm_id = '{firm}' AND matter_id = '{matter}'"
    ))
    .await
    .unwrap();
    let settled = t::settle(&mut c, &claim, Uuid::new_v4()).await.unwrap();
    assert_eq!(
        settled,
        Some(Landed::Idle),
        "an unknown commit outcome settles by reading the frame"
    );
    let never = Claim {
        token: claim.token + 5,
        ..claim
    };
    assert_eq!(
        t::settle(&mut c, &never, Uuid::new_v4()).await.unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_writes_land_only_with_a_current_token() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    c.batch_execute("CREATE TABLE app_brief_index (matter_id uuid, token bigint)")
        .await
        .unwrap();
    let extra = |_: ()| -> briefrail::ledger::ExtraWrites {
        Box::new(|conn, claim| {
            Box::pin(async move {
                diesel::sql_query("INSERT INTO app_brief_index VALUES ($1, $2)")
                    .bind::<diesel::sql_types::Uuid, _>(claim.matter_id)
                    .bind::<diesel::sql_types::BigInt, _>(claim.token)
                    .execute(conn)
                    .await?;
                Ok(())
            })
        })
    };
    let zombie = won(&db, firm, matter).await;
    expire_leases(&mut c).await;
    t::sweep(&mut c, 10).await.unwrap();
    let current = won(&db, firm, matter).await;
    // The zombie writes while the current claim runs: its extra write must not land.
    let err = t::commit(
        &db.pool,
        &zombie,
        NODE,
        &Frame::new(json!({})).with_extra(extra(())),
    )
    .await
    .unwrap_err();
    assert!(err.is_fenced());
    t::commit(
        &db.pool,
        &current,
        NODE,
        &Frame::new(json!({})).with_extra(extra(())),
    )
    .await
    .expect("lands");

    #[derive(diesel::QueryableByName)]
    struct Tok {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        token: i64,
    }
    let rows: Vec<Tok> = diesel::sql_query("SELECT token FROM app_brief_index")
        .load(&mut c)
        .await
        .unwrap();
    assert_eq!(
        rows.iter().map(|r| r.token).collect::<Vec<_>>(),
        vec![current.token]
    );

    // A failing extra write rolls the frame back with it: nothing half-lands.
    let next = won(&db, firm, matter).await;
    let failing: briefrail::ledger::ExtraWrites = Box::new(|conn, _| {
        Box::pin(async move {
            conn.batch_execute("INSERT INTO no_such_table VALUES (1)")
                .await?;
            Ok(())
        })
    });
    assert!(
        t::commit(
            &db.pool,
            &next,
            NODE,
            &Frame::new(json!({})).with_extra(failing)
        )
        .await
        .is_err()
    );
    assert!(
        reads::frame_meta(&mut c, firm, matter, next.token)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        job(&db, firm, matter).await.claimed_generation,
        next.token,
        "the claim is still held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_names_must_be_lowercase_noun_verb_in_rust_and_in_the_database() {
    let db = TestDb::new(2).await.expect("test db");
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    // One byte longer than a routing key may be: such an event could never be published.
    let too_long = format!("matter.{}", "a".repeat(249));
    for bad in [
        "Matter.Created",
        "matter_created",
        "matter.created.now",
        "matter.",
        "",
        too_long.as_str(),
    ] {
        let e = briefrail::ledger::outbox::NewEvent::new(firm, matter, bad).expect_err(bad);
        assert!(
            matches!(e, Error::InvalidEventName { .. }) && e.to_string().contains("noun.verb"),
            "{e}"
        );
        // The database refuses it too, even from a writer that skips the library.
        let raw = diesel::sql_query(
            "INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name) VALUES (gen_random_uuid(), $1, $2, $3)",
        )
        .bind::<diesel::sql_types::Uuid, _>(firm)
        .bind::<diesel::sql_types::Uuid, _>(matter)
        .bind::<diesel::sql_types::Text, _>(bad)
        .execute(&mut c)
        .await
        .expect_err(bad);
        assert!(
            Error::from(raw).is_permanent(),
            "a CHECK violation is permanent: {bad}"
        );
    }
    let longest = format!("matter.{}", "a".repeat(248));
    for name in ["matter.created", longest.as_str()] {
        let ok = briefrail::ledger::outbox::NewEvent::new(firm, matter, name).expect("valid");
        briefrail::ledger::outbox::record_event(&mut c, &ok)
            .await
            .expect("accepted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firms_are_isolated_even_with_the_same_matter_id() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm_a, firm_b, matter) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm_a, matter, "A v. B")
        .await
        .unwrap();
    facts::create_matter(&mut c, firm_b, matter, "C v. D")
        .await
        .unwrap();
    t::demand(&mut c, firm_b, matter).await.unwrap();
    let b_before = job(&db, firm_b, matter).await;

    let a = won(&db, firm_a, matter).await;
    t::demand(&mut c, firm_a, matter).await.unwrap();
    t::heartbeat(&mut c, &a).await.unwrap();
    // A's token used against B's row is refused: tokens are per (firm, matter).
    let forged = Claim {
        firm_id: firm_b,
        ..a
    };
    assert!(t::heartbeat(&mut c, &forged).await.unwrap_err().is_fenced());
    assert!(commit(&db, &forged).await.unwrap_err().is_fenced());
    assert!(matches!(
        commit(&db, &a).await.unwrap(),
        Landed::FollowUp(_)
    ));
    expire_leases(&mut c).await;
    t::sweep(&mut c, 10).await.unwrap();
    facts::archive_matter(&mut c, firm_a, matter).await.unwrap();

    let b_after = job(&db, firm_b, matter).await;
    assert_eq!(
        b_before, b_after,
        "firm B's row is untouched by everything done to firm A"
    );
    assert!(
        reads::runs(&mut c, firm_b, matter, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        reads::latest_frame(&mut c, firm_b, matter)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        facts::matter(&mut c, firm_b, matter)
            .await
            .unwrap()
            .unwrap()
            .archived_at
            .is_none()
    );
    facts::request_brief(&mut c, firm_b, matter)
        .await
        .expect("B's matter is live");
    assert!(
        facts::request_brief(&mut c, firm_a, matter).await.is_err(),
        "A's matter is archived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_keeps_failing_stops_retrying_until_a_new_demand() {
    let db = TestDb::new(2).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    // Backoffs of a minute or more: only the ledger clock's advance lets them pass.
    let policy = RetryPolicy {
        max_attempts: 3,
        backoff_base: Duration::from_secs(60),
        backoff_max: Duration::from_secs(240),
    };
    let offered = async |c: &mut diesel_async::AsyncPgConnection| {
        t::unserved(c, policy.max_attempts, 100, Duration::ZERO)
            .await
            .unwrap()
            .iter()
            .any(|m| m.matter_id == matter)
    };
    t::demand(&mut c, firm, matter).await.unwrap();
    for attempt in 1..=3 {
        if attempt > 1 {
            // Reconcile leaves the matter alone while its backoff runs...
            assert!(
                !offered(&mut c).await,
                "attempt {attempt} was offered during its backoff"
            );
            db.advance_ledger_clock(policy.backoff_max).await.unwrap();
        }
        // ...and offers it again once the backoff has passed.
        assert!(
            offered(&mut c).await,
            "attempt {attempt} was not offered by reconcile"
        );
        let claim = retried(&db, firm, matter).await;
        t::fail(&mut c, &claim, "model panel unavailable", false, &policy)
            .await
            .unwrap();
        assert_eq!(
            reads::run(&mut c, claim.run_id)
                .await
                .unwrap()
                .unwrap()
                .outcome,
            RunOutcome::Failed
        );
    }
    // ...but not after max_attempts consecutive failures, however long the backoff is past.
    db.advance_ledger_clock(policy.backoff_max * 10)
        .await
        .unwrap();
    assert!(
        t::unserved(&mut c, policy.max_attempts, 100, Duration::ZERO)
            .await
            .unwrap()
            .is_empty(),
        "retries must stop"
    );
    let row = job(&db, firm, matter).await;
    assert_eq!(
        (row.run_status, row.consecutive_failures),
        (RunStatus::Failed, 3)
    );
    assert!(
        row.unserved(),
        "the failure is visible on the row as unserved demand"
    );

    // A new demand retries it.
    t::demand(&mut c, firm, matter).await.unwrap();
    assert_eq!(
        t::unserved(&mut c, policy.max_attempts, 100, Duration::ZERO)
            .await
            .unwrap()
            .len(),
        1
    );

    // A permanent failure is not retried at all.
    let claim = won(&db, firm, matter).await;
    t::fail(&mut c, &claim, "CHECK violation", true, &policy)
        .await
        .unwrap();
    db.advance_ledger_clock(policy.backoff_max * 10)
        .await
        .unwrap();
    assert!(
        t::unserved(&mut c, policy.max_attempts, 100, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    // A stale token's failure is fenced and does not touch the row.
    let before = job(&db, firm, matter).await;
    assert!(
        t::fail(&mut c, &claim, "late", false, &policy)
            .await
            .unwrap_err()
            .is_fenced()
    );
    assert_eq!(job(&db, firm, matter).await, before);
}

/// A builder's error may quote bytes it read (a model's stderr, a file): a NUL among them,
/// which Postgres `text` refuses, must not make the ledger refuse the failure (the claim would
/// stay held until its lease ran out, and the error would be lost). It is kept, escaped.
#[tokio::test]
async fn a_failure_whose_error_holds_a_nul_is_recorded_escaped() {
    let db = TestDb::new(2).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    t::demand(&mut c, firm, matter).await.unwrap();
    let policy = RetryPolicy {
        max_attempts: 3,
        backoff_base: Duration::from_secs(1),
        backoff_max: Duration::from_secs(2),
    };
    let claim = won(&db, firm, matter).await;
    t::fail(&mut c, &claim, "model said \0 then died", false, &policy)
        .await
        .expect("the failure is recorded");
    let claim = {
        db.advance_ledger_clock(Duration::from_secs(5))
            .await
            .unwrap();
        won(&db, firm, matter).await
    };
    t::release(&mut c, &claim, "draining \0")
        .await
        .expect("the release is recorded");
    #[derive(diesel::QueryableByName)]
    struct E {
        #[diesel(sql_type = diesel::sql_types::Text)]
        error: String,
    }
    let errors: Vec<String> = diesel::sql_query(
        "SELECT error FROM ops.matter_frame_runs WHERE error IS NOT NULL ORDER BY started_at",
    )
    .load::<E>(&mut c)
    .await
    .unwrap()
    .into_iter()
    .map(|e| e.error)
    .collect();
    assert_eq!(
        errors,
        ["model said \\u{0} then died", "draining \\u{0}"],
        "both kept, the NUL escaped"
    );
}

/// Found by the model check: a new demand that reaches a failing matter through the plain
/// path (a claim, or a lost claim recorded on a running retry) restarts its retries, as
/// `ops.demand` does; otherwise it could stop after one failure of its own build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_claim_or_a_recorded_lost_claim_restarts_the_retries_of_a_failing_matter() {
    let db = TestDb::new(2).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    let policy = RetryPolicy {
        max_attempts: 2,
        backoff_base: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
    };
    let failures = async |db: &TestDb| job(db, firm, matter).await.consecutive_failures;

    // One failure; a retry runs, and a new demand loses its plain claim to it: recorded.
    let first = won(&db, firm, matter).await;
    t::fail(&mut c, &first, "flaky", false, &policy)
        .await
        .unwrap();
    assert_eq!(failures(&db).await, 1);
    db.advance_ledger_clock(Duration::from_secs(1))
        .await
        .unwrap(); // past the backoff
    let retry = retried(&db, firm, matter).await;
    assert_eq!(failures(&db).await, 1, "a retry is not a demand");
    match t::claim_or_record(&mut c, &req(firm, matter, long()))
        .await
        .unwrap()
    {
        ClaimOutcome::Recorded { .. } => {}
        other => panic!("the retry holds the matter: {other:?}"),
    }
    assert_eq!(
        failures(&db).await,
        0,
        "the recorded demand restarts the retries"
    );
    // The retry, claimed before the new demand, fails: that says nothing about the demand,
    // so reconcile still offers it.
    t::fail(&mut c, &retry, "flaky", false, &policy)
        .await
        .unwrap();
    assert_eq!(failures(&db).await, 0);
    db.advance_ledger_clock(Duration::from_secs(1))
        .await
        .unwrap(); // past the backoff
    let offered = t::unserved(&mut c, policy.max_attempts, 100, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        offered.iter().any(|m| m.matter_id == matter),
        "retries stopped too early"
    );

    // At the limit, a plain claim (a new demand) that wins restarts the count too.
    for _ in 0..2 {
        db.advance_ledger_clock(Duration::from_secs(1))
            .await
            .unwrap(); // past the backoff
        let retry = retried(&db, firm, matter).await;
        t::fail(&mut c, &retry, "flaky", false, &policy)
            .await
            .unwrap();
    }
    assert_eq!(failures(&db).await, 2);
    let fresh = won(&db, firm, matter).await;
    t::fail(&mut c, &fresh, "flaky", false, &policy)
        .await
        .unwrap();
    assert_eq!(failures(&db).await, 1);
}

/// Found by checking the model against the runtime: the sweeper nudges every matter whose lease
/// it failed, and that nudge's claim ignored the retry limit, so a build that kept losing its
/// lease (its node killed by every build) was retried without end while reconcile had stopped.
/// A claim for a recorded demand or a retry now refuses a row at the limit, whoever nudged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matter_that_keeps_losing_its_lease_stops_being_retried_until_a_new_demand() {
    let db = TestDb::new(2).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    let nudged = nudged(firm, matter, 2);
    t::demand(&mut c, firm, matter).await.unwrap();
    for attempt in 1..=2 {
        let ClaimOutcome::Won(claim) = t::claim_or_record(&mut c, &nudged).await.unwrap() else {
            panic!("attempt {attempt} must be claimed")
        };
        // Its node dies; the lease runs out; the sweep fails the claim (and nudges again).
        expire_leases(&mut c).await;
        let swept = t::sweep(&mut c, 100).await.unwrap();
        assert!(
            swept
                .iter()
                .any(|(m, token)| m.matter_id == matter && *token == claim.token)
        );
    }
    match t::claim_or_record(&mut c, &nudged).await.unwrap() {
        ClaimOutcome::RetriesExhausted {
            consecutive_failures: 2,
        } => {}
        other => panic!("the sweep's nudge must not start a third attempt: {other:?}"),
    }
    assert!(t::claim(&mut c, &nudged).await.unwrap().is_none());
    let row = job(&db, firm, matter).await;
    assert!(
        row.unserved() && row.run_status == RunStatus::Failed,
        "visible on the row"
    );
    // A new demand restarts the retries.
    t::demand(&mut c, firm, matter).await.unwrap();
    assert!(matches!(
        t::claim_or_record(&mut c, &nudged).await.unwrap(),
        ClaimOutcome::Won(_)
    ));
}

/// Found by a review of the model against the runtime, then by the model once its liveness
/// property counted only failures of builds that read the demand: a demand that arrives
/// mid-build restarts the retries, but a failure of that older build, which never read the
/// demand, counted against them again (a permanent one used them all up), and the demand was
/// never built. A failed or swept build with demands piled up on it (`rebuild_needed`) no
/// longer counts as a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_builds_failure_does_not_use_up_the_retries_of_a_demand_it_never_read() {
    let db = TestDb::new(2).await.expect("test db");
    let mut c = db.pool.get().await.unwrap();
    let policy = RetryPolicy {
        max_attempts: 2,
        backoff_base: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
    };
    for permanent_failure in [true, false] {
        let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
        t::demand(&mut c, firm, matter).await.unwrap();
        let ClaimOutcome::Won(old) =
            t::claim_or_record(&mut c, &nudged(firm, matter, policy.max_attempts))
                .await
                .unwrap()
        else {
            panic!("the first demand is claimed")
        };
        // A new fact arrives mid-build; then the old build fails permanently, or loses its lease.
        t::demand(&mut c, firm, matter).await.unwrap();
        if permanent_failure {
            t::fail(&mut c, &old, "CHECK violation", true, &policy)
                .await
                .unwrap();
        } else {
            expire_leases(&mut c).await;
            t::sweep(&mut c, 100).await.unwrap();
        }
        let row = job(&db, firm, matter).await;
        assert_eq!(
            row.consecutive_failures, 0,
            "permanent: {permanent_failure}"
        );
        db.advance_ledger_clock(Duration::from_secs(1))
            .await
            .unwrap(); // past the backoff
        let offered = t::unserved(&mut c, policy.max_attempts, 100, Duration::ZERO)
            .await
            .unwrap();
        assert!(
            offered.iter().any(|m| m.matter_id == matter),
            "reconcile offers it"
        );
        let ClaimOutcome::Won(new) =
            t::claim_or_record(&mut c, &nudged(firm, matter, policy.max_attempts))
                .await
                .unwrap()
        else {
            panic!("the new demand gets a build of its own")
        };
        commit(&db, &new).await.unwrap();
        assert!(!job(&db, firm, matter).await.unserved());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_rows_cannot_be_deleted_so_tokens_never_restart() {
    let db = TestDb::new(2).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let first = won(&db, firm, matter).await;
    commit(&db, &first).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    // A row nothing references (no run, no frame), so no foreign key can be what refuses.
    let bare = Uuid::new_v4();
    t::demand(&mut c, firm, bare).await.unwrap();
    for sql in [
        format!("DELETE FROM ops.matter_frame_jobs WHERE matter_id = '{bare}'"),
        "DELETE FROM ops.matter_frame_jobs".to_owned(),
        "TRUNCATE ops.matter_frame_jobs CASCADE".to_owned(),
    ] {
        let err = c.batch_execute(&sql).await.expect_err(&sql).to_string();
        assert!(
            err.contains("never deleted"),
            "{sql}: refused by the no-delete trigger, not by something else: {err}"
        );
    }
    assert!(reads::job(&mut c, firm, bare).await.unwrap().is_some());
    let second = won(&db, firm, matter).await;
    assert!(second.token > first.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_keeps_a_long_build_from_being_swept() {
    let db = TestDb::new(2).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    // A one-minute lease, renewed every 40 s of the ledger clock for 400 s: over six leases,
    // never swept (the sweep would find it had the deadline not moved).
    let lease = Duration::from_secs(60);
    let claim = t::claim(&mut c, &req(firm, matter, lease))
        .await
        .unwrap()
        .expect("free");
    for _ in 0..10 {
        db.advance_ledger_clock(Duration::from_secs(40))
            .await
            .unwrap();
        t::heartbeat(&mut c, &claim).await.expect("still current");
        assert!(
            t::sweep(&mut c, 10).await.unwrap().is_empty(),
            "a heartbeating build was swept"
        );
    }
    // Without heartbeats the same lease runs out: not before its deadline, then at once.
    db.advance_ledger_clock(Duration::from_secs(40))
        .await
        .unwrap();
    assert!(
        t::sweep(&mut c, 10).await.unwrap().is_empty(),
        "swept 20 s before its deadline"
    );
    db.advance_ledger_clock(Duration::from_secs(21))
        .await
        .unwrap();
    let swept = t::sweep(&mut c, 10).await.unwrap();
    assert_eq!(swept.len(), 1, "a silent build's lease runs out");
    assert!(commit(&db, &claim).await.unwrap_err().is_fenced());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_after_a_recorded_demand_costs_no_extra_build() {
    let db = TestDb::new(2).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    let hinted = nudged(firm, matter, 5);
    t::demand(&mut c, firm, matter).await.unwrap();
    let ClaimOutcome::Won(first) = t::claim_or_record(&mut c, &hinted).await.unwrap() else {
        panic!("unserved: must win")
    };
    // A demand while it runs is recorded by the trigger; the nudges of three nodes that heard
    // it then find the build running and add nothing.
    t::demand(&mut c, firm, matter).await.unwrap();
    let during = job(&db, firm, matter).await;
    for _ in 0..3 {
        assert!(matches!(
            t::claim_or_record(&mut c, &hinted).await.unwrap(),
            ClaimOutcome::Recorded { .. }
        ));
    }
    assert_eq!(
        job(&db, firm, matter).await,
        during,
        "the row is untouched by the nudges"
    );
    let Landed::FollowUp(next) = commit(&db, &first).await.unwrap() else {
        panic!("one follow-up for the demand")
    };
    assert_eq!(
        commit(&db, &next).await.unwrap(),
        Landed::Idle,
        "and no more"
    );
    let served = job(&db, firm, matter).await;
    // A stale nudge on a served row: no claim, no bump, no build.
    assert_eq!(
        t::claim_or_record(&mut c, &hinted).await.unwrap(),
        ClaimOutcome::Served
    );
    assert_eq!(job(&db, firm, matter).await, served);
    // A new demand makes it claimable again.
    t::demand(&mut c, firm, matter).await.unwrap();
    assert!(matches!(
        t::claim_or_record(&mut c, &hinted).await.unwrap(),
        ClaimOutcome::Won(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demand_for_a_fact_the_running_build_already_reads_is_covered() {
    use diesel::prelude::*;
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    let xact_of = async |c: &mut diesel_async::AsyncPgConnection, event: Uuid| -> i64 {
        use briefrail::schema::ops::domain_event_outbox::dsl as o;
        diesel_async::RunQueryDsl::first(
            o::domain_event_outbox
                .filter(o::event_id.eq(event))
                .select(o::xact_id),
            c,
        )
        .await
        .unwrap()
    };
    facts::create_matter(&mut c, firm, matter, "A v. B")
        .await
        .unwrap();
    // A fact whose transaction is still open when the claim is taken: not seen by the claim.
    let mut slow = db.connection().await.unwrap();
    slow.batch_execute("BEGIN").await.unwrap();
    let late = briefrail::ledger::outbox::NewEvent::new(firm, matter, "brief.requested").unwrap();
    briefrail::ledger::outbox::record_event(&mut slow, &late)
        .await
        .unwrap();
    let before = facts::request_brief(&mut c, firm, matter).await.unwrap();
    let claim = won(&db, firm, matter).await;
    slow.batch_execute("COMMIT").await.unwrap();
    // The fact committed before the claim is covered by the running build: no follow-up.
    let x = xact_of(&mut c, before).await;
    assert_eq!(
        t::demand_for_event(&mut c, firm, matter, x).await.unwrap(),
        None,
        "covered"
    );
    assert!(!job(&db, firm, matter).await.rebuild_needed);
    // The one that committed after the claim (though it began earlier) is not.
    let x = xact_of(&mut c, late.event_id).await;
    assert!(
        t::demand_for_event(&mut c, firm, matter, x)
            .await
            .unwrap()
            .is_some(),
        "not covered"
    );
    assert!(job(&db, firm, matter).await.rebuild_needed);
    let Landed::FollowUp(next) = commit(&db, &claim).await.unwrap() else {
        panic!("the late fact needs a follow-up")
    };
    assert_eq!(commit(&db, &next).await.unwrap(), Landed::Idle);
    // After landing, both facts are covered by the landed build's snapshot.
    assert_eq!(
        t::demand_for_event(&mut c, firm, matter, x).await.unwrap(),
        None
    );
    assert!(!job(&db, firm, matter).await.unserved());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_stalls_inside_its_transaction_is_cut_off_by_the_database() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    // A claim whose lease has run out at once: the sweep may take it whenever it can lock it.
    let mut c0 = db.pool.get().await.unwrap();
    let claim = t::claim(&mut c0, &req(firm, matter, Duration::ZERO))
        .await
        .unwrap()
        .expect("free");
    drop(c0);
    // A node's connection, with the session timeouts every briefrail connection carries.
    let mut stalled = briefrail::db::pool::establish(
        &db.url,
        Duration::from_millis(300),
        Duration::from_millis(500),
    )
    .await
    .expect("connection");
    stalled.batch_execute("BEGIN").await.unwrap();
    diesel::sql_query(format!(
        "SELECT ops.commit_claim('{firm}', '{matter}', {}, '{}', gen_random_uuid(), 'stalled')",
        claim.token, claim.run_id
    ))
    .execute(&mut stalled)
    .await
    .expect("the compare-and-swap takes the row lock");
    // The node freezes here, holding the row lock inside its commit. Another node sweeps and
    // claims: it must not wait on the frozen transaction for longer than the idle timeout.
    let started = std::time::Instant::now();
    let mut c = db.pool.get().await.unwrap();
    let mut swept = Vec::new();
    for _ in 0..50 {
        match t::sweep(&mut c, 10).await {
            Ok(s) if !s.is_empty() => {
                swept = s;
                break;
            }
            // Not a wait for a lease (it ran out at claim): the row stays locked until
            // Postgres ends the frozen session (idle_in_transaction_session_timeout, 500 ms).
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert_eq!(swept.len(), 1, "the frozen commit's row was swept");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the matter froze for {:?}",
        started.elapsed()
    );
    let successor = won(&db, firm, matter).await;
    assert!(successor.token > claim.token);
    // The frozen transaction was rolled back by Postgres: its COMMIT cannot land anything.
    assert!(
        stalled.batch_execute("COMMIT").await.is_err(),
        "the stalled session must have been terminated"
    );
    assert!(
        reads::frame_meta(&mut c, firm, matter, claim.token)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(commit(&db, &successor).await.unwrap(), Landed::Idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_covered_demand_still_restarts_the_retries_of_a_failing_matter() {
    use diesel::prelude::*;
    let db = TestDb::new(2).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    let policy = RetryPolicy {
        max_attempts: 3,
        backoff_base: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
    };
    facts::create_matter(&mut c, firm, matter, "Flaky v. Panel")
        .await
        .unwrap();
    t::demand(&mut c, firm, matter).await.unwrap();
    for _ in 0..2 {
        let claim = won(&db, firm, matter).await;
        t::fail(&mut c, &claim, "503 from the model panel", false, &policy)
            .await
            .unwrap();
    }
    // A new fact commits, then the last allowed attempt claims (its snapshot sees the fact)
    // before the fact's demand reaches the trigger.
    let event = facts::request_brief(&mut c, firm, matter).await.unwrap();
    let last = won(&db, firm, matter).await;
    let xact: i64 = {
        use briefrail::schema::ops::domain_event_outbox::dsl as o;
        diesel_async::RunQueryDsl::first(
            o::domain_event_outbox
                .filter(o::event_id.eq(event))
                .select(o::xact_id),
            &mut c,
        )
        .await
        .unwrap()
    };
    assert_eq!(
        t::demand_for_event(&mut c, firm, matter, xact)
            .await
            .unwrap(),
        None,
        "covered by the running claim"
    );
    assert_eq!(
        job(&db, firm, matter).await.consecutive_failures,
        0,
        "but it is a new demand: retries restart"
    );
    t::fail(&mut c, &last, "503 again", false, &policy)
        .await
        .unwrap();
    db.advance_ledger_clock(Duration::from_secs(1))
        .await
        .unwrap(); // past the backoff
    assert_eq!(
        t::unserved(&mut c, policy.max_attempts, 10, Duration::ZERO)
            .await
            .unwrap()
            .len(),
        1,
        "still retried"
    );
}

/// What each member of the batch of [`a_batch_of_events_applies_each_once_and_each_decides_for_itself`]
/// answers, in order: the live matter's demand, its duplicate, an unheard event, a gated one
/// (matter not in the record), a refused lie and a refused forgery.
fn assert_first_batch(first: &[briefrail::ledger::inbox::Applied], len: usize, live: Uuid) {
    use briefrail::ledger::inbox::Applied;
    assert_eq!(first.len(), len, "{first:?}");
    assert!(
        matches!(&first[0], Applied::Demand { requested_generation: 1, fact } if fact.matter_id == live),
        "the live matter's event records its demand: {:?}",
        first[0]
    );
    assert!(
        matches!(&first[1], Applied::Duplicate(f) if f.matter_id == live),
        "its second copy in the batch: {:?}",
        first[1]
    );
    assert!(
        matches!(&first[2], Applied::NotHeard(_)),
        "matter.archived is not heard: {:?}",
        first[2]
    );
    assert!(
        matches!(&first[3], Applied::Gated(r) if r.contains("not in the record")),
        "{:?}",
        first[3]
    );
    assert!(
        matches!(&first[4], Applied::Refused(r) if r.contains("matter_id")),
        "a message that disagrees with its row: {:?}",
        first[4]
    );
    assert!(
        matches!(&first[5], Applied::Refused(r) if r.contains("not in the ledger's outbox")),
        "{:?}",
        first[5]
    );
}

/// The trigger in batches (`inbox::apply_batch`, `ops.apply_events`): each message of a batch
/// decides for itself, the same event twice in one batch counts once, a refusal stops nothing
/// else, and the batch applied again has no second effect.
#[tokio::test]
async fn a_batch_of_events_applies_each_once_and_each_decides_for_itself() {
    use briefrail::ledger::inbox::{self, Applied, BRIEF_RAIL, EventEnvelope};
    use briefrail::ledger::outbox;
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let firm = Uuid::new_v4();
    let (live, gone, unknown) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let created = facts::create_matter(&mut c, firm, live, "Live v. Batch")
        .await
        .unwrap();
    facts::create_matter(&mut c, firm, gone, "Gone v. Batch")
        .await
        .unwrap();
    let archived = facts::archive_matter(&mut c, firm, gone).await.unwrap();
    let on_unknown = outbox::record_event(
        &mut c,
        &outbox::NewEvent::new(firm, unknown, "brief.requested").unwrap(),
    )
    .await
    .unwrap();
    let pool = db.pool.clone();
    let envelope = |id: Uuid| {
        let pool = pool.clone();
        async move {
            let mut c = pool.get().await.unwrap();
            outbox::event(&mut c, id).await.unwrap().unwrap().envelope()
        }
    };
    let (e_live, e_archived, e_unknown) = (
        envelope(created).await,
        envelope(archived).await,
        envelope(on_unknown).await,
    );
    let mut lying = e_live.clone();
    lying.matter_id = gone;
    let forged = EventEnvelope {
        event_id: Uuid::new_v4(),
        ..e_live.clone()
    };
    let batch = vec![
        e_live.clone(),
        e_live.clone(),
        e_archived.clone(),
        e_unknown.clone(),
        lying,
        forged,
    ];
    let first = inbox::apply_batch(&mut c, BRIEF_RAIL, &batch)
        .await
        .unwrap();
    assert_first_batch(&first, batch.len(), live);
    let again = inbox::apply_batch(&mut c, BRIEF_RAIL, &batch[..4])
        .await
        .unwrap();
    assert!(
        again.iter().all(|a| matches!(a, Applied::Duplicate(_))),
        "the batch applied again has no second effect: {again:?}"
    );
    let job = reads::job(&mut c, firm, live).await.unwrap().unwrap();
    assert_eq!(job.requested_generation, 1, "{job:?}");
    // A demand on an archived matter is gated, not recorded.
    let late = facts::request_brief(&mut c, firm, live).await.unwrap();
    facts::archive_matter(&mut c, firm, live).await.unwrap();
    let gated = inbox::apply_batch(&mut c, BRIEF_RAIL, &[envelope(late).await])
        .await
        .unwrap();
    assert!(
        matches!(&gated[0], Applied::Gated(r) if r.contains("archived")),
        "{gated:?}"
    );
    let job = reads::job(&mut c, firm, live).await.unwrap().unwrap();
    assert_eq!(
        job.requested_generation, 1,
        "an archived matter's demand adds nothing: {job:?}"
    );
}

/// An event named twice in one batch goes to the ledger once, but a refused copy does not
/// speak for the others: a forged copy ahead of the real one is refused alone and the real one
/// is applied (in a second statement); a copy after an applied one is a duplicate, and a forged
/// copy after it is refused.
#[tokio::test]
async fn a_forged_copy_beside_the_real_one_refuses_only_the_forgery() {
    use briefrail::ledger::inbox::{self, Applied, BRIEF_RAIL};
    use briefrail::ledger::outbox;
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter, other) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    for m in [matter, other] {
        facts::create_matter(&mut c, firm, m, "Copy v. Forgery")
            .await
            .unwrap();
    }
    let id = facts::request_brief(&mut c, firm, matter).await.unwrap();
    let real = outbox::event(&mut c, id).await.unwrap().unwrap().envelope();
    let mut forged = real.clone();
    forged.matter_id = other;
    let batch = vec![forged.clone(), real.clone(), real.clone(), forged];
    let applied = inbox::apply_batch(&mut c, BRIEF_RAIL, &batch)
        .await
        .unwrap();
    assert!(
        matches!(&applied[0], Applied::Refused(r) if r.contains("matter_id")),
        "the forgery first: {applied:?}"
    );
    assert!(
        matches!(&applied[1], Applied::Demand { fact, .. } if fact.matter_id == matter && fact.recorded_ago.is_some()),
        "the real copy after it is applied, with its age: {applied:?}"
    );
    assert!(
        matches!(&applied[2], Applied::Duplicate(f) if f.matter_id == matter),
        "{applied:?}"
    );
    assert!(
        matches!(&applied[3], Applied::Refused(r) if r.contains("matter_id")),
        "{applied:?}"
    );
    let job = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    assert_eq!(job.requested_generation, 1, "one demand: {job:?}");
    assert!(
        reads::job(&mut c, firm, other).await.unwrap().is_none(),
        "the forged matter got nothing"
    );
}

/// Several demands for one matter in one trigger batch (`ops.demands` judges them together): each is judged by its own fact, a covered one adds nothing, and each
/// uncovered one reaches its own generation in event order, exactly as one at a time; the
/// running build is told to rebuild once.
#[tokio::test]
async fn demands_for_one_matter_in_one_batch_each_reach_their_own_generation() {
    use briefrail::ledger::inbox::{self, Applied, BRIEF_RAIL};
    use briefrail::ledger::outbox;
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let firm = Uuid::new_v4();
    let (busy, fresh) = (Uuid::new_v4(), Uuid::new_v4());
    for m in [busy, fresh] {
        facts::create_matter(&mut c, firm, m, "Many v. One")
            .await
            .unwrap();
    }
    // Read by the build: committed before its claim.
    let seen = facts::request_brief(&mut c, firm, busy).await.unwrap();
    let claim = won(&db, firm, busy).await;
    let mut events = vec![seen];
    for m in [busy, fresh, busy, fresh] {
        events.push(facts::request_brief(&mut c, firm, m).await.unwrap());
    }
    let mut batch = Vec::new();
    for e in &events {
        batch.push(outbox::event(&mut c, *e).await.unwrap().unwrap().envelope());
    }
    let applied = inbox::apply_batch(&mut c, BRIEF_RAIL, &batch)
        .await
        .unwrap();
    let generations: Vec<Option<i64>> = applied
        .iter()
        .map(|a| match a {
            Applied::Demand {
                requested_generation,
                ..
            } => Some(*requested_generation),
            Applied::Covered => None,
            other => panic!("every event is a demand or covered: {other:?}"),
        })
        .collect();
    assert_eq!(
        generations,
        vec![
            None,
            Some(claim.token + 1),
            Some(1),
            Some(claim.token + 2),
            Some(2)
        ],
        "the fact the build reads is covered; the others count one each, in order: {applied:?}"
    );
    let busy_row = job(&db, firm, busy).await;
    assert_eq!(
        (busy_row.requested_generation, busy_row.rebuild_needed),
        (claim.token + 2, true),
        "{busy_row:?}"
    );
    let fresh_row = job(&db, firm, fresh).await;
    assert_eq!(
        (fresh_row.requested_generation, fresh_row.rebuild_needed),
        (2, false),
        "{fresh_row:?}"
    );
}

/// The console calls a matter `running` only while its claim's deadline holds: a claim whose
/// node died shows as failed (the sweep is about to record it so), never as a build in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_past_its_deadline_is_not_shown_as_running() {
    use briefrail::ledger::matters::{MatterState, state_of};
    let db = TestDb::new(2).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Crashed v. Node")
        .await
        .unwrap();
    let _held = t::claim(&mut c, &req(firm, matter, Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        state_of(&mut c, firm, matter, 5).await.unwrap(),
        Some(MatterState::Running)
    );
    db.advance_ledger_clock(Duration::from_secs(31))
        .await
        .unwrap();
    assert_eq!(
        state_of(&mut c, firm, matter, 5).await.unwrap(),
        Some(MatterState::Failed)
    );
}

/// A clean shutdown's hand-back is not a failure: the run is `released`, the row `idle` with its
/// demand still unserved (so the next claim serves it, no backoff, no retry spent), and the
/// matter is counted neither in `briefrail_matters_failed` nor as failed by the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_handed_back_at_shutdown_is_released_not_failed() {
    let db = TestDb::new(2).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Released v. Failed")
        .await
        .unwrap();
    let claim = won(&db, firm, matter).await;
    t::release(&mut c, &claim, "node shutting down")
        .await
        .unwrap();
    let run = reads::run(&mut c, claim.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.outcome, run.error.as_deref()),
        (RunOutcome::Released, Some("node shutting down"))
    );
    let row = job(&db, firm, matter).await;
    assert_eq!(row.run_status, RunStatus::Idle);
    assert!(row.unserved(), "its demand is still to be served");
    assert_eq!((row.consecutive_failures, row.not_before), (0, None));
    assert_eq!(reads::gauges(&mut c).await.unwrap().failed_matters, 0);
    assert_eq!(
        briefrail::ledger::matters::state_of(&mut c, firm, matter, 5)
            .await
            .unwrap(),
        Some(briefrail::ledger::matters::MatterState::Unserved)
    );
    let offered = t::unserved(&mut c, 5, 10, Duration::ZERO).await.unwrap();
    assert!(
        offered.iter().any(|m| m.matter_id == matter),
        "reconcile offers it at once"
    );
    let next = retried(&db, firm, matter).await;
    assert!(next.token > claim.token);
    // A stale hand-back (the token superseded) changes nothing and is recorded as fenced.
    t::release(&mut c, &claim, "node shutting down").await.ok();
    assert_eq!(job(&db, firm, matter).await.run_status, RunStatus::Running);
}

/// The mutation controls (`tests/common/mutations.rs`): every deliberate bug in the live SQL
/// that names a killer in this binary makes each of those killers fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_a_guarantee_test() {
    common::mutations::assert_caught(module_path!()).await;
}

/// A TCP proxy to the test server that, when armed, forwards the next `COMMIT` and then cuts
/// the connection without returning the server's answer: the commit happened, the client only
/// sees a lost connection (the fault catalogue's "commit outcome unknown").
async fn commit_cutting_proxy() -> (
    u16,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let armed = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(AtomicUsize::new(0));
    let (armed2, cuts2) = (armed.clone(), cuts.clone());
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect("127.0.0.1:5432").await else {
                continue;
            };
            let (armed, cuts) = (armed2.clone(), cuts2.clone());
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let silenced = Arc::new(AtomicBool::new(false));
                let mute = silenced.clone();
                let up = async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = cr.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        let commit = buf[..n].windows(6).any(|w| w == b"COMMIT");
                        if commit && armed.swap(false, Ordering::SeqCst) {
                            // From now on the server's answers go nowhere.
                            mute.store(true, Ordering::SeqCst);
                            cuts.fetch_add(1, Ordering::SeqCst);
                            let _ = sw.write_all(&buf[..n]).await;
                            // Give the server time to commit before the connection drops (a
                            // wait on the server's work, not on a lease: kept as a sleep).
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            return;
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                let down = async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = sr.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        if AtomicBool::load(&silenced, Ordering::SeqCst) {
                            continue; // swallowed: the client never hears the answer
                        }
                        if cw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! { () = up => {}, () = down => {} }
            });
        }
    });
    (port, armed, cuts)
}

/// Commits a frame whose body the database refuses (a `\u0000`, 22P05): refused, nothing lands.
async fn commit_refused(db: &TestDb, claim: &Claim) {
    let refused = t::commit(
        &db.pool,
        claim,
        NODE,
        &Frame::new(json!({ "summary": "bad \u{0000} char" })),
    )
    .await;
    assert!(
        matches!(refused, Err(briefrail::Error::FrameRefused(_))),
        "{refused:?}"
    );
}

/// A commit the server refuses hands its pooled connection back outside any transaction: BEGIN
/// rides with the commit's statement (`db::flight`), so a refusal must end it (ROLLBACK) before
/// the connection goes back, or the next caller would run inside an aborted transaction (every
/// statement failing with 25P02). One connection in the pool, so the next caller gets that very
/// connection; a transaction-local setting that outlives its statement shows a transaction
/// block left open.
#[tokio::test]
async fn a_refused_commit_hands_its_connection_back_outside_any_transaction() {
    let db = TestDb::new(1).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let claim = won(&db, firm, matter).await;
    commit_refused(&db, &claim).await;
    let mut c = db.pool.get().await.expect("the same connection");
    assert!(
        !in_a_transaction_block(&mut c).await,
        "the connection came back inside a transaction"
    );
}

/// A commit that lands, and one the server refuses, give their connection back to the pool
/// (the flight marks it broken only while its transaction is open): one connection in the
/// pool, the same server process before and after.
#[tokio::test]
async fn a_commit_gives_its_connection_back_to_the_pool() {
    let db = TestDb::new(1).await.expect("test db");
    let backend = |pool: briefrail::db::Pool| async move {
        backend_pid(&mut pool.get().await.expect("a connection")).await
    };
    let before = backend(db.pool.clone()).await;
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let claim = won(&db, firm, matter).await;
    commit(&db, &claim).await.expect("landed");
    let claim = won(&db, firm, matter).await;
    commit_refused(&db, &claim).await;
    assert_eq!(
        backend(db.pool.clone()).await,
        before,
        "the pool kept its connection"
    );
}

/// A commit whose caller gives up mid-flight (a timeout drops its future while its statement
/// waits for a row lock, inside its transaction) never hands its pool a connection inside that
/// open transaction, which would swallow the next caller's writes: the pool discards it. One
/// connection in the pool, so the next caller would get that very one.
#[tokio::test]
async fn a_commit_dropped_mid_flight_never_leaves_its_connection_in_a_transaction() {
    use diesel_async::SimpleAsyncConnection;
    let db = TestDb::new(1).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let claim = won(&db, firm, matter).await;
    let mut holder = db.connection().await.expect("a connection of its own");
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM ops.matter_frame_jobs WHERE matter_id = '{matter}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        t::commit(&db.pool, &claim, NODE, &Frame::new(json!({ "n": 1 }))),
    )
    .await;
    assert!(
        gave_up.is_err(),
        "the commit waited for the row lock: {gave_up:?}"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    let mut c = db.pool.get().await.expect("a connection");
    assert!(
        !in_a_transaction_block(&mut c).await,
        "the pool handed out the dropped commit's open transaction"
    );
}

/// Whether the connection is inside a transaction block (a local setting survives its
/// statement only there). Fails on an aborted one.
async fn in_a_transaction_block(c: &mut diesel_async::AsyncPgConnection) -> bool {
    use diesel::dsl::sql;
    use diesel::sql_types::{Bool, Text};
    diesel::select(sql::<Text>("set_config('briefrail.probe', 'in', true)"))
        .get_result::<String>(c)
        .await
        .expect("no aborted transaction left on the connection");
    diesel::select(sql::<Bool>(
        "coalesce(current_setting('briefrail.probe', true), '') = 'in'",
    ))
    .get_result(c)
    .await
    .expect("read the probe")
}

/// The frame of `claim`'s token on the matter is the one its run landed.
async fn assert_landed_by(
    c: &mut diesel_async::AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
    claim: &Claim,
) {
    let frame = reads::frame_meta(c, firm, matter, claim.token)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(frame.run_id, claim.run_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_is_settled_by_reading_the_frame() {
    use std::sync::atomic::Ordering;
    let db = TestDb::new(4).await.expect("test db");
    let (port, armed, cuts) = commit_cutting_proxy().await;
    let through_proxy = briefrail::db::connect(
        &briefrail::db::PoolOptions::new(format!(
            "postgres://postgres@127.0.0.1:{port}/{}",
            db.name
        ))
        .size(2),
    )
    .await
    .unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();

    // A plain landing: the COMMIT happens, its answer is lost; the ledger says it landed.
    let claim = won(&db, firm, matter).await;
    armed.store(true, Ordering::SeqCst);
    let landed = t::commit(&through_proxy, &claim, NODE, &Frame::new(json!({"n": 1})))
        .await
        .expect("settled from the ledger, not reported as a failure");
    assert_eq!(
        std::sync::atomic::AtomicUsize::load(&cuts, Ordering::SeqCst),
        1,
        "the proxy cut the COMMIT's answer"
    );
    assert_eq!(landed, Landed::Idle);
    assert_landed_by(&mut c, firm, matter, &claim).await;

    // With demands piled up: the settled commit hands back the follow-up it claimed.
    let claim = won(&db, firm, matter).await;
    t::demand(&mut c, firm, matter).await.unwrap();
    armed.store(true, Ordering::SeqCst);
    let landed = t::commit(&through_proxy, &claim, NODE, &Frame::new(json!({"n": 2})))
        .await
        .expect("settled from the ledger");
    assert_eq!(
        std::sync::atomic::AtomicUsize::load(&cuts, Ordering::SeqCst),
        2
    );
    let Landed::FollowUp(next) = landed else {
        panic!("the follow-up the commit claimed is recovered: {landed:?}")
    };
    assert_eq!(job(&db, firm, matter).await.claimed_generation, next.token);
    assert_eq!(commit(&db, &next).await.unwrap(), Landed::Idle);

    // A frame with extra writes commits as a transaction: its COMMIT's answer is lost.
    let claim = won(&db, firm, matter).await;
    armed.store(true, Ordering::SeqCst);
    let extra: briefrail::ledger::ExtraWrites = Box::new(|_, _| Box::pin(async { Ok(()) }));
    let landed = t::commit(
        &through_proxy,
        &claim,
        NODE,
        &Frame::new(json!({"n": 3})).with_extra(extra),
    )
    .await
    .expect("settled from the ledger");
    assert_eq!(
        std::sync::atomic::AtomicUsize::load(&cuts, Ordering::SeqCst),
        3
    );
    assert_eq!(landed, Landed::Idle);
    assert_landed_by(&mut c, firm, matter, &claim).await;

    // Through the commit queue (a batch, as a node commits): the answer of the batch's COMMIT is
    // lost; each member settles it from the ledger.
    let claims = [
        won(&db, firm, matter).await,
        won(&db, firm, Uuid::new_v4()).await,
    ];
    armed.store(true, Ordering::SeqCst);
    let landed = tokio::task::LocalSet::new()
        .run_until(async {
            let queue = briefrail::ledger::commits_in_batches(through_proxy.clone(), 1, 64);
            let commits = claims.iter().map(|claim| {
                let (queue, pool) = (queue.clone(), through_proxy.clone());
                async move {
                    briefrail::ledger::Commit::new(*claim, NODE)
                        .in_batches(Some(queue))
                        .attempt(&pool, &Frame::new(json!({"n": 4})))
                        .await
                }
            });
            futures_util::future::join_all(commits).await
        })
        .await;
    assert_eq!(
        std::sync::atomic::AtomicUsize::load(&cuts, Ordering::SeqCst),
        4,
        "the proxy cut a batch's COMMIT"
    );
    for (claim, landed) in claims.iter().zip(landed) {
        let claim = *claim;
        assert_eq!(landed.expect("settled from the ledger"), Landed::Idle);
        assert_landed_by(&mut c, firm, claim.matter_id, &claim).await;
    }
}

/// A retried commit whose earlier attempt landed (its answer lost at COMMIT) is settled by the
/// ledger's `Commit`, with the follow-up claim that attempt made: the follow-up is built at
/// once, not left to run out its lease and be swept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_landed_attempt_recovers_its_follow_up_claim() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let first = won(&db, firm, matter).await;
    let mut c = db.pool.get().await.unwrap();
    assert!(matches!(
        t::claim_or_record(&mut c, &req(firm, matter, long()))
            .await
            .unwrap(),
        ClaimOutcome::Recorded { .. }
    ));
    let frame = Frame::new(json!({"n": 1}));
    let mut commit = t::Commit::new(first, NODE);
    let Landed::FollowUp(follow_up) = commit.attempt(&db.pool, &frame).await.expect("lands") else {
        panic!("a demand during the build must re-claim");
    };
    // The caller never heard that answer and tries again: the token has moved on.
    let again = commit
        .attempt(&db.pool, &frame)
        .await
        .expect("settled, not fenced");
    assert_eq!(again, Landed::FollowUp(follow_up));
    let run = reads::runs(&mut c, firm, matter, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.run_id == first.run_id)
        .unwrap();
    assert_eq!(
        run.outcome,
        RunOutcome::Landed,
        "the run is not recorded fenced"
    );
    // A different commit of the same (stale) claim is fenced: only its own attempts settle.
    let stranger = t::Commit::new(first, NODE).attempt(&db.pool, &frame).await;
    assert!(
        matches!(stranger, Err(Error::Fenced { .. })),
        "{stranger:?}"
    );
}

/// Catalogue row 13, the lease boundary: a claim with a 60 s lease is not reclaimable one
/// second before its deadline (neither swept nor claimed over), and is one second after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_reclaimable_only_after_its_deadline() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.expect("conn");
    t::demand(&mut c, firm, matter).await.expect("demand");
    let holder = t::claim(&mut c, &req(firm, matter, Duration::from_secs(60)))
        .await
        .expect("claim")
        .expect("free");
    db.advance_ledger_clock(Duration::from_secs(59))
        .await
        .unwrap();
    assert!(
        t::sweep(&mut c, 100).await.expect("sweep").is_empty(),
        "swept one second before the deadline"
    );
    t::demand(&mut c, firm, matter).await.expect("demand");
    assert!(
        t::claim(&mut c, &req(firm, matter, long()))
            .await
            .expect("claim")
            .is_none(),
        "claimed over a live lease one second before its deadline"
    );
    db.advance_ledger_clock(Duration::from_secs(2))
        .await
        .unwrap();
    let swept = t::sweep(&mut c, 100).await.expect("sweep");
    assert_eq!(
        swept.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![holder.token],
        "one second after the deadline the claim is swept"
    );
}

/// Catalogue row 15, a stale `now()`: `now()` is the start of the transaction, so a claim made
/// late in a long transaction would write a deadline already in the past. The ledger writes
/// deadlines from the statement's clock: a claim with a 1 s lease inside a transaction that
/// began 1.5 s earlier is not expired when it commits. (The sleep is the transaction's age,
/// which no clock offset can fake.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_late_in_a_long_transaction_is_not_born_expired() {
    let db = TestDb::new(4).await.expect("test db");
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.expect("conn");
    t::demand(&mut c, firm, matter).await.expect("demand");
    let request = req(firm, matter, Duration::from_secs(1));
    let claim = c
        .transaction(async |tx| {
            tx.batch_execute("SELECT now(); SELECT pg_sleep(1.5)")
                .await?;
            t::claim(tx, &request).await
        })
        .await
        .expect("claim")
        .expect("free");
    let mut other = db.pool.get().await.expect("conn");
    assert!(
        t::sweep(&mut other, 100).await.expect("sweep").is_empty(),
        "token {} was swept the moment it committed: its deadline came from the transaction's start",
        claim.token
    );
}

/// The ledger clock's offset is read once per transaction (`ops.clock_offset`, migration
/// 000011): a connection that already read it sees a moved clock in its next transaction, and
/// a transaction under way keeps the offset it first read.
#[tokio::test]
async fn a_moved_ledger_clock_is_seen_by_the_next_transaction_of_every_connection() {
    use diesel::sql_types::Double;
    #[derive(diesel::QueryableByName)]
    struct Ahead {
        #[diesel(sql_type = Double)]
        s: f64,
    }
    async fn ahead(c: &mut diesel_async::AsyncPgConnection) -> f64 {
        diesel::sql_query("SELECT extract(epoch FROM ops.now() - now())::float8 AS s")
            .get_result::<Ahead>(c)
            .await
            .expect("read the ledger clock")
            .s
    }
    let db = TestDb::new(1).await.unwrap();
    let mut reader = db.connection().await.unwrap();
    let mut mover = db.connection().await.unwrap();
    assert!(ahead(&mut reader).await.abs() < 1.0);
    reader.batch_execute("BEGIN").await.unwrap();
    assert!(ahead(&mut reader).await.abs() < 1.0);
    briefrail::testing::advance_ledger_clock(&mut mover, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(
        ahead(&mut reader).await.abs() < 1.0,
        "a transaction under way keeps the offset it first read"
    );
    reader.batch_execute("COMMIT").await.unwrap();
    let after = ahead(&mut reader).await;
    assert!(
        (after - 3600.0).abs() < 1.0,
        "the next transaction reads the moved clock: {after}"
    );
    assert!((ahead(&mut mover).await - 3600.0).abs() < 1.0);
}

/// The relay's lease names the rows it leases by key (`ops.lease_events`):
/// with 10,000 retained events, ten leases on the plan the function keeps for the session read
/// no outbox row through a sequential scan. As `IN (subquery)` it hash-joined a scan of the
/// whole outbox; as SQL the node sent, it was planned at each call with whatever the
/// statistics said.
#[tokio::test]
async fn the_outbox_is_never_read_whole_to_publish_an_event() {
    use briefrail::ledger::outbox;
    use diesel::sql_types::BigInt;
    #[derive(diesel::QueryableByName)]
    struct Scans {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let db = TestDb::new(1).await.unwrap();
    let mut c = db.connection().await.unwrap();
    c.batch_execute(
        "INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name, published_at)
         SELECT md5('e' || i)::uuid, '00000000-0000-0000-0000-000000000001',
                md5((i % 1000)::text)::uuid, 'document.uploaded',
                CASE WHEN i <= 9000 THEN now() END
           FROM generate_series(1, 10000) i;
         ANALYZE ops.domain_event_outbox;
         BEGIN;",
    )
    .await
    .unwrap();
    let mut leased = Vec::new();
    for _ in 0..10 {
        leased.extend(
            outbox::lease_unpublished(&mut c, 100, Duration::from_secs(30))
                .await
                .unwrap(),
        );
    }
    let scans: Scans = diesel::sql_query(
        "SELECT seq_scan AS n FROM pg_stat_xact_user_tables
          WHERE schemaname = 'ops' AND relname = 'domain_event_outbox'",
    )
    .get_result(&mut c)
    .await
    .unwrap();
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(scans.n, 0, "the lease read the whole outbox");
    assert_eq!(leased.len(), 1000, "every unpublished event, once");
    assert!(
        leased.windows(2).all(|w| w[0].seq < w[1].seq),
        "in sequence order"
    );
}

/// The pool hands out the session returned to it last (bb8's LIFO queue), so a node's
/// statements run on the fewest sessions: each session compiles the PL/pgSQL transitions on its
/// first call and keeps its plans and catalog caches, and with the default FIFO queue every
/// session of the pool took every kind of statement in turn (CHANGELOG.md, "Performance": LIFO
/// measured against FIFO).
#[tokio::test]
async fn the_pool_hands_out_the_session_returned_last() {
    let db = TestDb::new(1).await.unwrap();
    let pool = briefrail::db::connect(&briefrail::db::PoolOptions::new(db.url.clone()).size(2))
        .await
        .unwrap();
    let mut first = pool.get().await.unwrap();
    let mut second = pool.get().await.unwrap();
    let (a, b) = (
        backend_pid(&mut first).await,
        backend_pid(&mut second).await,
    );
    assert_ne!(a, b, "two sessions");
    drop(first);
    drop(second);
    for _ in 0..3 {
        let mut c = pool.get().await.unwrap();
        assert_eq!(
            backend_pid(&mut c).await,
            b,
            "the session returned last, not the one idle longest"
        );
    }
}

/// A connection first opened inside another runtime (an actix-web worker thread opens one on
/// its first request) has its driver on that runtime; when the runtime ends (the HTTP server
/// stops, a worker restarts), the connection stays idle in the pool but is closed. The pool
/// must not hand it out: a node stopped inside a larger process, or its own drain on
/// shutdown, would otherwise fail with "connection closed".
#[tokio::test]
async fn a_connection_whose_runtime_ended_is_never_handed_out() {
    let db = TestDb::new(1).await.unwrap();
    let pool = briefrail::db::connect(&briefrail::db::PoolOptions::new(db.url.clone()).size(1))
        .await
        .unwrap();
    let elsewhere = pool.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut c = elsewhere.get().await.unwrap();
            backend_pid(&mut c).await
        })
    })
    .join()
    .unwrap();
    let mut c = pool.get().await.unwrap();
    let live: Result<i32, _> = diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>(
        "pg_backend_pid()",
    ))
    .get_result(&mut *c)
    .await;
    assert!(live.is_ok(), "a closed connection was handed out: {live:?}");
}

/// The relay's lease writes a new version of each row it leases (`next_attempt_at`), and the
/// outbox's pages keep room for it (`fillfactor = 50`): every leased row (as
/// the library writes them) is rewritten on its own page (a HOT update), so a lease inserts
/// nothing into the outbox's indexes. On full pages each leased row moved to another page and
/// got a new entry in each of the four indexes that hold an unpublished row.
#[tokio::test]
async fn the_relays_lease_rewrites_its_rows_in_place() {
    use briefrail::ledger::outbox;
    use diesel::sql_types::BigInt;
    #[derive(diesel::QueryableByName)]
    struct Updated {
        #[diesel(sql_type = BigInt)]
        all: i64,
        #[diesel(sql_type = BigInt)]
        in_place: i64,
    }
    let db = TestDb::new(1).await.unwrap();
    let mut c = db.connection().await.unwrap();
    // Rows as the record writes them: a payload with the document's id, a trace context.
    c.batch_execute(
        "INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name, payload, traceparent)
         SELECT md5('e' || i)::uuid, '00000000-0000-0000-0000-000000000001',
                md5(i::text)::uuid, 'document.uploaded',
                jsonb_build_object('document_id', md5('d' || i)::uuid),
                '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
           FROM generate_series(1, 1000) i",
    )
    .await
    .unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    let leased = outbox::lease_unpublished(&mut c, 400, Duration::from_secs(30))
        .await
        .unwrap();
    let n: Updated = diesel::sql_query(
        "SELECT pg_stat_get_xact_tuples_updated('ops.domain_event_outbox'::regclass) AS all,
                pg_stat_get_xact_tuples_hot_updated('ops.domain_event_outbox'::regclass) AS in_place",
    )
    .get_result(&mut c)
    .await
    .unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(leased.len(), 400);
    assert_eq!(n.all, 400, "the lease wrote each leased row once");
    assert_eq!(
        n.in_place, 400,
        "every leased row rewritten on its own page (HOT): {} of 400",
        n.in_place
    );
}

/// The transition calls both transports make for every batch (the drain, the trigger's batch)
/// and the sweeper's are prepared once per session and then only executed
/// (`briefrail::db::prepared`); a `sql_query` was parsed and closed again on every call, one more
/// round trip each on the path of every fact to its build. A statement that reads a table
/// itself is planned at each call, as diesel does unless told: kept, it could run for the
/// session's life on a generic plan made with the statistics of its sixth call (the relay's
/// mark did, a sequential scan of the outbox per call). A statement diesel does not keep is
/// closed after its call: it is not in `pg_prepared_statements` afterwards.
#[tokio::test]
async fn the_transports_statements_are_prepared_once_per_session() {
    use briefrail::ledger::{inbox, outbox, transitions};
    use diesel::sql_types::Text;
    #[derive(diesel::QueryableByName)]
    struct Kept {
        #[diesel(sql_type = Text)]
        statement: String,
    }
    let db = TestDb::new(1).await.unwrap();
    let mut c = db.connection().await.unwrap();
    let firm = Uuid::new_v4();
    for title in ["Prepared v. Once", "Parsed v. Twice"] {
        facts::create_matter(&mut c, firm, Uuid::new_v4(), title)
            .await
            .unwrap();
    }
    let mut leased = Vec::new();
    for _ in 0..2 {
        // The second lease finds the rows leased already; the second batch is of duplicates.
        leased.extend(
            outbox::lease_unpublished(&mut c, 10, Duration::from_secs(30))
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.event_id),
        );
        let envelopes: Vec<_> = outbox::events(&mut c, &leased)
            .await
            .unwrap()
            .iter()
            .map(|r| r.envelope())
            .collect();
        assert_eq!(envelopes.len(), 2, "both facts' events");
        inbox::apply_batch(&mut c, inbox::BRIEF_RAIL, &envelopes)
            .await
            .unwrap();
        outbox::mark_published(&mut c, &leased).await.unwrap();
        inbox::drain_outbox(&mut c, inbox::BRIEF_RAIL, 10)
            .await
            .unwrap();
        transitions::sweep(&mut c, 10).await.unwrap();
        transitions::unserved(&mut c, 5, 10, Duration::from_secs(1))
            .await
            .unwrap();
    }
    // What this session keeps prepared (a statement diesel closed after its call is gone).
    let kept: Vec<Kept> = diesel::sql_query("SELECT statement FROM pg_prepared_statements")
        .load(&mut c)
        .await
        .unwrap();
    // A statement is named by words its text holds, however it is spelled (quoted or not).
    let kept_as = |words: &[&str]| {
        kept.iter()
            .filter(|k| words.iter().all(|w| k.statement.contains(w)))
            .count()
    };
    for (what, words) in [
        ("the trigger's batch", &["ops.consume_events("][..]),
        ("the relay's lease", &["ops.lease_events("]),
        ("the relay's mark", &["ops.mark_published("]),
        ("the embedded transport's drain", &["ops.drain_outbox("]),
        ("the sweep", &["ops.sweep("]),
    ] {
        assert_eq!(
            kept_as(words),
            1,
            "{what} ({words:?}): one statement kept for the session (diesel closes what it does not keep)"
        );
    }
    for (what, words) in [
        (
            "the relay's lease",
            &["UPDATE", "next_attempt_at", "SKIP LOCKED"][..],
        ),
        (
            "the trigger's read of the outbox",
            &[
                "SELECT",
                "domain_event_outbox",
                "created_at",
                "FOR KEY SHARE",
            ],
        ),
        (
            "the relay's mark",
            &["UPDATE", "domain_event_outbox", "published_at"],
        ),
        ("reconcile", &["ops.unserved("]),
    ] {
        assert_eq!(
            kept_as(words),
            0,
            "{what} ({words:?}) reads tables itself: planned at each call, not kept"
        );
    }
}
