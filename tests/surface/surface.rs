//! The operator surface over a real socket: status codes, JSON shapes, metrics that move, auth;
//! and no password in any log line or error message.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use crate::common::{eventually, scratch_dir, spawn_node};
use briefrail::builders::brief::BriefBuilder;
use briefrail::config::{Settings, TransportKind};
use briefrail::ledger::facts;
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use uuid::Uuid;

const TOKEN: &str = "s3cret-admin-token";

/// A node serving the admin surface (bearer `TOKEN`) on a port of its own, on `db`, with the
/// embedded transport.
async fn admin_node(db: &TestDb) -> Node {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.transport.kind = TransportKind::Postgres;
    s.trigger.debounce_ms = 10;
    s.http.bind = "127.0.0.1:0".into();
    s.http.token = TOKEN.into();
    s.relay.poll_ms = 100;
    Node::builder(Arc::new(s), Arc::new(BriefBuilder))
        .pool(db.pool.clone())
        .surface(briefrail::surface::http::admin())
        .start()
        .await
        .unwrap()
}

/// The value of the metric `name` in a `/metrics` text (NaN when absent).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("NaN")
        .parse()
        .unwrap()
}

/// What `GET /metrics` answers.
async fn metrics_text(client: &awc::Client, base: &str) -> String {
    let mut r = client.get(format!("{base}/metrics")).send().await.unwrap();
    String::from_utf8(r.body().await.unwrap().to_vec()).unwrap()
}

/// Every counter and gauge operators alert on is exported.
fn assert_every_metric_is_exported(text: &str) {
    for name in [
        "briefrail_builds_started_total",
        "briefrail_builds_landed_total",
        "briefrail_builds_fenced_total",
        "briefrail_builds_failed_total",
        "briefrail_builds_lease_expired_total",
        "briefrail_claim_conflicts_total",
        "briefrail_demands_coalesced_total",
        "briefrail_outbox_backlog",
        "briefrail_outbox_oldest_unpublished_seconds",
        "briefrail_matters_unserved",
        "briefrail_dead_lettered_total",
        "briefrail_build_duration_seconds_count",
    ] {
        assert!(
            text.contains(&format!("\n{name} ")) || text.starts_with(&format!("{name} ")),
            "metric {name} missing:\n{text}"
        );
    }
}

