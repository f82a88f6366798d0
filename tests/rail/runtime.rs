//! The actor runtime in-process, against a real Postgres: zombies fenced across two nodes,
//! coalescing, heartbeats, memory that tracks active matters, restarts with cleared state.
//! Waiting is on ledger conditions (polled), never on a sleep that merely happens to pass; a
//! lease runs out by advancing the ledger clock (`briefrail::testing::advance_ledger_clock`).

use briefrail::ledger::{RunOutcome, RunStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use briefrail::actors::{MatterKey, Nudge};
use briefrail::builders::{BuildContext, Builder};
use briefrail::config::Settings;
use briefrail::ledger::transitions as t;
use briefrail::ledger::{Frame, reads};
use briefrail::node::Node;
use briefrail::testing::TestDb;
use briefrail::trace::Traceparent;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::json;
use tokio::sync::watch;
use uuid::Uuid;

/// A builder that waits for its gate to open, then takes `delay`; counts builds.
struct Gate {
    open: watch::Receiver<bool>,
    delay: Duration,
    started: Arc<AtomicUsize>,
}

impl Gate {
    fn new(open: bool, delay: Duration) -> (Arc<Self>, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(open);
        (
            Arc::new(Self {
                open: rx,
                delay,
                started: Arc::new(AtomicUsize::new(0)),
            }),
            tx,
        )
    }
}

impl Builder for Gate {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move {
            self.started.fetch_add(1, Ordering::SeqCst);
            let mut open = self.open.clone();
            let _ = open.wait_for(|o| *o).await;
            tokio::time::sleep(self.delay).await;
            Ok(Frame::new(json!({ "token": ctx.token })))
        }
        .boxed_local()
    }
}

fn settings(db: &TestDb, node: &str) -> Settings {
    let mut s = Settings::defaults();
    s.database.url = briefrail::secret::SecretUrl::new(db.url.clone());
    s.database.pool_size = 8;
    s.node.id = node.into();
    s.trigger.debounce_ms = 50;
    s.trigger.max_wait_ms = 500;
    s.sweeper.interval_seconds = 0.2;
    s.builders.concurrency = 4;
    s
}

/// A node nudged by hand: no transport; the sweeper periodic or only when asked.
async fn start(db: &TestDb, s: Settings, builder: Arc<dyn Builder>, sweeper: bool) -> Node {
    let b = Node::builder(Arc::new(s), builder)
        .pool(db.pool.clone())
        .without_transport();
    let b = if sweeper {
        b
    } else {
        b.without_periodic_sweeper()
    };
    b.start().await.expect("node starts")
}

