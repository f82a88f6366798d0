//! `[database]`: the ledger's Postgres and the pool's connections to it.

use serde::Deserialize;

use super::bounds::DAY_MS;
use super::{Bound, ConfigError, url_with_scheme};
use crate::secret::SecretUrl;

/// `[database]`: the ledger's Postgres and the node's connections to it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `postgres://user[:password]@host:port/db`; the password never reaches a log line.
    pub url: SecretUrl,
    /// Connections the node keeps open, shared by its actors, transport and surfaces.
    pub pool_size: u32,
    /// `lock_timeout` on every connection: a stalled lock holder is cut off by Postgres.
    pub lock_timeout_ms: u64,
    /// `idle_in_transaction_session_timeout`: a transaction left open is rolled back.
    pub idle_in_transaction_timeout_ms: u64,
    /// Claim batches (and, as many, commit batches) a node has on the wire at once, each on a
    /// pooled connection. Requests that arrive while every lane is busy share the next batch:
    /// fewer lanes make larger batches (less database work per matter); more lanes keep claims
    /// and commits moving past a batch that waits for a row lock or a stalled flush.
    pub batch_lanes: u32,
}

pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "database.pool_size",
        1.0,
        1000.0,
        Count,
        |s| s.database.pool_size,
        whole
    ),
    // Postgres takes at most INT_MAX milliseconds; a day is far inside it.
    bound!(
        "database.lock_timeout_ms",
        1.0,
        DAY_MS,
        Milliseconds,
        |s| s.database.lock_timeout_ms,
        whole
    ),
    bound!(
        "database.idle_in_transaction_timeout_ms",
        1.0,
        DAY_MS,
        Milliseconds,
        |s| s.database.idle_in_transaction_timeout_ms,
        whole
    ),
    bound!(
        "database.batch_lanes",
        1.0,
        1000.0,
        Count,
        |s| s.database.batch_lanes,
        whole
    ),
];

impl DatabaseSettings {
    /// `url` is a `postgres://` URL naming a database; `batch_lanes` is at most the pool's
    /// connections.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let db = url_with_scheme(
            "database.url",
            self.url.expose(),
            &["postgres", "postgresql"],
            "",
        )?;
        if db.path().trim_start_matches('/').is_empty() {
            return Err(ConfigError::new(
                "database.url",
                "names no database (add /dbname)",
            ));
        }
        if self.batch_lanes > self.pool_size {
            return Err(ConfigError::new(
                "database.batch_lanes",
                format!(
                    "each lane runs on a pooled connection: at most database.pool_size ({}), \
                     got {}",
                    self.pool_size, self.batch_lanes
                ),
            ));
        }
        Ok(())
    }
}
