//! Who is served next when build slots are scarce: a demand's class, the firms, the rail's
//! pause, and the order (`ops.fair_order`, `src/ledger/live/fair_order.sql`).
//!
//! The rail promises that counsel's upload is reflected in minutes whatever else the rail is
//! doing. Serving demands in arrival order breaks that promise as soon as one firm imports in
//! bulk: every other firm's upload waits behind the backlog. So the order comes from three
//! facts of the ledger, the same for every node:
//!
//! 1. **Class.** Every fact records its demand's [`DemandClass`]. Interactive demands (a user's
//!    action) are claimed before background ones (bulk requests, reconciliation); a background
//!    demand that has waited `fairness.background_promote_seconds` counts as interactive, so
//!    background work always progresses.
//! 2. **Fair share.** Among demands of the same tier, the next claim goes to the firm with the
//!    fewest builds running on every node, per unit of its weight ([`FirmSettings::weight`]).
//! 3. **Age.** Within that, the demand that has waited longest.
//!
//! A paused firm's demands (and every demand while the rail is paused) are recorded and wait;
//! they are served in the same order once resumed. The pick decides order only: every claim is
//! still the fenced compare-and-swap of the claim transition.

use diesel::prelude::*;
use diesel::sql_types::{Double, Integer, Nullable, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::error::{Error, Result};
pub use crate::nudge::DemandClass;
use crate::schema::ops;

/// The most weight a firm may have (and the least is 1): the same bound as the table's CHECK.
pub const MAX_WEIGHT: i32 = 1000;

/// What an operator sets on a firm. `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct FirmSettings {
    /// What operators call the firm (a client's name). `Some("")` clears it.
    pub name: Option<String>,
    /// Its share of scarce build slots against other firms' (1 to [`MAX_WEIGHT`]).
    pub weight: Option<i32>,
    /// Paused: its demands are recorded and wait until it is resumed.
    pub paused: Option<bool>,
}

/// A firm as the ledger knows it, with what an operator watches.
#[derive(Debug, Clone, PartialEq, QueryableByName, serde::Serialize)]
pub struct FirmView {
    #[diesel(sql_type = SqlUuid)]
    pub firm_id: Uuid,
    #[diesel(sql_type = Nullable<Text>)]
    pub name: Option<String>,
    #[diesel(sql_type = Integer)]
    pub weight: i32,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    pub paused: bool,
    /// Live matters whose demand is not served yet.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub unserved: i64,
    /// Builds running now, on every node.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub running: i64,
    /// Seconds the oldest unserved interactive fact has waited (ledger clock), if any.
    #[diesel(sql_type = Nullable<Double>)]
    pub oldest_interactive_s: Option<f64>,
}

/// Sets what `settings` names on firm `firm_id` (creating its row). Refuses a weight out of
/// range, a name with a NUL or over 200 characters, and a name another firm has, each naming
/// the problem.
pub async fn set_firm(
    conn: &mut AsyncPgConnection,
    firm_id: Uuid,
    settings: &FirmSettings,
) -> Result<()> {
    if let Some(w) = settings.weight
        && !(1..=MAX_WEIGHT).contains(&w)
    {
        return Err(Error::InvalidInput(format!(
            "weight {w} is out of range: 1 to {MAX_WEIGHT}"
        )));
    }
    let name = match settings.name.as_deref().map(str::trim) {
        None => None,
        Some("") => Some(None),
        Some(n) => {
            super::text::refuse_nul("firm name", n)?;
            if n.chars().count() > 200 {
                return Err(Error::InvalidInput(
                    "firm name is longer than 200 characters".into(),
                ));
            }
            Some(Some(n.to_owned()))
        }
    };
    if let Some(Some(n)) = &name {
        use ops::firms::dsl as f;
        let holder: Option<Uuid> = f::firms
            .filter(f::name.eq(n).and(f::firm_id.ne(firm_id)))
            .select(f::firm_id)
            .first(conn)
            .await
            .optional()?;
        if let Some(other) = holder {
            return Err(Error::InvalidInput(format!(
                "firm name {n:?} is already firm {other}'s"
            )));
        }
    }
    diesel::sql_query(
        "INSERT INTO ops.firms AS f (firm_id, name, weight, paused)
         VALUES ($1, $2, coalesce($3, 1), coalesce($4, false))
         ON CONFLICT (firm_id) DO UPDATE SET
             name = CASE WHEN $5 THEN excluded.name ELSE f.name END,
             weight = coalesce($3, f.weight),
             paused = coalesce($4, f.paused),
             updated_at = ops.now()",
    )
    .bind::<SqlUuid, _>(firm_id)
    .bind::<Nullable<Text>, _>(name.clone().flatten())
    .bind::<Nullable<Integer>, _>(settings.weight)
    .bind::<Nullable<diesel::sql_types::Bool>, _>(settings.paused)
    .bind::<diesel::sql_types::Bool, _>(name.is_some())
    .execute(conn)
    .await?;
    tracing::info!(%firm_id, name = ?name.flatten(), weight = ?settings.weight, paused = ?settings.paused,
                   "firm settings changed");
    Ok(())
}

