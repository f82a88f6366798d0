//! Messages the trigger refused, kept in the ledger (`ops.dead_letters`) so
//! an operator can see why, replay and discard them from the console or the CLI.
//!
//! A refusal changes no job row; the row here is its only trace in the ledger. The broker's
//! dead-letter queue keeps a copy of the bytes for broker tooling, but what briefrail lists and
//! replays is this table: replaying applies the stored message through the inbox again
//! ([`inbox::apply_batch`]), so it is believed exactly as much as a delivery is (nothing but
//! its event id, checked against the outbox row). A message refused again stays open with the
//! new reason.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use diesel::sql_types::{Bool, Bytea, Integer, Nullable, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::inbox::{self, Applied, EventEnvelope};
use super::text;
use crate::error::{Error, Result};

#[cfg(any(feature = "cli", feature = "http", feature = "testing"))]
pub mod bulk;

/// The most of a refused message's body the ledger keeps (a nudge is ~250 bytes).
pub const MAX_KEPT_BODY: usize = 64 * 1024;

/// A refused message as the consumer saw it.
#[derive(Debug, Clone)]
pub struct Refusal<'a> {
    pub consumer: &'a str,
    /// The event id the message named, when it could be read.
    pub event_id: Option<Uuid>,
    pub routing_key: &'a str,
    pub body: &'a [u8],
    pub traceparent: Option<&'a str>,
    pub reason: &'a str,
    pub node_id: &'a str,
}

/// **record** a refusal. Returns the dead letter's id.
///
/// Everything here came off the wire, so every text is made [storable](text::storable) (a NUL
/// would make Postgres refuse the row, and the refusal would be lost with it); the routing
/// key's raw bytes are kept beside it when the escape changed it, the body's always.
pub async fn record(conn: &mut AsyncPgConnection, r: &Refusal<'_>) -> Result<Uuid> {
    let id = Uuid::new_v4();
    let kept = &r.body[..r.body.len().min(MAX_KEPT_BODY)];
    let routing_key = text::storable(r.routing_key);
    let raw_key = matches!(routing_key, Cow::Owned(_)).then_some(r.routing_key.as_bytes());
    diesel::sql_query(
        "INSERT INTO ops.dead_letters (dead_letter_id, consumer, event_id, routing_key,
                                       routing_key_bytes, body, body_truncated, traceparent,
                                       reason, node_id, refused_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, ops.now())",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Text, _>(text::storable(r.consumer))
    .bind::<Nullable<SqlUuid>, _>(r.event_id)
    .bind::<Text, _>(&routing_key)
    .bind::<Nullable<Bytea>, _>(raw_key)
    .bind::<Bytea, _>(kept)
    .bind::<Bool, _>(kept.len() < r.body.len())
    .bind::<Nullable<Text>, _>(r.traceparent.map(text::storable))
    .bind::<Text, _>(text::storable_within(r.reason, MAX_REASON))
    .bind::<Text, _>(text::storable(r.node_id))
    .execute(conn)
    .await?;
    Ok(id)
}

/// The most of a refusal's reason the ledger keeps.
const MAX_REASON: usize = 4000;

/// A dead letter as the console lists it.
#[derive(Debug, Clone, Serialize, diesel::QueryableByName)]
pub struct DeadLetter {
    #[diesel(sql_type = SqlUuid)]
    pub dead_letter_id: Uuid,
    #[diesel(sql_type = Text)]
    pub consumer: String,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    pub event_id: Option<Uuid>,
    /// The routing key as text (a NUL shown `\u{0}`, control characters as `\u{..}`).
    #[diesel(sql_type = Text)]
    pub routing_key: String,
    /// The routing key's raw bytes in hex, when the text had to be escaped to be stored.
    #[diesel(sql_type = Nullable<Text>)]
    pub routing_key_hex: Option<String>,
    /// The body as text for a person (bytes above 0x7f and NULs as `\nnn`, control
    /// characters as `\u{..}`).
    #[diesel(sql_type = Text)]
    pub body_text: String,
    #[diesel(sql_type = Bool)]
    pub body_truncated: bool,
    #[diesel(sql_type = Text)]
    pub reason: String,
    #[diesel(sql_type = Text)]
    pub node_id: String,
    #[diesel(sql_type = Timestamptz)]
    pub refused_at: DateTime<Utc>,
    #[diesel(sql_type = Integer)]
    pub replays: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub resolved_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    pub resolution: Option<String>,
}

