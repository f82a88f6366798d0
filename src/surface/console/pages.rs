//! The console's pages, server-rendered (askama templates in `src/surface/templates/`, every
//! value escaped by the engine). Every figure on a page is read from the ledger for that
//! request; nothing is cached in the process, so every node's console shows the same truth.
//! Each page's handler gathers its rows into view structs of plain strings: the templates
//! only lay them out.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use super::auth::{self, Viewer};
use super::brief_view::BriefView;
use crate::error::{Error, Result};
use crate::ledger::matters::{self, MatterState};
use crate::ledger::{RunOutcome, RunRow, presence, reads};
use crate::surface::web::access::token_matches;
use crate::surface::web::responses::{failure, secure};
use crate::surface::web::state::HttpState;

/// Rows per page of the matter list.
pub const PAGE_SIZE: i64 = 50;

/// What every page's frame shows.
pub struct Chrome {
    pub node_id: String,
    pub section: &'static str,
    pub csrf: String,
    /// A session to log out of (not for a token-less console or a bearer client).
    pub can_log_out: bool,
    pub notice: String,
}

impl Chrome {
    pub(crate) fn new(
        state: &HttpState,
        viewer: &Viewer,
        section: &'static str,
        notice: Option<&str>,
    ) -> Self {
        Self {
            node_id: state.node_id.clone(),
            section,
            csrf: viewer.csrf().to_owned(),
            can_log_out: viewer.session.is_some() && !state.settings.http.token.trim().is_empty(),
            notice: notice
                .map(|n| crate::text::clip(n, 300).to_owned())
                .unwrap_or_default(),
        }
    }
}

pub(crate) fn page(viewer: &Viewer, t: &impl askama::Template) -> HttpResponse {
    match t.render() {
        Ok(html) => {
            let mut b = secure(HttpResponse::Ok());
            if let Some(c) = &viewer.set_cookie {
                b.insert_header((header::SET_COOKIE, c.clone()));
            }
            b.content_type("text/html; charset=utf-8").body(html)
        }
        Err(e) => failure(&Error::internal_from("rendering a console page", e)),
    }
}

pub(crate) fn when(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "-".into())
}

pub(crate) fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

pub(crate) fn max_attempts(state: &HttpState) -> u32 {
    state.settings.retry.max_attempts
}

pub(crate) async fn conn(state: &HttpState) -> Result<crate::db::pool::Conn<'_>> {
    Ok(state.pool.get().await?)
}

// ----------------------------------------------------------------------------- overview

/// A run as a table row.
pub struct RunLine {
    pub matter_link: String,
    pub matter_title: String,
    pub token: i64,
    pub outcome: String,
    pub outcome_class: &'static str,
    pub node_id: String,
    pub started: String,
    pub duration: String,
    pub error: String,
}

fn outcome_class(o: RunOutcome) -> &'static str {
    match o {
        RunOutcome::Landed => "good",
        RunOutcome::Running => "busy",
        RunOutcome::Released => "quiet",
        RunOutcome::Fenced | RunOutcome::Failed | RunOutcome::LeaseExpired => "bad",
    }
}

fn run_line(r: &RunRow, title: Option<&String>) -> RunLine {
    let duration = r
        .finished_at
        .map(|f| seconds((f - r.started_at).num_milliseconds() as f64 / 1000.0))
        .unwrap_or_else(|| "-".into());
    RunLine {
        matter_link: format!("/firms/{}/matters/{}", r.firm_id, r.matter_id),
        matter_title: title.cloned().unwrap_or_else(|| r.matter_id.to_string()),
        token: r.token,
        outcome: r.outcome.to_string(),
        outcome_class: outcome_class(r.outcome),
        node_id: r.node_id.clone(),
        started: when(Some(r.started_at)),
        duration,
        error: r.error.clone().unwrap_or_default(),
    }
}

pub struct StateCount {
    pub state: &'static str,
    pub label: &'static str,
    pub n: i64,
}

