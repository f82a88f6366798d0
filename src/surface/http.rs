//! The admin HTTP surface (actix-web) of a running node:
//!
//! * `GET /healthz`: the process answers.
//! * `GET /readyz`: database reachable, migrations current, broker reachable (amqp).
//! * `GET /metrics`: Prometheus text: this node's counters and the ledger's gauges.
//! * `GET /api/firms/{firm}/matters/{matter}`: job row, runs, latest frame's metadata.
//! * `POST /api/firms/{firm}/matters/{matter}/brief-requests`: records `brief.requested` (202).
//! * `GET /`: a small HTML status page.
//!
//! When `http.token` is set, `/api/*` and `/` require `Authorization: Bearer <token>`; a node
//! bound beyond loopback refuses to start without one (config validation).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;
use uuid::Uuid;

use crate::config::{Settings, TransportKind};
use crate::db::Pool;
use crate::error::{Error, Result};
use crate::ledger::{RunOutcome, facts, reads};
use crate::metrics::Metrics;

/// What the handlers share.
pub struct HttpState {
    pub settings: Arc<Settings>,
    pub pool: Pool,
    pub metrics: Arc<Metrics>,
    pub node_id: String,
}

/// Binds and starts the server on the current actix system. Returns the bound address (useful
/// with port 0) and a handle to stop it.
pub fn serve(state: HttpState) -> Result<(SocketAddr, ServerHandle)> {
    let bind = state.settings.http.bind.clone();
    let state = web::Data::new(state);
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .app_data(state.clone())
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz))
            .route("/metrics", web::get().to(metrics))
            .route("/api/firms/{firm}/matters/{matter}", web::get().to(matter))
            .route(
                "/api/firms/{firm}/matters/{matter}/brief-requests",
                web::post().to(brief_request),
            )
            .route("/", web::get().to(index))
    })
    .workers(1)
    .disable_signals()
    .bind(&bind)
    .map_err(|e| Error::io(format!("http.bind {bind}"), e))?;
    let addr = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| Error::internal(format!("http.bind {bind}: bound to no address")))?;
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    tracing::info!(%addr, "http admin listening");
    Ok((addr, handle))
}

