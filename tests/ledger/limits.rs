//! Limits toward the builder (docs/protocol.md, "Limits toward the builder"): the fleet's cap
//! on builds running at once, its rate of build starts, and the builder's own "wait", all kept
//! on the ledger (`ops.take_permit`, `ops.hold_builder`) so every node obeys the same ones.
//! First the ledger's permit rule by rule, with real races between connections; then real
//! nodes sharing one ledger.
//!
//! Each rule has a planted bug in `common::mutations` that a test here must catch.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use briefrail::builders::{BuildContext, Builder};
use briefrail::config::{Settings, TransportKind};
use briefrail::ledger::limits::{self, MAX_BUILDER_HOLD};
use briefrail::ledger::transitions as t;
use briefrail::ledger::{DemandClass, Frame, RunOutcome, facts, reads};
use briefrail::node::Node;
use briefrail::nudge::MatterKey;
use briefrail::testing::TestDb;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use uuid::Uuid;

const TTL: Duration = Duration::from_secs(60);
/// What the overloaded builder asks the rail to wait.
const HOLD: Duration = Duration::from_secs(3);

fn key() -> MatterKey {
    MatterKey {
        firm_id: Uuid::new_v4(),
        matter_id: Uuid::new_v4(),
    }
}

async fn set(db: &TestDb, max_running: Option<u32>, starts_per_minute: Option<u32>) {
    let mut c = db.pool.get().await.expect("connection");
    limits::set(&mut c, max_running, starts_per_minute)
        .await
        .expect("limits set");
}

/// The ledger's answer for `key`: `None` granted, else the wait.
async fn ask(db: &TestDb, key: MatterKey) -> Option<Duration> {
    let mut c = db.pool.get().await.expect("connection");
    limits::take_permit(&mut c, key, "node-a", TTL)
        .await
        .expect("take_permit")
}

