//! Trust only the ledger: nothing on the wire, nothing stored from another cluster, no other
//! node's settings and no process clock decides whether a fact is served. Each test reproduces
//! a way the rail used to drop a fact (or stall with its cause lost) while `status` said all
//! was well, against a real Postgres (and, where the cluster itself is the point, a private
//! second one).

use crate::common;

use briefrail::ledger::{ClaimKind, RunOutcome, RunStatus};
use std::sync::Arc;
use std::time::Duration;

use briefrail::ledger::inbox::{self, Applied, BRIEF_RAIL};
use briefrail::ledger::transitions::{self as t, ClaimRequest, Frame, Landed, RetryPolicy};
use briefrail::ledger::{Claim, facts, outbox, reads};
use briefrail::testing::TestDb;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use serde_json::json;
use uuid::Uuid;

const NODE: &str = "trust-node";

fn nudged(firm: Uuid, matter: Uuid, lease: Duration) -> ClaimRequest {
    ClaimRequest {
        firm_id: firm,
        matter_id: matter,
        lease,
        node_id: NODE.into(),
        trace_id: None,
        event_ids: vec![],
        kind: ClaimKind::ServeRecorded,
        max_attempts: 5,
    }
}

/// The newest outbox row of a matter.
async fn last_event(
    c: &mut AsyncPgConnection,
    matter: Uuid,
) -> briefrail::ledger::models::OutboxRow {
    use briefrail::schema::ops::domain_event_outbox::dsl as o;
    use diesel::{ExpressionMethods, QueryDsl, SelectableHelper};
    o::domain_event_outbox
        .filter(o::matter_id.eq(matter))
        .order(o::seq.desc())
        .select(briefrail::ledger::models::OutboxRow::as_select())
        .first(c)
        .await
        .unwrap()
}

