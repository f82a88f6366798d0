//! Claims and commits in batches (`ops.claim_batch`, `ops.commit_claims`; `docs/protocol.md`
//! "Speed: batches"):
//! a batch shares a round trip and a transaction, never a decision. Each member answers as it
//! would alone, each compare-and-swap fences its own row, a refused frame fails only its own
//! build, two batches over the same rows never deadlock (nor a commit batch and a trigger
//! batch), and a claim batch whose answer is lost is settled by its run ids. Against a real
//! Postgres, one database per test.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use briefrail::Error;
use briefrail::ledger::transitions::{self as t, ClaimRequest, Frame, Landed};
use briefrail::ledger::{Claim, ClaimKind, Commit, RunOutcome, RunStatus, facts, reads};
use briefrail::testing::TestDb;
use diesel_async::SimpleAsyncConnection;
use serde_json::json;
use tokio::sync::Barrier;
use uuid::Uuid;

const NODE: &str = "batch-node";

fn req(firm: Uuid, matter: Uuid) -> ClaimRequest {
    common::claim_request(NODE, firm, matter)
}

/// Each matter created in the record and claimed (a new demand), in the order given.
async fn claimed(c: &mut diesel_async::AsyncPgConnection, firm: Uuid, ids: &[Uuid]) -> Vec<Claim> {
    let mut claims = Vec::new();
    for m in ids {
        facts::create_matter(c, firm, *m, "Batch v. Alone")
            .await
            .unwrap();
        claims.push(t::claim(c, &req(firm, *m)).await.unwrap().unwrap());
    }
    claims
}

/// Matter ids in descending order: a batch given in this order is the reverse of the order it
/// locks rows in, so an answer put at the wrong position shows.
fn descending(n: usize) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    ids.sort();
    ids.reverse();
    ids
}

/// Runs `f` where a batcher can live (the node runs on actix's thread-local runtime).
async fn local<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::LocalSet::new().run_until(f).await
}

/// A matter named twice in one claim batch: its members go one at a time, as the loop of 000011
/// ran them, so a member that declines (serving a recorded demand of a matter already served)
/// does not stop the next one (a plain claim, itself a demand) from claiming it. The set-based
/// statement's first cut kept only the first member of a matter and answered both not claimed.
#[tokio::test]
async fn a_matter_named_twice_in_a_claim_batch_is_claimed_as_one_at_a_time_would() {
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    facts::create_matter(&mut c, firm, matter, "Twice v. Once")
        .await
        .unwrap();
    let first = t::claim(&mut c, &req(firm, matter)).await.unwrap().unwrap();
    t::commit(&db.pool, &first, NODE, &Frame::new(json!({})))
        .await
        .unwrap();
    let members = vec![
        ClaimRequest {
            kind: ClaimKind::ServeRecorded,
            ..req(firm, matter)
        },
        req(firm, matter),
    ];
    let answers = t::claim_batch(&mut c, &members).await.unwrap();
    assert!(
        answers[0].is_none(),
        "every demand served: the first declines: {answers:?}"
    );
    let won = answers[1].expect("the plain claim after it claims the matter, as alone");
    let job = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    assert_eq!(
        (job.run_status, job.claimed_generation, job.claimed_run_id),
        (RunStatus::Running, won.token, Some(won.run_id))
    );
}

/// A claim without a run id is refused by the database, and nothing is written for it: no
/// claim that no build could ever be fenced by, or commit under.
#[tokio::test]
async fn a_claim_without_a_run_id_is_refused_and_writes_nothing() {
    use diesel_async::RunQueryDsl;
    let db = TestDb::new(1).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    facts::create_matter(&mut c, firm, matter, "Nobody v. Nothing")
        .await
        .unwrap();
    let refused = diesel::sql_query(format!(
        "SELECT ops.claim('{firm}', '{matter}', 60, NULL, 'n', NULL, '{{}}', false, 5)"
    ))
    .execute(&mut c)
    .await
    .expect_err("a claim without a run id");
    assert!(
        refused.to_string().contains("run id"),
        "the refusal names the run id: {refused}"
    );
    assert!(
        reads::job(&mut c, firm, matter).await.unwrap().is_none(),
        "nothing written"
    );
}

