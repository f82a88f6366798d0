//! The inbox (`ops.consumed_events`) and the Brief rail's trigger: turning a consumed event
//! into a demand, exactly once in effect, believing nothing the wire says.
//!
//! A nudge is an event id. [`apply`] runs one transaction: read the event's outbox row by that
//! id; refuse the nudge if the row is missing or any field the message carries disagrees with
//! it ([`Applied::Refused`]: the transport dead-letters it, and nothing changes); record
//! `(consumer, event_id)`; check the trigger's gates; record the demand with the transaction
//! id *from the row*. A duplicate delivery finds its inbox row and has no second effect. The
//! transport acks only after this commits.

use std::collections::{HashMap, HashSet};

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::event_name::EventName;
use super::models::OutboxRow;
use super::{outbox, retention};
use crate::error::Result;
#[cfg(feature = "testing")]
use crate::schema::ops;

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
    /// How long before the trigger's transaction the ledger recorded the fact, by the ledger's
    /// clock, where the trigger asked (`None`: unknown). Its nudge's debounce counts from then.
    pub recorded_ago: Option<std::time::Duration>,
    /// How urgently its demand is served, as the fact's row records it.
    pub class: crate::nudge::DemandClass,
}

impl Fact {
    /// The fact of an outbox row: every value from the ledger's row (its age unknown).
    fn of(row: &OutboxRow) -> Self {
        Self {
            event_id: row.event_id,
            firm_id: row.firm_id,
            matter_id: row.matter_id,
            traceparent: row.traceparent.clone(),
            recorded_ago: None,
            class: crate::nudge::DemandClass::from_stored(&row.demand_class),
        }
    }
}

/// What the trigger did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The demand was recorded; nudge the matter of this (ledger) fact.
    Demand {
        requested_generation: i64,
        fact: Fact,
    },
    /// Already consumed: no second effect on the ledger. Its matter is nudged all the same: a
    /// copy comes back after a consumer stopped between its commit and its nudge (a crash, a
    /// broken session), and with no nudge the demand would wait for reconcile.
    Duplicate(Fact),
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
#[cfg(feature = "testing")]
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
    if let (Some(w), Some(r)) = (&wire.traceparent, &row.traceparent)
        && w != r
    {
        diffs.push("traceparent".to_owned());
    }
    (!diffs.is_empty()).then(|| {
        format!(
            "event {}: the message disagrees with the ledger's outbox row on {}",
            wire.event_id,
            diffs.join(", ")
        )
    })
}

/// The trigger for a message from the wire, in one transaction: [`apply_batch`] of one.
#[cfg(feature = "testing")]
pub async fn apply(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    wire: &EventEnvelope,
) -> Result<Applied> {
    let mut one = apply_batch(conn, consumer, std::slice::from_ref(wire)).await?;
    one.pop()
        .ok_or_else(|| crate::Error::internal("a batch of one applied nothing"))
}

/// The trigger for a batch of messages from the wire, one result per message in their order,
/// in one statement (`ops.consume_events`, its own transaction unless the caller is in one):
/// read every event's outbox row by id; refuse each message the ledger does not confirm (no
/// row, or a field that disagrees with it), or call it expired (a late copy of an event
/// retention removed); apply the confirmed ones (`ops.apply_events`). A refusal changes nothing
/// and does not stop the others. The same event twice in one batch is applied once: its second
/// copy is a duplicate.
pub async fn apply_batch(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    wires: &[EventEnvelope],
) -> Result<Vec<Applied>> {
    apply_batch_flushed(conn, consumer, wires, true).await
}

/// [`apply_batch`] for the broker's consumer: its transaction commits without waiting for the
/// disk (`synchronous_commit` off for it alone). What it writes is redone if a crash loses it:
/// the event keeps no inbox row, so reconcile publishes it again (`reconcile.after_seconds`),
/// and no claim can have read a lost demand, since a claim's own commit flushes everything
/// before it. At idle a flush is most of a short commit, and this one is on the path between
/// an upload and its build. A replay of a dead letter, which an operator is told has landed,
/// keeps [`apply_batch`]'s flush.
pub async fn apply_delivered(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    wires: &[EventEnvelope],
) -> Result<Vec<Applied>> {
    apply_batch_flushed(conn, consumer, wires, false).await
}