#[derive(askama::Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    chrome: Chrome,
    states: Vec<StateCount>,
    o: matters::Overview,
    exhausted: i64,
    oldest: String,
    stranded: i64,
    republish_cap: i32,
    owed: i64,
    owed_after: u64,
    oldest_owed: String,
    oldest_event_days: String,
    oldest_run_days: String,
    running: Vec<RunLine>,
    trouble: Vec<RunLine>,
    /// The firm whose unserved interactive demand has waited longest, and how long.
    waiting_firm: String,
    waiting_firm_link: String,
    waiting_for: String,
}

pub async fn overview(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    let viewer = match auth::viewer(&req, &state).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let data = async {
        let mut c = conn(&state).await?;
        let o = matters::overview(&mut c, max_attempts(&state)).await?;
        let g = reads::gauges(&mut c).await?;
        let running = reads::recent_runs(&mut c, &[RunOutcome::Running], 50).await?;
        let trouble = reads::recent_runs(&mut c, RunOutcome::TROUBLE, 30).await?;
        let keys: Vec<_> = running
            .iter()
            .chain(&trouble)
            .map(|r| (r.firm_id, r.matter_id))
            .collect();
        let titles = matters::titles(&mut c, &keys).await?;
        let busiest = crate::ledger::fairness::busiest(&mut c, 1).await?;
        Ok::<_, Error>((o, g, running, trouble, titles, busiest))
    }
    .await;
    let (o, g, running, trouble, titles, busiest) = match data {
        Ok(d) => d,
        Err(e) => return failure(&e),
    };
    let line = |r: &RunRow| run_line(r, titles.get(&(r.firm_id, r.matter_id)));
    let t = OverviewPage {
        chrome: Chrome::new(&state, &viewer, "overview", None),
        states: MatterState::ALL
            .iter()
            .map(|s| StateCount {
                state: s.as_str(),
                label: s.label(),
                n: o.count(*s),
            })
            .collect(),
        exhausted: o.count(MatterState::RetriesExhausted),
        oldest: seconds(o.oldest_unpublished_seconds),
        stranded: g.stranded_events,
        owed: g.owed_facts,
        owed_after: matters::OWED_AFTER.as_secs(),
        oldest_owed: seconds(g.oldest_owed_seconds),
        oldest_event_days: format!("{:.1}", g.oldest_event_seconds / 86400.0),
        oldest_run_days: format!("{:.1}", g.oldest_run_seconds / 86400.0),
        republish_cap: crate::ledger::outbox::REPUBLISH_CAP,
        running: running.iter().map(line).collect(),
        trouble: trouble.iter().map(line).collect(),
        waiting_firm: busiest
            .first()
            .filter(|f| f.oldest_interactive_s.is_some())
            .map(|f| f.name.clone().unwrap_or_else(|| f.firm_id.to_string()))
            .unwrap_or_default(),
        waiting_firm_link: busiest
            .first()
            .map(|f| format!("/firms/{}", f.firm_id))
            .unwrap_or_default(),
        waiting_for: busiest
            .first()
            .and_then(|f| f.oldest_interactive_s)
            .map(seconds)
            .unwrap_or_default(),
        o,
    };
    page(&viewer, &t)
}

// ----------------------------------------------------------------------------- one matter

pub struct EventRow {
    pub name: String,
    pub created: String,
    pub published: String,
    pub consumed: String,
    pub event_id: String,
}

pub struct ClaimView {
    pub token: i64,
    pub node_id: String,
    pub claimed: String,
    pub deadline: String,
}

#[derive(askama::Template)]
#[template(path = "matter.html")]
struct MatterPage {
    chrome: Chrome,
    firm_id: String,
    matter_id: String,
    title: String,
    state: &'static str,
    label: &'static str,
    exhausted: bool,
    retryable: bool,
    archived: bool,
    failures: i32,
    max_attempts: u32,
    last_error: String,
    requested: i64,
    landed: i64,
    frame_generation: i64,
    frame_landed: String,
    brief: Option<BriefView>,
    claim: Option<ClaimView>,
    runs: Vec<RunLine>,
    events: Vec<EventRow>,
}

#[derive(Deserialize)]
pub struct NoticeQuery {
    notice: Option<String>,
    #[serde(rename = "ref")]
    reference: Option<String>,
}

