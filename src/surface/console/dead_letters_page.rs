//! The console's dead letters page (`GET /dead-letters?reason=&routing_key=&all=1&page=`):
//! the messages the trigger refused, filtered by reason and routing key, 50 a page with
//! "N–M of T"; **Replay** and **Discard** on each, and the bulk discard ([`super::bulk`]) of the
//! checked ones or of every open one matching the filter.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use uuid::Uuid;

use super::auth;
use super::bulk::BulkNotice;
use super::pages::{Chrome, CsrfForm, Notice, PAGE_SIZE, conn, page, redirect, when};
use super::paging::Paging;
use crate::error::Error;
use crate::ledger::dead_letters;
use crate::surface::selection::{DeadLetterFilter, page_of};
use crate::surface::web::responses::failure;
use crate::surface::web::state::HttpState;

pub struct DeadLine {
    pub id: String,
    pub refused: String,
    pub reason: String,
    pub event_id: String,
    pub routing_key: String,
    pub body: String,
    pub replays: i32,
    pub node_id: String,
    pub resolution: String,
}

#[derive(askama::Template)]
#[template(path = "dead_letters.html")]
struct DeadLettersPage {
    chrome: Chrome,
    all: bool,
    reason: String,
    routing_key: String,
    /// The other view's link: resolved ones too, or open ones only (the filter kept).
    toggle: String,
    postgres_transport: bool,
    rows: Vec<DeadLine>,
    paging: Paging,
    max_bulk: usize,
}

#[derive(Deserialize)]
pub struct DeadQuery {
    reason: Option<String>,
    routing_key: Option<String>,
    all: Option<String>,
    page: Option<String>,
    notice: Option<String>,
    #[serde(rename = "ref")]
    reference: Option<String>,
}

/// `GET /dead-letters`.
pub async fn dead_letters_page(
    req: HttpRequest,
    state: web::Data<HttpState>,
    query: web::Query<DeadQuery>,
    bulk: web::Query<BulkNotice>,
) -> HttpResponse {
    let viewer = match auth::viewer(&req, &state).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (page_no, offset) = match page_of(query.page.as_deref(), PAGE_SIZE) {
        Ok(p) => p,
        Err(e) => return failure(&e),
    };
    let filter = DeadLetterFilter {
        reason: query.reason.clone(),
        routing_key: query.routing_key.clone(),
        all: query.all.clone(),
    };
    let result = async {
        let f = filter.ledger()?;
        let mut c = conn(&state).await?;
        let total = dead_letters::count(&mut c, &f).await?;
        let rows = dead_letters::page(&mut c, &f, PAGE_SIZE, offset).await?;
        Ok::<_, Error>((f, rows, total))
    }
    .await;
    let (f, rows, total) = match result {
        Ok(r) => r,
        Err(e) => return failure(&e),
    };
    let reason = f.reason.clone().unwrap_or_default();
    let routing_key = f.routing_key.clone().unwrap_or_default();
    let link = |all: bool, p: i64| {
        format!(
            "/dead-letters?reason={}&routing_key={}&all={}&page={p}",
            auth::percent(&reason),
            auth::percent(&routing_key),
            u8::from(all)
        )
    };
    let notice =
        Notice::text(query.notice.as_deref(), query.reference.as_deref()).or_else(|| bulk.text());
    let t = DeadLettersPage {
        chrome: Chrome::new(&state, &viewer, "dead-letters", notice.as_deref()),
        all: f.resolved_too,
        toggle: link(!f.resolved_too, 1),
        paging: Paging::new(page_no, PAGE_SIZE, rows.len(), total, |p| {
            link(f.resolved_too, p)
        }),
        reason: reason.clone(),
        routing_key: routing_key.clone(),
        max_bulk: crate::ledger::matters::bulk::MAX_BULK,
        postgres_transport: state.settings.transport.kind == crate::config::TransportKind::Postgres,
        rows: rows
            .iter()
            .map(|d| DeadLine {
                id: d.dead_letter_id.to_string(),
                refused: when(Some(d.refused_at)),
                reason: d.reason.clone(),
                event_id: d
                    .event_id
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "-".into()),
                // The escaped text, and the bytes it stands for when it had to be escaped.
                routing_key: match &d.routing_key_hex {
                    Some(hex) => format!("{} (bytes: {hex})", d.routing_key),
                    None => d.routing_key.clone(),
                },
                body: crate::text::clip(&d.body_text, 2000).to_owned(),
                replays: d.replays,
                node_id: d.node_id.clone(),
                resolution: match (&d.resolution, d.resolved_at) {
                    (Some(r), at) => format!("{r} {}", when(at)),
                    _ => String::new(),
                },
            })
            .collect(),
    };
    page(&viewer, &t)
}

/// `POST /dead-letters/{id}/replay` and `.../discard`.
pub async fn dead_letter_action(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    form: web::Form<CsrfForm>,
) -> HttpResponse {
    if let Err(r) = auth::check_form(&req, &state, form.csrf.as_deref().unwrap_or("")).await {
        return r;
    }
    let id = match Uuid::parse_str(&path.0) {
        Ok(id) => id,
        Err(_) => {
            return failure(&Error::InvalidInput(format!(
                "{:?} is not a dead letter id",
                path.0
            )));
        }
    };
    let result = async {
        let mut c = conn(&state).await?;
        match path.1.as_str() {
            "replay" => dead_letters::replay(&mut c, id).await.map(|r| match r {
                dead_letters::Replayed::Applied { .. } => Notice::Replayed,
                dead_letters::Replayed::RefusedAgain { .. } => Notice::RefusedAgain,
            }),
            "discard" => dead_letters::discard(&mut c, id)
                .await
                .map(|()| Notice::Discarded),
            other => Err(Error::NotFound(format!("no action {other:?}"))),
        }
    }
    .await;
    let notice = match result {
        Ok(n) => {
            tracing::info!(dead_letter_id = %id, action = %path.1, "console: dead letter handled");
            n.with(id)
        }
        Err(Error::Conflict(_)) => Notice::AlreadyResolved.with(id),
        Err(Error::NotFound(_)) => Notice::NotFound.with(id),
        Err(e) => return failure(&e),
    };
    redirect(&format!("/dead-letters?{notice}"))
}