const COLUMNS: &str = "dead_letter_id, consumer, event_id, routing_key,
    encode(routing_key_bytes, 'hex') AS routing_key_hex,
    encode(body, 'escape') AS body_text, body_truncated, reason, node_id, refused_at,
    replays, resolved_at, resolution";

/// Which dead letters a page lists (or a bulk discard resolves).
#[derive(Debug, Clone, Default)]
pub struct DeadFilter {
    /// A case-insensitive substring of the reason.
    pub reason: Option<String>,
    /// A case-insensitive substring of the routing key.
    pub routing_key: Option<String>,
    /// Resolved ones too (a listing only: a discard resolves open ones).
    pub resolved_too: bool,
}

impl DeadFilter {
    /// Refuses a filter text over 200 characters or with a NUL, naming it.
    pub fn checked(&self) -> Result<()> {
        for (what, t) in [("reason", &self.reason), ("routing_key", &self.routing_key)] {
            if let Some(t) = t {
                if t.chars().count() > 200 {
                    return Err(Error::InvalidInput(format!(
                        "the {what} filter is at most 200 characters"
                    )));
                }
                text::refuse_nul(what, t)?;
            }
        }
        Ok(())
    }

    fn pattern(t: &Option<String>) -> Option<String> {
        t.as_deref()
            .filter(|t| !t.trim().is_empty())
            .map(super::matters::like_pattern)
    }
}

/// The rows a [`DeadFilter`] selects; binds `$1` (resolved too), `$2` (reason pattern), `$3`
/// (routing key pattern).
const FILTERED: &str = "FROM ops.dead_letters
      WHERE ($1 OR resolved_at IS NULL)
        AND ($2::text IS NULL OR lower(reason) LIKE lower($2))
        AND ($3::text IS NULL OR lower(routing_key) LIKE lower($3))";

macro_rules! bind_filter {
    ($query:expr, $f:expr) => {
        $query
            .bind::<Bool, _>($f.resolved_too)
            .bind::<Nullable<Text>, _>(DeadFilter::pattern(&$f.reason))
            .bind::<Nullable<Text>, _>(DeadFilter::pattern(&$f.routing_key))
    };
}

/// Dead letters, newest first: the open ones, or every one with `resolved_too`.
pub async fn list(
    conn: &mut AsyncPgConnection,
    resolved_too: bool,
    limit: i64,
) -> Result<Vec<DeadLetter>> {
    let f = DeadFilter {
        resolved_too,
        ..Default::default()
    };
    page(conn, &f, limit, 0).await
}

/// A page of the dead letters `f` selects, newest first.
pub async fn page(
    conn: &mut AsyncPgConnection,
    f: &DeadFilter,
    limit: i64,
    offset: i64,
) -> Result<Vec<DeadLetter>> {
    f.checked()?;
    let mut rows: Vec<DeadLetter> = bind_filter!(
        diesel::sql_query(format!(
            "SELECT {COLUMNS} {FILTERED}
              ORDER BY refused_at DESC, dead_letter_id LIMIT $4 OFFSET $5"
        )),
        f
    )
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .bind::<diesel::sql_types::BigInt, _>(offset.max(0))
    .load(conn)
    .await?;
    for r in &mut rows {
        r.body_text = printable(&r.body_text);
        r.reason = printable(&r.reason);
        r.routing_key = printable(&r.routing_key);
    }
    Ok(rows)
}

/// How many dead letters `f` selects: the total a page shows.
pub async fn count(conn: &mut AsyncPgConnection, f: &DeadFilter) -> Result<i64> {
    f.checked()?;
    let n: N = bind_filter!(
        diesel::sql_query(format!("SELECT count(*) AS n {FILTERED}")),
        f
    )
    .get_result(conn)
    .await?;
    Ok(n.n)
}

#[derive(diesel::QueryableByName)]
struct N {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// Control characters shown as `\u{..}`, so a hostile body cannot play with a terminal.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                format!("\\u{{{:x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// What a replay did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Replayed {
    /// The inbox accepted it now (a demand was recorded, or it was a duplicate, covered,
    /// gated...): the dead letter is resolved; `what` says how it was applied.
    Applied { what: String },
    /// Refused again: still open, with this reason.
    RefusedAgain { reason: String },
}

