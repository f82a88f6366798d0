//! The relay: drains `ops.domain_event_outbox` to the broker.
//!
//! Each batch is taken with one statement that locks rows with `SKIP LOCKED` and sets a short
//! publishing lease, so several nodes relay at once without publishing the same row twice in
//! normal operation, and no transaction is held while the broker confirms. Messages are
//! persistent and `mandatory`, with publisher confirms; a row is marked published only after
//! its confirm. A row that cannot be published keeps its last error and waits out a backoff.
//! The relay wakes on the outbox NOTIFY (milliseconds after a fact commits) and polls every
//! `relay.poll_ms` as the fallback; while the broker is down it backs off and reconnects.

use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{Channel, Confirmation};

use super::{AmqpOptions, broker, connect, message};
use crate::backoff::Reconnect;
use crate::error::{Error, Result};
use crate::ledger::inbox::BRIEF_RAIL;
use crate::ledger::models::OutboxRow;
use crate::ledger::outbox;
use crate::metrics::Metrics;
use crate::transport::postgres::outbox_listener;

pub use crate::ledger::outbox::RECONCILE_WINDOW;

/// How long a relay may hold rows it is publishing before another relay may take them.
pub const PUBLISH_LEASE: Duration = Duration::from_secs(30);

pub struct Relay {
    opts: AmqpOptions,
}

impl Relay {
    pub fn new(opts: AmqpOptions) -> Self {
        Self { opts }
    }
}

impl Actor for Relay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let opts = self.opts.clone();
        ctx.spawn(
            async move {
                let mut wait = Reconnect::new(Duration::from_millis(200), Duration::from_secs(10));
                loop {
                    let started = Instant::now();
                    if let Err(e) = session(&opts).await {
                        tracing::warn!(error = %e, "relay: session ended");
                    }
                    // Reconciliation is a ledger statement: it must not wait for the broker.
                    if let Err(e) = reconcile(&opts).await {
                        tracing::debug!(error = %e, "reconcile without a broker session failed");
                    }
                    let pause = wait.after(started.elapsed());
                    tracing::debug!(
                        retry_in_ms = pause.as_millis() as u64,
                        "relay: reconnecting"
                    );
                    tokio::time::sleep(pause).await;
                }
            }
            .into_actor(self),
        );
    }
}

/// One connection's worth of relaying; returns on any broker or listener failure.
async fn session(opts: &AmqpOptions) -> Result<()> {
    // The broker's channel and the outbox listener are opened side by side: a node that starts
    // on a backlog publishes its first events a few round trips sooner.
    let broker_side = async {
        let conn = connect(&opts.url, &format!("briefrail-{}-relay", opts.node_id)).await?;
        let ch = conn.create_channel().await.map_err(broker)?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(broker)?;
        Ok::<_, Error>((conn, ch))
    };
    let listener_side = outbox_listener(opts.db_url.expose());
    // Whichever fails first ends the attempt (the other is dropped).
    let ((conn, ch), mut listener) = tokio::try_join!(broker_side, listener_side)?;
    let mut notifications = std::pin::pin!(listener.notifications_stream());
    tracing::info!("relay connected");
    let mut last_reconcile = Instant::now();
    loop {
        drain(&ch, opts).await?;
        if last_reconcile.elapsed() >= opts.reconcile_after / 2 {
            reconcile(opts).await?;
            last_reconcile = Instant::now();
        }
        tokio::select! {
            n = notifications.next() => match n {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                // A cleanly closed listener would otherwise wake this loop forever.
                None => return Err(Error::connection("the outbox listener closed")),
            },
            () = tokio::time::sleep(opts.relay_poll) => {}
        }
        if !conn.status().connected() {
            return Err(Error::broker("connection lost"));
        }
    }
}

/// What one batch's publishes came to, before the ledger is told.
pub struct BatchOutcome {
    pub taken: usize,
    pub published: Vec<uuid::Uuid>,
    pub failed: Vec<(uuid::Uuid, String)>,
    /// The channel broke mid-batch: report after marking what was settled.
    pub broken: Option<Error>,
}

/// Leases the next `n` rows (one statement; see [`outbox::lease_unpublished`]).
async fn lease(opts: &AmqpOptions, n: usize) -> Result<Vec<OutboxRow>> {
    let mut c = opts.pool.get().await?;
    outbox::lease_unpublished(&mut c, n as i64, PUBLISH_LEASE).await
}

type Pending = Vec<(uuid::Uuid, lapin::PublisherConfirm)>;

/// What a window's publishes came to before their confirms: the confirms to await, the rows
/// that could not be sent at all (with why), and the channel's error if it broke.
struct Sent {
    pending: Pending,
    refused: Vec<(uuid::Uuid, String)>,
    broken: Option<Error>,
}

