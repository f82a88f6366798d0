//! The shipped builders, run by a real node: the Brief's content and determinism, the
//! `command` builder's failures and its child killed when fenced, the `http` builder's
//! statuses and timeouts.

use briefrail::ledger::{ClaimKind, RunOutcome};
use std::sync::Arc;
use std::time::Duration;

use crate::common::eventually;
use actix_web::{App, HttpResponse, HttpServer, web};
use briefrail::actors::Nudge;
use briefrail::builders::{
    BuildContext, Builder, brief::BriefBuilder, command::CommandBuilder, http::HttpBuilder,
};
use briefrail::config::Settings;
use briefrail::ledger::facts::{self, NewDocument};
use briefrail::ledger::transitions as t;
use briefrail::ledger::{RunRow, reads};
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use uuid::Uuid;

async fn matter_with_documents(db: &TestDb) -> (Uuid, Uuid) {
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme Corp. v. Globex LLC")
        .await
        .unwrap();
    for (title, dated, body) in [
        (
            "Invoice 7",
            Some("2024-05-02"),
            "Globex invoiced Acme for 400 widgets. Payment was due in 30 days. Extra.",
        ),
        (
            "Complaint",
            Some("2025-01-15"),
            "Acme alleges Globex shipped late. It seeks damages.",
        ),
        ("Undated memo", None, "Internal note about the shipment."),
        (
            "Contract",
            Some("2024-01-10"),
            "The parties agree on delivery by March. Time is of the essence.",
        ),
    ] {
        facts::add_document(
            &mut c,
            NewDocument {
                document_id: Uuid::new_v4(),
                firm_id: firm,
                matter_id: matter,
                title: title.into(),
                dated: dated.map(|d| d.parse().unwrap()),
                body: body.into(),
            },
        )
        .await
        .unwrap();
    }
    (firm, matter)
}

fn ctx(db: &TestDb, firm: Uuid, matter: Uuid, token: i64) -> BuildContext {
    BuildContext::new(firm, matter, token, Uuid::new_v4(), db.pool.clone())
}

/// The records of builds claimed together are read in one statement: each matter gets its own
/// documents in chronological order, the same as a build that reads its own, whichever firms
/// the matters belong to; a matter not in the record gets none, and one asked twice gets both.
#[actix_rt::test]
async fn records_read_together_give_each_matter_its_own() {
    let db = TestDb::new(4).await.unwrap();
    let a = matter_with_documents(&db).await;
    let b = matter_with_documents(&db).await;
    let (firm_c, matter_c) = (a.0, Uuid::new_v4());
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm_c, matter_c, "Initech v. Acme Corp.")
        .await
        .unwrap();
    let missing = (b.0, Uuid::new_v4());
    // A matter id of one firm asked under another firm is not that matter.
    let crossed = (b.0, a.1);
    let keys = [b, missing, (firm_c, matter_c), a, crossed, b];
    let together = briefrail::builders::context::records(&mut c, &keys)
        .await
        .unwrap();
    assert_eq!(together.len(), keys.len(), "one record per key asked");
    for (key, record) in keys.iter().zip(&together) {
        let alone = ctx(&db, key.0, key.1, 1).record().await.unwrap();
        assert_eq!(
            record, &alone,
            "the record of {key:?}, read together and alone"
        );
    }
    assert_eq!(together[0].1.len(), 4, "the first matter's four documents");
    assert!(together[1].0.is_none() && together[1].1.is_empty());
    assert_eq!(
        together[2].0.as_ref().map(|m| m.title.as_str()),
        Some("Initech v. Acme Corp.")
    );
    assert!(
        together[2].1.is_empty(),
        "a matter with no documents has none"
    );
    assert!(together[4].0.is_none(), "the crossed key names no matter");
    assert_eq!(
        together[5], together[0],
        "a key asked twice gets the record twice"
    );
}

