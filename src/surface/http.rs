//! The admin HTTP surface (actix-web) of a running node:
//!
//! * `GET /healthz`: the process answers.
//! * `GET /readyz`: database reachable, migrations current, broker reachable (amqp), none of
//!   the node's long-lived actors (supervisor, sweeper, presence) dead.
//! * `GET /metrics`: Prometheus text: this node's counters and the ledger's gauges.
//! * `GET /api/firms/{firm}/matters/{matter}`: job row, runs, latest frame's metadata.
//! * `POST /api/firms/{firm}/matters/{matter}/brief-requests`: records `brief.requested` (202).
//! * `GET /`, `/matters`, `/firms/{firm}/matters/{matter}`, `/dead-letters`, `/nodes`, `/login`:
//!   the operator console ([`crate::surface::console`]).
//! * `/api/firms`, `/api/rail`: who is served next ([`crate::surface::fairness_api`]);
//!   `/api/matters`, `/api/dead-letters`, `/api/nodes`: the console's pages and actions for
//!   scripts ([`crate::surface::ops_api`]).
//!
//! When `http.token` is set, `/api/*` requires `Authorization: Bearer <token>` (the scheme in
//! any case) and the console a session opened by `POST /login` with that token (or the same
//! bearer header); a node bound beyond loopback refuses to start without one (config
//! validation). A wrong method answers 405 with `Allow`; a body over [`BODY_LIMIT`] 413.

use std::net::SocketAddr;

use actix_web::dev::ServerHandle;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;
use uuid::Uuid;

use crate::config::TransportKind;
use crate::error::{Error, Result};
use crate::ledger::{DemandClass, facts, fairness, reads};
use crate::surface::web::access::bearer_ok;
use crate::surface::web::responses::{error_response, only, unauthorized};
pub use crate::surface::web::state::{BODY_LIMIT, BULK_BODY_LIMIT, HttpState};

/// The HTTP admin endpoint as a node's surface: `Node::builder(..).surface(admin())` binds
/// `http.bind` once the actors run and stops the server last at shutdown.
pub fn admin() -> crate::node::StartSurface {
    Box::new(|ctx: &std::sync::Arc<crate::actors::NodeContext>| {
        let (addr, handle) = serve(HttpState {
            settings: ctx.settings.clone(),
            pool: ctx.pool.clone(),
            metrics: ctx.metrics.clone(),
            node_id: ctx.node_id.clone(),
            liveness: ctx.liveness.clone(),
        })?;
        Ok(Box::new(Admin { addr, handle }) as Box<dyn crate::node::Surface>)
    })
}

/// A running admin endpoint.
struct Admin {
    addr: SocketAddr,
    handle: ServerHandle,
}

impl crate::node::Surface for Admin {
    fn addr(&self) -> Option<SocketAddr> {
        Some(self.addr)
    }
    fn stop(&self) -> futures_util::future::LocalBoxFuture<'_, ()> {
        Box::pin(self.handle.stop(true))
    }
}

/// Binds and starts the server on the current actix system. Returns the bound address (useful
/// with port 0) and a handle to stop it.
pub fn serve(state: HttpState) -> Result<(SocketAddr, ServerHandle)> {
    let bind = state.settings.http.bind.clone();
    let state_has_no_token = state.settings.http.token.trim().is_empty();
    let state = web::Data::new(state);
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .app_data(state.clone())
            .app_data(
                web::FormConfig::default()
                    .limit(BODY_LIMIT)
                    .error_handler(crate::surface::web::bad_input::form),
            )
            .app_data(web::PayloadConfig::default().limit(BODY_LIMIT))
            .app_data(
                web::QueryConfig::default().error_handler(crate::surface::web::bad_input::query),
            )
            .wrap_fn(|req, srv| {
                // Refused before a handler runs, whatever the route reads.
                let limit = body_limit(req.path());
                let declared = req
                    .headers()
                    .get(actix_web::http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<usize>().ok());
                let call = if declared.is_some_and(|n| n > limit) {
                    Err(req)
                } else {
                    Ok(actix_web::dev::Service::call(srv, req))
                };
                async move {
                    match call {
                        Ok(f) => f.await.map(|r| r.map_into_left_body()),
                        Err(req) => Ok(req
                            .into_response(HttpResponse::PayloadTooLarge().json(json!({
                                "error": format!("the body exceeds the {limit}-byte limit")
                            })))
                            .map_into_right_body()),
                    }
                }
            })
            .service(only("/healthz", "GET", web::get().to(healthz)))
            .service(only("/readyz", "GET", web::get().to(readyz)))
            .service(only("/metrics", "GET", web::get().to(metrics)))
            .service(only(
                "/api/firms/{firm}/matters/{matter}",
                "GET",
                web::get().to(matter),
            ))
            .service(only(
                "/api/firms/{firm}/matters/{matter}/brief-requests",
                "POST",
                web::post().to(brief_request),
            ))
            .configure(crate::surface::fairness_api::routes)
            .configure(crate::surface::ops_api::routes)
            .configure(crate::surface::console::routes)
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
    if state_has_no_token {
        // Said at every start: the one deployment this trust model gets wrong is a reverse
        // proxy on the same host that forwards `Host: 127.0.0.1`, and nothing here can see it.
        tracing::warn!(
            %addr,
            "http.token is empty: the console and /api trust every request whose Host is a \
             loopback name; a reverse proxy that forwards Host: 127.0.0.1 (or localhost) \
             opens them to anyone who reaches the proxy; set http.token before putting a \
             proxy in front of this node"
        );
    }
    Ok((addr, handle))
}

