//! Real `briefrail run` processes on one database, with the `command` builder: a node paused
//! with SIGSTOP is fenced, a node killed with SIGKILL is taken over, a node stopped with
//! SIGTERM hands its claim back. Exclusivity comes only from the ledger.

use briefrail::ledger::RunOutcome;
use std::time::Duration;

use crate::common::{NodeProcess, eventually, scratch_dir, spawn_node};
use briefrail::ledger::{RunRow, facts, reads};
use briefrail::testing::TestDb;
use uuid::Uuid;

async fn new_matter(db: &TestDb, firm: Uuid) -> Uuid {
    let matter = Uuid::new_v4();
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    matter
}

/// Waits (up to `secs`) for a run of the matter that satisfies `pred`.
async fn run_where(
    db: &TestDb,
    firm: Uuid,
    matter: Uuid,
    secs: u64,
    what: &str,
    pred: impl Fn(&RunRow) -> bool,
) -> RunRow {
    eventually(Duration::from_secs(secs), what, || async {
        let mut c = db.pool.get().await.unwrap();
        reads::runs(&mut c, firm, matter, 100)
            .await
            .unwrap()
            .into_iter()
            .find(|r| pred(r))
    })
    .await
}

/// `n` nodes with `timing` on a database of their own, and a new matter whose first build is
/// running (`held`).
struct Cluster {
    db: TestDb,
    nodes: Vec<NodeProcess>,
    firm: Uuid,
    matter: Uuid,
    held: RunRow,
}

impl Cluster {
    async fn with_a_running_build(name: &str, n: usize, timing: &[(&str, &str)]) -> Self {
        let db = TestDb::new(4).await.unwrap();
        let dir = scratch_dir(name);
        let nodes = (0..n)
            .map(|i| spawn_node(&db, &dir, &format!("node-{i}"), timing))
            .collect();
        let firm = Uuid::new_v4();
        let matter = new_matter(&db, firm).await;
        let held = run_where(&db, firm, matter, 20, "a running build", |r| {
            r.outcome == RunOutcome::Running
        })
        .await;
        Self {
            db,
            nodes,
            firm,
            matter,
            held,
        }
    }

    fn holder(&self) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id == self.held.node_id)
            .expect("the run names a node")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_node_is_fenced_and_then_works_normally() {
    let timing = [
        ("BRIEFRAIL__LEASE__SECONDS", "2"),
        ("BRIEFRAIL__LEASE__HEARTBEAT_SECONDS", "0.4"),
        ("BUILD_SECONDS", "3"),
    ];
    let Cluster {
        db,
        mut nodes,
        firm,
        matter,
        held,
    } = Cluster::with_a_running_build("sigstop", 3, &timing).await;
    let stopped = nodes.iter().position(|n| n.id == held.node_id).unwrap();
    nodes[stopped].signal("-STOP");

    // Another node takes the matter over; the stopped node resumes while that build still
    // runs (the row is `running` again, so only the claim's identity can refuse it).
    let taking_over = run_where(&db, firm, matter, 30, "another node to claim n+1", |r| {
        r.token > held.token && r.outcome == RunOutcome::Running
    })
    .await;
    assert_ne!(taking_over.node_id, held.node_id);
    nodes[stopped].signal("-CONT");
    let fenced = run_where(
        &db,
        firm,
        matter,
        20,
        "the stopped node's run to end fenced",
        |r| r.run_id == held.run_id && r.outcome == RunOutcome::Fenced,
    )
    .await;
    assert_eq!(fenced.token, held.token);
    let successor = run_where(&db, firm, matter, 30, "another node to land n+1", |r| {
        r.run_id == taking_over.run_id && r.outcome == RunOutcome::Landed
    })
    .await;
    assert_ne!(successor.node_id, held.node_id);
    let mut c = db.pool.get().await.unwrap();
    assert!(
        reads::frame_meta(&mut c, firm, matter, held.token)
            .await
            .unwrap()
            .is_none(),
        "no stale frame"
    );
    let frames = reads::frames(&mut c, firm, matter).await.unwrap();
    assert!(frames.windows(2).all(|w| w[0].generation < w[1].generation));
    drop(c);

    // The stopped node goes on working: with the others gone, it alone serves a new matter.
    let survivor = held.node_id.clone();
    nodes.retain(|n| n.id == survivor);
    let next = new_matter(&db, firm).await;
    let landed = run_where(
        &db,
        firm,
        next,
        30,
        "the resumed node to land a new matter",
        |r| r.outcome == RunOutcome::Landed,
    )
    .await;
    assert_eq!(landed.node_id, survivor);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_build_is_taken_over_within_lease_and_sweep() {
    let timing = [
        ("BRIEFRAIL__LEASE__SECONDS", "2"),
        ("BRIEFRAIL__LEASE__HEARTBEAT_SECONDS", "0.4"),
        ("BUILD_SECONDS", "1.5"),
    ];
    let cluster = Cluster::with_a_running_build("sigkill", 2, &timing).await;
    let Cluster {
        ref db,
        ref nodes,
        firm,
        matter,
        ref held,
    } = cluster;
    nodes[cluster.holder()].signal("-KILL");
    let killed_at = chrono::Utc::now();
    let successor = run_where(db, firm, matter, 20, "the other node to land", |r| {
        r.token > held.token && r.outcome == RunOutcome::Landed
    })
    .await;
    assert_ne!(successor.node_id, held.node_id);
    // lease (2 s) after the last heartbeat + one sweep interval (0.25 s) + the nudge: the
    // successor's claim starts no later than that (a second of slack for the machine).
    let waited = successor.started_at - killed_at;
    assert!(
        waited < chrono::Duration::milliseconds(3500),
        "took over after {waited}"
    );
    let old = run_where(db, firm, matter, 1, "the killed node's run", |r| {
        r.run_id == held.run_id
    })
    .await;
    assert_eq!(old.outcome, RunOutcome::LeaseExpired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_claim_back_and_exits_zero_within_grace() {
    let timing = [
        ("BRIEFRAIL__LEASE__SECONDS", "30"),
        ("BRIEFRAIL__SHUTDOWN__GRACE_SECONDS", "1"),
        ("BUILD_SECONDS", "4"),
    ];
    let mut cluster = Cluster::with_a_running_build("sigterm", 2, &timing).await;
    let victim = cluster.holder();
    let (firm, matter, held) = (cluster.firm, cluster.matter, cluster.held.clone());
    cluster.nodes[victim].signal("-TERM");
    let termed_at = chrono::Utc::now();
    let status = cluster.nodes[victim]
        .wait_exit(Duration::from_secs(5))
        .expect("exits within grace + a margin");
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        cluster.nodes[victim].log_text()
    );
    let db = &cluster.db;
    let successor = run_where(db, firm, matter, 20, "the other node to take over", |r| {
        r.token > held.token
    })
    .await;
    assert_ne!(successor.node_id, held.node_id);
    let waited = successor.started_at - termed_at;
    assert!(
        waited < chrono::Duration::seconds(5),
        "took over after {waited}, the lease is 30 s"
    );
    let old = run_where(db, firm, matter, 1, "the stopped node's run", |r| {
        r.run_id == held.run_id
    })
    .await;
    assert_eq!(
        (old.outcome, old.error.as_deref()),
        (RunOutcome::Released, Some("node shutting down"))
    );
    run_where(db, firm, matter, 20, "the successor to land", |r| {
        r.token > held.token && r.outcome == RunOutcome::Landed
    })
    .await;
}
