//! The JSON API of the console's operator pages, for scripts: list matters and dead letters
//! with the pages' filters and totals, retry one matter or many, discard dead letters, list
//! nodes. Every route takes the admin bearer token, like the rest of `/api`; firms and pauses
//! are [`super::fairness_api`]'s.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /api/matters?q=&state=&firm=&page=&per_page=` | `{matters, total, page, per_page, more}` |
//! | `POST /api/matters/{firm}/{matter}/retry` | one matter failing or out of retries: 202 `{event_id}`; 409 with nothing to retry |
//! | `POST /api/matters/retry` | `{"matters": [{"firm", "matter"}...]}` or `{"filter": {q?, state?, firm?}}`, `limit?`: `{retried, skipped, cap, more, events}` |
//! | `GET /api/dead-letters?reason=&routing_key=&all=&page=&per_page=` | `{dead_letters, total, page, per_page, more}` |
//! | `POST /api/dead-letters/discard` | `{"ids": [...]}` or `{"filter": {reason?, routing_key?}}`, `limit?`: `{discarded, skipped, cap, more}` |
//! | `GET /api/nodes` | every node the ledger remembers |
//!
//! Bad input is 422 naming it (a body that names nothing, a list over the cap, an id that is
//! not a UUID, a state that is none); an unknown matter 404.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::selection::{self, DeadLetterFilter, MatterFilter, page_of};
use crate::error::{Error, Result};
use crate::ledger::matters::{self, bulk::MAX_BULK};
use crate::ledger::{dead_letters, presence};
use crate::surface::web::access::bearer_ok;
use crate::surface::web::responses::{error_response, only, unauthorized};
use crate::surface::web::state::HttpState;

/// The routes above, each answering 405 with `Allow` for another method.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(only("/api/matters", "GET", web::get().to(matters)))
        .service(
            only("/api/matters/retry", "POST", web::post().to(retry_many)).app_data(bulk_body()),
        )
        .service(only(
            "/api/matters/{firm}/{matter}/retry",
            "POST",
            web::post().to(retry_one),
        ))
        .service(only("/api/dead-letters", "GET", web::get().to(dead)))
        .service(
            only("/api/dead-letters/discard", "POST", web::post().to(discard))
                .app_data(bulk_body()),
        )
        .service(only("/api/nodes", "GET", web::get().to(nodes)));
}

/// A bulk body may name [`MAX_BULK`] pairs of ids: larger than other bodies.
fn bulk_body() -> web::PayloadConfig {
    web::PayloadConfig::default().limit(crate::surface::web::state::BULK_BODY_LIMIT)
}

/// `GET /api/matters`'s query: the matters page's filter and a page; any other name refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MattersQuery {
    q: Option<String>,
    state: Option<String>,
    firm: Option<String>,
    page: Option<String>,
    per_page: Option<String>,
}

/// `GET /api/dead-letters`'s query: the dead letters page's filter and a page.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadQuery {
    reason: Option<String>,
    routing_key: Option<String>,
    all: Option<String>,
    page: Option<String>,
    per_page: Option<String>,
}

/// The most rows a list answers at once.
const MAX_PER_PAGE: i64 = 500;

/// A list's page: `?page=` (from 1) and `?per_page=` (1 to [`MAX_PER_PAGE`], 50 by default):
/// (page, per page, offset).
fn paging(page: Option<&str>, per_page: Option<&str>) -> Result<(i64, i64, i64)> {
    let per = selection::number("per_page", per_page)?.unwrap_or(50);
    if !(1..=MAX_PER_PAGE).contains(&per) {
        return Err(Error::InvalidInput(format!(
            "per_page {per} is out of range: 1 to {MAX_PER_PAGE}"
        )));
    }
    let (page, offset) = page_of(page, per)?;
    Ok((page, per, offset))
}

fn answer<T: serde::Serialize>(r: Result<T>) -> HttpResponse {
    match r {
        Ok(v) => HttpResponse::Ok().json(v),
        Err(e) => error_response(&e),
    }
}

/// A JSON body, each field named when it is wrong; an empty body is `{}`.
fn body<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    serde_json::from_slice(bytes)
        .map_err(|e| Error::InvalidInput(format!("the body is not {what}: {e}")))
}

/// `GET /api/matters`.
async fn matters(
    req: HttpRequest,
    state: web::Data<HttpState>,
    query: web::Query<MattersQuery>,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    let max = state.settings.retry.max_attempts;
    answer(
        async {
            let (page, per, offset) = paging(query.page.as_deref(), query.per_page.as_deref())?;
            let filter = MatterFilter {
                q: query.q.clone(),
                state: query.state.clone(),
                firm: query.firm.clone(),
            };
            let mut c = state.pool.get().await?;
            let mut q = filter.query(&mut c).await?;
            let total = matters::count(&mut c, &q, max).await?;
            q.limit = per;
            q.offset = offset;
            let (rows, more) = matters::search(&mut c, &q, max).await?;
            let rows: Vec<_> = rows
                .iter()
                .map(|m| {
                    let mut v = serde_json::to_value(m).unwrap_or_default();
                    v["state"] = json!(m.state());
                    v
                })
                .collect();
            Ok(json!({"matters": rows, "total": total, "page": page, "per_page": per, "more": more}))
        }
        .await,
    )
}

