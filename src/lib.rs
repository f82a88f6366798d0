//! briefrail keeps a derived artifact (a litigation matter's *Brief*) current in the
//! background, and proves that a stalled worker can never overwrite fresher work.
//!
//! Start reading at [`ledger`]: one Postgres row per matter hands out fencing tokens, and every
//! write made for a build is a compare-and-swap on that token. Everything else is delivery:
//!
//! * [`ledger`]: the tables of the protocol (`docs/protocol.md`) and every statement on them.
//! * [`db`]: the connection pool (with the session timeouts), migrations, database creation.
//! * [`config`]: layered settings, validated once at start.
//! * [`error`]: typed errors; a stale token is [`Error::Fenced`].
//! * [`trace`]: W3C trace context carried from a fact to the frame that served it.
//!
//! The data flow: a fact (document uploaded) and its outbox event commit together; the event
//! becomes a nudge; the nudge becomes a demand on the matter's row; a claim hands out a token;
//! a build runs with it and commits the frame only if the token is still current.

pub mod actors;
pub mod backoff;
pub mod builders;
pub mod config;
pub mod db;
pub mod error;
pub mod ledger;
pub mod metrics;
pub mod node;
pub mod nudge;
pub mod schema;
pub mod secret;
pub mod surface;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trace;
pub mod transport;

pub use error::{Error, Result};