#[tokio::test]
async fn a_claim_batch_answers_each_member_as_its_own_claim_would() {
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let firm = Uuid::new_v4();
    let ids = descending(4);
    let (free, held, archived, served) = (ids[0], ids[1], ids[2], ids[3]);
    for m in &ids {
        facts::create_matter(&mut c, firm, *m, "Batch v. Alone")
            .await
            .unwrap();
    }
    let holder = t::claim(&mut c, &req(firm, held)).await.unwrap().unwrap();
    facts::archive_matter(&mut c, firm, archived).await.unwrap();
    let first = t::claim(&mut c, &req(firm, served)).await.unwrap().unwrap();
    t::commit(&db.pool, &first, NODE, &Frame::new(json!({})))
        .await
        .unwrap();

    let event = Uuid::new_v4();
    let mut members = vec![
        ClaimRequest {
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            event_ids: vec![event],
            ..req(firm, free)
        },
        req(firm, held),
        req(firm, archived),
        ClaimRequest {
            kind: ClaimKind::ServeRecorded,
            ..req(firm, served)
        },
    ];
    let answers = t::claim_batch(&mut c, &members).await.unwrap();
    assert_eq!(answers.len(), 4);
    let won = answers[0].expect("the free matter is won");
    assert_eq!((won.matter_id, won.token), (free, 1));
    assert_eq!(
        answers[1..],
        [None, None, None],
        "held by a live build, archived, every demand served: each not claimed, as alone"
    );
    let run = reads::run(&mut c, won.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.outcome, run.node_id.as_str(), run.trace_id.as_deref()),
        (
            RunOutcome::Running,
            NODE,
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        )
    );
    assert_eq!(
        run.event_ids,
        vec![Some(event)],
        "the run records its own events"
    );
    let held_row = reads::job(&mut c, firm, held).await.unwrap().unwrap();
    assert_eq!(
        (held_row.claimed_generation, held_row.claimed_run_id),
        (holder.token, Some(holder.run_id)),
        "the live build keeps its claim"
    );
    // Alone after the batch, the lost claim records its demand as it always did.
    members.truncate(2);
    let outcome = t::claim_or_record_after(&mut c, &members[1], Some(answers[1]))
        .await
        .unwrap();
    assert!(
        matches!(outcome, t::ClaimOutcome::Recorded { .. }),
        "{outcome:?}"
    );
    assert!(
        reads::job(&mut c, firm, held)
            .await
            .unwrap()
            .unwrap()
            .rebuild_needed
    );
}

#[tokio::test]
async fn a_commit_batch_fences_each_member_by_its_own_claim() {
    local(async {
        let db = TestDb::new(3).await.unwrap();
        let mut c = db.pool.get().await.unwrap();
        let firm = Uuid::new_v4();
        let ids = descending(4);
        let mut claims = claimed(&mut c, firm, &ids).await;
        // ids[3] has a longer history, so the members' tokens differ (1, 1, 1, 3).
        for _ in 0..2 {
            let frame = Frame::new(json!({}));
            t::commit(&db.pool, &claims[3], NODE, &frame).await.unwrap();
            claims[3] = t::claim(&mut c, &req(firm, ids[3])).await.unwrap().unwrap();
        }
        assert_eq!(claims[3].token, 3);
        // ids[1]: superseded (its lease ran out and another claim took the matter);
        // ids[2]: a demand arrived during its build (the commit re-claims).
        c.batch_execute(&format!(
            "UPDATE ops.matter_frame_jobs SET lease_expires_at = ops.now() - interval '1 ms'
              WHERE matter_id = '{}'",
            ids[1]
        ))
        .await
        .unwrap();
        let usurper = t::claim(&mut c, &req(firm, ids[1])).await.unwrap().unwrap();
        t::record_lost_claim(&mut c, firm, ids[2]).await.unwrap();

        let queue = briefrail::ledger::commits_in_batches(db.pool.clone(), 1, 64);
        let commits = claims.iter().map(|claim| {
            let queue = queue.clone();
            let pool = db.pool.clone();
            async move {
                Commit::new(*claim, NODE)
                    .in_batches(Some(queue))
                    .attempt(&pool, &Frame::new(json!({ "token": claim.token })))
                    .await
            }
        });
        let answers = futures_util::future::join_all(commits).await;
        assert!(matches!(answers[0], Ok(Landed::Idle)), "{:?}", answers[0]);
        assert!(
            matches!(answers[1], Err(Error::Fenced { .. })),
            "the superseded claim is fenced: {:?}",
            answers[1]
        );
        match &answers[2] {
            Ok(Landed::FollowUp(next)) => {
                assert!(
                    next.matter_id == ids[2] && next.token > claims[2].token,
                    "{next:?}"
                );
                let run = reads::run(&mut c, next.run_id).await.unwrap().unwrap();
                assert_eq!(run.outcome, RunOutcome::Running);
            }
            other => panic!("the re-claimed matter gets its follow-up: {other:?}"),
        }
        assert!(matches!(answers[3], Ok(Landed::Idle)), "{:?}", answers[3]);
        for (i, claim) in claims.iter().enumerate() {
            let frame = reads::frame_meta(&mut c, firm, claim.matter_id, claim.token)
                .await
                .unwrap();
            assert_eq!(
                frame.is_some(),
                i != 1,
                "member {i}: a frame only where it landed"
            );
        }
        let fenced = reads::job(&mut c, firm, ids[1]).await.unwrap().unwrap();
        assert_eq!(
            (fenced.run_status, fenced.claimed_generation),
            (RunStatus::Running, usurper.token),
            "the fenced member changed nothing on its row"
        );
        let zombie = reads::run(&mut c, claims[1].run_id).await.unwrap().unwrap();
        assert_eq!(
            zombie.outcome,
            RunOutcome::Fenced,
            "its refused commit is on its run"
        );
    })
    .await;
}

