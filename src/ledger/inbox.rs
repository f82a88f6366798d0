//! The inbox (`ops.consumed_events`) and the Brief rail's trigger: turning a consumed event
//! into a demand, exactly once in effect.
//!
//! [`apply`] runs one transaction: record `(consumer, event_id)`, check the trigger's gates,
//! record the demand. A duplicate delivery finds its inbox row and has no second effect. The
//! transport acks only after this commits.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::event_name::EventName;
use super::transitions;
use crate::error::{Error, Result};
use crate::schema::{ops, record};

/// The inbox name of the Brief rail's trigger.
pub const BRIEF_RAIL: &str = "brief-rail";

/// The facts the Brief rail hears: each may change the Brief.
pub const HEARD: [&str; 3] = [
    EventName::MATTER_CREATED,
    EventName::DOCUMENT_UPLOADED,
    EventName::BRIEF_REQUESTED,
];

/// An event as it arrives from any transport: IDs and trace context only.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventEnvelope {
    pub event_id: Uuid,
    pub event_name: String,
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub occurred_at: chrono::DateTime<chrono::Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The transaction that recorded the fact (an id, like the others): lets the demand tell
    /// whether a running or landed build already read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xact_id: Option<i64>,
}

/// What the trigger did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The demand was recorded; nudge the matter.
    Demand { requested_generation: i64 },
    /// Already consumed: no second effect.
    Duplicate,
    /// Consumed, but a gate said no (archived matter, unknown matter or firm).
    Gated(String),
    /// Consumed; a build that already reads this fact is running or has landed.
    Covered,
}

/// Refuses, before any transaction, an event this rail cannot hear. The transport
/// dead-letters it with this reason.
pub fn check_heard(event_name: &str) -> Result<()> {
    EventName::parse(event_name)?;
    if HEARD.contains(&event_name) {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "the brief rail does not hear {event_name:?} (it hears {})",
            HEARD.join(", ")
        )))
    }
}

/// The trigger, in one transaction: inbox row, gates, demand.
pub async fn apply(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    event: &EventEnvelope,
) -> Result<Applied> {
    check_heard(&event.event_name)?;
    let consumer = consumer.to_owned();
    let event = event.clone();
    conn.transaction(async move |tx| {
        use ops::consumed_events::dsl as c;
        let fresh = diesel::insert_into(c::consumed_events)
            .values((c::consumer.eq(&consumer), c::event_id.eq(event.event_id)))
            .on_conflict_do_nothing()
            .execute(tx)
            .await?;
        if fresh == 0 {
            return Ok(Applied::Duplicate);
        }
        use record::matters::dsl as m;
        let archived: Option<Option<chrono::DateTime<chrono::Utc>>> = m::matters
            .filter(
                m::firm_id
                    .eq(event.firm_id)
                    .and(m::matter_id.eq(event.matter_id)),
            )
            .select(m::archived_at)
            .first(tx)
            .await
            .optional()?;
        match archived {
            Some(Some(_)) => {
                return Ok(Applied::Gated(format!(
                    "matter {} is archived",
                    event.matter_id
                )));
            }
            Some(None) => {}
            None => {
                let firm_known: bool = diesel::select(diesel::dsl::exists(
                    m::matters.filter(m::firm_id.eq(event.firm_id)),
                ))
                .get_result(tx)
                .await?;
                return Ok(Applied::Gated(if firm_known {
                    format!("matter {} is not in the record", event.matter_id)
                } else {
                    format!("firm {} is not known", event.firm_id)
                }));
            }
        }
        let requested = match event.xact_id {
            Some(x) => transitions::demand_for_event(tx, event.firm_id, event.matter_id, x).await?,
            None => Some(transitions::demand(tx, event.firm_id, event.matter_id).await?),
        };
        Ok(match requested {
            Some(requested_generation) => Applied::Demand {
                requested_generation,
            },
            None => Applied::Covered,
        })
    })
    .await
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