/// Creates a matter and serves it once: its row is idle with a landed frame and the snapshot
/// of the claim that built it.
async fn served_matter(
    c: &mut AsyncPgConnection,
    pool: &briefrail::db::Pool,
    firm: Uuid,
    matter: Uuid,
) {
    facts::create_matter(c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    let created = last_event(c, matter).await;
    let applied = inbox::apply(c, BRIEF_RAIL, &created.envelope())
        .await
        .unwrap();
    assert!(matches!(applied, Applied::Demand { .. }), "{applied:?}");
    let claim = t::claim(c, &nudged(firm, matter, Duration::from_secs(600)))
        .await
        .unwrap()
        .expect("the matter is free");
    let landed = t::commit(
        pool,
        &claim,
        NODE,
        &Frame::new(json!({"token": claim.token})),
    )
    .await
    .unwrap();
    assert_eq!(landed, Landed::Idle);
}

/// A live matter with one recorded demand, claimed (as a nudge claims) with `lease`.
async fn demanded_claim(
    c: &mut AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
    lease: Duration,
) -> Claim {
    facts::create_matter(c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    t::demand(c, firm, matter).await.unwrap();
    t::claim(c, &nudged(firm, matter, lease))
        .await
        .unwrap()
        .expect("the matter is free and unserved")
}

async fn add_document_event(
    c: &mut AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
) -> briefrail::ledger::models::OutboxRow {
    common::add_document(c, firm, matter, "Exhibit 7").await;
    last_event(c, matter).await
}

/// Defect 1: a nudge with a real event id and a forged transaction id (or firm, or matter)
/// used to be judged covered by the last claim's snapshot; the real nudge then deduped and the
/// document never reached the Brief.
#[tokio::test]
async fn a_forged_nudge_changes_nothing_and_the_real_fact_still_reaches_the_brief() {
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter, other) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    served_matter(&mut c, &db.pool, firm, matter).await;
    served_matter(&mut c, &db.pool, firm, other).await;

    for forge in [
        "xact_id",
        "matter_id",
        "firm_id",
        "event_name",
        "occurred_at",
    ] {
        let real = add_document_event(&mut c, firm, matter).await;
        let mut forged = real.envelope();
        match forge {
            "xact_id" => forged.xact_id = Some(1),
            "matter_id" => forged.matter_id = other,
            "firm_id" => forged.firm_id = Uuid::new_v4(),
            "occurred_at" => forged.occurred_at += chrono::Duration::microseconds(1),
            _ => forged.event_name = "brief.requested".into(),
        }
        let before_other = reads::job(&mut c, firm, other).await.unwrap().unwrap();
        let refused = inbox::apply(&mut c, BRIEF_RAIL, &forged).await;
        assert!(
            !matches!(
                refused,
                Ok(Applied::Demand { .. } | Applied::Covered | Applied::Duplicate(_))
            ),
            "forged {forge}: the forgery was believed: {refused:?}"
        );
        let after_other = reads::job(&mut c, firm, other).await.unwrap().unwrap();
        assert_eq!(
            before_other, after_other,
            "forged {forge}: another matter's row changed"
        );

        let genuine = inbox::apply(&mut c, BRIEF_RAIL, &real.envelope())
            .await
            .unwrap();
        assert!(
            matches!(genuine, Applied::Demand { .. }),
            "forged {forge}: the real nudge after the forgery was {genuine:?}"
        );
        let job = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
        assert!(
            job.unserved(),
            "forged {forge}: the document is owed to the Brief: {job:?}"
        );
        // Serve it, so the next round starts from a landed row again.
        let claim = t::claim(&mut c, &nudged(firm, matter, Duration::from_secs(600)))
            .await
            .unwrap()
            .expect("claimable");
        t::commit(&db.pool, &claim, NODE, &Frame::new(json!({})))
            .await
            .unwrap();
    }

    // An id the ledger never recorded is refused too, and leaves no inbox row.
    let mut unknown = last_event(&mut c, matter).await.envelope();
    unknown.event_id = Uuid::new_v4();
    let r = inbox::apply(&mut c, BRIEF_RAIL, &unknown).await;
    assert!(
        !matches!(
            r,
            Ok(Applied::Demand { .. } | Applied::Covered | Applied::Duplicate(_))
        ),
        "an unknown event id was believed: {r:?}"
    );
    assert!(
        !inbox::consumed(&mut c, BRIEF_RAIL, unknown.event_id)
            .await
            .unwrap()
    );
}

/// Defect 3: a restore (or a failover to an asynchronous replica) loses a claim's
/// transaction, so the row hands the same token number out again. The old holder must still
/// be fenced: the claim's identity is the token and its run id.
#[tokio::test]
async fn a_token_number_handed_out_twice_still_fences_the_old_holder() {
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    served_matter(&mut c, &db.pool, firm, matter).await;
    t::demand(&mut c, firm, matter).await.unwrap();
    let before = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    let zombie = t::claim(&mut c, &nudged(firm, matter, Duration::from_secs(600)))
        .await
        .unwrap()
        .unwrap();
    // The claim's transaction is lost: the row and the runs are as they were before it.
    c.batch_execute(&format!(
        "UPDATE ops.matter_frame_jobs SET run_status = '{}', requested_generation = {},
                claimed_generation = {}, claimed_at = ops.now() - interval '1 hour'
          WHERE firm_id = '{firm}' AND matter_id = '{matter}';
         DELETE FROM ops.matter_frame_runs WHERE run_id = '{}';",
        before.run_status, before.requested_generation, before.claimed_generation, zombie.run_id
    ))
    .await
    .unwrap();
    let successor = t::claim(&mut c, &nudged(firm, matter, Duration::from_secs(600)))
        .await
        .unwrap()
        .expect("claimable again");
    assert_eq!(
        successor.token, zombie.token,
        "the same number is handed out twice"
    );
    assert_ne!(successor.run_id, zombie.run_id);

    let policy = RetryPolicy {
        max_attempts: 5,
        backoff_base: Duration::from_secs(1),
        backoff_max: Duration::from_secs(10),
    };
    let hb = t::heartbeat(&mut c, &zombie).await;
    assert!(
        matches!(hb, Err(briefrail::Error::Fenced { .. })),
        "heartbeat: {hb:?}"
    );
    let committed = t::commit(
        &db.pool,
        &zombie,
        NODE,
        &Frame::new(json!({"zombie": true})),
    )
    .await;
    assert!(
        matches!(committed, Err(briefrail::Error::Fenced { .. })),
        "the old holder's commit landed: {committed:?}"
    );
    let failed = t::fail(&mut c, &zombie, "zombie", false, &policy).await;
    assert!(
        matches!(failed, Err(briefrail::Error::Fenced { .. })),
        "fail: {failed:?}"
    );
    let released = t::release(&mut c, &zombie, "zombie").await;
    assert!(
        matches!(released, Err(briefrail::Error::Fenced { .. })),
        "release: {released:?}"
    );
    // The successor is untouched and lands.
    t::heartbeat(&mut c, &successor).await.unwrap();
    t::commit(
        &db.pool,
        &successor,
        NODE,
        &Frame::new(json!({"successor": true})),
    )
    .await
    .unwrap();
    let frame = reads::latest_frame(&mut c, firm, matter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(frame.run_id, successor.run_id);
    assert_eq!(frame.body, json!({"successor": true}));
}

/// A builder whose frame the database refuses the same way every time.
struct NulFrame;
impl briefrail::builders::Builder for NulFrame {
    fn build<'a>(
        &'a self,
        _: &'a briefrail::builders::BuildContext,
    ) -> futures_util::future::LocalBoxFuture<'a, briefrail::Result<Frame>> {
        Box::pin(async { Ok(Frame::new(json!({"summary": "bad \u{0000} char"}))) })
    }
}

