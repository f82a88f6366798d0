//! The console's bulk actions: **Retry selected** / **Retry all matching** on the matters page
//! (`POST /matters/retry`) and **Discard selected** / **Discard all matching** on the dead
//! letters page (`POST /dead-letters/discard`). Each is a form with the session's CSRF token,
//! like the per-matter actions, and is the ledger's bulk transition
//! ([`matters::bulk`], [`dead_letters::bulk`]); the page it came from is shown again with what
//! it did.
//!
//! A form sends its checkboxes as repeated fields (`m=FIRM:MATTER&m=...`), which
//! `web::Form` cannot read, so the body is parsed here.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::auth;
use super::pages::{conn, redirect};
use crate::error::{Error, Result};
use crate::ledger::dead_letters;
use crate::ledger::matters::{self, bulk::MAX_BULK};
use crate::surface::selection::{self, DeadLetterFilter, MatterFilter};
use crate::surface::web::responses::failure_as;
use crate::surface::web::state::HttpState;

/// A form's fields, in order, repeated ones kept.
struct Fields(Vec<(String, String)>);

impl Fields {
    fn parse(body: &[u8]) -> Self {
        Fields(url::form_urlencoded::parse(body).into_owned().collect())
    }

    /// The form's fields, once its CSRF token (and origin) passed [`auth::check_form`].
    async fn checked(
        req: &HttpRequest,
        state: &HttpState,
        body: &[u8],
    ) -> std::result::Result<Self, HttpResponse> {
        let form = Fields::parse(body);
        auth::check_form(req, state, form.one("csrf").as_deref().unwrap_or("")).await?;
        Ok(form)
    }

    fn one(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The checked rows' values of field `name`, each read by `parse` (given `what` and its
    /// place, to name a bad one); refused when none is checked.
    fn selected<T>(
        &self,
        name: &str,
        what: &str,
        parse: impl Fn(&str, &str) -> Result<T>,
    ) -> Result<Vec<T>> {
        let rows = self
            .all(name)
            .iter()
            .enumerate()
            .map(|(i, v)| parse(&format!("{what} {}", i + 1), v))
            .collect::<Result<Vec<_>>>()?;
        if rows.is_empty() {
            return Err(Error::InvalidInput(format!(
                "no {what} is selected: tick the rows to act on, or press the button for all matching"
            )));
        }
        Ok(rows)
    }

    /// Whether the form asks for the checked rows (`scope=selected`) or every row its filter
    /// matches (`scope=filter`).
    fn all_matching(&self) -> Result<bool> {
        match self.one("scope").as_deref() {
            Some("selected") => Ok(false),
            Some("filter") => Ok(true),
            other => Err(Error::InvalidInput(format!(
                "scope {other:?} is not one of: selected, filter"
            ))),
        }
    }
}

/// `POST /matters/retry`: the checked matters (`m=FIRM:MATTER`), or every one matching the
/// page's filter (`q`, `state`, `firm`); back to the page with what it did.
pub async fn retry_matters(
    req: HttpRequest,
    state: web::Data<HttpState>,
    body: web::Bytes,
) -> HttpResponse {
    let form = match Fields::checked(&req, &state, &body).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let filter = MatterFilter {
        q: form.one("q"),
        state: form.one("state"),
        firm: form.one("firm"),
    };
    let result = async {
        let selection = if form.all_matching()? {
            let mut c = conn(&state).await?;
            matters::bulk::Selection::Filter(filter.query(&mut c).await?)
        } else {
            let keys = form.selected("m", "matter", selection::matter_key)?;
            matters::bulk::Selection::Matters(keys)
        };
        let mut c = conn(&state).await?;
        let r = matters::bulk::retry_exhausted(
            &mut c,
            &selection,
            MAX_BULK,
            state.settings.retry.max_attempts,
        )
        .await?;
        Ok(format!(
            "/matters?q={}&state={}&firm={}&{}",
            auth::percent(filter.q.as_deref().unwrap_or("")),
            auth::percent(filter.state.as_deref().unwrap_or("")),
            auth::percent(filter.firm.as_deref().unwrap_or("")),
            BulkNotice::query("retried", r.retried, r.skipped, r.more)
        ))
    }
    .await;
    back_or_refuse(result)
}

/// `POST /dead-letters/discard`: the checked dead letters (`id=UUID`), or every open one
/// matching the page's filter (`reason`, `routing_key`); back to the page with what it did.
pub async fn discard_dead_letters(
    req: HttpRequest,
    state: web::Data<HttpState>,
    body: web::Bytes,
) -> HttpResponse {
    let form = match Fields::checked(&req, &state, &body).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let filter = DeadLetterFilter {
        reason: form.one("reason"),
        routing_key: form.one("routing_key"),
        all: None,
    };
    let result = async {
        let selection = if form.all_matching()? {
            dead_letters::bulk::Selection::Filter(filter.ledger()?)
        } else {
            let ids = form.selected("id", "dead letter", selection::uuid)?;
            dead_letters::bulk::Selection::Ids(ids)
        };
        let mut c = conn(&state).await?;
        let d = dead_letters::bulk::discard_many(&mut c, &selection, MAX_BULK).await?;
        Ok(format!(
            "/dead-letters?reason={}&routing_key={}&{}",
            auth::percent(filter.reason.as_deref().unwrap_or("")),
            auth::percent(filter.routing_key.as_deref().unwrap_or("")),
            BulkNotice::query("discarded", d.discarded, d.skipped, d.more)
        ))
    }
    .await;
    back_or_refuse(result)
}

/// Back to the page a bulk action came from, or the error page: bad input (nothing selected, a
/// bad id) is 422.
fn back_or_refuse(result: Result<String>) -> HttpResponse {
    match result {
        Ok(back) => redirect(&back),
        Err(e) => failure_as(&e, StatusCode::UNPROCESSABLE_ENTITY),
    }
}

/// What a bulk action's redirect tells the page to say: which action and its counts, never
/// text from the link (a crafted link can only change the numbers).
#[derive(Debug, Default, Deserialize)]
pub struct BulkNotice {
    done: Option<String>,
    n: Option<String>,
    skipped: Option<String>,
    more: Option<String>,
}

impl BulkNotice {
    fn query(done: &str, n: usize, skipped: usize, more: bool) -> String {
        format!(
            "done={done}&n={n}&skipped={skipped}&more={}",
            u8::from(more)
        )
    }

    /// The sentence, when the query is one a bulk action wrote.
    pub fn text(&self) -> Option<String> {
        let count = |v: &Option<String>| v.as_deref().and_then(|v| v.parse::<u32>().ok());
        let (n, skipped) = (count(&self.n)?, count(&self.skipped)?);
        let more = self.more.as_deref() == Some("1");
        let what = match self.done.as_deref()? {
            "retried" => format!(
                "Retried {n} matter(s) out of retries: each has a new demand (background work), \
                 and leaves “retries exhausted” once the trigger records it. Skipped {skipped} \
                 (not out of retries, or a demand already on its way)."
            ),
            "discarded" => format!(
                "Discarded {n} dead letter(s). Skipped {skipped} (already resolved or unknown)."
            ),
            _ => return None,
        };
        Some(if more {
            format!("{what} More match than one press takes ({MAX_BULK}): press again.")
        } else {
            what
        })
    }
}