/// A frame the database refuses aborts its batch; every member then commits alone, so the
/// refusal reaches its own build (a permanent error) and the others land.
#[tokio::test]
async fn a_refused_frame_in_a_batch_fails_alone_and_the_others_land() {
    local(async {
        let db = TestDb::new(3).await.unwrap();
        let mut c = db.pool.get().await.unwrap();
        let firm = Uuid::new_v4();
        let ids = descending(3);
        let claims = claimed(&mut c, firm, &ids).await;
        let queue = briefrail::ledger::commits_in_batches(db.pool.clone(), 1, 64);
        let commits = claims.iter().enumerate().map(|(i, claim)| {
            let queue = queue.clone();
            let pool = db.pool.clone();
            let body = if i == 1 {
                json!({ "summary": "bad \u{0000} char" })
            } else {
                json!({ "token": claim.token })
            };
            async move {
                Commit::new(*claim, NODE)
                    .in_batches(Some(queue))
                    .attempt(&pool, &Frame::new(body))
                    .await
            }
        });
        let answers = futures_util::future::join_all(commits).await;
        assert!(matches!(answers[0], Ok(Landed::Idle)), "{:?}", answers[0]);
        assert!(matches!(answers[2], Ok(Landed::Idle)), "{:?}", answers[2]);
        match &answers[1] {
            Err(e @ Error::FrameRefused(why)) => {
                assert!(e.is_permanent() && why.contains("22P05"), "{why}");
            }
            other => panic!("the refused frame hears its own refusal: {other:?}"),
        }
        assert!(
            reads::frame_meta(&mut c, firm, ids[1], claims[1].token)
                .await
                .unwrap()
                .is_none()
        );
    })
    .await;
}

/// Many rounds of two batches over the same fresh matters, one in ascending and one in
/// descending order, released together on two connections: both lock in one global order, so
/// one waits for the other and neither is chosen as a deadlock victim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_batches_over_the_same_matters_in_opposite_orders_never_deadlock() {
    let db = TestDb::new(4).await.unwrap();
    let firm = Uuid::new_v4();
    let mut failures = Vec::new();
    let mut won = 0;
    for _ in 0..20 {
        let ids = descending(24);
        let barrier = Arc::new(Barrier::new(2));
        let sides = [false, true].map(|reversed| {
            let (pool, barrier) = (db.pool.clone(), barrier.clone());
            let mut members: Vec<ClaimRequest> = ids.iter().map(|m| req(firm, *m)).collect();
            if reversed {
                members.reverse();
            }
            tokio::spawn(async move {
                let mut c = pool.get().await.expect("conn");
                barrier.wait().await;
                t::claim_batch(&mut c, &members).await
            })
        });
        for side in sides {
            match side.await.unwrap() {
                Ok(answers) => won += answers.iter().flatten().count(),
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} batches failed, e.g. {:?}",
        failures.len(),
        failures.first()
    );
    assert_eq!(won, 20 * 24, "each matter won exactly once");
}

