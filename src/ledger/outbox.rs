//! The transactional outbox: a fact and its event row commit together or not at all.
//!
//! [`record_event`] is meant to run inside the caller's own transaction (the one that writes
//! the fact); an embedding application calls it from its transactions the same way
//! [`super::facts`] does. The payload carries IDs only: the bus is a nudge, never a copy of
//! the record.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::event_name::EventName;
use crate::error::Result;
use crate::schema::ops;
use crate::trace::Traceparent;

/// An event about to be recorded.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub event_id: Uuid,
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub event_name: EventName,
    /// IDs only (e.g. `{"document_id": ...}`), never document content.
    pub payload: serde_json::Value,
    /// The trace context of the span that recorded the fact.
    pub traceparent: Option<Traceparent>,
}

impl NewEvent {
    /// A new event with a fresh id and a fresh trace. `name` is validated here, so a name the
    /// database's CHECK would refuse never reaches it.
    pub fn new(firm_id: Uuid, matter_id: Uuid, name: &str) -> Result<Self> {
        Ok(Self {
            event_id: Uuid::new_v4(),
            firm_id,
            matter_id,
            event_name: EventName::parse(name)?,
            payload: serde_json::json!({}),
            traceparent: Some(Traceparent::new_root()),
        })
    }

    pub fn payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }

    pub fn traceparent(mut self, tp: Option<Traceparent>) -> Self {
        self.traceparent = tp;
        self
    }
}

/// Inserts the event row. Call it inside the transaction that writes the fact. Returns the
/// event id.
pub async fn record_event(conn: &mut AsyncPgConnection, event: &NewEvent) -> Result<Uuid> {
    use ops::domain_event_outbox::dsl as o;
    diesel::insert_into(o::domain_event_outbox)
        .values((
            o::event_id.eq(event.event_id),
            o::firm_id.eq(event.firm_id),
            o::matter_id.eq(event.matter_id),
            o::event_name.eq(event.event_name.as_str()),
            o::payload.eq(&event.payload),
            o::traceparent.eq(event.traceparent.map(|t| t.to_string())),
        ))
        .execute(conn)
        .await?;
    tracing::debug!(event_id = %event.event_id, firm_id = %event.firm_id, matter_id = %event.matter_id,
                    event_name = %event.event_name, "outbox event recorded");
    Ok(event.event_id)
}
