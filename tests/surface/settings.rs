//! Settings at the edges of what `validate` accepts: values past a documented bound are refused
//! naming the key and the range, and any value it accepts starts a node that serves a matter
//! and stops cleanly (each key at its lower and upper bound, and every key at its upper bound
//! at once).

use std::sync::Arc;
use std::time::{Duration, Instant};

use briefrail::actors::{MatterKey, Nudge};
use briefrail::builders::{BuildContext, Builder};
use briefrail::config::{BOUNDS, Bound, Settings};
use briefrail::ledger::transitions as t;
use briefrail::ledger::{Frame, RunStatus, reads};
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::json;
use uuid::Uuid;

/// A builder that returns at once.
struct Instant0;

impl Builder for Instant0 {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move { Ok(Frame::new(json!({ "token": ctx.token }))) }.boxed_local()
    }
}

/// Sets one value of the settings.
type SetOne = Box<dyn Fn(&mut Settings)>;

/// The reported values of the issue: each was accepted and crashed or silently stopped a node.
#[test]
fn values_that_crash_a_node_are_refused_naming_the_key_and_the_range() {
    let cases: Vec<(&str, SetOne)> = vec![
        (
            "trigger.idle_seconds",
            Box::new(|s| s.trigger.idle_seconds = 1e20),
        ),
        ("lease.seconds", Box::new(|s| s.lease.seconds = 1e30)),
        (
            "reconcile.after_seconds",
            Box::new(|s| s.reconcile.after_seconds = 1e300),
        ),
        (
            "builder.timeout_seconds",
            Box::new(|s| s.builder.timeout_seconds = 1e30),
        ),
        (
            "shutdown.grace_seconds",
            Box::new(|s| s.shutdown.grace_seconds = 1e20),
        ),
        (
            "trigger.max_wait_ms",
            Box::new(|s| s.trigger.max_wait_ms = u64::MAX),
        ),
        (
            "database.lock_timeout_ms",
            Box::new(|s| s.database.lock_timeout_ms = 3_000_000_000),
        ),
    ];
    for (key, set) in cases {
        let mut s = Settings::defaults();
        set(&mut s);
        let e = s.validate().expect_err(key);
        assert_eq!(e.key, key, "{e}");
        assert!(e.problem.contains("out of range"), "{e}");
    }
}

/// Through the loader too: an environment variable past its bound names the key and range.
#[test]
fn a_loaded_value_past_its_bound_names_the_range() {
    let e = Settings::load_with_env(
        None,
        [(
            "BRIEFRAIL__TRIGGER__IDLE_SECONDS".to_string(),
            "1e20".to_string(),
        )],
    )
    .expect_err("1e20 seconds");
    assert_eq!(e.key, "trigger.idle_seconds");
    assert!(
        e.to_string().contains("is out of range: "),
        "names the range: {e}"
    );
}

#[test]
fn a_node_id_with_control_characters_is_refused() {
    for id in ["node\0one", "node\none", "node\u{7f}"] {
        let mut s = Settings::defaults();
        s.node.id = id.into();
        let e = s.validate().expect_err(id);
        assert_eq!(e.key, "node.id", "{e}");
    }
}

/// Settings built in code without `validate` are checked when the node starts: a typed error,
/// never a panic of an actor.
#[actix_rt::test]
async fn a_node_refuses_settings_past_their_bounds_at_start() {
    let db = TestDb::new(4).await.unwrap();
    let mut s = base(&db);
    s.trigger.idle_seconds = 1e20;
    let r = Node::builder(Arc::new(s), Arc::new(Instant0))
        .pool(db.pool.clone())
        .without_transport()
        .start()
        .await;
    let e = r.err().expect("refused at start");
    assert!(e.to_string().contains("trigger.idle_seconds"), "{e}");
}