/// The API refuses a request without a token or with a wrong one (401), a malformed firm
/// (400), an unknown matter (404) and a brief request for one (404); the console sends a
/// browser without a session to its login (303).
async fn assert_refusals(
    client: &awc::Client,
    base: &str,
    path: &str,
    firm: Uuid,
    matter: Uuid,
    auth: &(&str, String),
) {
    assert_eq!(
        client.get(path).send().await.unwrap().status(),
        401,
        "no token"
    );
    assert_eq!(
        client
            .get(path)
            .insert_header(("authorization", "Bearer wrong"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        awc::Client::builder()
            .disable_redirects()
            .finish()
            .get(base)
            .send()
            .await
            .unwrap()
            .status(),
        303,
        "the console sends a browser without a session to its login"
    );
    assert_eq!(
        client
            .get(format!("{base}/api/firms/nope/matters/{matter}"))
            .insert_header(auth.clone())
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
    let unknown = format!("{base}/api/firms/{firm}/matters/{}", Uuid::new_v4());
    assert_eq!(
        client
            .get(&unknown)
            .insert_header(auth.clone())
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        client
            .post(format!("{unknown}/brief-requests"))
            .insert_header(auth.clone())
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
}

/// A failed run whose node id and error hold markup: the status page lists it, escaped.
async fn assert_a_failed_runs_error_is_escaped(
    node: &Node,
    client: &awc::Client,
    base: &str,
    auth: &(&str, String),
) {
    use briefrail::ledger::transitions::{self as t, ClaimRequest, RetryPolicy};
    let (f, m) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = node.pool().get().await.unwrap();
    let claim = t::claim(
        &mut c,
        &ClaimRequest {
            firm_id: f,
            matter_id: m,
            lease: Duration::from_secs(60),
            node_id: "<b>node</b>".into(),
            trace_id: None,
            event_ids: vec![],
            kind: briefrail::ledger::ClaimKind::NewDemand,
            max_attempts: 5,
        },
    )
    .await
    .unwrap()
    .unwrap();
    let policy = RetryPolicy {
        max_attempts: 5,
        backoff_base: Duration::from_secs(60),
        backoff_max: Duration::from_secs(60),
    };
    t::fail(&mut c, &claim, "<script>alert(1)</script>", false, &policy)
        .await
        .unwrap();
    let mut r = client
        .get(base)
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let page = String::from_utf8(r.body().await.unwrap().to_vec()).unwrap();
    assert!(
        page.contains("Recent fenced, failed and expired runs"),
        "{page}"
    );
    assert!(
        page.contains(&m.to_string()),
        "the failed matter is listed: {page}"
    );
    assert!(
        page.contains("&#60;script&#62;") || page.contains("&lt;script&gt;"),
        "{page}"
    );
    assert!(
        !page.contains("<script>") && !page.contains("<b>node</b>"),
        "{page}"
    );
}

/// Waits (up to 20 s) until the event `requested` is consumed by the rail.
async fn request_consumed(db: &TestDb, requested: Uuid) {
    eventually(
        Duration::from_secs(20),
        "the brief request to be consumed",
        || async {
            let mut c = db.pool.get().await.ok()?;
            briefrail::ledger::inbox::consumed(
                &mut c,
                briefrail::ledger::inbox::BRIEF_RAIL,
                requested,
            )
            .await
            .ok()?
            .then_some(())
        },
    )
    .await;
}

#[actix_rt::test]
async fn the_admin_api_answers_over_a_real_socket() {
    let db = TestDb::new(8).await.unwrap();
    let node = admin_node(&db).await;
    let addr = node.surface_addr().expect("serves http");
    let base = format!("http://{addr}");
    let client = awc::Client::default();
    let auth = ("authorization", format!("Bearer {TOKEN}"));

    let r = client.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut r = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let ready: serde_json::Value = r.json().await.unwrap();
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["migrations"], "ok");

    let text = metrics_text(&client, &base).await;
    assert_every_metric_is_exported(&text);
    assert_eq!(metric(&text, "briefrail_builds_landed_total"), 0.0);

    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    let path = format!("{base}/api/firms/{firm}/matters/{matter}");

    assert_refusals(&client, &base, &path, firm, matter, &auth).await;

    let mut r = client
        .post(format!("{path}/brief-requests"))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let accepted: serde_json::Value = r.json().await.unwrap();
    assert!(
        accepted["event_id"]
            .as_str()
            .is_some_and(|s| Uuid::parse_str(s).is_ok())
    );

    // The request's demand is recorded first (else a build of the matter's creation, landed
    // before the request was consumed, would look like "served" and the request arrive after).
    let requested = Uuid::parse_str(accepted["event_id"].as_str().unwrap()).unwrap();
    request_consumed(&db, requested).await;
    let status = eventually(Duration::from_secs(20), "the matter to be served", || {
        let (client, path, auth) = (client.clone(), path.clone(), auth.clone());
        async move {
            let mut r = client.get(&path).insert_header(auth).send().await.ok()?;
            let v: serde_json::Value = r.json().await.ok()?;
            (v["unserved"] == false && v["latest_frame"].is_object()).then_some(v)
        }
    })
    .await;
    assert_eq!(status["title"], "Acme v. Globex");
    assert_eq!(status["job"]["run_status"], "idle");
    assert_eq!(status["runs"][0]["outcome"], "landed");
    assert!(status["latest_frame"]["generation"].as_i64().unwrap() > 0);

    let text = metrics_text(&client, &base).await;
    assert!(
        metric(&text, "briefrail_builds_landed_total") >= 1.0,
        "the landed counter moved"
    );
    assert!(metric(&text, "briefrail_build_duration_seconds_count") >= 1.0);
    assert_eq!(metric(&text, "briefrail_matters_unserved"), 0.0);

    let mut r = client
        .get(&base)
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let html = String::from_utf8(r.body().await.unwrap().to_vec()).unwrap();
    assert!(html.contains("<h1>Overview</h1>") && html.contains("Builds running now"));

    facts::archive_matter(&mut c, firm, matter).await.unwrap();
    assert_eq!(
        client
            .post(format!("{path}/brief-requests"))
            .insert_header(auth.clone())
            .send()
            .await
            .unwrap()
            .status(),
        409
    );
    // The status page (a template) shows a failed run's error escaped, never as markup.
    assert_a_failed_runs_error_is_escaped(&node, &client, &base, &auth).await;
    node.shutdown_within(Duration::from_secs(1)).await;
}

#[test]
fn a_node_bound_beyond_loopback_without_a_token_refuses_to_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .arg("run")
        .env("BRIEFRAIL__HTTP__BIND", "0.0.0.0:18080")
        .env("BRIEFRAIL__HTTP__TOKEN", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("http.token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_or_error_message_contains_a_password() {
    let db = TestDb::new(2).await.unwrap();
    let dir = scratch_dir("secrets");
    // Trust auth accepts any password, so the node runs with one in its URL and logs at debug.
    let with_pw = db.url.replace("postgres@", "postgres:hunter2-db-pw@");
    assert!(with_pw.contains("hunter2-db-pw"));
    let mut node = spawn_node(
        &db,
        &dir,
        "node-pw",
        &[
            ("BRIEFRAIL__DATABASE__URL", &with_pw),
            ("BRIEFRAIL__LOG__FORMAT", "json"),
        ],
    );
    let firm = Uuid::new_v4();
    let mut c = db.pool.get().await.unwrap();
    let matter = Uuid::new_v4();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "a build on the node with a password",
        || async {
            let mut c = db.pool.get().await.unwrap();
            briefrail::ledger::reads::job(&mut c, firm, matter)
                .await
                .unwrap()
                .filter(|j| j.landed_generation > 0)
                .map(|_| ())
        },
    )
    .await;
    node.signal("-TERM");
    node.wait_exit(Duration::from_secs(10)).expect("exits");
    let log = node.log_text();
    assert!(
        log.contains("frame landed"),
        "the node logged its work:\n{log}"
    );
    assert!(
        !log.contains("hunter2-db-pw"),
        "a log line shows the database password"
    );

    // A broker that refuses the password: the error names the problem, never the password.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .arg("run")
        .env("BRIEFRAIL__DATABASE__URL", &with_pw)
        .env("BRIEFRAIL__TRANSPORT__KIND", "amqp")
        .env(
            "BRIEFRAIL__TRANSPORT__AMQP_URL",
            "amqp://guest:wrong-broker-pw@127.0.0.1:5672/%2f",
        )
        .env("BRIEFRAIL__HTTP__BIND", "127.0.0.1:0")
        .env("BRIEFRAIL__LOG__LEVEL", "debug")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("broker"), "{all}");
    assert!(
        !all.contains("wrong-broker-pw") && !all.contains("hunter2-db-pw"),
        "{all}"
    );
    // And a config error about the URL itself.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .args([
            "status",
            "--firm",
            &firm.to_string(),
            "--matter",
            &matter.to_string(),
        ])
        .env(
            "BRIEFRAIL__DATABASE__URL",
            "postgres://app:hunter2-db-pw@127.0.0.1:5432",
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("database.url") && !err.contains("hunter2-db-pw"),
        "{err}"
    );
}