/// Pauses (or resumes) the whole rail: no demand of any firm is claimed while it is paused.
pub async fn set_rail_paused(conn: &mut AsyncPgConnection, paused: bool) -> Result<()> {
    diesel::sql_query(
        "INSERT INTO ops.rail AS r (only_row, paused) VALUES (true, $1)
         ON CONFLICT (only_row) DO UPDATE SET paused = $1, updated_at = ops.now()",
    )
    .bind::<diesel::sql_types::Bool, _>(paused)
    .execute(conn)
    .await?;
    tracing::info!(paused, "rail pause changed");
    Ok(())
}

/// Whether the whole rail is paused.
pub async fn rail_paused(conn: &mut AsyncPgConnection) -> Result<bool> {
    use ops::rail::dsl as r;
    Ok(r::rail
        .select(r::paused)
        .first::<bool>(conn)
        .await
        .optional()?
        .unwrap_or(false))
}

/// The firms whose demands wait now: the paused ones (and every firm, as `rail`, when the
/// rail is paused). A node keeps this to grant a hold without asking the ledger when only one
/// firm waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paused {
    pub rail: bool,
    pub firms: std::collections::HashSet<Uuid>,
}

impl Paused {
    /// Whether a demand of `firm_id` waits.
    pub fn holds(&self, firm_id: Uuid) -> bool {
        self.rail || self.firms.contains(&firm_id)
    }
}

/// What is paused now (two reads of small tables).
pub async fn paused(conn: &mut AsyncPgConnection) -> Result<Paused> {
    use ops::firms::dsl as f;
    let firms: Vec<Uuid> = f::firms
        .filter(f::paused.eq(true))
        .select(f::firm_id)
        .load(conn)
        .await?;
    Ok(Paused {
        rail: rail_paused(conn).await?,
        firms: firms.into_iter().collect(),
    })
}

/// One demand waiting on a node for a hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub firm_id: Uuid,
    pub class: DemandClass,
    /// How long it has waited since the ledger recorded it.
    pub waited: std::time::Duration,
    /// This node's claims of the firm granted and not yet visible as running.
    pub pending: u32,
}

/// The next `count` claims among `candidates` (their indexes, in the order they take holds),
/// by the ledger's order (`ops.fair_order`; see the module): the first is the demand the rules
/// put first, and each pick counts as one more build of its firm for the picks after it.
/// Fewer when fewer may go (the rail or a candidate's firm paused).
/// Why one call: a node's holds come free several at once as builds end, and asking once per
/// hold made each wait for the answer before it, so claims reached the ledger a few at a time.
pub async fn order(
    conn: &mut AsyncPgConnection,
    candidates: &[Candidate],
    promote_after: std::time::Duration,
    count: usize,
) -> Result<Vec<usize>> {
    if candidates.is_empty() || count == 0 {
        return Ok(Vec::new());
    }
    let firms: Vec<Uuid> = candidates.iter().map(|c| c.firm_id).collect();
    let classes: Vec<&str> = candidates.iter().map(|c| c.class.as_str()).collect();
    let waited: Vec<f64> = candidates.iter().map(|c| c.waited.as_secs_f64()).collect();
    let pending: Vec<i32> = candidates
        .iter()
        .map(|c| i32::try_from(c.pending).unwrap_or(i32::MAX))
        .collect();
    let row = super::sql::fair_order(
        firms,
        classes,
        waited,
        pending,
        promote_after.as_secs_f64(),
        i32::try_from(count).unwrap_or(i32::MAX),
    )
    .get_result::<super::sql::Numbers>(conn)
    .await?;
    let mut seen = vec![false; candidates.len()];
    Ok(row
        .numbers
        .into_iter()
        .filter_map(|i| usize::try_from(i?).ok()?.checked_sub(1))
        .filter(|&i| i < candidates.len() && !std::mem::replace(&mut seen[i], true))
        .take(count)
        .collect())
}

