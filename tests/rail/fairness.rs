//! Who is served next when build slots are scarce (docs/protocol.md, "Who is served next"):
//! the ledger's order (`ops.fair_order`) rule by rule, then a real node serving one firm's
//! backlog while another firm's counsel uploads, through the real transport.
//!
//! Each rule has a planted bug in `common::mutations` that a test here must catch.

use crate::common::{self, Count};

use std::sync::Arc;
use std::time::{Duration, Instant};

use briefrail::builders::{BuildContext, Builder};
use briefrail::config::{Settings, TransportKind};
use briefrail::ledger::fairness::{self, Candidate, FirmSettings};
use briefrail::ledger::transitions::{self as t, ClaimRequest};
use briefrail::ledger::{ClaimKind, DemandClass, Frame, facts};
use briefrail::node::Node;
use briefrail::testing::TestDb;
use diesel::sql_types::Uuid as SqlUuid;
use diesel_async::RunQueryDsl;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use uuid::Uuid;

const PROMOTE: Duration = Duration::from_secs(300);

fn cand(firm: Uuid, class: DemandClass, waited_s: u64) -> Candidate {
    Candidate {
        firm_id: firm,
        class,
        waited: Duration::from_secs(waited_s),
        pending: 0,
    }
}

/// `n` builds of `firm` running on the ledger (plain claims of new matters).
async fn running(db: &TestDb, firm: Uuid, n: usize) {
    let mut c = db.pool.get().await.expect("connection");
    for _ in 0..n {
        let req = ClaimRequest {
            firm_id: firm,
            matter_id: Uuid::new_v4(),
            lease: Duration::from_secs(60),
            node_id: "elsewhere".into(),
            trace_id: None,
            event_ids: vec![],
            kind: ClaimKind::NewDemand,
            max_attempts: 5,
        };
        assert!(t::claim(&mut c, &req).await.expect("claim").is_some());
    }
}

async fn pick(db: &TestDb, cands: &[Candidate]) -> Option<usize> {
    let mut c = db.pool.get().await.expect("connection");
    let order = fairness::order(&mut c, cands, PROMOTE, 1)
        .await
        .expect("order");
    order.into_iter().next()
}

#[tokio::test]
async fn interactive_demands_are_picked_before_background_ones() {
    let db = TestDb::new(2).await.expect("test db");
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let old_background = cand(a, DemandClass::Background, 200);
    let new_interactive = cand(b, DemandClass::Interactive, 1);
    assert_eq!(pick(&db, &[old_background, new_interactive]).await, Some(1));
    assert_eq!(pick(&db, &[new_interactive, old_background]).await, Some(0));
    // Even when the interactive demand's firm is the busier one.
    running(&db, b, 3).await;
    assert_eq!(pick(&db, &[old_background, new_interactive]).await, Some(1));
}

#[tokio::test]
async fn the_firm_with_the_fewest_builds_running_per_weight_is_picked_first() {
    let db = TestDb::new(2).await.expect("test db");
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    running(&db, a, 3).await;
    running(&db, b, 1).await;
    // A's demand is older, but A has three builds running and B one.
    let a_old = cand(a, DemandClass::Interactive, 100);
    let b_new = cand(b, DemandClass::Interactive, 1);
    assert_eq!(pick(&db, &[a_old, b_new]).await, Some(1));
    // This node's grants not yet running count as running.
    let b_granted = Candidate {
        pending: 3,
        ..b_new
    };
    assert_eq!(pick(&db, &[a_old, b_granted]).await, Some(0));
    // Weight 4 for A: 3/4 < 1/1.
    weigh(&db, a, 4).await;
    assert_eq!(pick(&db, &[a_old, b_new]).await, Some(0));
}

/// Sets `firm`'s weight.
async fn weigh(db: &TestDb, firm: Uuid, weight: i32) {
    let mut c = db.pool.get().await.expect("connection");
    let w = FirmSettings {
        weight: Some(weight),
        ..Default::default()
    };
    fairness::set_firm(&mut c, firm, &w).await.expect("weight");
}