async fn apply_batch_flushed(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    wires: &[EventEnvelope],
    flush: bool,
) -> Result<Vec<Applied>> {
    let mut out: Vec<Option<Applied>> = vec![None; wires.len()];
    // The rows the ledger answered, by event: what a later copy of an event is checked against.
    let mut known: HashMap<Uuid, (OutboxRow, std::time::Duration)> = HashMap::new();
    // Events applied by an earlier copy of this batch, and events the ledger has no row of.
    let mut applied: HashSet<Uuid> = HashSet::new();
    let mut missing: HashSet<Uuid> = HashSet::new();
    let mut pending: Vec<usize> = Vec::with_capacity(wires.len());
    for (i, wire) in wires.iter().enumerate() {
        match EventName::parse(&wire.event_name) {
            Ok(_) => pending.push(i),
            Err(e) => out[i] = Some(Applied::Refused(e.to_string())),
        }
    }
    // One statement per round, each event named once in it. A batch names an event once but
    // in rare cases (a copy redelivered beside its original, or a forged copy beside the
    // real one), and its later copies are answered from the first's row or, when that copy
    // was refused, go in the next round.
    while !pending.is_empty() {
        let mut round: Vec<usize> = Vec::new();
        let mut later: Vec<usize> = Vec::new();
        let mut named: HashSet<Uuid> = HashSet::new();
        for i in pending {
            let wire = &wires[i];
            let id = wire.event_id;
            // A copy of an event already answered: refused if it disagrees with the row, a
            // duplicate if an earlier copy was applied, otherwise sent (its earlier copy was
            // refused).
            let settled = known
                .get(&id)
                .and_then(|(row, ago)| match disagreement(wire, row) {
                    Some(why) => Some(Applied::Refused(why)),
                    None if applied.contains(&id) => {
                        let mut fact = Fact::of(row);
                        fact.recorded_ago = Some(*ago);
                        Some(Applied::Duplicate(fact))
                    }
                    None => None,
                });
            if missing.contains(&id) {
                out[i] = Some(not_in_outbox(conn, wire).await?);
            } else if let Some(answer) = settled {
                out[i] = Some(answer);
            } else if named.insert(id) {
                round.push(i);
            } else {
                later.push(i);
            }
        }
        if !round.is_empty() {
            let asked: Vec<&EventEnvelope> = round.iter().map(|&i| &wires[i]).collect();
            let answers: HashMap<Uuid, outbox::Consumed> =
                outbox::consume(conn, consumer, &asked, &HEARD, flush)
                    .await?
                    .into_iter()
                    .map(|c| (c.row.event_id, c))
                    .collect();
            for i in round {
                let wire = &wires[i];
                let Some(c) = answers.get(&wire.event_id) else {
                    missing.insert(wire.event_id);
                    out[i] = Some(not_in_outbox(conn, wire).await?);
                    continue;
                };
                known.insert(wire.event_id, (c.row.clone(), c.ago));
                out[i] = Some(match &c.outcome {
                    // The ledger's check is the one that decided; its words are Rust's.
                    None => Applied::Refused(disagreement(wire, &c.row).unwrap_or_else(|| {
                        format!(
                            "event {}: the message disagrees with the ledger's outbox row",
                            wire.event_id
                        )
                    })),
                    Some(outcome) => {
                        applied.insert(wire.event_id);
                        let mut a = applied_from(&c.row, outcome, c.requested_generation)?;
                        if let Applied::Demand { fact, .. } | Applied::Duplicate(fact) = &mut a {
                            fact.recorded_ago = Some(c.ago);
                        }
                        a
                    }
                });
            }
        }
        pending = later;
    }
    out.into_iter()
        .map(|a| a.ok_or_else(|| crate::Error::internal("a message of the batch has no result")))
        .collect()
}

/// A message whose event the ledger has no outbox row of: a late copy of an event retention
/// removed ([`Applied::Expired`]), or one it never recorded ([`Applied::Refused`]).
async fn not_in_outbox(conn: &mut AsyncPgConnection, wire: &EventEnvelope) -> Result<Applied> {
    let id = wire.event_id;
    Ok(
        if retention::removed_by_retention(conn, wire.occurred_at).await? {
            Applied::Expired(format!(
                "event {id} is no longer in the outbox: retention removed the events that \
                 occurred by then"
            ))
        } else {
            Applied::Refused(format!("event {id} is not in the ledger's outbox"))
        },
    )
}