/// A row's routing key: its event's name, if the bus can carry it (an AMQP short string).
/// The ledger refuses longer names; a row written before it did would otherwise stop the
/// relay at every attempt, so it is failed alone, its error kept on the row.
fn routing_key(row: &OutboxRow) -> std::result::Result<lapin::types::ShortString, String> {
    lapin::types::ShortString::try_new(row.event_name.as_str()).map_err(|e| {
        format!(
            "event name of {} bytes cannot be a routing key: {e}",
            row.event_name.len()
        )
    })
}

/// Publishes the rows (persistent, mandatory), in their order. A row from the first channel
/// error on counts as not published (one after it may have gone out all the same: it is
/// published again after its backoff, and the inbox absorbs the copy).
///
/// The publishes go out together: each is handed to lapin's I/O thread and awaited until its
/// frames are written, and one after another they were a thread hand-off per message. They are
/// first polled in row order, which is the order their frames and confirm tags take.
async fn publish(ch: &Channel, opts: &AmqpOptions, rows: &[OutboxRow]) -> Sent {
    let mut refused = Vec::new();
    let mut sendable = Vec::with_capacity(rows.len());
    for row in rows {
        match routing_key(row) {
            Ok(key) => sendable.push((row, key)),
            Err(why) => refused.push((row.event_id, why)),
        }
    }
    let sends = sendable.iter().map(|(row, key)| {
        let (body, props) = message::encode(&row.envelope());
        async move {
            ch.basic_publish(
                opts.topology.events_exchange.as_str().into(),
                key.clone(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                &body,
                props,
            )
            .await
        }
    });
    let mut pending = Vec::with_capacity(sendable.len());
    for ((row, _), sent) in sendable
        .iter()
        .zip(futures_util::future::join_all(sends).await)
    {
        match sent {
            Ok(confirm) => pending.push((row.event_id, confirm)),
            Err(e) => {
                return Sent {
                    pending,
                    refused,
                    broken: Some(broker(e)),
                };
            }
        }
    }
    Sent {
        pending,
        refused,
        broken: None,
    }
}

/// Awaits every confirm of a published batch.
async fn confirmed(sent: Sent, rows: &[OutboxRow]) -> BatchOutcome {
    let Sent {
        pending,
        refused,
        broken,
    } = sent;
    let mut published = Vec::new();
    let mut failed: Vec<(uuid::Uuid, String)> = refused;
    for (id, confirm) in pending {
        match confirm.await {
            Ok(Confirmation::Ack(None)) | Ok(Confirmation::NotRequested) => published.push(id),
            Ok(Confirmation::Ack(Some(ret))) => {
                failed.push((id, format!("returned unroutable: {}", ret.reply_text)))
            }
            Ok(Confirmation::Nack(_)) => failed.push((id, "nacked by the broker".into())),
            Err(e) => failed.push((id, broker(e).to_string())),
        }
    }
    if let Some(e) = &broken {
        let done: Vec<_> = published
            .iter()
            .chain(failed.iter().map(|(i, _)| i))
            .copied()
            .collect();
        failed.extend(
            rows.iter()
                .filter(|r| !done.contains(&r.event_id))
                .map(|r| (r.event_id, e.to_string())),
        );
    }
    BatchOutcome {
        taken: rows.len(),
        published,
        failed,
        broken,
    }
}

/// Tells the ledger what the broker confirmed (published) and what it did not (error kept on
/// the row, backoff set).
pub async fn mark(opts: &AmqpOptions, outcome: &BatchOutcome) -> Result<()> {
    let mut c = opts.pool.get().await?;
    if !outcome.published.is_empty() {
        outbox::mark_published(&mut c, &outcome.published).await?;
        for _ in &outcome.published {
            Metrics::inc(&opts.metrics.counters.events_published);
        }
    }
    for (id, error) in &outcome.failed {
        // A broker's reply can be long (and carry raw bytes): one log line stays one line.
        let error = crate::text::clip(error, 300);
        tracing::warn!(event_id = %id, error, "publish failed; will retry with backoff");
        outbox::mark_failed(&mut c, &[*id], error).await?;
    }
    Ok(())
}

/// How many confirm windows (`relay.batch` messages each) one lease takes: the ledger's
/// statements (lease, mark) are paid once per this many windows.
pub const WINDOWS_PER_LEASE: usize = 4;

/// Publishes everything publishable now, `relay.batch` messages at a time (the confirm window:
/// a window's confirms all arrive before the next window is published). Rows are leased
/// [`WINDOWS_PER_LEASE`] windows at a time (the first lease one window), and the ledger works
/// beside the broker: while one
/// lease's windows are published and confirmed, the previous lease's rows are marked and the
/// next lease is taken (their rows are disjoint: leased rows are skipped), so the ledger's
/// round trips hide behind the broker's without widening the window.
pub async fn drain(ch: &Channel, opts: &AmqpOptions) -> Result<usize> {
    let window = opts.relay_batch.max(1) as usize;
    let cap = window * WINDOWS_PER_LEASE;
    let mut total = 0;
    // The first lease is one window: its events are on the wire while the next, full lease is
    // taken (a backlog starts flowing a lease's statement sooner).
    let mut asked = window;
    let mut rows = lease(opts, asked).await?;
    let mut previous: Option<BatchOutcome> = None;
    while !rows.is_empty() {
        total += rows.len();
        let full = rows.len() == asked;
        asked = cap;
        let prev = previous.take();
        let (mut settled, marked, next) = tokio::join!(
            publish_windows(ch, opts, &rows, window),
            async {
                match &prev {
                    Some(p) => mark(opts, p).await,
                    None => Ok(()),
                }
            },
            async {
                if full {
                    lease(opts, cap).await
                } else {
                    Ok(Vec::new())
                }
            },
        );
        // On any error, settle what was confirmed and give the next lease back before
        // reporting it; rows left unmarked wait out their publishing lease and are published
        // again (the inbox absorbs the duplicate).
        let failure = match (&marked, &next) {
            (Err(e), _) | (_, Err(e)) => Some(Error::internal(e.to_string())),
            _ => settled.broken.take(),
        };
        if let Some(e) = failure {
            if let Ok(n) = &next {
                give_back(opts, n).await;
            }
            if marked.is_err()
                && let Some(p) = &prev
            {
                let _ = mark(opts, p).await;
            }
            mark(opts, &settled).await?;
            return Err(marked.err().or(next.err()).unwrap_or(e));
        }
        previous = Some(settled);
        rows = next?;
    }
    if let Some(p) = previous {
        mark(opts, &p).await?;
    }
    Ok(total)
}

/// Publishes a lease's rows window by window, each window's confirms awaited before the next;
/// stops at the first broken channel (the rows not published are failed with its error).
async fn publish_windows(
    ch: &Channel,
    opts: &AmqpOptions,
    rows: &[OutboxRow],
    window: usize,
) -> BatchOutcome {
    let mut settled = BatchOutcome::empty();
    let windows: Vec<&[OutboxRow]> = rows.chunks(window).collect();
    for (i, w) in windows.iter().enumerate() {
        let sent = publish(ch, opts, w).await;
        settled.absorb(confirmed(sent, w).await);
        if let Some(e) = &settled.broken {
            let e = e.to_string();
            settled.failed.extend(
                windows[i + 1..]
                    .iter()
                    .flat_map(|w| w.iter())
                    .map(|r| (r.event_id, e.clone())),
            );
            break;
        }
    }
    settled
}

/// Hands leased rows back at once (their publishing lease cleared), so a relay that stops
/// before publishing them does not make them wait out [`PUBLISH_LEASE`].
async fn give_back(opts: &AmqpOptions, rows: &[OutboxRow]) {
    if rows.is_empty() {
        return;
    }
    let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.event_id).collect();
    let released = match opts.pool.get().await {
        Ok(mut c) => outbox::release_lease(&mut c, &ids).await,
        Err(e) => Err(e.into()),
    };
    if let Err(e) = released {
        tracing::debug!(error = %e, rows = ids.len(), "could not give leased rows back; their lease runs out");
    }
}

