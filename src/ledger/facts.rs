//! Recording facts about the record: each function writes the fact and its outbox event in one
//! transaction, so the bus can never hear of a fact that did not commit, and no committed fact
//! goes unannounced.

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::event_name::EventName;
use super::models::MatterRow;
use super::outbox::{NewEvent, record_event};
use crate::error::{Error, Result};
use crate::nudge::DemandClass;
use crate::schema::record;

/// A document as uploaded.
#[derive(Debug, Clone)]
pub struct NewDocument {
    /// The document's id, chosen by the caller so a retry cannot add it twice.
    pub document_id: Uuid,
    /// The firm the matter belongs to.
    pub firm_id: Uuid,
    /// The matter the document belongs to.
    pub matter_id: Uuid,
    /// Its title, shown in the Brief.
    pub title: String,
    /// The date the document bears (not when it was uploaded): the Brief's chronology.
    pub dated: Option<NaiveDate>,
    /// Its text.
    pub body: String,
}

/// Typed text the record keeps: not blank, and storable (no NUL: see [`super::text`]).
fn non_empty(what: &str, s: &str) -> Result<()> {
    super::text::refuse_nul(what, s)?;
    if s.trim().is_empty() {
        Err(Error::InvalidInput(format!("{what} must not be empty")))
    } else {
        Ok(())
    }
}

/// Creates a matter (`matter.created`). Refuses a matter id the firm already has.
pub async fn create_matter(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    title: &str,
) -> Result<Uuid> {
    create_matter_as(conn, firm_id, matter_id, title, DemandClass::Interactive).await
}

/// [`create_matter`], its first Brief's demand of `class` (an import creating matters in bulk
/// marks them [`DemandClass::Background`]).
pub async fn create_matter_as(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    title: &str,
    class: DemandClass,
) -> Result<Uuid> {
    non_empty("title", title)?;
    let event = NewEvent::new(firm_id, matter_id, EventName::MATTER_CREATED)?.class(class);
    let title = title.trim().to_owned();
    conn.transaction(async move |tx| {
        use record::matters::dsl as m;
        let inserted = diesel::insert_into(m::matters)
            .values((
                m::firm_id.eq(firm_id),
                m::matter_id.eq(matter_id),
                m::title.eq(&title),
            ))
            .on_conflict_do_nothing()
            .execute(tx)
            .await?;
        if inserted == 0 {
            return Err(Error::InvalidInput(format!(
                "matter {matter_id} already exists for firm {firm_id}"
            )));
        }
        record_event(tx, &event).await
    })
    .await
}

/// Adds a document to a live matter (`document.uploaded`): an interactive demand.
pub async fn add_document(conn: &mut AsyncPgConnection, doc: NewDocument) -> Result<Uuid> {
    add_document_as(conn, doc, DemandClass::Interactive).await
}

/// [`add_document`], its demand of `class` (an import marks its documents
/// [`DemandClass::Background`] so that counsel's uploads are served first).
pub async fn add_document_as(
    conn: &mut AsyncPgConnection,
    doc: NewDocument,
    class: DemandClass,
) -> Result<Uuid> {
    non_empty("title", &doc.title)?;
    if doc.body.contains('\0') {
        return Err(Error::InvalidInput(
            "document text contains a NUL byte (is it a binary file?)".into(),
        ));
    }
    non_empty("document text", &doc.body)?;
    let event = NewEvent::new(doc.firm_id, doc.matter_id, EventName::DOCUMENT_UPLOADED)?
        .payload(serde_json::json!({ "document_id": doc.document_id }))
        .class(class);
    conn.transaction(async move |tx| {
        live_matter(tx, doc.firm_id, doc.matter_id).await?;
        use record::documents::dsl as d;
        diesel::insert_into(d::documents)
            .values((
                d::document_id.eq(doc.document_id),
                d::firm_id.eq(doc.firm_id),
                d::matter_id.eq(doc.matter_id),
                d::title.eq(doc.title.trim()),
                d::dated.eq(doc.dated),
                d::body.eq(&doc.body),
            ))
            .execute(tx)
            .await?;
        record_event(tx, &event).await
    })
    .await
}

