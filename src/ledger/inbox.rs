//! The inbox (`ops.consumed_events`) and the Brief rail's trigger: turning a consumed event
//! into a demand, exactly once in effect, believing nothing the wire says.
//!
//! A nudge is an event id. [`apply`] runs one transaction: read the event's outbox row by that
//! id; refuse the nudge if the row is missing or any field the message carries disagrees with
//! it ([`Applied::Refused`]: the transport dead-letters it, and nothing changes); record
//! `(consumer, event_id)`; check the trigger's gates; record the demand with the transaction
//! id *from the row*. A duplicate delivery finds its inbox row and has no second effect. The
//! transport acks only after this commits.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::event_name::EventName;
use super::models::OutboxRow;
use super::{outbox, retention, transitions};
use crate::error::Result;
use crate::schema::{ops, record};

pub use super::models::BRIEF_RAIL;

/// The facts the Brief rail hears: each may change the Brief. Every other fact is consumed
/// too (so it drains from the outbox and is never republished), with no effect.
pub const HEARD: [&str; 3] = [
    EventName::MATTER_CREATED,
    EventName::DOCUMENT_UPLOADED,
    EventName::BRIEF_REQUESTED,
];

/// An event as it arrives from a transport: what the publisher *claims*. Only `event_id` is
/// used, to find the ledger's row; every other field is compared with that row and never
/// believed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventEnvelope {
    pub event_id: Uuid,
    pub event_name: String,
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub occurred_at: chrono::DateTime<chrono::Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Sent by relays before 0.2 (a transaction id is cluster-local, not an id of the record);
    /// compared with the row when present, never used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xact_id: Option<i64>,
}

/// A fact as the ledger recorded it: what a demand's nudge carries on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub event_id: Uuid,
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub traceparent: Option<String>,
}

/// What the trigger did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The demand was recorded; nudge the matter of this (ledger) fact.
    Demand {
        requested_generation: i64,
        fact: Fact,
    },
    /// Already consumed: no second effect.
    Duplicate,
    /// Consumed, but a gate said no (archived matter, unknown matter or firm).
    Gated(String),
    /// Consumed; a build that already reads this fact is running or has landed.
    Covered,
    /// Consumed; the rail does not hear this fact (e.g. `matter.archived`).
    NotHeard(String),
    /// Not consumed and nothing changed: the message names no event of this ledger, or its
    /// fields disagree with the event's row. The transport dead-letters it with this reason.
    Refused(String),
    /// Nothing changed: a late copy of an event retention removed (its outbox row and inbox
    /// rows are gone; its demand was recorded long ago). The transport acks and counts it.
    Expired(String),
}

/// Whether the Brief rail hears `event_name`.
pub fn hears(event_name: &str) -> bool {
    HEARD.contains(&event_name)
}

/// Why a message disagrees with the ledger's row of its event, if it does. Every field the
/// message carries is compared; a header a broker may strip (traceparent) only when present.
fn disagreement(wire: &EventEnvelope, row: &OutboxRow) -> Option<String> {
    let mut diffs = Vec::new();
    if wire.event_name != row.event_name {
        diffs.push(format!(
            "event_name (message {:?}, ledger {:?})",
            wire.event_name, row.event_name
        ));
    }
    if wire.firm_id != row.firm_id {
        diffs.push(format!(
            "firm_id (message {}, ledger {})",
            wire.firm_id, row.firm_id
        ));
    }
    if wire.matter_id != row.matter_id {
        diffs.push(format!(
            "matter_id (message {}, ledger {})",
            wire.matter_id, row.matter_id
        ));
    }
    if wire.occurred_at.timestamp_micros() != row.created_at.timestamp_micros() {
        diffs.push(format!(
            "occurred_at (message {}, ledger {})",
            wire.occurred_at, row.created_at
        ));
    }
    if wire.xact_id.is_some_and(|x| x != row.xact_id) {
        diffs.push("xact_id".to_owned());
    }
    if let (Some(w), Some(r)) = (&wire.traceparent, &row.traceparent) {
        if w != r {
            diffs.push("traceparent".to_owned());
        }
    }
    (!diffs.is_empty()).then(|| {
        format!(
            "event {}: the message disagrees with the ledger's outbox row on {}",
            wire.event_id,
            diffs.join(", ")
        )
    })
}

