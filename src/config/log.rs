//! `[log]`: the binary's log lines (an embedder installs its own subscriber).

use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum LogFormat {
    Pretty,
    Json,
}

config_names!(LogFormat { Pretty => "pretty", Json => "json" });

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
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
