//! What a build is told: which matter, which token, and the record it is built from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use crate::db::Pool;
use crate::db::batch::Batcher;
use crate::error::Result;
use crate::ledger::models::{DocumentRow, MatterRow};
use crate::schema::record::documents::dsl as d;
use crate::schema::record::matters::dsl as m;

/// A matter's record: the matter (`None` when it is not in the record) and its documents in
/// chronological order.
pub type Record = (Option<MatterRow>, Vec<DocumentRow>);

/// The context of one build. `pool` lets an embedding builder read its own tables; it must
/// not write outside the fenced commit ([`crate::ledger::Frame::with_extra`]).
#[derive(Clone)]
pub struct BuildContext {
    /// The firm the matter belongs to.
    pub firm_id: Uuid,
    /// The matter being built.
    pub matter_id: Uuid,
    /// The fencing token this build carries.
    pub token: i64,
    /// The run that records this attempt (its outcome, its timings).
    pub run_id: Uuid,
    /// The W3C trace id of the fact that asked for this build, if it carried one: a builder
    /// that calls out can pass it on.
    pub trace_id: Option<String>,
    /// Events (uploads, requests) this build serves, when known.
    pub event_ids: Vec<Uuid>,
    /// The node's pool, for the builder's own reads (the record through [`BuildContext::record`]).
    pub pool: Pool,
    /// The record, read for this build before it took its slot (see [`RecordQueue`]): the first
    /// [`BuildContext::record`] takes it instead of reading.
    prefetched: Arc<Mutex<Option<Record>>>,
}

impl std::fmt::Debug for BuildContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildContext")
            .field("firm_id", &self.firm_id)
            .field("matter_id", &self.matter_id)
            .field("token", &self.token)
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

/// The context as JSON for external builders (`command` stdin, `http` body).
#[derive(Debug, Serialize)]
pub struct ContextDocument<'a> {
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub token: i64,
    pub run_id: Uuid,
    pub trace_id: Option<&'a str>,
    pub event_ids: &'a [Uuid],
    pub matter: Option<MatterRow>,
    pub documents: Vec<DocumentRow>,
}

impl BuildContext {
    /// The context of a build of `matter_id` with `token`, its attempt recorded as `run_id`;
    /// no trace, no events (set the fields).
    pub fn new(firm_id: Uuid, matter_id: Uuid, token: i64, run_id: Uuid, pool: Pool) -> Self {
        Self {
            firm_id,
            matter_id,
            token,
            run_id,
            trace_id: None,
            event_ids: Vec::new(),
            pool,
            prefetched: Arc::default(),
        }
    }

    /// Hands the build a record already read (after its claim committed, so it holds every fact
    /// the claim covers): its first [`BuildContext::record`] returns it without a round trip.
    pub(crate) fn hand_record(&self, record: Record) {
        if let Ok(mut slot) = self.prefetched.lock() {
            *slot = Some(record);
        }
    }

    /// Reads the matter and its documents (in chronological order), in one statement: a build
    /// holds its builder slot through every round trip it makes. A node reads the records of
    /// the builds it claimed together in one statement, before each takes its slot, and the
    /// first call returns that; a later call reads the record again.
    pub async fn record(&self) -> Result<Record> {
        if let Some(record) = self.prefetched.lock().ok().and_then(|mut r| r.take()) {
            return Ok(record);
        }
        let mut conn = self.pool.get().await?;
        let mut one = records(&mut conn, &[(self.firm_id, self.matter_id)]).await?;
        Ok(one.pop().unwrap_or_default())
    }

    /// The JSON external builders receive.
    pub async fn to_json(&self) -> Result<serde_json::Value> {
        let (matter, documents) = self.record().await?;
        let doc = ContextDocument {
            firm_id: self.firm_id,
            matter_id: self.matter_id,
            token: self.token,
            run_id: self.run_id,
            trace_id: self.trace_id.as_deref(),
            event_ids: &self.event_ids,
            matter,
            documents,
        };
        serde_json::to_value(doc)
            .map_err(|e| crate::Error::internal_from("serialising the build context", e))
    }
}

/// About how much memory a record takes: its text, with a little for each row.
pub fn record_bytes(record: &Record) -> usize {
    const ROW: usize = 128;
    let matter = record.0.as_ref().map_or(0, |m| m.title.len() + ROW);
    record.1.iter().fold(matter, |n, d| {
        n.saturating_add(d.body.len() + d.title.len() + ROW)
    })
}

/// The records of the builds a node starts, read together: requests that arrive while a read is
/// on the wire share the next ([`crate::db::batch`]). A build asks as soon as its claim is won,
/// before it waits for a slot, so its slot is not held through the round trip. A member left
/// unanswered (a failed read) reads its record itself when it builds.
pub type RecordQueue = Batcher<(Uuid, Uuid), Option<Record>>;

/// Starts a [`RecordQueue`] on the current thread: `lanes` reads in flight, at most `max`
/// matters each.
pub fn records_in_batches(pool: Pool, lanes: usize, max: usize) -> RecordQueue {
    Batcher::start(lanes, max, move |keys: Vec<(Uuid, Uuid)>| {
        let pool = pool.clone();
        async move {
            let read = async {
                let mut conn = pool.get().await?;
                records(&mut conn, &keys).await
            };
            match read.await {
                Ok(records) => records.into_iter().map(Some).collect(),
                Err(e) => {
                    tracing::debug!(matters = keys.len(), error = %e, "a batched record read failed; each build reads its own");
                    keys.iter().map(|_| None).collect()
                }
            }
        }
    })
}

/// The records of `keys` (firm, matter), in one statement, answered in the order of `keys`.
pub async fn records(conn: &mut AsyncPgConnection, keys: &[(Uuid, Uuid)]) -> Result<Vec<Record>> {
    let mut firms: Vec<Uuid> = keys.iter().map(|k| k.0).collect();
    firms.sort_unstable();
    firms.dedup();
    let matters: Vec<Uuid> = keys.iter().map(|k| k.1).collect();
    // Every pair of a firm and a matter asked for is probed by the primary key; a pair that
    // was not asked (a matter id that another firm asked for) is read and dropped below.
    let rows: Vec<(MatterRow, Option<DocumentRow>)> = m::matters
        .left_join(d::documents.on(d::firm_id.eq(m::firm_id).and(d::matter_id.eq(m::matter_id))))
        .filter(m::firm_id.eq_any(&firms))
        .filter(m::matter_id.eq_any(&matters))
        .order((
            m::firm_id,
            m::matter_id,
            d::dated.asc().nulls_last(),
            d::uploaded_at.asc(),
            d::document_id.asc(),
        ))
        .select((MatterRow::as_select(), Option::<DocumentRow>::as_select()))
        .load(conn)
        .await?;
    let mut found: HashMap<(Uuid, Uuid), Record> = HashMap::new();
    for (matter, document) in rows {
        let entry = found
            .entry((matter.firm_id, matter.matter_id))
            .or_insert_with(|| (Some(matter), Vec::new()));
        entry.1.extend(document);
    }
    // A matter asked for twice (it never is, but nothing forbids it) gets a copy each time.
    Ok(keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let again = keys[i + 1..].contains(k);
            let record = if again {
                found.get(k).cloned()
            } else {
                found.remove(k)
            };
            record.unwrap_or_default()
        })
        .collect())
}
