//! The one way Rust calls the ledger's functions: each `ops.*` function a transition, the inbox,
//! the relay, the fair order, the limits or retention runs has one builder here, with its SQL
//! signature, and nothing else in the crate names one in a statement (the unit test at the end
//! fails when something does). Callers load the statement into their row type:
//! `sql::heartbeat(..).get_result::<Flag>(conn)`.
//!
//! Each builder returns a [`Prepared`] statement, so a session parses and plans a call once and
//! then only executes it: the function keeps its own plans, and the call's plan is the call
//! whatever the statistics say ([`crate::db::prepared`]). The exception is a function Postgres
//! inlines into the calling statement (`LANGUAGE sql`, `STABLE`, no `SET`): its statement is the
//! function's query, and a kept one could run for the session's life on a generic plan made
//! while the tables were small, so it is planned on each call ([`Prepared::planned_each_call`]).
//!
//! The functions' text as it runs is in `src/ledger/live/<name>.sql`; `docs/protocol.md`
//! describes each transition, and `tests/model/ledger.rs` mirrors each in the model check.
//! Functions that a statement uses as an expression (`ops.now()`, `ops.clock()`,
//! `ops.is_archived()` inside a read) and those only other functions or triggers call are
//! listed in `NOT_CALLED_HERE`, with why.
#![allow(clippy::too_many_arguments)]

use diesel::QueryableByName;
use diesel::sql_types::{
    Array, BigInt, Bool, Double, Integer, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use uuid::Uuid;

use crate::db::prepared::{Prepared, prepared};

/// A function's boolean answer (`AS flag`): whether the claim was still current, whether the
/// run was still open, whether the matter is archived.
#[derive(QueryableByName)]
pub(super) struct Flag {
    #[diesel(sql_type = Bool)]
    pub flag: bool,
}

/// A function's number, or none (`AS number`): a token, a generation, a count.
#[derive(QueryableByName)]
pub(super) struct Number {
    #[diesel(sql_type = Nullable<BigInt>)]
    pub number: Option<i64>,
}

/// A batch function's answers, element `i` for member `i` (`AS numbers`).
#[derive(QueryableByName)]
pub(super) struct Numbers {
    #[diesel(sql_type = Array<Nullable<BigInt>>)]
    pub numbers: Vec<Option<i64>>,
}

/// Why the frame's body was refused, or none (`AS refused`).
#[derive(QueryableByName)]
pub(super) struct Refusal {
    #[diesel(sql_type = Nullable<Text>)]
    pub refused: Option<String>,
}

/// A wait in seconds (`AS wait_s`).
#[derive(QueryableByName)]
pub(super) struct Wait {
    #[diesel(sql_type = Double)]
    pub wait_s: f64,
}

// ---- transitions (docs/protocol.md) ------------------------------------------------------

/// **demand**: `ops.demand(firm, matter, xact) → requested_generation` (`AS number`; none when
/// the event's transaction is already covered by the running or landed build).
pub(super) fn demand<'a>(firm: Uuid, matter: Uuid, xact: Option<i64>) -> Prepared<'a> {
    prepared("SELECT ops.demand($1, $2, $3) AS number")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<Nullable<BigInt>, _>(xact)
}

/// **claim**: `ops.claim(..) → token` (`AS number`; none when not claimed).
pub(super) fn claim<'a>(
    firm: Uuid,
    matter: Uuid,
    lease_secs: f64,
    run_id: Uuid,
    node: &'a str,
    trace_id: Option<&'a str>,
    event_ids: &'a [Uuid],
    only_unserved: bool,
    max_attempts: i32,
) -> Prepared<'a> {
    prepared("SELECT ops.claim($1, $2, $3, $4, $5, $6, $7, $8, $9) AS number")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<Double, _>(lease_secs)
        .bind::<SqlUuid, _>(run_id)
        .bind::<Text, _>(node)
        .bind::<Nullable<Text>, _>(trace_id)
        .bind::<Array<SqlUuid>, _>(event_ids)
        .bind::<Bool, _>(only_unserved)
        .bind::<Integer, _>(max_attempts)
}

