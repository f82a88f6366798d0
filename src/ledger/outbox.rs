//! The transactional outbox: a fact and its event row commit together or not at all.
//!
//! [`record_event`] is meant to run inside the caller's own transaction (the one that writes
//! the fact); an embedding application calls it from its transactions the same way
//! [`super::facts`] does. The payload carries IDs only: the bus is a nudge, never a copy of
//! the record.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

#[cfg(feature = "testing")]
use super::clock::ledger_now;
use super::event_name::EventName;
use crate::db::prepared::Prepared;
use crate::error::Result;
use crate::nudge::DemandClass;
use crate::schema::ops;
use crate::trace::Traceparent;

/// An event about to be recorded.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The event's id, chosen here so a consumer can deduplicate redeliveries.
    pub event_id: Uuid,
    /// The firm the matter belongs to.
    pub firm_id: Uuid,
    /// The matter the fact is about.
    pub matter_id: Uuid,
    /// The fact's name (`noun.verb`).
    pub event_name: EventName,
    /// IDs only (e.g. `{"document_id": ...}`), never document content.
    pub payload: serde_json::Value,
    /// The trace context of the span that recorded the fact.
    pub traceparent: Option<Traceparent>,
    /// How urgently the demand this fact makes is served (interactive unless marked).
    pub class: DemandClass,
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
            class: DemandClass::Interactive,
        })
    }

    /// Adds the fact's payload (what a builder or an audit wants to know about it).
    pub fn payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }

    /// Carries the caller's W3C trace context, so the build that serves the fact joins its
    /// trace.
    pub fn traceparent(mut self, tp: Option<Traceparent>) -> Self {
        self.traceparent = tp;
        self
    }

    /// The same event, making a demand of `class` (a bulk import marks its facts
    /// [`DemandClass::Background`], so counsel's uploads are served first).
    pub fn class(mut self, class: DemandClass) -> Self {
        self.class = class;
        self
    }
}

/// Inserts the event row. Call it inside the transaction that writes the fact: the event
/// commits with the application's write or not at all, so no fact goes unserved and no event
/// announces a fact that rolled back. Returns the event id.
///
/// ```no_run
/// use briefrail::{EventName, NewEvent, record_event};
/// use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
///
/// # async fn ask(conn: &mut AsyncPgConnection, firm: uuid::Uuid, matter: uuid::Uuid) -> briefrail::Result<()> {
/// let event = NewEvent::new(firm, matter, EventName::BRIEF_REQUESTED)?;
/// conn.transaction(async move |tx| {
///     tx.batch_execute("INSERT INTO app_audit (what) VALUES ('counsel asked for a Brief')")
///         .await?;
///     record_event(tx, &event).await?;
///     Ok::<_, briefrail::Error>(())
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn record_event(conn: &mut AsyncPgConnection, event: &NewEvent) -> Result<Uuid> {
    use ops::domain_event_outbox::dsl as o;
    let row = (
        o::event_id.eq(event.event_id),
        o::firm_id.eq(event.firm_id),
        o::matter_id.eq(event.matter_id),
        o::event_name.eq(event.event_name.as_str()),
        o::payload.eq(&event.payload),
        o::traceparent.eq(event.traceparent.map(|t| t.to_string())),
    );
    // Interactive is the column's default and is not named: an interactive fact records on a
    // schema that has no class yet (an application upgraded before its database is migrated).
    let insert = diesel::insert_into(o::domain_event_outbox);
    if event.class == DemandClass::Interactive {
        insert.values(row).execute(conn).await?;
    } else {
        insert
            .values((row, o::demand_class.eq(event.class.as_str())))
            .execute(conn)
            .await?;
    }
    Ok(recorded(event))
}

/// Logs that the event was recorded (with the fact that wrote it); its id.
pub(super) fn recorded(event: &NewEvent) -> Uuid {
    tracing::debug!(event_id = %event.event_id, firm_id = %event.firm_id, matter_id = %event.matter_id,
                    event_name = %event.event_name, "outbox event recorded");
    event.event_id
}

