//! What the handlers share, and how large a request may be.

use std::sync::Arc;

use crate::config::Settings;
use crate::db::Pool;
use crate::metrics::Metrics;

/// What the handlers share.
pub struct HttpState {
    pub settings: Arc<Settings>,
    pub pool: Pool,
    pub metrics: Arc<Metrics>,
    pub node_id: String,
    /// The node's long-lived actors that died: any makes the node not ready.
    pub liveness: crate::actors::liveness::Liveness,
}

/// The largest request body any route accepts (the console's forms are a few hundred bytes),
/// but the bulk actions.
pub const BODY_LIMIT: usize = 16 * 1024;

/// The largest body of a bulk action of the API: `MAX_BULK` pairs of ids as JSON (about 95
/// bytes each), with room, so a list one over the cap is answered 422 naming the cap, not 413.
pub const BULK_BODY_LIMIT: usize = 160 * 1024;