/// Twenty-four connections ask for a permit at the same moment under a cap of three: exactly
/// three are granted. Then the rule that makes it so, without luck: a grant not yet committed
/// makes the next asker wait for it, and that asker sees the cap full.
#[tokio::test]
async fn a_cap_is_never_exceeded_by_nodes_asking_at_once() {
    let db = TestDb::new(26).await.expect("test db");
    set(&db, Some(3), None).await;
    let start = Arc::new(tokio::sync::Barrier::new(24));
    let mut asks = Vec::new();
    for _ in 0..24 {
        let (pool, start) = (db.pool.clone(), start.clone());
        asks.push(tokio::spawn(async move {
            let mut c = pool.get().await.expect("connection");
            start.wait().await;
            limits::take_permit(&mut c, key(), "racer", TTL)
                .await
                .expect("take_permit")
        }));
    }
    let mut granted = 0;
    for a in asks {
        if a.await.expect("task").is_none() {
            granted += 1;
        }
    }
    assert_eq!(granted, 3, "permits granted under a cap of 3");

    // The same, step by step: a grant in a transaction not yet committed.
    let db = TestDb::new(4).await.expect("test db");
    set(&db, Some(1), None).await;
    let mut first = db.pool.get().await.expect("connection");
    diesel_async::RunQueryDsl::execute(diesel::sql_query("BEGIN"), &mut first)
        .await
        .expect("begin");
    assert_eq!(
        limits::take_permit(&mut first, key(), "a", TTL)
            .await
            .expect("first"),
        None
    );
    let second = {
        let pool = db.pool.clone();
        tokio::spawn(async move {
            let mut c = pool.get().await.expect("connection");
            limits::take_permit(&mut c, key(), "b", TTL)
                .await
                .expect("second")
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    diesel_async::RunQueryDsl::execute(diesel::sql_query("COMMIT"), &mut first)
        .await
        .expect("commit");
    let second = second.await.expect("task");
    assert!(
        second.is_some(),
        "a second node was granted the cap's one slot while the first grant was in flight"
    );
}

/// A permit counts as a running build from its grant: until its claim is made (then the
/// claim's running row counts instead), it is given back, or it lapses.
#[tokio::test]
async fn a_permit_counts_until_its_claim_runs_or_it_is_given_back() {
    let db = TestDb::new(4).await.expect("test db");
    set(&db, Some(2), None).await;
    let (a, b, c) = (key(), key(), key());
    assert_eq!(ask(&db, a).await, None);
    assert_eq!(ask(&db, b).await, None);
    assert!(
        ask(&db, c).await.is_some(),
        "two permits granted, none claimed yet: the cap of 2 is full"
    );
    // A's claim is made: its running build takes the permit's place.
    let mut conn = db.pool.get().await.expect("connection");
    let req = common::claim_request("node-a", a.firm_id, a.matter_id);
    t::demand(&mut conn, a.firm_id, a.matter_id)
        .await
        .expect("demand");
    let claim = t::claim(&mut conn, &req)
        .await
        .expect("claim")
        .expect("won");
    assert!(
        ask(&db, c).await.is_some(),
        "A's build runs, B's permit waits"
    );
    // B's claim found nothing to build: its permit is given back and C may start.
    limits::return_permit(&mut conn, b, "node-a")
        .await
        .expect("return");
    assert_eq!(ask(&db, c).await, None);
    // A's build ends (handed back): a slot frees for a new matter.
    t::release(&mut conn, &claim, "test")
        .await
        .expect("release");
    assert_eq!(ask(&db, key()).await, None);
    assert!(ask(&db, key()).await.is_some());
    // A permit whose node died between grant and claim lapses.
    set(&db, Some(1), None).await;
    let db2 = TestDb::new(2).await.expect("test db");
    set(&db2, Some(1), None).await;
    let mut c2 = db2.pool.get().await.expect("connection");
    assert_eq!(
        limits::take_permit(&mut c2, key(), "dies", Duration::from_millis(200))
            .await
            .expect("grant"),
        None
    );
    assert!(ask(&db2, key()).await.is_some());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        ask(&db2, key()).await,
        None,
        "a lapsed permit still counted"
    );
}

/// Two starts a minute: the bucket holds two, the third start waits for the refill (30 s),
/// and it is the same bucket for every node.
#[tokio::test]
async fn the_rate_limit_spaces_starts_across_the_fleet() {
    let db = TestDb::new(4).await.expect("test db");
    set(&db, None, Some(2)).await;
    assert_eq!(ask(&db, key()).await, None);
    let mut other_node = db.pool.get().await.expect("connection");
    assert_eq!(
        limits::take_permit(&mut other_node, key(), "node-b", TTL)
            .await
            .expect("grant"),
        None
    );
    let wait = ask(&db, key()).await.expect("the third start waits");
    assert!(
        wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
        "{wait:?}"
    );
    // Lifting the rate lets it go at once.
    set(&db, None, None).await;
    assert_eq!(ask(&db, key()).await, None);
}

/// The builder said "wait": every start waits until then, whatever the cap and rate; a
/// shorter hold does not cut a longer one short; no hold is longer than the rail's maximum; an
/// operator can lift it.
#[tokio::test]
async fn a_held_builder_holds_every_start_until_its_time() {
    let db = TestDb::new(4).await.expect("test db");
    let mut c = db.pool.get().await.expect("connection");
    let held = limits::hold_builder(&mut c, Duration::from_secs(20), "429 from the model")
        .await
        .expect("hold");
    assert!(held > Duration::from_secs(19), "{held:?}");
    let shorter = limits::hold_builder(&mut c, Duration::from_secs(2), "a shorter one")
        .await
        .expect("hold");
    assert!(shorter > Duration::from_secs(19), "{shorter:?}");
    let status = limits::read(&mut c).await.expect("read");
    assert!(status.limits.active() && status.limits.gates_starts());
    assert_eq!(status.held_reason.as_deref(), Some("429 from the model"));
    let wait = ask(&db, key()).await.expect("held");
    assert!(wait > Duration::from_secs(19), "{wait:?}");
    limits::release_builder(&mut c).await.expect("release");
    assert_eq!(ask(&db, key()).await, None);
    assert!(!limits::read(&mut c).await.expect("read").limits.active());
    let day = limits::hold_builder(&mut c, Duration::from_secs(86_400), "a day")
        .await
        .expect("hold");
    assert!(day <= MAX_BUILDER_HOLD, "{day:?}");
}

#[tokio::test]
async fn limits_out_of_range_are_refused_naming_them() {
    let db = TestDb::new(2).await.expect("test db");
    let mut c = db.pool.get().await.expect("connection");
    for (cap, rate, named) in [
        (Some(0), None, "max_running"),
        (Some(limits::MAX_RUNNING + 1), None, "max_running"),
        (None, Some(0), "starts_per_minute"),
    ] {
        let e = limits::set(&mut c, cap, rate).await;
        assert!(
            e.as_ref().is_err_and(|e| e.to_string().contains(named)),
            "{e:?}"
        );
    }
    assert_eq!(
        limits::read(&mut c).await.expect("read").limits,
        limits::Limits::default(),
        "a refused setting changed nothing"
    );
}

#[tokio::test]
async fn every_limit_rule_has_a_test_that_catches_its_planted_bug() {
    common::mutations::assert_caught(module_path!()).await;
}

/// What the nodes' builds did: how many ran at once at most, and when each started.
#[derive(Default)]
struct Record {
    running: AtomicUsize,
    most: AtomicUsize,
    starts: Mutex<Vec<(Uuid, Instant)>>,
    /// The first build of these matters is told the builder is overloaded.
    overloaded_once: Mutex<Vec<Uuid>>,
}

struct Recording {
    took: Duration,
    record: Arc<Record>,
}

impl Builder for Recording {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move {
            let r = &self.record;
            r.starts
                .lock()
                .unwrap()
                .push((ctx.matter_id, Instant::now()));
            let overloaded = {
                let mut once = r.overloaded_once.lock().unwrap();
                let hit = once.contains(&ctx.matter_id);
                once.retain(|m| *m != ctx.matter_id);
                hit
            };
            if overloaded {
                return Err(briefrail::Error::Backpressure {
                    retry_after: HOLD,
                    message: "model endpoint at its rate limit".into(),
                });
            }
            let now = r.running.fetch_add(1, Ordering::SeqCst) + 1;
            r.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.took).await;
            r.running.fetch_sub(1, Ordering::SeqCst);
            Ok(Frame::new(serde_json::json!({ "token": ctx.token })))
        }
        .boxed_local()
    }
}