pub async fn matter(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    query: web::Query<NoticeQuery>,
) -> HttpResponse {
    let viewer = match auth::viewer(&req, &state).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (firm, matter) = match ids(&path) {
        Ok(v) => v,
        Err(e) => return failure(&e),
    };
    let max = max_attempts(&state);
    let data = async {
        let mut c = conn(&state).await?;
        let record = crate::ledger::facts::matter(&mut c, firm, matter)
            .await?
            .ok_or_else(|| Error::NotFound(format!("matter {matter} of firm {firm}")))?;
        let st = matters::state_of(&mut c, firm, matter, max)
            .await?
            .unwrap_or(MatterState::Unserved);
        let status = reads::status(&mut c, firm, matter, 20).await?;
        let frame = reads::latest_frame(&mut c, firm, matter).await?;
        let events = matters::events_of(&mut c, firm, matter, 20).await?;
        Ok::<_, Error>((record, st, status, frame, events))
    }
    .await;
    let (record, st, status, frame, events) = match data {
        Ok(d) => d,
        Err(e) => return failure(&e),
    };
    let job = status.job.as_ref();
    let claim = job
        .filter(|j| j.run_status == crate::ledger::RunStatus::Running)
        .map(|j| {
            let run = status
                .runs
                .iter()
                .find(|r| Some(r.run_id) == j.claimed_run_id);
            ClaimView {
                token: j.claimed_generation,
                node_id: run.map(|r| r.node_id.clone()).unwrap_or_else(|| "-".into()),
                claimed: when(j.claimed_at),
                deadline: when(j.lease_expires_at),
            }
        });
    let title = record.title.clone();
    let t = MatterPage {
        chrome: Chrome::new(
            &state,
            &viewer,
            "matters",
            Notice::text(query.notice.as_deref(), query.reference.as_deref()).as_deref(),
        ),
        firm_id: firm.to_string(),
        matter_id: matter.to_string(),
        state: st.as_str(),
        label: st.label(),
        exhausted: st == MatterState::RetriesExhausted,
        retryable: matches!(st, MatterState::RetriesExhausted | MatterState::Failed),
        archived: st == MatterState::Archived,
        failures: job.map_or(0, |j| j.consecutive_failures),
        max_attempts: max,
        last_error: status
            .runs
            .iter()
            .find_map(|r| r.error.clone())
            .unwrap_or_default(),
        requested: job.map_or(0, |j| j.requested_generation),
        landed: job.map_or(0, |j| j.landed_generation),
        frame_generation: frame.as_ref().map_or(0, |f| f.generation),
        frame_landed: when(frame.as_ref().map(|f| f.created_at)),
        brief: frame.as_ref().map(|f| BriefView::of(&f.body)),
        claim,
        runs: status
            .runs
            .iter()
            .map(|r| run_line(r, Some(&title)))
            .collect(),
        events: events
            .iter()
            .map(|e| EventRow {
                name: e.event_name.clone(),
                created: when(Some(e.created_at)),
                published: when(e.published_at),
                consumed: when(e.consumed_at),
                event_id: e.event_id.to_string(),
            })
            .collect(),
        title,
    };
    page(&viewer, &t)
}

fn ids(path: &(String, String)) -> Result<(Uuid, Uuid)> {
    let firm = Uuid::parse_str(&path.0)
        .map_err(|_| Error::InvalidInput(format!("firm {:?} is not a UUID", path.0)))?;
    let matter = Uuid::parse_str(&path.1)
        .map_err(|_| Error::InvalidInput(format!("matter {:?} is not a UUID", path.1)))?;
    Ok((firm, matter))
}

#[derive(Deserialize)]
pub struct CsrfForm {
    pub(crate) csrf: Option<String>,
}