/// The firms API: it needs the token; a firm is named and weighed (a weight out of range or
/// an unknown key refused, naming it), paused by its name, shown paused with its unserved
/// matter, resumed; an unknown firm name is named as such.
async fn assert_firms_api(client: &awc::Client, base: &str, firm: Uuid, auth: &(&str, String)) {
    let r = client
        .get(format!("{base}/api/firms"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the firms API needs the token");
    let mut r = client
        .put(format!("{base}/api/firms/{firm}"))
        .insert_header(auth.clone())
        .send_json(&serde_json::json!({"name": "Acme LLP", "weight": 3}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let f: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (f["name"].as_str(), f["weight"].as_i64()),
        (Some("Acme LLP"), Some(3))
    );
    for (body, named) in [
        (serde_json::json!({"weight": 0}), "out of range"),
        (serde_json::json!({"colour": "red"}), "colour"),
    ] {
        let mut r = client
            .put(format!("{base}/api/firms/{firm}"))
            .insert_header(auth.clone())
            .send_json(&body)
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{body}");
        let e: serde_json::Value = r.json().await.unwrap();
        assert!(e["error"].as_str().unwrap().contains(named), "{e}");
    }
    // By its name; paused, then resumed.
    let mut r = client
        .post(format!("{base}/api/firms/Acme%20LLP/pause"))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let f: serde_json::Value = r.json().await.unwrap();
    assert_eq!(f["paused"], true);
    let mut r = client
        .get(format!("{base}/api/firms/{firm}"))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    let f: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (f["paused"].as_bool(), f["unserved"].as_i64()),
        (Some(true), Some(1))
    );
    client
        .post(format!("{base}/api/firms/{firm}/resume"))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    let r = client
        .get(format!("{base}/api/firms/Globex"))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422, "an unknown firm name is named as such");
}

/// The rail's limits toward the builder over the API: a count sets, null lifts, absent keeps,
/// a bad one is refused naming it; a builder's hold is shown and released; the limits need the
/// token.
async fn assert_rail_limits_api(
    db: &TestDb,
    client: &awc::Client,
    base: &str,
    auth: &(&str, String),
) {
    // Its limits toward the builder: a count sets, null lifts, absent keeps.
    let mut r = client
        .put(format!("{base}/api/rail/limits"))
        .insert_header(auth.clone())
        .send_json(&serde_json::json!({"max_running": 4, "starts_per_minute": 90}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (v["max_running"].as_u64(), v["starts_per_minute"].as_u64()),
        (Some(4), Some(90))
    );
    let mut r = client
        .put(format!("{base}/api/rail/limits"))
        .insert_header(auth.clone())
        .send_json(&serde_json::json!({"starts_per_minute": null}))
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (v["max_running"].as_u64(), v["starts_per_minute"].is_null()),
        (Some(4), true)
    );
    for (body, named) in [
        (serde_json::json!({"max_running": 0}), "max_running"),
        (serde_json::json!({"max_running": "ten"}), "max_running"),
        (serde_json::json!({"burst": 3}), "burst"),
        (serde_json::json!([1]), "JSON object"),
    ] {
        let mut r = client
            .put(format!("{base}/api/rail/limits"))
            .insert_header(auth.clone())
            .send_json(&body)
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{body}");
        let e: serde_json::Value = r.json().await.unwrap();
        assert!(e["error"].as_str().unwrap().contains(named), "{e}");
    }
    let mut c = db.pool.get().await.unwrap();
    briefrail::ledger::limits::hold_builder(&mut c, Duration::from_secs(60), "503 from the model")
        .await
        .unwrap();
    drop(c);
    let mut r = client
        .get(format!("{base}/api/rail"))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["limits"]["builder_held_reason"], "503 from the model");
    assert!(
        v["limits"]["builder_held_seconds"].as_f64().unwrap() > 50.0,
        "{v}"
    );
    let mut r = client
        .post(format!("{base}/api/rail/release-builder"))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["builder_held_seconds"].is_null(), "{v}");
    let r = client
        .put(format!("{base}/api/rail/limits"))
        .send_json(&serde_json::json!({"max_running": 1}))
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the limits need the token");
}