/// The ledger's order of up to `count` of `cands`.
async fn order(db: &TestDb, cands: &[Candidate], count: usize) -> Vec<usize> {
    let mut c = db.pool.get().await.expect("connection");
    fairness::order(&mut c, cands, PROMOTE, count)
        .await
        .expect("order")
}

/// Holds that come free together are ordered in one call, as if picked one at a time with
/// each pick counted as one more build of its firm for the picks after it: at equal load the
/// firms take turns (a bulk import does not take the whole burst), running builds and weights
/// shift the turns, and interactive demands still all go first.
#[tokio::test]
async fn a_burst_of_holds_is_shared_as_picks_one_at_a_time_would_share_it() {
    let db = TestDb::new(2).await.expect("test db");
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let i = DemandClass::Interactive;
    // Firm A's import is older than each of firm B's uploads.
    let cands = [
        cand(a, i, 40),
        cand(a, i, 30),
        cand(a, i, 20),
        cand(b, i, 10),
        cand(b, i, 5),
    ];
    assert_eq!(order(&db, &cands, 4).await, vec![0, 3, 1, 4]);
    assert_eq!(order(&db, &cands, 9).await, vec![0, 3, 1, 4, 2]);
    // B has a build running elsewhere: A's second goes before B's first.
    running(&db, b, 1).await;
    assert_eq!(order(&db, &cands, 4).await, vec![0, 1, 3, 2]);
    // Weight 2 for A: its third counts as one build of B.
    weigh(&db, a, 2).await;
    assert_eq!(order(&db, &cands, 4).await, vec![0, 1, 2, 3]);
    // A background demand of B, however old, goes after every interactive one.
    let mut with_background = cands.to_vec();
    with_background.insert(0, cand(b, DemandClass::Background, 100));
    assert_eq!(
        order(&db, &with_background, 6).await,
        vec![1, 2, 3, 4, 5, 0]
    );
}

#[tokio::test]
async fn within_a_firms_share_the_oldest_demand_is_picked_first() {
    let db = TestDb::new(2).await.expect("test db");
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let younger = cand(a, DemandClass::Interactive, 5);
    let older = cand(b, DemandClass::Interactive, 50);
    assert_eq!(pick(&db, &[younger, older]).await, Some(1));
}

#[tokio::test]
async fn a_background_demand_waiting_past_the_bound_is_served_as_interactive() {
    let db = TestDb::new(2).await.expect("test db");
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    running(&db, b, 1).await;
    // B's background demand has waited past the bound; A's interactive one is new, and A is
    // idle: promoted, B's demand competes in the interactive tier and is older.
    let aged = cand(b, DemandClass::Background, PROMOTE.as_secs() + 1);
    let fresh = cand(a, DemandClass::Interactive, 1);
    assert_eq!(
        pick(&db, &[fresh, aged]).await,
        Some(0),
        "A has no build running"
    );
    running(&db, a, 2).await;
    assert_eq!(
        pick(&db, &[fresh, aged]).await,
        Some(1),
        "an aged background demand is not held behind a busier firm's interactive one"
    );
    let young = cand(b, DemandClass::Background, PROMOTE.as_secs() - 1);
    assert_eq!(pick(&db, &[fresh, young]).await, Some(0));
}

#[tokio::test]
async fn a_paused_firm_waits_and_a_paused_rail_holds_every_firm() {
    let db = TestDb::new(2).await.expect("test db");
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let a_old = cand(a, DemandClass::Interactive, 100);
    let b_new = cand(b, DemandClass::Background, 1);
    let mut c = db.pool.get().await.expect("connection");
    let pause = |paused| FirmSettings {
        paused: Some(paused),
        ..Default::default()
    };
    fairness::set_firm(&mut c, a, &pause(true))
        .await
        .expect("pause");
    drop(c);
    assert_eq!(pick(&db, &[a_old, b_new]).await, Some(1));
    assert_eq!(pick(&db, &[a_old]).await, None);
    let mut c = db.pool.get().await.expect("connection");
    fairness::set_firm(&mut c, a, &pause(false))
        .await
        .expect("resume");
    fairness::set_rail_paused(&mut c, true)
        .await
        .expect("pause rail");
    drop(c);
    assert_eq!(pick(&db, &[a_old, b_new]).await, None);
    let mut c = db.pool.get().await.expect("connection");
    fairness::set_rail_paused(&mut c, false)
        .await
        .expect("resume rail");
    let paused = fairness::paused(&mut c).await.expect("paused");
    assert!(!paused.rail && paused.firms.is_empty(), "{paused:?}");
    drop(c);
    assert_eq!(pick(&db, &[a_old, b_new]).await, Some(0));
}

