//! briefrail keeps a derived artifact (a litigation matter's *Brief*) current in the
//! background, and proves that a stalled worker can never overwrite fresher work.
//!
//! # Embedding it
//!
//! An application runs briefrail inside its own process with three things:
//!
//! * a [`Node`], started with [`Node::builder`] from the [`config::Settings`] and a
//!   [`Builder`] (briefrail's own [`BriefBuilder`], or the application's), and stopped with
//!   [`Node::shutdown`];
//! * facts recorded in the application's own transaction: [`create_matter`],
//!   [`add_document`], [`request_brief`], or any event with [`record_event`]. The event
//!   commits with the application's write or not at all, and the node serves it;
//! * the schema, applied once with [`migrate`].
//!
//! Reads of a matter's state ([`job`], [`status`]), the connection [`Pool`], the typed
//! [`Error`] and the binary's own command line ([`cli_main`]) complete it. Everything else is
//! internal: `feature = "testing"` opens it to the crate's tests and tools, never to production.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! # async fn embed() -> briefrail::Result<()> {
//! let settings = Arc::new(briefrail::config::Settings::load(None)?);
//! briefrail::migrate(settings.database.url.expose()).await?;
//! let node = briefrail::Node::builder(settings, Arc::new(briefrail::BriefBuilder))
//!     .start()
//!     .await?;
//!
//! // A fact, in the application's transaction: the Brief follows in the background.
//! let mut conn = node.pool().get().await?;
//! let (firm, matter) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
//! briefrail::create_matter(&mut conn, firm, matter, "Initech v. Chotchkie's").await?;
//!
//! node.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # The flow
//!
//! 1. A fact about the record (a document uploaded) and its event commit together: the
//!    ledger's `facts` write the record and its `outbox` the event, in one transaction.
//! 2. The transport carries the event's id to some node: `transport::amqp` relays the outbox
//!    to RabbitMQ and consumes the trigger queue, or `transport::postgres` drains the outbox
//!    over LISTEN/NOTIFY. Either applies it through the ledger's inbox (dedupe on the event
//!    id, the ledger's own copy of the event, the gates), which records a **demand** on the
//!    matter's row, and then sends a [`Nudge`] (ids only) to the actors.
//! 3. The actors: the supervisor routes the nudge to the matter's actor, which coalesces
//!    demands and **claims** the row: the ledger hands out a fencing token ([`Claim`]). A
//!    build runner runs the [`Builder`] with it, heartbeating the lease.
//! 4. The **commit** lands the [`Frame`] only if the token is still the row's claim: a
//!    stalled worker's late commit is fenced ([`Error::Fenced`]) and writes nothing. Demands
//!    that arrived during the build re-claim in the same statement.
//! 5. The sweeper fails claims whose lease ran out and nudges matters with unserved demand,
//!    so a lost message or a crashed node only delays work. On a slower timer it runs
//!    retention: what no guarantee needs any more (consumed events, old runs, old frames when
//!    asked) is removed in small batches.
//!
//! A [`Node`] starts all of it (its actors, its transport, its HTTP surface when asked) and
//! stops it in one shutdown. Only the ledger is trusted: every decision that matters is a
//! statement on it, on the database clock (`docs/protocol.md`).
//!
//! # The modules
//!
//! Public: [`config`] (layered settings, validated once at start) and `otel`
//! (`feature = "otel"`, `[otel] endpoint`: briefrail's traces as OTLP/HTTP JSON to the firm's
//! Jaeger or Tempo). Internal, named here for a reader of the source:
//!
//! * `ledger`: the tables of the protocol and every statement on them; `ledger::states` names
//!   the protocol's states.
//! * `node`: the one way to start and stop briefrail. `nudge`: the transport→actors message.
//! * `actors`, `builders`, `transport`: as above.
//! * `surface`: the operator surface: CLI (`feature = "cli"`), the demo, the HTTP admin
//!   endpoint and its templates (`feature = "http"`), logging, `run`, and the container
//!   health check (`surface::healthcheck`).
//! * `db`: the connection pool (with the session timeouts), migrations, database creation,
//!   and the first connection that names why a database cannot be reached (`db::reach`).
//! * `error`: typed errors with their kind (input, conflict, transient, internal) and source.
//! * `backoff`: the one retry policy. `metrics`: what a node counts, for `/metrics`.
//! * `schema`: diesel's view of the tables (checked against the migrations by a test).
//! * `secret`: URLs whose passwords never reach a log line.
//! * `trace`: W3C trace context carried from a fact to the frame that served it.
//! * `testing` (`feature = "testing"`): a database per test, test hooks; never in production.

#![cfg_attr(not(feature = "testing"), deny(missing_docs))]
// A build without one of amqp, cli or http leaves that feature's ledger queries (the relay's
// leases, dead letters, bulk actions, console reads) without a caller. The full build, the one
// CI holds to no warning, still reports every dead internal.
#![cfg_attr(
    not(any(
        feature = "testing",
        all(feature = "amqp", feature = "cli", feature = "http")
    )),
    allow(dead_code, unused_imports)
)]
/// Declares an internal module: `pub` when `feature = "testing"` is on (the crate's tests, the
/// fault suite and the benchmark reach into it), `pub(crate)` otherwise, so an embedder's build
/// sees only the API re-exported below and no internal can become something it depends on.
macro_rules! internal {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        #[cfg(feature = "testing")]
        pub mod $name;
        $(#[$attr])*
        #[cfg(not(feature = "testing"))]
        pub(crate) mod $name;
    };
}

internal!(actors);
internal!(backoff);
internal!(builders);
pub mod config;
internal!(db);
internal!(error);
internal!(ledger);
internal!(metrics);
internal!(node);
internal!(nudge);
#[cfg(feature = "otel")]
pub mod otel;
internal!(schema);
internal!(secret);
internal!(surface);
#[cfg(feature = "testing")]
pub mod testing;
internal!(text);
internal!(trace);
internal!(transport);

// The API an embedder builds on. Everything else is internal (public only to the crate's own
// tests and tools, through `feature = "testing"`).

pub use actors::{RetentionReport, SweepReport};
pub use builders::brief::BriefBuilder;
pub use builders::context::Record;
pub use builders::{BuildContext, Builder, from_settings as builder_from_settings};
pub use db::admin::{create_database_if_missing, with_database};
pub use db::migrate::run_pending as migrate;
pub use db::{Conn, Pool, PoolOptions, connect};
pub use error::{Error, ErrorKind, Result};
pub use ledger::facts::{
    NewDocument, add_document, archive_matter, create_matter, request_brief, request_brief_all,
};
pub use ledger::models::{DocumentRow, MatterRow};
pub use ledger::outbox::{NewEvent, record_event, record_events};
pub use ledger::reads::{MatterStatus, job, status};
pub use ledger::{Claim, DemandClass, EventName, ExtraWrites, Frame, JobRow};
pub use metrics::Metrics;
pub use node::{Node, NodeBuilder, StartSurface, Surface};
pub use nudge::Nudge;
pub use secret::SecretUrl;
#[cfg(all(feature = "cli", feature = "http"))]
pub use surface::cli::main as cli_main;
#[cfg(feature = "http")]
pub use surface::http::admin as http_admin;