fn node_settings(db: &TestDb, id: &str) -> Settings {
    let mut s = Settings::defaults();
    s.database.url = briefrail::secret::SecretUrl::new(db.url.clone());
    s.database.pool_size = 6;
    s.node.id = id.into();
    s.transport.kind = TransportKind::Postgres;
    s.trigger.debounce_ms = 0;
    s.trigger.max_wait_ms = 0;
    s.builders.concurrency = 4;
    s
}

async fn start(db: &TestDb, id: &str, record: &Arc<Record>, took: Duration) -> Node {
    Node::builder(
        Arc::new(node_settings(db, id)),
        Arc::new(Recording {
            took,
            record: record.clone(),
        }),
    )
    .start()
    .await
    .expect("node starts")
}

async fn upload(db: &TestDb, firm: Uuid) -> Uuid {
    let mut c = db.pool.get().await.expect("connection");
    let matter = Uuid::new_v4();
    facts::create_matter_as(&mut c, firm, matter, "M", DemandClass::Interactive)
        .await
        .expect("matter");
    matter
}

async fn landed(db: &TestDb, firm: Uuid, matter: Uuid, limit: Duration) {
    common::eventually(limit, "the matter's build to land", || async {
        let mut c = db.pool.get().await.expect("connection");
        let runs = reads::runs(&mut c, firm, matter, 10).await.expect("runs");
        runs.iter()
            .any(|r| r.outcome == RunOutcome::Landed)
            .then_some(())
    })
    .await
}

/// Two nodes of four build slots each, one ledger, a cap of two: never more than two builds
/// run at once across both, and every upload is built.
#[actix_rt::test]
async fn two_nodes_never_run_more_builds_than_the_cap_together() {
    let db = TestDb::new(4).await.expect("test db");
    set(&db, Some(2), None).await;
    let record = Arc::new(Record::default());
    let took = Duration::from_millis(300);
    let a = start(&db, "cap-a", &record, took).await;
    let b = start(&db, "cap-b", &record, took).await;
    let firm = Uuid::new_v4();
    let mut matters = Vec::new();
    for _ in 0..12 {
        matters.push(upload(&db, firm).await);
    }
    for m in &matters {
        landed(&db, firm, *m, Duration::from_secs(40)).await;
    }
    let most = record.most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} builds ran at once under a cap of 2");
    assert_eq!(most, 2, "the cap's two slots were never both used");
    a.shutdown().await;
    b.shutdown().await;
}

