//! Recording facts about the record: each function writes the fact and its outbox event in one
//! transaction (the common facts in one statement), so the bus can never hear of a fact that did
//! not commit, and no committed fact goes unannounced.

use chrono::NaiveDate;
use diesel::prelude::*;
use diesel::sql_types::{Bool, Date, Nullable, Text, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::event_name::EventName;
use super::models::MatterRow;
use super::outbox::{self, NewEvent, record_event};
use crate::db::prepared::prepared;
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

/// What a one-statement fact found and did. Counsel's wait for the Brief starts when the fact's
/// transaction does (the event's `created_at`), so the common facts are one statement each: a
/// caller outside a transaction pays one round trip and the commit, and nothing between them.
/// The statement is atomic on its own, and inside the caller's transaction it commits with it.
#[derive(QueryableByName)]
struct Recorded {
    /// Whether the matter is live: `None` when the firm has no such matter.
    #[diesel(sql_type = Nullable<Bool>)]
    live: Option<bool>,
    /// Whether the fact and its event were written.
    #[diesel(sql_type = Bool)]
    recorded: bool,
}

impl Recorded {
    /// The event's id, or the refusal [`live_matter`] gives for a fact about a matter that is
    /// missing or archived.
    fn about_a_live_matter(&self, event: &NewEvent) -> Result<Uuid> {
        let (firm_id, matter_id) = (event.firm_id, event.matter_id);
        match self.live {
            None => Err(no_such_matter(firm_id, matter_id)),
            Some(false) => Err(archived(matter_id)),
            Some(true) if self.recorded => Ok(outbox::recorded(event)),
            Some(true) => Err(Error::internal(format!(
                "the fact about matter {matter_id} of firm {firm_id} was not recorded"
            ))),
        }
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
    let done: Recorded = outbox::bind_event(
        prepared(CREATE_MATTER)
            .bind::<SqlUuid, _>(firm_id)
            .bind::<SqlUuid, _>(matter_id)
            .bind::<Text, _>(title.trim().to_owned()),
        &event,
    )
    .get_result(conn)
    .await?;
    if !done.recorded {
        return Err(Error::InvalidInput(format!(
            "matter {matter_id} already exists for firm {firm_id}"
        )));
    }
    Ok(outbox::recorded(&event))
}

/// [`create_matter`] in one statement: the matter, unless the firm has it already, and its
/// event. `$1` firm, `$2` matter, `$3` title, then the event ([`outbox::bind_event`]).
const CREATE_MATTER: &str = "\
WITH matter AS (
    INSERT INTO record.matters (firm_id, matter_id, title) VALUES ($1, $2, $3)
    ON CONFLICT DO NOTHING
    RETURNING true AS live
), event AS (
    INSERT INTO ops.domain_event_outbox
           (firm_id, matter_id, event_id, event_name, payload, traceparent, demand_class)
    SELECT $1, $2, $4, $5, $6, $7, $8 FROM matter
    RETURNING true
)
SELECT (SELECT m.live FROM matter m) AS live, EXISTS (SELECT 1 FROM event) AS recorded";

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
    let done: Recorded = outbox::bind_event(
        prepared(ADD_DOCUMENT)
            .bind::<SqlUuid, _>(doc.firm_id)
            .bind::<SqlUuid, _>(doc.matter_id)
            .bind::<SqlUuid, _>(doc.document_id)
            .bind::<Text, _>(doc.title.trim().to_owned())
            .bind::<Nullable<Date>, _>(doc.dated)
            .bind::<Text, _>(doc.body),
        &event,
    )
    .get_result(conn)
    .await?;
    done.about_a_live_matter(&event)
}

/// The first part of a one-statement fact about a matter that must be live: `matter`, one row
/// (`live`) if the firm has it, locked against a concurrent archive until the fact commits.
/// `$1` firm, `$2` matter.
macro_rules! the_live_matter {
    () => {
        "WITH matter AS (
    SELECT m.archived_at IS NULL AS live
      FROM record.matters m
     WHERE m.firm_id = $1 AND m.matter_id = $2
       FOR SHARE
), "
    };
}

/// [`add_document`] in one statement: the matter, locked against a concurrent archive; the
/// document, if the matter is live; its event, if the document was written. `$1` firm, `$2`
/// matter, `$3` document, `$4` title, `$5` date, `$6` text, then the event
/// ([`outbox::bind_event`]).
const ADD_DOCUMENT: &str = concat!(
    the_live_matter!(),
    "document AS (
    INSERT INTO record.documents (firm_id, matter_id, document_id, title, dated, body)
    SELECT $1, $2, $3, $4, $5, $6 FROM matter WHERE matter.live
    RETURNING true
), event AS (
    INSERT INTO ops.domain_event_outbox
           (firm_id, matter_id, event_id, event_name, payload, traceparent, demand_class)
    SELECT $1, $2, $7, $8, $9, $10, $11 FROM document
    RETURNING true
)
SELECT (SELECT m.live FROM matter m) AS live, EXISTS (SELECT 1 FROM event) AS recorded"
);

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
    let done: Recorded = outbox::bind_event(
        prepared(REQUEST_BRIEF)
            .bind::<SqlUuid, _>(firm_id)
            .bind::<SqlUuid, _>(matter_id),
        &event,
    )
    .get_result(conn)
    .await?;
    done.about_a_live_matter(&event)
}

/// [`request_brief`] in one statement: the matter, locked against a concurrent archive, and
/// the event if it is live. `$1` firm, `$2` matter, then the event ([`outbox::bind_event`]).
const REQUEST_BRIEF: &str = concat!(
    the_live_matter!(),
    "event AS (
    INSERT INTO ops.domain_event_outbox
           (firm_id, matter_id, event_id, event_name, payload, traceparent, demand_class)
    SELECT $1, $2, $3, $4, $5, $6, $7 FROM matter WHERE matter.live
    RETURNING true
)
SELECT (SELECT m.live FROM matter m) AS live, EXISTS (SELECT 1 FROM event) AS recorded"
);

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
        None => Err(no_such_matter(firm_id, matter_id)),
        Some(r) if r.archived_at.is_some() => Err(archived(matter_id)),
        Some(r) => Ok(r),
    }
}

/// The refusal of a fact about a matter the firm does not have.
fn no_such_matter(firm_id: Uuid, matter_id: Uuid) -> Error {
    Error::NotFound(format!("matter {matter_id} of firm {firm_id}"))
}

/// The refusal of a fact about an archived matter.
fn archived(matter_id: Uuid) -> Error {
    Error::Conflict(format!("matter {matter_id} is archived"))
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
