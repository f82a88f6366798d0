//! One firm's page (`GET /firms/{firm}`, by its id or its name): what an operator of a
//! multi-firm rail asks first when a client calls: is it paused, how much of its work waits,
//! how long its counsel's oldest upload has waited, what is building; with a way to its matters
//! and the levers of the firms page. An unknown firm is the styled 404.

use actix_web::{HttpRequest, HttpResponse, web};

use super::auth;
use super::pages::{Chrome, conn, page, seconds};
use crate::error::Error;
use crate::ledger::fairness;
use crate::ledger::matters::{self, MatterState};
use crate::surface::web::responses::failure;
use crate::surface::web::state::HttpState;

#[derive(askama::Template)]
#[template(path = "firm.html")]
struct FirmPage {
    chrome: Chrome,
    firm_id: String,
    name: String,
    weight: i32,
    paused: bool,
    unserved: i64,
    running: i64,
    oldest: String,
    exhausted: i64,
    matters_link: String,
    exhausted_link: String,
}

/// `GET /firms/{firm}`.
pub async fn firm(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<String>,
) -> HttpResponse {
    let viewer = match auth::viewer(&req, &state).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let named = path.into_inner();
    let read = async {
        let mut c = conn(&state).await?;
        let unknown = || Error::NotFound(format!("firm {:?}", crate::text::clip(&named, 80)));
        let id = fairness::find(&mut c, &named).await?.ok_or_else(unknown)?;
        let f = fairness::firm(&mut c, id).await?.ok_or_else(unknown)?;
        let exhausted = matters::count(
            &mut c,
            &matters::MatterQuery {
                firm_id: Some(id),
                state: Some(MatterState::RetriesExhausted),
                ..Default::default()
            },
            state.settings.retry.max_attempts,
        )
        .await?;
        Ok::<_, Error>((f, exhausted))
    }
    .await;
    let (f, exhausted) = match read {
        Ok(v) => v,
        Err(e) => return failure(&e),
    };
    let t = FirmPage {
        chrome: Chrome::new(&state, &viewer, "firms", None),
        firm_id: f.firm_id.to_string(),
        name: f.name.clone().unwrap_or_default(),
        weight: f.weight,
        paused: f.paused,
        unserved: f.unserved,
        running: f.running,
        oldest: f.oldest_interactive_s.map(seconds).unwrap_or_default(),
        exhausted,
        matters_link: format!("/matters?firm={}", f.firm_id),
        exhausted_link: format!(
            "/matters?firm={}&state={}",
            f.firm_id,
            MatterState::RetriesExhausted.as_str()
        ),
    };
    page(&viewer, &t)
}