/// Defect 4: a frame jsonb refuses (a `\u0000`) was treated as "outcome unknown", retried,
/// then left to run out its lease with no error on the run.
#[tokio::test]
async fn a_frame_the_database_refuses_fails_the_claim_at_once_with_its_error() {
    use briefrail::actors::build_runner::{BuildEnv, BuildOutcome, run_build};
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let claim = demanded_claim(&mut c, firm, matter, Duration::from_secs(600)).await;
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let capacity = briefrail::actors::build_runner::Capacity::new(1, 1);
    let admission = briefrail::actors::admission::Admission::new(
        capacity.clone(),
        db.pool.clone(),
        Duration::from_secs(300),
        NODE.into(),
        Duration::from_secs(600),
    );
    let env = BuildEnv {
        pool: db.pool.clone(),
        builder: Arc::new(NulFrame),
        metrics: Arc::new(briefrail::metrics::Metrics::default()),
        node_id: NODE.into(),
        heartbeat: Duration::from_secs(60),
        timeout: Duration::from_secs(60),
        retry: RetryPolicy {
            max_attempts: 5,
            backoff_base: Duration::from_secs(2),
            backoff_max: Duration::from_secs(300),
        },
        commits: None,
        records: None,
        capacity,
        admission,
        cancel,
    };
    let outcome = run_build(&env, claim, None, vec![]).await;
    assert!(matches!(outcome, BuildOutcome::Failed(_)), "{outcome:?}");
    let run = reads::run(&mut c, claim.run_id).await.unwrap().unwrap();
    assert_eq!(run.outcome, RunOutcome::Failed);
    let error = run.error.unwrap_or_default();
    assert!(
        error.contains("22P05"),
        "the run names the SQLSTATE: {error}"
    );
    let job = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    assert_eq!(job.run_status, RunStatus::Failed);
    assert!(
        job.consecutive_failures >= 1 && job.not_before.is_some(),
        "{job:?}"
    );
}

/// Defect 5: the lease is the claimer's, written on the row; another node's shorter
/// `lease.seconds` neither sweeps nor re-claims a healthy build.
#[tokio::test]
async fn a_shorter_lease_on_another_node_does_not_expire_a_healthy_build() {
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    // The healthy build's lease is an hour; the other node's is 30 s.
    let short_lease = Duration::from_secs(30);
    let long = demanded_claim(&mut c, firm, matter, Duration::from_secs(3600)).await;
    // The short-lease node looks after more than its own lease has passed (ledger clock).
    db.advance_ledger_clock(short_lease * 2).await.unwrap();
    let swept = t::sweep(&mut c, 100).await.unwrap();
    assert!(
        swept.is_empty(),
        "the other node's lease expired a healthy build: {swept:?}"
    );
    t::demand(&mut c, firm, matter).await.unwrap();
    let stolen = t::claim(&mut c, &nudged(firm, matter, short_lease))
        .await
        .unwrap();
    assert!(
        stolen.is_none(),
        "the other node's lease let it take the matter: {stolen:?}"
    );
    t::commit(&db.pool, &long, NODE, &Frame::new(json!({})))
        .await
        .unwrap();

    // The other way round: a claim with a 30 s lease is swept once its own deadline passed,
    // whatever the sweeping node's setting; its renewals keep their own length.
    let short_matter = Uuid::new_v4();
    let short = demanded_claim(&mut c, firm, short_matter, short_lease).await;
    db.advance_ledger_clock(Duration::from_secs(20))
        .await
        .unwrap();
    t::heartbeat(&mut c, &short).await.unwrap();
    let row = reads::job(&mut c, firm, short_matter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.lease_seconds, Some(30.0));
    // 20 s after the heartbeat its renewed deadline is still ahead (the original one is past).
    db.advance_ledger_clock(Duration::from_secs(20))
        .await
        .unwrap();
    assert!(
        t::sweep(&mut c, 100).await.unwrap().is_empty(),
        "swept before its renewed deadline"
    );
    db.advance_ledger_clock(Duration::from_secs(11))
        .await
        .unwrap();
    let swept = t::sweep(&mut c, 100).await.unwrap();
    assert!(
        swept.iter().any(|(m, _)| m.matter_id == short_matter),
        "{swept:?}"
    );
}

