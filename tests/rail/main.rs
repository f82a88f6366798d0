//! The `rail` test binary: transport, runtime, processes, fairness, builders, logs, otel.

#[path = "../common/mod.rs"]
mod common;

mod builders;
mod fairness;
mod logs;
mod otel;
mod processes;
mod runtime;
mod transport;