fn authorized(req: &HttpRequest, state: &HttpState) -> bool {
    let token = state.settings.http.token.trim();
    if token.is_empty() {
        return true;
    }
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Constant-time comparison: no timing oracle on the token.
    given.is_some_and(|g| {
        g.len() == token.len()
            && g.bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

fn unauthorized() -> HttpResponse {
    HttpResponse::Unauthorized()
        .insert_header(("www-authenticate", "Bearer"))
        .json(json!({"error": "missing or wrong bearer token"}))
}

fn error_response(e: &Error) -> HttpResponse {
    use crate::error::ErrorKind;
    let status = match (e, e.kind()) {
        (Error::NotFound(_), _) => StatusCode::NOT_FOUND,
        (_, ErrorKind::Input) => StatusCode::UNPROCESSABLE_ENTITY,
        (_, ErrorKind::Conflict) => StatusCode::CONFLICT,
        (_, ErrorKind::Transient) => StatusCode::SERVICE_UNAVAILABLE,
        (_, ErrorKind::Internal) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    HttpResponse::build(status).json(json!({"error": crate::secret::redact_urls(&e.to_string())}))
}

/// The bearer token, then the path's ids: what every `/api` handler checks first.
fn admit(
    req: &HttpRequest,
    state: &HttpState,
    path: &(String, String),
) -> std::result::Result<(Uuid, Uuid), HttpResponse> {
    if !authorized(req, state) {
        return Err(unauthorized());
    }
    ids(path)
}

fn ids(path: &(String, String)) -> std::result::Result<(Uuid, Uuid), HttpResponse> {
    let firm = Uuid::parse_str(&path.0)
        .map_err(|_| HttpResponse::BadRequest().json(json!({"error": "firm is not a UUID"})))?;
    let matter = Uuid::parse_str(&path.1)
        .map_err(|_| HttpResponse::BadRequest().json(json!({"error": "matter is not a UUID"})))?;
    Ok((firm, matter))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

async fn readyz(state: web::Data<HttpState>) -> HttpResponse {
    let db = async {
        let mut c = state.pool.get().await?;
        reads::gauges(&mut c).await.map(|_| ())
    }
    .await;
    let pending = crate::db::migrate::pending(state.settings.database.url.expose()).await;
    let broker = match state.settings.transport.kind {
        TransportKind::Postgres => Ok(()),
        #[cfg(not(feature = "amqp"))]
        TransportKind::Amqp => Err("this build has no amqp transport".to_owned()),
        #[cfg(feature = "amqp")]
        TransportKind::Amqp => {
            match tokio::time::timeout(
                std::time::Duration::from_secs(3),
                crate::transport::amqp::connect(
                    &state.settings.transport.amqp_url,
                    "briefrail-readyz",
                ),
            )
            .await
            {
                Ok(Ok(conn)) => {
                    let _ = conn.close(200, "ready check".into()).await;
                    Ok(())
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer within 3 s".into()),
            }
        }
    };
    let migrations = match &pending {
        Ok(p) if p.is_empty() => Ok(()),
        Ok(p) => Err(format!("{} pending: {}", p.len(), p.join(", "))),
        Err(e) => Err(e.to_string()),
    };
    let db = db.map_err(|e| e.to_string());
    let ready = db.is_ok() && migrations.is_ok() && broker.is_ok();
    let show = |r: &std::result::Result<(), String>| match r {
        Ok(()) => json!("ok"),
        Err(e) => json!(crate::secret::redact_urls(e)),
    };
    let body = json!({"ready": ready, "database": show(&db), "migrations": show(&migrations), "broker": show(&broker)});
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

async fn metrics(state: web::Data<HttpState>) -> HttpResponse {
    let mut out = String::new();
    state.metrics.render(&mut out);
    let gauges = async {
        let mut c = state.pool.get().await?;
        reads::gauges(&mut c).await
    }
    .await;
    let up = gauges.is_ok() as u8;
    let g = gauges.unwrap_or_default();
    for (name, help, v) in [
        (
            "briefrail_outbox_backlog",
            "Outbox events not yet published",
            g.outbox_backlog as f64,
        ),
        (
            "briefrail_outbox_oldest_unpublished_seconds",
            "Age of the oldest unpublished event",
            g.oldest_unpublished_seconds,
        ),
        (
            "briefrail_matters_unserved",
            "Matters whose landed frame is behind their demand",
            g.unserved_matters as f64,
        ),
        (
            "briefrail_builds_running",
            "Matters with a build in flight (any node)",
            g.running_builds as f64,
        ),
        (
            "briefrail_matters_failed",
            "Matters whose last build failed with demand unserved",
            g.failed_matters as f64,
        ),
        (
            "briefrail_events_stranded",
            "Events republished to the cap and still not consumed: facts that may be missing from a Brief",
            g.stranded_events as f64,
        ),
        (
            "briefrail_ledger_up",
            "Whether this node could read the ledger for these gauges",
            up as f64,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(out)
}

async fn matter(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (firm, matter) = match admit(&req, &state, &path) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let result = async {
        let mut c = state.pool.get().await?;
        let status = reads::status(&mut c, firm, matter, 20).await?;
        let record = facts::matter(&mut c, firm, matter).await?;
        Ok::<_, Error>((status, record))
    }
    .await;
    match result {
        Ok((status, None)) if status.job.is_none() => HttpResponse::NotFound()
            .json(json!({"error": format!("matter {matter} of firm {firm} is not known")})),
        Ok((status, record)) => HttpResponse::Ok().json(json!({
            "firm_id": firm,
            "matter_id": matter,
            "title": record.as_ref().map(|m| m.title.clone()),
            "archived_at": record.and_then(|m| m.archived_at),
            "job": status.job,
            "unserved": status.unserved,
            "runs": status.runs,
            "latest_frame": status.latest_frame,
        })),
        Err(e) => error_response(&e),
    }
}

async fn brief_request(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (firm, matter) = match admit(&req, &state, &path) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let result = async {
        let mut c = state.pool.get().await?;
        facts::request_brief(&mut c, firm, matter).await
    }
    .await;
    match result {
        Ok(event_id) => HttpResponse::Accepted()
            .json(json!({"event_id": event_id, "event_name": "brief.requested"})),
        Err(e) => error_response(&e),
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn index(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    if !authorized(&req, &state) {
        return unauthorized();
    }
    let data = async {
        let mut c = state.pool.get().await?;
        let g = reads::gauges(&mut c).await?;
        let unserved = reads::unserved_jobs(&mut c, 50).await?;
        let running = reads::recent_runs(&mut c, &[RunOutcome::Running], 50).await?;
        let bad = reads::recent_runs(&mut c, RunOutcome::TROUBLE, 30).await?;
        Ok::<_, Error>((g, unserved, running, bad))
    }
    .await;
    let (g, unserved, running, bad) = match data {
        Ok(d) => d,
        Err(e) => return error_response(&e),
    };
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=utf-8><title>briefrail: {node}</title>\
         <style>body{{font:14px system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}}.bad{{color:#a00}}</style></head><body>\
         <h1>briefrail</h1><p>node <b>{node}</b> · outbox backlog <b>{b}</b> (oldest {o:.1} s) · \
         unserved matters <b>{u}</b> · builds running <b>{r}</b> · failed matters <b class=bad>{f}</b> · \
         stranded events <b class=bad>{s}</b></p>",
        node = esc(&state.node_id),
        b = g.outbox_backlog,
        o = g.oldest_unpublished_seconds,
        u = g.unserved_matters,
        r = g.running_builds,
        f = g.failed_matters,
        s = g.stranded_events
    );
    if g.stranded_events > 0 {
        let _ = write!(
            h,
            "<p class=bad><b>{} event(s) were republished {} times and never consumed</b>: some Brief may be \
             missing a fact. Fix what keeps the trigger from consuming them (the consumer, the queue, \
             the dead-letter queue), then run <code>briefrail outbox republish-stranded</code>.</p>",
            g.stranded_events,
            crate::ledger::outbox::REPUBLISH_CAP
        );
    }
    h.push_str("<h2>Matters with unserved demand</h2><table><tr><th>firm</th><th>matter</th><th>status</th><th>requested</th><th>landed</th><th>failures</th><th>updated</th></tr>");
    for j in &unserved {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            j.firm_id,
            j.matter_id,
            esc(j.run_status.as_str()),
            j.requested_generation,
            j.landed_generation,
            j.consecutive_failures,
            j.updated_at.to_rfc3339()
        );
    }
    h.push_str("</table><h2>Builds running now</h2><table><tr><th>matter</th><th>token</th><th>node</th><th>started</th><th>heartbeat</th></tr>");
    for r in &running {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.matter_id,
            r.token,
            esc(&r.node_id),
            r.started_at.to_rfc3339(),
            r.heartbeat_at.to_rfc3339()
        );
    }
    h.push_str("</table><h2>Recent fenced, failed and expired runs</h2><table><tr><th>matter</th><th>token</th><th>outcome</th><th>node</th><th>started</th><th>error</th></tr>");
    for r in &bad {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=bad>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.matter_id,
            r.token,
            esc(r.outcome.as_str()),
            esc(&r.node_id),
            r.started_at.to_rfc3339(),
            esc(r.error.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</table></body></html>");
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(h)
}
