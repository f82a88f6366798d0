//! Builders: what turns a matter's record into a frame. An embedding application implements
//! [`Builder`]; three ship, chosen by `builder.kind`:
//!
//! * [`brief::BriefBuilder`]: a real Brief from `record.documents`, deterministic.
//! * [`command::CommandBuilder`]: an external program (an on-prem firm's model panel), context
//!   on stdin, frame on stdout.
//! * [`http::HttpBuilder`]: a POST of the context to `builder.url`, frame from the response.
//!
//! A build never writes to the ledger itself: it returns a [`Frame`], and the build runner
//! commits it with the token (and any [`crate::ledger::ExtraWrites`] the frame carries). A
//! builder that is overloaded returns [`crate::Error::Backpressure`] ([`backpressure`]): the
//! claim goes back without spending a retry, and the rail waits as asked. A
//! build is cancelled by dropping its future, so builders must release what they hold on drop
//! (the command builder's child is killed on drop; the HTTP request is aborted).

pub mod backpressure;
pub mod brief;
pub mod command;
pub mod context;
#[cfg(feature = "http")]
pub mod http;

use std::sync::Arc;

use futures_util::future::LocalBoxFuture;

pub use context::BuildContext;

use crate::config::{BuilderKind, BuilderSettings};
use crate::error::Result;
pub use crate::ledger::Frame;

/// Builds the frame for `(firm, matter, token)`. Runs on an actor's thread: never block it;
/// await instead. Return [`crate::Error::Build`] with `permanent: true` for input that will fail
/// the same way every time (it is then not retried until a new demand).
///
/// An application's own builder, here a one-line summary of the record:
///
/// ```
/// use briefrail::{BuildContext, Builder, Frame};
/// use futures_util::FutureExt;
/// use futures_util::future::LocalBoxFuture;
///
/// struct Summary;
///
/// impl Builder for Summary {
///     fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
///         async move {
///             let (matter, documents) = ctx.record().await?;
///             let title = matter.map(|m| m.title).unwrap_or_default();
///             let summary = format!("{title}: {} document(s)", documents.len());
///             Ok(Frame::new(serde_json::json!({ "summary": summary })))
///         }
///         .boxed_local()
///     }
/// }
/// ```
pub trait Builder: Send + Sync + 'static {
    /// Builds the matter's next frame. Return an error to fail the attempt (it is retried with
    /// backoff unless the error is permanent); the frame lands only if the claim's token is still
    /// current when it commits.
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, Result<Frame>>;

    /// Whether builds read the matter's record ([`BuildContext::record`]). When they do, a node
    /// reads the records of the builds it claimed together in one statement as the claims are
    /// won, before each build waits for a slot, so no slot is held through that round trip.
    /// The default, `false`, reads nothing ahead: a builder that reads only its own tables pays
    /// for no read it does not use.
    fn reads_record(&self) -> bool {
        false
    }
}

/// The builder `builder.kind` names. Fails when it cannot be made (the `http` builder's TLS
/// settings, or a build without the `http` feature).
pub fn from_settings(s: &BuilderSettings) -> Result<Arc<dyn Builder>> {
    Ok(match s.kind {
        BuilderKind::Brief => Arc::new(brief::BriefBuilder),
        BuilderKind::Command => Arc::new(command::CommandBuilder::new(s.command.clone())),
        #[cfg(feature = "http")]
        BuilderKind::Http => Arc::new(http::HttpBuilder::from_settings(s)?),
        #[cfg(not(feature = "http"))]
        BuilderKind::Http => {
            return Err(crate::Error::InvalidInput(
                "builder.kind = \"http\", but this build of briefrail has no http feature".into(),
            ));
        }
    })
}