/// Binds an event's own columns as the next five parameters of a one-statement fact
/// ([`super::facts`]): its id, name, payload, trace context and class, in that order (the
/// statement names the firm and matter once, for the fact and its event).
pub(super) fn bind_event<'a>(q: Prepared<'a>, event: &'a NewEvent) -> Prepared<'a> {
    use diesel::sql_types::{Jsonb, Nullable, Text, Uuid as SqlUuid};
    q.bind::<SqlUuid, _>(event.event_id)
        .bind::<Text, _>(event.event_name.as_str())
        .bind::<Jsonb, _>(&event.payload)
        .bind::<Nullable<Text>, _>(event.traceparent.map(|t| t.to_string()))
        .bind::<Text, _>(event.class.as_str())
}

/// Inserts many event rows in one statement (a bulk operator action: one round trip however
/// many matters it names). Call it inside the transaction that writes the facts; each event's
/// class is named, so this needs a schema with classes (every migrated one does).
pub async fn record_events(conn: &mut AsyncPgConnection, events: &[NewEvent]) -> Result<()> {
    use ops::domain_event_outbox::dsl as o;
    if events.is_empty() {
        return Ok(());
    }
    let rows: Vec<_> = events
        .iter()
        .map(|e| {
            (
                o::event_id.eq(e.event_id),
                o::firm_id.eq(e.firm_id),
                o::matter_id.eq(e.matter_id),
                o::event_name.eq(e.event_name.as_str()),
                o::payload.eq(&e.payload),
                o::traceparent.eq(e.traceparent.map(|t| t.to_string())),
                o::demand_class.eq(e.class.as_str()),
            )
        })
        .collect();
    diesel::insert_into(o::domain_event_outbox)
        .values(rows)
        .execute(conn)
        .await?;
    tracing::debug!(events = events.len(), "outbox events recorded");
    Ok(())
}

