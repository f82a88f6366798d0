//! The OTLP/HTTP JSON encoding of finished spans (`ExportTraceServiceRequest` in the protobuf
//! JSON mapping, as the OTLP specification fixes it for JSON: ids as lowercase hex, not base64;
//! 64-bit integers and nanosecond times as decimal strings; enums as their numbers).
//!
//! Pure data to JSON, so the shape is unit-tested here without a collector.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::trace::Traceparent;

/// `SPAN_KIND_INTERNAL`: every span the rail exports is work inside this process.
const SPAN_KIND_INTERNAL: u8 = 1;
/// `STATUS_CODE_ERROR`.
const STATUS_CODE_ERROR: u8 = 2;

/// An attribute value, as OTLP's `AnyValue` knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
}

/// How the span ended, for OTLP's `Status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SpanStatus {
    /// Nothing said (what OTLP advises for anything but an error).
    #[default]
    Unset,
    /// The work failed; the message says why.
    Error(String),
}

/// Something that happened inside a span (a log line at info or above).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    pub time: SystemTime,
    pub name: String,
    pub attributes: Vec<(String, AttrValue)>,
}

/// A closed span, ready for export.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedSpan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub name: String,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(String, AttrValue)>,
    pub events: Vec<SpanEvent>,
    /// The span contexts this span serves (for a build: every demand it served).
    pub links: Vec<Traceparent>,
    pub status: SpanStatus,
}

/// Who sent the spans: OTLP's `Resource`.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub service_name: String,
    /// `service.instance.id`: the node id, when known.
    pub instance_id: Option<String>,
}

/// One export request's body.
pub fn encode(resource: &Resource, spans: &[FinishedSpan]) -> Value {
    let mut res_attrs = vec![
        attr(
            "service.name",
            &AttrValue::Str(resource.service_name.clone()),
        ),
        attr(
            "service.version",
            &AttrValue::Str(env!("CARGO_PKG_VERSION").to_owned()),
        ),
        attr("telemetry.sdk.name", &AttrValue::Str("briefrail".into())),
        attr("telemetry.sdk.language", &AttrValue::Str("rust".into())),
    ];
    if let Some(id) = &resource.instance_id {
        res_attrs.push(attr("service.instance.id", &AttrValue::Str(id.clone())));
    }
    json!({
        "resourceSpans": [{
            "resource": { "attributes": res_attrs },
            "scopeSpans": [{
                "scope": { "name": "briefrail", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans.iter().map(span).collect::<Vec<_>>(),
            }],
        }],
    })
}

fn span(s: &FinishedSpan) -> Value {
    let mut v = json!({
        "traceId": hex(&s.trace_id),
        "spanId": hex(&s.span_id),
        "name": s.name,
        "kind": SPAN_KIND_INTERNAL,
        "startTimeUnixNano": nanos(s.start),
        "endTimeUnixNano": nanos(s.end),
        "attributes": s.attributes.iter().map(|(k, v)| attr(k, v)).collect::<Vec<_>>(),
        "events": s.events.iter().map(|e| json!({
            "timeUnixNano": nanos(e.time),
            "name": e.name,
            "attributes": e.attributes.iter().map(|(k, v)| attr(k, v)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "links": s.links.iter().map(|l| json!({
            "traceId": hex(&l.trace_id),
            "spanId": hex(&l.span_id),
        })).collect::<Vec<_>>(),
        "status": match &s.status {
            SpanStatus::Unset => json!({}),
            SpanStatus::Error(m) => json!({ "code": STATUS_CODE_ERROR, "message": m }),
        },
    });
    if let (Some(p), Some(o)) = (s.parent_span_id, v.as_object_mut()) {
        o.insert("parentSpanId".into(), Value::String(hex(&p)));
    }
    v
}

fn attr(key: &str, value: &AttrValue) -> Value {
    let value = match value {
        AttrValue::Str(s) => json!({ "stringValue": s }),
        // int64 is a string in the protobuf JSON mapping.
        AttrValue::Int(i) => json!({ "intValue": i.to_string() }),
        AttrValue::Double(d) if d.is_finite() => json!({ "doubleValue": d }),
        AttrValue::Double(d) => json!({ "stringValue": d.to_string() }),
        AttrValue::Bool(b) => json!({ "boolValue": b }),
    };
    json!({ "key": key, "value": value })
}

fn nanos(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
        .to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_span_in_the_protobuf_json_mapping() {
        let parent = Traceparent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        let other = Traceparent::new_root();
        let start = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let s = FinishedSpan {
            trace_id: parent.trace_id,
            span_id: [1, 2, 3, 4, 5, 6, 7, 8],
            parent_span_id: Some(parent.span_id),
            name: "build".into(),
            start,
            end: start + Duration::from_millis(5),
            attributes: vec![
                ("token".into(), AttrValue::Int(7)),
                ("outcome".into(), AttrValue::Str("failed".into())),
                ("retried".into(), AttrValue::Bool(false)),
                ("share".into(), AttrValue::Double(0.5)),
            ],
            events: vec![SpanEvent {
                time: start,
                name: "build failed".into(),
                attributes: vec![],
            }],
            links: vec![parent, other],
            status: SpanStatus::Error("exit 3".into()),
        };
        let body = encode(
            &Resource {
                service_name: "briefrail".into(),
                instance_id: Some("n1".into()),
            },
            &[s],
        );
        let rs = &body["resourceSpans"][0];
        assert_eq!(
            rs["resource"]["attributes"][0],
            json!({"key": "service.name", "value": {"stringValue": "briefrail"}})
        );
        let span = &rs["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(span["spanId"], "0102030405060708");
        assert_eq!(span["parentSpanId"], "00f067aa0ba902b7");
        assert_eq!(span["kind"], 1);
        assert_eq!(span["startTimeUnixNano"], "1700000000123456789");
        assert_eq!(span["endTimeUnixNano"], "1700000000128456789");
        assert_eq!(
            span["attributes"][0],
            json!({"key": "token", "value": {"intValue": "7"}})
        );
        assert_eq!(span["attributes"][2]["value"], json!({"boolValue": false}));
        assert_eq!(span["attributes"][3]["value"], json!({"doubleValue": 0.5}));
        assert_eq!(span["links"][0]["spanId"], "00f067aa0ba902b7");
        assert_eq!(span["links"][1]["traceId"], other.trace_id_hex());
        assert_eq!(span["status"], json!({"code": 2, "message": "exit 3"}));
        assert_eq!(span["events"][0]["name"], "build failed");
    }

    #[test]
    fn a_root_span_has_no_parent_and_an_unset_status() {
        let t = Traceparent::new_root();
        let s = FinishedSpan {
            trace_id: t.trace_id,
            span_id: t.span_id,
            parent_span_id: None,
            name: "consume".into(),
            start: SystemTime::now(),
            end: SystemTime::now(),
            attributes: vec![],
            events: vec![],
            links: vec![],
            status: SpanStatus::Unset,
        };
        let body = encode(
            &Resource {
                service_name: "x".into(),
                instance_id: None,
            },
            &[s],
        );
        let span = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert!(span.get("parentSpanId").is_none());
        assert_eq!(span["status"], json!({}));
    }
}
