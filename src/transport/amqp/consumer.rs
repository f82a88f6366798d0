//! The Brief rail's trigger, consuming from its quorum queue with manual acks and a bounded
//! prefetch. Deliveries that arrive together are applied together: one transaction records
//! `(consumer, event_id)`, checks the gates and records the demand for each; after the commit
//! the matter actors are nudged and the acks follow (one frame for many deliveries, never past
//! one still applying: [`super::acks`]).
//!
//! Nothing in a message is believed: the inbox transaction reads the event's outbox row by id
//! and takes every value from it. A malformed message, or one the ledger does not confirm (an
//! unknown event id, or fields that disagree with its row), is copied to the dead-letter
//! exchange with the reason in a header and recorded in the ledger (`ops.dead_letters`, what
//! the console lists, replays and discards), then acked: nothing changes, the consumer carries on. A database failure leads to a requeue after a
//! backoff (the quorum queue's delivery limit eventually dead-letters it; reconciliation from
//! Postgres still serves the matter): never a lost message, never a crash.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix::prelude::*;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Acker, Channel, Confirmation};

use super::acks::{Ack, AckWindow};
use super::{AmqpOptions, broker, connect, message};
use crate::backoff::Reconnect;
use crate::error::{Error, Result};
use crate::ledger::dead_letters;
use crate::ledger::inbox::{self, Applied, BRIEF_RAIL, EventEnvelope};
use crate::metrics::Metrics;
use crate::nudge::{MatterKey, Nudge};
use crate::transport::Stop;
use tracing::Instrument;

pub struct TriggerConsumer {
    opts: AmqpOptions,
    nudges: Recipient<Nudge>,
    /// The topology was declared just before this consumer started: its first session does
    /// not declare it again (later sessions do, to repair a broker that lost it).
    declared: bool,
}

impl TriggerConsumer {
    pub fn new(opts: AmqpOptions, nudges: Recipient<Nudge>) -> Self {
        Self {
            opts,
            nudges,
            declared: false,
        }
    }

    /// Says the topology was declared a moment ago ([`super::start`] does so): the first
    /// session starts consuming a few round trips sooner.
    pub fn declared(mut self) -> Self {
        self.declared = true;
        self
    }
}

impl Actor for TriggerConsumer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (opts, nudges) = (self.opts.clone(), self.nudges.clone());
        let mut declared = self.declared;
        ctx.spawn(
            async move {
                let mut wait = Reconnect::new(Duration::from_millis(200), Duration::from_secs(10));
                loop {
                    let started = Instant::now();
                    let result = session(&opts, &nudges, declared).await;
                    declared = false;
                    if let Err(e) = result {
                        Metrics::inc(&opts.metrics.counters.consumer_sessions_ended);
                        tracing::warn!(error = %e, "consumer: session ended");
                    }
                    let pause = wait.after(started.elapsed());
                    tracing::debug!(
                        retry_in_ms = pause.as_millis() as u64,
                        "consumer: reconnecting"
                    );
                    tokio::time::sleep(pause).await;
                }
            }
            .into_actor(self),
        );
    }
}