/// The next unpublished events in sequence order, locked so that concurrent relays on other
/// nodes skip them (`FOR UPDATE SKIP LOCKED`) instead of publishing them twice. Call inside a
/// transaction; the locks last until it ends. Rows in backoff (`next_attempt_at` in the
/// future, ledger clock `ops.now()`) are left for later.
///
/// Reading "everything after the last sequence I saw" would lose an event whose transaction
/// took an earlier sequence value but committed later; selecting by `published_at IS NULL`
/// cannot.
#[cfg(feature = "testing")]
pub async fn lock_unpublished(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> Result<Vec<super::models::OutboxRow>> {
    use ops::domain_event_outbox::dsl as o;
    Ok(o::domain_event_outbox
        .filter(o::published_at.is_null())
        .filter(
            o::next_attempt_at
                .is_null()
                .or(o::next_attempt_at.le(ledger_now().nullable())),
        )
        .order(o::seq)
        .limit(limit)
        .for_update()
        .skip_locked()
        .select(super::models::OutboxRow::as_select())
        .load(conn)
        .await?)
}

/// Marks events published (the broker confirmed them, or the embedded transport applied them):
/// `ops.mark_published`, each row by its key. Returns how many it marked.
pub async fn mark_published(conn: &mut AsyncPgConnection, event_ids: &[Uuid]) -> Result<usize> {
    let m = super::sql::mark_published(event_ids)
        .get_result::<super::sql::Number>(conn)
        .await?;
    Ok(m.number
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or_default())
}

/// Records a failed publish: the error is kept on the row, and the row waits out an
/// exponential backoff (ledger clock, `ops.now()`) before the relay tries it again.
pub async fn mark_failed(
    conn: &mut AsyncPgConnection,
    event_ids: &[Uuid],
    error: &str,
) -> Result<usize> {
    use ops::domain_event_outbox::dsl as o;
    let backoff = diesel::dsl::sql::<diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>>(
        "ops.now() + make_interval(secs => least(60, 0.2 * power(2, least(publish_attempts, 10))))",
    );
    Ok(
        diesel::update(o::domain_event_outbox.filter(o::event_id.eq_any(event_ids)))
            .set((
                o::publish_attempts.eq(o::publish_attempts + 1),
                // A broker's reply may quote raw bytes: stored escaped (see `text`).
                o::last_error.eq(super::text::storable(error)),
                o::next_attempt_at.eq(backoff),
            ))
            .execute(conn)
            .await?,
    )
}

/// Takes up to `limit` publishable events for this relay: `ops.lease_events` locks them
/// (`SKIP LOCKED`, so concurrent relays on other nodes take other rows) and sets a short
/// publishing lease in `next_attempt_at`, so no transaction is held while the broker confirms.
/// If this relay dies before marking them, the lease runs out and another relay publishes them
/// again: a duplicate the consumer's inbox absorbs. Returned in sequence order.
pub async fn lease_unpublished(
    conn: &mut AsyncPgConnection,
    limit: i64,
    lease: std::time::Duration,
) -> Result<Vec<super::models::OutboxRow>> {
    let mut rows: Vec<LeasedRow> = super::sql::lease_events(limit, lease.as_secs_f64())
        .load(conn)
        .await?;
    rows.sort_by_key(|r| r.seq);
    Ok(rows.into_iter().map(LeasedRow::into_row).collect())
}

/// Gives leased rows back: their publishing lease is cleared, so any relay may take them at
/// once (they were leased, so any backoff of theirs had passed). Only rows still unpublished
/// are touched.
pub async fn release_lease(conn: &mut AsyncPgConnection, event_ids: &[Uuid]) -> Result<usize> {
    use ops::domain_event_outbox::dsl as o;
    Ok(diesel::update(
        o::domain_event_outbox
            .filter(o::event_id.eq_any(event_ids))
            .filter(o::published_at.is_null()),
    )
    .set(o::next_attempt_at.eq(None::<chrono::DateTime<chrono::Utc>>))
    .execute(conn)
    .await?)
}

/// An outbox row as a statement hands it back by name (not by the table's column order).
#[derive(diesel::QueryableByName)]
#[diesel(table_name = ops::domain_event_outbox, check_for_backend(diesel::pg::Pg))]
struct LeasedRow {
    event_id: Uuid,
    seq: i64,
    firm_id: Uuid,
    matter_id: Uuid,
    event_name: String,
    payload: serde_json::Value,
    traceparent: Option<String>,
    created_at: chrono::DateTime<chrono::Utc>,
    published_at: Option<chrono::DateTime<chrono::Utc>>,
    publish_attempts: i32,
    last_error: Option<String>,
    next_attempt_at: Option<chrono::DateTime<chrono::Utc>>,
    xact_id: i64,
    republish_count: i32,
    demand_class: String,
}

impl LeasedRow {
    fn into_row(self) -> super::models::OutboxRow {
        super::models::OutboxRow {
            event_id: self.event_id,
            seq: self.seq,
            firm_id: self.firm_id,
            matter_id: self.matter_id,
            event_name: self.event_name,
            payload: self.payload,
            traceparent: self.traceparent,
            created_at: self.created_at,
            published_at: self.published_at,
            publish_attempts: self.publish_attempts,
            last_error: self.last_error,
            next_attempt_at: self.next_attempt_at,
            xact_id: self.xact_id,
            republish_count: self.republish_count,
            demand_class: self.demand_class,
        }
    }
}

/// How far back reconciliation looks for published events the trigger never consumed, and
/// `briefrail_facts_owed` with it (the `published_at` index bounds both scans).
pub const RECONCILE_WINDOW: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// After this many republications an unconsumed event is left alone and reported as stranded
/// (`briefrail_events_stranded`, the status page, an error log line) until an operator
/// republishes it (`briefrail outbox republish-stranded`, [`republish_stranded`]).
pub const REPUBLISH_CAP: i32 = 16;

/// How reconcile republishes events the trigger has not consumed.
#[derive(Debug, Clone, Copy)]
pub struct Republish {
    /// The first republication waits this long after the publication; each next one waits
    /// twice as long as the one before (capped, see [`Republish::longest_wait`]), so a merely
    /// slow consumer is not flooded with copies.
    pub after: std::time::Duration,
    /// Only events published within this window are looked at (it bounds the scan).
    pub window: std::time::Duration,
    /// After this many republications an event is left alone and reported: something
    /// downstream is broken, and more copies will not fix it.
    pub cap: i32,
}

impl Republish {
    /// The longest wait between two republications: short enough that all `cap` of them fit
    /// in the window, so an unconsumed event always reaches the cap (and the alert) while
    /// reconcile runs, instead of ageing out of the window unreported.
    pub fn longest_wait(&self) -> std::time::Duration {
        self.window / (self.cap.max(1) as u32 + 1)
    }
}

/// An event reconcile made publishable again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, diesel::QueryableByName)]
pub struct Requeued {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub event_id: Uuid,
    /// Its republications so far, this one included; equal to the cap: the last one.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub republish_count: i32,
}

/// Reconciliation: events published long enough ago (see [`Republish`]) that `consumer` has
/// not consumed are made publishable again, so a message the broker dropped, a purged queue or
/// a crashed consumer cannot strand a demand. Failed publishes (`publish_attempts`) do not
/// count here: an event that was unroutable for a while is republished like any other when it
/// is later lost. Returns the events requeued.
pub async fn requeue_unconsumed(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    policy: &Republish,
    limit: i64,
) -> Result<Vec<Requeued>> {
    Ok(diesel::sql_query(
        "UPDATE ops.domain_event_outbox o
            SET published_at = NULL, next_attempt_at = NULL, republish_count = o.republish_count + 1,
                last_error = 'republished: not consumed in time (reconcile)'
          WHERE o.event_id IN (
                SELECT e.event_id FROM ops.domain_event_outbox e
                 WHERE e.published_at < ops.now() - make_interval(secs => least($2, $6))
                   AND e.published_at < ops.now() - make_interval(secs =>
                           least($2 * power(2, least(e.republish_count, 10)), $6))
                   AND e.published_at > ops.now() - make_interval(secs => $3)
                   AND e.republish_count < $4
                   AND NOT EXISTS (SELECT 1 FROM ops.consumed_events c
                                    WHERE c.consumer = $1 AND c.event_id = e.event_id)
                 ORDER BY e.seq LIMIT $5
                   FOR UPDATE SKIP LOCKED)
          RETURNING o.event_id, o.republish_count",
    )
    .bind::<diesel::sql_types::Text, _>(consumer)
    .bind::<diesel::sql_types::Double, _>(policy.after.as_secs_f64())
    .bind::<diesel::sql_types::Double, _>(policy.window.as_secs_f64())
    .bind::<diesel::sql_types::Integer, _>(policy.cap)
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .bind::<diesel::sql_types::Double, _>(policy.longest_wait().as_secs_f64())
    .load(conn)
    .await?)
}

/// Makes every stranded event (republished `cap` times, still not consumed by `consumer`)
/// publishable again with its republications counted from zero: what an operator runs once
/// the consumer is fixed, so the facts reach the Brief and the alert clears. Returns how many.
pub async fn republish_stranded(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    cap: i32,
) -> Result<usize> {
    Ok(diesel::sql_query(
        "UPDATE ops.domain_event_outbox e
            SET published_at = NULL, next_attempt_at = NULL, republish_count = 0,
                last_error = 'republished by an operator after it was stranded'
          WHERE e.republish_count >= $2 AND e.published_at IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM ops.consumed_events c
                             WHERE c.consumer = $1 AND c.event_id = e.event_id)",
    )
    .bind::<diesel::sql_types::Text, _>(consumer)
    .bind::<diesel::sql_types::Integer, _>(cap)
    .execute(conn)
    .await?)
}