impl BatchOutcome {
    fn empty() -> Self {
        Self {
            taken: 0,
            published: Vec::new(),
            failed: Vec::new(),
            broken: None,
        }
    }

    /// Adds one window's outcome to its lease's.
    fn absorb(&mut self, w: BatchOutcome) {
        self.taken += w.taken;
        self.published.extend(w.published);
        self.failed.extend(w.failed);
        if self.broken.is_none() {
            self.broken = w.broken;
        }
    }
}

/// Republishes events the trigger has not consumed in time (a dropped message, a purged
/// queue, a crashed consumer), each later than the last (see [`outbox::Republish`]). An event
/// that reaches the cap is reported as stranded: an error line here, and the
/// `briefrail_events_stranded` gauge and the status page from the ledger.
pub async fn reconcile(opts: &AmqpOptions) -> Result<usize> {
    let mut c = opts.pool.get().await?;
    let policy = outbox::Republish {
        after: opts.reconcile_after,
        window: RECONCILE_WINDOW,
        cap: outbox::REPUBLISH_CAP,
    };
    let requeued = outbox::requeue_unconsumed(&mut c, BRIEF_RAIL, &policy, 1000).await?;
    for r in &requeued {
        Metrics::inc(&opts.metrics.counters.events_republished);
        if r.republish_count >= policy.cap {
            tracing::error!(event_id = %r.event_id, republish_count = r.republish_count,
                            "reconcile: republished for the last time and still not consumed; \
                             the event is stranded (see briefrail_events_stranded)");
        } else {
            tracing::info!(event_id = %r.event_id, republish_count = r.republish_count,
                           "reconcile: not consumed in time; republishing");
        }
    }
    Ok(requeued.len())
}

impl Handler<crate::transport::Stop> for Relay {
    type Result = ();
    fn handle(&mut self, _: crate::transport::Stop, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