/// Asks for a fresh Brief of a live matter (`brief.requested`): the Regenerate button, an
/// interactive demand.
pub async fn request_brief(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<Uuid> {
    request_brief_as(conn, firm_id, matter_id, DemandClass::Interactive).await
}

/// [`request_brief`], its demand of `class`.
pub async fn request_brief_as(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
    class: DemandClass,
) -> Result<Uuid> {
    let event = NewEvent::new(firm_id, matter_id, EventName::BRIEF_REQUESTED)?.class(class);
    conn.transaction(async move |tx| {
        live_matter(tx, firm_id, matter_id).await?;
        record_event(tx, &event).await
    })
    .await
}

/// Asks for a fresh Brief of every live matter of a firm (after a builder upgrade, or a
/// restore): background demands, so they never hold up counsel's uploads. Returns the event
/// ids, one per matter, all in one transaction.
pub async fn request_brief_all(conn: &mut AsyncPgConnection, firm_id: Uuid) -> Result<Vec<Uuid>> {
    request_brief_all_as(conn, firm_id, DemandClass::Background).await
}

/// [`request_brief_all`], its demands of `class`.
pub async fn request_brief_all_as(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    class: DemandClass,
) -> Result<Vec<Uuid>> {
    conn.transaction(async move |tx| {
        use record::matters::dsl as m;
        let ids: Vec<Uuid> = m::matters
            .filter(m::firm_id.eq(firm_id).and(m::archived_at.is_null()))
            .select(m::matter_id)
            .order(m::matter_id)
            .load(tx)
            .await?;
        let mut events = Vec::with_capacity(ids.len());
        for matter_id in ids {
            let event = NewEvent::new(firm_id, matter_id, EventName::BRIEF_REQUESTED)?.class(class);
            events.push(record_event(tx, &event).await?);
        }
        Ok(events)
    })
    .await
}

/// Archives a matter (`matter.archived`): the trigger stops hearing its events.
pub async fn archive_matter(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<Uuid> {
    let event = NewEvent::new(firm_id, matter_id, EventName::MATTER_ARCHIVED)?;
    conn.transaction(async move |tx| {
        live_matter(tx, firm_id, matter_id).await?;
        use record::matters::dsl as m;
        diesel::update(m::matters.filter(m::firm_id.eq(firm_id).and(m::matter_id.eq(matter_id))))
            .set(m::archived_at.eq(diesel::dsl::now))
            .execute(tx)
            .await?;
        record_event(tx, &event).await
    })
    .await
}

/// The matter, locked against a concurrent archive, if it exists and is not archived.
async fn live_matter(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<MatterRow> {
    use record::matters::dsl as m;
    let row: Option<MatterRow> = m::matters
        .filter(m::firm_id.eq(firm_id).and(m::matter_id.eq(matter_id)))
        .select(MatterRow::as_select())
        .for_share()
        .first(conn)
        .await
        .optional()?;
    match row {
        None => Err(Error::NotFound(format!(
            "matter {matter_id} of firm {firm_id}"
        ))),
        Some(r) if r.archived_at.is_some() => {
            Err(Error::Conflict(format!("matter {matter_id} is archived")))
        }
        Some(r) => Ok(r),
    }
}

/// A matter of the record, archived or not.
pub async fn matter(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<Option<MatterRow>> {
    use record::matters::dsl as m;
    Ok(m::matters
        .filter(m::firm_id.eq(firm_id).and(m::matter_id.eq(matter_id)))
        .select(MatterRow::as_select())
        .first(conn)
        .await
        .optional()?)
}

diesel::define_sql_function! {
    /// `ops.is_archived`: the one definition of "archived" the claim and reconcile use too.
    #[sql_name = "ops.is_archived"]
    fn is_archived_sql(firm: diesel::sql_types::Uuid, matter: diesel::sql_types::Uuid) -> diesel::sql_types::Bool;
}

/// Whether the record says the matter is archived (asked of `ops.is_archived`, as the
/// ledger's claim and reconcile ask it).
pub async fn is_archived(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    matter_id: Uuid,
) -> Result<bool> {
    let archived = super::sql::is_archived(firm_id, matter_id)
        .get_result::<super::sql::Flag>(conn)
        .await?;
    Ok(archived.flag)
}
