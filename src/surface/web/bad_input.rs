//! What a query string or a form that cannot be read answers (`?page=abc`, a form field of the
//! wrong type): the same as any other bad input, never actix's bare text/plain. Under `/api` a
//! JSON `{"error"}` with 422; elsewhere the console's styled error page with 400, naming the
//! field.

use actix_web::{HttpRequest, HttpResponse};

use crate::error::Error;

/// `web::QueryConfig`'s error handler.
pub fn query(e: actix_web::error::QueryPayloadError, req: &HttpRequest) -> actix_web::Error {
    refuse(&format!("the query string is not understood: {e}"), req, e)
}

/// `web::FormConfig`'s error handler.
pub fn form(e: actix_web::error::UrlencodedError, req: &HttpRequest) -> actix_web::Error {
    // A body over the limit keeps its own status (413).
    if matches!(e, actix_web::error::UrlencodedError::Overflow { .. }) {
        return e.into();
    }
    refuse(&format!("the form is not understood: {e}"), req, e)
}

fn refuse(
    message: &str,
    req: &HttpRequest,
    cause: impl std::fmt::Debug + std::fmt::Display + 'static,
) -> actix_web::Error {
    let e = Error::InvalidInput(crate::text::clip(message, 300).to_owned());
    let response: HttpResponse = if req.path().starts_with("/api/") {
        crate::surface::web::responses::error_response(&e)
    } else {
        crate::surface::web::responses::failure(&e)
    };
    actix_web::error::InternalError::from_response(cause, response).into()
}
