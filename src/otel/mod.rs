//! Traces out (`feature = "otel"`, `[otel] endpoint`): briefrail's spans, exported to the
//! firm's Jaeger or Tempo as OTLP/HTTP JSON, so a build appears in the trace of the upload that
//! caused it, linked to every demand it served.
//!
//! Why a tracing [`Layer`](tracing_subscriber::Layer) and not a client the node calls: the spans
//! already exist (the `build` and `consume` roots the logs carry), so exporting them is a
//! matter of the subscriber, and a subscriber is the application's. The binary adds the layer
//! in `surface::logging::init`; an embedding application adds it to its own:
//!
//! ```no_run
//! # fn main() -> briefrail::Result<()> {
//! use tracing_subscriber::prelude::*;
//! let settings = briefrail::config::Settings::load(None)?;
//! let otel = briefrail::otel::start(&settings.otel, Some(&settings.node_id()))?;
//! let (layer, handle) = match otel {
//!     Some((layer, handle)) => (Some(layer.with_filter(briefrail::otel::filter())), Some(handle)),
//!     None => (None, None),
//! };
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(layer)
//!     .init();
//! // ... run the node; at shutdown, after `node.shutdown().await`:
//! // if let Some(h) = &handle { h.flush().await; }
//! # let _ = handle; Ok(()) }
//! ```
//!
//! What joins a build to its trace is in the ledger: the node reads the traceparent each served
//! event was recorded with (`ledger::reads::event_traceparents`, one statement per build, and
//! only when the build's span is [`exported`]) and [`join`]s the span to them.
//!
//! Hand-rolled on purpose: the OpenTelemetry SDK with its gRPC and protobuf stack roughly
//! doubles the clean build, for what is here a JSON body POSTed by the awc client the `http`
//! feature already has. Export never touches the hot path: a closed span is `try_send` to a
//! bounded queue (`export`), a full queue drops and counts, and a collector that is away
//! costs warnings (at most one a minute), never a slower or a failed build.
//!
//! * `layer`: spans to finished spans, fields to trace context, attributes, links, status.
//! * `export`: the bounded queue, the batching thread, the POST, the rate-limited warnings.
//! * `otlp`: the JSON encoding (the protobuf JSON mapping OTLP/HTTP specifies).

internal!(export);
internal!(layer);
internal!(otlp);

use tracing::Level;
use tracing_subscriber::filter::Targets;

#[cfg(feature = "testing")]
pub use export::ExportStats;
pub use export::OtelHandle;
pub use layer::{OtelLayer, exported, join};

use crate::config::OtelSettings;
use crate::error::Result;

/// Starts the exporter when `settings.endpoint` is set (`None` when it is empty: off), with
/// `instance_id` as `service.instance.id` (the node id). The layer goes into the subscriber;
/// the handle flushes at shutdown. Fails only on an endpoint that is not a URL (validated
/// settings never have one) or when the export thread cannot start.
pub fn start(
    settings: &OtelSettings,
    instance_id: Option<&str>,
) -> Result<Option<(OtelLayer, OtelHandle)>> {
    if !settings.enabled() {
        return Ok(None);
    }
    let resource = otlp::Resource {
        service_name: settings.service_name.trim().to_owned(),
        instance_id: instance_id.map(str::to_owned),
    };
    let (queue, handle) = export::start(settings, resource)?;
    Ok(Some((OtelLayer::new(queue), handle)))
}

/// The per-layer filter to give the layer (`layer.with_filter(filter())`): briefrail's spans
/// and events at info and above. The layer exports nothing else anyway; the filter spares it
/// from even seeing every other callsite of the process (a debug log of a dependency).
pub fn filter() -> Targets {
    Targets::new().with_target(layer::TARGET_PREFIX, Level::INFO)
}