#[tokio::test]
async fn a_firm_is_named_weighted_and_found_by_its_name() {
    let db = TestDb::new(2).await.expect("test db");
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.expect("connection");
    let named = |n: &str| FirmSettings {
        name: Some(n.into()),
        ..Default::default()
    };
    fairness::set_firm(&mut c, a, &named("Acme LLP"))
        .await
        .expect("name");
    assert_eq!(
        fairness::resolve(&mut c, "acme llp").await.expect("found"),
        a
    );
    assert_eq!(
        fairness::resolve(&mut c, &b.to_string())
            .await
            .expect("an id"),
        b
    );
    let taken = fairness::set_firm(&mut c, b, &named("Acme LLP")).await;
    assert!(
        taken
            .as_ref()
            .is_err_and(|e| e.to_string().contains("already firm")),
        "{taken:?}"
    );
    for bad in [0, fairness::MAX_WEIGHT + 1] {
        let e = fairness::set_firm(
            &mut c,
            b,
            &FirmSettings {
                weight: Some(bad),
                ..Default::default()
            },
        )
        .await;
        assert!(
            e.as_ref()
                .is_err_and(|e| e.to_string().contains("out of range")),
            "{e:?}"
        );
    }
    let nul = fairness::set_firm(&mut c, b, &named("a\0b")).await;
    assert!(nul.is_err(), "{nul:?}");
    let missing = fairness::resolve(&mut c, "Globex").await;
    assert!(
        missing
            .as_ref()
            .is_err_and(|e| e.to_string().contains("Globex")),
        "{missing:?}"
    );
    let view = fairness::firm(&mut c, a)
        .await
        .expect("read")
        .expect("a row");
    assert_eq!(view.name.as_deref(), Some("Acme LLP"));
    assert_eq!((view.weight, view.paused), (1, false));
}

/// A builder that takes `took` per build.
struct Slow {
    took: Duration,
}

impl Builder for Slow {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move {
            tokio::time::sleep(self.took).await;
            Ok(Frame::new(serde_json::json!({ "token": ctx.token })))
        }
        .boxed_local()
    }
}

fn node_settings(db: &TestDb) -> Settings {
    let mut s = Settings::defaults();
    s.database.url = briefrail::secret::SecretUrl::new(db.url.clone());
    s.database.pool_size = 8;
    s.node.id = "fair".into();
    s.transport.kind = TransportKind::Postgres;
    s.trigger.debounce_ms = 0;
    s.trigger.max_wait_ms = 0;
    s.builders.concurrency = 2;
    s
}

/// A node on `db`'s pool whose builds take `took`.
async fn start_node(db: &TestDb, took: Duration) -> Node {
    Node::builder(Arc::new(node_settings(db)), Arc::new(Slow { took }))
        .pool(db.pool.clone())
        .start()
        .await
        .expect("node starts")
}

async fn upload(db: &TestDb, firm: Uuid, class: DemandClass) -> Uuid {
    let mut c = db.pool.get().await.expect("connection");
    let matter = Uuid::new_v4();
    facts::create_matter_as(&mut c, firm, matter, "M", class)
        .await
        .expect("matter");
    facts::add_document_as(
        &mut c,
        facts::NewDocument {
            document_id: Uuid::new_v4(),
            firm_id: firm,
            matter_id: matter,
            title: "Exhibit".into(),
            dated: None,
            body: "text".into(),
        },
        class,
    )
    .await
    .expect("document");
    matter
}

