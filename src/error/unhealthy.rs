//! Why a node's HTTP surface is not healthy: the error [`crate::surface::healthcheck`] finds.
//!
//! Kept beside [`crate::error`] (whose `Error::Unhealthy` carries it) so that the library's
//! error type depends on nothing above it.

/// Why the node is not healthy.
#[derive(Debug, thiserror::Error)]
pub enum Unhealthy {
    /// Nothing accepted the connection (no node, or one bound elsewhere).
    #[error("nothing answers at {url} (http.bind {bind}): {source}")]
    Unreachable {
        url: String,
        bind: String,
        #[source]
        source: std::io::Error,
    },
    /// The node did not answer in time (stalled, or overloaded).
    #[error("no answer from {url} within {seconds} s")]
    TimedOut { url: String, seconds: f64 },
    /// It answered, but not 200: its body says what is not ready (`/readyz`'s JSON).
    #[error("{url} answered {status}: {body}")]
    NotOk {
        url: String,
        status: String,
        body: String,
    },
}
