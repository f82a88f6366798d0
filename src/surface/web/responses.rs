//! How the surface answers what it will not or cannot serve: 405 with `Allow`, 401 asking for
//! the bearer token, an error as JSON for the APIs, and as the console's styled page for a
//! browser.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::error::Error;

/// A resource answering `route` for its one method, and 405 with `Allow: allow` otherwise.
pub fn only(path: &str, allow: &'static str, route: actix_web::Route) -> actix_web::Resource {
    web::resource(path)
        .route(route)
        .default_service(web::to(move || method_not_allowed(allow)))
}

pub async fn method_not_allowed(allow: &'static str) -> HttpResponse {
    HttpResponse::MethodNotAllowed()
        .insert_header((actix_web::http::header::ALLOW, allow))
        .json(json!({"error": format!("method not allowed here; allowed: {allow}")}))
}

pub fn unauthorized() -> HttpResponse {
    HttpResponse::Unauthorized()
        .insert_header(("www-authenticate", "Bearer"))
        .json(json!({"error": "missing or wrong bearer token"}))
}

/// The status of an error, by its kind; `input` is what bad input answers (422 for the JSON
/// API, 400 for a page).
pub fn status_of(e: &Error, input: StatusCode) -> StatusCode {
    use crate::error::ErrorKind;
    match (e, e.kind()) {
        (Error::NotFound(_), _) => StatusCode::NOT_FOUND,
        (_, ErrorKind::Input) => input,
        (_, ErrorKind::Conflict) => StatusCode::CONFLICT,
        (_, ErrorKind::Transient) => StatusCode::SERVICE_UNAVAILABLE,
        (_, ErrorKind::Internal) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub(crate) fn error_response(e: &Error) -> HttpResponse {
    HttpResponse::build(status_of(e, StatusCode::UNPROCESSABLE_ENTITY))
        .json(json!({"error": crate::secret::redact_urls(&e.to_string())}))
}

/// A failure as a page: the error's text (URLs redacted) and its status.
pub fn failure(e: &Error) -> HttpResponse {
    failure_as(e, actix_web::http::StatusCode::BAD_REQUEST)
}

/// [`failure`], bad input answered with `input` (422 for a form whose body names nothing).
pub fn failure_as(e: &Error, input: actix_web::http::StatusCode) -> HttpResponse {
    let status = status_of(e, input);
    let t = ErrorPage {
        status: status.as_u16(),
        reason: status.canonical_reason().unwrap_or("Error"),
        message: crate::secret::redact_urls(&e.to_string()),
    };
    match askama::Template::render(&t) {
        Ok(html) => secure(HttpResponse::build(status))
            .content_type("text/html; charset=utf-8")
            .body(html),
        Err(_) => HttpResponse::build(status)
            .content_type("text/plain; charset=utf-8")
            .body(format!("{}\n", t.message)),
    }
}

/// A failure as the console shows it: its status and what went wrong, in the console's style,
/// with the way back. Stands alone (no session is needed to read it).
#[derive(askama::Template)]
#[template(path = "error.html")]
struct ErrorPage {
    status: u16,
    reason: &'static str,
    message: String,
}

/// The headers every console response carries: no caching of ledger state, no framing, no
/// script or style from anywhere but the binary itself.
pub fn secure(mut b: actix_web::HttpResponseBuilder) -> actix_web::HttpResponseBuilder {
    b.insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "same-origin"));
    b
}