/// The firms and their load, as rows `v` to order or filter. Unserved counts live, unarchived
/// matters whose demand is not landed; the oldest interactive demand is the oldest interactive
/// fact the rail hears of such a matter recorded after the claim of its last landed frame began
/// (the facts that frame could not have read). Only unserved and running rows are read, never
/// every job row.
macro_rules! firms_sql {
    ($known:literal) => {
        concat!(
            "WITH RECURSIVE record_firms AS (
    -- Each firm of the record once, one probe per firm (a loose scan of the primary key).
    (SELECT m.firm_id FROM record.matters m ORDER BY m.firm_id LIMIT 1)
    UNION ALL
    SELECT (SELECT m.firm_id FROM record.matters m WHERE m.firm_id > t.firm_id
             ORDER BY m.firm_id LIMIT 1)
      FROM record_firms t WHERE t.firm_id IS NOT NULL
), unserved AS (
    SELECT j.firm_id, j.matter_id, j.landed_generation
      FROM ops.matter_frame_jobs j
     WHERE j.landed_generation < j.requested_generation
       AND NOT ops.is_archived(j.firm_id, j.matter_id)
), waiting AS (
    SELECT u.firm_id, count(*) AS unserved,
           max(extract(epoch FROM ops.now() - (
               SELECT min(o.created_at) FROM ops.domain_event_outbox o
                WHERE o.firm_id = u.firm_id AND o.matter_id = u.matter_id
                  AND o.demand_class = 'interactive'
                  AND o.event_name IN ('matter.created', 'document.uploaded', 'brief.requested')
                  AND o.created_at > coalesce((SELECT r.started_at FROM ops.matter_frame_runs r
                                                WHERE r.firm_id = u.firm_id
                                                  AND r.matter_id = u.matter_id
                                                  AND r.token = u.landed_generation),
                                               '-infinity')))::float8) AS oldest
      FROM unserved u
     GROUP BY u.firm_id
), running AS (
    SELECT j.firm_id, count(*) AS running
      FROM ops.matter_frame_jobs j
     WHERE j.run_status = 'running' AND j.lease_expires_at >= ops.now()
     GROUP BY j.firm_id
), known AS (",
            $known,
            ")
SELECT v.* FROM (
    SELECT k.firm_id, f.name, coalesce(f.weight, 1) AS weight,
           coalesce(f.paused, false) AS paused,
           coalesce(w.unserved, 0) AS unserved, coalesce(r.running, 0) AS running,
           w.oldest AS oldest_interactive_s
      FROM known k
           LEFT JOIN ops.firms f ON f.firm_id = k.firm_id
           LEFT JOIN waiting w ON w.firm_id = k.firm_id
           LEFT JOIN running r ON r.firm_id = k.firm_id
) v"
        )
    };
}

/// Every firm of the record, or with a settings row, unserved demand or a build running, with
/// what an operator watches, named ones first by name.
pub async fn firms(conn: &mut AsyncPgConnection) -> Result<Vec<FirmView>> {
    Ok(diesel::sql_query(concat!(
        firms_sql!(
            "SELECT firm_id FROM ops.firms
             UNION SELECT firm_id FROM record_firms WHERE firm_id IS NOT NULL
             UNION SELECT firm_id FROM waiting
             UNION SELECT firm_id FROM running"
        ),
        " ORDER BY v.name IS NULL, v.name, v.firm_id"
    ))
    .load(conn)
    .await?)
}

