//! Traces out (`[otel] endpoint`): a build's span reaches an OTLP/HTTP collector in the trace of
//! the upload that caused it, linked to every demand it served; a collector that is away costs
//! one warning, never a Brief.
//!
//! The collector is this test's own: an HTTP server on port 0 that decodes the OTLP JSON it is
//! sent. The node is real (real Postgres, the embedded transport); the first test adds the
//! library's layer to a subscriber as an embedding application does, the others run
//! `briefrail run` as users do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{self, eventually, scratch_dir, spawn_node};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use briefrail::builders::brief::BriefBuilder;
use briefrail::builders::{BuildContext, Builder};
use briefrail::config::{Settings, TransportKind};
use briefrail::ledger::facts;
use briefrail::ledger::outbox::{self, NewEvent};
use briefrail::ledger::{EventName, Frame, RunOutcome, reads};
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use briefrail::trace::Traceparent;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::Value;
use tracing_subscriber::prelude::*;
use uuid::Uuid;

/// One request the collector received.
#[derive(Debug, Clone)]
struct Request {
    path: String,
    content_type: String,
    body: Value,
}

/// A span as the collector decoded it.
#[derive(Debug, Clone)]
struct Span {
    trace_id: String,
    span_id: String,
    parent_span_id: Option<String>,
    name: String,
    attributes: HashMap<String, String>,
    /// `(traceId, spanId)` of each link, in order.
    links: Vec<(String, String)>,
    status_code: Option<i64>,
    status_message: Option<String>,
    events: Vec<String>,
}

/// The test's OTLP/HTTP collector.
struct Collector {
    url: String,
    got: Arc<Mutex<Vec<Request>>>,
    stop: actix_web::dev::ServerHandle,
}

impl Collector {
    fn start() -> Self {
        let got: Arc<Mutex<Vec<Request>>> = Arc::default();
        let state = got.clone();
        let server = HttpServer::new(move || {
            let state = state.clone();
            App::new()
                .app_data(web::PayloadConfig::new(64 << 20))
                .default_service(web::to(move |req: HttpRequest, body: web::Bytes| {
                    let state = state.clone();
                    async move {
                        let content_type = req
                            .headers()
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        state.lock().unwrap().push(Request {
                            path: req.path().to_owned(),
                            content_type,
                            body,
                        });
                        HttpResponse::Ok().json(serde_json::json!({}))
                    }
                }))
        })
        .workers(1)
        .bind("127.0.0.1:0")
        .unwrap();
        let addr = server.addrs()[0];
        let server = server.run();
        let stop = server.handle();
        actix_rt::spawn(server);
        Self {
            url: format!("http://{addr}"),
            got,
            stop,
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }

    /// Every span received so far, decoded from the OTLP JSON.
    fn spans(&self) -> Vec<Span> {
        let mut out = Vec::new();
        for r in self.requests() {
            for rs in r.body["resourceSpans"].as_array().into_iter().flatten() {
                assert_eq!(
                    rs["resource"]["attributes"][0]["key"], "service.name",
                    "{rs}"
                );
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for s in ss["spans"].as_array().into_iter().flatten() {
                        out.push(decode(s));
                    }
                }
            }
        }
        out
    }
}

fn decode(s: &Value) -> Span {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let attributes = s["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let v = &a["value"];
            let value = text(&v["stringValue"])
                .or_else(|| text(&v["intValue"]))
                .or_else(|| v["boolValue"].as_bool().map(|b| b.to_string()))
                .or_else(|| v["doubleValue"].as_f64().map(|d| d.to_string()))
                .unwrap_or_else(|| panic!("an attribute value of no known type: {a}"));
            (text(&a["key"]).expect("attribute key"), value)
        })
        .collect();
    Span {
        trace_id: text(&s["traceId"]).expect("traceId"),
        span_id: text(&s["spanId"]).expect("spanId"),
        parent_span_id: text(&s["parentSpanId"]),
        name: text(&s["name"]).expect("name"),
        attributes,
        links: s["links"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                (
                    text(&l["traceId"]).expect("link traceId"),
                    text(&l["spanId"]).expect("link spanId"),
                )
            })
            .collect(),
        status_code: s["status"]["code"].as_i64(),
        status_message: text(&s["status"]["message"]),
        events: s["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| text(&e["name"]))
            .collect(),
    }
}

