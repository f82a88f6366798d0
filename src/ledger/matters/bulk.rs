//! **retry** of many matters at once: what an operator of a busy rail does after fixing the
//! cause that exhausted hundreds of matters' retries (a builder outage, a model's quota).
//!
//! It is the same transition as [`super::retry`] (lock the job rows, read the states under the
//! locks, record `brief.requested` for each matter still out of retries; the trigger's
//! `ops.demand` then restarts its retries), done for the whole batch in a fixed number of
//! statements, in one transaction, however many matters it names. Unlike the single retry it
//! only touches matters whose retries are **exhausted** (a failing matter retries by itself),
//! and skips one whose earlier demand the trigger has not consumed yet, so pressing it twice,
//! or paging through "more" while the trigger catches up, records no second demand. Its
//! demands are background work: counsel's own uploads are served before a bulk retry.

use diesel::sql_types::{Array, BigInt, Integer, Uuid as SqlUuid};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;
use uuid::Uuid;

use super::{MatterQuery, MatterState, ORDER, STATE_SQL, WHERE_STATE, attempts, matching};
use crate::error::{Error, Result};
use crate::ledger::event_name::EventName;
use crate::ledger::models::BRIEF_RAIL;
use crate::ledger::outbox::{NewEvent, record_events};
use crate::nudge::DemandClass;

/// The most matters one bulk action touches (and names): a bound on the transaction's length
/// and on the locks it holds while builds go on beside it.
pub const MAX_BULK: usize = 1000;

/// Which matters to retry.
#[derive(Debug, Clone)]
pub enum Selection {
    /// These (firm, matter) pairs: at most the cap, at least one.
    Matters(Vec<(Uuid, Uuid)>),
    /// Every matter the console's filter matches (its limit and offset aside).
    Filter(MatterQuery),
}

/// What a bulk retry did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Retried {
    /// Matters a demand was recorded for.
    pub retried: usize,
    /// Matters named or matched that were not retried: not out of retries (or unknown), or a
    /// demand of theirs is still on its way to the trigger.
    pub skipped: usize,
    /// The most this call would retry.
    pub cap: usize,
    /// More matters match the filter and are out of retries: call again.
    pub more: bool,
    /// What was recorded, one line per retried matter.
    pub events: Vec<RetriedMatter>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetriedMatter {
    pub firm_id: Uuid,
    pub matter_id: Uuid,
    pub event_id: Uuid,
}

/// The cap of one call: `limit` if given (1 to [`MAX_BULK`]), else [`MAX_BULK`].
pub fn cap(limit: Option<usize>) -> Result<usize> {
    match limit {
        None => Ok(MAX_BULK),
        Some(n) if (1..=MAX_BULK).contains(&n) => Ok(n),
        Some(n) => Err(Error::InvalidInput(format!(
            "limit {n} is out of range: 1 to {MAX_BULK}"
        ))),
    }
}

/// Refuses a list of `n` that names nothing or more than `cap`, naming what it lists.
pub fn within_cap(what: &str, n: usize, cap: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidInput(format!("the list of {what} is empty")));
    }
    if n > cap {
        return Err(Error::InvalidInput(format!(
            "{n} {what} named: at most {cap} per call"
        )));
    }
    Ok(())
}

/// [`within_cap`], and drops repeats (the first kept).
pub fn named<T: PartialEq + Copy>(what: &str, ids: &[T], cap: usize) -> Result<Vec<T>> {
    within_cap(what, ids.len(), cap)?;
    let mut out: Vec<T> = Vec::with_capacity(ids.len());
    for id in ids {
        if !out.contains(id) {
            out.push(*id);
        }
    }
    Ok(out)
}

/// The condition that the matter of alias `t` is out of retries (its state is `state`) and has
/// no demand on its way: every fact of it the trigger has consumed.
fn eligible(t: &str, state: &str) -> String {
    format!(
        "({state}) = '{exhausted}' AND NOT EXISTS (
           SELECT 1 FROM ops.domain_event_outbox o
            WHERE o.firm_id = {t}.firm_id AND o.matter_id = {t}.matter_id
              AND NOT EXISTS (SELECT 1 FROM ops.consumed_events c
                               WHERE c.consumer = '{BRIEF_RAIL}' AND c.event_id = o.event_id))",
        exhausted = MatterState::RetriesExhausted.as_str()
    )
}