/// Polls the ledger until `cond` holds for the matter's job row, or panics after `limit`.
async fn until_job(
    db: &TestDb,
    firm: Uuid,
    matter: Uuid,
    limit: Duration,
    what: &str,
    cond: impl Fn(&briefrail::ledger::JobRow) -> bool,
) -> briefrail::ledger::JobRow {
    let deadline = Instant::now() + limit;
    loop {
        let mut c = db.pool.get().await.unwrap();
        if let Some(j) = reads::job(&mut c, firm, matter).await.unwrap() {
            if cond(&j) {
                return j;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {j:?}"
            );
        } else {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: no row"
            );
        }
        drop(c);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn demand_and_nudge(db: &TestDb, node: &Node, firm: Uuid, matter: Uuid) -> Uuid {
    let mut c = db.pool.get().await.unwrap();
    t::demand(&mut c, firm, matter).await.unwrap();
    let event_id = Uuid::new_v4();
    node.nudge(Nudge {
        key: MatterKey {
            firm_id: firm,
            matter_id: matter,
        },
        event_ids: vec![event_id],
        traceparent: Some(Traceparent::new_root().to_string()),
        class: briefrail::ledger::DemandClass::Interactive,
        recorded_ago: None,
    });
    event_id
}

#[actix_rt::test]
async fn a_stalled_node_is_fenced_when_another_node_takes_over() {
    let db = TestDb::new(16).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    // Node A stalls inside its build and sends no heartbeat in time (every 30 s, against its
    // own 60 s lease, written on the row, which the ledger clock runs past at once): to B, A
    // looks exactly like a paused process.
    let (gate, open_a) = Gate::new(false, Duration::ZERO);
    let mut sa = settings(&db, "node-a");
    sa.lease.seconds = 60.0;
    sa.lease.heartbeat_seconds = Some(30.0);
    let a = start(&db, sa, gate.clone(), false).await;
    let mut sb = settings(&db, "node-b");
    sb.lease.seconds = 0.05;
    sb.lease.heartbeat_seconds = Some(0.01);
    // B's build waits too, so A writes while B's claim runs (the row is `running` again: only
    // the claim's identity can refuse A).
    let (gate_b, open_b) = Gate::new(false, Duration::ZERO);
    let b = start(&db, sb, gate_b, false).await;

    demand_and_nudge(&db, &a, firm, matter).await;
    let held = until_job(
        &db,
        firm,
        matter,
        Duration::from_secs(10),
        "A's claim",
        |j| j.run_status == RunStatus::Running,
    )
    .await;
    let token_a = held.claimed_generation;
    let report = b.sweep_now().await.unwrap();
    assert_eq!(report.expired, 0, "A's lease has not run out yet");
    db.advance_ledger_clock(Duration::from_secs(61))
        .await
        .unwrap(); // past A's own deadline

    let report = b.sweep_now().await.unwrap();
    assert_eq!(report.expired, 1, "B's sweeper expires A's claim");
    let taken = until_job(
        &db,
        firm,
        matter,
        Duration::from_secs(10),
        "B's claim",
        |j| j.claimed_generation > token_a && j.run_status == RunStatus::Running,
    )
    .await;
    assert_eq!(
        taken.claimed_generation,
        token_a + 1,
        "B reclaimed with n+1"
    );

    // A wakes and writes while B builds: refused.
    open_a.send(true).unwrap();
    let mut c = db.pool.get().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let run_a = loop {
        let runs = reads::runs(&mut c, firm, matter, 10).await.unwrap();
        let r = runs.into_iter().find(|r| r.token == token_a).unwrap();
        if r.outcome == RunOutcome::Fenced {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "A's run never ended fenced: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(run_a.node_id, "node-a");
    // Then B lands.
    open_b.send(true).unwrap();
    until_job(&db, firm, matter, Duration::from_secs(10), "B lands", |j| {
        j.landed_generation == token_a + 1 && j.run_status == RunStatus::Idle
    })
    .await;
    assert!(
        reads::frame_meta(&mut c, firm, matter, token_a)
            .await
            .unwrap()
            .is_none(),
        "no frame with token n"
    );
    let frames = reads::frames(&mut c, firm, matter).await.unwrap();
    assert_eq!(
        frames.iter().map(|f| f.generation).collect::<Vec<_>>(),
        vec![token_a + 1]
    );
    assert_eq!(a.metrics().counters.builds_fenced.get(), 1);
}

/// A demand reconcile finds (no change to its row for the quiet period, by the ledger's clock)
/// is claimed at once: its debounce window passed long ago, so the sweeper's nudge says so.
#[actix_rt::test]
async fn a_demand_reconcile_finds_is_claimed_without_a_second_debounce_window() {
    const WINDOW: Duration = Duration::from_secs(3);
    let db = TestDb::new(16).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let (gate, _open) = Gate::new(true, Duration::ZERO);
    let mut s = settings(&db, "node");
    s.trigger.debounce_ms = WINDOW.as_millis() as u64;
    s.trigger.max_wait_ms = 2 * s.trigger.debounce_ms;
    let node = start(&db, s, gate, false).await;
    let mut c = db.pool.get().await.unwrap();
    // Recorded, its nudge lost; the ledger clock then runs past reconcile's quiet period.
    t::demand(&mut c, firm, matter).await.unwrap();
    db.advance_ledger_clock(Duration::from_secs(60))
        .await
        .unwrap();
    let asked = Instant::now();
    let report = node.sweep_now().await.unwrap();
    assert_eq!(report.unserved, 1, "reconcile finds the demand");
    until_job(
        &db,
        firm,
        matter,
        Duration::from_secs(20),
        "the claim",
        |j| j.claimed_generation > 0,
    )
    .await;
    let took = asked.elapsed();
    assert!(
        took < WINDOW - Duration::from_millis(500),
        "reconcile's nudge waited a debounce window: claimed {took:?} after the sweep (window {WINDOW:?})"
    );
}

#[actix_rt::test]
async fn nudges_coalesce_into_one_claim_and_demands_mid_build_into_one_follow_up() {
    let db = TestDb::new(16).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let (gate, open) = Gate::new(false, Duration::ZERO);
    let mut s = settings(&db, "node");
    s.trigger.debounce_ms = 300;
    s.trigger.max_wait_ms = 3000;
    let node = start(&db, s, gate.clone(), false).await;

    // Ten uploads inside the debounce window: one claim that carries all ten events.
    let mut events = Vec::new();
    for _ in 0..10 {
        events.push(demand_and_nudge(&db, &node, firm, matter).await);
    }
    let first = until_job(
        &db,
        firm,
        matter,
        Duration::from_secs(10),
        "the first claim",
        |j| j.run_status == RunStatus::Running,
    )
    .await;
    let mut c = db.pool.get().await.unwrap();
    let runs = reads::runs(&mut c, firm, matter, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    let served: Vec<Uuid> = runs[0].event_ids.iter().flatten().copied().collect();
    assert_eq!(
        served.len(),
        10,
        "one claim serves all ten coalesced demands: {served:?}"
    );
    assert!(events.iter().all(|e| served.contains(e)));

    // Twenty demands while that build runs: exactly one follow-up.
    for _ in 0..20 {
        demand_and_nudge(&db, &node, firm, matter).await;
    }
    open.send(true).unwrap();
    let done = until_job(
        &db,
        firm,
        matter,
        Duration::from_secs(10),
        "all served",
        |j| j.run_status == RunStatus::Idle && !j.unserved(),
    )
    .await;
    // Let any stray cycle the nudges could still start show up before counting. Kept as a
    // sleep: it gives the node's actors (a 300 ms debounce) time to act, no lease is involved.
    node.sweep_now().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let runs = reads::runs(&mut c, firm, matter, 100).await.unwrap();
    assert_eq!(
        runs.len(),
        2,
        "the first build and one follow-up: {runs:#?}"
    );
    assert_eq!(gate.started.load(Ordering::SeqCst), 2);
    let frames = reads::frames(&mut c, firm, matter).await.unwrap();
    assert_eq!(frames.len(), 2);
    assert!(
        frames[0].generation == first.claimed_generation
            && frames[1].generation == done.landed_generation
    );
    assert!(node.context().metrics.counters.demands_coalesced.get() >= 29);
}

#[actix_rt::test]
async fn a_heartbeating_build_longer_than_its_lease_is_never_reclaimed() {
    let db = TestDb::new(16).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut s = settings(&db, "node");
    s.lease.seconds = 0.6;
    s.lease.heartbeat_seconds = Some(0.1);
    s.sweeper.interval_seconds = 0.05;
    // A second node sweeps as well: it must see the lease renewed every time.
    let node = start(
        &db,
        s.clone(),
        Gate::new(true, Duration::from_millis(2500)).0,
        true,
    )
    .await;
    s.node.id = "other".into();
    let other = start(&db, s, Gate::new(true, Duration::ZERO).0, true).await;
    demand_and_nudge(&db, &node, firm, matter).await;
    // While the 2.5 s build runs, its run shows heartbeats (the commit's own heartbeat_at
    // must not be what this sees): a second past its start, four times the heartbeat.
    let mut c = db.pool.get().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let runs = reads::runs(&mut c, firm, matter, 10).await.unwrap();
        if let Some(r) = runs.iter().find(|r| r.outcome == RunOutcome::Running)
            && r.heartbeat_at - r.started_at >= chrono::Duration::milliseconds(1000)
        {
            break;
        }
        assert!(
            !runs.iter().any(|r| r.outcome == RunOutcome::Landed),
            "landed before a heartbeat was seen: {runs:#?}"
        );
        assert!(Instant::now() < deadline, "no heartbeat seen: {runs:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let j = until_job(&db, firm, matter, Duration::from_secs(15), "landed", |j| {
        j.landed_generation > 0 && j.run_status == RunStatus::Idle
    })
    .await;
    let runs = reads::runs(&mut c, firm, matter, 10).await.unwrap();
    assert!(
        runs.iter().all(|r| r.outcome == RunOutcome::Landed),
        "never reclaimed, never fenced: {runs:#?}"
    );
    let first = runs.last().unwrap();
    assert!(
        first.heartbeat_at - first.started_at > chrono::Duration::milliseconds(2000),
        "{first:?}"
    );
    assert_eq!(runs[0].token, j.landed_generation);
    assert_eq!(
        other.context().metrics.counters.builds_lease_expired.get(),
        0
    );
}

/// A matter built again and again within `trigger.idle_seconds` leaves one idle report in its
/// supervisor, not one per build: the supervisor's queue (and the round trips it makes to
/// retire actors) follows the matters that are idle, not the builds a busy node lands.
#[actix_rt::test]
async fn a_matter_built_many_times_leaves_one_idle_report() {
    let db = TestDb::new(8).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut s = settings(&db, "node");
    s.trigger.debounce_ms = 1;
    s.trigger.max_wait_ms = 10;
    s.trigger.idle_seconds = 600.0;
    let node = start(&db, s, Gate::new(true, Duration::ZERO).0, false).await;
    for round in 1..=20i64 {
        {
            let mut c = db.pool.get().await.unwrap();
            t::demand(&mut c, firm, matter).await.unwrap();
        }
        node.nudge(Nudge::matter(firm, matter));
        until_job(&db, firm, matter, Duration::from_secs(20), "served", |j| {
            j.landed_generation >= 2 * round && j.run_status == RunStatus::Idle
        })
        .await;
    }
    // The last build's report may still be on its way to the supervisor.
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.idle_reports().await == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        node.idle_reports().await,
        1,
        "twenty builds of one matter, one idle report waiting"
    );
    assert_eq!(node.actor_count().await, 1);
}

#[actix_rt::test]
async fn ten_thousand_matters_land_and_idle_actors_are_stopped() {
    let db = TestDb::new(16).await.unwrap();
    let firm = Uuid::new_v4();
    let mut s = settings(&db, "node");
    s.trigger.debounce_ms = 1;
    s.trigger.max_wait_ms = 10;
    s.trigger.idle_seconds = 1.0;
    s.builders.concurrency = 8;
    let node = start(&db, s, Gate::new(true, Duration::ZERO).0, false).await;
    let matters: Vec<Uuid> = (0..10_000).map(|_| Uuid::new_v4()).collect();
    {
        let mut c = db.pool.get().await.unwrap();
        for m in &matters {
            t::demand(&mut c, firm, *m).await.unwrap();
        }
    }
    for m in &matters {
        node.nudge(Nudge::matter(firm, *m));
    }
    let peak = node.actor_count().await;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let mut c = db.pool.get().await.unwrap();
        let left = t::unserved(&mut c, 100, 20_000, Duration::ZERO)
            .await
            .unwrap()
            .len();
        let running = reads::job(&mut c, firm, matters[0])
            .await
            .unwrap()
            .map(|j| j.run_status);
        if left == 0 && running == Some(RunStatus::Idle) {
            break;
        }
        assert!(Instant::now() < deadline, "{left} matters still unserved");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.actor_count().await > 0 {
        assert!(
            Instant::now() < deadline,
            "idle matter actors were not stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("matter actors: {peak} at peak, 0 after idling");
    assert!(
        peak > 5_000,
        "the supervisor should have held thousands of actors at peak ({peak})"
    );
    assert_eq!(node.metrics().counters.builds_landed.get(), 10_000);
}

#[actix_rt::test]
async fn a_matter_actor_that_panics_is_replaced_with_cleared_state() {
    let db = TestDb::new(8).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let node = start(
        &db,
        settings(&db, "node"),
        Gate::new(true, Duration::ZERO).0,
        false,
    )
    .await;
    demand_and_nudge(&db, &node, firm, matter).await;
    let first = until_job(
        &db,
        firm,
        matter,
        Duration::from_secs(10),
        "first landing",
        |j| j.landed_generation > 0 && j.run_status == RunStatus::Idle,
    )
    .await;
    let key = MatterKey {
        firm_id: firm,
        matter_id: matter,
    };
    let addr = node.lookup(key).await.expect("actor alive");
    let _ = addr.send(briefrail::actors::matter::Crash).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while addr.connected() {
        assert!(Instant::now() < deadline, "the actor survived its panic");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    demand_and_nudge(&db, &node, firm, matter).await;
    until_job(
        &db,
        firm,
        matter,
        Duration::from_secs(10),
        "served after the restart",
        |j| j.landed_generation > first.landed_generation && j.run_status == RunStatus::Idle,
    )
    .await;
    let fresh = node.lookup(key).await.expect("a fresh actor");
    assert!(fresh != addr);
}

/// A builder that records how many builds run at once and, at each build's start, how many
/// claims the ledger holds (running rows): what `builders.concurrency` and the node's holds
/// bound. Each build takes `delay`.
struct Census {
    delay: Duration,
    building: AtomicUsize,
    most_building: AtomicUsize,
    /// Running rows seen at each build's start, in order.
    held: std::sync::Mutex<Vec<usize>>,
}

impl Census {
    fn new(delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            delay,
            building: AtomicUsize::new(0),
            most_building: AtomicUsize::new(0),
            held: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn held(&self) -> Vec<usize> {
        self.held.lock().unwrap().clone()
    }
}

impl Builder for Census {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move {
            let now = self.building.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_building.fetch_max(now, Ordering::SeqCst);
            let held = {
                use diesel_async::RunQueryDsl;
                #[derive(diesel::QueryableByName)]
                struct N {
                    #[diesel(sql_type = diesel::sql_types::BigInt)]
                    n: i64,
                }
                let mut c = ctx.pool.get().await.map_err(briefrail::Error::from)?;
                diesel::sql_query(
                    "SELECT count(*) AS n FROM ops.matter_frame_jobs WHERE run_status = 'running'",
                )
                .get_result::<N>(&mut c)
                .await
                .map_err(briefrail::Error::from)?
                .n
            };
            self.held.lock().unwrap().push(held as usize);
            tokio::time::sleep(self.delay).await;
            self.building.fetch_sub(1, Ordering::SeqCst);
            Ok(Frame::new(json!({ "token": ctx.token })))
        }
        .boxed_local()
    }
}

/// Demands `n` matters of one firm and nudges the node for each; waits until all landed.
async fn serve_all(db: &TestDb, node: &Node, n: usize, limit: Duration) {
    let firm = Uuid::new_v4();
    let matters: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    {
        let mut c = db.pool.get().await.unwrap();
        for m in &matters {
            t::demand(&mut c, firm, *m).await.unwrap();
        }
    }
    for m in &matters {
        node.nudge(Nudge::matter(firm, *m));
    }
    let deadline = Instant::now() + limit;
    while node.metrics().counters.builds_landed.get() < n as u64 {
        assert!(
            Instant::now() < deadline,
            "{} of {n} landed",
            node.metrics().counters.builds_landed.get()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Builds running at once never exceed `builders.concurrency`, claims held never exceed
/// `builders.held_claims`; and with fast builds the claims beyond the builders are used: the
/// next matters are claimed (and the last ones committed) while the builders build.
#[actix_rt::test]
async fn builds_stay_within_concurrency_and_claims_within_held_claims() {
    let db = TestDb::new(16).await.unwrap();
    let mut s = settings(&db, "node");
    s.database.pool_size = 12;
    s.trigger.debounce_ms = 1;
    s.trigger.max_wait_ms = 10;
    s.builders.concurrency = 2;
    s.builders.held_claims = Some(6);
    let census = Census::new(Duration::from_millis(15));
    let node = start(&db, s, census.clone(), false).await;
    serve_all(&db, &node, 150, Duration::from_secs(60)).await;
    let building = census.most_building.load(Ordering::SeqCst);
    let held = census.held().into_iter().max().unwrap_or(0);
    eprintln!("at most {building} building and {held} claims held at once");
    assert_eq!(
        building, 2,
        "builds at once: builders.concurrency bounds them, and is used"
    );
    assert!(
        held <= 6,
        "{held} claims held at once, builders.held_claims is 6"
    );
    assert!(
        held > 2,
        "claims held never exceeded the builders ({held}): claims and commits keep builders waiting"
    );
}

/// Slow builds hold about one claim per builder, whatever `builders.held_claims` allows: a
/// claim waiting for a builder is a matter no other node can take (`src/actors/capacity.rs`).
#[actix_rt::test]
async fn slow_builds_hold_one_claim_per_builder() {
    let db = TestDb::new(16).await.unwrap();
    let mut s = settings(&db, "node");
    s.trigger.debounce_ms = 1;
    s.trigger.max_wait_ms = 10;
    s.builders.concurrency = 2;
    s.builders.held_claims = Some(24);
    let census = Census::new(Duration::from_millis(600));
    let node = start(&db, s, census.clone(), false).await;
    serve_all(&db, &node, 12, Duration::from_secs(60)).await;
    let held = census.held();
    eprintln!("claims held at each build's start: {held:?}");
    assert!(
        held.iter().all(|h| *h <= 4),
        "two per builder until a build has ended, then 2 + 2 × 500 ms / 600 ms: {held:?}"
    );
    assert!(
        held[4..].iter().all(|h| *h <= 3),
        "once builds are known to take 600 ms: {held:?}"
    );
}

/// A claim that waits for a builder longer than its lease keeps it: the wait is heartbeated like
/// the build, so another node's sweep never takes it and nothing is fenced.
#[actix_rt::test]
async fn a_claim_waiting_for_a_builder_longer_than_its_lease_is_never_reclaimed() {
    let db = TestDb::new(16).await.unwrap();
    let firm = Uuid::new_v4();
    let mut s = settings(&db, "node");
    s.lease.seconds = 0.6;
    s.lease.heartbeat_seconds = Some(0.1);
    s.sweeper.interval_seconds = 0.05;
    s.trigger.debounce_ms = 1;
    s.trigger.max_wait_ms = 10;
    s.builders.concurrency = 1;
    s.builders.held_claims = Some(2);
    let node = start(
        &db,
        s.clone(),
        Gate::new(true, Duration::from_millis(1200)).0,
        true,
    )
    .await;
    s.node.id = "other".into();
    let other = start(&db, s, Gate::new(true, Duration::ZERO).0, true).await;
    // Two per builder until a build has ended: the second is claimed at once and waits 1.2 s
    // (two leases) for the builder.
    let matters: Vec<Uuid> = (0..2).map(|_| Uuid::new_v4()).collect();
    for m in &matters {
        demand_and_nudge(&db, &node, firm, *m).await;
    }
    for m in &matters {
        until_job(&db, firm, *m, Duration::from_secs(20), "landed", |j| {
            j.landed_generation > 0 && j.run_status == RunStatus::Idle
        })
        .await;
    }
    let mut c = db.pool.get().await.unwrap();
    let mut waited = chrono::Duration::zero();
    for m in &matters {
        let runs = reads::runs(&mut c, firm, *m, 10).await.unwrap();
        assert!(
            runs.len() == 1 && runs[0].outcome == RunOutcome::Landed && runs[0].node_id == "node",
            "one run, landed by the node that claimed it: {runs:#?}"
        );
        waited = waited.max(runs[0].heartbeat_at - runs[0].started_at);
    }
    assert!(
        waited > chrono::Duration::milliseconds(2000),
        "the second claim waited a build for its builder and built for another (> 3 leases): {waited:?}"
    );
    assert_eq!(
        other.context().metrics.counters.builds_lease_expired.get(),
        0
    );
    assert_eq!(node.metrics().counters.builds_fenced.get(), 0);
}

/// A builder whose first `fast_for` builds take a millisecond and every later one `slow`.
struct Slowing {
    started: AtomicUsize,
    fast_for: usize,
    slow: Duration,
}

impl Builder for Slowing {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move {
            let n = self.started.fetch_add(1, Ordering::SeqCst);
            let delay = if n < self.fast_for {
                Duration::from_millis(1)
            } else {
                self.slow
            };
            tokio::time::sleep(delay).await;
            Ok(Frame::new(json!({ "token": ctx.token })))
        }
        .boxed_local()
    }
}

/// When builds suddenly slow down, the claims a node took while they were fast do not wait
/// behind them: past `Capacity::wait_limit` each is handed back by token (released, not
/// failed), and another node with a free builder serves it.
#[actix_rt::test]
async fn claims_held_when_builds_slow_down_are_handed_back_to_other_nodes() {
    let db = TestDb::new(16).await.unwrap();
    let mut s = settings(&db, "node");
    s.trigger.debounce_ms = 1;
    s.trigger.max_wait_ms = 10;
    s.sweeper.interval_seconds = 0.2;
    s.reconcile.after_seconds = 0.2;
    s.builders.concurrency = 1;
    s.builders.held_claims = Some(8);
    let slowing = Arc::new(Slowing {
        started: AtomicUsize::new(0),
        fast_for: 3,
        slow: Duration::from_secs(4),
    });
    let node = start(&db, s.clone(), slowing, true).await;
    s.node.id = "other".into();
    s.builders.concurrency = 4;
    let other = start(&db, s, Gate::new(true, Duration::ZERO).0, true).await;
    let firm = Uuid::new_v4();
    let matters: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    {
        let mut c = db.pool.get().await.unwrap();
        for m in &matters {
            t::demand(&mut c, firm, *m).await.unwrap();
        }
    }
    for m in &matters {
        node.nudge(Nudge::matter(firm, *m));
    }
    for m in &matters {
        until_job(&db, firm, *m, Duration::from_secs(60), "landed", |j| {
            j.landed_generation > 0 && j.run_status == RunStatus::Idle
        })
        .await;
    }
    let mut c = db.pool.get().await.unwrap();
    let mut handed_back = 0;
    for m in &matters {
        for r in reads::runs(&mut c, firm, *m, 20).await.unwrap() {
            assert!(
                !matches!(r.outcome, RunOutcome::Fenced | RunOutcome::LeaseExpired),
                "nothing fenced, no lease run out: {r:?}"
            );
            if r.outcome == RunOutcome::Released {
                assert_eq!(r.node_id, "node");
                assert!(
                    r.error
                        .as_deref()
                        .unwrap_or("")
                        .contains("waited too long for a builder"),
                    "{r:?}"
                );
                handed_back += 1;
            }
        }
    }
    eprintln!(
        "{handed_back} claims handed back; {} built by the other node",
        other.metrics().counters.builds_landed.get()
    );
    assert!(
        handed_back > 0,
        "the claims waiting behind a 4 s build were handed back"
    );
    assert!(
        other.metrics().counters.builds_landed.get() > 0,
        "another node served what was handed back"
    );
}