/// Defect 9: a follow-up claimed in the commit starts its lease when the commit ends, not
/// when its transaction began (slow extra writes used to shorten it).
#[tokio::test]
async fn a_follow_up_lease_starts_when_the_commit_ends() {
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let claim = demanded_claim(&mut c, firm, matter, Duration::from_secs(600)).await;
    t::demand(&mut c, firm, matter).await.unwrap(); // mid-build: a follow-up is due
    // The application's writes take 1.5 s: the ledger clock moves on inside the commit's
    // transaction (no sleep; ops.clock() reads the advance at once, in this transaction).
    let slow: t::ExtraWrites = Box::new(|conn, _| {
        Box::pin(async move {
            briefrail::testing::advance_ledger_clock(conn, Duration::from_millis(1500)).await
        })
    });
    let landed = t::commit(
        &db.pool,
        &claim,
        NODE,
        &Frame::new(json!({})).with_extra(slow),
    )
    .await
    .unwrap();
    assert!(matches!(landed, Landed::FollowUp(_)), "{landed:?}");
    #[derive(diesel::QueryableByName)]
    struct Age {
        #[diesel(sql_type = diesel::sql_types::Double)]
        age: f64,
    }
    let age: Age = diesel::sql_query(format!(
        "SELECT extract(epoch FROM ops.now() - claimed_at)::float8 AS age FROM ops.matter_frame_jobs
          WHERE matter_id = '{matter}'"
    ))
    .get_result(&mut c)
    .await
    .unwrap();
    assert!(
        age.age < 0.5,
        "the follow-up's lease began {:.2}s before the commit ended",
        age.age
    );
}

