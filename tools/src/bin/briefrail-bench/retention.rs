//! Retention at the size of a long-lived install: `rows` job rows, `rows` runs (ten per matter
//! over a tenth of the matters, every run but each matter's latest past its age) and `rows`
//! outbox events, each published and consumed, all past their age, with their inbox rows.
//! Measured: the claim→commit rate of other matters with and without a retention pass running
//! beside it (the baseline is the same loop in the same run), the longest retention statement
//! (each is its own transaction: the longest any row lock is held), rows removed per second,
//! and the sweep and reconcile statements at that size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use briefrail::db::Pool;
use briefrail::ledger::inbox::BRIEF_RAIL;
use briefrail::ledger::retention as r;
use briefrail::ledger::transitions::{self as t, ClaimRequest};
use briefrail::ledger::{ClaimKind, Frame};
use serde_json::json;
use uuid::Uuid;

use diesel_async::{AsyncConnection, SimpleAsyncConnection};

use super::{NoOp, R, node, pct, scalar};

/// Synthetic ids in key order (loading is append-only, so 10,000,000 rows load in minutes).
fn seq_uuid(prefix: u32, i: &str) -> String {
    format!("(lpad(to_hex({prefix}), 8, '0') || lpad(to_hex({i}), 24, '0'))::uuid")
}

/// Loads the old ledger: job rows of firm 1, runs, events and inbox rows, on a connection of
/// its own (its session settings, no statement timeout and no synchronous commit for the load,
/// must not reach the pool the measurement uses).
async fn load(url: &str, rows: usize) -> R<()> {
    let firm = "'00000000-0000-0000-0000-000000000001'::uuid";
    let matter = seq_uuid(1, "i");
    let run_matter = seq_uuid(1, "(i / 10 + 1)");
    let run = seq_uuid(2, "i");
    let event = seq_uuid(3, "i");
    let event_matter = seq_uuid(1, "(i % 1000000 + 1)");
    let t0 = Instant::now();
    let mut c = diesel_async::AsyncPgConnection::establish(url).await?;
    c.batch_execute(&format!(
        "SET synchronous_commit = off; SET statement_timeout = 0;
             INSERT INTO ops.matter_frame_jobs (firm_id, matter_id, requested_generation,
                    claimed_generation, landed_generation, run_status, claimed_at)
             SELECT {firm}, {matter}, 10, 10, 10, 'idle', ops.now() - interval '40 days'
               FROM generate_series(1, {rows}) i;
             INSERT INTO ops.matter_frame_runs (run_id, firm_id, matter_id, token, node_id,
                    started_at, heartbeat_at, finished_at, outcome)
             SELECT {run}, {firm}, {run_matter}, i % 10 + 1, 'old-node',
                    ops.now() - interval '60 days' + make_interval(hours => i % 10),
                    ops.now() - interval '60 days', ops.now() - interval '60 days', 'landed'
               FROM generate_series(0, {rows} - 1) i;
             INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name,
                    created_at, published_at)
             SELECT {event}, {firm}, {event_matter}, 'document.uploaded',
                    ops.now() - interval '60 days' + make_interval(secs => i * 0.2),
                    ops.now() - interval '60 days' + make_interval(secs => i * 0.2 + 1)
               FROM generate_series(1, {rows}) i;
             INSERT INTO ops.consumed_events (consumer, event_id, consumed_at)
             SELECT 'brief-rail', {event}, ops.now() - interval '60 days'
               FROM generate_series(1, {rows}) i;
             UPDATE ops.matter_frame_jobs SET run_status = 'running', claimed_at = ops.now(),
                    lease_seconds = 10800, lease_expires_at = ops.now() + interval '3 hours'
              WHERE firm_id = {firm} AND matter_id IN (
                    SELECT matter_id FROM ops.matter_frame_jobs WHERE firm_id = {firm} LIMIT 50);
             UPDATE ops.matter_frame_jobs SET requested_generation = 11,
                    updated_at = ops.now() - interval '1 hour'
              WHERE firm_id = {firm} AND run_status = 'idle' AND matter_id IN (
                    SELECT matter_id FROM ops.matter_frame_jobs
                     WHERE firm_id = {firm} AND run_status = 'idle' LIMIT 50);"
    ))
    .await?;
    // Not in the batch above: a multi-statement string is one implicit transaction, and
    // VACUUM refuses to run inside one.
    c.batch_execute(
        "VACUUM ANALYZE ops.matter_frame_jobs, ops.matter_frame_runs, ops.domain_event_outbox,
                        ops.consumed_events",
    )
    .await?;
    drop(c);
    println!(
        "  (loaded {rows} job rows, runs, events and inbox rows in {:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Claim→commit cycles of `matters` by `conns` tasks for `window`: cycles per second, and the
/// slowest cycle in ms (a cycle that waited on a lock shows here).
async fn cycles(
    pool: &Pool,
    conns: usize,
    matters: &[(Uuid, Uuid)],
    window: Duration,
) -> R<(f64, f64)> {
    let stop = Instant::now() + window;
    let per = matters.len() / conns;
    let mut tasks = Vec::new();
    for w in 0..conns {
        let mine = matters[w * per..(w + 1) * per].to_vec();
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let (mut n, mut slowest) = (0u64, 0f64);
            'outer: loop {
                for (f, m) in &mine {
                    if Instant::now() >= stop {
                        break 'outer;
                    }
                    let t = Instant::now();
                    let mut c = pool.get().await.map_err(|e| e.to_string())?;
                    let req = ClaimRequest {
                        firm_id: *f,
                        matter_id: *m,
                        lease: Duration::from_secs(60),
                        node_id: "bench".into(),
                        trace_id: None,
                        event_ids: vec![],
                        kind: ClaimKind::NewDemand,
                        max_attempts: 5,
                    };
                    let claim = t::claim(&mut c, &req).await.map_err(|e| e.to_string())?;
                    drop(c);
                    if let Some(claim) = claim {
                        t::commit(&pool, &claim, "bench", &Frame::new(json!({})))
                            .await
                            .map_err(|e| e.to_string())?;
                        n += 1;
                    }
                    slowest = slowest.max(t.elapsed().as_secs_f64() * 1e3);
                }
            }
            Ok::<_, String>((n, slowest))
        }));
    }
    let (mut n, mut slowest) = (0u64, 0f64);
    for task in tasks {
        let (k, s) = task.await??;
        n += k;
        slowest = slowest.max(s);
    }
    Ok((n as f64 / window.as_secs_f64(), slowest))
}

