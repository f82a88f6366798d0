//! Rows of the ledger's tables as the library hands them out.

use chrono::{DateTime, NaiveDate, Utc};
use diesel::prelude::*;
use serde::Serialize;
use uuid::Uuid;

use super::states::{RunOutcome, RunStatus};
use crate::schema::{ops, record};

/// The inbox name of the Brief rail's trigger (the consumer every event is applied for).
pub const BRIEF_RAIL: &str = "brief-rail";

/// A claim this process holds: the fencing token and the run that records the attempt.
/// Every write made on behalf of the build carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Claim {
    /// The firm the matter belongs to.
    pub firm_id: Uuid,
    /// The claimed matter.
    pub matter_id: Uuid,
    /// The fencing token: the row's `claimed_generation` when this claim was taken.
    pub token: i64,
    /// The run recording this attempt.
    pub run_id: Uuid,
}

impl Claim {
    /// The error a statement fenced on this claim returns: the token is no longer current.
    pub fn fenced(&self) -> crate::Error {
        crate::Error::Fenced {
            firm_id: self.firm_id,
            matter_id: self.matter_id,
            token: self.token,
        }
    }
}

/// `ops.matter_frame_jobs`: the ticket dispenser of one matter.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Serialize)]
#[diesel(table_name = ops::matter_frame_jobs, check_for_backend(diesel::pg::Pg))]
pub struct JobRow {
    /// The firm the matter belongs to.
    pub firm_id: Uuid,
    /// The matter.
    pub matter_id: Uuid,
    /// Whether a build holds the matter, and how the last one ended.
    pub run_status: RunStatus,
    /// A demand arrived during the build: it re-claims when it commits.
    pub rebuild_needed: bool,
    /// Raised by each demand: the generation the matter owes.
    pub requested_generation: i64,
    /// The latest fencing token handed out.
    pub claimed_generation: i64,
    /// When the current claim was taken, by the database's clock.
    pub claimed_at: Option<DateTime<Utc>>,
    /// The token of the frame that landed last; below `requested_generation`, demand is
    /// unserved.
    pub landed_generation: i64,
    /// Failures since the last success: the backoff's exponent.
    pub consecutive_failures: i32,
    /// No claim before this (backoff, or a builder that asked to wait).
    pub not_before: Option<DateTime<Utc>>,
    /// When the row last changed, by the database's clock.
    pub updated_at: DateTime<Utc>,
    /// The snapshot the current claim was taken at, for the build's reads.
    pub claimed_snapshot: Option<String>,
    /// With `claimed_generation`, the identity of the current (or last) claim: its run id.
    pub claimed_run_id: Option<Uuid>,
    /// The claimer's lease length; each heartbeat moves the deadline by it.
    pub lease_seconds: Option<f64>,
    /// The current claim's deadline (ledger clock, `ops.now()`); the sweep compares with it.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The cluster (system identifier) whose transaction ids `claimed_snapshot` holds.
    pub claimed_cluster: Option<i64>,
}

impl JobRow {
    /// Derived, not stored: some demand has not been served by a landed frame.
    pub fn unserved(&self) -> bool {
        self.landed_generation < self.requested_generation
    }
}

/// `ops.matter_frame_runs`: one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Serialize)]
#[diesel(table_name = ops::matter_frame_runs, check_for_backend(diesel::pg::Pg))]
pub struct RunRow {
    pub run_id: Uuid,
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub token: i64,
    pub node_id: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: RunOutcome,
    pub error: Option<String>,
    pub trace_id: Option<String>,
    pub event_ids: Vec<Option<Uuid>>,
}

/// A landed frame's metadata (without its body).
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Serialize)]
#[diesel(table_name = ops::matter_frames, check_for_backend(diesel::pg::Pg))]
pub struct FrameMeta {
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub generation: i64,
    pub run_id: Uuid,
    pub created_at: DateTime<Utc>,
}

/// A landed frame with its body.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Serialize)]
#[diesel(table_name = ops::matter_frames, check_for_backend(diesel::pg::Pg))]
pub struct FrameRow {
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub generation: i64,
    pub run_id: Uuid,
    pub body: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// `record.matters`: a matter of the record, as a builder reads it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Serialize)]
#[diesel(table_name = record::matters, check_for_backend(diesel::pg::Pg))]
pub struct MatterRow {
    /// The firm the matter belongs to.
    pub firm_id: Uuid,
    /// The matter, unique within its firm.
    pub matter_id: Uuid,
    /// Its caption ("Acme Corp. v. Globex LLC").
    pub title: String,
    /// When it was archived; an archived matter is not built again.
    pub archived_at: Option<DateTime<Utc>>,
    /// When it was opened.
    pub created_at: DateTime<Utc>,
}

/// `record.documents`: a document of a matter, as a builder reads it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Serialize)]
#[diesel(table_name = record::documents, check_for_backend(diesel::pg::Pg))]
pub struct DocumentRow {
    /// The document.
    pub document_id: Uuid,
    /// The firm of its matter.
    pub firm_id: Uuid,
    /// Its matter.
    pub matter_id: Uuid,
    /// Its title.
    pub title: String,
    /// The date it bears, if any: the chronology's order.
    pub dated: Option<NaiveDate>,
    /// Its text.
    pub body: String,
    /// When it was uploaded: the order of documents of the same date.
    pub uploaded_at: DateTime<Utc>,
}

/// `ops.domain_event_outbox`.
#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Serialize)]
#[diesel(table_name = ops::domain_event_outbox, check_for_backend(diesel::pg::Pg))]
pub struct OutboxRow {
    pub event_id: Uuid,
    pub seq: i64,
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub event_name: String,
    pub payload: serde_json::Value,
    pub traceparent: Option<String>,
    pub created_at: DateTime<Utc>,
    pub published_at: Option<DateTime<Utc>>,
    pub publish_attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub xact_id: i64,
    /// How often reconcile republished it unconsumed (failed publishes are `publish_attempts`).
    pub republish_count: i32,
    /// The class of the demand this fact makes (`interactive` or `background`).
    pub demand_class: String,
}
