//! `[http]`: the API and console's address and who may use them.

use std::net::SocketAddr;

use serde::Deserialize;

use super::{Bound, ConfigError};

/// `[http]`: the admin endpoint (status, metrics, health, the console).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// The address it listens on (`host:port`; port 0 picks a free one).
    pub bind: String,
    /// Bearer token required by the API; mandatory when `bind` is not loopback. The console's
    /// login trades it for a session.
    pub token: String,
    /// How long a console session lasts after login.
    pub session_minutes: f64,
}

pub(super) const BOUNDS: &[Bound] = &[bound!(
    "http.session_minutes",
    1.0,
    43_200.0,
    Minutes,
    |s| s.http.session_minutes,
    real
)];

impl HttpSettings {
    /// `bind` is `host:port`, and a token is set when it is not a loopback address.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let bind: SocketAddr = self.bind.parse().map_err(|_| {
            ConfigError::new(
                "http.bind",
                format!("{:?} is not host:port (e.g. 127.0.0.1:8080)", self.bind),
            )
        })?;
        if !bind.ip().is_loopback() && self.token.trim().is_empty() {
            return Err(ConfigError::new(
                "http.token",
                format!("required when http.bind ({bind}) is not a loopback address"),
            ));
        }
        Ok(())
    }
}