/// **retry** every matter `selection` names that is out of retries, at most `cap` of them.
pub async fn retry_exhausted(
    conn: &mut AsyncPgConnection,
    selection: &Selection,
    cap: usize,
    max_attempts: u32,
) -> Result<Retried> {
    let selection = selection.clone();
    conn.transaction(async move |tx| {
        let (candidates, mut skipped, more) = match &selection {
            Selection::Matters(ids) => (named("matters", ids, cap)?, 0, false),
            Selection::Filter(q) => {
                let (mut found, skipped) = matching_exhausted(tx, q, cap, max_attempts).await?;
                let more = found.len() > cap;
                found.truncate(cap);
                (found, skipped, more)
            }
        };
        lock(tx, &candidates).await?;
        let due = still_exhausted(tx, &candidates, max_attempts).await?;
        skipped += candidates.len() - due.len();
        let mut events = Vec::with_capacity(due.len());
        for (firm, matter) in &due {
            events.push(
                NewEvent::new(*firm, *matter, EventName::BRIEF_REQUESTED)?
                    .class(DemandClass::Background),
            );
        }
        record_events(tx, &events).await?;
        tracing::info!(
            retried = events.len(),
            skipped,
            more,
            "bulk retry recorded its demands"
        );
        Ok(Retried {
            retried: events.len(),
            skipped,
            cap,
            more,
            events: events
                .iter()
                .map(|e| RetriedMatter {
                    firm_id: e.firm_id,
                    matter_id: e.matter_id,
                    event_id: e.event_id,
                })
                .collect(),
        })
    })
    .await
}

#[derive(diesel::QueryableByName)]
struct Key {
    #[diesel(sql_type = SqlUuid)]
    firm_id: Uuid,
    #[diesel(sql_type = SqlUuid)]
    matter_id: Uuid,
}

/// The first `cap + 1` matters `q` matches that are out of retries with nothing pending, in
/// the list's order, and how many other matters it matches (skipped).
async fn matching_exhausted(
    tx: &mut AsyncPgConnection,
    q: &MatterQuery,
    cap: usize,
    max_attempts: u32,
) -> Result<(Vec<(Uuid, Uuid)>, usize)> {
    super::checked(q)?;
    let eligible = eligible("s", "s.state_text");
    let keys: Vec<Key> = super::bind_matching!(
        diesel::sql_query(format!(
            "SELECT s.firm_id, s.matter_id FROM {} WHERE {WHERE_STATE} AND {eligible} {ORDER} LIMIT $5",
            matching()
        )),
        q,
        max_attempts
    )
    .bind::<BigInt, _>(cap as i64 + 1)
    .load(tx)
    .await?;
    let other: super::Count = super::bind_matching!(
        diesel::sql_query(format!(
            "SELECT count(*) AS n FROM {} WHERE {WHERE_STATE} AND NOT ({eligible})",
            matching()
        )),
        q,
        max_attempts
    )
    .get_result(tx)
    .await?;
    Ok((
        keys.into_iter().map(|k| (k.firm_id, k.matter_id)).collect(),
        usize::try_from(other.n).unwrap_or(0),
    ))
}

/// Locks the candidates' job rows (in key order, so two bulk retries cannot deadlock) and
/// their record rows against a concurrent archive, as [`super::retry`] and
/// `facts::request_brief` do for one.
async fn lock(tx: &mut AsyncPgConnection, keys: &[(Uuid, Uuid)]) -> Result<()> {
    let (firms, matters): (Vec<Uuid>, Vec<Uuid>) = keys.iter().copied().unzip();
    diesel::sql_query(
        "SELECT 1 FROM unnest($1::uuid[], $2::uuid[]) AS k(firm_id, matter_id)
           JOIN ops.matter_frame_jobs j USING (firm_id, matter_id)
           JOIN record.matters m USING (firm_id, matter_id)
          ORDER BY j.firm_id, j.matter_id
            FOR UPDATE OF j FOR SHARE OF m",
    )
    .bind::<Array<SqlUuid>, _>(firms)
    .bind::<Array<SqlUuid>, _>(matters)
    .execute(tx)
    .await?;
    Ok(())
}

/// Of `keys`, read under their locks, those still out of retries with nothing pending.
async fn still_exhausted(
    tx: &mut AsyncPgConnection,
    keys: &[(Uuid, Uuid)],
    max_attempts: u32,
) -> Result<Vec<(Uuid, Uuid)>> {
    let (firms, matters): (Vec<Uuid>, Vec<Uuid>) = keys.iter().copied().unzip();
    let rows: Vec<Key> = diesel::sql_query(format!(
        "SELECT k.firm_id, k.matter_id
           FROM unnest($2::uuid[], $3::uuid[]) WITH ORDINALITY AS k(firm_id, matter_id, n)
           JOIN record.matters m USING (firm_id, matter_id)
           JOIN ops.matter_frame_jobs j USING (firm_id, matter_id)
          WHERE {}
          ORDER BY k.n",
        eligible("j", STATE_SQL)
    ))
    .bind::<Integer, _>(attempts(max_attempts))
    .bind::<Array<SqlUuid>, _>(firms)
    .bind::<Array<SqlUuid>, _>(matters)
    .load(tx)
    .await?;
    Ok(rows.into_iter().map(|k| (k.firm_id, k.matter_id)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_names_something_within_the_cap_and_once() {
        assert!(named::<u8>("matters", &[], 3).is_err());
        let e = named("matters", &[1, 2, 3, 4], 3).unwrap_err().to_string();
        assert!(e.contains("4 matters named: at most 3"), "{e}");
        assert_eq!(named("matters", &[1, 2, 1], 3).unwrap(), vec![1, 2]);
        assert_eq!(cap(None).unwrap(), MAX_BULK);
        assert!(cap(Some(0)).is_err() && cap(Some(MAX_BULK + 1)).is_err());
    }
}