/// Runs of `firm` opened (claimed) after the newest fact of `matter` was recorded and before
/// `matter`'s first run was: the claims that went ahead of it.
async fn claimed_ahead(db: &TestDb, firm: Uuid, matter: Uuid) -> i64 {
    count_for(
        db,
        "SELECT count(*) AS n FROM ops.matter_frame_runs r
          WHERE r.firm_id = $1
            AND r.started_at > (SELECT max(o.created_at) FROM ops.domain_event_outbox o
                                 WHERE o.matter_id = $2)
            AND r.started_at < (SELECT min(x.started_at) FROM ops.matter_frame_runs x
                                 WHERE x.matter_id = $2)",
        firm,
        matter,
    )
    .await
}

/// Claims of `firm`'s other matters made after `matter`'s facts were recorded.
async fn claimed_after(db: &TestDb, firm: Uuid, matter: Uuid) -> i64 {
    count_for(
        db,
        "SELECT count(*) AS n FROM ops.matter_frame_runs r
          WHERE r.firm_id = $1 AND r.matter_id <> $2
            AND r.started_at > (SELECT max(o.created_at) FROM ops.domain_event_outbox o
                                 WHERE o.matter_id = $2)",
        firm,
        matter,
    )
    .await
}

/// A count (`AS n`) of a statement on `$1` a firm and `$2` a matter.
async fn count_for(db: &TestDb, sql: &str, firm: Uuid, matter: Uuid) -> i64 {
    let mut c = db.pool.get().await.expect("connection");
    let r: Count = diesel::sql_query(sql)
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .get_result(&mut c)
        .await
        .expect("count");
    r.n
}

async fn until_built(db: &TestDb, matter: Uuid, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let mut c = db.pool.get().await.expect("connection");
        let r: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM ops.matter_frame_runs WHERE matter_id = $1",
        )
        .bind::<SqlUuid, _>(matter)
        .get_result(&mut c)
        .await
        .expect("count");
        if r.n > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "matter {matter} was not claimed within {limit:?}"
        );
        drop(c);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The promise under load: firm A's backlog of 32 interactive uploads is being served (two
/// slots, 600 ms builds: about ten seconds of work, so it outlasts a loaded machine's stall
/// between the test's steps) when firm B's counsel uploads one document. B's matter takes the next hold that comes free: at most one of A's claims goes
/// ahead of it (one freed while B's fact was on its way), where arrival order put all of A's
/// waiting backlog ahead.
#[actix_rt::test]
async fn one_firms_backlog_never_makes_another_firms_upload_wait() {
    let db = TestDb::new(16).await.expect("test db");
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let mut backlog = Vec::new();
    for _ in 0..32 {
        backlog.push(upload(&db, a, DemandClass::Interactive).await);
    }
    let node = start_node(&db, Duration::from_millis(600)).await;
    until_built(&db, backlog[0], Duration::from_secs(20)).await;
    let upload_b = upload(&db, b, DemandClass::Interactive).await;
    until_built(&db, upload_b, Duration::from_secs(20)).await;
    let ahead = claimed_ahead(&db, a, upload_b).await;
    // A background import of firm B waits behind A's interactive uploads.
    let import_b = upload(&db, b, DemandClass::Background).await;
    let upload_a = upload(&db, a, DemandClass::Interactive).await;
    until_built(&db, upload_a, Duration::from_secs(60)).await;
    until_built(&db, import_b, Duration::from_secs(60)).await;
    // The scenario needs both to wait behind A's backlog: some of it was claimed after both
    // were recorded. Otherwise a free hold rightly went to whichever came first.
    let behind = claimed_after(&db, a, upload_a).await;
    let mut c = db.pool.get().await.expect("connection");
    let order: Vec<Uuid> = diesel::sql_query(
        "SELECT matter_id AS n FROM ops.matter_frame_runs WHERE matter_id IN ($1, $2)
          ORDER BY started_at",
    )
    .bind::<SqlUuid, _>(import_b)
    .bind::<SqlUuid, _>(upload_a)
    .load::<MatterId>(&mut c)
    .await
    .expect("runs")
    .into_iter()
    .map(|m| m.n)
    .collect();
    drop(c);
    node.shutdown().await;
    assert!(
        ahead <= 1,
        "{ahead} of firm A's claims went ahead of firm B's upload"
    );
    assert!(
        behind > 0,
        "firm A's backlog was all claimed before the last uploads were recorded: the test \
         never made them wait (a stall of the machine longer than the backlog)"
    );
    assert_eq!(
        <[Uuid]>::first(&order),
        Some(&upload_a),
        "the interactive upload recorded after the background import is claimed first"
    );
}

