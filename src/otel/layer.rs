//! The tracing [`Layer`] that turns briefrail's spans into OTLP spans.
//!
//! It keeps each span's data in the registry's extensions while the span is open and hands the
//! finished span to the export queue when it closes: `try_send` on a bounded channel, never a
//! wait, so a build never slows down for its trace. Only spans whose target starts with
//! `briefrail` are exported (the rail's own root spans, `build` and `consume`, and any child
//! of theirs), so adding the layer to an application's subscriber exports nothing of the
//! application's: its own spans belong to its own OpenTelemetry SDK.
//!
//! A span joins the traces it serves through [`join`], which writes the trace context into the
//! span's data (no span field: a field would be repeated on every log line inside the span, and
//! a build serving 64 demands would log 64 traceparents per line):
//!
//! * its parent: a W3C traceparent the span takes its trace id from, recording its span id as
//!   `parentSpanId` (a build: the first demand it served, so it appears under the upload that
//!   caused it). Without one, a child joins its parent's trace and a root starts a new trace.
//! * its links: the span contexts it serves (a build: every demand; a consume batch: every
//!   demand it recorded).
//!
//! A field named `error` marks the span failed: it becomes the status (`STATUS_CODE_ERROR`)
//! and its message. Every other field is an attribute (strings with any URL password
//! redacted); events at info or above inside the span become span events (at most
//! [`MAX_EVENTS`]).

use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

use super::export::Queue;
use super::otlp::{AttrValue, FinishedSpan, SpanEvent, SpanStatus};
use crate::secret::redact_urls;
use crate::trace::Traceparent;

/// Spans of these targets (and their children) are exported.
pub const TARGET_PREFIX: &str = "briefrail";

/// Span events kept per span; later ones are not recorded (a span is not a log file).
pub const MAX_EVENTS: usize = 32;

/// The exporting layer; made by [`super::start`] with the queue it feeds.
pub struct OtelLayer {
    queue: Queue,
}

impl OtelLayer {
    pub(super) fn new(queue: Queue) -> Self {
        Self { queue }
    }
}

/// Whether `span` will be exported: an [`OtelLayer`] saw it open (on a subscriber built on a
/// [`Registry`], as `tracing_subscriber::registry()` and `fmt()` are). What the node asks
/// before it reads the trace context of a build's demands: without an exporter, no read.
pub fn exported(span: &tracing::Span) -> bool {
    with_data(span, |_| ()).is_some()
}

/// Joins `span` to the traces it serves: `parent` (a remote parent: the span takes its trace
/// id and records its span id as `parentSpanId`) and `links` (duplicates kept once). A no-op
/// for a span no [`OtelLayer`] exports. Call it before the span has children: a child takes
/// its trace id when it opens.
pub fn join(span: &tracing::Span, parent: Option<&Traceparent>, links: &[Traceparent]) {
    with_data(span, |data| {
        if let Some(p) = parent {
            data.trace_id = p.trace_id;
            data.parent_span_id = Some(p.span_id);
        }
        for l in links {
            if !data.links.contains(l) {
                data.links.push(*l);
            }
        }
    });
}

/// Runs `f` on the exported data of `span`, if it has any. The subscriber is reached through
/// the span's own dispatcher (tracing's downcast), so no global state is involved.
fn with_data<T>(span: &tracing::Span, f: impl FnOnce(&mut SpanData) -> T) -> Option<T> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let span = registry.span(id)?;
        let mut ext = span.extensions_mut();
        ext.get_mut::<SpanData>().map(f)
    })
    .flatten()
}

/// What an open span has gathered so far (a registry extension).
struct SpanData {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_span_id: Option<[u8; 8]>,
    start: SystemTime,
    attributes: Vec<(String, AttrValue)>,
    events: Vec<SpanEvent>,
    links: Vec<Traceparent>,
    status: SpanStatus,
}