/// `POST /api/matters/{firm}/{matter}/retry`: [`matters::retry`].
async fn retry_one(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    let result = async {
        let firm = selection::uuid("firm", &path.0)?;
        let matter = selection::uuid("matter", &path.1)?;
        let mut c = state.pool.get().await?;
        let event = matters::retry(&mut c, firm, matter, state.settings.retry.max_attempts).await?;
        tracing::info!(%firm, %matter, %event, "api: retry recorded");
        Ok::<_, Error>(json!({"firm_id": firm, "matter_id": matter, "event_id": event}))
    }
    .await;
    // Accepted, like a Brief request: a demand is recorded, the build follows.
    match result {
        Ok(v) => HttpResponse::Accepted().json(v),
        Err(e) => error_response(&e),
    }
}

/// What `POST /api/matters/retry` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    matters: Option<Vec<MatterKey>>,
    filter: Option<MatterFilter>,
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatterKey {
    firm: String,
    matter: String,
}

/// `POST /api/matters/retry`: [`matters::bulk::retry_exhausted`].
async fn retry_many(
    req: HttpRequest,
    state: web::Data<HttpState>,
    raw: web::Bytes,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    answer(
        async {
            let b: RetryBody = body(
                &raw,
                "a bulk retry ({\"matters\": [...]} or {\"filter\": {...}})",
            )?;
            let cap = matters::bulk::cap(b.limit)?;
            let mut c = state.pool.get().await?;
            let nothing = names_nothing(
                "matters to retry",
                "matters",
                "{\"firm\": ..., \"matter\": ...}",
                "{\"q\"?, \"state\"?, \"firm\"?}",
            );
            let selection = match list_or_filter(b.matters, b.filter, nothing)? {
                Ok(list) => {
                    // Counted before any id is read: a long list costs nothing.
                    matters::bulk::within_cap("matters", list.len(), cap)?;
                    let keys = list
                        .iter()
                        .enumerate()
                        .map(|(i, k)| {
                            Ok((
                                selection::uuid(&format!("matters[{i}].firm"), &k.firm)?,
                                selection::uuid(&format!("matters[{i}].matter"), &k.matter)?,
                            ))
                        })
                        .collect::<Result<Vec<_>>>()?;
                    matters::bulk::Selection::Matters(keys)
                }
                Err(f) => matters::bulk::Selection::Filter(f.query(&mut c).await?),
            };
            matters::bulk::retry_exhausted(
                &mut c,
                &selection,
                cap,
                state.settings.retry.max_attempts,
            )
            .await
        }
        .await,
    )
}

/// A bulk body's one selection: its list (`Ok`) or its filter (`Err`); `nothing` when it
/// names neither, and refused when it names both.
fn list_or_filter<L, F>(
    list: Option<L>,
    filter: Option<F>,
    nothing: Error,
) -> Result<Result<L, F>> {
    match (list, filter) {
        (Some(l), None) => Ok(Ok(l)),
        (None, Some(f)) => Ok(Err(f)),
        (Some(_), Some(_)) => Err(Error::InvalidInput(
            "name a list or a filter, not both".into(),
        )),
        (None, None) => Err(nothing),
    }
}

fn names_nothing(what: &str, list: &str, item: &str, filter: &str) -> Error {
    Error::InvalidInput(format!(
        "the body names no {what}: send {{\"{list}\": [{item}, ...]}} or {{\"filter\": {filter}}} (at most {MAX_BULK} a call)"
    ))
}

/// `GET /api/dead-letters`.
async fn dead(
    req: HttpRequest,
    state: web::Data<HttpState>,
    query: web::Query<DeadQuery>,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    answer(
        async {
            let (page, per, offset) = paging(query.page.as_deref(), query.per_page.as_deref())?;
            let f = DeadLetterFilter {
                reason: query.reason.clone(),
                routing_key: query.routing_key.clone(),
                all: query.all.clone(),
            }
            .ledger()?;
            let mut c = state.pool.get().await?;
            let total = dead_letters::count(&mut c, &f).await?;
            let rows = dead_letters::page(&mut c, &f, per, offset).await?;
            let more = offset + (rows.len() as i64) < total;
            Ok(json!({"dead_letters": rows, "total": total, "page": page, "per_page": per, "more": more}))
        }
        .await,
    )
}

/// What `POST /api/dead-letters/discard` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscardBody {
    ids: Option<Vec<String>>,
    filter: Option<DeadLetterFilter>,
    limit: Option<usize>,
}

/// `POST /api/dead-letters/discard`: [`dead_letters::bulk::discard_many`].
async fn discard(req: HttpRequest, state: web::Data<HttpState>, raw: web::Bytes) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    answer(
        async {
            let b: DiscardBody = body(
                &raw,
                "a bulk discard ({\"ids\": [...]} or {\"filter\": {...}})",
            )?;
            let cap = matters::bulk::cap(b.limit)?;
            let nothing = names_nothing(
                "dead letters to discard",
                "ids",
                "\"<uuid>\"",
                "{\"reason\"?, \"routing_key\"?}",
            );
            let selection = match list_or_filter(b.ids, b.filter, nothing)? {
                Ok(ids) => {
                    matters::bulk::within_cap("dead letters", ids.len(), cap)?;
                    let ids = ids
                        .iter()
                        .enumerate()
                        .map(|(i, id)| selection::uuid(&format!("ids[{i}]"), id))
                        .collect::<Result<Vec<_>>>()?;
                    dead_letters::bulk::Selection::Ids(ids)
                }
                Err(f) => dead_letters::bulk::Selection::Filter(f.ledger()?),
            };
            let mut c = state.pool.get().await?;
            dead_letters::bulk::discard_many(&mut c, &selection, cap).await
        }
        .await,
    )
}

/// `GET /api/nodes`.
async fn nodes(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    answer(
        async {
            let mut c = state.pool.get().await?;
            let nodes = presence::nodes(&mut c).await?;
            Ok(json!({"nodes": nodes}))
        }
        .await,
    )
}
