//! Tracing set-up for the binary: `log.format = "pretty" | "json"`, level from `log.level`
//! (overridden by `RUST_LOG`). Logs go to stderr so command output on stdout stays clean.
//! A JSON line carries its own span chain only (`spans`, innermost last): the rail's spans are
//! roots (`consume`, `build`), never children of whatever span happened to be current.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber once; later calls are no-ops (tests, embedding).
pub fn init(settings: &LogSettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match settings.format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        // Colour codes only for a person at a terminal: a file, a pipe or journald gets plain text.
        LogFormat::Pretty => builder
            .compact()
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}