/// The trigger for an event read from the ledger itself (the embedded transport, or [`apply`]
/// after its check): [`apply_rows`] of one. Call inside a transaction.
#[cfg(feature = "testing")]
pub async fn apply_row(
    tx: &mut AsyncPgConnection,
    consumer: &str,
    row: &OutboxRow,
) -> Result<Applied> {
    let mut one = apply_rows(tx, consumer, std::slice::from_ref(row)).await?;
    one.pop()
        .ok_or_else(|| crate::Error::internal("a batch of one applied nothing"))
}

/// One row of `ops.apply_events`.
#[cfg(feature = "testing")]
#[derive(QueryableByName)]
struct AppliedEvent {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    event_id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Text)]
    outcome: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    requested_generation: Option<i64>,
}

/// The trigger for events of the ledger's outbox, in one statement (`ops.apply_events`,
/// `src/ledger/live/apply_events.sql`): for each, the inbox row
/// `(consumer, event_id)`, the gates, the demand (all of a batch's demands judged and written
/// together by `ops.demands`). One result per row, in their order. Call
/// inside a transaction (the demands' row locks are held until it commits).
#[cfg(feature = "testing")]
pub async fn apply_rows(
    tx: &mut AsyncPgConnection,
    consumer: &str,
    rows: &[OutboxRow],
) -> Result<Vec<Applied>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = rows.iter().map(|r| r.event_id).collect();
    let applied: HashMap<Uuid, AppliedEvent> = super::sql::apply_events(consumer, &ids, &HEARD)
        .load::<AppliedEvent>(tx)
        .await?
        .into_iter()
        .map(|a| (a.event_id, a))
        .collect();
    rows.iter()
        .map(|row| {
            let a = applied.get(&row.event_id).ok_or_else(|| {
                crate::Error::internal(format!("event {} vanished from the outbox", row.event_id))
            })?;
            applied_from(row, &a.outcome, a.requested_generation)
        })
        .collect()
}

/// One event the embedded transport's batch applied (`ops.drain_outbox`): what the trigger made
/// of it (an outcome of `ops.apply_events`), and the ledger's ids a nudge carries.
#[derive(Debug, Clone, QueryableByName)]
pub struct Drained {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub event_id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub firm_id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub matter_id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub traceparent: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub outcome: String,
    #[cfg(feature = "testing")]
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    pub requested_generation: Option<i64>,
    /// Seconds, by the ledger's clock, from the event's recording to this batch.
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub recorded_ago_s: f64,
    /// The class of the fact's demand (`interactive` or `background`).
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub demand_class: String,
}

/// The embedded transport's batch, in one statement (`ops.drain_outbox`, next to
/// `ops.apply_events`): lock up to `limit` publishable outbox rows, apply them, mark them
/// published. Called alone it is one transaction.
pub async fn drain_outbox(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    limit: i64,
) -> Result<Vec<Drained>> {
    Ok(
        super::sql::drain_outbox(consumer, i32::try_from(limit).unwrap_or(i32::MAX), &HEARD)
            .load(conn)
            .await?,
    )
}

/// What `ops.apply_events` said of `row`, in words an operator reads.
fn applied_from(
    row: &OutboxRow,
    outcome: &str,
    requested_generation: Option<i64>,
) -> Result<Applied> {
    Ok(match (outcome, requested_generation) {
        ("duplicate", _) => Applied::Duplicate(Fact::of(row)),
        ("not_heard", _) => Applied::NotHeard(format!(
            "the brief rail does not hear {:?} (it hears {})",
            row.event_name,
            HEARD.join(", ")
        )),
        ("archived", _) => Applied::Gated(format!("matter {} is archived", row.matter_id)),
        ("unknown_matter", _) => {
            Applied::Gated(format!("matter {} is not in the record", row.matter_id))
        }
        ("unknown_firm", _) => Applied::Gated(format!("firm {} is not known", row.firm_id)),
        ("covered", _) => Applied::Covered,
        ("demand", Some(requested_generation)) => Applied::Demand {
            requested_generation,
            fact: Fact::of(row),
        },
        (other, g) => {
            return Err(crate::Error::internal(format!(
                "ops.apply_events answered {other:?} (generation {g:?}) for event {}",
                row.event_id
            )));
        }
    })
}

/// Whether `consumer` has consumed `event_id` (reconciliation asks this).
#[cfg(feature = "testing")]
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
