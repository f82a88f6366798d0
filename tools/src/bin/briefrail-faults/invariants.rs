//! What must hold once the system is quiet, each invariant with the catalogue rows it guards.
//! Every check is a query over the ledger's tables (or the broker's queues) that returns one
//! line per violation, naming matter, token and run.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::world::World;

pub struct Verdict {
    pub name: &'static str,
    pub rows: Vec<u8>,
    pub checked: i64,
    pub violations: Vec<String>,
}

/// A message found in the dead-letter queue.
pub struct DeadLetter {
    pub message_id: Option<String>,
    pub reason: String,
    pub event_id: Option<Uuid>,
}

pub async fn check_all(w: &World, dead: &[DeadLetter], stranded: Vec<String>) -> Vec<Verdict> {
    let frames = w.count("SELECT count(*) AS n FROM ops.matter_frames").await;
    let runs = w
        .count("SELECT count(*) AS n FROM ops.matter_frame_runs")
        .await;
    let jobs = w
        .count("SELECT count(*) AS n FROM ops.matter_frame_jobs")
        .await;
    let events = w
        .count("SELECT count(*) AS n FROM ops.domain_event_outbox")
        .await;
    let mut v = vec![
        Verdict {
            name: "I1 every frame's generation is the token of a run recorded landed",
            rows: vec![1, 3, 5, 7, 29],
            checked: frames,
            violations: w.lines(
                "SELECT format('matter %s: frame %s has run outcome %s', f.matter_id, f.generation, coalesce(r.outcome, 'none')) AS what
                   FROM ops.matter_frames f LEFT JOIN ops.matter_frame_runs r
                     ON r.firm_id = f.firm_id AND r.matter_id = f.matter_id AND r.token = f.generation
                  WHERE r.outcome IS DISTINCT FROM 'landed' OR r.run_id <> f.run_id").await,
        },
        Verdict {
            name: "I1 no fenced or lease_expired run has a frame",
            rows: vec![1, 2, 5, 6],
            checked: runs,
            violations: w.lines(
                "SELECT format('matter %s: %s run token %s has a frame', r.matter_id, r.outcome, r.token) AS what
                   FROM ops.matter_frame_runs r JOIN ops.matter_frames f
                     ON f.firm_id = r.firm_id AND f.matter_id = r.matter_id AND f.generation = r.token AND f.run_id = r.run_id
                  WHERE r.outcome IN ('fenced', 'lease_expired')").await,
        },
        Verdict {
            name: "I1 frames of each matter land in increasing generation order",
            rows: vec![1],
            checked: frames,
            violations: w.lines(
                "SELECT format('matter %s: frame %s landed after frame %s', matter_id, generation, prev) AS what FROM (
                   SELECT matter_id, generation, lag(generation) OVER (PARTITION BY firm_id, matter_id ORDER BY created_at, generation) AS prev
                     FROM ops.matter_frames) x WHERE prev >= generation").await,
        },
        Verdict {
            name: "I2 no token number served to two claims that both landed",
            rows: vec![2, 7, 29],
            checked: runs,
            violations: w.lines(
                "SELECT format('matter %s: token %s landed by %s runs', matter_id, token, count(DISTINCT run_id)) AS what
                   FROM ops.matter_frame_runs WHERE outcome = 'landed'
                  GROUP BY firm_id, matter_id, token HAVING count(DISTINCT run_id) > 1").await,
        },
        Verdict {
            name: "I3 every matter's landed_generation caught up with requested_generation",
            rows: vec![3, 4, 8, 9, 22, 30, 33],
            checked: jobs,
            violations: w.lines(
                "SELECT format('matter %s: %s, requested %s, landed %s, failures %s', matter_id, run_status, requested_generation, landed_generation, consecutive_failures) AS what
                   FROM ops.matter_frame_jobs WHERE landed_generation < requested_generation OR run_status <> 'idle'").await,
        },
        Verdict {
            name: "no run left running without a live claim",
            rows: vec![3, 8, 33],
            checked: runs,
            violations: w.lines(
                "SELECT format('matter %s: run %s (token %s, %s) still running', r.matter_id, r.run_id, r.token, r.node_id) AS what
                   FROM ops.matter_frame_runs r
                  WHERE r.outcome = 'running' AND NOT EXISTS (
                        SELECT 1 FROM ops.matter_frame_jobs j
                         WHERE j.firm_id = r.firm_id AND j.matter_id = r.matter_id
                           AND j.run_status = 'running' AND j.claimed_run_id = r.run_id)").await,
        },
        Verdict {
            name: "I4 every outbox row published",
            rows: vec![18, 19, 20, 21],
            checked: events,
            violations: w.lines(
                "SELECT format('event %s (%s, seq %s) unpublished: %s', event_id, event_name, seq, coalesce(last_error, '')) AS what
                   FROM ops.domain_event_outbox WHERE published_at IS NULL").await,
        },
        Verdict {
            name: "I5 every event consumed once in effect",
            rows: vec![18, 23, 24],
            checked: events,
            violations: w.lines(
                "SELECT format('event %s (%s) consumed %s times', o.event_id, o.event_name, count(c.event_id)) AS what
                   FROM ops.domain_event_outbox o LEFT JOIN ops.consumed_events c ON c.event_id = o.event_id AND c.consumer = 'brief-rail'
                  GROUP BY o.event_id, o.event_name HAVING count(c.event_id) <> 1").await,
        },
        Verdict {
            name: "no message stranded in the trigger queue",
            rows: vec![19, 32],
            checked: 1,
            violations: stranded,
        },
    ];
    v.push(builds_per_burst(w).await);
    v.push(dead_letters(w, dead));
    v.push(lease_expiries(w).await);
    v.push(lost_claims(w).await);
    v.push(deadlocks(w));
    v
}

/// I6: landed builds that started between a burst on a matter and its next burst: at most two,
/// plus one per build of that span a fault cost (fenced, expired, failed or handed back).
async fn builds_per_burst(w: &World) -> Verdict {
    let mut per_matter: BTreeMap<Uuid, Vec<DateTime<Utc>>> = BTreeMap::new();
    for (m, at) in &w.bursts {
        per_matter.entry(*m).or_default().push(*at);
    }
    let mut over = Vec::new();
    let (mut straddling, mut straddling_builds) = (0usize, 0i64);
    for (m, ats) in &mut per_matter {
        ats.sort();
        for (i, at) in ats.iter().enumerate() {
            let until = ats
                .get(i + 1)
                .map(|t| format!("'{}'", t.to_rfc3339()))
                .unwrap_or_else(|| "'infinity'".into());
            let line = w
                .lines(&format!(
                    "SELECT format('%s %s', count(*) FILTER (WHERE outcome = 'landed'),
                                   count(*) FILTER (WHERE outcome NOT IN ('landed', 'running'))) AS what
                       FROM ops.matter_frame_runs WHERE matter_id = '{m}'
                        AND started_at >= '{}' AND started_at < {until}",
                    at.to_rfc3339()
                ))
                .await;
            let nums: Vec<i64> = line
                .first()
                .map(|l| l.split(' ').filter_map(|x| x.parse().ok()).collect())
                .unwrap_or_default();
            let (landed, lost) = (
                nums.first().copied().unwrap_or(-1),
                nums.get(1).copied().unwrap_or(0),
            );
            // A logical move inside the span: facts recorded before it carry the old cluster's
            // transaction ids, which no snapshot of the new cluster judges covered (see
            // docs/protocol.md, "Coverage, and why it survives a move"), so each one consumed
            // after the move during a build costs a follow-up. Counted apart, not excused silently.
            let moved = w.windows.iter().any(|win| {
                win.fault == crate::schedule::Fault::LogicalMove
                    && win.from >= *at
                    && ats.get(i + 1).is_none_or(|next| win.from < *next)
            });
            if moved {
                straddling += 1;
                straddling_builds += landed.max(0);
                continue;
            }
            if landed < 0 || landed > 2 + lost {
                let detail = w.lines(&format!(
                    "SELECT string_agg(format('token %s %s on %s at %s (%s events)', token, outcome, node_id,
                                              to_char(started_at, 'MI:SS.MS'), cardinality(event_ids)), '; ' ORDER BY token) AS what
                       FROM ops.matter_frame_runs WHERE matter_id = '{m}' AND started_at >= '{}'::timestamptz - interval '2 seconds' AND started_at < {until}",
                    at.to_rfc3339())).await;
                over.push(format!(
                    "matter {m}: burst at {} cost {landed} landed builds ({lost} lost to faults): {}",
                    at.format("%M:%S%.3f"),
                    detail.join("")
                ));
            }
        }
    }
    println!(
        "bursts straddling a logical move: {straddling}, with {straddling_builds} landed builds \
         (not held to I6: the new cluster judges no fact of the old one covered)"
    );
    Verdict {
        name: "I6 builds per burst at most two, plus one per build a fault cost",
        rows: vec![9, 10],
        checked: w.bursts.len() as i64,
        violations: over,
    }
}

/// I7: the dead-letter queue holds exactly the suite's malformed and forged input (each at
/// least once) and nudges for events a restore lost; nothing valid, nothing of the rail's own.
fn dead_letters(w: &World, dead: &[DeadLetter]) -> Verdict {
    let mut violations = Vec::new();
    for d in dead {
        let ours = d
            .message_id
            .as_deref()
            .and_then(|id| w.messages.iter().find(|m| m.message_id == id));
        match ours {
            Some(m) if m.dead => {}
            Some(m) => violations.push(format!(
                "valid message {} was dead-lettered: {}",
                m.message_id, d.reason
            )),
            None if d.event_id.is_some_and(|e| w.lost.events.contains(&e)) => {}
            None => violations.push(format!(
                "dead letter {} (event {}): {}",
                d.message_id.as_deref().unwrap_or("without id"),
                d.event_id
                    .map(|e| e.to_string())
                    .unwrap_or("unreadable".into()),
                d.reason
            )),
        }
    }
    for m in w.messages.iter().filter(|m| m.dead) {
        if !dead
            .iter()
            .any(|d| d.message_id.as_deref() == Some(&m.message_id))
        {
            violations.push(format!(
                "{} never reached the dead-letter queue",
                m.message_id
            ));
        }
    }
    Verdict {
        name: "I7 dead letters only for malformed or forged input, each of it dead-lettered",
        rows: vec![22, 25, 27, 28],
        checked: dead.len() as i64,
        violations,
    }
}

/// A lease runs out only when a fault hit its holder (or every node): a healthy build is never
/// expired by another node's settings or clock.
async fn lease_expiries(w: &World) -> Verdict {
    let rows = w
        .lines(
            "SELECT concat_ws('|', node_id, extract(epoch FROM heartbeat_at), extract(epoch FROM coalesce(finished_at, heartbeat_at)), matter_id, token) AS what
               FROM ops.matter_frame_runs WHERE outcome = 'lease_expired'",
        )
        .await;
    let epoch = |t: DateTime<Utc>| t.timestamp_micros() as f64 / 1e6;
    let mut violations = Vec::new();
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rows {
        let f: Vec<&str> = r.split('|').collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok());
        let (Some(node), Some(beat), Some(end)) = (f.first(), num(1), num(2)) else {
            violations.push(format!("unreadable run: {r}"));
            continue;
        };
        // A second of slack after a fault ends: the holder's next heartbeat was due.
        let explained = w.windows.iter().find(|win| {
            win.node.as_deref().is_none_or(|n| n == *node)
                && end >= epoch(win.from)
                && beat <= epoch(win.to) + 1.0
        });
        if let Some(win) = explained {
            *by.entry(win.fault.name()).or_insert(0usize) += 1;
        } else {
            violations.push(format!(
                "matter {} token {} on {node}: lease expired (last heartbeat {beat}) with no fault on its node",
                f.get(3).unwrap_or(&""),
                f.get(4).unwrap_or(&"")
            ));
        }
    }
    println!("lease expiries, by the fault that explains them: {by:?}");
    Verdict {
        name: "lease expiries only under a fault on the holder",
        rows: vec![5, 14, 16, 31],
        checked: rows.len() as i64,
        violations,
    }
}

/// After a logical move, no claim of the lost past lands in the new cluster.
async fn lost_claims(w: &World) -> Verdict {
    let mut violations = Vec::new();
    let landed = w
        .lines("SELECT run_id::text AS what FROM ops.matter_frames")
        .await;
    for r in &landed {
        if let Ok(id) = r.parse::<Uuid>()
            && w.lost.tokens.iter().any(|(_, _, run)| *run == id)
        {
            violations.push(format!("run {id} of the lost past landed a frame"));
        }
    }
    Verdict {
        name: "no claim of the lost past landed after the move",
        rows: vec![28, 29],
        checked: w.lost.tokens.len() as i64,
        violations,
    }
}

/// Postgres logged no deadlock in any cluster the ledger lived in.
fn deadlocks(w: &World) -> Verdict {
    let mut violations = Vec::new();
    for c in &w.clusters {
        for l in c
            .log_text()
            .lines()
            .filter(|l| l.contains("deadlock detected"))
        {
            violations.push(format!("cluster {}: {l}", c.name));
        }
    }
    Verdict {
        name: "Postgres reports no deadlock",
        rows: vec![11, 16],
        checked: w.clusters.len() as i64,
        violations,
    }
}