/// The outbox rows of `event_ids` the ledger recorded (any order; an id it did not record has
/// no row), read `FOR KEY SHARE` like [`event`]: what a batch of nudges is checked against.
#[cfg(feature = "testing")]
pub async fn events(
    conn: &mut AsyncPgConnection,
    event_ids: &[Uuid],
) -> Result<Vec<super::models::OutboxRow>> {
    Ok(events_aged(conn, event_ids)
        .await?
        .into_iter()
        .map(|(row, _)| row)
        .collect())
}

/// [`events`], each with how long ago the ledger recorded it: `ops.events_aged`, `ops.now()`
/// less its `created_at`, both the ledger clock, in the same statement (never a process clock).
/// Each row is locked `FOR KEY SHARE` until the caller's transaction ends.
#[cfg(feature = "testing")]
pub async fn events_aged(
    conn: &mut AsyncPgConnection,
    event_ids: &[Uuid],
) -> Result<Vec<(super::models::OutboxRow, std::time::Duration)>> {
    let rows: Vec<AgedRow> = super::sql::events_aged(event_ids).load(conn).await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.event.into_row(), seconds_ago(r.ago_s)))
        .collect())
}

/// An event as the broker consumer's statement answered it (`ops.consume_events`): the
/// ledger's row, how long ago the ledger recorded it, and the trigger's outcome (none: the
/// message disagreed with the row, and nothing was applied).
pub(super) struct Consumed {
    pub row: super::models::OutboxRow,
    pub ago: std::time::Duration,
    pub outcome: Option<String>,
    pub requested_generation: Option<i64>,
}