fn link_of(tp: &Traceparent) -> (String, String) {
    (common::hex(&tp.trace_id), common::hex(&tp.span_id))
}

/// A node on `db` with the embedded transport, exporting to `collector`, with the library's
/// layer on this thread's subscriber (the node's builds run on this thread's arbiter).
async fn traced_node(
    db: &TestDb,
    collector: &Collector,
    builder: Arc<dyn Builder>,
) -> (
    Node,
    briefrail::otel::OtelHandle,
    tracing::subscriber::DefaultGuard,
) {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.node.id = "otel-1".into();
    s.transport.kind = TransportKind::Postgres;
    // A window wide enough that uploads recorded a few milliseconds apart share one build.
    s.trigger.debounce_ms = 1000;
    s.trigger.max_wait_ms = 3000;
    s.otel.endpoint = SecretUrl::new(collector.url.clone());
    s.otel.batch_delay_ms = 100;
    s.validate().expect("valid settings");
    let (layer, handle) = briefrail::otel::start(&s.otel, Some("otel-1"))
        .expect("the exporter starts")
        .expect("an endpoint is set");
    let guard = tracing::subscriber::set_default(
        tracing_subscriber::registry().with(layer.with_filter(briefrail::otel::filter())),
    );
    let node = Node::builder(Arc::new(s), builder)
        .pool(db.pool.clone())
        .start()
        .await
        .expect("node starts");
    (node, handle, guard)
}

/// The frame after `after` (a generation), once it lands.
async fn frame_after(
    db: &TestDb,
    firm: Uuid,
    matter: Uuid,
    after: i64,
) -> briefrail::ledger::FrameMeta {
    eventually(Duration::from_secs(30), "the next frame", || async {
        let mut c = db.pool.get().await.unwrap();
        reads::latest_frame_meta(&mut c, firm, matter)
            .await
            .unwrap()
            .filter(|f| f.generation > after)
    })
    .await
}

/// The build span of `run_id`, once the collector has it.
async fn build_span(collector: &Collector, run_id: Uuid) -> Span {
    eventually(
        Duration::from_secs(20),
        "the build's span at the collector",
        || async {
            collector.spans().into_iter().find(|s| {
                s.name == "build" && s.attributes.get("run_id") == Some(&run_id.to_string())
            })
        },
    )
    .await
}