/// At most `limit` firms, those whose oldest unserved interactive demand is oldest first (then
/// the most unserved matters): the label set of the per-firm metrics, bounded however many
/// firms a fleet serves.
pub async fn busiest(conn: &mut AsyncPgConnection, limit: i64) -> Result<Vec<FirmView>> {
    Ok(diesel::sql_query(concat!(
        firms_sql!("SELECT firm_id FROM waiting UNION SELECT firm_id FROM running"),
        " ORDER BY v.oldest_interactive_s DESC NULLS LAST, v.unserved DESC, v.firm_id LIMIT $1"
    ))
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// One firm, as [`firms`] lists it; `None` when the ledger knows nothing of it.
pub async fn firm(conn: &mut AsyncPgConnection, firm_id: Uuid) -> Result<Option<FirmView>> {
    Ok(firms(conn)
        .await?
        .into_iter()
        .find(|f| f.firm_id == firm_id))
}

/// The age of the oldest unserved interactive demand of any firm (0: none): the alert.
pub fn oldest_interactive(firms: &[FirmView]) -> f64 {
    firms
        .iter()
        .filter_map(|f| f.oldest_interactive_s)
        .fold(0.0, f64::max)
}

/// The firm an operator names: a firm id, or a firm's name (exact, then case-insensitive).
pub async fn resolve(conn: &mut AsyncPgConnection, name_or_id: &str) -> Result<Uuid> {
    let s = name_or_id.trim();
    find(conn, s).await?.ok_or_else(|| {
        Error::InvalidInput(format!(
            "no firm is named {s:?} (give a firm id, or name the firm first: briefrail firm set --firm <id> --name ...)"
        ))
    })
}

/// [`resolve`], `None` for a name no firm has (a page answers 404 for it, a filter 400).
pub async fn find(conn: &mut AsyncPgConnection, name_or_id: &str) -> Result<Option<Uuid>> {
    let s = name_or_id.trim();
    if let Ok(id) = Uuid::parse_str(s) {
        return Ok(Some(id));
    }
    use ops::firms::dsl as f;
    let exact: Option<Uuid> = f::firms
        .filter(f::name.eq(s))
        .select(f::firm_id)
        .first(conn)
        .await
        .optional()?;
    if exact.is_some() {
        return Ok(exact);
    }
    let folded: Vec<Uuid> = diesel::sql_query(
        "SELECT firm_id FROM ops.firms WHERE lower(name) = lower($1) ORDER BY firm_id LIMIT 2",
    )
    .bind::<Text, _>(s)
    .load::<FirmIdRow>(conn)
    .await?
    .into_iter()
    .map(|r| r.firm_id)
    .collect();
    match folded.as_slice() {
        [one] => Ok(Some(*one)),
        [] => Ok(None),
        _ => Err(Error::InvalidInput(format!(
            "more than one firm is named {s:?} in other letter cases: give the exact name or the firm id"
        ))),
    }
}

#[derive(QueryableByName)]
struct FirmIdRow {
    #[diesel(sql_type = SqlUuid)]
    firm_id: Uuid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_reads_back_what_it_writes_and_refuses_other_names() {
        for c in [DemandClass::Interactive, DemandClass::Background] {
            assert_eq!(DemandClass::parse(c.as_str()).ok(), Some(c));
        }
        let e = DemandClass::parse("urgent").err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("\"urgent\"") && e.contains("interactive")),
            "{e:?}"
        );
        assert!(DemandClass::Interactive > DemandClass::Background);
        assert_eq!(DemandClass::from_stored("future"), DemandClass::Interactive);
    }

    #[test]
    fn a_paused_rail_holds_every_firm() {
        let firm = Uuid::new_v4();
        let mut p = Paused::default();
        assert!(!p.holds(firm));
        p.firms.insert(firm);
        assert!(p.holds(firm) && !p.holds(Uuid::new_v4()));
        p.rail = true;
        assert!(p.holds(Uuid::new_v4()));
    }
}
