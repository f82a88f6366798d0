//! The library's typed errors. A lost fence is [`Error::Fenced`], never a generic database
//! failure, so callers can tell "your token is stale, stop" from "try again".

use uuid::Uuid;

use crate::config::ConfigError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The token is no longer the row's current claim: another build superseded this one.
    /// Nothing was written. The build must stop; retrying cannot succeed.
    #[error(
        "fenced: token {token} is not the current claim of matter {matter_id} (firm {firm_id})"
    )]
    Fenced {
        firm_id: Uuid,
        matter_id: Uuid,
        token: i64,
    },

    /// A statement failed (connection loss, timeout, constraint...). May be retried unless
    /// [`Error::is_permanent`] says otherwise.
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),

    /// No connection could be had (pool timeout, refused connection).
    #[error("database connection: {0}")]
    Connection(String),

    /// Applying migrations failed.
    #[error("migrations: {0}")]
    Migration(String),

    /// An event name that is not a lowercase `noun.verb` fact.
    #[error("invalid event name {name:?}: {rule}")]
    InvalidEventName { name: String, rule: &'static str },

    /// Input refused before it reached the database (empty title, unknown matter...).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// The thing asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),

    /// The database refused a frame the same way it will every time (its SQLSTATE and
    /// message, e.g. `22P05: unsupported Unicode escape sequence`): the claim fails at once.
    #[error("frame refused by the database: SQLSTATE {0}")]
    FrameRefused(String),

    /// A build failed; the message is recorded on the run.
    #[error("build failed: {message}")]
    Build { message: String, permanent: bool },

    /// The message broker failed.
    #[error("broker: {0}")]
    Broker(String),

    #[error(transparent)]
    Config(#[from] ConfigError),

    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Errors that fail the same way every time: retrying wastes a build. Classified by what
    /// the database said: a constraint violation (23xxx) or a frame it refused (a data
    /// exception, 22xxx, reported with its SQLSTATE by `ops.insert_frame`) is permanent; a lost
    /// connection, a serialization failure, a read-only standby or any error whose SQLSTATE the
    /// driver does not expose is not (it is retried, boundedly, then counted as a failure).
    pub fn is_permanent(&self) -> bool {
        use diesel::result::{DatabaseErrorKind as K, Error as D};
        match self {
            Error::Database(D::DatabaseError(
                K::CheckViolation
                | K::NotNullViolation
                | K::UniqueViolation
                | K::ForeignKeyViolation
                | K::ExclusionViolation
                | K::RestrictViolation,
                _,
            )) => true,
            Error::Database(D::SerializationError(_) | D::DeserializationError(_)) => true,
            Error::FrameRefused(_) => true,
            Error::Build { permanent, .. } => *permanent,
            Error::InvalidEventName { .. } | Error::InvalidInput(_) => true,
            _ => false,
        }
    }

    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Fenced { .. })
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for Error {
    fn from(e: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        Error::Connection(crate::secret::redact_urls(&e.to_string()))
    }
}

/// `s` cut to at most `max` bytes on a character boundary: error text kept on a run or written
/// to a log line stays bounded however much a builder or a broker said.
pub fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