/// The routes that take [`BULK_BODY_LIMIT`].
const BULK_PATHS: &[&str] = &["/api/matters/retry", "/api/dead-letters/discard"];

fn body_limit(path: &str) -> usize {
    if BULK_PATHS.contains(&path) {
        BULK_BODY_LIMIT
    } else {
        BODY_LIMIT
    }
}

/// The bearer token, then the path's ids: what every `/api` handler checks first.
fn admit(
    req: &HttpRequest,
    state: &HttpState,
    path: &(String, String),
) -> std::result::Result<(Uuid, Uuid), HttpResponse> {
    if !bearer_ok(req, state) {
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
    let dead = state.liveness.dead();
    let actors = if dead.is_empty() {
        Ok(())
    } else {
        Err(format!("died: {}", dead.join(", ")))
    };
    let ready = db.is_ok() && migrations.is_ok() && broker.is_ok() && actors.is_ok();
    let show = |r: &std::result::Result<(), String>| match r {
        Ok(()) => json!("ok"),
        Err(e) => json!(crate::secret::redact_urls(e)),
    };
    let body = json!({"ready": ready, "database": show(&db), "migrations": show(&migrations), "broker": show(&broker), "actors": show(&actors)});
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

async fn metrics(state: web::Data<HttpState>) -> HttpResponse {
    let gauges = async {
        let mut c = state.pool.get().await?;
        reads::gauges(&mut c).await
    }
    .await;
    let l = &state.metrics.ledger;
    l.ledger_up.set(if gauges.is_ok() { 1.0 } else { 0.0 });
    let g = gauges.unwrap_or_default();
    l.outbox_backlog.set(g.outbox_backlog as f64);
    l.outbox_oldest_unpublished_seconds
        .set(g.oldest_unpublished_seconds);
    l.matters_unserved.set(g.unserved_matters as f64);
    l.builds_running.set(g.running_builds as f64);
    l.matters_failed.set(g.failed_matters as f64);
    l.events_stranded.set(g.stranded_events as f64);
    l.facts_owed.set(g.owed_facts as f64);
    l.oldest_owed_fact_seconds.set(g.oldest_owed_seconds);
    l.retention_oldest_event_seconds.set(g.oldest_event_seconds);
    l.retention_oldest_run_seconds.set(g.oldest_run_seconds);
    firm_gauges(&state).await;
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(state.metrics.render())
}

/// The per-firm gauges (the busiest firms only: `metrics::FIRM_LABELS`) and the oldest
/// interactive demand of any firm.
async fn firm_gauges(state: &HttpState) {
    let read = async {
        let mut c = state.pool.get().await?;
        let busiest = fairness::busiest(&mut c, crate::metrics::FIRM_LABELS).await?;
        Ok::<_, Error>(busiest)
    }
    .await;
    let f = &state.metrics.firms;
    f.clear();
    let Ok(busiest) = read else { return };
    // The busiest firms hold the oldest interactive demand, if there is one.
    state
        .metrics
        .ledger
        .oldest_interactive_demand_seconds
        .set(fairness::oldest_interactive(&busiest));
    for firm in &busiest {
        let label = vec![(
            "firm",
            firm.name
                .clone()
                .unwrap_or_else(|| firm.firm_id.to_string()),
        )];
        f.unserved.get_or_create(&label).set(firm.unserved as f64);
        f.running.get_or_create(&label).set(firm.running as f64);
        if let Some(age) = firm.oldest_interactive_s {
            f.oldest_interactive_seconds.get_or_create(&label).set(age);
        }
    }
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

/// `?class=interactive|background` of a Brief request (interactive when absent).
#[derive(Debug, serde::Deserialize)]
struct RequestQuery {
    class: Option<String>,
}

async fn brief_request(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    query: web::Query<RequestQuery>,
) -> HttpResponse {
    let (firm, matter) = match admit(&req, &state, &path) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let result = async {
        let mut c = state.pool.get().await?;
        let class = match query.class.as_deref() {
            None => DemandClass::Interactive,
            Some(c) => DemandClass::parse(c)?,
        };
        let event = facts::request_brief_as(&mut c, firm, matter, class).await?;
        Ok::<_, Error>((event, class))
    }
    .await;
    match result {
        Ok((event_id, class)) => HttpResponse::Accepted().json(
            json!({"event_id": event_id, "event_name": "brief.requested", "class": class.as_str()}),
        ),
        Err(e) => error_response(&e),
    }
}