#[actix_rt::test]
async fn a_build_span_joins_the_uploads_trace_and_links_every_demand_it_served() {
    let db = TestDb::new(4).await.unwrap();
    let collector = Collector::start();
    let (node, otel, _subscriber) = traced_node(&db, &collector, Arc::new(BriefBuilder)).await;
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Traced v. Linked")
        .await
        .unwrap();
    let first = frame_after(&db, firm, matter, 0).await;

    // Three uploads, each recorded with its own trace context (what an application's upload
    // handler passes from its span), a few milliseconds apart: one build serves them all.
    let uploads: Vec<Traceparent> = (0..3).map(|_| Traceparent::new_root()).collect();
    let mut events = Vec::new();
    for tp in &uploads {
        let e = NewEvent::new(firm, matter, EventName::DOCUMENT_UPLOADED)
            .unwrap()
            .payload(serde_json::json!({ "document_id": Uuid::new_v4() }))
            .traceparent(Some(*tp));
        events.push(outbox::record_event(&mut c, &e).await.unwrap());
    }
    let second = frame_after(&db, firm, matter, first.generation).await;
    let run = reads::run(&mut c, second.run_id).await.unwrap().unwrap();
    let served: Vec<Uuid> = run.event_ids.iter().flatten().copied().collect();
    let mut sorted = served.clone();
    sorted.sort();
    let mut expected = events.clone();
    expected.sort();
    assert_eq!(sorted, expected, "one build served the three uploads");
    assert!(otel.flush().await, "the exporter flushes");

    let span = build_span(&collector, second.run_id).await;
    let attr = |k: &str| span.attributes.get(k).cloned().unwrap_or_default();
    assert_eq!(attr("firm_id"), firm.to_string());
    assert_eq!(attr("matter_id"), matter.to_string());
    assert_eq!(attr("token"), second.generation.to_string());
    assert_eq!(attr("outcome"), "landed");
    assert_eq!(attr("node_id"), "otel-1");
    for special in ["traceparent", "links", "error"] {
        assert!(
            !span.attributes.contains_key(special),
            "{special} is not an attribute"
        );
    }
    // The trace of the upload that caused it, as a child of the upload's span...
    assert_eq!(span.trace_id, common::hex(&uploads[0].trace_id));
    assert_eq!(span.parent_span_id, Some(common::hex(&uploads[0].span_id)));
    assert_eq!(span.span_id.len(), 16);
    assert!(
        uploads
            .iter()
            .all(|u| common::hex(&u.span_id) != span.span_id),
        "a span id of its own"
    );
    // ...linked to exactly the demands the run served, by their ledger trace context.
    let ledger: Vec<(String, String)> = reads::event_traceparents(&mut c, &served)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, tp)| link_of(&Traceparent::parse(&tp.expect("recorded with one")).unwrap()))
        .collect();
    assert_eq!(
        span.links, ledger,
        "links are the served events' traceparents"
    );
    assert_eq!(span.links, uploads.iter().map(link_of).collect::<Vec<_>>());
    assert_eq!(
        span.status_code, None,
        "a landed build sets no error status"
    );
    assert!(
        span.events.iter().any(|e| e == "frame landed"),
        "{:?}",
        span.events
    );

    // The first build served the matter's creation: its trace is that event's.
    let created = reads::run(&mut c, first.run_id).await.unwrap().unwrap();
    let created_ids: Vec<Uuid> = created.event_ids.iter().flatten().copied().collect();
    let created_tp = reads::event_traceparents(&mut c, &created_ids)
        .await
        .unwrap();
    let created_tp = Traceparent::parse(created_tp[0].1.as_deref().unwrap()).unwrap();
    let span1 = build_span(&collector, first.run_id).await;
    assert_eq!(span1.trace_id, common::hex(&created_tp.trace_id));
    assert_eq!(span1.links, vec![link_of(&created_tp)]);

    for r in collector.requests() {
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.content_type, "application/json");
    }
    assert_eq!(otel.stats().dropped, 0);
    assert_eq!(otel.stats().failed, 0);
    node.shutdown().await;
    collector.stop.stop(false).await;
}

/// Fails every build with an error that names a URL with a password.
struct Failing;

impl Builder for Failing {
    fn build<'a>(&'a self, _ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async {
            Err(briefrail::Error::Build {
                message: "the panel at http://panel:hunter2@models/ is down".into(),
                permanent: false,
            })
        }
        .boxed_local()
    }
}

#[actix_rt::test]
async fn a_failed_build_is_an_error_span() {
    let db = TestDb::new(4).await.unwrap();
    let collector = Collector::start();
    let (node, otel, _subscriber) = traced_node(&db, &collector, Arc::new(Failing)).await;
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Failing v. Traced")
        .await
        .unwrap();
    let run = eventually(Duration::from_secs(30), "a failed run", || async {
        let mut c = db.pool.get().await.unwrap();
        reads::runs(&mut c, firm, matter, 10)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.outcome == RunOutcome::Failed)
    })
    .await;
    assert!(otel.flush().await);
    let span = build_span(&collector, run.run_id).await;
    assert_eq!(
        span.attributes.get("outcome").map(String::as_str),
        Some("failed")
    );
    assert_eq!(span.status_code, Some(2), "STATUS_CODE_ERROR");
    let message = span.status_message.unwrap_or_default();
    assert!(message.contains("is down"), "{message}");
    assert!(
        !message.contains("hunter2"),
        "the password is redacted: {message}"
    );
    node.shutdown().await;
    collector.stop.stop(false).await;
}

async fn matter_with_a_document(db: &TestDb, firm: Uuid, title: &str) -> Uuid {
    let mut c = db.pool.get().await.unwrap();
    let matter = Uuid::new_v4();
    facts::create_matter(&mut c, firm, matter, title)
        .await
        .unwrap();
    common::add_document(&mut c, firm, matter, "Deposition").await;
    matter
}

async fn landed(db: &TestDb, firm: Uuid, matter: Uuid) -> Option<briefrail::ledger::FrameRow> {
    let mut c = db.pool.get().await.unwrap();
    reads::latest_frame(&mut c, firm, matter).await.unwrap()
}

