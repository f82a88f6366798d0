//! The embedded transport (`transport.kind = "postgres"`): the outbox is drained straight into
//! the trigger, one statement per batch (`ops.drain_outbox`): lock unpublished rows, apply them
//! through the inbox (`ops.apply_events`, the broker's consumer path and dedupe), mark them
//! published; then nudge. It wakes on the `briefrail_outbox` NOTIFY that an outbox insert sends at commit, and
//! polls every `relay.poll_ms` in case a notification was missed (a dropped listener).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use futures_util::StreamExt;

use super::Stop;
use crate::backoff::Reconnect;
use crate::db::Pool;
use crate::error::{Error, Result};
use crate::ledger::inbox::{self, BRIEF_RAIL};
use crate::ledger::outbox;
use crate::metrics::Metrics;
use crate::nudge::{MatterKey, Nudge};
use crate::secret::SecretUrl;

pub const CHANNEL: &str = "briefrail_outbox";

#[derive(Clone)]
pub struct PgTransportOptions {
    pub url: SecretUrl,
    pub pool: Pool,
    pub poll: Duration,
    pub batch: i64,
    pub metrics: Arc<Metrics>,
}

/// The embedded transport's actor: its only job is the listen-and-drain loop.
pub struct PgTransport {
    opts: PgTransportOptions,
    nudges: Recipient<Nudge>,
}

impl PgTransport {
    pub fn new(opts: PgTransportOptions, nudges: Recipient<Nudge>) -> Self {
        Self { opts, nudges }
    }
}

impl Actor for PgTransport {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (opts, nudges) = (self.opts.clone(), self.nudges.clone());
        ctx.spawn(listen_loop(opts, nudges).into_actor(self));
    }
}

/// The listen-and-drain loop: a lost listener is reopened after the shared reconnect wait
/// (the relay's bounds), which starts over once a session has lasted.
async fn listen_loop(opts: PgTransportOptions, nudges: Recipient<Nudge>) {
    let mut wait = Reconnect::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let started = Instant::now();
        match listen(&opts, &nudges).await {
            Ok(()) => return,
            Err(e) => {
                let pause = wait.after(started.elapsed());
                tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "embedded transport: listener lost");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// A connection of its own (not pooled: it stays subscribed) listening on the outbox's
/// [`CHANNEL`]; both transports wake on it when a fact commits.
pub(crate) async fn outbox_listener(url: &str) -> Result<AsyncPgConnection> {
    let mut conn = AsyncPgConnection::establish(url)
        .await
        .map_err(Error::connection)?;
    diesel::sql_query(format!("LISTEN {CHANNEL}"))
        .execute(&mut conn)
        .await?;
    Ok(conn)
}

async fn listen(opts: &PgTransportOptions, nudges: &Recipient<Nudge>) -> Result<()> {
    let mut conn = outbox_listener(opts.url.expose()).await?;
    let mut notifications = std::pin::pin!(conn.notifications_stream());
    loop {
        // Drain everything that is there now, then wait for a notification or the poll.
        loop {
            let n = drain_once(opts, nudges).await?;
            if n < opts.batch as usize {
                break;
            }
        }
        tokio::select! {
            n = notifications.next() => match n {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => return Err(Error::connection("notification stream ended")),
            },
            () = tokio::time::sleep(opts.poll) => {}
        }
    }
}

/// One batch: apply up to `batch` unpublished events through the inbox and mark them
/// published, in one statement (`ops.drain_outbox`, one round trip and one commit); then
/// nudge. Returns how many rows it took.
///
/// Each demand locks its job row until the batch commits, so two nodes applying batches at
/// once must lock rows in one global order or they can deadlock: `ops.apply_events` applies
/// rows in `(firm_id, matter_id)` order, not in event order (demands commute).
pub async fn drain_once(opts: &PgTransportOptions, nudges: &Recipient<Nudge>) -> Result<usize> {
    let mut conn = opts.pool.get().await?;
    let rows = inbox::drain_outbox(&mut conn, BRIEF_RAIL, opts.batch).await?;
    drop(conn);
    let mut duplicates = 0u64;
    for row in &rows {
        // A duplicate is a row offered again after a drain that stopped between its commit
        // and its nudges: it is nudged too (the claim finds nothing to do if it was served).
        match row.outcome.as_str() {
            "demand" | "duplicate" => {
                if row.outcome == "demand" {
                    Metrics::inc(&opts.metrics.counters.events_consumed);
                } else {
                    duplicates += 1;
                }
                nudges.do_send(Nudge {
                    key: MatterKey {
                        firm_id: row.firm_id,
                        matter_id: row.matter_id,
                    },
                    event_ids: vec![row.event_id],
                    traceparent: row.traceparent.clone(),
                    recorded_ago: Some(outbox::seconds_ago(row.recorded_ago_s)),
                    class: crate::ledger::DemandClass::from_stored(&row.demand_class),
                });
            }
            other => tracing::debug!(event_id = %row.event_id, outcome = other, "no demand"),
        }
    }
    for _ in 0..duplicates {
        Metrics::inc(&opts.metrics.counters.events_duplicate);
    }
    Ok(rows.len())
}

impl Handler<Stop> for PgTransport {
    type Result = ();
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