/// Who is served next, over the API: a firm named and weighed, paused and resumed, the rail
/// paused, a Brief requested as background work, bad input named, and the per-firm metrics.
#[actix_rt::test]
async fn the_firms_api_names_pauses_and_reports_firms() {
    let db = TestDb::new(8).await.unwrap();
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.transport.kind = TransportKind::Postgres;
    s.http.bind = "127.0.0.1:0".into();
    s.http.token = TOKEN.into();
    let node = Node::builder(Arc::new(s), Arc::new(BriefBuilder))
        .pool(db.pool.clone())
        .surface(briefrail::surface::http::admin())
        .start()
        .await
        .unwrap();
    let base = format!("http://{}", node.surface_addr().unwrap());
    let client = awc::Client::default();
    let auth = ("authorization", format!("Bearer {TOKEN}"));
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    drop(c);

    assert_firms_api(&client, &base, firm, &auth).await;

    // The rail.
    for (action, paused) in [("pause", true), ("resume", false)] {
        client
            .post(format!("{base}/api/rail/{action}"))
            .insert_header(auth.clone())
            .send()
            .await
            .unwrap();
        let mut r = client
            .get(format!("{base}/api/rail"))
            .insert_header(auth.clone())
            .send()
            .await
            .unwrap();
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["paused"], paused);
    }
    // Its limits toward the builder: a count sets, null lifts, absent keeps.
    assert_rail_limits_api(&db, &client, &base, &auth).await;

    // A Brief requested as background work records its class; a class that is none is named.
    let mut r = client
        .post(format!(
            "{base}/api/firms/{firm}/matters/{matter}/brief-requests?class=background"
        ))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["class"], "background");
    let mut r = client
        .post(format!(
            "{base}/api/firms/{firm}/matters/{matter}/brief-requests?class=urgent"
        ))
        .insert_header(auth.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let e: serde_json::Value = r.json().await.unwrap();
    assert!(e["error"].as_str().unwrap().contains("urgent"), "{e}");

    // The metrics name the firm once it has waiting work; the global alert gauge is there.
    let mut r = client.get(format!("{base}/metrics")).send().await.unwrap();
    let text = String::from_utf8(r.body().await.unwrap().to_vec()).unwrap();
    assert!(
        text.contains("\nbriefrail_oldest_interactive_demand_seconds "),
        "{text}"
    );
    node.shutdown().await;
}

