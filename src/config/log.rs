//! `[log]`: the binary's log lines (an embedder installs its own subscriber).

use serde::Deserialize;

use super::ConfigError;

/// How log lines are written (`log.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum LogFormat {
    /// For a person at a terminal.
    Pretty,
    /// One JSON object a line, for a log collector.
    Json,
}

config_names!(LogFormat { Pretty => "pretty", Json => "json" });

/// `[log]`: the node's logs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// Human-readable or JSON lines.
    pub format: LogFormat,
    /// A `tracing` filter (`info`, `briefrail=debug,lapin=warn`); `RUST_LOG` wins over it.
    pub level: String,
}

impl LogSettings {
    /// `level` is a tracing filter.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        // The log settings are the binary's (an embedder installs its own subscriber).
        #[cfg(feature = "cli")]
        tracing_subscriber::EnvFilter::try_new(&self.level)
            .map_err(|e| ConfigError::new("log.level", format!("not a tracing filter: {e}")))?;
        Ok(())
    }
}
