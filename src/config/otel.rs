//! `[otel]`: the OpenTelemetry exporter of build spans.

use serde::Deserialize;

use super::{Bound, ConfigError};
use crate::secret::SecretUrl;

/// The OpenTelemetry exporter (`feature = "otel"`): off unless `endpoint` is set. Spans go to
/// `{endpoint}/v1/traces` as OTLP/HTTP JSON from a bounded queue, so a slow or absent collector
/// costs dropped spans, never a slower build.
#[derive(Debug, Clone, Deserialize)]
pub struct OtelSettings {
    /// The collector's OTLP/HTTP base URL (Jaeger or Tempo on port 4318, e.g.
    /// `http://jaeger:4318`); `/v1/traces` is appended unless the path already ends with it.
    /// `user:password@` is sent as basic auth and never logged. Empty: no export (the default).
    pub endpoint: SecretUrl,
    /// `service.name` of the exported resource: what the trace UI lists the spans under.
    pub service_name: String,
    /// Upper bound on one export request; a collector slower than this loses that batch.
    pub timeout_seconds: f64,
    /// Finished spans waiting for export; beyond this they are dropped (and counted in a
    /// warning), so memory stays bounded while the collector is away.
    pub queue_size: usize,
    /// How long a finished span may wait for the next batch (the batch also leaves when full).
    pub batch_delay_ms: u64,
}

/// Checked only while the exporter is on ([`super::Settings::validate_bounds`]).
pub(super) const BOUNDS: &[Bound] = &[
    bound!(
        "otel.timeout_seconds",
        0.001,
        300.0,
        Seconds,
        |s| s.otel.timeout_seconds,
        real
    ),
    bound!(
        "otel.queue_size",
        1.0,
        1_000_000.0,
        Count,
        |s| s.otel.queue_size,
        whole
    ),
    bound!(
        "otel.batch_delay_ms",
        1.0,
        3_600_000.0,
        Milliseconds,
        |s| s.otel.batch_delay_ms,
        whole
    ),
];

impl OtelSettings {
    /// Whether spans are exported at all.
    pub(crate) fn enabled(&self) -> bool {
        !self.endpoint.expose().trim().is_empty()
    }

    /// The export timeout as a duration.
    #[cfg(feature = "otel")]
    pub(crate) fn timeout(&self) -> std::time::Duration {
        super::seconds(self.timeout_seconds)
    }

    /// `endpoint` is empty (off) or an `http(s)://` URL with a host; when it is set, the
    /// service name is not empty (the numbers are in their [`BOUNDS`] while it is set).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        if !cfg!(feature = "otel") {
            return Err(ConfigError::new(
                "otel.endpoint",
                "is set, but this build has no `otel` feature (rebuild with it, or leave it empty)",
            ));
        }
        let shown = self.endpoint.to_string();
        let u = url::Url::parse(self.endpoint.expose().trim()).map_err(|e| {
            ConfigError::new("otel.endpoint", format!("{shown:?} is not a URL: {e}"))
        })?;
        if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
            return Err(ConfigError::new(
                "otel.endpoint",
                format!(
                    "{shown:?} is not an http:// or https:// URL with a host (e.g. http://jaeger:4318)"
                ),
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err(ConfigError::new("otel.service_name", "must not be empty"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Settings, env};

    #[test]
    fn otel_is_off_by_default_and_checked_when_on() -> Result<(), Box<dyn std::error::Error>> {
        let s = Settings::defaults();
        assert!(!s.otel.enabled());
        assert_eq!(s.otel.service_name, "briefrail");
        let s = Settings::load_with_env(
            None,
            env(&[("BRIEFRAIL__OTEL__ENDPOINT", "http://jaeger:4318")]),
        )?;
        assert!(s.otel.enabled());
        for (k, v, key) in [
            (
                "BRIEFRAIL__OTEL__TIMEOUT_SECONDS",
                "0",
                "otel.timeout_seconds",
            ),
            ("BRIEFRAIL__OTEL__QUEUE_SIZE", "0", "otel.queue_size"),
            (
                "BRIEFRAIL__OTEL__BATCH_DELAY_MS",
                "0",
                "otel.batch_delay_ms",
            ),
            ("BRIEFRAIL__OTEL__SERVICE_NAME", " ", "otel.service_name"),
        ] {
            let e = Settings::load_with_env(
                None,
                env(&[("BRIEFRAIL__OTEL__ENDPOINT", "http://jaeger:4318"), (k, v)]),
            )
            .expect_err(k);
            assert_eq!(e.key, key, "{k}={v}: {e}");
        }
        // Off, the other keys are not looked at.
        Settings::load_with_env(None, env(&[("BRIEFRAIL__OTEL__QUEUE_SIZE", "0")]))?;
        // A bad endpoint is named in the error, without its password.
        let e = Settings::load_with_env(
            None,
            env(&[("BRIEFRAIL__OTEL__ENDPOINT", "ftp://ops:s3cr3t@tempo:4318")]),
        )
        .expect_err("not http");
        assert_eq!(e.key, "otel.endpoint");
        assert!(e.to_string().contains("ftp://ops:***@tempo:4318"), "{e}");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        Ok(())
    }
}
