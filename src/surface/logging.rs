//! Tracing set-up for the binary: `log.format = "pretty" | "json"`, level from `log.level`
//! (overridden by `RUST_LOG`). Logs go to stderr so command output on stdout stays clean.
//! A JSON line carries its own span chain only (`spans`, innermost last): the rail's spans are
//! roots (`consume`, `build`), never children of whatever span happened to be current.
//!
//! With `otel.endpoint` set (`feature = "otel"`), the same subscriber also exports the rail's
//! spans ([`crate::otel`]). Each layer has its own filter: `log.level = "warn"` quiets the log,
//! not the traces, and the exporter never sees a dependency's debug callsites.

use std::io::IsTerminal;

use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, fmt};

use crate::config::{LogFormat, Settings};

/// What [`init`] leaves running: the trace exporter, flushed at shutdown.
#[derive(Default)]
pub struct Logging {
    #[cfg(feature = "otel")]
    otel: Option<crate::otel::OtelHandle>,
}

impl Logging {
    /// Exports the spans still queued (a clean shutdown's last step); a no-op without
    /// `otel.endpoint`. Bounded by `otel.timeout_seconds`.
    pub async fn flush(&self) {
        #[cfg(feature = "otel")]
        if let Some(h) = &self.otel
            && !h.flush().await
        {
            tracing::warn!("the last spans could not be exported before shutdown");
        }
    }
}

/// Installs the global subscriber once; later calls install nothing (tests, embedding) and
/// start no exporter.
pub fn init(settings: &Settings) -> Logging {
    let log = &settings.log;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let base = fmt::layer().with_writer(std::io::stderr);
    let fmt_layer = match log.format {
        // `spans` is the line's own chain, innermost last; the current span is its last entry,
        // so it is not written a second time (`span`): half the bytes of a build's lines, and
        // half the work (each span's fields are parsed again to be written).
        LogFormat::Json => base
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .boxed(),
        // Colour codes only for a person at a terminal: a file, a pipe or journald gets plain text.
        LogFormat::Pretty => base
            .compact()
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt_layer.with_filter(filter));
    #[cfg(feature = "otel")]
    {
        if tracing::dispatcher::has_been_set() {
            return Logging::default();
        }
        let (layer, handle, failed) =
            match crate::otel::start(&settings.otel, Some(&settings.node_id())) {
                Ok(Some((layer, handle))) => (
                    Some(layer.with_filter(crate::otel::filter())),
                    Some(handle),
                    None,
                ),
                Ok(None) => (None, None, None),
                Err(e) => (None, None, Some(e)),
            };
        if registry.with(layer).try_init().is_err() {
            return Logging::default();
        }
        if let Some(e) = failed {
            tracing::warn!(error = %crate::error::report(&e), "traces are not exported");
        }
        if let Some(h) = &handle {
            tracing::info!(endpoint = %h.endpoint(), service_name = %settings.otel.service_name,
                           "exporting traces (OTLP/HTTP JSON)");
        }
        Logging { otel: handle }
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = registry.try_init();
        Logging::default()
    }
}