/// **claim** of many matters: `ops.claim_batch(..) → tokens` (`AS numbers`). Each member's
/// event ids travel as the literal of a `uuid[]`, as an array of arrays must be rectangular.
pub(super) fn claim_batch<'a>(
    firms: Vec<Uuid>,
    matters: Vec<Uuid>,
    lease_secs: Vec<f64>,
    run_ids: &'a [Uuid],
    nodes: Vec<&'a str>,
    trace_ids: Vec<Option<&'a str>>,
    event_ids: Vec<String>,
    only_unserved: Vec<bool>,
    max_attempts: Vec<i32>,
) -> Prepared<'a> {
    prepared("SELECT ops.claim_batch($1, $2, $3, $4, $5, $6, $7, $8, $9) AS numbers")
        .bind::<Array<SqlUuid>, _>(firms)
        .bind::<Array<SqlUuid>, _>(matters)
        .bind::<Array<Double>, _>(lease_secs)
        .bind::<Array<SqlUuid>, _>(run_ids)
        .bind::<Array<Text>, _>(nodes)
        .bind::<Array<Nullable<Text>>, _>(trace_ids)
        .bind::<Array<Text>, _>(event_ids)
        .bind::<Array<Bool>, _>(only_unserved)
        .bind::<Array<Integer>, _>(max_attempts)
}

/// **lost claim**: `ops.record_lost_claim(firm, matter) → requested_generation` (`AS number`;
/// none when the row is no longer running).
pub(super) fn record_lost_claim<'a>(firm: Uuid, matter: Uuid) -> Prepared<'a> {
    prepared("SELECT ops.record_lost_claim($1, $2) AS number")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
}

/// **heartbeat**: `ops.heartbeat(..) → current` (`AS flag`).
pub(super) fn heartbeat<'a>(firm: Uuid, matter: Uuid, token: i64, run_id: Uuid) -> Prepared<'a> {
    prepared("SELECT ops.heartbeat($1, $2, $3, $4) AS flag")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<BigInt, _>(token)
        .bind::<SqlUuid, _>(run_id)
}

/// **commit**, the compare-and-swap alone (a frame with the application's extra writes):
/// `ops.commit_claim(..) → after` (`AS number`: none fenced, 0 idle, else the follow-up's token).
pub(super) fn commit_claim<'a>(
    firm: Uuid,
    matter: Uuid,
    token: i64,
    run_id: Uuid,
    next_run_id: Uuid,
    node: &'a str,
) -> Prepared<'a> {
    prepared("SELECT ops.commit_claim($1, $2, $3, $4, $5, $6) AS number")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<BigInt, _>(token)
        .bind::<SqlUuid, _>(run_id)
        .bind::<SqlUuid, _>(next_run_id)
        .bind::<Text, _>(node)
}

/// The frame of a commit with extra writes: `ops.insert_frame(..) → refused` (`AS refused`).
pub(super) fn insert_frame<'a>(
    firm: Uuid,
    matter: Uuid,
    token: i64,
    run_id: Uuid,
    body: &'a str,
) -> Prepared<'a> {
    prepared("SELECT ops.insert_frame($1, $2, $3, $4, $5) AS refused")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<BigInt, _>(token)
        .bind::<SqlUuid, _>(run_id)
        .bind::<Text, _>(body)
}

/// **commit** of a frame without extra writes, the compare-and-swap and the frame in one
/// statement: `ops.commit_frame(..) → after` (`AS number`, as [`commit_claim`]).
pub(super) fn commit_frame<'a>(
    firm: Uuid,
    matter: Uuid,
    token: i64,
    run_id: Uuid,
    next_run_id: Uuid,
    node: &'a str,
    body: &'a str,
) -> Prepared<'a> {
    prepared("SELECT ops.commit_frame($1, $2, $3, $4, $5, $6, $7) AS number")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<BigInt, _>(token)
        .bind::<SqlUuid, _>(run_id)
        .bind::<SqlUuid, _>(next_run_id)
        .bind::<Text, _>(node)
        .bind::<Text, _>(body)
}