/// **replay**: apply the stored message through the inbox again, in one transaction with the
/// dead letter's update (locked, so two operators replaying at once apply it once).
pub async fn replay(conn: &mut AsyncPgConnection, id: Uuid) -> Result<Replayed> {
    conn.transaction(async move |tx| {
        #[derive(diesel::QueryableByName)]
        struct Stored {
            #[diesel(sql_type = Text)]
            consumer: String,
            #[diesel(sql_type = Bytea)]
            body: Vec<u8>,
            #[diesel(sql_type = Nullable<Text>)]
            traceparent: Option<String>,
            #[diesel(sql_type = Nullable<Timestamptz>)]
            resolved_at: Option<DateTime<Utc>>,
        }
        let stored: Option<Stored> = diesel::sql_query(
            "SELECT consumer, body, traceparent, resolved_at FROM ops.dead_letters
              WHERE dead_letter_id = $1 FOR UPDATE",
        )
        .bind::<SqlUuid, _>(id)
        .get_result(tx)
        .await
        .map(Some)
        .or_else(|e| match e {
            diesel::result::Error::NotFound => Ok(None),
            e => Err(e),
        })?;
        let stored = stored.ok_or_else(|| Error::NotFound(format!("dead letter {id}")))?;
        if stored.resolved_at.is_some() {
            return Err(Error::Conflict(format!(
                "dead letter {id} is already resolved"
            )));
        }
        let outcome = match parse(&stored.body, stored.traceparent) {
            Err(reason) => Applied::Refused(reason),
            Ok(envelope) => inbox::apply_batch(tx, &stored.consumer, &[envelope])
                .await?
                .pop()
                .ok_or_else(|| Error::internal("a replay of one applied nothing"))?,
        };
        let result = match outcome {
            Applied::Refused(reason) => Replayed::RefusedAgain { reason },
            other => Replayed::Applied {
                what: describe(&other),
            },
        };
        let (resolve, reason) = match &result {
            Replayed::Applied { .. } => (true, None),
            Replayed::RefusedAgain { reason } => (false, Some(reason.as_str())),
        };
        diesel::sql_query(
            "UPDATE ops.dead_letters
                SET replays = replays + 1,
                    reason = coalesce($2, reason),
                    resolved_at = CASE WHEN $3 THEN ops.now() END,
                    resolution = CASE WHEN $3 THEN 'replayed' END
              WHERE dead_letter_id = $1",
        )
        .bind::<SqlUuid, _>(id)
        .bind::<Nullable<Text>, _>(reason.map(|r| text::storable_within(r, MAX_REASON)))
        .bind::<Bool, _>(resolve)
        .execute(tx)
        .await?;
        Ok(result)
    })
    .await
}

/// **discard**: resolve a dead letter without applying it (kept, marked, for the record).
pub async fn discard(conn: &mut AsyncPgConnection, id: Uuid) -> Result<()> {
    let n = diesel::sql_query(
        "UPDATE ops.dead_letters SET resolved_at = ops.now(), resolution = 'discarded'
          WHERE dead_letter_id = $1 AND resolved_at IS NULL",
    )
    .bind::<SqlUuid, _>(id)
    .execute(conn)
    .await?;
    if n == 1 {
        return Ok(());
    }
    let known = list_one(conn, id).await?;
    Err(match known {
        None => Error::NotFound(format!("dead letter {id}")),
        Some(_) => Error::Conflict(format!("dead letter {id} is already resolved")),
    })
}

async fn list_one(conn: &mut AsyncPgConnection, id: Uuid) -> Result<Option<DeadLetter>> {
    let rows: Vec<DeadLetter> = diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM ops.dead_letters WHERE dead_letter_id = $1"
    ))
    .bind::<SqlUuid, _>(id)
    .load(conn)
    .await?;
    Ok(rows.into_iter().next())
}

/// The stored body as a nudge (the wire format of `transport::amqp::message`: the envelope's
/// fields as JSON, the traceparent beside it).
fn parse(body: &[u8], traceparent: Option<String>) -> std::result::Result<EventEnvelope, String> {
    let mut e: EventEnvelope =
        serde_json::from_slice(body).map_err(|e| format!("not a nudge: {e}"))?;
    e.traceparent = traceparent.filter(|t| crate::trace::Traceparent::parse(t).is_some());
    Ok(e)
}

fn describe(a: &Applied) -> String {
    match a {
        Applied::Demand {
            requested_generation,
            ..
        } => format!("demand recorded (requested generation {requested_generation})"),
        Applied::Duplicate(_) => "already consumed: no second effect".into(),
        Applied::Gated(why) => format!("consumed, gated: {why}"),
        Applied::Covered => "consumed: a build already reads this fact".into(),
        Applied::NotHeard(name) => format!("consumed: the rail does not hear {name}"),
        Applied::Expired(why) => format!("expired: {why}"),
        Applied::Refused(why) => format!("refused: {why}"),
    }
}