/// `POST .../retry` and `POST .../rebuild`: the two actions of a matter's page.
pub async fn matter_action(
    req: HttpRequest,
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
    form: web::Form<CsrfForm>,
) -> HttpResponse {
    if let Err(r) = auth::check_form(&req, &state, form.csrf.as_deref().unwrap_or("")).await {
        return r;
    }
    let (firm, matter) = match ids(&(path.0.clone(), path.1.clone())) {
        Ok(v) => v,
        Err(e) => return failure(&e),
    };
    let action = path.2.as_str();
    let result = async {
        let mut c = conn(&state).await?;
        match action {
            "retry" => matters::retry(&mut c, firm, matter, max_attempts(&state)).await,
            "rebuild" => crate::ledger::facts::request_brief(&mut c, firm, matter).await,
            other => Err(Error::NotFound(format!("no action {other:?}"))),
        }
    }
    .await;
    let notice = match result {
        Ok(event) => {
            tracing::info!(%firm, %matter, %event, action, "console: demand recorded");
            match action {
                "retry" => Notice::RetryRecorded.with(event),
                _ => Notice::RebuildRequested.with(event),
            }
        }
        Err(Error::Conflict(_)) => Notice::NothingToRetry.with(matter),
        Err(Error::NotFound(_)) => Notice::NotFound.with(matter),
        Err(e) => return failure(&e),
    };
    redirect(&format!("/firms/{firm}/matters/{matter}?{notice}"))
}

pub fn redirect(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to.to_owned()))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}

/// What an action's redirect tells the page to say: a code and the id it concerns, never text
/// from the link (a crafted link cannot put words in the console's mouth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    RetryRecorded,
    RebuildRequested,
    NothingToRetry,
    Replayed,
    RefusedAgain,
    Discarded,
    AlreadyResolved,
    NotFound,
}

impl Notice {
    const ALL: &'static [(Notice, &'static str)] = &[
        (Notice::RetryRecorded, "retry-recorded"),
        (Notice::RebuildRequested, "rebuild-requested"),
        (Notice::NothingToRetry, "nothing-to-retry"),
        (Notice::Replayed, "replayed"),
        (Notice::RefusedAgain, "refused-again"),
        (Notice::Discarded, "discarded"),
        (Notice::AlreadyResolved, "already-resolved"),
        (Notice::NotFound, "not-found"),
    ];

    fn code(self) -> &'static str {
        Notice::ALL
            .iter()
            .find(|(n, _)| *n == self)
            .map_or("", |(_, c)| c)
    }

    /// The query string of a redirect: `notice=CODE&ref=UUID`.
    pub(crate) fn with(self, id: Uuid) -> String {
        format!("notice={}&ref={id}", self.code())
    }

    /// The sentence for a code and its id; `None` for anything else.
    pub fn text(code: Option<&str>, id: Option<&str>) -> Option<String> {
        let (n, _) = Notice::ALL.iter().find(|(_, c)| Some(*c) == code)?;
        let id = id
            .and_then(|i| Uuid::parse_str(i).ok())
            .map(|i| i.to_string())
            .unwrap_or_else(|| "-".into());
        Some(match n {
            Notice::RetryRecorded => {
                format!("Retry recorded (event {id}): its retries start again and a build follows.")
            }
            Notice::RebuildRequested => format!("Rebuild requested (event {id}): a build follows."),
            Notice::NothingToRetry => {
                "Nothing to retry: this matter is not failing (ask for a rebuild instead).".into()
            }
            Notice::Replayed => format!("Replayed {id}: the inbox accepted it."),
            Notice::RefusedAgain => {
                format!("Replayed {id}: refused again; it stays here with the new reason.")
            }
            Notice::Discarded => format!("Discarded {id}."),
            Notice::AlreadyResolved => format!("Dead letter {id} is already resolved."),
            Notice::NotFound => format!("{id}: not found."),
        })
    }
}

// ----------------------------------------------------------------------------- nodes

pub struct NodeLine {
    pub node_id: String,
    pub version: String,
    pub transport: String,
    pub started: String,
    pub last_seen: String,
    pub silent: String,
    pub builds: i64,
    pub alive: bool,
    pub status: String,
}

#[derive(askama::Template)]
#[template(path = "nodes.html")]
struct NodesPage {
    chrome: Chrome,
    rows: Vec<NodeLine>,
}