impl Handler<Stop> for TriggerConsumer {
    type Result = ();
    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

async fn session(opts: &AmqpOptions, nudges: &Recipient<Nudge>, declared: bool) -> Result<()> {
    let conn = connect(&opts.url, &format!("briefrail-{}-trigger", opts.node_id)).await?;
    let ch = conn.create_channel().await.map_err(broker)?;
    let dead = conn.create_channel().await.map_err(broker)?;
    dead.confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(broker)?;
    // Declared again (unless it was a moment ago, at start): a broker that lost its state (or
    // a purged definition) is repaired here.
    if !declared {
        opts.topology.declare(&ch).await?;
    }
    ch.basic_qos(opts.prefetch, BasicQosOptions::default())
        .await
        .map_err(broker)?;
    let deliveries = ch
        .basic_consume(
            opts.topology.trigger_queue.as_str().into(),
            format!("briefrail-{}", opts.node_id).into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(broker)?;
    tracing::info!(queue = %opts.topology.trigger_queue, "trigger consuming");
    // Deliveries that are there together are applied together: one statement for the batch
    // (see `inbox::apply_batch`). At idle a batch is one delivery (no waiting to fill one);
    // under load up to BATCH at a time, CONCURRENT_BATCHES at once.
    // Each delivery enters the ack window as it comes off the channel, in tag order, before
    // any batch after it can commit.
    let window = Mutex::new(AckWindow::default());
    let acking = tokio::sync::Mutex::new(());
    let session = Session {
        opts,
        nudges,
        dead: &dead,
        window: &window,
        acking: &acking,
    };
    //
    // A batch's failure ends the session (its unacked deliveries come back on the next one,
    // after the reconnect backoff), but only once the batches already applying have settled:
    // no new chunk is taken, and none in flight is dropped between its commit and its acks and
    // nudges, nor abandoned mid-transaction to be applied again on redelivery.
    use futures_util::StreamExt;
    let mut chunks = std::pin::pin!(
        deliveries
            .inspect(|d| {
                if let Ok(d) = d {
                    session.window().received(d.delivery_tag);
                }
            })
            .ready_chunks(BATCH)
    );
    let mut applying = futures_util::stream::FuturesUnordered::new();
    let mut lanes = Lanes::default();
    let mut first_error = None;
    let mut taking = true;
    loop {
        let now = Instant::now();
        let open = taking && lanes.open(now);
        let reopens = lanes.reopens_at().filter(|_| taking && !open);
        tokio::select! {
            Some((started, result)) = applying.next(), if !applying.is_empty() => {
                lanes.settled(started);
                if let Err(e) = result {
                    tracing::debug!(error = %e, "consumer: ending the session once the batches in flight settle");
                    // The first failure is the one reported; later ones only end it too.
                    first_error.get_or_insert(e);
                    taking = false;
                }
            }
            chunk = chunks.next(), if open => match chunk {
                Some(chunk) => {
                    let started = lanes.start(now);
                    let session = &session;
                    applying.push(async move { (started, session.handle_batch(chunk).await) });
                }
                None => taking = false,
            },
            () = sleep_until_or_never(reopens), if reopens.is_some() => {}
        }
        if !taking && applying.is_empty() {
            break;
        }
    }
    Err(first_error.unwrap_or_else(|| Error::broker("the consumer was cancelled")))
}

/// Sleeps until `at` (`None`: the branch is disabled, and this is never polled).
async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Most deliveries applied in one transaction.
const BATCH: usize = 256;
/// Deliveries the broker may have out unacked on the session: two batches, so a lane has
/// deliveries to take beside a stalled batch.
pub(super) const PREFETCH: u16 = (2 * BATCH) as u16;
/// Batches in flight at once (each holds one pooled connection while it applies); more than
/// one only while those in flight are stalled (see [`Lanes`]).
const CONCURRENT_BATCHES: usize = 4;
/// How long the batches in flight must all have been applying before another may start
/// beside them (see [`Lanes`]).
const STALLED_AFTER: Duration = Duration::from_millis(50);

/// When the next batch may start. A lane that takes deliveries the moment it is free makes
/// small batches: with four lanes a backlog went through in batches of 29, and a batch's cost
/// is mostly per statement (its demands, its inbox rows), not per delivery (CHANGELOG.md,
/// "Performance"). So while a batch applies the deliveries pile up for the next, and another
/// batch starts beside those in flight only once every one of them has applied for
/// [`STALLED_AFTER`] (a lock, a slow database): stalled batches never stop the ones behind
/// them for longer than that.
#[derive(Default)]
struct Lanes {
    /// When each batch in flight started.
    started: Vec<Instant>,
}

impl Lanes {
    /// Whether a batch may start at `now`: no batch in flight, or every one stalled, with a
    /// lane free.
    fn open(&self, now: Instant) -> bool {
        self.started.is_empty() || self.reopens_at().is_some_and(|at| at <= now)
    }

    /// When a closed lane opens by itself: the youngest batch in flight stalls (`None` when
    /// every lane is taken, or none is: then only a batch's end opens one).
    fn reopens_at(&self) -> Option<Instant> {
        if self.started.len() >= CONCURRENT_BATCHES {
            return None;
        }
        self.started.iter().max().map(|s| *s + STALLED_AFTER)
    }

    fn start(&mut self, now: Instant) -> Instant {
        self.started.push(now);
        now
    }

    fn settled(&mut self, started: Instant) {
        if let Some(i) = self.started.iter().position(|s| *s == started) {
            self.started.swap_remove(i);
        }
    }
}

/// What every batch of one broker session shares.
struct Session<'a> {
    opts: &'a AmqpOptions,
    nudges: &'a Recipient<Nudge>,
    /// The channel dead letters are published on (with confirms).
    dead: &'a Channel,
    /// The session's outstanding deliveries, in tag order: which acks may go out.
    window: &'a Mutex<AckWindow<Acker>>,
    /// Held from asking the window for acks until they are sent: a multiple ack must reach the
    /// broker after every ack below it (one that overtook it would name a tag the broker has
    /// already settled, and the broker closes the channel), whatever order the runtime runs
    /// lapin's sends in.
    acking: &'a tokio::sync::Mutex<()>,
}

impl Session<'_> {
    fn window(&self) -> std::sync::MutexGuard<'_, AckWindow<Acker>> {
        // The window is only ever locked for a few map operations, never across an await; a
        // poisoned lock still holds a consistent map.
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The deliveries that were ready together, each acked only once its effect (or its
    /// dead-lettering) is durable. A malformed one is dead-lettered alone; the rest are applied
    /// as one batch.
    async fn handle_batch(
        &self,
        chunk: Vec<std::result::Result<Delivery, lapin::Error>>,
    ) -> Result<()> {
        let mut broken = None;
        let mut batch = Vec::with_capacity(chunk.len());
        for d in chunk {
            match d {
                Err(e) => {
                    broken.get_or_insert(broker(e));
                }
                Ok(d) => match message::decode(&d.data, &d.properties) {
                    Ok(envelope) => batch.push((d, envelope)),
                    Err(reason) => self.dead_letter(&d, &reason.to_string()).await?,
                },
            }
        }
        if !batch.is_empty() {
            // The span covers this batch only: no parent, so it never inherits another
            // delivery's span, and it is instrumented, never entered across an await.
            let span = tracing::info_span!(parent: None, "consume", events = batch.len());
            self.consume(&batch).instrument(span).await?;
        }
        broken.map_or(Ok(()), Err)
    }

    async fn consume(&self, batch: &[(Delivery, EventEnvelope)]) -> Result<()> {
        let envelopes: Vec<EventEnvelope> = batch.iter().map(|(_, e)| e.clone()).collect();
        match self.apply_when_possible(&envelopes).await {
            Ok(applied) => {
                #[cfg(feature = "otel")]
                link_demands(&applied);
                let settled: Vec<_> = batch.iter().zip(applied).collect();
                self.settle(settled).await?;
            }
            // A permanent error of the batch as a whole: which message caused it is found by
            // applying each alone; only that one is dead-lettered.
            Err(err) if batch.len() > 1 => {
                tracing::warn!(error = %err, events = batch.len(), "a batch was refused; applying its messages one by one");
                for member in batch {
                    let (d, e) = member;
                    match self.apply_when_possible(std::slice::from_ref(e)).await {
                        Ok(mut one) => match one.pop() {
                            Some(a) => self.settle(vec![(member, a)]).await?,
                            None => self.dead_letter(d, "the ledger gave no result").await?,
                        },
                        Err(err) => self.dead_letter(d, &err.to_string()).await?,
                    }
                }
            }
            Err(err) => {
                if let Some((d, _)) = batch.first() {
                    self.dead_letter(d, &err.to_string()).await?;
                }
            }
        }
        Ok(())
    }

    /// Dead-letters each refused delivery of a committed batch, nudges the matters of its
    /// demands, then acks what the ledger made of each.
    ///
    /// The batch's acks are one frame when nothing below it is still applying (else they go
    /// out with the ack of the batch below: [`AckWindow`]); acks go out in tag order across
    /// batches ([`Session::acking`]), single ones together (each is a command to lapin's I/O
    /// thread and a wait for its answer, a thread hand-off on a saturated machine). A refused message is dead-lettered first, in
    /// order; one that cannot be dead-lettered stays unacked and does not stop the others.
    /// Every demand is nudged even when an ack failed (the demand is committed). The first
    /// failure is reported after all that; it ends the session, but a concurrent batch's failure
    /// waits for this one to settle (see [`session`]). Should the process stop before the acks
    /// or the nudges, the redelivered copies are duplicates, which nudge too.
    async fn settle(&self, batch: Vec<(&(Delivery, EventEnvelope), Applied)>) -> Result<()> {
        let mut committed = Vec::with_capacity(batch.len());
        let mut accepted = Vec::with_capacity(batch.len());
        let mut unacked = Vec::new();
        let mut first_error = None;
        for ((d, e), applied) in batch {
            if let Applied::Refused(reason) = applied {
                // The ledger does not confirm this message: nothing changed; keep it for a
                // person. A failure here leaves it unacked (it comes back); the others still
                // settle.
                Metrics::inc(&self.opts.metrics.counters.nudges_refused);
                if let Err(err) = self.dead_letter(d, &reason).await {
                    unacked.extend(self.window().leave_unacked(d.delivery_tag));
                    first_error.get_or_insert(err);
                }
                continue;
            }
            committed.push((d.delivery_tag, d.acker.clone()));
            accepted.push((e.event_id, applied));
        }
        // The demands are committed: their matters are nudged before the acks are awaited (a
        // nudge is a message to this process, the acks a hand-off to lapin's I/O thread and,
        // on a busy machine, a wait), so claims start while the broker is told.
        for (event_id, applied) in accepted {
            announce(self.opts, self.nudges, event_id, applied);
        }
        let acked = {
            let _in_order = self.acking.lock().await;
            let mut acks = self.window().committed(committed);
            acks.extend(unacked);
            self.send(acks).await
        };
        first_error.or(acked.err()).map_or(Ok(()), Err)
    }

    /// Dead-letters the delivery: first into the ledger (what the console lists and
    /// replays), then to the dead-letter exchange, then the ack; once acked on its own it no
    /// longer holds back the acks above it.
    ///
    /// The ledger's refusal of one dead letter never ends the session: an unreachable ledger is
    /// waited for in place (the delivery stays unacked, other batches' acks go on), any other
    /// failure is tried [`RECORD_ATTEMPTS`] times; then the message goes to the dead-letter
    /// queue alone, its header saying why the ledger does not have it, with an error line and
    /// `briefrail_dead_letters_unrecorded_total`. (Ending the session instead made the broker
    /// redeliver it to the next session, and the next, each reconnect waiting longer, while
    /// every other message queued behind it.) Only a broker failure is returned; the caller
    /// decides (the session ends, or the delivery is [left unacked](AckWindow::leave_unacked)).
    async fn dead_letter(&self, d: &Delivery, reason: &str) -> Result<()> {
        let mut attempts = 0u32;
        let recorded = self
            .when_possible(
                "record the dead letter",
                |e| {
                    attempts += 1;
                    out_of_reach(e) || (!e.is_permanent() && attempts < RECORD_ATTEMPTS)
                },
                || record_dead_letter(self.opts, d, reason),
            )
            .await;
        let unrecorded = match recorded {
            Ok(()) => None,
            Err(e) => {
                Metrics::inc(&self.opts.metrics.counters.dead_letters_unrecorded);
                tracing::error!(error = %e, %reason, routing_key = %d.routing_key,
                                "the ledger refused a dead letter: it is kept in the dead-letter queue only");
                Some(e.to_string())
            }
        };
        publish_dead_letter(self.opts, self.dead, d, reason, unrecorded.as_deref()).await?;
        self.window().settled_alone(d.delivery_tag);
        Ok(())
    }

    /// Sends acks (under [`Session::acking`]): the single ones together, awaited together,
    /// then the multiple one, which settles every delivery below it and so must come last.
    /// The first failure is returned.
    async fn send(&self, acks: Vec<Ack<Acker>>) -> Result<()> {
        let (ones, up_to): (Vec<_>, Vec<_>) =
            acks.into_iter().partition(|a| matches!(a, Ack::One(_)));
        let ones = ones.into_iter().map(|a| async move {
            let (Ack::One(k) | Ack::UpTo(k)) = a;
            k.ack(BasicAckOptions::default()).await
        });
        let mut sent = futures_util::future::join_all(ones).await;
        for a in up_to {
            let (Ack::One(k) | Ack::UpTo(k)) = a;
            sent.push(k.ack(BasicAckOptions { multiple: true }).await);
        }
        let mut first_error = None;
        for s in sent {
            match s {
                Ok(true) => Metrics::inc(&self.opts.metrics.counters.ack_frames),
                // Not sent: the acker was used or its channel is gone (the session ends).
                Ok(false) => {}
                Err(e) => {
                    first_error.get_or_insert(broker(e));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Applies the deliveries, retrying in place for as long as the database answers "not now"
    /// (unreachable, a pool timeout, a lock timeout, a serialization failure). The deliveries
    /// stay unacknowledged meanwhile, so nothing is lost if this node dies, and they are never
    /// requeued for a transient reason: the quorum queue's delivery limit counts only consumers
    /// that died on the message, and the dead-letter queue holds only input nobody may
    /// believe. Returns `Ok` or a permanent error.
    async fn apply_when_possible(&self, e: &[EventEnvelope]) -> Result<Vec<Applied>> {
        self.when_possible(
            "record the demand",
            |err| !err.is_permanent(),
            || apply(self.opts, e),
        )
        .await
    }

    /// Calls `call` until it succeeds or `again` says of its error that trying again is no
    /// use, backing off up to 5 s between tries. While it waits, other batches' acks do not
    /// wait behind it ([`AckWindow::stall`]).
    async fn when_possible<T, Fut>(
        &self,
        what: &'static str,
        mut again: impl FnMut(&Error) -> bool,
        mut call: impl FnMut() -> Fut,
    ) -> Result<T>
    where
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut delays = crate::backoff::delays(Duration::from_millis(250), Duration::from_secs(5));
        let mut attempts = 0u32;
        let mut stalled = Stalled(None);
        loop {
            match call().await {
                Err(err) if again(&err) => {
                    attempts += 1;
                    // The first failure and then every tenth: a long outage does not flood
                    // the log.
                    if attempts == 1 || attempts.is_multiple_of(10) {
                        tracing::warn!(error = %err, attempts, "cannot {what} yet; retrying in place");
                    }
                    if stalled.0.is_none() {
                        let _in_order = self.acking.lock().await;
                        let waiting = self.window().stall();
                        stalled.0 = Some(self);
                        if let Err(err) = self.send(waiting).await {
                            tracing::debug!(error = %err, "acks released by a stalled batch failed");
                        }
                    }
                    tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(5))).await;
                }
                other => return other,
            }
        }
    }
}

/// How many times a dead letter the ledger answers with an error (not an outage) is tried
/// before it is kept in the dead-letter queue only.
pub const RECORD_ATTEMPTS: u32 = 5;

/// Whether the ledger could not be asked at all (no connection, a connection lost): waiting is
/// sure to help. A statement the database answered with an error is not this, whatever its
/// kind: the same statement may be refused the same way for ever.
fn out_of_reach(e: &Error) -> bool {
    use diesel::result::{DatabaseErrorKind as K, Error as D};
    matches!(
        e,
        Error::Connection(_)
            | Error::Unreachable(_)
            | Error::Database(D::DatabaseError(
                K::ClosedConnection | K::UnableToSendCommand,
                _
            ))
    )
}

/// Resumes the ack window when a batch that stalled stops retrying, however it stops.
struct Stalled<'s, 'a>(Option<&'s Session<'a>>);

impl Drop for Stalled<'_, '_> {
    fn drop(&mut self) {
        if let Some(s) = self.0 {
            s.window().resume();
        }
    }
}

/// Links the current (consume) span, when it is exported, to every demand the batch recorded,
/// by the trace context of the ledger's copy of each fact (never the message's).
#[cfg(feature = "otel")]
fn link_demands(applied: &[Applied]) {
    let span = tracing::Span::current();
    if !crate::otel::exported(&span) {
        return;
    }
    let links: Vec<crate::trace::Traceparent> = applied
        .iter()
        .filter_map(|a| match a {
            Applied::Demand { fact, .. } => fact.traceparent.as_deref(),
            _ => None,
        })
        .filter_map(crate::trace::Traceparent::parse)
        .collect();
    crate::otel::join(&span, None, &links);
}

/// What the ledger made of one acked delivery: a nudge for a demand, a count or a log line for
/// the rest.
fn announce(opts: &AmqpOptions, nudges: &Recipient<Nudge>, event_id: uuid::Uuid, applied: Applied) {
    match applied {
        Applied::Demand {
            requested_generation,
            fact,
        } => {
            Metrics::inc(&opts.metrics.counters.events_consumed);
            tracing::debug!(%event_id, firm_id = %fact.firm_id, matter_id = %fact.matter_id,
                            requested_generation, "demand recorded");
            nudges.do_send(nudge_of(fact));
        }
        Applied::Duplicate(fact) => {
            Metrics::inc(&opts.metrics.counters.events_duplicate);
            tracing::debug!(%event_id, "duplicate delivery: no second effect; its matter nudged");
            nudges.do_send(nudge_of(fact));
        }
        Applied::Gated(reason) => tracing::info!(%event_id, %reason, "gated"),
        Applied::NotHeard(reason) => tracing::debug!(%event_id, %reason, "consumed: not heard"),
        Applied::Covered => {
            Metrics::inc(&opts.metrics.counters.demands_coalesced);
            tracing::debug!(%event_id, "covered: a running or landed build already reads this fact");
        }
        Applied::Expired(reason) => {
            Metrics::inc(&opts.metrics.counters.nudges_expired);
            tracing::info!(%event_id, %reason, "late copy of a removed event: acked, no effect");
        }
        // Dead-lettered by `settle` before it acks.
        Applied::Refused(_) => {}
    }
}

/// The nudge for a fact: every value from the ledger's row, none from the message.
fn nudge_of(fact: inbox::Fact) -> Nudge {
    Nudge {
        key: MatterKey {
            firm_id: fact.firm_id,
            matter_id: fact.matter_id,
        },
        event_ids: vec![fact.event_id],
        traceparent: fact.traceparent,
        recorded_ago: fact.recorded_ago,
        class: fact.class,
    }
}

/// Gives the message back to the queue (counts toward the quorum queue's delivery limit).
async fn requeue(d: &Delivery) -> Result<()> {
    d.acker
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .map_err(broker)?;
    Ok(())
}

async fn apply(opts: &AmqpOptions, e: &[EventEnvelope]) -> Result<Vec<Applied>> {
    let mut c = opts.pool.get().await?;
    inbox::apply_delivered(&mut c, BRIEF_RAIL, e).await
}

/// Files the refused delivery in the ledger (`ops.dead_letters`).
async fn record_dead_letter(opts: &AmqpOptions, d: &Delivery, reason: &str) -> Result<()> {
    let traceparent = message::traceparent(&d.properties);
    let mut conn = opts.pool.get().await?;
    dead_letters::record(
        &mut conn,
        &dead_letters::Refusal {
            consumer: BRIEF_RAIL,
            event_id: message::named_event_id(&d.data),
            routing_key: d.routing_key.as_str(),
            body: &d.data,
            traceparent: traceparent.as_deref(),
            reason,
            node_id: &opts.node_id,
        },
    )
    .await?;
    Ok(())
}

/// Copies the message to the dead-letter exchange with the reason in a header (and, when the
/// ledger refused it, why the ledger does not have it), waits for the broker's confirm, then
/// acks the original.
async fn publish_dead_letter(
    opts: &AmqpOptions,
    dead: &Channel,
    d: &Delivery,
    reason: &str,
    unrecorded: Option<&str>,
) -> Result<()> {
    tracing::warn!(%reason, routing_key = %d.routing_key, bytes = d.data.len(), "dead-lettering a message");
    let mut headers = d.properties.headers().clone().unwrap_or_default();
    headers.insert(message::REASON.into(), AMQPValue::LongString(reason.into()));
    headers.insert(
        "x-briefrail-routing-key".into(),
        AMQPValue::LongString(d.routing_key.as_str().into()),
    );
    if let Some(why) = unrecorded {
        headers.insert(
            message::UNRECORDED.into(),
            AMQPValue::LongString(why.into()),
        );
    }
    let props = d.properties.clone().with_headers(headers);
    let confirm = dead
        .basic_publish(
            opts.topology.dead_exchange.as_str().into(),
            "".into(),
            BasicPublishOptions::default(),
            &d.data,
            props,
        )
        .await
        .map_err(broker)?
        .await
        .map_err(broker)?;
    if !matches!(confirm, Confirmation::Ack(None)) {
        requeue(d).await?;
        return Err(Error::broker(
            "the dead-letter exchange refused the message",
        ));
    }
    d.acker
        .ack(BasicAckOptions::default())
        .await
        .map_err(broker)?;
    Metrics::inc(&opts.metrics.counters.dead_lettered);
    Ok(())
}

#[cfg(test)]
mod lanes {
    use super::*;

    #[test]
    fn a_second_batch_starts_only_beside_a_stalled_one() {
        let t0 = Instant::now();
        let mut lanes = Lanes::default();
        assert!(lanes.open(t0), "an idle consumer takes a delivery at once");
        assert_eq!(lanes.reopens_at(), None);
        let first = lanes.start(t0);
        assert!(!lanes.open(t0), "deliveries pile up while a batch applies");
        assert!(!lanes.open(t0 + STALLED_AFTER / 2));
        assert_eq!(lanes.reopens_at(), Some(t0 + STALLED_AFTER));
        assert!(lanes.open(t0 + STALLED_AFTER), "a stalled batch holds up nobody");
        let second = lanes.start(t0 + STALLED_AFTER);
        assert!(!lanes.open(t0 + STALLED_AFTER * 3 / 2), "the second batch is not stalled yet");
        for n in 2..CONCURRENT_BATCHES {
            let at = t0 + STALLED_AFTER * n as u32;
            assert!(lanes.open(at), "every batch in flight is stalled");
            lanes.start(at);
        }
        let later = t0 + 10 * STALLED_AFTER * CONCURRENT_BATCHES as u32;
        assert!(!lanes.open(later), "every lane is taken");
        assert_eq!(lanes.reopens_at(), None, "only a batch's end opens one");
        lanes.settled(first);
        assert!(lanes.open(later), "stalled batches hold up nobody");
        lanes.settled(second);
        assert!(lanes.open(later));
    }
}