impl<S> Layer<S> for OtelLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if !span.metadata().target().starts_with(TARGET_PREFIX) {
            return;
        }
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<SpanData>()
                .map(|d| (d.trace_id, d.span_id))
        });
        let fresh = Traceparent::new_root();
        let mut data = SpanData {
            trace_id: parent.map_or(fresh.trace_id, |p| p.0),
            span_id: fresh.span_id,
            parent_span_id: parent.map(|p| p.1),
            start: SystemTime::now(),
            attributes: Vec::new(),
            events: Vec::new(),
            links: Vec::new(),
            status: SpanStatus::Unset,
        };
        attrs.record(&mut SpanFields(&mut data));
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(data) = ext.get_mut::<SpanData>() {
            values.record(&mut SpanFields(data));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        // Levels order by verbosity: DEBUG and TRACE are "greater" than INFO.
        if *event.metadata().level() > Level::INFO {
            return;
        }
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut ext = span.extensions_mut();
        let Some(data) = ext.get_mut::<SpanData>() else {
            return;
        };
        if data.events.len() >= MAX_EVENTS {
            return;
        }
        let mut fields = EventFields::default();
        event.record(&mut fields);
        let mut attributes = fields.attributes;
        attributes.push((
            "level".into(),
            AttrValue::Str(event.metadata().level().to_string()),
        ));
        data.events.push(SpanEvent {
            time: SystemTime::now(),
            name: fields
                .message
                .unwrap_or_else(|| event.metadata().name().to_owned()),
            attributes,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(data) = span.extensions_mut().remove::<SpanData>() else {
            return;
        };
        self.queue.push(FinishedSpan {
            trace_id: data.trace_id,
            span_id: data.span_id,
            parent_span_id: data.parent_span_id,
            name: span.metadata().name().to_owned(),
            start: data.start,
            end: SystemTime::now(),
            attributes: data.attributes,
            events: data.events,
            links: data.links,
            status: data.status,
        });
    }
}

/// Records a span's fields: `error` as its status, the rest as attributes (a field recorded
/// again replaces its value).
struct SpanFields<'a>(&'a mut SpanData);

impl SpanFields<'_> {
    fn set(&mut self, key: &str, value: AttrValue) {
        let attrs = &mut self.0.attributes;
        match attrs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => attrs.push((key.to_owned(), value)),
        }
    }

    fn text(&mut self, field: &Field, value: &str) {
        match field.name() {
            "error" => self.0.status = SpanStatus::Error(redact_urls(value)),
            // An unset field (e.g. a follow-up build's empty `trace_id`) says nothing.
            _ if value.is_empty() => {}
            name => self.set(name, AttrValue::Str(redact_urls(value))),
        }
    }
}

impl Visit for SpanFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.text(field, &format!("{value:?}"));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), AttrValue::Int(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field.name(), int_or_text(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field.name(), AttrValue::Double(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), AttrValue::Bool(value));
    }
}

/// An event's message (its name in the trace) and other fields (its attributes).
#[derive(Default)]
struct EventFields {
    message: Option<String>,
    attributes: Vec<(String, AttrValue)>,
}

impl EventFields {
    fn text(&mut self, field: &Field, text: &str) {
        let text = redact_urls(text);
        if field.name() == "message" {
            self.message = Some(text);
        } else {
            self.attributes
                .push((field.name().to_owned(), AttrValue::Str(text)));
        }
    }
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value);
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.text(field, &format!("{value:?}"));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.attributes
            .push((field.name().to_owned(), AttrValue::Int(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.attributes
            .push((field.name().to_owned(), int_or_text(value)));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.attributes
            .push((field.name().to_owned(), AttrValue::Double(value)));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.attributes
            .push((field.name().to_owned(), AttrValue::Bool(value)));
    }
}

fn int_or_text(value: u64) -> AttrValue {
    i64::try_from(value).map_or_else(|_| AttrValue::Str(value.to_string()), AttrValue::Int)
}