/// **commit** of many frames: `ops.commit_frames(..) → afters` (`AS numbers`).
pub(super) fn commit_frames<'a>(
    firms: Vec<Uuid>,
    matters: Vec<Uuid>,
    tokens: Vec<i64>,
    run_ids: Vec<Uuid>,
    next_run_ids: Vec<Uuid>,
    nodes: Vec<&'a str>,
    bodies: Vec<&'a str>,
) -> Prepared<'a> {
    prepared("SELECT ops.commit_frames($1, $2, $3, $4, $5, $6, $7) AS numbers")
        .bind::<Array<SqlUuid>, _>(firms)
        .bind::<Array<SqlUuid>, _>(matters)
        .bind::<Array<BigInt>, _>(tokens)
        .bind::<Array<SqlUuid>, _>(run_ids)
        .bind::<Array<SqlUuid>, _>(next_run_ids)
        .bind::<Array<Text>, _>(nodes)
        .bind::<Array<Text>, _>(bodies)
}

/// The follow-up's lease starts after the application's writes: `ops.start_lease(..)` (`AS flag`).
pub(super) fn start_lease<'a>(firm: Uuid, matter: Uuid, run_id: Uuid) -> Prepared<'a> {
    prepared("SELECT ops.start_lease($1, $2, $3) AS flag")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<SqlUuid, _>(run_id)
}

/// **fail**: `ops.fail_claim(..) → current` (`AS flag`).
pub(super) fn fail_claim<'a>(
    firm: Uuid,
    matter: Uuid,
    token: i64,
    run_id: Uuid,
    error: String,
    permanent: bool,
    max_attempts: i32,
    backoff_base_secs: f64,
    backoff_max_secs: f64,
) -> Prepared<'a> {
    prepared("SELECT ops.fail_claim($1, $2, $3, $4, $5, $6, $7, $8, $9) AS flag")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<BigInt, _>(token)
        .bind::<SqlUuid, _>(run_id)
        .bind::<Text, _>(error)
        .bind::<Bool, _>(permanent)
        .bind::<Integer, _>(max_attempts)
        .bind::<Double, _>(backoff_base_secs)
        .bind::<Double, _>(backoff_max_secs)
}

/// **release**: `ops.release_claim(..) → current` (`AS flag`).
pub(super) fn release_claim<'a>(
    firm: Uuid,
    matter: Uuid,
    token: i64,
    run_id: Uuid,
    reason: String,
) -> Prepared<'a> {
    prepared("SELECT ops.release_claim($1, $2, $3, $4, $5) AS flag")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<BigInt, _>(token)
        .bind::<SqlUuid, _>(run_id)
        .bind::<Text, _>(reason)
}

/// A refused commit or heartbeat closes its run: `ops.record_fenced(run, why) → was open`
/// (`AS flag`).
pub(super) fn record_fenced<'a>(run_id: Uuid, error: String) -> Prepared<'a> {
    prepared("SELECT ops.record_fenced($1, $2) AS flag")
        .bind::<SqlUuid, _>(run_id)
        .bind::<Text, _>(error)
}

/// **sweep**: `ops.sweep(limit)`, rows `(firm_id, matter_id, token)`.
pub(super) fn sweep<'a>(limit: i32) -> Prepared<'a> {
    prepared("SELECT firm_id, matter_id, token FROM ops.sweep($1)").bind::<Integer, _>(limit)
}

/// **reconcile**: `ops.unserved(max_attempts, limit, quiet)`, rows `(firm_id, matter_id)`.
/// Postgres inlines it into this statement, so it is planned on each call (see the module).
pub(super) fn unserved<'a>(max_attempts: i32, limit: i32, quiet_secs: f64) -> Prepared<'a> {
    prepared("SELECT firm_id, matter_id FROM ops.unserved($1, $2, $3)")
        .bind::<Integer, _>(max_attempts)
        .bind::<Integer, _>(limit)
        .bind::<Double, _>(quiet_secs)
        .planned_each_call()
}

/// Whether the record says the matter is archived: `ops.is_archived(firm, matter)` (`AS flag`),
/// the one definition the claim and reconcile ask too.
pub(super) fn is_archived<'a>(firm: Uuid, matter: Uuid) -> Prepared<'a> {
    prepared("SELECT ops.is_archived($1, $2) AS flag")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
}

// ---- the inbox and the outbox -----------------------------------------------------------

