//! What the actors of one node share: read-only after start, except the shutdown signal. Its
//! own module so that every actor depends on it and it depends on no actor.

use std::sync::Arc;

use tokio::sync::watch;

use super::build_runner::BuildRunners;
use crate::config::Settings;
use crate::db::Pool;
use crate::ledger::transitions::ClaimQueue;
use crate::metrics::Metrics;

/// What the actors of a node share. Read-only after start, except the two shutdown signals.
pub struct NodeContext {
    pub settings: Arc<Settings>,
    pub pool: Pool,
    pub node_id: String,
    pub metrics: Arc<Metrics>,
    /// The build runners, their slots and the node's holds on claims.
    pub runners: BuildRunners,
    /// Who takes the next hold: matters wait here in the ledger's fair order.
    pub admission: Arc<super::admission::Admission>,
    /// Where claims go: together with the others asked for at the same time (one statement).
    pub claims: ClaimQueue,
    /// True once shutdown began: no new claims; follow-ups are released instead of built.
    pub draining: watch::Receiver<bool>,
    /// The node's long-lived actors that died (`/readyz` answers 503 naming them).
    pub liveness: super::liveness::Liveness,
}
