//! **discard** of many dead letters at once: after an incident (a misconfigured publisher, a
//! foreign installation on the broker) an operator clears hundreds of refusals that share a
//! reason or a routing key. The same transition as [`super::discard`] (an open letter marked
//! `discarded`, kept for the record), for the whole batch in one statement.

use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{DeadFilter, FILTERED};
use crate::error::Result;
use crate::ledger::matters::bulk::named;

/// Which dead letters to discard.
#[derive(Debug, Clone)]
pub enum Selection {
    /// These ids: at most the cap, at least one.
    Ids(Vec<Uuid>),
    /// Every open dead letter the filter matches (its `resolved_too` aside), oldest first.
    Filter(DeadFilter),
}

/// What a bulk discard did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Discarded {
    /// Dead letters marked discarded now.
    pub discarded: usize,
    /// Ids named that were not open (already resolved, or unknown).
    pub skipped: usize,
    /// The most this call would discard.
    pub cap: usize,
    /// More open dead letters match the filter: call again.
    pub more: bool,
}

#[derive(diesel::QueryableByName)]
struct Outcome {
    #[diesel(sql_type = BigInt)]
    discarded: i64,
    #[diesel(sql_type = Bool)]
    more: bool,
}

/// **discard** the open dead letters `selection` names, at most `cap` of them, in one
/// statement (rows another discard or a replay holds are left to it: `SKIP LOCKED`).
pub async fn discard_many(
    conn: &mut AsyncPgConnection,
    selection: &Selection,
    cap: usize,
) -> Result<Discarded> {
    let (ids, filter) = match selection {
        Selection::Ids(ids) => (Some(named("dead letters", ids, cap)?), None),
        Selection::Filter(f) => {
            f.checked()?;
            let open_only = DeadFilter {
                resolved_too: false,
                ..f.clone()
            };
            (None, Some(open_only))
        }
    };
    let f = filter.clone().unwrap_or_default();
    let o: Outcome = diesel::sql_query(format!(
        "WITH picked AS (
           SELECT dead_letter_id, refused_at {FILTERED}
              AND resolved_at IS NULL
              AND ($4::uuid[] IS NULL OR dead_letter_id = ANY($4))
            ORDER BY refused_at, dead_letter_id
            LIMIT $5 + 1
              FOR UPDATE SKIP LOCKED),
         done AS (
           UPDATE ops.dead_letters d SET resolved_at = ops.now(), resolution = 'discarded'
            WHERE d.dead_letter_id IN (SELECT dead_letter_id FROM picked
                                        ORDER BY refused_at, dead_letter_id LIMIT $5)
           RETURNING 1)
         SELECT (SELECT count(*) FROM done) AS discarded,
                (SELECT count(*) FROM picked) > $5 AS more"
    ))
    .bind::<Bool, _>(false)
    .bind::<Nullable<Text>, _>(DeadFilter::pattern(&f.reason))
    .bind::<Nullable<Text>, _>(DeadFilter::pattern(&f.routing_key))
    .bind::<Nullable<Array<SqlUuid>>, _>(ids.clone())
    .bind::<BigInt, _>(cap as i64)
    .get_result(conn)
    .await?;
    let discarded = usize::try_from(o.discarded).unwrap_or(0);
    tracing::info!(discarded, more = o.more, "dead letters discarded in bulk");
    Ok(Discarded {
        discarded,
        skipped: ids.map_or(0, |ids| ids.len() - discarded),
        cap,
        more: o.more && filter.is_some(),
    })
}