/// The claim batch's lock order made to show every time (a race overlaps only when it happens
/// to): a trigger transaction applies the event of the lowest matter and holds its job row while
/// a claim batch over all of them (given in descending order) starts; once the claim waits for a
/// row lock, the trigger applies the highest matter's event and commits. A claim batch that
/// locks in key order waits at the lowest row holding none of the others, so the trigger
/// finishes first and the batch claims every matter after it; one that took any row out of that
/// order would hold the highest row the trigger needs, and Postgres would abort one of the two
/// as a deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_batch_behind_a_trigger_holding_the_lowest_row_waits_without_a_deadlock() {
    let db = TestDb::new(3).await.unwrap();
    let firm = Uuid::new_v4();
    let ids = descending(8);
    let mut c = db.pool.get().await.unwrap();
    // Every matter served once (its job row exists and is idle), then asked for again.
    for claim in claimed(&mut c, firm, &ids).await {
        t::commit(&db.pool, &claim, NODE, &Frame::new(json!({})))
            .await
            .unwrap();
    }
    let envelopes = requests(&mut c, firm, ids.iter().rev().copied()).await;
    let (lowest, highest) = (&envelopes[..1], &envelopes[envelopes.len() - 1..]);
    let mut trigger = db.connection().await.unwrap();
    trigger
        .batch_execute(&format!("BEGIN; {}", apply_sql(lowest)))
        .await
        .expect("the lowest matter's event applied");
    let claims = {
        let pool = db.pool.clone();
        let members: Vec<ClaimRequest> = ids.iter().map(|m| req(firm, *m)).collect();
        tokio::spawn(async move {
            let mut c = pool.get().await.expect("conn");
            t::claim_batch(&mut c, &members)
                .await
                .map_err(|e| e.to_string())
        })
    };
    let claims = waits_for_a_row_lock(&mut c, "ops.claim_batch(", claims).await;
    let rest = trigger
        .batch_execute(&format!("{} COMMIT;", apply_sql(highest)))
        .await
        .map_err(|e| e.to_string());
    if rest.is_err() {
        trigger.batch_execute("ROLLBACK").await.unwrap();
    }
    let answers = claims.await.unwrap();
    assert!(
        rest.is_ok() && answers.is_ok(),
        "trigger: {rest:?}; claim batch: {answers:?}"
    );
    let answers = answers.unwrap();
    assert!(
        answers.iter().all(|a| a.is_some()),
        "the batch claimed every matter after the trigger: {answers:?}"
    );
}