/// Runs each retention statement, with nothing old enough to go, on every pooled connection.
async fn warm_retention(pool: &Pool) -> R<()> {
    let century = Duration::from_secs(100 * 365 * 86_400);
    let mut held = Vec::new();
    for _ in 0..pool.state().connections.max(1) {
        let Ok(c) = tokio::time::timeout(Duration::from_millis(200), pool.get()).await else {
            break;
        };
        let mut c = c?;
        r::prune_events(&mut c, BRIEF_RAIL, century, 1).await?;
        r::prune_runs(&mut c, century, 1).await?;
        held.push(c);
    }
    Ok(())
}

/// Medians (ms) of the sweep and reconcile statements over 11 runs.
pub async fn sweep_and_reconcile_ms(pool: &Pool) -> R<(f64, f64)> {
    let mut c = pool.get().await?;
    let (mut sweep, mut rec) = (Vec::new(), Vec::new());
    for _ in 0..11 {
        let t = Instant::now();
        // Each running row's lease (3 hours, on the row) has hours left: nothing expires, so
        // every pass scans the same rows.
        t::sweep(&mut c, 500).await?;
        sweep.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        t::unserved(&mut c, 5, 500, Duration::from_secs(1)).await?;
        rec.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    sweep.sort_by(|a, b| a.total_cmp(b));
    rec.sort_by(|a, b| a.total_cmp(b));
    Ok((pct(&sweep, 0.5), pct(&rec, 0.5)))
}

/// The whole measurement; prints its rows and returns them for `bench/results.json`.
pub async fn at_scale(
    url: &str,
    pool: &Pool,
    rows: usize,
    window: Duration,
) -> R<serde_json::Value> {
    let loaded = scalar(pool, "SELECT count(*) AS n FROM ops.matter_frame_jobs").await?;
    if loaded >= rows as i64 {
        println!("  (a kept database with {loaded} job rows: not loaded again)");
    } else {
        load(url, rows).await?;
    }
    let conns = 4;
    let firm = Uuid::new_v4();
    let matters: Vec<(Uuid, Uuid)> = (0..400).map(|_| (firm, Uuid::new_v4())).collect();
    // Warm up, then the baseline: the same loop with no pass beside it. Every pooled
    // connection runs each retention statement once with nothing old enough to remove: the
    // first call on a fresh connection loads the catalog and plans the function (about 100 ms
    // here, before it locks any row), which is a connection's cost, not a pass's.
    cycles(pool, conns, &matters, Duration::from_secs(2)).await?;
    warm_retention(pool).await?;
    let (alone, alone_slowest) = cycles(pool, conns, &matters, window).await?;
    let nd = node(url, pool, 1, Arc::new(NoOp(Duration::ZERO)), |s| {
        s.retention.events_days = 30.0;
        s.retention.runs_days = 30.0;
        s.retention.frames_keep = 0;
        // The pass stops at its budget: the window.
        s.retention.interval_seconds = window.as_secs_f64();
    })
    .await?;
    let nd_batch = nd.context().settings.retention.batch;
    let started = Instant::now();
    let (pass, beside) = tokio::join!(nd.retain_now(), cycles(pool, conns, &matters, window));
    let (pass, (beside, beside_slowest)) = (pass?, beside?);
    let pass_secs = started.elapsed().as_secs_f64();
    nd.shutdown_within(Duration::from_secs(1)).await;
    let (sweep, rec) = sweep_and_reconcile_ms(pool).await?;
    let jobs = scalar(pool, "SELECT count(*) AS n FROM ops.matter_frame_jobs").await?;
    let removed = pass.events + pass.inbox_rows + pass.runs;
    let longest = pass.longest_statement.as_secs_f64() * 1e3;
    let ratio = beside / alone;
    let row = |what: String, ours: String, base: String, verdict: String| {
        println!("{what:<58} {ours:>10} {base:>10} {verdict:>7}");
    };
    row(
        format!("claim→commit/s during a retention pass ({rows} rows each)"),
        format!("{beside:.0}"),
        format!("{alone:.0}"),
        format!("{ratio:.2}"),
    );
    row(
        "  slowest claim→commit cycle, ms (pass beside vs alone)".into(),
        format!("{beside_slowest:.1}"),
        format!("{alone_slowest:.1}"),
        String::new(),
    );
    row(
        "  median retention statement, ms".into(),
        format!("{:.1}", pass.median_statement.as_secs_f64() * 1e3),
        String::new(),
        String::new(),
    );
    let p99 = pass.p99_statement.as_secs_f64() * 1e3;
    row(
        "  p99 retention statement, ms".into(),
        format!("{p99:.1}"),
        "< 100".into(),
        if p99 < 100.0 { "ok" } else { "LONG" }.into(),
    );
    row(
        "  longest retention statement (its locks' lifetime), ms".into(),
        format!("{longest:.1}"),
        "< 100".into(),
        if longest < 100.0 { "ok" } else { "LONG" }.into(),
    );
    row(
        format!("  rows removed per second ({} statements)", pass.statements),
        format!("{:.0}", removed as f64 / pass_secs),
        String::new(),
        String::new(),
    );
    for (what, ms) in [("sweep", sweep), ("reconcile", rec)] {
        row(
            format!("{what} statement, {jobs} job rows, median ms"),
            format!("{ms:.2}"),
            "< 50".into(),
            if ms < 50.0 { "ok" } else { "SLOW" }.into(),
        );
    }
    Ok(json!({
        "rows": rows,
        "job_rows": jobs,
        "window_s": window.as_secs_f64(),
        "claim_commit_per_s": {"during_pass": beside, "alone": alone, "ratio": ratio},
        "slowest_cycle_ms": {"during_pass": beside_slowest, "alone": alone_slowest},
        "longest_statement_ms": longest,
        "median_statement_ms": pass.median_statement.as_secs_f64() * 1e3,
        "p99_statement_ms": p99,
        "batch": nd_batch,
        "statements": pass.statements,
        "removed": {"events": pass.events, "inbox_rows": pass.inbox_rows, "runs": pass.runs},
        "removed_per_s": removed as f64 / pass_secs,
        "sweep_ms": sweep,
        "reconcile_ms": rec,
    }))
}
