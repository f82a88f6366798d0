//! The console's matters page (`GET /matters?q=&state=&firm=&page=`): search by title, filter
//! by state and firm, 50 a page with "N–M of T", and the bulk retry of the matters out of
//! retries ([`super::bulk`]): a checkbox on each such row, **Retry selected** and **Retry all
//! matching**.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::auth;
use super::bulk::BulkNotice;
use super::pages::{Chrome, PAGE_SIZE, conn, max_attempts, page, when};
use super::paging::Paging;
use crate::error::Error;
use crate::ledger::matters::{self, MatterState};
use crate::surface::selection::{MatterFilter, page_of};
use crate::surface::web::responses::failure;
use crate::surface::web::state::HttpState;

#[derive(Deserialize)]
pub struct MattersQuery {
    q: Option<String>,
    state: Option<String>,
    firm: Option<String>,
    page: Option<String>,
}

pub struct MatterLine {
    pub link: String,
    pub title: String,
    pub firm_id: String,
    /// `FIRM:MATTER`, the value of its checkbox.
    pub key: String,
    /// Out of retries: it has a checkbox for the bulk retry.
    pub exhausted: bool,
    pub state: &'static str,
    pub label: &'static str,
    pub requested: i64,
    pub landed: i64,
    pub failures: i32,
    pub updated: String,
}

#[derive(askama::Template)]
#[template(path = "matters.html")]
struct MattersPage {
    chrome: Chrome,
    q: String,
    state: String,
    firm: String,
    states: Vec<(&'static str, &'static str)>,
    rows: Vec<MatterLine>,
    paging: Paging,
    max_bulk: usize,
}

/// `GET /matters`.
pub async fn matters(
    req: HttpRequest,
    state: web::Data<HttpState>,
    query: web::Query<MattersQuery>,
    notice: web::Query<BulkNotice>,
) -> HttpResponse {
    let viewer = match auth::viewer(&req, &state).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let q = query.into_inner();
    let filter = MatterFilter {
        q: q.q.clone(),
        state: q.state.clone(),
        firm: q.firm.clone(),
    };
    let (page_no, offset) = match page_of(q.page.as_deref(), PAGE_SIZE) {
        Ok(p) => p,
        Err(e) => return failure(&e),
    };
    let max = max_attempts(&state);
    let result = async {
        let mut c = conn(&state).await?;
        // A firm's id, or the name operators gave it (`briefrail firm set --name`).
        let mut query = filter.query(&mut c).await?;
        let total = matters::count(&mut c, &query, max).await?;
        query.limit = PAGE_SIZE;
        query.offset = offset;
        let (rows, _) = matters::search(&mut c, &query, max).await?;
        Ok::<_, Error>((query, rows, total))
    }
    .await;
    let (query, rows, total) = match result {
        Ok(r) => r,
        Err(e) => return failure(&e),
    };
    let text = query.text.clone().unwrap_or_default();
    let state_name = query.state.map_or("", |s| s.as_str());
    let firm = query.firm_id.map(|f| f.to_string()).unwrap_or_default();
    let link = |p: i64| {
        format!(
            "/matters?q={}&state={state_name}&firm={firm}&page={p}",
            auth::percent(&text),
        )
    };
    let paging = Paging::new(page_no, PAGE_SIZE, rows.len(), total, link);
    let t = MattersPage {
        chrome: Chrome::new(&state, &viewer, "matters", notice.text().as_deref()),
        q: text.clone(),
        state: state_name.to_owned(),
        firm: firm.clone(),
        states: MatterState::ALL
            .iter()
            .map(|s| (s.as_str(), s.label()))
            .collect(),
        rows: rows
            .iter()
            .map(|m| {
                let s = m.state();
                MatterLine {
                    link: format!("/firms/{}/matters/{}", m.firm_id, m.matter_id),
                    title: m.title.clone(),
                    firm_id: m.firm_id.to_string(),
                    key: format!("{}:{}", m.firm_id, m.matter_id),
                    exhausted: s == MatterState::RetriesExhausted,
                    state: s.as_str(),
                    label: s.label(),
                    requested: m.requested_generation,
                    landed: m.landed_generation,
                    failures: m.consecutive_failures,
                    updated: when(m.updated_at),
                }
            })
            .collect(),
        paging,
        max_bulk: matters::bulk::MAX_BULK,
    };
    page(&viewer, &t)
}