/// Returns `task` once a statement of another connection that contains `statement` waits for a
/// row lock (`pg_stat_activity`, polled); fails if `task` ends first or nothing waits in 20 s.
async fn waits_for_a_row_lock<T: std::fmt::Debug + Send + 'static>(
    c: &mut diesel_async::AsyncPgConnection,
    statement: &str,
    task: tokio::task::JoinHandle<T>,
) -> tokio::task::JoinHandle<T> {
    use diesel_async::RunQueryDsl;
    let since = std::time::Instant::now();
    loop {
        let waiting: Waiting = diesel::sql_query(
            "SELECT count(*) AS n FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()
                AND wait_event_type = 'Lock' AND strpos(query, $1) > 0",
        )
        .bind::<diesel::sql_types::Text, _>(statement)
        .get_result(c)
        .await
        .unwrap();
        if waiting.n > 0 {
            return task;
        }
        if task.is_finished() || since.elapsed() > Duration::from_secs(20) {
            let ended = if task.is_finished() {
                format!("{:?}", task.await.unwrap())
            } else {
                "still running".into()
            };
            panic!("{statement}…) never waited for the row the trigger holds: {ended}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The trigger's own statement over `wires`, as SQL text (run inside a transaction a test holds).
fn apply_sql(wires: &[briefrail::ledger::inbox::EventEnvelope]) -> String {
    let ids: Vec<String> = wires.iter().map(|w| format!("'{}'", w.event_id)).collect();
    let names: Vec<String> = wires
        .iter()
        .map(|w| format!("'{}'", w.event_name))
        .collect();
    format!(
        "SELECT count(*) FROM ops.apply_events('batches-test', ARRAY[{}]::uuid[], ARRAY[{}]::text[]);",
        ids.join(","),
        names.join(",")
    )
}

/// One commit batch over `claims`, in their order, in its own transaction, as SQL text.
fn commit_batch_sql(claims: &[Claim]) -> String {
    let list = |f: &dyn Fn(&Claim) -> String| claims.iter().map(f).collect::<Vec<_>>().join(",");
    format!(
        "BEGIN; SELECT ops.commit_frames(ARRAY[{}]::uuid[], ARRAY[{}]::uuid[], ARRAY[{}]::bigint[], \
         ARRAY[{}]::uuid[], ARRAY[{}]::uuid[], ARRAY[{}]::text[], ARRAY[{}]::text[]); COMMIT;",
        list(&|c| format!("'{}'", c.firm_id)),
        list(&|c| format!("'{}'", c.matter_id)),
        list(&|c| c.token.to_string()),
        list(&|c| format!("'{}'", c.run_id)),
        list(&|_| format!("'{}'", Uuid::new_v4())),
        list(&|_| format!("'{NODE}'")),
        list(&|c| format!("'{{\"token\": {}}}'", c.token)),
    )
}

/// Each matter's brief request, as the relay would put it on the wire, in the order given.
async fn requests(
    c: &mut diesel_async::AsyncPgConnection,
    firm: Uuid,
    matters: impl Iterator<Item = Uuid>,
) -> Vec<briefrail::ledger::inbox::EventEnvelope> {
    use briefrail::ledger::outbox;
    let mut envelopes = Vec::new();
    for m in matters {
        let event = facts::request_brief(c, firm, m).await.unwrap();
        envelopes.push(outbox::event(c, event).await.unwrap().unwrap().envelope());
    }
    envelopes
}

#[derive(diesel::QueryableByName)]
struct Waiting {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// The two batches below, made to overlap every time: a trigger transaction applies the event
/// of the lowest matter and holds its job row while a commit batch over all of them (given in
/// descending order) starts; once the commit waits for a row lock, the trigger applies the
/// others in ascending order and commits. A commit batch that locks in key order waits at the
/// lowest row holding none of the others, so the trigger finishes first and every frame lands
/// after it; one that took any row out of that order would hold a row the trigger needs next,
/// and Postgres would abort one of them as a deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_batch_behind_a_trigger_holding_the_lowest_row_waits_without_a_deadlock() {
    let db = TestDb::new(3).await.unwrap();
    let firm = Uuid::new_v4();
    let ids = descending(8);
    let mut c = db.pool.get().await.unwrap();
    let claims = claimed(&mut c, firm, &ids).await;
    let envelopes = requests(&mut c, firm, ids.iter().rev().copied()).await;
    let apply = apply_sql;
    let mut trigger = db.connection().await.unwrap();
    trigger
        .batch_execute(&format!("BEGIN; {}", apply(&envelopes[..1])))
        .await
        .expect("the lowest matter's event applied");
    let batch = commit_batch_sql(&claims);
    let commits = {
        let pool = db.pool.clone();
        tokio::spawn(async move {
            let mut c = pool.get().await.expect("conn");
            c.batch_execute(&batch).await.map_err(|e| e.to_string())
        })
    };
    let commits = waits_for_a_row_lock(&mut c, "ops.commit_frames(", commits).await;
    let rest = trigger
        .batch_execute(&format!("{} COMMIT;", apply(&envelopes[1..])))
        .await
        .map_err(|e| e.to_string());
    if rest.is_err() {
        trigger.batch_execute("ROLLBACK").await.unwrap();
    }
    let commit = commits.await.unwrap();
    assert!(
        rest.is_ok() && commit.is_ok(),
        "trigger: {rest:?}; commit batch: {commit:?}"
    );
    for claim in &claims {
        assert!(
            reads::frame_meta(&mut c, firm, claim.matter_id, claim.token)
                .await
                .unwrap()
                .is_some(),
            "the batch's frame for {} landed",
            claim.matter_id
        );
    }
}

/// Many rounds of a commit batch and a trigger batch over the same claimed matters, the commits
/// given in descending and the events in ascending order, released together on two
/// connections: `ops.commit_frames` and `ops.apply_events` lock job rows in one global order, so
/// one waits for the other and neither is chosen as a deadlock victim. Every frame lands and
/// every event is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_batch_and_a_trigger_batch_in_opposite_orders_never_deadlock() {
    use briefrail::ledger::inbox::{self, Applied, BRIEF_RAIL};
    let db = TestDb::new(4).await.unwrap();
    let firm = Uuid::new_v4();
    let mut failures = Vec::new();
    for _ in 0..20 {
        let ids = descending(24);
        let mut c = db.pool.get().await.unwrap();
        let claims = claimed(&mut c, firm, &ids).await;
        let envelopes = requests(&mut c, firm, ids.iter().rev().copied()).await;
        drop(c);
        let batch = commit_batch_sql(&claims);
        let barrier = Arc::new(Barrier::new(2));
        let commits = {
            let (pool, barrier) = (db.pool.clone(), barrier.clone());
            tokio::spawn(async move {
                let mut c = pool.get().await.expect("conn");
                barrier.wait().await;
                c.batch_execute(&batch).await.map_err(|e| e.to_string())
            })
        };
        let trigger = {
            let (pool, barrier) = (db.pool.clone(), barrier.clone());
            tokio::spawn(async move {
                let mut c = pool.get().await.expect("conn");
                barrier.wait().await;
                inbox::apply_batch(&mut c, BRIEF_RAIL, &envelopes)
                    .await
                    .map_err(|e| e.to_string())
            })
        };
        if let Err(e) = commits.await.unwrap() {
            failures.push(format!("commit batch: {e}"));
        }
        match trigger.await.unwrap() {
            Ok(applied) => assert!(
                applied
                    .iter()
                    .all(|a| matches!(a, Applied::Demand { .. } | Applied::Covered)),
                "every event is applied: {applied:?}"
            ),
            Err(e) => failures.push(format!("trigger batch: {e}")),
        }
        if !failures.is_empty() {
            break;
        }
        let mut c = db.pool.get().await.unwrap();
        for claim in &claims {
            assert!(
                reads::frame_meta(&mut c, firm, claim.matter_id, claim.token)
                    .await
                    .unwrap()
                    .is_some(),
                "the batch's frame for {} landed",
                claim.matter_id
            );
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// A claim batch whose answer cannot be used (planted here: after its claims committed, the
/// database answers one token too many) is settled from the ledger by the run ids the node
/// chose for its members: each member whose claim holds its row is answered with that claim,
/// so none waits for its own lease to run out.
#[tokio::test]
async fn a_claim_batch_whose_answer_is_unusable_is_settled_by_its_run_ids() {
    local(async {
        let db = TestDb::new(3).await.unwrap();
        let mut c = db.pool.get().await.unwrap();
        c.batch_execute("CREATE TABLE public.planted_calls (members integer NOT NULL)")
            .await
            .unwrap();
        c.batch_execute(&common::mutations::patched(
            "claim_batch",
            "one answer per member",
            // A batch of one is the single claim (ops.claim calls ops.claim_batch): it goes on
            // as it was; a batch of more answers one token too many.
            &[(
                "RETURN coalesce(v_tokens, '{}');",
                "IF cardinality(v_tokens) > 1 THEN\n        INSERT INTO public.planted_calls VALUES (cardinality(v_tokens));\n        RETURN v_tokens || NULL::bigint;\n    END IF;\n    RETURN coalesce(v_tokens, '{}');",
            )],
        ))
        .await
        .unwrap();
        let firm = Uuid::new_v4();
        let ids = descending(4);
        for m in &ids {
            facts::create_matter(&mut c, firm, *m, "Lost v. Answer")
                .await
                .unwrap();
        }
        // One lane: the first claim runs alone at once, the other three wait and go together.
        let queue = t::claims_in_batches(db.pool.clone(), 1, 64);
        let answers = futures_util::future::join_all(ids.iter().map(|m| queue.ask(req(firm, *m)))).await;
        let planted: Vec<i32> = {
            use diesel_async::RunQueryDsl;
            diesel::sql_query("SELECT members FROM public.planted_calls")
                .load::<Members>(&mut c)
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.members)
                .collect()
        };
        assert_eq!(planted, vec![3], "the three waiting claims went as one batch");
        for (m, answer) in ids.iter().zip(&answers) {
            let claim = answer
                .as_ref()
                .expect("every member answered")
                .expect("won: the batch's claim holds the row");
            let job = reads::job(&mut c, firm, *m).await.unwrap().unwrap();
            assert_eq!(job.run_status, RunStatus::Running);
            assert_eq!(job.claimed_generation, claim.token);
            assert_eq!(job.claimed_run_id, Some(claim.run_id));
            assert_eq!((claim.firm_id, claim.matter_id), (firm, *m));
        }
    })
    .await;
}

#[derive(diesel::QueryableByName)]
struct Members {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    members: i32,
}

/// A claim in a batch never waits for a fuller batch: at idle, the claim queue answers at once.
#[tokio::test]
async fn a_lone_claim_through_the_queue_is_answered_at_once() {
    local(async {
        let db = TestDb::new(2).await.unwrap();
        let mut c = db.pool.get().await.unwrap();
        let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
        facts::create_matter(&mut c, firm, matter, "Lone v. Queue")
            .await
            .unwrap();
        let queue = t::claims_in_batches(db.pool.clone(), 2, 64);
        let claim: Option<Claim> =
            tokio::time::timeout(Duration::from_secs(5), queue.ask(req(firm, matter)))
                .await
                .expect("answered")
                .expect("a batch answered");
        assert_eq!(claim.map(|c| c.token), Some(1));
    })
    .await;
}

/// The matters of one firm, each in a state a claim must judge: unserved, held by a live build,
/// held past its lease, served, served and asked again, archived with a demand, retries spent,
/// failed once. The same states, in the same order, for every firm this is called for.
async fn every_claim_state(
    pool: &briefrail::db::Pool,
    c: &mut diesel_async::AsyncPgConnection,
    firm: Uuid,
) -> Vec<Uuid> {
    let ids: Vec<Uuid> = (0..8).map(|_| Uuid::new_v4()).collect();
    for m in &ids {
        facts::create_matter(c, firm, *m, "Form v. Form")
            .await
            .unwrap();
    }
    let policy = t::RetryPolicy {
        max_attempts: 5,
        backoff_base: Duration::from_secs(1),
        backoff_max: Duration::from_secs(60),
    };
    let claim = async |c: &mut diesel_async::AsyncPgConnection, m: Uuid, lease: u64| {
        let r = ClaimRequest {
            lease: Duration::from_secs(lease),
            ..req(firm, m)
        };
        t::claim(c, &r).await.unwrap().expect("claimed")
    };
    t::demand(c, firm, ids[0]).await.unwrap();
    claim(c, ids[1], 600).await;
    claim(c, ids[2], 1).await;
    for m in &ids[3..5] {
        let served = claim(c, *m, 600).await;
        t::commit(pool, &served, NODE, &Frame::new(json!({})))
            .await
            .unwrap();
    }
    t::demand(c, firm, ids[4]).await.unwrap();
    t::demand(c, firm, ids[5]).await.unwrap();
    facts::archive_matter(c, firm, ids[5]).await.unwrap();
    let exhausted = claim(c, ids[6], 600).await;
    t::fail(c, &exhausted, "refused", true, &policy)
        .await
        .unwrap();
    let once = claim(c, ids[7], 600).await;
    t::fail(c, &once, "timed out", false, &policy)
        .await
        .unwrap();
    ids
}

/// What a claim left of a matter, without the ids and times that differ between ledgers: the
/// answer's token, the job row's counters and status (and whether it names the answer's run),
/// and the outcome of each of its runs, by token.
async fn claim_effect(
    c: &mut diesel_async::AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
    answer: Option<Claim>,
) -> String {
    let j = reads::job(c, firm, matter)
        .await
        .unwrap()
        .expect("a job row");
    let runs: Vec<(i64, RunOutcome)> = reads::runs(c, firm, matter, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.token, r.outcome))
        .collect();
    format!(
        "answer {:?}; {:?} rebuild {} requested {} claimed {} landed {} failures {} lease {:?} names the answer's run {}; runs {runs:?}",
        answer.map(|a| a.token),
        j.run_status,
        j.rebuild_needed,
        j.requested_generation,
        j.claimed_generation,
        j.landed_generation,
        j.consecutive_failures,
        j.lease_seconds,
        answer.is_some_and(|a| j.claimed_run_id == Some(a.run_id)),
    )
}

/// The claim batch has two forms of one compare-and-swap (`ops.claim_batch`): rows it finds
/// all existing are locked and updated by position, a batch with a row missing runs the upsert.
/// For each kind of claim and each state a claim judges, three copies of the same matters are
/// claimed alone, in a batch whose rows all exist, and in the same batch with one never-demanded
/// matter added (the upsert): every member's answer, job row and runs are what its claim alone
/// made of it. A planted bug in either form alone fails this test.
#[tokio::test]
async fn both_forms_of_a_claim_batch_write_what_each_claim_alone_would() {
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    for kind in [ClaimKind::NewDemand, ClaimKind::ServeRecorded] {
        let (alone, rows, upsert) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let mut ids = Vec::new();
        for firm in [alone, rows, upsert] {
            ids.push(every_claim_state(&db.pool, &mut c, firm).await);
        }
        // Every claim held for a second is past its lease now (the live ones hold 600 s).
        briefrail::testing::advance_ledger_clock(&mut c, Duration::from_secs(5))
            .await
            .unwrap();
        let members = |firm: Uuid, ids: &[Uuid]| -> Vec<ClaimRequest> {
            ids.iter()
                .map(|m| ClaimRequest {
                    kind,
                    ..req(firm, *m)
                })
                .collect()
        };
        let mut effects = Vec::new();
        let mut answers_alone = Vec::new();
        for r in members(alone, &ids[0]) {
            answers_alone.push(t::claim(&mut c, &r).await.unwrap());
        }
        let answers_rows = t::claim_batch(&mut c, &members(rows, &ids[1]))
            .await
            .unwrap();
        let fresh = Uuid::new_v4();
        facts::create_matter(&mut c, upsert, fresh, "Never v. Asked")
            .await
            .unwrap();
        let mut with_fresh = members(upsert, &ids[2]);
        with_fresh.push(req(upsert, fresh));
        let answers_upsert = t::claim_batch(&mut c, &with_fresh).await.unwrap();
        assert_eq!(
            answers_upsert.last().copied().flatten().map(|a| a.token),
            Some(1),
            "the never-demanded matter is claimed by the upsert"
        );
        for (firm, ids, answers) in [
            (alone, &ids[0], &answers_alone),
            (rows, &ids[1], &answers_rows),
            (upsert, &ids[2], &answers_upsert),
        ] {
            let mut of_firm = Vec::new();
            for (m, a) in ids.iter().zip(answers.iter()) {
                of_firm.push(claim_effect(&mut c, firm, *m, *a).await);
            }
            effects.push(of_firm);
        }
        for (state, ((alone, rows), upsert)) in effects[0]
            .iter()
            .zip(&effects[1])
            .zip(&effects[2])
            .enumerate()
        {
            assert_eq!(
                (rows, upsert),
                (alone, alone),
                "{kind:?}, state {state}: the batch forms (rows found, upsert) against alone"
            );
        }
        assert!(
            answers_alone.iter().any(|a| a.is_some()) && answers_alone.iter().any(|a| a.is_none()),
            "{kind:?}: some states are claimed and some are not: {answers_alone:?}"
        );
    }
}

/// The mutation controls (`tests/common/mutations.rs`) whose killers are in this binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_a_guarantee_test() {
    common::mutations::assert_caught(module_path!()).await;
}

/// An embedder spawns commits on a multi-threaded runtime: a [`Commit`]'s attempt, and both
/// queues, may move between threads (this fails to compile otherwise).
#[test]
fn a_commit_and_the_queues_may_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    #[allow(dead_code)]
    fn attempt_is_send(c: &mut Commit, pool: &briefrail::db::Pool, frame: &Frame) {
        send(&c.attempt(pool, frame));
    }
    send_sync::<briefrail::ledger::CommitQueue>();
    send_sync::<t::ClaimQueue>();
    send_sync::<Commit>();
}
