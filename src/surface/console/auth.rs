//! Who is looking: the console's login, session cookie and CSRF check.
//!
//! * A browser logs in once: `POST /login` with the admin token (`http.token`) opens a session
//!   in the ledger ([`sessions`]) and sets the cookie `briefrail_session` (HttpOnly,
//!   SameSite=Strict, expiring with the session). Pages without a session redirect to `/login`.
//! * A script may send `Authorization: Bearer <token>` instead (the JSON API's way); a browser
//!   never sends that header cross-site, so such a request needs no CSRF token.
//! * Every form that changes state carries the session's CSRF token; SameSite=Strict already
//!   keeps the cookie off cross-site requests, and a foreign `Origin` is refused too.
//! * With no token configured (loopback only, which config enforces), a page opens a session
//!   by itself, so forms are still protected from sites the operator's browser visits.
//! * A session is bound to the credential it was opened under ([`sessions::Credential`]): one a
//!   token-less node opened is good on token-less nodes only, and a token change revokes every
//!   session opened under the old token, on every node.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};

use crate::error::Result;
use crate::ledger::sessions::{self, Session};
use crate::surface::web::access::{bearer_ok, loopback_host, raw_host, token_matches};
use crate::surface::web::responses::{failure, unauthorized};
use crate::surface::web::state::HttpState;

pub const COOKIE: &str = "briefrail_session";

/// A request the console serves.
pub struct Viewer {
    /// The session, for a browser; `None` for a bearer-token client.
    pub session: Option<Session>,
    /// A cookie to set on the response (a session opened for a token-less console).
    pub set_cookie: Option<String>,
}

impl Viewer {
    /// The CSRF token a page's forms carry ("" for a bearer client, which needs none).
    pub fn csrf(&self) -> &str {
        self.session.as_ref().map_or("", |s| s.csrf_token.as_str())
    }
}

fn has_bearer_header(req: &HttpRequest) -> bool {
    req.headers().contains_key(header::AUTHORIZATION)
}

/// The session id the request's cookie names.
pub fn cookie_session(req: &HttpRequest) -> Option<String> {
    let raw = req.headers().get(header::COOKIE)?.to_str().ok()?;
    raw.split(';').find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == COOKIE && !v.is_empty() && v.len() <= 128).then(|| v.to_owned())
    })
}

/// The `Set-Cookie` value for a session (or, with `None`, one that removes it).
pub fn session_cookie(req: &HttpRequest, session: Option<&Session>, max_age_secs: i64) -> String {
    // Secure whenever the browser reached us over TLS (a terminating proxy says so).
    let tls = req
        .headers()
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let (value, age) = match session {
        Some(s) => (s.session_id.as_str(), max_age_secs),
        None => ("", 0),
    };
    format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={age}{}",
        if tls { "; Secure" } else { "" }
    )
}

/// The viewer of a page, or the response to send instead (a redirect to `/login`).
pub async fn viewer(
    req: &HttpRequest,
    state: &HttpState,
) -> std::result::Result<Viewer, HttpResponse> {
    if state.settings.http.token.trim().is_empty() && !loopback_host(req) {
        return Err(foreign_host());
    }
    let found = match cookie_session(req) {
        Some(id) => find(state, &id).await.map_err(|e| failure(&e))?,
        None => None,
    };
    if let Some(session) = found {
        return Ok(Viewer {
            session: Some(session),
            set_cookie: None,
        });
    }
    if has_bearer_header(req) && !state.settings.http.token.trim().is_empty() {
        return if bearer_ok(req, state) {
            Ok(Viewer {
                session: None,
                set_cookie: None,
            })
        } else {
            Err(unauthorized())
        };
    }
    if state.settings.http.token.trim().is_empty() {
        // No token to log in with: open a session so the forms carry a CSRF token.
        let session = open(state).await.map_err(|e| failure(&e))?;
        let cookie = session_cookie(req, Some(&session), session_seconds(state));
        return Ok(Viewer {
            session: Some(session),
            set_cookie: Some(cookie),
        });
    }
    Err(to_login(req))
}

/// 303 to `/login`, remembering where the operator was going.
pub fn to_login(req: &HttpRequest) -> HttpResponse {
    let next = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let url = format!("/login?next={}", percent(next));
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, url))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}

/// A state-changing form's check: a session whose CSRF token the form carries, from this
/// origin; or a bearer client. `None`: allowed.
pub async fn check_form(
    req: &HttpRequest,
    state: &HttpState,
    csrf: &str,
) -> std::result::Result<(), HttpResponse> {
    if let Some(origin) = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
    {
        let host = raw_host(req);
        let same = origin
            .split_once("://")
            .is_some_and(|(_, rest)| rest.trim_end_matches('/') == host);
        if !same {
            return Err(forbidden(
                "this form came from another site (Origin does not match)",
            ));
        }
    }
    if state.settings.http.token.trim().is_empty() && !loopback_host(req) {
        return Err(foreign_host());
    }
    if let Some(id) = cookie_session(req) {
        let session = find(state, &id).await.map_err(|e| failure(&e))?;
        return match session {
            Some(s) if token_matches(csrf, &s.csrf_token) => Ok(()),
            Some(_) => Err(forbidden(
                "the form's CSRF token does not match your session: reload the page and try again",
            )),
            None => Err(to_login(req)),
        };
    }
    if has_bearer_header(req)
        && bearer_ok(req, state)
        && !state.settings.http.token.trim().is_empty()
    {
        return Ok(());
    }
    Err(forbidden(
        "no session: open the console (log in) and submit the form from it",
    ))
}

fn forbidden(why: &str) -> HttpResponse {
    HttpResponse::Forbidden()
        .content_type("text/plain; charset=utf-8")
        .body(format!("403 forbidden: {why}\n"))
}

pub fn session_seconds(state: &HttpState) -> i64 {
    (state.settings.http.session_minutes * 60.0).round() as i64
}

/// The credential this node lets sessions in with: its token, now (a restart with another
/// token revokes the sessions opened under the old one).
pub fn credential(state: &HttpState) -> sessions::Credential {
    sessions::Credential::of(&state.settings.http.token)
}

pub async fn open(state: &HttpState) -> Result<Session> {
    let mut c = state.pool.get().await?;
    sessions::open(&mut c, &credential(state), session_seconds(state) as f64).await
}

async fn find(state: &HttpState, id: &str) -> Result<Option<Session>> {
    let mut c = state.pool.get().await?;
    sessions::find(&mut c, &credential(state), id).await
}

/// A `next` target that stays on this site: a path, never `//host` or a scheme.
/// Only printable ASCII: a browser drops tabs and newlines from a URL, so `/\t/evil.example`
/// would otherwise become `//evil.example` after the checks.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.bytes().all(|b| (0x21..=0x7e).contains(&b))
                && n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\') =>
        {
            n.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// 421 for a request whose `Host` is not a loopback name on a node without a token.
pub fn foreign_host() -> HttpResponse {
    HttpResponse::MisdirectedRequest()
        .content_type("text/plain; charset=utf-8")
        .body("421: this node has no http.token, so it answers only to a loopback host name (localhost, 127.0.0.1, [::1])\n")
}

/// Percent-encodes everything but unreserved characters and `/`.
pub fn percent(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
