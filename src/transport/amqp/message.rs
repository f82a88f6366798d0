//! The wire format of a nudge: a small JSON envelope (IDs, name, time) and the W3C
//! `traceparent` as an AMQP header. Nothing from a document ever travels, and nothing in a
//! message is believed: the consumer looks the event up by id and compares the rest with the
//! ledger's row (`ledger::inbox::apply`).

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};

use crate::error::{Error, Result};
use crate::ledger::inbox::EventEnvelope;

/// Largest body a consumer accepts; a nudge is ~250 bytes.
pub const MAX_BODY: usize = 16 * 1024;
pub const TRACEPARENT: &str = "traceparent";
/// Header a dead-lettered message carries: why it was refused.
pub const REASON: &str = "x-briefrail-reason";
/// Header of a dead letter the ledger refused to file: why (the copy in the dead-letter queue
/// is then the only one).
pub const UNRECORDED: &str = "x-briefrail-unrecorded";

/// The body and properties to publish for an event.
pub fn encode(e: &EventEnvelope) -> (Vec<u8>, BasicProperties) {
    let body = serde_json::json!({
        "event_id": e.event_id,
        "event_name": e.event_name,
        "firm_id": e.firm_id,
        "matter_id": e.matter_id,
        "occurred_at": e.occurred_at,
    });
    let mut headers = FieldTable::default();
    if let Some(tp) = &e.traceparent {
        headers.insert(
            TRACEPARENT.into(),
            AMQPValue::LongString(tp.as_str().into()),
        );
    }
    let props = BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("application/json".into())
        .with_message_id(e.event_id.to_string().into())
        .with_timestamp(e.occurred_at.timestamp().max(0) as u64)
        .with_headers(headers);
    (serde_json::to_vec(&body).unwrap_or_default(), props)
}

/// Parses a delivery. Every refusal says why, for the dead-letter header.
pub fn decode(data: &[u8], props: &BasicProperties) -> Result<EventEnvelope> {
    if data.len() > MAX_BODY {
        return Err(Error::InvalidInput(format!(
            "body of {} bytes exceeds the {MAX_BODY}-byte limit of a nudge",
            data.len()
        )));
    }
    #[derive(serde::Deserialize)]
    struct Wire {
        event_id: uuid::Uuid,
        event_name: String,
        firm_id: uuid::Uuid,
        matter_id: uuid::Uuid,
        occurred_at: chrono::DateTime<chrono::Utc>,
        #[serde(default)]
        xact_id: Option<i64>,
    }
    let w: Wire = serde_json::from_slice(data)
        .map_err(|e| Error::InvalidInput(format!("not a nudge: {e}")))?;
    // The ledger compares the time with its own; one the database cannot hold would make each
    // attempt fail as if the database were down, and the message would never be settled.
    if !(1..=9999).contains(&chrono::Datelike::year(&w.occurred_at)) {
        return Err(Error::InvalidInput(format!(
            "not a nudge: occurred_at {} is outside the years 1 to 9999",
            w.occurred_at
        )));
    }
    let traceparent = traceparent(props);
    Ok(EventEnvelope {
        event_id: w.event_id,
        event_name: w.event_name,
        firm_id: w.firm_id,
        matter_id: w.matter_id,
        occurred_at: w.occurred_at,
        xact_id: w.xact_id,
        traceparent,
    })
}

/// The message's `traceparent` header, when it holds a valid one.
pub fn traceparent(props: &BasicProperties) -> Option<String> {
    props
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(TRACEPARENT))
        .and_then(|v| match v {
            AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok().map(str::to_owned),
            AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
            _ => None,
        })
        .filter(|t| crate::trace::Traceparent::parse(t).is_some())
}

/// The event id a body names, if it is JSON with a UUID `event_id` (even when the rest is
/// malformed): what a dead letter is filed under.
pub fn named_event_id(data: &[u8]) -> Option<uuid::Uuid> {
    if data.len() > MAX_BODY {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(data).ok()?;
    v.get("event_id")?.as_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let e = EventEnvelope {
            event_id: uuid::Uuid::new_v4(),
            event_name: "document.uploaded".into(),
            firm_id: uuid::Uuid::new_v4(),
            matter_id: uuid::Uuid::new_v4(),
            occurred_at: chrono::Utc::now(),
            traceparent: Some(crate::trace::Traceparent::new_root().to_string()),
            xact_id: None,
        };
        let (body, props) = encode(&e);
        assert_eq!(decode(&body, &props).unwrap(), e);
        assert!(
            decode(b"not json", &props)
                .unwrap_err()
                .to_string()
                .contains("not a nudge")
        );
        assert!(
            decode(br#"{"event_name":"x.y"}"#, &props)
                .unwrap_err()
                .to_string()
                .contains("event_id")
        );
        for year in ["-5000", "0000", "+10000"] {
            let body = serde_json::json!({
                "event_id": e.event_id, "event_name": "document.uploaded",
                "firm_id": e.firm_id, "matter_id": e.matter_id,
                "occurred_at": format!("{year}-01-01T00:00:00Z"),
            });
            let refused = decode(body.to_string().as_bytes(), &props)
                .expect_err(year)
                .to_string();
            // A year chrono cannot parse is refused as malformed; one it parses, by the range.
            assert!(
                refused.contains("not a nudge") && (year != "0000" || refused.contains("occurred_at")),
                "{year}: {refused}"
            );
        }
        assert!(
            decode(&vec![b' '; MAX_BODY + 1], &props)
                .unwrap_err()
                .to_string()
                .contains("exceeds")
        );
    }
}
