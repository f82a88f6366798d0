//! The library's typed errors.
//!
//! Every error says what *kind* of failure it is ([`ErrorKind`]): bad input, a conflict with
//! the ledger's state, a transient failure of the infrastructure, or an internal fault. Only
//! input errors are permanent: a retry of the same input fails the same way, so a build that
//! fails with one is not retried until a new demand. Everything else is retried (boundedly),
//! so an internal hiccup can never stop a matter's retries. A lost fence is [`Error::Fenced`]
//! (a conflict), never a generic database failure, so callers can tell "your token is stale,
//! stop" from "try again".
//!
//! Errors keep their source (`std::error::Error::source`) for the edges to report with context.
//! A source whose text may hold a URL's password (a driver's connection error, the broker's
//! errors) is wrapped in [`Redacted`], whose `Display` removes it.

pub mod unhealthy;
pub mod unreachable;

use std::fmt;

use uuid::Uuid;

use crate::config::ConfigError;
use crate::secret::redact_urls;

/// briefrail's result: an [`Error`] unless said otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any error, boxed: the source of an [`Error::Internal`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure an error is; decides retries, exit codes and HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The input is wrong (arguments, ids, an event name, a frame the database refuses, a
    /// builder that says its input is bad). The same input fails again: permanent.
    Input,
    /// The ledger's state refuses it (a stale token, an archived matter). Retrying the same
    /// thing cannot succeed, but the state may move on; never a build failure by itself.
    Conflict,
    /// The infrastructure failed (connection lost, timeout, broker down, a serialization
    /// failure, a read-only standby). Retry.
    Transient,
    /// A fault of this process (a mailbox closed, a value that would not serialise). Retried
    /// like a transient error, and reported loudly.
    Internal,
}