#[actix_rt::test]
async fn the_brief_lists_documents_in_chronology_and_is_deterministic() {
    let db = TestDb::new(4).await.unwrap();
    let (firm, matter) = matter_with_documents(&db).await;
    let a = BriefBuilder
        .build(&ctx(&db, firm, matter, 3))
        .await
        .unwrap()
        .body;
    let b = BriefBuilder
        .build(&ctx(&db, firm, matter, 9))
        .await
        .unwrap()
        .body;
    assert_eq!(
        a, b,
        "the same record gives the same frame, whatever the token"
    );
    let titles: Vec<&str> = a["chronology"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["title"].as_str().unwrap())
        .collect();
    assert_eq!(
        titles,
        ["Contract", "Invoice 7", "Complaint", "Undated memo"]
    );
    assert_eq!(
        a["parties"],
        serde_json::json!(["Acme Corp.", "Globex LLC"])
    );
    assert_eq!(a["counts"]["documents"], 4);
    assert_eq!(a["counts"]["undated"], 1);
    assert_eq!(
        a["chronology"][1]["asserts"],
        "Globex invoiced Acme for 400 widgets. Payment was due in 30 days."
    );
    assert!(a["chronology"][0]["where"]["document_id"].is_string());
    let unknown = BriefBuilder
        .build(&ctx(&db, firm, Uuid::new_v4(), 1))
        .await
        .unwrap_err();
    assert!(unknown.is_permanent(), "{unknown}");
}

async fn run_once(
    db: &TestDb,
    builder: Arc<dyn Builder>,
    tweak: impl FnOnce(&mut Settings),
) -> RunRow {
    let (firm, matter) = matter_with_documents(db).await;
    run_on(db, (firm, matter), builder, tweak).await
}

/// One build of the matter by a node with `builder`; its run once finished.
async fn run_on(
    db: &TestDb,
    (firm, matter): (Uuid, Uuid),
    builder: Arc<dyn Builder>,
    tweak: impl FnOnce(&mut Settings),
) -> RunRow {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.trigger.debounce_ms = 10;
    tweak(&mut s);
    let node = Node::builder(Arc::new(s), builder)
        .pool(db.pool.clone())
        .without_transport()
        .without_periodic_sweeper()
        .start()
        .await
        .unwrap();
    let mut c = db.pool.get().await.unwrap();
    t::demand(&mut c, firm, matter).await.unwrap();
    node.nudge(Nudge::matter(firm, matter));
    eventually(Duration::from_secs(20), "the run to finish", || async {
        let mut c = db.pool.get().await.unwrap();
        reads::runs(&mut c, firm, matter, 10)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.outcome != RunOutcome::Running)
    })
    .await
}

fn sh(script: &str) -> Arc<dyn Builder> {
    Arc::new(CommandBuilder::new(vec![
        "/bin/sh".into(),
        "-c".into(),
        script.into(),
    ]))
}

#[actix_rt::test]
async fn the_command_builder_lands_stdout_and_fails_with_stderr() {
    let db = TestDb::new(8).await.unwrap();
    let ok = run_once(&db, sh("cat > /tmp/ctx.$$ && printf '{\"n\": %s}' $(grep -o '\"documents\"' /tmp/ctx.$$ | wc -l); rm /tmp/ctx.$$"), |_| {}).await;
    assert_eq!(ok.outcome, RunOutcome::Landed);
    let mut c = db.pool.get().await.unwrap();
    let frame = reads::latest_frame(&mut c, ok.firm_id, ok.matter_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        frame.body,
        serde_json::json!({"n": 1}),
        "the context reached stdin"
    );

    let exit = run_once(
        &db,
        sh("cat >/dev/null; echo 'model panel exploded' >&2; exit 3"),
        |_| {},
    )
    .await;
    assert_eq!(exit.outcome, RunOutcome::Failed);
    let e = exit.error.unwrap();
    assert!(
        e.contains("exit status: 3") && e.contains("model panel exploded"),
        "{e}"
    );

    let garbage = run_once(
        &db,
        sh("cat >/dev/null; echo not-json; echo oops >&2"),
        |_| {},
    )
    .await;
    assert_eq!(garbage.outcome, RunOutcome::Failed);
    assert!(garbage.error.unwrap().contains("no JSON frame"));

    let missing = run_once(
        &db,
        Arc::new(CommandBuilder::new(vec!["/no/such/program".into()])),
        |_| {},
    )
    .await;
    assert_eq!(missing.outcome, RunOutcome::Failed);
    assert!(missing.error.unwrap().contains("cannot start"));
}