/// A node `api-node` serving the admin surface, whose builder fails every build (so a matter
/// runs out of retries), with the embedded transport.
async fn flaky_api_node(db: &TestDb) -> Node {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.transport.kind = TransportKind::Postgres;
    s.trigger.debounce_ms = 5;
    s.relay.poll_ms = 50;
    s.http.bind = "127.0.0.1:0".into();
    s.http.token = TOKEN.into();
    s.node.id = "api-node".into();
    Node::builder(
        Arc::new(s),
        Arc::new(common::flaky::Flaky {
            poisoned: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        }),
    )
    .pool(db.pool.clone())
    .surface(briefrail::surface::http::admin())
    .start()
    .await
    .unwrap()
}

/// Waits (up to 20 s) until `acme` is fresh and `stuck` is out of retries.
async fn settled(db: &TestDb, firm: Uuid, acme: Uuid, stuck: Uuid) {
    use briefrail::ledger::matters::MatterState;
    eventually(Duration::from_secs(20), "the matters settled", || {
        let db = &db;
        async move {
            let mut c = db.pool.get().await.unwrap();
            let a = briefrail::ledger::matters::state_of(&mut c, firm, acme, 5)
                .await
                .unwrap();
            let p = briefrail::ledger::matters::state_of(&mut c, firm, stuck, 5)
                .await
                .unwrap();
            (a == Some(MatterState::Fresh) && p == Some(MatterState::RetriesExhausted))
                .then_some(())
        }
    })
    .await;
}

/// Every route of the operator API answers 401 without the token.
async fn assert_every_route_wants_the_token(
    client: &awc::Client,
    base: &str,
    firm: Uuid,
    stuck: Uuid,
) {
    for (method, path) in [
        ("GET", "/api/matters".to_owned()),
        ("GET", "/api/dead-letters".to_owned()),
        ("GET", "/api/nodes".to_owned()),
        ("POST", format!("/api/matters/{firm}/{stuck}/retry")),
        ("POST", "/api/matters/retry".to_owned()),
        ("POST", "/api/dead-letters/discard".to_owned()),
    ] {
        let r = client
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{method} {path}");
    }
}

