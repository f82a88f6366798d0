//! Why the ledger's database could not be reached: the error [`crate::db::reach`] classifies.
//!
//! Kept beside [`crate::error`] (whose `Error::Unreachable` carries it), below
//! [`crate::db::reach`] (which finds the reason), so that the error type reaches up to nothing.

use std::time::Duration;

/// Why the database could not be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Nothing accepts connections at the address (`ECONNREFUSED`): PostgreSQL is not running
    /// there, or listens on another address or port.
    Refused,
    /// No connection within the time allowed (a firewall dropping packets, a wrong host).
    TimedOut(Duration),
    /// The server refused the credentials: SQLSTATE `28P01` (wrong password) or `28000` (no
    /// such role, or no `pg_hba.conf` entry admits it). `message` is the server's own.
    Authentication { sqlstate: String, message: String },
    /// The server has no database of that name (SQLSTATE `3D000`).
    NoSuchDatabase,
    /// Anything else: the server's SQLSTATE and message, or the operating system's or the
    /// client's error.
    Other(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Refused => f.write_str(
                "connection refused (is PostgreSQL running and listening there? check database.url)",
            ),
            Reason::TimedOut(d) => write!(
                f,
                "no answer within {} s (a firewall, or the wrong host? check database.url)",
                d.as_secs_f64()
            ),
            Reason::Authentication { sqlstate, message } => write!(
                f,
                "authentication failed (SQLSTATE {sqlstate}: {message}); check the user and \
                 password in database.url"
            ),
            Reason::NoSuchDatabase => {
                f.write_str("no such database (SQLSTATE 3D000); `briefrail migrate` creates it")
            }
            Reason::Other(text) => f.write_str(text),
        }
    }
}

/// The database at `server` could not be reached, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot connect to database {database:?} at {server} as user {user:?}: {reason}")]
pub struct Unreachable {
    /// `host:port` (several, comma-separated, when the URL lists several), or a socket directory.
    pub server: String,
    pub database: String,
    pub user: String,
    pub reason: Reason,
}