/// The columns of an outbox row, by name, as the functions that return rows hand them back (a
/// statement that names its columns keeps its result's shape if the table grows one).
macro_rules! outbox_columns {
    () => {
        "event_id, seq, firm_id, matter_id, event_name, payload, traceparent, created_at, \
         published_at, publish_attempts, last_error, next_attempt_at, xact_id, republish_count, \
         demand_class"
    };
}

/// The broker's consumer applies events it received: `ops.apply_events(consumer, ids, heard)`,
/// rows `(event_id, outcome, requested_generation)`.
#[cfg(feature = "testing")]
pub(super) fn apply_events<'a>(
    consumer: &'a str,
    ids: &'a [Uuid],
    heard: &'a [&'a str],
) -> Prepared<'a> {
    prepared("SELECT event_id, outcome, requested_generation FROM ops.apply_events($1, $2, $3)")
        .bind::<Text, _>(consumer)
        .bind::<Array<SqlUuid>, _>(ids)
        .bind::<Array<Text>, _>(heard)
}

/// The broker consumer's batch in one statement: `ops.consume_events(consumer, ids, names,
/// firms, matters, occurred, xacts, traces, heard, flush)`, the outbox row of each event the
/// ledger recorded, its age, and what the trigger made of it (`outcome` none: the message
/// disagrees with the row, nothing was applied).
pub(super) fn consume_events<'a>(
    consumer: &'a str,
    ids: &'a [Uuid],
    names: &'a [&'a str],
    firms: &'a [Uuid],
    matters: &'a [Uuid],
    occurred: &'a [chrono::DateTime<chrono::Utc>],
    xacts: &'a [Option<i64>],
    traces: &'a [Option<&'a str>],
    heard: &'a [&'a str],
    flush: bool,
) -> Prepared<'a> {
    prepared(concat!(
        "SELECT ",
        outbox_columns!(),
        ", ago_s, outcome, requested_generation \
         FROM ops.consume_events($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
    ))
    .bind::<Text, _>(consumer)
    .bind::<Array<SqlUuid>, _>(ids)
    .bind::<Array<Text>, _>(names)
    .bind::<Array<SqlUuid>, _>(firms)
    .bind::<Array<SqlUuid>, _>(matters)
    .bind::<Array<Timestamptz>, _>(occurred)
    .bind::<Array<Nullable<BigInt>>, _>(xacts)
    .bind::<Array<Nullable<Text>>, _>(traces)
    .bind::<Array<Text>, _>(heard)
    .bind::<Bool, _>(flush)
}

/// The postgres transport's drain: `ops.drain_outbox(consumer, limit, heard)`, one row per
/// event applied.
pub(super) fn drain_outbox<'a>(
    consumer: &'a str,
    limit: i32,
    heard: &'a [&'a str],
) -> Prepared<'a> {
    prepared(
        "SELECT event_id, firm_id, matter_id, traceparent, outcome, requested_generation,
                recorded_ago_s, demand_class
           FROM ops.drain_outbox($1, $2, $3)",
    )
    .bind::<Text, _>(consumer)
    .bind::<Integer, _>(limit)
    .bind::<Array<Text>, _>(heard)
}

/// The relay's lease of unpublished events: `ops.lease_events(limit, lease)`, outbox rows.
pub(super) fn lease_events<'a>(limit: i64, lease_secs: f64) -> Prepared<'a> {
    prepared(concat!(
        "SELECT ",
        outbox_columns!(),
        " FROM ops.lease_events($1, $2)"
    ))
    .bind::<BigInt, _>(limit)
    .bind::<Double, _>(lease_secs)
}

/// The relay marks what the broker confirmed: `ops.mark_published(ids) → marked` (`AS number`).
pub(super) fn mark_published<'a>(event_ids: &'a [Uuid]) -> Prepared<'a> {
    prepared("SELECT ops.mark_published($1)::int8 AS number").bind::<Array<SqlUuid>, _>(event_ids)
}

/// Events with how long ago they were recorded: `ops.events_aged(ids)`, outbox rows and `ago_s`.
#[cfg(feature = "testing")]
pub(super) fn events_aged<'a>(event_ids: &'a [Uuid]) -> Prepared<'a> {
    prepared(concat!(
        "SELECT ",
        outbox_columns!(),
        ", ago_s FROM ops.events_aged($1)"
    ))
    .bind::<Array<SqlUuid>, _>(event_ids)
}