#[actix_rt::test]
async fn a_timed_out_command_build_is_failed_and_its_child_killed() {
    let db = TestDb::new(8).await.unwrap();
    let pidfile = std::env::temp_dir().join(format!("briefrail-child-{}", Uuid::new_v4().simple()));
    let script = format!(
        "cat >/dev/null; echo $$ > {}; exec sleep 30",
        pidfile.display()
    );
    let run = run_once(&db, sh(&script), |s| s.builder.timeout_seconds = 0.5).await;
    assert_eq!(run.outcome, RunOutcome::Failed);
    assert!(run.error.unwrap().contains("timed out"));
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    child_gone(&pid).await;
    std::fs::remove_file(pidfile).ok();
}

/// Whether process `pid` still runs (a zombie awaiting its reaper counts as gone).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            // The state follows the command name in parentheses: `pid (comm) S ...`.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

/// Fails the test unless process `pid` is gone within five seconds.
async fn child_gone(pid: &str) {
    eventually(Duration::from_secs(5), "the child to be gone", || async {
        (!running(pid)).then_some(())
    })
    .await;
}

#[actix_rt::test]
async fn a_fenced_command_build_has_its_child_killed() {
    let db = TestDb::new(8).await.unwrap();
    let pidfile = std::env::temp_dir().join(format!("briefrail-child-{}", Uuid::new_v4().simple()));
    let script = format!(
        "cat >/dev/null; echo $$ > {}; exec sleep 30",
        pidfile.display()
    );
    let (firm, matter) = matter_with_documents(&db).await;
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.trigger.debounce_ms = 10;
    s.lease.seconds = 30.0;
    s.lease.heartbeat_seconds = Some(0.2);
    let node = Node::builder(Arc::new(s), sh(&script))
        .pool(db.pool.clone())
        .without_transport()
        .without_periodic_sweeper()
        .start()
        .await
        .unwrap();
    let mut c = db.pool.get().await.unwrap();
    t::demand(&mut c, firm, matter).await.unwrap();
    node.nudge(Nudge::matter(firm, matter));
    let pid = eventually(Duration::from_secs(20), "the child to start", || async {
        std::fs::read_to_string(&pidfile)
            .ok()
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
    })
    .await;
    assert!(running(&pid), "the child runs while the build does");
    // Another claim takes the matter over (its lease ran out, as far as the row says).
    diesel_async::SimpleAsyncConnection::batch_execute(
        &mut c,
        &format!("UPDATE ops.matter_frame_jobs SET lease_expires_at = ops.now() - interval '1 ms' WHERE matter_id = '{matter}'"),
    )
    .await
    .unwrap();
    let successor = t::claim(
        &mut c,
        &t::ClaimRequest {
            firm_id: firm,
            matter_id: matter,
            lease: Duration::from_secs(60),
            node_id: "successor".into(),
            trace_id: None,
            event_ids: vec![],
            kind: ClaimKind::NewDemand,
            max_attempts: 5,
        },
    )
    .await
    .unwrap()
    .expect("the expired claim is taken over");
    // The build's next heartbeat finds its claim stale: the build is dropped, the child killed.
    let fenced = eventually(Duration::from_secs(10), "the build fenced", || async {
        let mut c = db.pool.get().await.unwrap();
        reads::runs(&mut c, firm, matter, 10)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.token < successor.token && r.outcome == RunOutcome::Fenced)
    })
    .await;
    assert!(fenced.error.unwrap_or_default().contains("heartbeat"));
    child_gone(&pid).await;
    std::fs::remove_file(pidfile).ok();
}