#[derive(diesel::QueryableByName)]
struct MatterId {
    #[diesel(sql_type = SqlUuid)]
    n: Uuid,
}

#[tokio::test]
async fn every_fairness_rule_has_a_test_that_catches_its_planted_bug() {
    common::mutations::assert_caught(module_path!()).await;
}

/// A paused firm's upload waits on a running node (once the pause has reached it, within
/// `PAUSE_REFRESH`) while another firm's is built, and is built once the firm is resumed.
#[actix_rt::test]
async fn a_node_holds_a_paused_firms_uploads_until_it_is_resumed() {
    let db = TestDb::new(8).await.expect("test db");
    let (paused, other) = (Uuid::new_v4(), Uuid::new_v4());
    let node = start_node(&db, Duration::from_millis(10)).await;
    let first = upload(&db, paused, DemandClass::Interactive).await;
    until_built(&db, first, Duration::from_secs(20)).await;
    let mut c = db.pool.get().await.expect("connection");
    let pause = |p| FirmSettings {
        paused: Some(p),
        ..Default::default()
    };
    fairness::set_firm(&mut c, paused, &pause(true))
        .await
        .expect("pause");
    drop(c);
    tokio::time::sleep(briefrail::actors::admission::PAUSE_REFRESH + Duration::from_millis(300))
        .await;
    let held = upload(&db, paused, DemandClass::Interactive).await;
    let served = upload(&db, other, DemandClass::Interactive).await;
    until_built(&db, served, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut c = db.pool.get().await.expect("connection");
    let runs: Count =
        diesel::sql_query("SELECT count(*) AS n FROM ops.matter_frame_runs WHERE matter_id = $1")
            .bind::<SqlUuid, _>(held)
            .get_result(&mut c)
            .await
            .expect("count");
    assert_eq!(runs.n, 0, "a paused firm's upload was claimed");
    fairness::set_firm(&mut c, paused, &pause(false))
        .await
        .expect("resume");
    drop(c);
    until_built(&db, held, Duration::from_secs(20)).await;
    node.shutdown().await;
}

/// A node that starts while the rail is paused, and cannot read the rail row yet (another
/// session holds its table locked), does not take "no row read" for "running": it claims
/// nothing until it has read the pause, nothing while the pause holds, and builds the upload
/// once the rail is resumed. Before the fix, its first matters were claimed on the spot.
#[actix_rt::test]
async fn a_node_started_while_the_rail_is_paused_claims_nothing_until_it_is_resumed() {
    use diesel_async::SimpleAsyncConnection;
    let db = TestDb::new(8).await.expect("test db");
    let mut c = db.pool.get().await.expect("connection");
    fairness::set_rail_paused(&mut c, true)
        .await
        .expect("pause rail");
    drop(c);
    let mut holder = db.connection().await.expect("a connection of its own");
    holder
        .batch_execute("BEGIN; LOCK TABLE ops.rail IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("the rail row locked");
    let node = start_node(&db, Duration::from_millis(10)).await;
    let firm = Uuid::new_v4();
    let held = upload(&db, firm, DemandClass::Interactive).await;
    let runs = || async {
        count_for(
            &db,
            "SELECT count(*) AS n FROM ops.matter_frame_runs WHERE firm_id = $1 AND matter_id = $2",
            firm,
            held,
        )
        .await
    };
    // Longer than one read of the rail row may take (2 s), so a read that timed out counts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(runs().await, 0, "claimed before the node read the pause");
    holder
        .batch_execute("COMMIT")
        .await
        .expect("the rail row unlocked");
    tokio::time::sleep(briefrail::actors::admission::PAUSE_REFRESH + Duration::from_millis(500))
        .await;
    assert_eq!(runs().await, 0, "claimed while the rail was paused");
    let mut c = db.pool.get().await.expect("connection");
    fairness::set_rail_paused(&mut c, false)
        .await
        .expect("resume rail");
    drop(c);
    until_built(&db, held, Duration::from_secs(20)).await;
    node.shutdown().await;
}