// ---- the fair order and the limits ------------------------------------------------------

/// Which candidates are claimed next, in order: `ops.fair_order(..) → indexes` (1-based,
/// `AS numbers`, at most `count`).
pub(super) fn fair_order<'a>(
    firms: Vec<Uuid>,
    classes: Vec<&'a str>,
    waited_secs: Vec<f64>,
    pending: Vec<i32>,
    promote_secs: f64,
    count: i32,
) -> Prepared<'a> {
    prepared("SELECT ops.fair_order($1, $2, $3, $4, $5, $6)::int8[] AS numbers")
        .bind::<Array<SqlUuid>, _>(firms)
        .bind::<Array<Text>, _>(classes)
        .bind::<Array<Double>, _>(waited_secs)
        .bind::<Array<Integer>, _>(pending)
        .bind::<Double, _>(promote_secs)
        .bind::<Integer, _>(count)
}

/// A start under the fleet's rate: `ops.take_permit(..) → wait` (`AS wait_s`, 0 when granted).
pub(super) fn take_permit<'a>(
    firm: Uuid,
    matter: Uuid,
    node: &'a str,
    ttl_secs: f64,
) -> Prepared<'a> {
    prepared("SELECT ops.take_permit($1, $2, $3, $4) AS wait_s")
        .bind::<SqlUuid, _>(firm)
        .bind::<SqlUuid, _>(matter)
        .bind::<Text, _>(node)
        .bind::<Double, _>(ttl_secs)
}

/// The builder asked the rail to wait: `ops.hold_builder(secs, reason) → until`, answered as
/// the wait from the ledger clock (`AS wait_s`).
pub(super) fn hold_builder<'a>(secs: f64, reason: String) -> Prepared<'a> {
    prepared(
        "SELECT greatest(extract(epoch FROM ops.hold_builder($1, $2) - ops.clock())::float8, 0)
                  AS wait_s",
    )
    .bind::<Double, _>(secs)
    .bind::<Text, _>(reason)
}

// ---- retention --------------------------------------------------------------------------

/// Consumed events and their inbox rows: `ops.prune_events(..)`, one row `(events, inbox_rows)`.
pub(super) fn prune_events<'a>(
    consumer: &'a str,
    older_than_secs: f64,
    limit: i32,
) -> Prepared<'a> {
    prepared("SELECT events, inbox_rows FROM ops.prune_events($1, $2, $3)")
        .bind::<Text, _>(consumer)
        .bind::<Double, _>(older_than_secs)
        .bind::<Integer, _>(limit)
}

/// Old closed runs: `ops.prune_runs(older_than, limit) → removed` (`AS number`).
pub(super) fn prune_runs<'a>(older_than_secs: f64, limit: i32) -> Prepared<'a> {
    prepared("SELECT ops.prune_runs($1, $2) AS number")
        .bind::<Double, _>(older_than_secs)
        .bind::<Integer, _>(limit)
}

/// Old frames past the newest `keep` of each matter: `ops.prune_frames(..)`, one row
/// `(frames, last_firm, last_matter)`.
pub(super) fn prune_frames<'a>(
    keep: i32,
    young_secs: f64,
    after_firm: Uuid,
    after_matter: Uuid,
    matters: i32,
) -> Prepared<'a> {
    prepared("SELECT frames, last_firm, last_matter FROM ops.prune_frames($1, $2, $3, $4, $5)")
        .bind::<Integer, _>(keep)
        .bind::<Double, _>(young_secs)
        .bind::<SqlUuid, _>(after_firm)
        .bind::<SqlUuid, _>(after_matter)
        .bind::<Integer, _>(matters)
}

/// Functions any statement may use as an expression (a time, a predicate inside a read).
#[cfg(test)]
const EXPRESSIONS: &[&str] = &["now", "clock", "is_archived"];