#[actix_rt::test]
async fn with_the_collector_unreachable_the_node_still_lands_the_brief_and_warns_once() {
    let db = TestDb::new(4).await.unwrap();
    let dir = scratch_dir("otel-down");
    // A port nobody listens on: every export is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://otel:s3cr3t@127.0.0.1:{port}");
    let mut node = spawn_node(
        &db,
        &dir,
        "otel-down-1",
        &[
            ("BRIEFRAIL__BUILDER__KIND", "brief"),
            ("BRIEFRAIL__OTEL__ENDPOINT", &endpoint),
            ("BRIEFRAIL__OTEL__BATCH_DELAY_MS", "50"),
            ("BRIEFRAIL__OTEL__TIMEOUT_SECONDS", "1"),
        ],
    );
    let firm = Uuid::new_v4();
    let mut matters = Vec::new();
    for i in 0..3 {
        matters.push(matter_with_a_document(&db, firm, &format!("Down {i} v. Away")).await);
        // Each build exports (and fails) on its own.
        let m = matters[i];
        eventually(Duration::from_secs(30), "the Brief lands", || {
            landed(&db, firm, m)
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    node.signal("-TERM");
    let status = node
        .wait_exit(Duration::from_secs(30))
        .expect("the node stops");
    assert!(status.success(), "exited with {status}");
    let log = node.log_text();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        log.contains("exporting traces"),
        "the exporter started:\n{log}"
    );
    let warnings = log
        .lines()
        .filter(|l| l.contains("OTLP export failed"))
        .count();
    assert_eq!(warnings, 1, "one warning, not one per batch:\n{log}");
    assert!(
        !log.contains("s3cr3t"),
        "the endpoint's password is never logged:\n{log}"
    );
}

#[actix_rt::test]
async fn briefrail_run_exports_the_build_span_and_flushes_it_at_shutdown() {
    let db = TestDb::new(4).await.unwrap();
    let collector = Collector::start();
    let dir = scratch_dir("otel-run");
    let mut node = spawn_node(
        &db,
        &dir,
        "otel-run-1",
        &[
            ("BRIEFRAIL__BUILDER__KIND", "brief"),
            ("BRIEFRAIL__OTEL__ENDPOINT", &collector.url),
            ("BRIEFRAIL__OTEL__SERVICE_NAME", "briefrail-test"),
            // Longer than the test: only the shutdown's flush can send the span.
            ("BRIEFRAIL__OTEL__BATCH_DELAY_MS", "600000"),
            // The log level does not quiet the traces.
            ("BRIEFRAIL__LOG__LEVEL", "warn"),
        ],
    );
    let firm = Uuid::new_v4();
    let matter = matter_with_a_document(&db, firm, "Flushed v. Shutdown").await;
    let frame = eventually(Duration::from_secs(30), "the Brief lands", || {
        landed(&db, firm, matter)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        collector.spans().is_empty(),
        "nothing is sent before the batch delay or a flush"
    );
    node.signal("-TERM");
    let status = node
        .wait_exit(Duration::from_secs(30))
        .expect("the node stops");
    assert!(status.success(), "exited with {status}");
    let _ = std::fs::remove_dir_all(&dir);
    let span = build_span(&collector, frame.run_id).await;
    assert_eq!(span.attributes.get("matter_id"), Some(&matter.to_string()));
    assert_eq!(
        span.attributes.get("outcome").map(String::as_str),
        Some("landed")
    );
    let body = &collector.requests()[0].body;
    let resource = &body["resourceSpans"][0]["resource"]["attributes"];
    assert!(
        resource
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["key"] == "service.name" && a["value"]["stringValue"] == "briefrail-test"),
        "{resource}"
    );
    // The run's trace is the span's.
    let mut c = db.pool.get().await.unwrap();
    let run = reads::run(&mut c, frame.run_id).await.unwrap().unwrap();
    let served: Vec<Uuid> = run.event_ids.iter().flatten().copied().collect();
    let tps = reads::event_traceparents(&mut c, &served).await.unwrap();
    assert!(!tps.is_empty());
    let first = Traceparent::parse(tps[0].1.as_deref().unwrap()).unwrap();
    assert_eq!(span.trace_id, common::hex(&first.trace_id));
    assert_eq!(span.links.len(), tps.len());
    collector.stop.stop(false).await;
}