fn base(db: &TestDb) -> Settings {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.node.id = format!("settings-{}", &Uuid::new_v4().simple().to_string()[..6]);
    s.trigger.debounce_ms = 5;
    s.trigger.max_wait_ms = 50;
    s.sweeper.interval_seconds = 0.2;
    // The transport runs too (the relay's settings apply); the reconciler is the amqp
    // transport's, which `one_key_at` picks for its key.
    s.transport.kind = briefrail::config::TransportKind::Postgres;
    s.transport.prefix = format!("settings-{}", &Uuid::new_v4().simple().to_string()[..8]);
    s
}

/// The keys a node without an HTTP surface does not use, or (`otel.*`) uses only with a
/// collector: their bounds are checked by `validate`, not by serving a matter.
fn exercised_by_a_node(b: &Bound) -> bool {
    !b.key.starts_with("otel.") && b.key != "http.session_minutes"
}

/// Starts a node on `s` with its transport (opening its own pool, so the session settings
/// apply), records a demand recorded long enough ago that no debounce window is left, and
/// waits for it to be served; then the node's own shutdown (`shutdown.grace_seconds`) must end within seconds.
async fn serves_and_stops(db: &TestDb, s: Settings, what: &str) {
    let s = Arc::new(s);
    let node = Node::builder(s.clone(), Arc::new(Instant0))
        .start()
        .await
        .unwrap_or_else(|e| panic!("{what}: the node starts: {e}"));
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    {
        let mut c = db.pool.get().await.unwrap();
        t::demand(&mut c, firm, matter).await.unwrap();
    }
    // Past the longest debounce and cap: the demand is a backlog, claimed at once.
    let ago = Duration::from_millis(s.trigger.debounce_ms.max(s.trigger.max_wait_ms) + 1000);
    db.advance_ledger_clock(ago).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        node.nudge(Nudge {
            key: MatterKey {
                firm_id: firm,
                matter_id: matter,
            },
            event_ids: vec![],
            traceparent: None,
            recorded_ago: Some(ago),
            class: briefrail::ledger::DemandClass::Interactive,
        });
        let mut c = db.pool.get().await.unwrap();
        let job = reads::job(&mut c, firm, matter).await.unwrap();
        drop(c);
        if job
            .as_ref()
            .is_some_and(|j| j.landed_generation >= 2 && j.run_status == RunStatus::Idle)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the matter is never served: {job:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The row is idle a moment before the node lets go of its claim.
    while node.context().runners.held() > 0 {
        assert!(
            Instant::now() < deadline,
            "{what}: the claim is never let go"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopped = tokio::time::timeout(Duration::from_secs(10), node.shutdown()).await;
    assert_eq!(
        stopped,
        Ok(true),
        "{what}: the node stops cleanly and drained"
    );
}

/// The one generator of this property: each bound's two ends, one key at a time, on the
/// defaults (keys that must stay ordered against another, such as the heartbeat within the
/// lease, are left out when `validate` refuses the pair: only accepted settings are run).
fn one_key_at(b: &Bound, v: f64, db: &TestDb) -> Option<Settings> {
    let mut s = base(db);
    // The node's pool is its own; keep the server's connection limit out of reach.
    s.database.pool_size = 8;
    (b.set)(&mut s, v);
    if b.key == "trigger.debounce_ms" {
        s.trigger.max_wait_ms = s.trigger.max_wait_ms.max(s.trigger.debounce_ms);
    }
    if b.key == "retry.backoff_base_seconds" {
        s.retry.backoff_max_seconds = s.retry.backoff_max_seconds.max(v);
    }
    if b.key == "database.batch_lanes" {
        s.database.pool_size = s.database.pool_size.max(s.database.batch_lanes);
    }
    if b.key == "reconcile.after_seconds" {
        s.transport.kind = briefrail::config::TransportKind::Amqp;
    }
    if b.key == "builders.concurrency" {
        s.builders.held_claims = None;
    }
    s.validate().ok().map(|()| s)
}

#[actix_rt::test]
async fn every_key_at_its_upper_bound_at_once_serves_and_stops() {
    let db = TestDb::new(4).await.unwrap();
    let mut s = base(&db);
    for b in BOUNDS.iter().filter(|b| exercised_by_a_node(b)) {
        (b.set)(&mut s, b.max);
    }
    // The heartbeat must stay shorter than the lease: its default, a third.
    s.lease.heartbeat_seconds = None;
    s.validate().expect("every upper bound at once is valid");
    serves_and_stops(&db, s, "every key at its upper bound").await;
}

#[actix_rt::test]
async fn each_key_at_its_upper_bound_serves_and_stops() {
    each_key_at(|b| b.max, "upper").await;
}

#[actix_rt::test]
async fn each_key_at_its_lower_bound_serves_and_stops() {
    each_key_at(|b| b.min, "lower").await;
}

async fn each_key_at(end: fn(&Bound) -> f64, which: &str) {
    let mut ran = 0;
    for b in BOUNDS.iter().filter(|b| exercised_by_a_node(b)) {
        let db = TestDb::new(2).await.unwrap();
        let v = end(b);
        let Some(s) = one_key_at(b, v, &db) else {
            continue;
        };
        serves_and_stops(&db, s, &format!("{} = {v} ({which} bound)", b.key)).await;
        ran += 1;
    }
    assert!(ran >= 20, "only {ran} keys ran at their {which} bound");
}

/// An actor that panics is not hidden behind a ready `/readyz`: the node answers 503 naming it.
#[actix_rt::test]
async fn a_panicked_supervisor_makes_readyz_answer_503_naming_it() {
    let db = TestDb::new(4).await.unwrap();
    let mut s = base(&db);
    s.transport.kind = briefrail::config::TransportKind::Postgres;
    s.http.bind = "127.0.0.1:0".into();
    let node = Node::builder(Arc::new(s), Arc::new(Instant0))
        .pool(db.pool.clone())
        .without_transport()
        .surface(briefrail::surface::http::admin())
        .start()
        .await
        .unwrap();
    let url = format!(
        "http://{}/readyz",
        node.surface_addr().expect("serves http")
    );
    let client = awc::Client::default();
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "ready before the panic");
    node.crash_supervisor();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut r = client.get(&url).send().await.unwrap();
        if r.status() == 503 {
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["ready"], false, "{body}");
            assert!(
                body["actors"]
                    .as_str()
                    .is_some_and(|a| a.contains("supervisor")),
                "names the actor: {body}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "/readyz stays {}", r.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown_within(Duration::from_secs(1)).await;
}

/// A pool whose every connection fails its setup (here a `lock_timeout` Postgres refuses, set
/// through `PoolOptions` in code, past what `validate` accepts) fails a checkout naming the
/// setup's error, not only "Timed out in bb8".
#[actix_rt::test]
async fn a_timed_out_checkout_names_the_last_connection_error() {
    let db = TestDb::new(1).await.unwrap();
    let mut opts = briefrail::db::PoolOptions::new(db.url.clone()).size(1);
    opts.lock_timeout = Duration::from_millis(3_000_000_000);
    opts.connection_timeout = Duration::from_secs(1);
    let pool = briefrail::db::connect(&opts).await.unwrap();
    let e = match pool.get().await {
        Ok(_) => panic!("no connection can be set up"),
        Err(e) => briefrail::Error::from(e),
    };
    let text = e.to_string();
    assert!(
        text.contains("Timed out in bb8; last connection error:"),
        "{text}"
    );
    assert!(
        text.contains("lock_timeout"),
        "names the setting Postgres refused: {text}"
    );
}

/// The binary exits 2 on a value past its bound, naming the key and the range in one line.
#[test]
fn the_binary_exits_2_naming_the_key_and_the_range() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .args(["nodes"])
        .env("BRIEFRAIL__TRIGGER__IDLE_SECONDS", "1e20")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("trigger.idle_seconds = 1e20 is out of range: 0.01 to 86400 seconds"),
        "{stderr}"
    );
}
