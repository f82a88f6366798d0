//! What a build is told: which matter, which token, and the record it is built from.

use serde::Serialize;
use uuid::Uuid;

use crate::db::Pool;
use crate::error::Result;
use crate::ledger::models::{DocumentRow, MatterRow};

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
    /// Reads the matter and its documents (in chronological order), in one statement: a build
    /// holds its builder slot through every round trip it makes.
    pub async fn record(&self) -> Result<(Option<MatterRow>, Vec<DocumentRow>)> {
        use diesel::prelude::*;
        use diesel_async::RunQueryDsl;

        use crate::schema::record::documents::dsl as d;
        use crate::schema::record::matters::dsl as m;
        let mut conn = self.pool.get().await?;
        let rows: Vec<(MatterRow, Option<DocumentRow>)> = m::matters
            .left_join(
                d::documents.on(d::firm_id.eq(m::firm_id).and(d::matter_id.eq(m::matter_id))),
            )
            .filter(
                m::firm_id
                    .eq(self.firm_id)
                    .and(m::matter_id.eq(self.matter_id)),
            )
            .order((
                d::dated.asc().nulls_last(),
                d::uploaded_at.asc(),
                d::document_id.asc(),
            ))
            .select((MatterRow::as_select(), Option::<DocumentRow>::as_select()))
            .load(&mut conn)
            .await?;
        let matter = <[_]>::first(&rows).map(|(m, _)| m.clone());
        let documents = rows.into_iter().filter_map(|(_, d)| d).collect();
        Ok((matter, documents))
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