/// The console's pages for scripts: matters (filters, pages, totals), one matter's retry, dead
/// letters and nodes, every route behind the token, every bad value named in JSON.
#[actix_rt::test]
async fn the_operator_api_lists_and_retries_with_the_pages_filters() {
    let db = TestDb::new(8).await.unwrap();
    let node = flaky_api_node(&db).await;
    let base = format!("http://{}", node.surface_addr().unwrap());
    let client = awc::Client::default();
    let auth = ("authorization", format!("Bearer {TOKEN}"));
    let firm = Uuid::new_v4();
    let (acme, stuck) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, acme, "Acme v. Globex")
        .await
        .unwrap();
    facts::create_matter(&mut c, firm, stuck, "Poisoned v. Initech")
        .await
        .unwrap();
    drop(c);
    settled(&db, firm, acme, stuck).await;

    // Every route wants the token.
    assert_every_route_wants_the_token(&client, &base, firm, stuck).await;
    let call = |method: &'static str, path: String| {
        let client = &client;
        let auth = auth.clone();
        let base = &base;
        async move {
            let mut r = client
                .request(method.parse().unwrap(), format!("{base}{path}"))
                .insert_header(auth)
                .send()
                .await
                .unwrap();
            let v: serde_json::Value = r.json().await.unwrap();
            (r.status().as_u16(), v)
        }
    };
    let get = |path: String| call("GET", path);
    let post = |path: String| call("POST", path);
    let (status, v) = get("/api/matters?state=retries_exhausted".into()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["total"], 1, "{v}");
    assert_eq!(v["matters"][0]["matter_id"], stuck.to_string(), "{v}");
    assert_eq!(v["matters"][0]["state"], "retries_exhausted", "{v}");
    let (_, v) = get(format!("/api/matters?firm={firm}&per_page=1")).await;
    assert_eq!(
        (&v["total"], &v["more"]),
        (&serde_json::json!(2), &serde_json::json!(true)),
        "{v}"
    );
    assert_eq!(v["matters"].as_array().map(Vec::len), Some(1), "{v}");
    for (path, named) in [
        ("/api/matters?state=stuck", "state \"stuck\" is not one of"),
        ("/api/matters?page=abc", "page"),
        ("/api/matters?colour=red", "colour"),
        (
            "/api/matters?per_page=100000",
            "per_page 100000 is out of range",
        ),
        ("/api/dead-letters?all=maybe", "all \"maybe\""),
    ] {
        let (status, e) = get(path.into()).await;
        assert_eq!(status, 422, "{path}: {e}");
        assert!(
            e["error"].as_str().is_some_and(|t| t.contains(named)),
            "{path}: {e}"
        );
    }
    let (status, v) = get("/api/dead-letters".into()).await;
    assert_eq!((status, &v["total"]), (200, &serde_json::json!(0)), "{v}");
    let (_, v) = get("/api/nodes".into()).await;
    assert!(
        v["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["node_id"] == "api-node")),
        "{v}"
    );

    // One matter's retry: a fresh one has nothing to retry (409), a bad id is named, an
    // unknown matter is 404, the exhausted one gets its demand.
    let (status, e) = post(format!("/api/matters/{firm}/{acme}/retry")).await;
    assert_eq!(status, 409, "{e}");
    let (status, e) = post(format!("/api/matters/nope/{acme}/retry")).await;
    assert_eq!(status, 422, "{e}");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("firm \"nope\" is not a UUID"),
        "{e}"
    );
    let (status, e) = post(format!("/api/matters/{firm}/{}/retry", Uuid::new_v4())).await;
    assert_eq!(status, 404, "{e}");
    let (status, v) = post(format!("/api/matters/{firm}/{stuck}/retry")).await;
    assert_eq!(status, 202, "{v}");
    assert!(v["event_id"].as_str().is_some(), "{v}");
    node.shutdown().await;
}
