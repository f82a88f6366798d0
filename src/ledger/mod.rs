//! The ledger: Postgres is the single source of truth, and this module owns every statement
//! that touches it.
//!
//! One row per matter in `ops.matter_frame_jobs` holds the fencing token. Its life:
//!
//! ```text
//!            demand (requested+1)                    demand while running
//!        ┌────────────────────┐                  (requested+1, rebuild_needed)
//!        ▼                    │                        ┌──────┐
//!   ┌─────────┐  claim   ┌─────────┐  commit CAS      │      ▼
//!   │ idle /  │ ───────▶ │ running │ ───────────────▶ idle   (landed = token)
//!   │ failed  │ token=n  │ token n │ ──┐ rebuild_needed
//!   └─────────┘          └─────────┘   └─▶ running, token n+k (same statement)
//!        ▲   fail / sweep (lease)  │
//!        └─────────────────────────┘
//! ```
//!
//! * [`transitions`]: demand, claim, lost claim, heartbeat, commit, fail, release, sweep,
//!   reconcile: each one SQL statement, on the ledger clock ([`clock`]: the database clock,
//!   which only tests move).
//! * `sql`: the one way Rust calls the ledger's functions (`src/ledger/live/*.sql`): one
//!   builder each, prepared once per session; nothing else names one in a statement.
//! * [`facts`] and [`outbox`]: a fact about the record and its event commit together.
//! * [`fairness`]: who is served next when build slots are scarce (class, firms, pause).
//! * [`limits`]: the fleet's cap, rate and builder hold toward the model endpoint.
//! * [`reads`]: what operators and tests look at.
//! * [`retention`]: what the sweeper removes once no guarantee needs it.
//! * [`text`]: text from outside made storable (Postgres `text` refuses NUL).
//! * [`matters`], [`presence`], [`dead_letters`], [`sessions`]: what an operator reads and
//!   does, from the console or the CLI (matter states, retry; nodes; refused messages;
//!   browser sessions).
//!
//! Tokens order writes; they do not give mutual exclusion. A zombie and its successor can
//! build at the same time; only the successor's commit lands, and the zombie learns at its
//! next heartbeat or at its commit.

pub mod clock;
pub mod commit;
#[cfg(any(feature = "amqp", feature = "cli", feature = "http", feature = "testing"))]
pub mod dead_letters;
pub mod event_name;
pub mod facts;
pub mod fairness;
pub mod inbox;
pub mod limits;
pub mod matters;
pub mod models;
pub mod outbox;
pub mod presence;
pub mod reads;
pub mod retention;
#[cfg(any(feature = "http", feature = "testing"))]
pub mod sessions;
mod sql;
pub mod states;
pub mod text;
pub mod transitions;

pub use crate::nudge::DemandClass;
pub use commit::{Commit, CommitQueue, ExtraWrites, Frame, commits_in_batches};
#[cfg(feature = "testing")]
pub use commit::Landed;
pub use event_name::EventName;
#[cfg(feature = "testing")]
pub use models::FrameRow;
pub use models::{Claim, FrameMeta, JobRow, RunRow};
pub use states::{ClaimKind, RunOutcome, RunStatus};
pub use transitions::MatterRef;
#[cfg(feature = "testing")]
pub use transitions::{ClaimOutcome, ClaimRequest, RetryPolicy};