/// Every failure briefrail reports, typed so a caller can act on it ([`Error::kind`]): retry,
/// give up, or stop a fenced build.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The token is no longer the row's current claim: another build superseded this one.
    /// Nothing was written. The build must stop; retrying cannot succeed.
    #[error(
        "fenced: token {token} is not the current claim of matter {matter_id} (firm {firm_id})"
    )]
    Fenced {
        /// The firm the matter belongs to.
        firm_id: Uuid,
        /// The matter whose claim moved on.
        matter_id: Uuid,
        /// The stale token.
        token: i64,
    },

    /// A statement failed; its kind is what the database said (see [`Error::kind`]).
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),

    /// No connection could be had (pool timeout, refused connection).
    #[error("database connection: {0}")]
    Connection(#[source] Redacted),

    /// The database could not be reached at all (a first connection refused, its credentials
    /// or its database name rejected): host, port and the cause the server or the OS gave.
    #[error(transparent)]
    Unreachable(#[from] unreachable::Unreachable),

    /// The database lacks migrations of this binary (none applied yet, or a newer binary's
    /// pending): nothing may run statements its schema does not have. Names the database as
    /// [`Error::Unreachable`] does: its name, `host:port` and user, never the password.
    #[error(
        "database {database:?} at {server} as user {user:?} is not migrated: {} of this binary's migrations pending ({}); run `briefrail migrate` first",
        pending.len(),
        crate::error::list_versions(pending)
    )]
    Unmigrated {
        /// The database's name.
        database: String,
        /// `host:port` (several, comma-separated, when the URL lists several).
        server: String,
        /// The user it connected as.
        user: String,
        /// The versions of this binary's migrations not applied.
        pending: Vec<String>,
    },

    /// A node's HTTP surface is not healthy (`briefrail healthcheck`).
    #[error("unhealthy: {0}")]
    Unhealthy(#[from] unhealthy::Unhealthy),

    /// Applying migrations failed, or some are pending.
    #[error("migrations: {what}")]
    Migration {
        /// What failed.
        what: String,
        /// The database's error, if there was one.
        #[source]
        source: Option<Redacted>,
    },

    /// An event name that is not a lowercase `noun.verb` fact.
    #[error("invalid event name {name:?}: {rule}")]
    InvalidEventName {
        /// The name refused.
        name: String,
        /// The rule it breaks.
        rule: &'static str,
    },

    /// Input refused before it reached the database (empty title, a malformed message...).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// The thing asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),

    /// The ledger's state refuses the request (e.g. a document for an archived matter).
    #[error("conflict: {0}")]
    Conflict(String),

    /// The database refused a frame the same way it will every time (its SQLSTATE and
    /// message, e.g. `22P05: unsupported Unicode escape sequence`): the claim fails at once.
    #[error("frame refused by the database: SQLSTATE {0}")]
    FrameRefused(String),

    /// A build failed; the message is recorded on the run. `permanent`: the builder says its
    /// input is bad (an input error); otherwise it is retried with backoff.
    #[error("build failed: {message}")]
    Build {
        /// Why, as the builder said it.
        message: String,
        /// The input is bad: retrying cannot succeed.
        permanent: bool,
    },

    /// The builder is overloaded and asked the rail to wait `retry_after` (an HTTP 429 or 503
    /// with `Retry-After`, the command builder's exit code 75). Not a failure: the claim is
    /// handed back without spending a retry, and no build starts on any node before then
    /// (`crate::ledger::limits`). An embedder's builder returns it the same way.
    #[error("builder asked to wait {retry_after:?}: {message}")]
    Backpressure {
        /// How long no build of any matter should start.
        retry_after: std::time::Duration,
        /// What the builder said.
        message: String,
    },

    /// The message broker failed.
    #[error("broker: {0}")]
    Broker(#[source] Redacted),

    /// A fault of this process: `what` failed, with the underlying error when there is one.
    #[error("internal: {what}")]
    Internal {
        /// What failed.
        what: String,
        /// The underlying error, if there is one.
        #[source]
        source: Option<BoxError>,
    },

    /// A setting is missing or out of range (its key and why).
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// An operating-system call failed (`what` says which: a bind, a file, a process).
    #[error("{what}: {source}")]
    Io {
        /// The call that failed.
        what: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// What kind of failure this is, classified by what the database, the broker or the
    /// operating system said, never by guessing from the message.
    pub fn kind(&self) -> ErrorKind {
        use diesel::result::{DatabaseErrorKind as K, Error as D};
        match self {
            Error::InvalidEventName { .. }
            | Error::InvalidInput(_)
            | Error::NotFound(_)
            | Error::FrameRefused(_)
            | Error::Config(_) => ErrorKind::Input,
            Error::Build {
                permanent: true, ..
            } => ErrorKind::Input,
            Error::Build { .. } | Error::Backpressure { .. } => ErrorKind::Transient,
            Error::Fenced { .. } | Error::Conflict(_) => ErrorKind::Conflict,
            // A constraint violation (23xxx) fails the same way every time.
            Error::Database(D::DatabaseError(
                K::CheckViolation
                | K::NotNullViolation
                | K::UniqueViolation
                | K::ForeignKeyViolation
                | K::ExclusionViolation
                | K::RestrictViolation,
                _,
            )) => ErrorKind::Input,
            // Our own mapping of a value to or from SQL failed, or a statement we built is
            // wrong: a fault of this process.
            Error::Database(
                D::SerializationError(_)
                | D::DeserializationError(_)
                | D::QueryBuilderError(_)
                | D::InvalidCString(_)
                | D::NotFound,
            ) => ErrorKind::Internal,
            // A lost connection, a serialization failure (40001), a read-only standby, a
            // rolled-back transaction, or an error whose SQLSTATE the driver does not expose.
            Error::Database(_)
            | Error::Connection(_)
            | Error::Unreachable(_)
            | Error::Unhealthy(_)
            | Error::Broker(_)
            | Error::Io { .. } => ErrorKind::Transient,
            // The schema may move on (`briefrail migrate`); retrying as is cannot succeed.
            Error::Unmigrated { .. } => ErrorKind::Conflict,
            Error::Migration { .. } | Error::Internal { .. } => ErrorKind::Internal,
        }
    }

    /// Errors that fail the same way every time: retrying wastes a build. Only input errors.
    pub fn is_permanent(&self) -> bool {
        self.kind() == ErrorKind::Input
    }

    /// The build was superseded: stop, write nothing more, do not retry.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Fenced { .. })
    }

    /// An internal fault with no underlying error.
    pub fn internal(what: impl Into<String>) -> Self {
        Error::Internal {
            what: what.into(),
            source: None,
        }
    }

    /// An internal fault caused by `source`.
    pub fn internal_from(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Internal {
            what: what.into(),
            source: Some(source.into()),
        }
    }

    /// An operating-system failure while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    /// A connection that could not be had, from the driver's error (its text redacted).
    pub fn connection(source: impl Into<BoxError>) -> Self {
        Error::Connection(Redacted::new(source))
    }

    /// A broker failure that is only a message (the broker's own errors use `From`).
    pub fn broker(what: impl Into<String>) -> Self {
        Error::Broker(Redacted::message(what))
    }

    /// A migration failure with its cause.
    pub fn migration(what: impl Into<String>, source: Option<BoxError>) -> Self {
        Error::Migration {
            what: what.into(),
            source: source.map(Redacted::new),
        }
    }
}

#[cfg(feature = "amqp")]
impl From<lapin::Error> for Error {
    fn from(e: lapin::Error) -> Self {
        Error::Broker(Redacted::new(e))
    }
}

/// An underlying error whose text may carry a URL with a password (drivers quote the URL they
/// failed to reach). `Display` shows the text with passwords replaced; the error itself is
/// kept, for code that needs to inspect it ([`Redacted::inner`]), but no error chain printed at
/// an edge reaches its unredacted text.
pub struct Redacted {
    text: String,
    inner: Option<BoxError>,
}

impl Redacted {
    pub fn new(source: impl Into<BoxError>) -> Self {
        let inner = source.into();
        Self {
            text: redact_urls(&inner.to_string()),
            inner: Some(inner),
        }
    }

    /// `source` with what was being done: `what: source`, redacted; `source` is kept.
    pub fn context(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        let inner = source.into();
        Self {
            text: redact_urls(&format!("{}: {inner}", what.into())),
            inner: Some(inner),
        }
    }

    /// A failure that is only a message (no underlying error value).
    pub fn message(text: impl Into<String>) -> Self {
        Self {
            text: redact_urls(&text.into()),
            inner: None,
        }
    }

    /// The original error, unredacted: never log it.
    pub fn inner(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.inner.as_deref()
    }
}

impl fmt::Display for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

impl std::error::Error for Redacted {}

/// Versions for a one-line message: the first three, then how many more.
pub(crate) fn list_versions(versions: &[String]) -> String {
    let mut out = versions
        .iter()
        .take(3)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if versions.len() > 3 {
        out.push_str(&format!(" and {} more", versions.len() - 3));
    }
    out
}

/// `e` and every source under it, joined by `: `: how the edges (CLI, logs) report an error
/// with its context.
#[cfg(any(feature = "cli", feature = "testing"))]
pub fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_input_errors_are_permanent() {
        assert!(Error::InvalidInput("x".into()).is_permanent());
        assert!(Error::FrameRefused("22P05: x".into()).is_permanent());
        assert!(!Error::internal("the sweeper's mailbox closed").is_permanent());
        assert!(!Error::broker("down").is_permanent());
        assert!(!Error::Conflict("archived".into()).is_permanent());
        let lost = Error::Database(diesel::result::Error::BrokenTransactionManager);
        assert_eq!(lost.kind(), ErrorKind::Transient);
        let unmapped = Error::Database(diesel::result::Error::DeserializationError("x".into()));
        assert_eq!(unmapped.kind(), ErrorKind::Internal);
    }

    #[test]
    fn a_source_is_kept_and_its_password_redacted() {
        let e = Error::connection(std::io::Error::other(
            "could not reach postgres://app:hunter2@db:5432/x",
        ));
        let chain = report(&e);
        assert!(!chain.contains("hunter2"), "{chain}");
        assert!(chain.contains("postgres://app:***@db"), "{chain}");
        let Error::Connection(r) = &e else {
            unreachable!()
        };
        assert!(r.inner().is_some(), "the original error is kept");
        let io = Error::io("http.bind 127.0.0.1:1", std::io::Error::other("in use"));
        assert!(std::error::Error::source(&io).is_some());
        assert_eq!(io.kind(), ErrorKind::Transient);
    }
}
