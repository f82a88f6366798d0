//! Who may ask: the admin bearer token, and the loopback rule of a node without one. The JSON
//! APIs check these alone; the console's sessions ([`crate::surface::console::auth`]) build on
//! them.

use actix_web::HttpRequest;
use actix_web::http::header;
use subtle::ConstantTimeEq;

use crate::surface::web::state::HttpState;

/// Whether the request carries the admin bearer token (`Bearer`, any case).
pub fn bearer_ok(req: &HttpRequest, state: &HttpState) -> bool {
    let token = state.settings.http.token.trim();
    if token.is_empty() {
        return loopback_host(req);
    }
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())
        })
        .is_some_and(|given| token_matches(given, token))
}

/// Constant time (`subtle`): no timing oracle on the token's bytes.
pub fn token_matches(given: &str, token: &str) -> bool {
    bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}

/// Whether the request names this node by a loopback name (`localhost`, `127.0.0.1`, `[::1]`,
/// any port). A node without a token listens on loopback only, but a web page the operator
/// visits can rebind its own name to 127.0.0.1 and then read the console as same-origin: such
/// a request carries the page's own host name, and is refused.
pub fn loopback_host(req: &HttpRequest) -> bool {
    let host = raw_host(req).to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h),
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1") || name.ends_with(".localhost")
}

/// The `Host` the browser sent (a header a page's script cannot set), never
/// `X-Forwarded-Host` or `Forwarded`, which it can.
pub fn raw_host(req: &HttpRequest) -> String {
    req.headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default()
}