/// The broker consumer's batch in one statement, on its own or inside the caller's transaction
/// (see `ops.consume_events`): every row is read `FOR KEY SHARE` like [`event`], each message is
/// checked against its row by every field it carries, and the confirmed ones are applied. One
/// answer per event the ledger recorded; an event it did not record has none. `wires` names
/// each event once.
pub(super) async fn consume(
    conn: &mut AsyncPgConnection,
    consumer: &str,
    wires: &[&super::inbox::EventEnvelope],
    heard: &[&str],
    flush: bool,
) -> Result<Vec<Consumed>> {
    let ids: Vec<Uuid> = wires.iter().map(|w| w.event_id).collect();
    let names: Vec<&str> = wires.iter().map(|w| w.event_name.as_str()).collect();
    let firms: Vec<Uuid> = wires.iter().map(|w| w.firm_id).collect();
    let matters: Vec<Uuid> = wires.iter().map(|w| w.matter_id).collect();
    // Compared to the microsecond, as the ledger keeps it: a finer time on the wire is cut, not
    // rounded, exactly as the message's check in Rust cuts it.
    let occurred: Vec<chrono::DateTime<chrono::Utc>> = wires
        .iter()
        .map(|w| {
            chrono::DateTime::from_timestamp_micros(w.occurred_at.timestamp_micros())
                .unwrap_or(w.occurred_at)
        })
        .collect();
    let xacts: Vec<Option<i64>> = wires.iter().map(|w| w.xact_id).collect();
    let traces: Vec<Option<&str>> = wires.iter().map(|w| w.traceparent.as_deref()).collect();
    let rows: Vec<ConsumedRow> = super::sql::consume_events(
        consumer, &ids, &names, &firms, &matters, &occurred, &xacts, &traces, heard, flush,
    )
    .load(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Consumed {
            row: r.event.into_row(),
            ago: seconds_ago(r.ago_s),
            outcome: r.outcome,
            requested_generation: r.requested_generation,
        })
        .collect())
}

/// A row of `ops.consume_events`.
#[derive(diesel::QueryableByName)]
struct ConsumedRow {
    #[diesel(embed)]
    event: LeasedRow,
    #[diesel(sql_type = diesel::sql_types::Double)]
    ago_s: f64,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    outcome: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    requested_generation: Option<i64>,
}

/// A row of `ops.events_aged`.
#[cfg(feature = "testing")]
#[derive(diesel::QueryableByName)]
struct AgedRow {
    #[diesel(embed)]
    event: LeasedRow,
    #[diesel(sql_type = diesel::sql_types::Double)]
    ago_s: f64,
}

/// A span of the ledger's clock in seconds as a duration: one recorded "in the future" (a
/// clock moved back) counts as just now.
pub fn seconds_ago(s: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(std::time::Duration::MAX)
}

/// The outbox row of `event_id`, if the ledger recorded it: what a nudge is checked against.
/// Read `FOR KEY SHARE`: retention cannot remove the row (and its inbox rows) while the
/// trigger's transaction uses it, and a row retention is removing is waited for and then
/// missing, so a late duplicate never finds the event without its inbox row. The relay's
/// updates (no key change) do not conflict with it.
#[cfg(feature = "testing")]
pub async fn event(
    conn: &mut AsyncPgConnection,
    event_id: Uuid,
) -> Result<Option<super::models::OutboxRow>> {
    use ops::domain_event_outbox::dsl as o;
    Ok(o::domain_event_outbox
        .filter(o::event_id.eq(event_id))
        .select(super::models::OutboxRow::as_select())
        .for_key_share()
        .first(conn)
        .await
        .optional()?)
}