/// How a node's row reads: alive, stopped (it said so), or silent (heartbeats missing).
pub fn node_status(n: &presence::NodeRow) -> String {
    if n.alive {
        "alive".into()
    } else if n.stopped_at.is_some() {
        format!("gone: stopped {}", when(n.stopped_at))
    } else {
        format!(
            "gone: no heartbeat for {} (every {} s expected)",
            seconds(n.silent_seconds),
            n.heartbeat_seconds
        )
    }
}

pub async fn nodes(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    let viewer = match auth::viewer(&req, &state).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let rows = async {
        let mut c = conn(&state).await?;
        presence::nodes(&mut c).await
    }
    .await;
    let rows = match rows {
        Ok(r) => r,
        Err(e) => return failure(&e),
    };
    let t = NodesPage {
        chrome: Chrome::new(&state, &viewer, "nodes", None),
        rows: rows
            .iter()
            .map(|n| NodeLine {
                node_id: n.node_id.clone(),
                version: n.version.clone(),
                transport: n.transport.clone(),
                started: when(Some(n.started_at)),
                last_seen: when(Some(n.last_seen_at)),
                silent: seconds(n.silent_seconds),
                builds: n.builds_in_flight,
                alive: n.alive,
                status: node_status(n),
            })
            .collect(),
    };
    page(&viewer, &t)
}

// ----------------------------------------------------------------------------- login

#[derive(askama::Template)]
#[template(path = "login.html")]
struct LoginPage {
    next: String,
    error: String,
    token_configured: bool,
}

#[derive(Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

pub async fn login_form(state: web::Data<HttpState>, query: web::Query<NextQuery>) -> HttpResponse {
    login_page(
        &state,
        &auth::safe_next(query.next.as_deref()),
        "",
        actix_web::http::StatusCode::OK,
    )
}

fn login_page(
    state: &HttpState,
    next: &str,
    error: &str,
    status: actix_web::http::StatusCode,
) -> HttpResponse {
    let t = LoginPage {
        next: next.to_owned(),
        error: error.to_owned(),
        token_configured: !state.settings.http.token.trim().is_empty(),
    };
    match askama::Template::render(&t) {
        Ok(html) => secure(HttpResponse::build(status))
            .content_type("text/html; charset=utf-8")
            .body(html),
        Err(e) => failure(&Error::internal_from("rendering the login page", e)),
    }
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: Option<String>,
    next: Option<String>,
}

pub async fn login(
    req: HttpRequest,
    state: web::Data<HttpState>,
    form: web::Form<LoginForm>,
) -> HttpResponse {
    let next = auth::safe_next(form.next.as_deref());
    let configured = state.settings.http.token.trim();
    let given = form.token.as_deref().unwrap_or("").trim();
    if !configured.is_empty() && !token_matches(given, configured) {
        // A wrong guess costs the guesser time, not the node: only this request waits.
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        tracing::warn!(peer = ?req.peer_addr(), "console: login refused (wrong token)");
        return login_page(
            &state,
            &next,
            "That is not the admin token (http.token).",
            actix_web::http::StatusCode::UNAUTHORIZED,
        );
    }
    let session = match auth::open(&state).await {
        Ok(s) => s,
        Err(e) => return failure(&e),
    };
    tracing::info!(peer = ?req.peer_addr(), "console: session opened");
    let cookie = auth::session_cookie(&req, Some(&session), auth::session_seconds(&state));
    HttpResponse::SeeOther()
        .insert_header((header::SET_COOKIE, cookie))
        .insert_header((header::LOCATION, next))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}

pub async fn logout(
    req: HttpRequest,
    state: web::Data<HttpState>,
    form: web::Form<CsrfForm>,
) -> HttpResponse {
    if let Err(r) = auth::check_form(&req, &state, form.csrf.as_deref().unwrap_or("")).await {
        return r;
    }
    if let Some(id) = auth::cookie_session(&req) {
        let closed = async {
            let mut c = conn(&state).await?;
            crate::ledger::sessions::close(&mut c, &auth::credential(&state), &id).await
        }
        .await;
        if let Err(e) = closed {
            return failure(&e);
        }
    }
    HttpResponse::SeeOther()
        .insert_header((header::SET_COOKIE, auth::session_cookie(&req, None, 0)))
        .insert_header((header::LOCATION, "/login"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}