/// The ledger's functions Rust never calls, and why: only other functions and triggers do. A
/// function of `live/` that is neither built here, an expression nor listed here fails the
/// unit test below, so a new one is placed on purpose.
#[cfg(test)]
const INTERNAL: &[(&str, &str)] = &[
    ("clock_offset", "read by ops.now() and ops.clock()"),
    (
        "demands",
        "the set-based demand that apply_events and drain_outbox run",
    ),
    (
        "commit_claims",
        "the compare-and-swap that commit_frame and commit_frames run",
    ),
    (
        "notify_outbox",
        "the outbox trigger's target, never run: its condition sends the notification",
    ),
    ("refuse_job_delete", "a trigger: a job row is never deleted"),
    (
        "cluster_id",
        "the cluster's identity, which a claim stamps on its row",
    ),
    (
        "open_runs",
        "the claim batch's read of the runs its claims supersede, by index scan",
    ),
    (
        "snapshot_covers",
        "whether a claim's snapshot saw an event's transaction, asked by demand",
    ),
    (
        "fair_pick",
        "fair_order's first pick, kept for nodes of the release before, which call it",
    ),
];

/// Run errors are for operators; a runaway stderr must not bloat the ledger, and a NUL in it
/// must not make the ledger refuse the failure (see [`super::text`]).
pub(super) fn bounded(s: &str) -> String {
    super::text::storable_within(s, 4000)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use super::{EXPRESSIONS, INTERNAL};

    /// The names of the functions a text calls (`ops.<name>(`), with their line numbers, in the
    /// lines that are not comments.
    fn calls(text: &str) -> Vec<(usize, String)> {
        let mut found = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            let mut rest = line;
            while let Some(at) = rest.find("ops.") {
                let after = &rest[at + 4..];
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && after[name.len()..].starts_with('(') {
                    found.push((n + 1, name));
                }
                rest = after;
            }
        }
        found
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The functions of the live schema: one file each in `src/ledger/live/`.
    fn live_functions(src: &Path) -> BTreeSet<String> {
        std::fs::read_dir(src.join("ledger/live"))
            .expect("src/ledger/live is readable")
            .filter_map(|e| {
                let path = e.ok()?.path();
                let name = path.file_stem()?.to_str()?.to_owned();
                (name != "catalog").then_some(name)
            })
            .collect()
    }

    #[test]
    fn only_this_module_calls_the_ledgers_functions() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let this = src.join("ledger/sql.rs");
        let text = std::fs::read_to_string(&this).expect("sql.rs is readable");
        let expressions: BTreeSet<&str> = EXPRESSIONS.iter().copied().collect();
        let internal: BTreeSet<&str> = INTERNAL.iter().map(|(name, _)| *name).collect();
        let built: BTreeSet<String> = calls(&text)
            .into_iter()
            .map(|(_, name)| name)
            .filter(|name| !expressions.contains(name.as_str()) || name == "is_archived")
            .collect();
        let live = live_functions(&src);

        for name in &live {
            assert!(
                built.contains(name)
                    || expressions.contains(name.as_str())
                    || internal.contains(name.as_str()),
                "ops.{name} is in src/ledger/live/ but has no builder in src/ledger/sql.rs and is \
                 neither an expression nor listed as internal: place it"
            );
        }
        for name in built
            .iter()
            .map(String::as_str)
            .chain(internal.iter().copied())
        {
            assert!(
                live.contains(name),
                "src/ledger/sql.rs names ops.{name}, which the live schema lacks"
            );
        }

        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut elsewhere = Vec::new();
        for file in files.iter().filter(|f| **f != this) {
            let text = std::fs::read_to_string(file).expect("a source file is readable");
            for (line, name) in calls(&text) {
                if !expressions.contains(name.as_str()) && live.contains(&name) {
                    elsewhere.push(format!("{}:{line}: ops.{name}", file.display()));
                }
            }
        }
        assert!(
            elsewhere.is_empty(),
            "the ledger's functions are called only through src/ledger/sql.rs; called elsewhere:\n{}",
            elsewhere.join("\n")
        );
    }

    #[test]
    fn a_call_outside_is_found() {
        let found =
            calls("// ops.claim( in a comment\nlet q = \"SELECT ops.claim($1) FROM ops.rail\";");
        assert_eq!(found, vec![(2, "claim".to_owned())]);
    }
}