/// The trigger for a message from the wire, in one transaction: look the event up by id,
/// refuse a message the ledger does not confirm, then [`apply_row`].
pub async fn apply(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    wire: &EventEnvelope,
) -> Result<Applied> {
    EventName::parse(&wire.event_name)?;
    let consumer = consumer.to_owned();
    let wire = wire.clone();
    conn.transaction(async move |tx| {
        let Some(row) = outbox::event(tx, wire.event_id).await? else {
            let id = wire.event_id;
            return Ok(
                if retention::removed_by_retention(tx, wire.occurred_at).await? {
                    Applied::Expired(format!(
                        "event {id} is no longer in the outbox: retention removed the events \
                     that occurred by then"
                    ))
                } else {
                    Applied::Refused(format!("event {id} is not in the ledger's outbox"))
                },
            );
        };
        if let Some(why) = disagreement(&wire, &row) {
            return Ok(Applied::Refused(why));
        }
        apply_row(tx, &consumer, &row).await
    })
    .await
}

/// The trigger for an event read from the ledger itself (the embedded transport, or [`apply`]
/// after its check): inbox row, gates, demand. Call inside a transaction.
pub async fn apply_row(
    tx: &mut AsyncPgConnection,
    consumer: &str,
    row: &OutboxRow,
) -> Result<Applied> {
    use ops::consumed_events::dsl as c;
    let fresh = diesel::insert_into(c::consumed_events)
        .values((c::consumer.eq(consumer), c::event_id.eq(row.event_id)))
        .on_conflict_do_nothing()
        .execute(tx)
        .await?;
    if fresh == 0 {
        return Ok(Applied::Duplicate);
    }
    if !hears(&row.event_name) {
        return Ok(Applied::NotHeard(format!(
            "the brief rail does not hear {:?} (it hears {})",
            row.event_name,
            HEARD.join(", ")
        )));
    }
    use record::matters::dsl as m;
    let archived: Option<Option<chrono::DateTime<chrono::Utc>>> = m::matters
        .filter(
            m::firm_id
                .eq(row.firm_id)
                .and(m::matter_id.eq(row.matter_id)),
        )
        .select(m::archived_at)
        .first(tx)
        .await
        .optional()?;
    match archived {
        Some(Some(_)) => {
            return Ok(Applied::Gated(format!(
                "matter {} is archived",
                row.matter_id
            )));
        }
        Some(None) => {}
        None => {
            let firm_known: bool = diesel::select(diesel::dsl::exists(
                m::matters.filter(m::firm_id.eq(row.firm_id)),
            ))
            .get_result(tx)
            .await?;
            return Ok(Applied::Gated(if firm_known {
                format!("matter {} is not in the record", row.matter_id)
            } else {
                format!("firm {} is not known", row.firm_id)
            }));
        }
    }
    Ok(
        match transitions::demand_for_event(tx, row.firm_id, row.matter_id, row.xact_id).await? {
            Some(requested_generation) => Applied::Demand {
                requested_generation,
                fact: Fact {
                    event_id: row.event_id,
                    firm_id: row.firm_id,
                    matter_id: row.matter_id,
                    traceparent: row.traceparent.clone(),
                },
            },
            None => Applied::Covered,
        },
    )
}

/// Whether `consumer` has consumed `event_id` (reconciliation asks this).
pub async fn consumed(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    event_id: Uuid,
) -> Result<bool> {
    use ops::consumed_events::dsl as c;
    Ok(diesel::select(diesel::dsl::exists(
        c::consumed_events.filter(c::consumer.eq(consumer).and(c::event_id.eq(event_id))),
    ))
    .get_result(conn)
    .await?)
}

impl OutboxRow {
    /// The envelope a transport carries for this row.
    pub fn envelope(&self) -> EventEnvelope {
        EventEnvelope {
            event_id: self.event_id,
            event_name: self.event_name.clone(),
            firm_id: self.firm_id,
            matter_id: self.matter_id,
            occurred_at: self.created_at,
            traceparent: self.traceparent.clone(),
            // Cluster-local and not an id of the record: never on the wire.
            xact_id: None,
        }
    }
}