/// A node that starts while it cannot read the rail row (here another session holds the row's
/// table locked) does not know the cap yet, and "no limit" is not what it may assume: it builds
/// nothing until it has read the limits, then never more than the cap. Before the fix, its
/// first matters took the free slots at once without a permit, all of them.
#[actix_rt::test]
async fn a_node_builds_nothing_before_it_has_read_the_fleets_limits() {
    use diesel_async::SimpleAsyncConnection;
    let db = TestDb::new(4).await.expect("test db");
    set(&db, Some(1), None).await;
    let mut holder = db.connection().await.expect("a connection of its own");
    holder
        .batch_execute("BEGIN; LOCK TABLE ops.rail IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("the rail row locked");
    let record = Arc::new(Record::default());
    let node = start(&db, "unread", &record, Duration::from_millis(100)).await;
    let firm = Uuid::new_v4();
    let mut matters = Vec::new();
    for _ in 0..3 {
        matters.push(upload(&db, firm).await);
    }
    // Three demands on the ledger, a node with four free slots: unless it waits for the
    // limits, its builds start within milliseconds. It is watched for longer than the time
    // the node gives one read of the rail row (2 s), so a read that times out counts too.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = record.starts.lock().unwrap().len();
    assert_eq!(
        started, 0,
        "{started} builds started before the node could read the cap"
    );
    holder
        .batch_execute("COMMIT")
        .await
        .expect("the rail row unlocked");
    for m in &matters {
        landed(&db, firm, *m, Duration::from_secs(30)).await;
    }
    let most = record.most.load(Ordering::SeqCst);
    assert_eq!(most, 1, "{most} builds ran at once under a cap of 1");
    node.shutdown().await;
}

/// The builder says it is overloaded (what a 429 with `Retry-After: 3` becomes): the claim is
/// handed back without spending a retry, no build of any matter starts on any node before the
/// time it gave (once the hold has reached it: at once on the node that heard it, within
/// `PAUSE_REFRESH` on the others), and the matter is built after it.
#[actix_rt::test]
async fn a_builder_asking_to_wait_holds_every_start_and_spends_no_retry() {
    let db = TestDb::new(4).await.expect("test db");
    let record = Arc::new(Record::default());
    let took = Duration::from_millis(20);
    let a = start(&db, "held-a", &record, took).await;
    let b = start(&db, "held-b", &record, took).await;
    let firm = Uuid::new_v4();
    // A first build so both nodes are warm.
    let warm = upload(&db, firm).await;
    landed(&db, firm, warm, Duration::from_secs(20)).await;

    let hit = Uuid::new_v4();
    record.overloaded_once.lock().unwrap().push(hit);
    let mut c = db.pool.get().await.expect("connection");
    facts::create_matter_as(&mut c, firm, hit, "M", DemandClass::Interactive)
        .await
        .expect("matter");
    let told = common::eventually(Duration::from_secs(20), "the overloaded build", || async {
        let starts = record.starts.lock().unwrap();
        starts.iter().find(|(m, _)| *m == hit).map(|(_, at)| *at)
    })
    .await;
    // Uploads meanwhile, once every node has read the hold: none starts before it ends.
    let reached = briefrail::actors::admission::PAUSE_REFRESH + Duration::from_millis(200);
    tokio::time::sleep(reached.saturating_sub(told.elapsed())).await;
    let mut later = Vec::new();
    for _ in 0..4 {
        let other = Uuid::new_v4();
        later.push((other, upload(&db, other).await));
    }
    landed(&db, firm, hit, Duration::from_secs(20)).await;
    for (f, m) in &later {
        landed(&db, *f, *m, Duration::from_secs(20)).await;
    }
    let starts = record.starts.lock().unwrap().clone();
    let early: Vec<_> = starts
        .iter()
        .filter(|(m, at)| {
            *at > told && *at < told + HOLD - Duration::from_millis(200) && *m != warm
        })
        .collect();
    assert!(
        early.is_empty(),
        "builds started during the builder's hold: {early:?}"
    );
    let runs = reads::runs(&mut c, firm, hit, 10).await.expect("runs");
    let released = runs
        .iter()
        .find(|r| r.outcome == RunOutcome::Released)
        .expect("the overloaded build's claim handed back");
    assert!(
        released
            .error
            .as_deref()
            .is_some_and(|e| e.contains("rate limit")),
        "{released:?}"
    );
    let job = reads::job(&mut c, firm, hit)
        .await
        .expect("job")
        .expect("row");
    assert_eq!(job.consecutive_failures, 0, "the hold spent a retry");
    drop(c);
    a.shutdown().await;
    b.shutdown().await;
}

/// A rate's bucket emptied by hand far below zero (`UPDATE ops.rail SET tokens = -1e300`)
/// answers a wait no `Duration` holds; the node asks again after at most
/// `limits::MAX_PERMIT_WAIT` instead of its admission task dying on the conversion.
#[tokio::test]
async fn a_rate_bucket_emptied_by_hand_answers_a_bounded_wait() {
    use diesel_async::SimpleAsyncConnection;
    let db = TestDb::new(1).await.expect("test db");
    set(&db, None, Some(1)).await;
    let mut c = db.pool.get().await.expect("connection");
    c.batch_execute("UPDATE ops.rail SET tokens = -1e300, tokens_at = now() WHERE only_row")
        .await
        .expect("empty the bucket by hand");
    let wait = limits::take_permit(&mut c, key(), "n1", TTL)
        .await
        .expect("a permit's answer");
    assert_eq!(wait, Some(limits::MAX_PERMIT_WAIT));
}
