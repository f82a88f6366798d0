//! The JSON API of who is served next (`ledger::fairness`), for scripts: list and read firms,
//! name and weigh them, pause and resume a firm or the whole rail. Every route takes the admin
//! bearer token, like the rest of `/api`.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /api/firms` | every firm: name, weight, paused, unserved, running, oldest interactive age |
//! | `GET /api/firms/{firm}` | one firm (its id or its name) |
//! | `PUT /api/firms/{firm}` | `{"name"?, "weight"?, "paused"?}`: set what is given |
//! | `POST /api/firms/{firm}/{pause,resume}` | pause or resume a firm |
//! | `GET /api/rail`, `POST /api/rail/{pause,resume}` | the whole rail, its limits and hold |
//! | `PUT /api/rail/limits` | `{"max_running"?, "starts_per_minute"?}`: a count sets, `null` lifts |
//! | `POST /api/rail/release-builder` | lift the builder's hold now |

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use crate::error::{Error, Result};
use crate::ledger::fairness::{self, FirmSettings};
use crate::ledger::limits::{self, LimitsStatus};
use crate::surface::web::access::bearer_ok;
use crate::surface::web::responses::{error_response, method_not_allowed, only, unauthorized};
use crate::surface::web::state::HttpState;

/// The routes above, each answering 405 with `Allow` for another method.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(only("/api/firms", "GET", web::get().to(list)))
        .service(
            web::resource("/api/firms/{firm}")
                .route(web::get().to(show))
                .route(web::put().to(set))
                .default_service(web::to(|| method_not_allowed("GET, PUT"))),
        )
        .service(only(
            "/api/firms/{firm}/{action:pause|resume}",
            "POST",
            web::post().to(pause_firm),
        ))
        .service(only("/api/rail", "GET", web::get().to(rail)))
        .service(only(
            "/api/rail/{action:pause|resume}",
            "POST",
            web::post().to(pause_rail),
        ))
        .service(only("/api/rail/limits", "PUT", web::put().to(set_limits)))
        .service(only(
            "/api/rail/release-builder",
            "POST",
            web::post().to(release_builder),
        ));
}

/// What `PUT /api/firms/{firm}` takes; unknown fields are refused by name.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FirmBody {
    name: Option<String>,
    weight: Option<i32>,
    paused: Option<bool>,
}

fn answer<T: serde::Serialize>(r: Result<T>) -> HttpResponse {
    match r {
        Ok(v) => HttpResponse::Ok().json(v),
        Err(e) => error_response(&e),
    }
}

async fn list(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    answer(
        async {
            let mut c = state.pool.get().await?;
            fairness::firms(&mut c).await
        }
        .await,
    )
}

async fn show(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<String>,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    answer(
        async {
            let mut c = state.pool.get().await?;
            let id = fairness::resolve(&mut c, &path).await?;
            fairness::firm(&mut c, id)
                .await?
                .ok_or_else(|| Error::NotFound(format!("firm {id}")))
        }
        .await,
    )
}

async fn set(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    let body: FirmBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return HttpResponse::UnprocessableEntity()
                .json(json!({"error": format!("the body is not a firm's settings: {e}")}));
        }
    };
    let settings = FirmSettings {
        name: body.name,
        weight: body.weight,
        paused: body.paused,
    };
    answer(set_and_show(&state, &path, &settings).await)
}

async fn pause_firm(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    let (firm, action) = path.into_inner();
    let settings = FirmSettings {
        paused: Some(action == "pause"),
        ..Default::default()
    };
    answer(set_and_show(&state, &firm, &settings).await)
}

/// Sets `settings` on the firm named by `firm` (an id or a name) and answers it as it is now.
async fn set_and_show(
    state: &HttpState,
    firm: &str,
    settings: &FirmSettings,
) -> Result<fairness::FirmView> {
    let mut c = state.pool.get().await?;
    let id = fairness::resolve(&mut c, firm).await?;
    fairness::set_firm(&mut c, id, settings).await?;
    fairness::firm(&mut c, id)
        .await?
        .ok_or_else(|| Error::internal(format!("firm {id} vanished after it was set")))
}

async fn rail(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    answer(
        async {
            let mut c = state.pool.get().await?;
            let p = fairness::paused(&mut c).await?;
            let l = limits::read(&mut c).await?;
            Ok(json!({
                "paused": p.rail,
                "paused_firms": p.firms.len(),
                "limits": limits_json(&l),
            }))
        }
        .await,
    )
}

async fn pause_rail(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<String>,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    let paused = path.as_str() == "pause";
    answer(
        async {
            let mut c = state.pool.get().await?;
            fairness::set_rail_paused(&mut c, paused).await?;
            Ok(json!({"paused": paused}))
        }
        .await,
    )
}

fn limits_json(s: &LimitsStatus) -> serde_json::Value {
    json!({
        "max_running": s.limits.max_running,
        "starts_per_minute": s.limits.starts_per_minute,
        "builder_held_seconds": s.limits.builder_held_for.map(|d| d.as_secs_f64()),
        "builder_held_reason": s.held_reason,
    })
}

/// One limit of a `PUT /api/rail/limits` body: absent keeps it, `null` lifts it, a count sets
/// it; anything else is refused naming the key.
fn limit_field(
    body: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    now: Option<u32>,
) -> Result<Option<u32>> {
    match body.get(key) {
        None => Ok(now),
        Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "{key} must be a whole number of at least 1, or null for no limit; got {v}"
                ))
            }),
    }
}

async fn set_limits(
    req: HttpRequest,
    state: web::Data<HttpState>,
    body: web::Bytes,
) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    let body = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(serde_json::Value::Object(m)) => m,
        Ok(_) | Err(_) => {
            return HttpResponse::UnprocessableEntity().json(json!({
                "error": "the body must be a JSON object: {\"max_running\"?, \"starts_per_minute\"?}"
            }));
        }
    };
    if let Some(k) = body
        .keys()
        .find(|k| !["max_running", "starts_per_minute"].contains(&k.as_str()))
    {
        return HttpResponse::UnprocessableEntity().json(json!({
            "error": format!("unknown field {k:?}: the limits are max_running and starts_per_minute")
        }));
    }
    answer(
        async {
            let mut c = state.pool.get().await?;
            let now = limits::read(&mut c).await?.limits;
            let cap = limit_field(&body, "max_running", now.max_running)?;
            let rate = limit_field(&body, "starts_per_minute", now.starts_per_minute)?;
            limits::set(&mut c, cap, rate).await?;
            Ok(limits_json(&limits::read(&mut c).await?))
        }
        .await,
    )
}

async fn release_builder(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    if !bearer_ok(&req, &state) {
        return unauthorized();
    }
    answer(
        async {
            let mut c = state.pool.get().await?;
            limits::release_builder(&mut c).await?;
            Ok(limits_json(&limits::read(&mut c).await?))
        }
        .await,
    )
}
