//! briefrail keeps a derived artifact (a litigation matter's *Brief*) current in the
//! background, and proves that a stalled worker can never overwrite fresher work.
//!
//! # The flow
//!
//! 1. A fact about the record (a document uploaded) and its event commit together:
//!    [`ledger::facts`] writes the record and [`ledger::outbox`] the event, in one transaction.
//! 2. The [`transport`] carries the event's id to some node: [`transport::amqp`] relays the
//!    outbox to RabbitMQ and consumes the trigger queue, or [`transport::postgres`] drains the
//!    outbox over LISTEN/NOTIFY. Either applies it through [`ledger::inbox`] (dedupe on the
//!    event id, the ledger's own copy of the event, the gates), which records a **demand** on
//!    the matter's row, and then sends a [`nudge::Nudge`] (ids only) to the actors.
//! 3. The [`actors`]: the supervisor routes the nudge to the matter's actor, which coalesces
//!    demands and **claims** the row ([`ledger::transitions`]): the ledger hands out a fencing
//!    token. A build runner runs the [`builders::Builder`] with it, heartbeating the lease.
//! 4. The **commit** ([`ledger::commit`]) lands the frame only if the token is still the row's
//!    claim: a stalled worker's late commit is fenced ([`Error::Fenced`]) and writes nothing.
//!    Demands that arrived during the build re-claim in the same statement.
//! 5. The sweeper ([`actors::sweeper`]) fails claims whose lease ran out and nudges matters
//!    with unserved demand, so a lost message or a crashed node only delays work. On a
//!    slower timer it runs retention ([`ledger::retention`]): what no guarantee needs any
//!    more (consumed events, old runs, old frames when asked) is removed in small batches.
//!
//! A [`node::Node`] starts all of it (its actors, its transport, its HTTP surface when asked)
//! and stops it in one shutdown. Only the ledger is trusted: every decision that matters is a
//! statement on it, on the database clock (`docs/protocol.md`).
//!
//! # The modules
//!
//! * [`ledger`]: the tables of the protocol and every statement on them; [`ledger::states`]
//!   names the protocol's states.
//! * [`node`]: the one way to start and stop briefrail. [`nudge`]: the transport→actors message.
//! * [`actors`], [`builders`], [`transport`]: as above.
//! * [`surface`]: the operator surface: CLI (`feature = "cli"`), the demo, the HTTP admin
//!   endpoint and its templates (`feature = "http"`), logging, `run`, and the container
//!   health check ([`surface::healthcheck`]).
//! * [`db`]: the connection pool (with the session timeouts), migrations, database creation,
//!   and the first connection that names why a database cannot be reached ([`db::reach`]).
//! * [`config`]: layered settings, validated once at start.
//! * [`error`]: typed errors with their kind (input, conflict, transient, internal) and source.
//! * [`backoff`]: the one retry policy. [`metrics`]: what a node counts, for `/metrics`.
//! * [`schema`]: diesel's view of the tables (checked against the migrations by a test).
//! * [`secret`]: URLs whose passwords never reach a log line.
//! * [`trace`]: W3C trace context carried from a fact to the frame that served it.
//! * `otel` (`feature = "otel"`, `[otel] endpoint`): those traces out, as OTLP/HTTP JSON to
//!   the firm's Jaeger or Tempo: a tracing layer, a bounded queue, a batching thread.
//! * `testing` (`feature = "testing"`): a database per test, test hooks; never in production.

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
#[cfg(feature = "otel")]
pub mod otel;
pub mod schema;
pub mod secret;
pub mod surface;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
pub mod trace;
pub mod transport;

pub use error::{Error, Result};
