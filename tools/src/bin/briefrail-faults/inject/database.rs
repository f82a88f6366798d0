//! Faults between the nodes and the ledger: stalls and cuts at COMMIT (through each node's
//! proxy), partitions, backend kills, an immediate restart, a refused frame, a logical move.

use std::time::{Duration, Instant};

use super::{busy_nodes, fired, wait_busy_node};
use crate::postgres::PgCluster;
use crate::schedule::Fault;
use crate::world::{DB_NAME, World};

/// Row 2: the node's build COMMIT is held by its proxy (the transaction stays open, holding
/// its row locks, as if the process stopped between its CAS and COMMIT); the database's
/// idle-in-transaction timeout must end that session, and the node settle the outcome.
pub async fn stall_before_commit(w: &mut World) -> Result<String, String> {
    let idx = wait_busy_node(w, |_| true).await?;
    let id = w.nodes[idx].id().to_owned();
    let kills = w.proxies[idx].stats().idle_in_transaction_kills;
    let rx = w.proxies[idx].arm_hold_commit();
    let from = w.db_now().await;
    if fired(w, rx, Duration::from_secs(20)).await.is_none() {
        w.proxies[idx].disarm();
        return Err(format!("{id} sent no build COMMIT within 20 s"));
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while w.proxies[idx].stats().idle_in_transaction_kills == kills {
        if Instant::now() > deadline {
            return Err(format!(
                "the database did not end {id}'s stalled transaction within 15 s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w.window(Fault::StallInCommit, Some(&id), from).await;
    Ok(format!(
        "{id}'s build COMMIT held until the database ended the session (25P03)"
    ))
}

/// Row 5: every byte between the holder of a build and the database stopped for twice its
/// lease: its heartbeats cannot renew the lease, another node may take the matter over, and
/// the holder must abort cleanly once it hears again.
pub async fn partition(w: &mut World) -> Result<String, String> {
    // As with SIGSTOP: a build that ended before the cut makes no zombie; heal and retry.
    for _ in 0..3 {
        let idx = wait_busy_node(w, |n| n.spec.lease_seconds <= 2.0).await?;
        let id = w.nodes[idx].id().to_owned();
        let hold = Duration::from_secs_f64(w.nodes[idx].spec.lease_seconds * 2.0 + 0.5);
        let from = w.db_now().await;
        w.proxies[idx].partition(true);
        if !busy_nodes(w).await.contains(&id) {
            w.proxies[idx].partition(false);
            continue;
        }
        tokio::time::sleep(hold).await;
        w.proxies[idx].partition(false);
        w.window(Fault::Partition, Some(&id), from).await;
        return Ok(format!(
            "{id} cut off from the database for {:.1} s (lease {} s) mid-build",
            hold.as_secs_f64(),
            w.nodes[idx].spec.lease_seconds
        ));
    }
    Err("three times the build ended before its holder was cut off".into())
}

/// Row 7: the build's COMMIT reaches the database, the answer never reaches the node (its
/// connection is cut): the node must settle the outcome by reading the frame.
pub async fn commit_answer_lost(w: &mut World) -> Result<String, String> {
    let idx = wait_busy_node(w, |_| true).await?;
    let id = w.nodes[idx].id().to_owned();
    let rx = w.proxies[idx].arm_cut_commit();
    let from = w.db_now().await;
    let Some(committed) = fired(w, rx, Duration::from_secs(20)).await else {
        w.proxies[idx].disarm();
        return Err(format!("{id} sent no build COMMIT within 20 s"));
    };
    w.window(Fault::CommitAnswerLost, Some(&id), from).await;
    Ok(format!(
        "{id}'s build COMMIT {} and its answer cut off",
        if committed {
            "committed"
        } else {
            "failed on the server"
        }
    ))
}

/// Row 8: every briefrail connection of the ledger terminated at once.
pub async fn backend_kill(w: &mut World) -> Result<String, String> {
    let from = w.db_now().await;
    // Right after a restart or a move the nodes may hold no connection yet: demands bring
    // them back, and the kill is tried again for up to ten seconds.
    let deadline = Instant::now() + Duration::from_secs(10);
    let n = loop {
        let n = w
            .count(
                "SELECT count(*) AS n FROM (SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity
                  WHERE application_name = 'briefrail' AND pid <> pg_backend_pid()
                    AND datname = current_database()) x WHERE t",
            )
            .await;
        if n > 0 || Instant::now() > deadline {
            break n;
        }
        let m = w.any_matter();
        w.demand(m, 1).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    w.window(Fault::BackendKill, None, from).await;
    if n <= 0 {
        return Err("no briefrail connection was terminated".into());
    }
    Ok(format!("pg_terminate_backend on {n} briefrail connections"))
}

/// Rows 8 and 33: `pg_ctl restart -m immediate` of the ledger's cluster under load.
pub async fn restart(w: &mut World) -> Result<String, String> {
    let from = w.db_now().await;
    let (before, after) = w.cluster().restart_immediate().await?;
    w.window(Fault::DbRestart, None, from).await;
    Ok(format!(
        "cluster {} restarted -m immediate (postmaster {before} -> {after})",
        w.cluster().name
    ))
}

/// Row 11: 1,000 demands over every matter, recorded at once.
pub async fn wide_load(w: &mut World) -> Result<String, String> {
    let mut demands = vec![0usize; w.matters.len()];
    for _ in 0..1000 {
        demands[w.rng.below(w.matters.len() as u64) as usize] += 1;
    }
    let spread: Vec<_> = w
        .matters
        .iter()
        .copied()
        .zip(demands)
        .filter(|(_, n)| *n > 0)
        .collect();
    let touched = spread.len();
    let at = w.db_now().await;
    for chunk in spread.chunks(50) {
        w.record(chunk).await?;
    }
    w.bursts.extend(spread.iter().map(|(m, _)| (*m, at)));
    w.demands_total += 1000;
    Ok(format!("1000 demands over {touched} matters at once"))
}

/// Row 30: the builder answers, for one matter, a frame the database refuses every time (a
/// \u0000 in jsonb). The run must fail with its error at once (no lease run-out); once the
/// builder is mended, a new demand is served.
pub async fn refused_frame(w: &mut World) -> Result<String, String> {
    let m = w.any_matter();
    let flag = w.dir.join("refuse");
    std::fs::write(&flag, m.to_string()).map_err(|e| format!("{}: {e}", flag.display()))?;
    w.demand(m, 1).await?;
    let sql = format!(
        "SELECT format('%s after %s ms: %s', outcome,
                       (extract(epoch FROM finished_at - started_at) * 1000)::bigint, error) AS what
           FROM ops.matter_frame_runs
          WHERE matter_id = '{m}' AND outcome = 'failed' AND error ILIKE '%unicode%'"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = loop {
        let v = w.lines(&sql).await;
        if let Some(first) = v.into_iter().find(|l| l.starts_with("failed")) {
            break Some(first);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = std::fs::remove_file(&flag);
    w.demand(m, 1).await?;
    let seen = seen.ok_or(format!(
        "matter {m}: no run failed with the database's refusal within 30 s"
    ))?;
    let ms: f64 = seen
        .split(" after ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::MAX);
    if ms > 3000.0 {
        return Err(format!(
            "matter {m}: the refused frame was failed only after {ms} ms (a lease run-out?)"
        ));
    }
    Ok(format!("matter {m}: frame refused, run {seen}"))
}

/// Rows 28 and 29: pg_dump of the ledger while the nodes write, pg_restore into a fresh
/// cluster, then every node's proxy switched to it. What the old cluster recorded after the
/// dump is lost, including claims nodes still hold: a token number is handed out again.
pub async fn logical_move(w: &mut World) -> Result<String, String> {
    let file = w.dir.join(format!("ledger-{}.dump", w.clusters.len()));
    let dumped_at = w.db_now().await;
    w.cluster().dump(DB_NAME, &file).await?;
    let name = format!("{}", (b'a' + w.clusters.len() as u8) as char);
    let next = PgCluster::start(&w.dir, &name).await?;
    next.restore(DB_NAME, &file).await?;
    // A claim taken after the dump must be held at the switch, or no token is lost.
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = |t: chrono::DateTime<chrono::Utc>| {
        format!(
            "SELECT count(*) AS n FROM ops.matter_frame_runs r
               JOIN ops.matter_frame_jobs j ON j.firm_id = r.firm_id AND j.matter_id = r.matter_id
              WHERE r.outcome = 'running' AND j.claimed_run_id = r.run_id
                AND r.started_at > '{}'",
            t.to_rfc3339()
        )
    };
    while w.count(&after(dumped_at)).await <= 0 {
        if Instant::now() > deadline {
            return Err("no claim taken after the dump was held within 30 s".into());
        }
        let m = w.any_matter();
        w.demand(m, 1).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let from = w.db_now().await;
    let old_pool = w.pool.clone();
    let upstream = next.addr();
    let mut cut = 0;
    for p in &w.proxies {
        cut += p.switch_upstream(upstream);
    }
    w.clusters.push(next);
    w.reconnect().await?;
    record_lost_past(w, &old_pool, dumped_at).await;
    drop(old_pool);
    w.window(Fault::LogicalMove, None, from).await;
    let old = w.clusters.len() - 2;
    w.clusters[old].stop().await?;
    Ok(format!(
        "ledger dumped, restored into cluster {name} and {cut} node connections moved there; \
         lost with the old cluster: {} events, {} claims ({} still held)",
        w.lost.events.len(),
        w.lost.tokens.len(),
        w.lost.runs.len()
    ))
}

/// Reads from the old cluster what the new one does not have.
async fn record_lost_past(
    w: &mut World,
    old: &briefrail::db::Pool,
    dumped_at: chrono::DateTime<chrono::Utc>,
) {
    let kept: std::collections::HashSet<String> = w
        .lines("SELECT run_id::text AS what FROM ops.matter_frame_runs")
        .await
        .into_iter()
        .collect();
    let kept_events: std::collections::HashSet<String> = w
        .lines("SELECT event_id::text AS what FROM ops.domain_event_outbox")
        .await
        .into_iter()
        .collect();
    let since = dumped_at - chrono::Duration::seconds(5);
    for l in crate::world::lines(
        old,
        &format!(
            "SELECT concat_ws(' ', matter_id, token, run_id, outcome) AS what
               FROM ops.matter_frame_runs WHERE started_at > '{}'",
            since.to_rfc3339()
        ),
    )
    .await
    {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() != 4 || kept.contains(f[2]) {
            continue;
        }
        if let (Ok(m), Ok(t), Ok(r)) = (f[0].parse(), f[1].parse(), f[2].parse()) {
            w.lost.tokens.push((m, t, r));
            if f[3] == "running" {
                w.lost.runs.insert(r);
            }
        }
    }
    for l in crate::world::lines(
        old,
        &format!(
            "SELECT event_id::text AS what FROM ops.domain_event_outbox WHERE created_at > '{}'",
            since.to_rfc3339()
        ),
    )
    .await
    {
        if !kept_events.contains(&l)
            && let Ok(e) = l.parse()
        {
            w.lost.events.insert(e);
        }
    }
}