/// A context over the pipe's buffer (a 300 KB document) to a program that writes as it reads
/// (`cat`): the node must read stdout while it writes stdin, or both block until the timeout.
#[actix_rt::test]
async fn a_streaming_command_given_a_context_larger_than_a_pipe_lands() {
    let db = TestDb::new(8).await.unwrap();
    let (firm, matter) = matter_with_documents(&db).await;
    let mut c = db.pool.get().await.unwrap();
    let sentence = "The witness recalls the shipment arriving late in March. ";
    facts::add_document(
        &mut c,
        NewDocument {
            document_id: Uuid::new_v4(),
            firm_id: firm,
            matter_id: matter,
            title: "Deposition transcript".into(),
            dated: None,
            body: sentence.repeat(300_000 / sentence.len()),
        },
    )
    .await
    .unwrap();
    let run = run_on(&db, (firm, matter), sh("cat"), |s| {
        s.builder.timeout_seconds = 20.0
    })
    .await;
    assert_eq!(run.outcome, RunOutcome::Landed, "{:?}", run.error);
    let frame = reads::latest_frame(&mut c, firm, matter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(frame.body["documents"].as_array().unwrap().len(), 5);
}

#[actix_rt::test]
async fn a_command_printing_more_than_the_frame_limit_fails_naming_it() {
    let db = TestDb::new(8).await.unwrap();
    let run = run_once(
        &db,
        sh("cat >/dev/null; printf '{\"x\": \"'; yes a | tr -d '\\n' | head -c 40000000; printf '\"}'"),
        |s| s.builder.timeout_seconds = 60.0,
    )
    .await;
    assert_eq!(run.outcome, RunOutcome::Failed);
    let e = run.error.unwrap();
    assert!(e.contains("more than") && e.contains("MiB"), "{e}");
}

/// A wrapper script's own children (the real model process) end with the build: the child runs
/// in its own process group, which gets TERM and, after a grace, KILL.
#[actix_rt::test]
async fn a_timed_out_command_build_ends_its_grandchildren_too() {
    let db = TestDb::new(8).await.unwrap();
    for (what, grandchild) in [
        ("a grandchild", "sleep 600"),
        (
            "a grandchild that ignores TERM",
            "sh -c 'trap \"\" TERM; while :; do sleep 0.1; done'",
        ),
    ] {
        let pidfile =
            std::env::temp_dir().join(format!("briefrail-grandchild-{}", Uuid::new_v4().simple()));
        let script = format!(
            "cat >/dev/null; {grandchild} & echo $! > {}; wait",
            pidfile.display()
        );
        let run = run_once(&db, sh(&script), |s| s.builder.timeout_seconds = 0.5).await;
        assert_eq!(run.outcome, RunOutcome::Failed, "{what}");
        let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
        eventually(Duration::from_secs(10), what, || async {
            (!running(&pid)).then_some(())
        })
        .await;
        std::fs::remove_file(pidfile).ok();
    }
}

#[actix_rt::test]
async fn the_http_builder_takes_2xx_json_and_fails_other_statuses() {
    let db = TestDb::new(8).await.unwrap();
    let server = HttpServer::new(|| {
        App::new()
            .route("/ok", web::post().to(|body: web::Json<serde_json::Value>| async move {
                HttpResponse::Ok().json(serde_json::json!({"documents": body["documents"].as_array().map(|d| d.len())}))
            }))
            .route("/boom", web::post().to(|| async { HttpResponse::InternalServerError().body("panel down: ".repeat(1000)) }))
            .route("/slow", web::post().to(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                HttpResponse::Ok().json(serde_json::json!({}))
            }))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let addr = server.addrs()[0];
    let handle = server.run();
    let stop = handle.handle();
    actix_rt::spawn(handle);
    let http = |path: &str| -> Arc<dyn Builder> {
        Arc::new(HttpBuilder::new(SecretUrl::new(format!("http://{addr}{path}")), vec![]).unwrap())
    };

    let ok = run_once(&db, http("/ok"), |_| {}).await;
    assert_eq!(ok.outcome, RunOutcome::Landed);
    let mut c = db.pool.get().await.unwrap();
    assert_eq!(
        reads::latest_frame(&mut c, ok.firm_id, ok.matter_id)
            .await
            .unwrap()
            .unwrap()
            .body,
        serde_json::json!({"documents": 4})
    );

    let boom = run_once(&db, http("/boom"), |_| {}).await;
    let e = boom.error.unwrap();
    assert_eq!(boom.outcome, RunOutcome::Failed);
    assert!(
        e.contains("500") && e.contains("panel down") && e.len() < 2600,
        "bounded excerpt: {} chars",
        e.len()
    );

    let slow = run_once(&db, http("/slow"), |s| s.builder.timeout_seconds = 0.5).await;
    assert_eq!(slow.outcome, RunOutcome::Failed);
    assert!(slow.error.unwrap().contains("timed out"));
    stop.stop(false).await;
}

/// An HTTPS endpoint on loopback with a certificate for `localhost` signed by nobody the
/// system trusts: it answers every request with `{"over": "tls"}`. Returns its port and the
/// certificate's PEM (what an operator puts in `builder.ca_file`).
async fn https_endpoint() -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let pem = cert.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    actix_rt::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            actix_rt::spawn(async move {
                // A failed handshake (the untrusted client) just ends this connection.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                // Read the head and the body the head announces.
                loop {
                    let Ok(n) = tls.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let body = r#"{"over":"tls"}"#;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, pem)
}

#[actix_rt::test]
async fn the_http_builder_speaks_https_and_trusts_only_the_configured_ca() {
    let db = TestDb::new(8).await.unwrap();
    let (port, pem) = https_endpoint().await;
    let url = SecretUrl::new(format!("https://localhost:{port}/brief"));
    let dir = std::env::temp_dir().join(format!("briefrail-ca-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &pem).unwrap();

    // Trusting the endpoint's CA (builder.ca_file, as an operator configures it): it lands.
    let mut s = Settings::defaults();
    s.builder.kind = briefrail::config::BuilderKind::Http;
    s.builder.url = url.clone();
    s.builder.ca_file = ca_file.display().to_string();
    let trusted = briefrail::builders::from_settings(&s.builder).expect("the CA file loads");
    let ok = run_once(&db, trusted, |_| {}).await;
    assert_eq!(ok.outcome, RunOutcome::Landed, "{:?}", ok.error);
    let mut c = db.pool.get().await.unwrap();
    assert_eq!(
        reads::latest_frame(&mut c, ok.firm_id, ok.matter_id)
            .await
            .unwrap()
            .unwrap()
            .body,
        serde_json::json!({"over": "tls"})
    );

    // Without it, the certificate is refused: the build fails, nothing lands.
    let untrusted: Arc<dyn Builder> = Arc::new(HttpBuilder::new(url, vec![]).unwrap());
    let refused = run_once(&db, untrusted, |_| {}).await;
    assert_eq!(refused.outcome, RunOutcome::Failed);
    assert!(
        refused
            .error
            .as_deref()
            .unwrap_or("")
            .contains("POST https://localhost"),
        "{:?}",
        refused.error
    );

    // A CA file that is not PEM fails at start, naming the setting.
    std::fs::write(&ca_file, "not a certificate").unwrap();
    let Err(e) = briefrail::builders::from_settings(&s.builder) else {
        panic!("a CA file without a certificate must be refused");
    };
    assert!(e.to_string().contains("builder.ca_file"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// What a builder's answer became, for the assertions below: `Ok(wait)` for backpressure.
fn waited(r: briefrail::Result<briefrail::ledger::Frame>) -> Result<Duration, String> {
    match r {
        Err(briefrail::Error::Backpressure { retry_after, .. }) => Ok(retry_after),
        Err(e) => Err(e.to_string()),
        Ok(f) => Err(format!("a frame: {f:?}")),
    }
}

/// A 429 (with its `Retry-After` in seconds, or the default wait without), or a 503 with a
/// `Retry-After` date, is the endpoint asking the rail to wait; a 503 without one is an outage
/// like any other. Run by a node, the wait hands the claim back without spending a retry.
#[actix_rt::test]
async fn the_http_builder_reads_429_and_503_with_retry_after_as_a_wait() {
    let db = TestDb::new(8).await.unwrap();
    let server = HttpServer::new(|| {
        App::new()
            .route(
                "/busy",
                web::post().to(|| async {
                    HttpResponse::TooManyRequests()
                        .insert_header(("Retry-After", "7"))
                        .body("rate limited")
                }),
            )
            .route(
                "/busy-plain",
                web::post().to(|| async { HttpResponse::TooManyRequests().finish() }),
            )
            .route(
                "/down",
                web::post().to(|| async {
                    let at = chrono::Utc::now() + chrono::Duration::seconds(30);
                    HttpResponse::ServiceUnavailable()
                        .insert_header((
                            "Retry-After",
                            at.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
                        ))
                        .finish()
                }),
            )
            .route(
                "/outage",
                web::post().to(|| async { HttpResponse::ServiceUnavailable().body("down") }),
            )
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let addr = server.addrs()[0];
    let handle = server.run();
    let stop = handle.handle();
    actix_rt::spawn(handle);
    let http = |path: &str| -> Arc<dyn Builder> {
        Arc::new(HttpBuilder::new(SecretUrl::new(format!("http://{addr}{path}")), vec![]).unwrap())
    };
    let (firm, matter) = matter_with_documents(&db).await;
    let cx = ctx(&db, firm, matter, 1);
    assert_eq!(
        waited(http("/busy").build(&cx).await),
        Ok(Duration::from_secs(7))
    );
    assert_eq!(
        waited(http("/busy-plain").build(&cx).await),
        Ok(briefrail::builders::backpressure::DEFAULT_WAIT)
    );
    let down = waited(http("/down").build(&cx).await).expect("a 503 with Retry-After waits");
    assert!(
        down > Duration::from_secs(25) && down <= Duration::from_secs(31),
        "{down:?}"
    );
    let outage = waited(http("/outage").build(&cx).await);
    assert!(
        outage.as_ref().is_err_and(|e| e.contains("503")),
        "{outage:?}"
    );

    let run = run_on(&db, (firm, matter), http("/busy"), |_| {}).await;
    assert_eq!(run.outcome, RunOutcome::Released, "{:?}", run.error);
    assert!(
        run.error.as_deref().is_some_and(|e| e.contains("429")),
        "{:?}",
        run.error
    );
    let mut c = db.pool.get().await.unwrap();
    let job = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    assert_eq!(job.consecutive_failures, 0, "a 429 spent a retry");
    stop.stop(false).await;
}

/// Exit code 75 (`EX_TEMPFAIL`) with a `retry-after: SECONDS` line on stderr is the command
/// builder's way to say the same; other exit codes stay failures.
#[actix_rt::test]
async fn the_command_builder_asks_the_rail_to_wait_with_exit_code_75() {
    let db = TestDb::new(8).await.unwrap();
    let (firm, matter) = matter_with_documents(&db).await;
    let cx = ctx(&db, firm, matter, 1);
    let busy = sh("cat >/dev/null; echo 'model busy' >&2; echo 'retry-after: 2.5' >&2; exit 75");
    assert_eq!(
        waited(busy.build(&cx).await),
        Ok(Duration::from_millis(2500))
    );
    let plain = sh("cat >/dev/null; exit 75");
    assert_eq!(
        waited(plain.build(&cx).await),
        Ok(briefrail::builders::backpressure::DEFAULT_WAIT)
    );
    let other = waited(
        sh("cat >/dev/null; echo 'retry-after: 2' >&2; exit 74")
            .build(&cx)
            .await,
    );
    assert!(other.as_ref().is_err_and(|e| e.contains("74")), "{other:?}");

    let run = run_on(&db, (firm, matter), busy, |_| {}).await;
    assert_eq!(run.outcome, RunOutcome::Released, "{:?}", run.error);
    assert!(
        run.error
            .as_deref()
            .is_some_and(|e| e.contains("model busy")),
        "{:?}",
        run.error
    );
    let mut c = db.pool.get().await.unwrap();
    let job = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    assert_eq!(job.consecutive_failures, 0, "exit code 75 spent a retry");
}
