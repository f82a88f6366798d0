//! The console's firms page: who is waiting, and the operator's levers on who is served next
//! (`ledger::fairness`): a firm's name and weight, pause and resume, and the rail's pause.

use actix_web::{HttpRequest, HttpResponse, web};

use super::auth;
use super::pages::{Chrome, CsrfForm, conn, page, redirect, seconds};
use crate::error::{Error, Result};
use crate::ledger::fairness::{self, FirmSettings};
use crate::surface::web::responses::failure;
use crate::surface::web::state::HttpState;

#[derive(askama::Template)]
#[template(path = "firms.html")]
struct FirmsPage {
    chrome: Chrome,
    rail_paused: bool,
    rows: Vec<FirmLine>,
}

struct FirmLine {
    firm_id: String,
    name: String,
    weight: i32,
    paused: bool,
    unserved: i64,
    running: i64,
    oldest: String,
}

/// `GET /firms`.
pub async fn firms(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    let viewer = match auth::viewer(&req, &state).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let read = async {
        let mut c = conn(&state).await?;
        let firms = fairness::firms(&mut c).await?;
        let rail = fairness::rail_paused(&mut c).await?;
        Ok::<_, Error>((firms, rail))
    }
    .await;
    let (firms, rail_paused) = match read {
        Ok(v) => v,
        Err(e) => return failure(&e),
    };
    let t = FirmsPage {
        chrome: Chrome::new(&state, &viewer, "firms", None),
        rail_paused,
        rows: firms
            .iter()
            .map(|f| FirmLine {
                firm_id: f.firm_id.to_string(),
                name: f.name.clone().unwrap_or_default(),
                weight: f.weight,
                paused: f.paused,
                unserved: f.unserved,
                running: f.running,
                oldest: f.oldest_interactive_s.map(seconds).unwrap_or_default(),
            })
            .collect(),
    };
    page(&viewer, &t)
}

/// The settings form of one firm.
#[derive(Debug, serde::Deserialize)]
pub struct FirmForm {
    csrf: Option<String>,
    name: Option<String>,
    weight: Option<String>,
}

/// `POST /firms/{firm}/{pause|resume|set}`.
pub async fn firm_action(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    form: web::Form<FirmForm>,
) -> HttpResponse {
    if let Err(r) = auth::check_form(&req, &state, form.csrf.as_deref().unwrap_or("")).await {
        return r;
    }
    let result = async {
        let firm = uuid::Uuid::parse_str(&path.0)
            .map_err(|_| Error::InvalidInput(format!("firm {:?} is not a UUID", path.0)))?;
        let settings = match path.1.as_str() {
            "pause" => FirmSettings {
                paused: Some(true),
                ..Default::default()
            },
            "resume" => FirmSettings {
                paused: Some(false),
                ..Default::default()
            },
            "set" => FirmSettings {
                name: form.name.clone(),
                weight: weight(form.weight.as_deref())?,
                paused: None,
            },
            other => return Err(Error::NotFound(format!("no action {other:?}"))),
        };
        let mut c = conn(&state).await?;
        fairness::set_firm(&mut c, firm, &settings).await?;
        tracing::info!(firm_id = %firm, action = %path.1, "console: firm changed");
        Ok(())
    }
    .await;
    match result {
        Ok(()) => redirect("/firms"),
        Err(e) => failure(&e),
    }
}

/// A weight typed in the form: blank leaves it as it is.
fn weight(typed: Option<&str>) -> Result<Option<i32>> {
    match typed.map(str::trim).filter(|w| !w.is_empty()) {
        None => Ok(None),
        Some(w) => w.parse().map(Some).map_err(|_| {
            Error::InvalidInput(format!(
                "weight {w:?} is not a whole number from 1 to {}",
                fairness::MAX_WEIGHT
            ))
        }),
    }
}

/// `POST /rail/{pause|resume}`.
pub async fn rail_action(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<String>,
    form: web::Form<CsrfForm>,
) -> HttpResponse {
    if let Err(r) = auth::check_form(&req, &state, form.csrf.as_deref().unwrap_or("")).await {
        return r;
    }
    let paused = path.as_str() == "pause";
    let result = async {
        let mut c = conn(&state).await?;
        fairness::set_rail_paused(&mut c, paused).await
    }
    .await;
    match result {
        Ok(()) => {
            tracing::info!(paused, "console: rail pause changed");
            redirect("/firms")
        }
        Err(e) => failure(&e),
    }
}
