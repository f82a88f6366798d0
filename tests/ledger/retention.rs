//! Retention (docs/protocol.md, "Retention"), against a real Postgres, one database per test:
//! what goes, what never goes, a late nudge for a removed event, the sweeper's passes, each
//! statement's index at a million rows, and planted bugs in the retention SQL caught. Ages are
//! reached by advancing the ledger clock, never by sleeping.

use crate::common::{self, count, ids};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use briefrail::builders::{BuildContext, Builder};
use briefrail::config::Settings;
use briefrail::ledger::inbox::{self, Applied, BRIEF_RAIL};
use briefrail::ledger::retention as r;
use briefrail::ledger::transitions::{self as t, ClaimRequest, Frame};
use briefrail::ledger::{Claim, MatterRef, facts, outbox, reads};
use briefrail::node::Node;
use briefrail::testing::TestDb;
use diesel::sql_types::{BigInt, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::json;
use uuid::Uuid;

const DAY: Duration = Duration::from_secs(86_400);

fn days(n: u64) -> Duration {
    DAY * n as u32
}

async fn outbox_ids(c: &mut AsyncPgConnection) -> BTreeSet<Uuid> {
    ids(c, "SELECT event_id AS id FROM ops.domain_event_outbox").await
}

/// Publishes `event` as the relay does (ledger clock).
async fn publish(c: &mut AsyncPgConnection, event: Uuid) {
    assert_eq!(outbox::mark_published(c, &[event]).await.unwrap(), 1);
}

/// Consumes `event` as the Brief rail's trigger does, and as a second consumer of the
/// embedding application.
async fn consume(c: &mut AsyncPgConnection, event: Uuid) {
    let row = outbox::event(c, event).await.unwrap().expect("the event");
    let applied = inbox::apply(c, BRIEF_RAIL, &row.envelope()).await.unwrap();
    assert!(
        !matches!(applied, Applied::Refused(_) | Applied::Duplicate(_)),
        "{applied:?}"
    );
    diesel::sql_query("INSERT INTO ops.consumed_events (consumer, event_id) VALUES ('app', $1)")
        .bind::<SqlUuid, _>(event)
        .execute(c)
        .await
        .unwrap();
}

async fn new_matter(c: &mut AsyncPgConnection, firm: Uuid) -> (Uuid, Uuid) {
    let matter = Uuid::new_v4();
    let event = facts::create_matter(c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    (matter, event)
}

#[tokio::test]
async fn only_published_consumed_events_past_the_age_go_and_they_take_their_inbox_rows() {
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let firm = Uuid::new_v4();
    // Recorded 31 days before the prune: consumed, unpublished, published but never consumed.
    let (_, gone) = new_matter(&mut c, firm).await;
    publish(&mut c, gone).await;
    consume(&mut c, gone).await;
    let (_, unpublished) = new_matter(&mut c, firm).await;
    // Consumed before the relay marked it published (a relay that died after the broker's
    // confirm): still unpublished, so it stays.
    let (_, consumed_unpublished) = new_matter(&mut c, firm).await;
    consume(&mut c, consumed_unpublished).await;
    let (_, unconsumed) = new_matter(&mut c, firm).await;
    publish(&mut c, unconsumed).await;
    db.advance_ledger_clock(days(31)).await.unwrap();
    // Recorded now, published and consumed: young.
    let (_, young) = new_matter(&mut c, firm).await;
    publish(&mut c, young).await;
    consume(&mut c, young).await;

    let removed = r::prune_events(&mut c, BRIEF_RAIL, days(30), 1000)
        .await
        .unwrap();
    assert_eq!(
        (removed.events, removed.inbox_rows),
        (1, 2),
        "one event (31 days old, published, consumed) and its inbox rows of both consumers"
    );
    assert_eq!(
        outbox_ids(&mut c).await,
        BTreeSet::from([unpublished, consumed_unpublished, unconsumed, young]),
        "unpublished events (consumed or not), one the rail never consumed and a young one stay"
    );
    let inbox_left = ids(&mut c, "SELECT event_id AS id FROM ops.consumed_events").await;
    assert!(
        !inbox_left.contains(&gone),
        "the removed event's inbox rows went with it"
    );
    assert!(inbox_left.contains(&young));
    // Even at a thousand days, an unpublished fact and an unconsumed one stay.
    db.advance_ledger_clock(days(1000)).await.unwrap();
    let later = r::prune_events(&mut c, BRIEF_RAIL, days(30), 1000)
        .await
        .unwrap();
    assert_eq!(later.events, 1, "only the young (now old) consumed event");
    assert_eq!(
        outbox_ids(&mut c).await,
        BTreeSet::from([unpublished, consumed_unpublished, unconsumed])
    );
}

#[tokio::test]
async fn a_prune_removes_at_most_its_batch_oldest_first() {
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let firm = Uuid::new_v4();
    let mut events = Vec::new();
    for _ in 0..5 {
        let (_, e) = new_matter(&mut c, firm).await;
        publish(&mut c, e).await;
        consume(&mut c, e).await;
        events.push(e);
        db.advance_ledger_clock(Duration::from_secs(1))
            .await
            .unwrap();
    }
    db.advance_ledger_clock(days(31)).await.unwrap();
    let first = r::prune_events(&mut c, BRIEF_RAIL, days(30), 2)
        .await
        .unwrap();
    assert_eq!(first.events, 2);
    assert_eq!(
        outbox_ids(&mut c).await,
        events[2..].iter().copied().collect(),
        "the two oldest went first"
    );
    let rest = r::prune_events(&mut c, BRIEF_RAIL, days(30), 10)
        .await
        .unwrap();
    assert_eq!(rest.events, 3);
}

#[tokio::test]
async fn a_late_copy_of_a_removed_event_changes_nothing_and_is_told_apart_from_a_forgery() {
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let firm = Uuid::new_v4();
    let (matter, event) = new_matter(&mut c, firm).await;
    let envelope = outbox::event(&mut c, event)
        .await
        .unwrap()
        .unwrap()
        .envelope();
    publish(&mut c, event).await;
    consume(&mut c, event).await;
    let before = reads::job(&mut c, firm, matter)
        .await
        .unwrap()
        .expect("job row");
    db.advance_ledger_clock(days(31)).await.unwrap();
    assert_eq!(
        r::prune_events(&mut c, BRIEF_RAIL, days(30), 10)
            .await
            .unwrap()
            .events,
        1
    );

    let late = inbox::apply(&mut c, BRIEF_RAIL, &envelope).await.unwrap();
    assert!(matches!(late, Applied::Expired(_)), "{late:?}");
    let after = reads::job(&mut c, firm, matter)
        .await
        .unwrap()
        .expect("job row");
    assert_eq!(
        (after.requested_generation, after.landed_generation),
        (before.requested_generation, before.landed_generation),
        "a late copy of a removed event records no demand"
    );
    assert_eq!(
        count(&mut c, "SELECT count(*) AS n FROM ops.consumed_events").await,
        0,
        "and writes no inbox row"
    );
    let kept = r::oldest_kept(&mut c).await.unwrap();
    assert_eq!(
        kept.events_removed_through.map(|t| t.timestamp_micros()),
        Some(envelope.occurred_at.timestamp_micros()),
        "the horizon is the removed event's time"
    );

    // An id the ledger never recorded, said to occur after the horizon: refused, as before.
    let mut forged = envelope.clone();
    forged.event_id = Uuid::new_v4();
    forged.occurred_at = chrono::Utc::now() + chrono::Duration::days(40);
    let refused = inbox::apply(&mut c, BRIEF_RAIL, &forged).await.unwrap();
    assert!(matches!(refused, Applied::Refused(_)), "{refused:?}");
}

const NODE: &str = "retention-node";

fn claim_req(firm: Uuid, matter: Uuid) -> ClaimRequest {
    common::claim_request(NODE, firm, matter)
}

async fn claim(db: &TestDb, firm: Uuid, matter: Uuid) -> Claim {
    let mut c = db.pool.get().await.unwrap();
    t::claim(&mut c, &claim_req(firm, matter))
        .await
        .unwrap()
        .expect("the matter is free")
}

/// One claim and its landed frame.
async fn land(db: &TestDb, firm: Uuid, matter: Uuid) -> Claim {
    let cl = claim(db, firm, matter).await;
    t::commit(
        &db.pool,
        &cl,
        NODE,
        &Frame::new(json!({ "token": cl.token })),
    )
    .await
    .unwrap();
    cl
}

async fn runs_of(c: &mut AsyncPgConnection, matter: Uuid) -> BTreeSet<Uuid> {
    ids(
        c,
        &format!("SELECT run_id AS id FROM ops.matter_frame_runs WHERE matter_id = '{matter}'"),
    )
    .await
}

#[tokio::test]
async fn old_runs_go_but_each_matters_latest_run_and_every_open_run_stay() {
    let db = TestDb::new(4).await.unwrap();
    let firm = Uuid::new_v4();
    let (busy, settled, fresh) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    // `settled`: three landed runs. `busy`: one landed, then one still running.
    let mut settled_runs = Vec::new();
    for _ in 0..3 {
        settled_runs.push(land(&db, firm, settled).await.run_id);
    }
    let busy_landed = land(&db, firm, busy).await.run_id;
    let open = claim(&db, firm, busy).await;
    let busy_open = open.run_id;
    db.advance_ledger_clock(days(31)).await.unwrap();
    let fresh_runs = [
        land(&db, firm, fresh).await.run_id,
        land(&db, firm, fresh).await.run_id,
    ];

    let mut c = db.pool.get().await.unwrap();
    let removed = r::prune_runs(&mut c, days(30), 1000).await.unwrap();
    assert_eq!(removed, 3, "two of settled's and busy's landed run");
    assert_eq!(
        runs_of(&mut c, settled).await,
        BTreeSet::from([settled_runs[2]]),
        "a matter's latest run stays, however old"
    );
    assert_eq!(
        runs_of(&mut c, busy).await,
        BTreeSet::from([busy_open]),
        "an open run stays; the older landed one ({busy_landed}) goes"
    );
    assert_eq!(
        runs_of(&mut c, fresh).await,
        fresh_runs.into_iter().collect(),
        "young runs stay"
    );
    // The fence still holds: the open claim commits, a stale identity does not.
    drop(c);
    t::commit(
        &db.pool,
        &open,
        NODE,
        &Frame::new(json!({"after": "prune"})),
    )
    .await
    .expect("the open claim still lands after its older runs were removed");
}

async fn generations(c: &mut AsyncPgConnection, matter: Uuid) -> Vec<i64> {
    #[derive(diesel::QueryableByName)]
    struct G {
        #[diesel(sql_type = BigInt)]
        generation: i64,
    }
    diesel::sql_query(
        "SELECT generation FROM ops.matter_frames WHERE matter_id = $1 ORDER BY generation",
    )
    .bind::<SqlUuid, _>(matter)
    .load::<G>(c)
    .await
    .unwrap()
    .into_iter()
    .map(|g| g.generation)
    .collect()
}

#[tokio::test]
async fn frames_keep_n_keeps_each_matters_newest_frames_and_never_its_brief() {
    let db = TestDb::new(4).await.unwrap();
    let firm = Uuid::new_v4();
    let (many, one, young) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    for _ in 0..5 {
        land(&db, firm, many).await;
    }
    land(&db, firm, one).await;
    db.advance_ledger_clock(days(1)).await.unwrap();
    for _ in 0..3 {
        land(&db, firm, young).await;
    }
    let mut c = db.pool.get().await.unwrap();
    // Walk one matter per statement, so the walk's cursor carries across statements.
    let mut removed = 0;
    let mut after: Option<MatterRef> = None;
    let mut steps = 0;
    loop {
        let step = r::prune_frames(&mut c, 2, after, 1).await.unwrap();
        removed += step.removed;
        steps += 1;
        after = step.next;
        if after.is_none() {
            break;
        }
        assert!(steps < 10, "the walk over three matters does not end");
    }
    assert_eq!(steps, 4, "three matters one by one, then the end");
    assert_eq!(removed, 3);
    assert_eq!(
        generations(&mut c, many).await,
        vec![4, 5],
        "the newest two"
    );
    assert_eq!(
        generations(&mut c, one).await,
        vec![1],
        "a single frame stays"
    );
    assert_eq!(
        generations(&mut c, young).await,
        vec![1, 2, 3],
        "frames younger than an hour stay (a builder may read its own back)"
    );
    // keep = 1 keeps the Brief itself.
    let all = r::prune_frames(&mut c, 1, None, 100).await.unwrap();
    assert_eq!(all.removed, 1);
    assert_eq!(generations(&mut c, many).await, vec![5]);
    let brief = reads::latest_frame(&mut c, firm, many)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(brief.generation, 5, "the Brief is the newest frame");
}

/// Lands a frame naming the context's token.
struct Echo;

impl Builder for Echo {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move { Ok(Frame::new(json!({ "token": ctx.token }))) }.boxed_local()
    }
}

#[actix_rt::test]
async fn the_sweepers_pass_follows_the_policy_counts_what_it_removed_and_the_rail_still_serves() {
    let db = TestDb::new(8).await.unwrap();
    let mut s = Settings::defaults();
    s.database.url = briefrail::secret::SecretUrl::new(db.url.clone());
    s.node.id = NODE.into();
    s.trigger.debounce_ms = 10;
    s.trigger.max_wait_ms = 50;
    s.retention.batch = 2;
    s.retention.frames_keep = 1;
    let node = Node::builder(Arc::new(s), Arc::new(Echo))
        .pool(db.pool.clone())
        .without_transport()
        .without_periodic_sweeper()
        .start()
        .await
        .expect("node starts");
    let firm = Uuid::new_v4();
    let mut c = db.pool.get().await.unwrap();
    let mut matters = Vec::new();
    for _ in 0..3 {
        let (m, e) = new_matter(&mut c, firm).await;
        publish(&mut c, e).await;
        consume(&mut c, e).await;
        matters.push(m);
    }
    drop(c);
    // Three landed builds per matter.
    for m in &matters {
        for _ in 0..3 {
            land(&db, firm, *m).await;
        }
    }
    let nothing_yet = node.retain_now().await.unwrap();
    assert_eq!(
        (nothing_yet.events, nothing_yet.runs, nothing_yet.frames),
        (0, 0, 0),
        "nothing is old enough"
    );
    db.advance_ledger_clock(days(31)).await.unwrap();
    let pass = node.retain_now().await.unwrap();
    assert_eq!(
        (pass.events, pass.inbox_rows, pass.runs, pass.frames),
        (3, 6, 6, 6),
        "3 events with 2 inbox rows each; 2 of 3 runs and 2 of 3 frames per matter"
    );
    assert!(pass.statements >= 6, "batches of 2: {pass:?}");
    let counters = &node.context().metrics.counters;
    assert_eq!(
        (
            counters.retention_events_removed.get(),
            counters.retention_inbox_removed.get(),
            counters.retention_runs_removed.get(),
            counters.retention_frames_removed.get()
        ),
        (3, 6, 6, 6)
    );
    let text = node.context().metrics.render();
    assert!(
        text.contains("briefrail_retention_frames_removed_total 6"),
        "{text}"
    );
    let mut c = db.pool.get().await.unwrap();
    for m in &matters {
        let j = reads::job(&mut c, firm, *m).await.unwrap().unwrap();
        let brief = reads::latest_frame(&mut c, firm, *m)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(brief.generation, j.landed_generation, "each Brief stays");
    }
    // The rail still serves: a new document on a pruned matter lands a new frame.
    facts::add_document(
        &mut c,
        facts::NewDocument {
            document_id: Uuid::new_v4(),
            firm_id: firm,
            matter_id: matters[0],
            title: "Exhibit 12".into(),
            dated: None,
            body: "new evidence".into(),
        },
    )
    .await
    .unwrap();
    let demanded = t::demand(&mut c, firm, matters[0]).await.unwrap();
    drop(c);
    node.nudge(briefrail::actors::Nudge::matter(firm, matters[0]));
    common::eventually(Duration::from_secs(20), "the new demand lands", || async {
        let mut c = db.pool.get().await.ok()?;
        let j = reads::job(&mut c, firm, matters[0]).await.ok()??;
        (j.landed_generation >= demanded).then_some(())
    })
    .await;
    node.shutdown().await;
}

#[actix_rt::test]
async fn zero_keeps_everything() {
    let db = TestDb::new(8).await.unwrap();
    let mut s = Settings::defaults();
    s.database.url = briefrail::secret::SecretUrl::new(db.url.clone());
    s.retention.events_days = 0.0;
    s.retention.runs_days = 0.0;
    s.retention.frames_keep = 0;
    let node = Node::builder(Arc::new(s), Arc::new(Echo))
        .pool(db.pool.clone())
        .without_transport()
        .without_periodic_sweeper()
        .start()
        .await
        .expect("node starts");
    let firm = Uuid::new_v4();
    let mut c = db.pool.get().await.unwrap();
    let (m, e) = new_matter(&mut c, firm).await;
    publish(&mut c, e).await;
    consume(&mut c, e).await;
    drop(c);
    for _ in 0..3 {
        land(&db, firm, m).await;
    }
    db.advance_ledger_clock(days(3650)).await.unwrap();
    let pass = node.retain_now().await.unwrap();
    assert_eq!(
        (pass.events, pass.runs, pass.frames, pass.statements),
        (0, 0, 0, 0)
    );
    node.shutdown().await;
}

/// The plan of `ops.<function>`'s body as the function runs it: the body (a SQL function's
/// `prosrc`, read from the database, so it is the live one) prepared with its parameters as
/// `$n`, then `EXPLAIN EXECUTE` of the *generic* plan, which is what a SQL function gets (it
/// is planned for any arguments: a plan for these values could hide a scan).
async fn plan_of(c: &mut AsyncPgConnection, function: &str, args: &str) -> String {
    #[derive(diesel::QueryableByName)]
    struct Src {
        #[diesel(sql_type = Text)]
        body: String,
        #[diesel(sql_type = Text)]
        names: String,
        #[diesel(sql_type = Text)]
        types: String,
    }
    let src: Src = diesel::sql_query(
        "SELECT p.prosrc AS body,
                array_to_string(p.proargnames[1:p.pronargs], ',') AS names,
                array_to_string(ARRAY(SELECT format_type(t, NULL)
                                        FROM unnest(p.proargtypes::oid[]) t), ',') AS types
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'ops' AND p.proname = $1",
    )
    .bind::<Text, _>(function)
    .get_result(c)
    .await
    .unwrap_or_else(|e| panic!("ops.{function}: {e}"));
    let mut body = src.body;
    // Longest names first, so p_after_firm is not half-replaced by a shorter p_after.
    let mut names: Vec<(usize, &str)> = src.names.split(',').enumerate().collect();
    names.sort_by_key(|(_, n)| std::cmp::Reverse(n.len()));
    for (i, name) in names {
        body = body.replace(name, &format!("${}", i + 1));
    }
    let stmt = format!("q_{function}");
    c.batch_execute("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    c.batch_execute(&format!("PREPARE {stmt}({}) AS {body}", src.types))
        .await
        .unwrap_or_else(|e| panic!("prepare ops.{function}: {e}\n{body}"));
    #[derive(diesel::QueryableByName)]
    struct Line {
        #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
        line: String,
    }
    let lines: Vec<Line> = diesel::sql_query(format!("EXPLAIN EXECUTE {stmt}({args})"))
        .load(c)
        .await
        .unwrap_or_else(|e| panic!("explain ops.{function}: {e}"));
    c.batch_execute(&format!("DEALLOCATE {stmt}"))
        .await
        .unwrap();
    lines
        .into_iter()
        .map(|l| l.line)
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_no_seq_scan(what: &str, plan: &str, tables: &[&str]) {
    for t in tables {
        assert!(
            !plan.contains(&format!("Seq Scan on {t}")),
            "{what} scans {t} instead of using its index:\n{plan}"
        );
    }
}

#[tokio::test]
async fn every_retention_statement_uses_its_index_at_a_million_rows() {
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.connection().await.unwrap();
    // 100,000 matters; 1,000,000 events (published, consumed by two consumers), runs and
    // frames. Half of every kind is past its age (an old ledger the first pass meets).
    c.batch_execute(
        "SET synchronous_commit = off;
         INSERT INTO ops.matter_frame_jobs (firm_id, matter_id, requested_generation,
                                            claimed_generation, landed_generation)
         SELECT '00000000-0000-0000-0000-000000000001', md5(i::text)::uuid, 10, 10, 10
           FROM generate_series(1, 100000) i;
         INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name,
                                              created_at, published_at)
         SELECT md5('e' || i)::uuid, '00000000-0000-0000-0000-000000000001',
                md5((i % 100000 + 1)::text)::uuid, 'document.uploaded',
                now() - make_interval(days => 60) + make_interval(secs => i * 4),
                now() - make_interval(days => 60) + make_interval(secs => i * 4 + 1)
           FROM generate_series(1, 1000000) i;
         INSERT INTO ops.consumed_events (consumer, event_id)
         SELECT c, md5('e' || i)::uuid FROM generate_series(1, 1000000) i,
                unnest(ARRAY['brief-rail', 'app']) c;
         INSERT INTO ops.matter_frame_runs (run_id, firm_id, matter_id, token, node_id,
                                            started_at, outcome)
         SELECT md5('r' || i)::uuid, '00000000-0000-0000-0000-000000000001',
                md5((i % 100000 + 1)::text)::uuid, i / 100000 + 1, 'n',
                now() - make_interval(days => 60) + make_interval(secs => i * 4), 'landed'
           FROM generate_series(0, 999999) i;
         INSERT INTO ops.matter_frames (firm_id, matter_id, generation, run_id, body, created_at)
         SELECT '00000000-0000-0000-0000-000000000001', md5((i % 100000 + 1)::text)::uuid,
                i / 100000 + 1, md5('r' || i)::uuid, '{}', now() - make_interval(days => 60)
           FROM generate_series(0, 999999) i;
         ANALYZE;",
    )
    .await
    .expect("a million rows of each");
    assert_eq!(
        count(&mut c, "SELECT count(*) AS n FROM ops.matter_frame_runs").await,
        1_000_000
    );
    assert_eq!(
        count(&mut c, "SELECT count(*) AS n FROM ops.consumed_events").await,
        2_000_000
    );
    let big = [
        "domain_event_outbox",
        "consumed_events",
        "matter_frame_runs",
        "matter_frames",
        "matter_frame_jobs",
    ];
    let plan = plan_of(&mut c, "prune_events", "'brief-rail', 2592000, 1000").await;
    assert_no_seq_scan("ops.prune_events", &plan, &big);
    assert!(
        plan.contains("consumed_events_by_event"),
        "the inbox rows are found by event id:\n{plan}"
    );
    let plan = plan_of(&mut c, "prune_runs", "2592000, 1000").await;
    assert_no_seq_scan("ops.prune_runs", &plan, &big);
    let plan = plan_of(
        &mut c,
        "prune_frames",
        "2, 3600, '00000000-0000-0000-0000-000000000000', '00000000-0000-0000-0000-000000000000', 1000",
    )
    .await;
    assert_no_seq_scan("ops.prune_frames", &plan, &big);
    // The reads retention added: the oldest rows kept, and the gauges' two ages.
    let lines: Vec<String> = {
        #[derive(diesel::QueryableByName)]
        struct Line {
            #[diesel(sql_type = Text, column_name = "QUERY PLAN")]
            line: String,
        }
        diesel::sql_query(format!("EXPLAIN {}", r::OLDEST_KEPT))
            .load::<Line>(&mut c)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.line)
            .collect()
    };
    assert_no_seq_scan("retention::oldest_kept", &lines.join("\n"), &big);

    // And a real pass at this size removes in batches, each statement short.
    let t0 = std::time::Instant::now();
    let removed = r::prune_events(&mut c, BRIEF_RAIL, days(30), 1000)
        .await
        .unwrap();
    assert_eq!((removed.events, removed.inbox_rows), (1000, 2000));
    eprintln!(
        "one prune_events statement of 1000 at 1,000,000 rows: {:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn planted_bugs_in_the_retention_sql_are_caught_by_these_tests() {
    common::mutations::assert_caught(module_path!()).await;
}
