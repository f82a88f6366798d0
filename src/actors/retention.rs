//! Retention passes, run by the sweeper on their own timer (`retention.interval_seconds`):
//! events, then runs, then frames, each in statements of `retention.batch` rows
//! ([`crate::ledger::retention`]). Every statement is its own short transaction, and after
//! each the pass rests [`REST`] times as long as the statement took, so pruning a large
//! backlog takes at most a quarter of one connection's time (and of the WAL it writes) and
//! never a long lock. A pass stops after `retention.interval_seconds` of work, shared equally
//! by the kinds it removes (a large backlog of one never starves another); the next goes on
//! where it stopped (the frame walk keeps its place in [`Retention`]).

use std::time::{Duration, Instant};

use super::context::NodeContext;
use crate::error::Result;
use crate::ledger::retention as r;
use crate::ledger::{MatterRef, inbox::BRIEF_RAIL};

/// How many times a statement's own duration the pass rests after it. Measured in the
/// benchmark: resting as long as the statement (half the time busy) removed 44,000 rows/s of a
/// 10,000,000-row backlog but cost the claims and commits beside it a third of their rate
/// (deletes write much WAL, and every commit waits for its flush).
pub const REST: u32 = 3;

/// What one pass removed, and the longest statement it ran (the longest any row lock was held).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionReport {
    /// Consumed outbox events removed.
    pub events: i64,
    /// Inbox (dedupe) rows removed, once no redelivery can still name them.
    pub inbox_rows: i64,
    /// Finished runs removed.
    pub runs: i64,
    /// Superseded frames removed (only when `retention` keeps a limited history).
    pub frames: i64,
    /// Statements the pass ran, each a small batch.
    pub statements: u32,
    /// The median statement's duration.
    pub median_statement: Duration,
    /// The 99th percentile: what a row lock's lifetime stays under but for rare disk stalls.
    pub p99_statement: Duration,
    /// The longest statement: the longest any row lock was held.
    pub longest_statement: Duration,
    /// Whether the pass stopped at its time budget with more left to remove.
    pub unfinished: bool,
}

/// The state retention keeps between passes: where the frame walk resumes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Retention {
    frames_after: Option<MatterRef>,
}

impl Retention {
    /// One pass, as the policy in `node.settings.retention` says; logs one line and counts
    /// what it removed.
    pub async fn pass(&mut self, node: &NodeContext) -> Result<RetentionReport> {
        let policy = &node.settings.retention;
        let kinds = [
            policy.events_after().is_some(),
            policy.runs_after().is_some(),
            policy.frames_kept().is_some(),
        ];
        // Each kind gets its share of the pass, so a large backlog of one never starves another.
        let share = crate::config::seconds(policy.interval_seconds)
            / kinds.iter().filter(|k| **k).count().max(1) as u32;
        let mut pass = Pass {
            node,
            batch: policy.batch,
            started: Instant::now(),
            budget: share,
            report: RetentionReport::default(),
            took: Vec::new(),
        };
        if let Some(age) = policy.events_after() {
            pass.started = Instant::now();
            pass.events(age).await?;
        }
        if let Some(age) = policy.runs_after() {
            pass.started = Instant::now();
            pass.runs(age).await?;
        }
        if let Some(keep) = policy.frames_kept() {
            pass.started = Instant::now();
            self.frames_after = pass.frames(keep, self.frames_after).await?;
        }
        pass.took.sort();
        let at = |q: f64| {
            let i = ((pass.took.len() as f64 - 1.0) * q).round() as usize;
            pass.took.get(i).copied().unwrap_or_default()
        };
        pass.report.median_statement = at(0.5);
        pass.report.p99_statement = at(0.99);
        let rep = pass.report;
        let c = &node.metrics.counters;
        c.retention_events_removed.inc_by(rep.events as u64);
        c.retention_inbox_removed.inc_by(rep.inbox_rows as u64);
        c.retention_runs_removed.inc_by(rep.runs as u64);
        c.retention_frames_removed.inc_by(rep.frames as u64);
        if rep.statements == 0 {
            // Every kind is kept forever: nothing ran, nothing to say.
            return Ok(rep);
        }
        tracing::info!(
            events = rep.events,
            inbox_rows = rep.inbox_rows,
            runs = rep.runs,
            frames = rep.frames,
            statements = rep.statements,
            median_statement_ms = rep.median_statement.as_secs_f64() * 1e3,
            p99_statement_ms = rep.p99_statement.as_secs_f64() * 1e3,
            longest_statement_ms = rep.longest_statement.as_secs_f64() * 1e3,
            unfinished = rep.unfinished,
            "retention pass"
        );
        Ok(rep)
    }
}

/// One pass in progress.
struct Pass<'a> {
    node: &'a NodeContext,
    batch: u32,
    /// When the current kind began, and its share of the pass.
    started: Instant,
    budget: Duration,
    report: RetentionReport,
    /// Every statement's duration, for the median.
    took: Vec<Duration>,
}

impl Pass<'_> {
    async fn events(&mut self, age: Duration) -> Result<()> {
        loop {
            let mut conn = self.node.pool.get().await?;
            let t = Instant::now();
            let got = r::prune_events(&mut conn, BRIEF_RAIL, age, self.batch).await?;
            drop(conn);
            self.report.events += got.events;
            self.report.inbox_rows += got.inbox_rows;
            if !self.rest_after(t, got.events).await {
                return Ok(());
            }
        }
    }

    async fn runs(&mut self, age: Duration) -> Result<()> {
        loop {
            let mut conn = self.node.pool.get().await?;
            let t = Instant::now();
            let got = r::prune_runs(&mut conn, age, self.batch).await?;
            drop(conn);
            self.report.runs += got;
            if !self.rest_after(t, got).await {
                return Ok(());
            }
        }
    }

    /// Walks matters from `after`; returns where the next pass resumes (`None`: from the start).
    async fn frames(
        &mut self,
        keep: u32,
        mut after: Option<MatterRef>,
    ) -> Result<Option<MatterRef>> {
        loop {
            let mut conn = self.node.pool.get().await?;
            let t = Instant::now();
            let step = r::prune_frames(&mut conn, keep, after, self.batch).await?;
            drop(conn);
            self.report.frames += step.removed;
            after = step.next;
            // A full batch of matters visited: more may follow, whatever was removed.
            let visited = if after.is_some() {
                i64::from(self.batch)
            } else {
                0
            };
            if !self.rest_after(t, visited).await {
                return Ok(after);
            }
        }
    }

    /// Accounts for a statement that began at `t` and did `n` rows; rests [`REST`] times as
    /// long as it took.
    /// Whether to go on: the batch was full and the pass is within its budget.
    async fn rest_after(&mut self, t: Instant, n: i64) -> bool {
        let took = t.elapsed();
        self.report.statements += 1;
        self.report.longest_statement = self.report.longest_statement.max(took);
        self.took.push(took);
        if n < i64::from(self.batch) {
            return false;
        }
        if self.started.elapsed() >= self.budget || *self.node.draining.borrow() {
            self.report.unfinished = true;
            return false;
        }
        tokio::time::sleep(took * REST).await;
        true
    }
}