/// Defect 6 (the ledger's half): an archived matter is not rebuilt, whoever nudges it.
#[tokio::test]
async fn an_archived_matter_is_neither_reconciled_nor_claimed() {
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    served_matter(&mut c, &db.pool, firm, matter).await;
    add_document_event(&mut c, firm, matter).await;
    t::demand(&mut c, firm, matter).await.unwrap();
    facts::archive_matter(&mut c, firm, matter).await.unwrap();
    let unserved = t::unserved(&mut c, 5, 100, Duration::ZERO).await.unwrap();
    assert!(
        unserved.iter().all(|m| m.matter_id != matter),
        "reconcile nudges an archived matter"
    );
    let claimed = t::claim(&mut c, &nudged(firm, matter, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(
        claimed.is_none(),
        "an archived matter was claimed: {claimed:?}"
    );
}

/// The ids of the events `requeue_unconsumed` requeues under `policy` (at most 100).
async fn requeued(c: &mut AsyncPgConnection, policy: &outbox::Republish) -> Vec<Uuid> {
    outbox::requeue_unconsumed(c, BRIEF_RAIL, policy, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.event_id)
        .collect()
}

/// Defect 8: failed publishes and reconcile's republications are separate counters, and
/// republications of a slow consumer's event are spaced out exponentially.
#[tokio::test]
async fn republication_is_counted_apart_from_failed_publishes_and_spaced_out() {
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    let ev = last_event(&mut c, matter).await;
    // Unroutable for a long while: many failed publishes. Then published, and lost.
    for _ in 0..60 {
        outbox::mark_failed(&mut c, &[ev.event_id], "returned unroutable")
            .await
            .unwrap();
    }
    outbox::mark_published(&mut c, &[ev.event_id])
        .await
        .unwrap();
    let backdate = |secs: u32| {
        format!(
            "UPDATE ops.domain_event_outbox SET published_at = ops.now() - interval '{secs} seconds'
              WHERE event_id = '{}'",
            ev.event_id
        )
    };
    c.batch_execute(&backdate(90)).await.unwrap();
    let policy = outbox::Republish {
        after: Duration::from_secs(60),
        window: Duration::from_secs(7 * 86400),
        cap: outbox::REPUBLISH_CAP,
    };
    let first = requeued(&mut c, &policy).await;
    assert_eq!(
        first,
        vec![ev.event_id],
        "a lost event is republished after failed publishes"
    );
    // Published again and still not consumed (a slow consumer): the next republication waits
    // twice as long.
    outbox::mark_published(&mut c, &[ev.event_id])
        .await
        .unwrap();
    c.batch_execute(&backdate(90)).await.unwrap();
    let second = requeued(&mut c, &policy).await;
    assert!(
        second.is_empty(),
        "republished again after only one interval"
    );
    c.batch_execute(&backdate(130)).await.unwrap();
    let third = requeued(&mut c, &policy).await;
    assert_eq!(third, vec![ev.event_id]);

    // At the cap it is left alone, and it is an alert, not silence.
    assert_eq!(reads::gauges(&mut c).await.unwrap().stranded_events, 0);
    outbox::mark_published(&mut c, &[ev.event_id])
        .await
        .unwrap();
    c.batch_execute(&format!(
        "UPDATE ops.domain_event_outbox SET republish_count = {}, published_at = ops.now() - interval '30 days'
          WHERE event_id = '{}'",
        outbox::REPUBLISH_CAP,
        ev.event_id
    ))
    .await
    .unwrap();
    let capped = outbox::requeue_unconsumed(
        &mut c,
        BRIEF_RAIL,
        &outbox::Republish {
            window: Duration::from_secs(365 * 86400),
            ..policy
        },
        100,
    )
    .await
    .unwrap();
    assert!(capped.is_empty(), "republished past the cap: {capped:?}");
    assert_eq!(reads::gauges(&mut c).await.unwrap().stranded_events, 1);
    // The operator fixes the consumer and republishes: the alert clears, the fact is served.
    assert_eq!(
        outbox::republish_stranded(&mut c, BRIEF_RAIL, outbox::REPUBLISH_CAP)
            .await
            .unwrap(),
        1
    );
    assert_eq!(reads::gauges(&mut c).await.unwrap().stranded_events, 0);
    let again = outbox::lock_unpublished(&mut c, 10).await.unwrap();
    assert!(
        again
            .iter()
            .any(|r| r.event_id == ev.event_id && r.republish_count == 0)
    );
    let applied = inbox::apply(&mut c, BRIEF_RAIL, &ev.envelope())
        .await
        .unwrap();
    assert!(matches!(applied, Applied::Demand { .. }), "{applied:?}");
}

/// With a long `reconcile.after_seconds` the doubling waits would outgrow the reconcile window
/// and an unconsumed event would age out of it, unreported, before reaching the cap. The wait
/// is capped so every republication fits in the window.
#[tokio::test]
async fn a_long_reconcile_interval_still_reaches_the_cap_inside_the_window() {
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    let ev = last_event(&mut c, matter).await;
    let policy = outbox::Republish {
        after: Duration::from_secs(3600),
        window: Duration::from_secs(7 * 86400),
        cap: outbox::REPUBLISH_CAP,
    };
    let longest = policy.longest_wait();
    assert!(longest * (policy.cap as u32) < policy.window);
    // Eight republications so far: the doubled wait (3600 s × 2^8, ten days) is past the window.
    outbox::mark_published(&mut c, &[ev.event_id])
        .await
        .unwrap();
    c.batch_execute(&format!(
        "UPDATE ops.domain_event_outbox SET republish_count = 8,
                published_at = ops.now() - make_interval(secs => {})
          WHERE event_id = '{}'",
        longest.as_secs() + 5,
        ev.event_id
    ))
    .await
    .unwrap();
    let requeued = outbox::requeue_unconsumed(&mut c, BRIEF_RAIL, &policy, 100)
        .await
        .unwrap();
    assert_eq!(
        requeued
            .iter()
            .map(|r| (r.event_id, r.republish_count))
            .collect::<Vec<_>>(),
        vec![(ev.event_id, 9)]
    );
}

/// Defect 2: after pg_dump/pg_restore into a new cluster, the rows hold snapshots of the old
/// cluster's transaction ids. They must not judge the new cluster's facts.
#[tokio::test]
async fn after_a_logical_move_new_facts_still_reach_the_brief() {
    use common::cluster::PrivateCluster;
    let old = PrivateCluster::start("old");
    let old_url = old.url("briefrail");
    briefrail::db::admin::create_database_if_missing(&old_url)
        .await
        .unwrap();
    briefrail::db::migrate::run_pending(&old_url).await.unwrap();
    briefrail::testing::plant_mutation(&old_url).await.unwrap();
    let pool = briefrail::db::connect(&briefrail::db::PoolOptions::new(old_url.clone()).size(2))
        .await
        .unwrap();
    let mut c = pool.get().await.unwrap();
    // The old cluster has lived long: its transaction ids are far beyond a fresh cluster's.
    c.batch_execute(
        "CREATE PROCEDURE public.pg_temp_burn(n int) LANGUAGE plpgsql AS $$
         BEGIN FOR i IN 1..n LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$",
    )
    .await
    .unwrap();
    c.batch_execute("CALL pg_temp_burn(30000)").await.unwrap();
    c.batch_execute("DROP PROCEDURE pg_temp_burn(int)")
        .await
        .unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    served_matter(&mut c, &pool, firm, matter).await;
    drop(c);
    drop(pool);

    let dump = old.dir().join("ledger.dump");
    old.client(
        "pg_dump",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &old.port.to_string(),
            "-U",
            "postgres",
            "-Fc",
            "-f",
            dump.to_str().unwrap(),
            "briefrail",
        ],
    );
    let new = PrivateCluster::start("new");
    let new_url = new.url("briefrail");
    briefrail::db::admin::create_database_if_missing(&new_url)
        .await
        .unwrap();
    new.client(
        "pg_restore",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &new.port.to_string(),
            "-U",
            "postgres",
            "-d",
            "briefrail",
            "--no-owner",
            dump.to_str().unwrap(),
        ],
    );
    drop(old);

    let pool = briefrail::db::connect(&briefrail::db::PoolOptions::new(new_url.clone()).size(2))
        .await
        .unwrap();
    let mut c = pool.get().await.unwrap();
    let row = add_document_event(&mut c, firm, matter).await;
    let applied = inbox::apply(&mut c, BRIEF_RAIL, &row.envelope())
        .await
        .unwrap();
    assert!(
        matches!(applied, Applied::Demand { .. }),
        "a fact of the new cluster was judged by the old cluster's snapshot: {applied:?}"
    );
    let job = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    assert!(job.unserved(), "{job:?}");
    // And it is served on the new cluster.
    let claim: Claim = t::claim(&mut c, &nudged(firm, matter, Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("claimable on the new cluster");
    t::commit(&pool, &claim, NODE, &Frame::new(json!({})))
        .await
        .unwrap();
    assert!(
        !reads::job(&mut c, firm, matter)
            .await
            .unwrap()
            .unwrap()
            .unserved()
    );
}

/// The mutation controls (`tests/common/mutations.rs`): every deliberate bug in the live SQL
/// that names a killer in this binary makes each of those killers fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_a_guarantee_test() {
    common::mutations::assert_caught(module_path!()).await;
}

/// A fact the rail does not hear (an application's own `invoice.paid`, or `matter.archived`)
/// is consumed with no effect on a live matter's row: it costs no build.
#[tokio::test]
async fn a_fact_the_rail_does_not_hear_is_consumed_without_a_demand() {
    let db = TestDb::new(4).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    served_matter(&mut c, &db.pool, firm, matter).await;
    let before = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    {
        use diesel_async::AsyncConnection;
        let event = outbox::NewEvent::new(firm, matter, "invoice.paid").unwrap();
        c.transaction(async |tx| outbox::record_event(tx, &event).await)
            .await
            .unwrap();
    }
    let row = last_event(&mut c, matter).await;
    let applied = inbox::apply(&mut c, BRIEF_RAIL, &row.envelope())
        .await
        .unwrap();
    assert!(matches!(applied, Applied::NotHeard(_)), "{applied:?}");
    assert!(
        inbox::consumed(&mut c, BRIEF_RAIL, row.event_id)
            .await
            .unwrap()
    );
    assert_eq!(
        reads::job(&mut c, firm, matter).await.unwrap().unwrap(),
        before
    );
}
