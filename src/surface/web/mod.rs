//! What every part of the HTTP surface shares, below the router ([`crate::surface::http`]) and
//! the parts it routes to (the JSON APIs and the console): the handlers' state, who may ask,
//! and how a refusal or a failure is answered. Nothing here names a route, so the parts above
//! depend on it and it on none of them.

pub mod access;
pub mod bad_input;
pub mod responses;
pub mod state;
