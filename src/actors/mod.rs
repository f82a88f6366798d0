//! The running node, as actix actors:
//!
//! ```text
//!  nudge ─▶ Supervisor ─▶ MatterActor (one per active matter: coalesces, owns the claim)
//!                              │  hold, granted by Admission in the ledger's fair order
//!                              │                      ▲ BuildDone (landed / follow-up / fenced / failed)
//!                              ▼                      │
//!                         BuildRunner: waits for one of builders.concurrency slots, builds,
//!                         frees the slot, commits (carries token, heartbeats from the claim on)
//!  Sweeper ── sweep + reconcile on the ledger ─▶ nudges; retention passes beside
//!  Presence ── the node's heartbeat in ops.nodes (the console's nodes page)
//! ```
//!
//! No actor holds truth: every decision that matters is a ledger statement, so a lost message
//! or a restarted actor delays work and never loses or corrupts it.

pub mod admission;
pub mod build_runner;
pub mod capacity;
pub mod context;
pub mod liveness;
pub mod matter;
pub mod presence;
pub mod retention;
pub mod supervisor;
pub mod sweeper;
pub mod system;

#[cfg(feature = "testing")]
pub use crate::nudge::MatterKey;
pub use crate::nudge::Nudge;
pub use retention::RetentionReport;
pub use sweeper::SweepReport;
pub use system::{ActorOptions, Actors, NodeContext};
