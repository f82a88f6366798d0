//! The nudge transport against real RabbitMQ and Postgres: duplicates applied once, purged
//! queues reconciled, poison dead-lettered with a reason, two relays never double-publishing,
//! out-of-order commits still published, and the embedded (postgres) transport on the same
//! consumer path.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{AMQP_URL, BrokerScope, count, eventually, hex, served};
use actix::Actor;
use briefrail::builders::brief::BriefBuilder;
use briefrail::config::Settings;
use briefrail::ledger::{facts, outbox, reads};
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use briefrail::transport::amqp::{
    self, AmqpOptions, consumer::TriggerConsumer, message, relay::Relay,
};
use diesel::prelude::*;
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use futures_util::StreamExt;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use uuid::Uuid;

fn get(c: &prometheus_client::metrics::counter::Counter) -> u64 {
    c.get()
}

struct Rig {
    db: TestDb,
    scope: BrokerScope,
    node: Node,
    opts: AmqpOptions,
}

impl Rig {
    /// Waits until `n` messages have been dead-lettered: the consumer counts one only after the
    /// ledger's row, the broker's confirm of the dead letter and the delivery's ack.
    async fn dead_lettered(&self, n: u64) {
        eventually(
            Duration::from_secs(20),
            "the dead letters counted",
            || async { (get(&self.opts.metrics.counters.dead_lettered) == n).then_some(()) },
        )
        .await;
    }
}

/// A node (brief builder) and AMQP options on a database and topology of this test's own.
async fn rig(reconcile_after: Duration) -> Rig {
    rig_with(reconcile_after, Duration::from_millis(20)).await
}

/// [`rig`] with a debounce window of `debounce`.
async fn rig_with(reconcile_after: Duration, debounce: Duration) -> Rig {
    let db = TestDb::new(16).await.unwrap();
    let scope = BrokerScope::new();
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.trigger.debounce_ms = debounce.as_millis() as u64;
    s.trigger.max_wait_ms = s.trigger.max_wait_ms.max(4 * s.trigger.debounce_ms);
    s.transport.prefix = scope.prefix.clone();
    let s = Arc::new(s);
    // The transport's parts are started by each test, one by one.
    let node = Node::builder(s.clone(), Arc::new(BriefBuilder))
        .pool(db.pool.clone())
        .without_transport()
        .without_periodic_sweeper()
        .start()
        .await
        .unwrap();
    let mut opts = AmqpOptions::from_settings(&s, db.pool.clone(), node.metrics().clone());
    opts.reconcile_after = reconcile_after;
    opts.relay_poll = Duration::from_millis(100);
    let conn = amqp::connect(&opts.url, "test-setup").await.unwrap();
    scope
        .topology
        .declare(&conn.create_channel().await.unwrap())
        .await
        .unwrap();
    Rig {
        db,
        scope,
        node,
        opts,
    }
}

/// The embedded transport's options on the rig's database, `batch` events per transaction.
fn pg_transport(r: &Rig, batch: i64) -> briefrail::transport::postgres::PgTransportOptions {
    briefrail::transport::postgres::PgTransportOptions {
        url: SecretUrl::new(r.db.url.clone()),
        pool: r.db.pool.clone(),
        poll: Duration::from_millis(200),
        batch,
        metrics: r.opts.metrics.clone(),
    }
}

/// Takes the next message from the test's dead-letter queue and returns its
/// `x-briefrail-reason` header.
async fn next_dead_letter_reason(ch: &lapin::Channel, scope: &BrokerScope) -> String {
    next_dead_letter_header(ch, scope, message::REASON).await
}

/// Takes the next message from the test's dead-letter queue and returns its header `name`.
async fn next_dead_letter_header(ch: &lapin::Channel, scope: &BrokerScope, name: &str) -> String {
    let got = eventually(Duration::from_secs(10), "a dead letter", || async {
        ch.basic_get(
            scope.topology.dead_queue.as_str().into(),
            BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
    })
    .await;
    let headers = got
        .delivery
        .properties
        .headers()
        .clone()
        .unwrap_or_default();
    match headers.inner().get(name) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("dead letter without {name}: {other:?}"),
    }
}

async fn channel() -> lapin::Channel {
    let conn = amqp::connect(&SecretUrl::new(AMQP_URL), "test")
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    // Keep the connection alive as long as the channel: leak it for the test's lifetime.
    std::mem::forget(conn);
    ch
}

/// Records a new matter, starts a relay and waits until the matter is served (the relay is
/// returned: it runs as long as the caller keeps it).
async fn relay_serves_a_new_matter(r: &Rig, what: &str) -> actix::Addr<Relay> {
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    let relay = Relay::new(r.opts.clone()).start();
    until_served(&r.db, firm, matter, Duration::from_secs(20), what).await;
    relay
}

/// Waits up to `limit` for the matter to be [`served`]; fails naming `what` otherwise.
async fn until_served(db: &TestDb, firm: Uuid, matter: Uuid, limit: Duration, what: &str) {
    eventually(limit, what, || async {
        served(db, firm, matter).await.then_some(())
    })
    .await
}

/// A consumer told that the topology was just declared (`TriggerConsumer::declared`, what the
/// node's start does) skips declaring it in its first session only. When the topology is
/// missing after all (deleted in between), that session cannot consume; the next declares it,
/// and the matter is served.
#[actix_rt::test]
async fn a_consumer_told_the_topology_is_declared_declares_it_when_it_is_missing() {
    let r = rig(Duration::from_secs(60)).await;
    r.scope.topology.delete(&r.opts.url).await;
    let queue = r.scope.topology.trigger_queue.clone();
    assert!(
        !queue_exists(&queue).await,
        "the test starts without the queue"
    );
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges())
        .declared()
        .start();
    eventually(
        Duration::from_secs(20),
        "a later session of the consumer to declare the missing queue",
        || async { queue_exists(&queue).await.then_some(()) },
    )
    .await;
    let _relay = relay_serves_a_new_matter(&r, "the matter to be served").await;
}

/// Whether the broker has queue `name` (a passive declare, on a channel of its own: a missing
/// queue closes the channel that asked).
async fn queue_exists(name: &str) -> bool {
    channel()
        .await
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .is_ok()
}

#[actix_rt::test]
async fn a_relay_crash_between_publish_and_mark_delivers_twice_and_applies_once() {
    let r = rig(Duration::from_secs(60)).await;
    let firm = Uuid::new_v4();
    let matter = Uuid::new_v4();
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    // The crashed relay: it published the row (confirmed) but died before marking it.
    let rows = briefrail::ledger::outbox::lock_unpublished(&mut c, 10)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let (body, props) = message::encode(&rows[0].envelope());
    let ch = channel().await;
    ch.basic_publish(
        r.scope.topology.events_exchange.as_str().into(),
        rows[0].event_name.as_str().into(),
        BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        },
        &body,
        props,
    )
    .await
    .unwrap()
    .await
    .unwrap();
    // The consumer applies that copy first; then the restarted relay publishes it again and the
    // consumer sees it a second time, in a batch of its own (two copies in one batch are told
    // apart before the ledger is asked; this test is about the ledger's inbox key).
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    eventually(
        Duration::from_secs(20),
        "the crashed relay's copy applied",
        || async { (get(&r.opts.metrics.counters.events_consumed) >= 1).then_some(()) },
    )
    .await;
    let _relay = Relay::new(r.opts.clone()).start();
    until_served(
        &r.db,
        firm,
        matter,
        Duration::from_secs(20),
        "the matter to be served",
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "the duplicate delivery",
        || async { (get(&r.opts.metrics.counters.events_duplicate) >= 1).then_some(()) },
    )
    .await;
    assert_eq!(
        get(&r.opts.metrics.counters.events_consumed),
        1,
        "applied once"
    );
    assert_eq!(
        count(
            &mut r.db.pool.get().await.unwrap(),
            "SELECT count(*) AS n FROM ops.consumed_events"
        )
        .await,
        1
    );
    let job = reads::job(&mut c, firm, matter).await.unwrap().unwrap();
    assert_eq!(
        job.requested_generation, 2,
        "one demand (+1) and one claim (+1), not two demands"
    );
    // One trace from the fact to the frame: the run carries the fact's trace id and event id.
    let run = reads::runs(&mut c, firm, matter, 1)
        .await
        .unwrap()
        .remove(0);
    let tp = briefrail::trace::Traceparent::parse(rows[0].traceparent.as_deref().unwrap()).unwrap();
    assert_eq!(run.trace_id.as_deref(), Some(tp.trace_id_hex().as_str()));
    assert!(run.event_ids.contains(&Some(rows[0].event_id)));
}

#[actix_rt::test]
async fn a_purged_queue_is_reconciled_and_the_demand_served() {
    let r = rig(Duration::from_millis(800)).await;
    let firm = Uuid::new_v4();
    let mut c = r.db.pool.get().await.unwrap();
    let mut matters = Vec::new();
    for _ in 0..5 {
        let m = Uuid::new_v4();
        facts::create_matter(&mut c, firm, m, "In re Initech")
            .await
            .unwrap();
        matters.push(m);
    }
    // Published with nobody consuming; then the queue is purged: the messages are gone.
    let _relay = Relay::new(r.opts.clone()).start();
    eventually(Duration::from_secs(20), "everything published", || async {
        (count(
            &mut r.db.pool.get().await.unwrap(),
            "SELECT count(*) AS n FROM ops.domain_event_outbox WHERE published_at IS NULL",
        )
        .await
            == 0)
            .then_some(())
    })
    .await;
    let ch = channel().await;
    let purged = ch
        .queue_purge(
            r.scope.topology.trigger_queue.as_str().into(),
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(purged, 5);
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    for m in &matters {
        eventually(
            Duration::from_secs(30),
            "reconciliation to serve the matter",
            || async { served(&r.db, firm, *m).await.then_some(()) },
        )
        .await;
    }
    assert!(get(&r.opts.metrics.counters.events_republished) >= 5);
}

#[actix_rt::test]
async fn poison_messages_are_dead_lettered_with_a_reason_and_consumption_goes_on() {
    let r = rig(Duration::from_secs(60)).await;
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    let ch = channel().await;
    let good = |name: &str| {
        serde_json::json!({
        "event_id": Uuid::new_v4(), "event_name": name, "firm_id": Uuid::new_v4(),
        "matter_id": Uuid::new_v4(), "occurred_at": chrono::Utc::now() })
        .to_string()
        .into_bytes()
    };
    let poison: Vec<(&str, Vec<u8>)> = vec![
        ("not json", b"\x00\x01 definitely not json".to_vec()),
        ("missing event id", br#"{"event_name":"document.uploaded","firm_id":"00000000-0000-0000-0000-000000000001"}"#.to_vec()),
        ("unknown event name", good("matter.exploded")),
        ("ten MiB", vec![b'{'; 10 * 1024 * 1024]),
    ];
    for (_, body) in &poison {
        publish_raw(&ch, &r, "document.uploaded", body).await;
    }
    // A valid event after the poison is still consumed.
    let _relay = relay_serves_a_new_matter(&r, "the valid event after the poison").await;

    let mut reasons = Vec::new();
    for _ in 0..poison.len() {
        reasons.push(next_dead_letter_reason(&ch, &r.scope).await);
    }
    // Deliveries that arrive together are handled as a batch: their dead letters need not
    // keep the order they were published in, but each names its own reason.
    for expected in [
        "not a nudge: expected value",
        "missing field `event_id`",
        "not in the ledger",
        "exceeds",
    ] {
        assert_eq!(
            reasons.iter().filter(|r| r.contains(expected)).count(),
            1,
            "one dead letter says {expected:?}: {reasons:?}"
        );
    }
    r.dead_lettered(4).await;
    // Each is in the ledger too, with its reason, for the console and `briefrail dead-letters`;
    // the ten-MiB body is kept truncated, and a body that named an event id is filed under it.
    let mut c = r.db.pool.get().await.unwrap();
    let ledger = briefrail::ledger::dead_letters::list(&mut c, false, 10)
        .await
        .unwrap();
    let said: Vec<&str> = ledger.iter().map(|d| d.reason.as_str()).collect();
    assert_eq!(ledger.len(), 4, "{said:?}");
    for expected in [
        "expected value",
        "missing field `event_id`",
        "not in the ledger",
        "exceeds",
    ] {
        assert_eq!(
            said.iter().filter(|r| r.contains(expected)).count(),
            1,
            "one ledger dead letter says {expected:?}: {said:?}"
        );
    }
    let big = ledger
        .iter()
        .find(|d| d.reason.contains("exceeds"))
        .unwrap();
    assert!(big.body_truncated);
    let named = ledger
        .iter()
        .find(|d| d.reason.contains("not in the ledger"))
        .unwrap();
    assert!(named.event_id.is_some() && named.node_id == r.opts.node_id);
}

#[actix_rt::test]
async fn two_relays_drain_five_thousand_events_without_loss_or_double_publish() {
    let r = rig(Duration::from_secs(600)).await;
    let ch = channel().await;
    // A tap on every event name, to count what reached the broker.
    let tap = format!("{}.tap", r.scope.prefix);
    ch.queue_declare(
        tap.as_str().into(),
        QueueDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        tap.as_str().into(),
        r.scope.topology.events_exchange.as_str().into(),
        "#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut deliveries = ch
        .basic_consume(
            tap.as_str().into(),
            "tap".into(),
            lapin::options::BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let firm = Uuid::new_v4();
    let matter = Uuid::new_v4();
    let mut c = r.db.pool.get().await.unwrap();
    c.batch_execute(&format!(
        "INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
         SELECT gen_random_uuid(), '{firm}', '{matter}', 'brief.requested' FROM generate_series(1, 5000)"
    ))
    .await
    .unwrap();
    let mut a = r.opts.clone();
    a.node_id = "relay-a".into();
    let mut b = r.opts.clone();
    b.node_id = "relay-b".into();
    let _ra = Relay::new(a).start();
    let _rb = Relay::new(b).start();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < 5000 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of 5000 reached the broker",
            seen.len()
        );
        if let Ok(Some(Ok(d))) =
            tokio::time::timeout(Duration::from_secs(5), deliveries.next()).await
        {
            *seen
                .entry(d.properties.message_id().as_ref().unwrap().to_string())
                .or_default() += 1;
        }
    }
    // Give a double publish every chance to show up.
    while let Ok(Some(Ok(d))) =
        tokio::time::timeout(Duration::from_millis(1500), deliveries.next()).await
    {
        *seen
            .entry(d.properties.message_id().as_ref().unwrap().to_string())
            .or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{} events published more than once",
        twice.len()
    );
    assert_eq!(seen.len(), 5000);
    eventually(
        Duration::from_secs(20),
        "every row marked published",
        || async {
            (count(
                &mut r.db.pool.get().await.unwrap(),
                "SELECT count(*) AS n FROM ops.domain_event_outbox WHERE published_at IS NULL",
            )
            .await
                == 0)
                .then_some(())
        },
    )
    .await;
}

#[actix_rt::test]
async fn an_event_whose_transaction_commits_late_is_still_published() {
    let r = rig(Duration::from_secs(600)).await;
    let _relay = Relay::new(r.opts.clone()).start();
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    let firm = Uuid::new_v4();
    let (early, late) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, early, "Early v. Late")
        .await
        .unwrap();
    // A transaction takes a sequence value first and commits last.
    let mut slow = r.db.connection().await.unwrap();
    slow.batch_execute("BEGIN").await.unwrap();
    slow.batch_execute(&format!(
        "INSERT INTO record.matters (firm_id, matter_id, title) VALUES ('{firm}', '{late}', 'Late v. Early');
         INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
         VALUES (gen_random_uuid(), '{firm}', '{late}', 'matter.created')"
    ))
    .await
    .unwrap();
    let later = Uuid::new_v4();
    facts::create_matter(&mut c, firm, later, "Later v. Early")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the later event to be served",
        || async { served(&r.db, firm, later).await.then_some(()) },
    )
    .await;
    slow.batch_execute("COMMIT").await.unwrap();
    eventually(
        Duration::from_secs(20),
        "the late-committing event to be served",
        || async { served(&r.db, firm, late).await.then_some(()) },
    )
    .await;
    eventually(Duration::from_secs(20), "the early event", || async {
        served(&r.db, firm, early).await.then_some(())
    })
    .await;
}

#[actix_rt::test]
async fn the_postgres_transport_applies_each_event_once_and_survives_late_commits() {
    use briefrail::transport::postgres::{PgTransport, drain_once};
    let r = rig(Duration::from_secs(600)).await;
    let opts = pg_transport(&r, 50);
    let firm = Uuid::new_v4();
    let (a, late) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, a, "A v. B")
        .await
        .unwrap();
    let mut slow = r.db.connection().await.unwrap();
    slow.batch_execute("BEGIN").await.unwrap();
    slow.batch_execute(&format!(
        "INSERT INTO record.matters (firm_id, matter_id, title) VALUES ('{firm}', '{late}', 'Late v. B');
         INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
         VALUES (gen_random_uuid(), '{firm}', '{late}', 'matter.created')"
    ))
    .await
    .unwrap();
    let _t = PgTransport::new(opts.clone(), r.node.nudges()).start();
    eventually(
        Duration::from_secs(20),
        "served over LISTEN/NOTIFY",
        || async { served(&r.db, firm, a).await.then_some(()) },
    )
    .await;
    slow.batch_execute("COMMIT").await.unwrap();
    eventually(
        Duration::from_secs(20),
        "the late commit served",
        || async { served(&r.db, firm, late).await.then_some(()) },
    )
    .await;

    // A duplicate (the same event offered again, as after a crash before the mark): no effect.
    let before = reads::job(&mut c, firm, a).await.unwrap().unwrap();
    c.batch_execute("UPDATE ops.domain_event_outbox SET published_at = NULL")
        .await
        .unwrap();
    let taken = drain_once(&opts, &r.node.nudges()).await.unwrap();
    assert_eq!(taken, 2);
    assert_eq!(
        reads::job(&mut c, firm, a)
            .await
            .unwrap()
            .unwrap()
            .requested_generation,
        before.requested_generation
    );
    assert!(get(&r.opts.metrics.counters.events_duplicate) >= 2);
    assert_eq!(
        count(
            &mut r.db.pool.get().await.unwrap(),
            "SELECT count(*) AS n FROM ops.consumed_events"
        )
        .await,
        2
    );
}

/// A demand that cannot be recorded for a while (its job row is locked by a stuck transaction,
/// so every attempt fails the same transient way) is retried in place, with backoff: it is not
/// requeued toward the quorum queue's delivery limit, never reaches the dead-letter queue (that
/// is for input nobody may believe), and lands once the lock is gone.
#[actix_rt::test]
async fn a_demand_that_cannot_be_recorded_yet_is_retried_in_place_and_never_dead_lettered() {
    let mut r = rig(Duration::from_secs(600)).await;
    let mut o = briefrail::db::PoolOptions::new(r.db.url.clone()).size(4);
    o.lock_timeout = Duration::from_millis(150);
    r.opts.pool = briefrail::db::connect(&o).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Stuck v. Lock")
        .await
        .unwrap();
    briefrail::ledger::transitions::demand(&mut c, firm, matter)
        .await
        .unwrap();
    let mut holder = r.db.connection().await.unwrap();
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .batch_execute(&format!(
            "SELECT 1 FROM ops.matter_frame_jobs WHERE matter_id = '{matter}' FOR UPDATE"
        ))
        .await
        .unwrap();
    facts::request_brief(&mut c, firm, matter).await.unwrap();
    let _relay = Relay::new(r.opts.clone()).start();
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    // Longer than DELIVERY_LIMIT requeues would take: a requeueing consumer has the broker
    // dead-letter the message by now.
    let limit = briefrail::transport::amqp::topology::DELIVERY_LIMIT as u64;
    tokio::time::sleep(Duration::from_millis(700 * (limit + 2))).await;
    let ch = channel().await;
    let dead = ch
        .basic_get(
            r.scope.topology.dead_queue.as_str().into(),
            BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap();
    assert!(
        dead.is_none(),
        "a valid message was dead-lettered because the database said wait: {:?}",
        dead.map(|d| d.delivery.properties.headers().clone())
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    until_served(
        &r.db,
        firm,
        matter,
        Duration::from_secs(30),
        "the held delivery to record its demand once the lock is gone",
    )
    .await;
    assert_eq!(
        get(&r.opts.metrics.counters.events_republished),
        0,
        "served from the delivery itself, not from reconciliation"
    );
}

/// Catalogue row 22: a message whose consumer dies on it every time (here: a consumer that
/// takes it and closes its channel without an answer, DELIVERY_LIMIT + 1 times) is moved to the
/// dead-letter exchange by the broker; the matter is still served, from the ledger, by
/// reconciliation.
#[actix_rt::test]
async fn a_message_whose_consumer_keeps_dying_reaches_the_dead_letter_queue_and_reconciliation_serves_the_matter()
 {
    let r = rig(Duration::from_secs(3)).await;
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Poison v. Pill")
        .await
        .unwrap();
    let _relay = Relay::new(r.opts.clone()).start();
    let conn = amqp::connect(&SecretUrl::new(AMQP_URL), "test-dying-consumer")
        .await
        .unwrap();
    let limit = briefrail::transport::amqp::topology::DELIVERY_LIMIT;
    for death in 0..=limit {
        let ch = conn.create_channel().await.unwrap();
        let got = eventually(Duration::from_secs(10), "the message again", || async {
            ch.basic_get(
                r.scope.topology.trigger_queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
            .unwrap()
        })
        .await;
        assert_eq!(got.delivery.redelivered, death > 0);
        // The consumer dies: its channel goes away with the message unanswered.
        ch.close(200, "dying".into()).await.unwrap();
    }
    let ch = channel().await;
    let dead = eventually(
        Duration::from_secs(20),
        "the broker to dead-letter the message",
        || async {
            ch.basic_get(
                r.scope.topology.dead_queue.as_str().into(),
                BasicGetOptions { no_ack: true },
            )
            .await
            .unwrap()
        },
    )
    .await;
    let headers = dead
        .delivery
        .properties
        .headers()
        .clone()
        .unwrap_or_default();
    assert!(
        headers.inner().contains_key("x-death")
            || headers.inner().contains_key("x-first-death-reason"),
        "dead-lettered by the broker: {headers:?}"
    );
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    until_served(
        &r.db,
        firm,
        matter,
        Duration::from_secs(60),
        "reconciliation to serve the matter",
    )
    .await;
    assert!(get(&r.opts.metrics.counters.events_republished) >= 1);
}

/// Publishes one outbox row as the relay would (its envelope, mandatory, confirmed).
async fn publish_row(
    ch: &lapin::Channel,
    exchange: &str,
    env: &briefrail::ledger::inbox::EventEnvelope,
) {
    let (body, props) = message::encode(env);
    ch.basic_publish(
        exchange.into(),
        env.event_name.as_str().into(),
        BasicPublishOptions::default(),
        &body,
        props,
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

async fn newest_event(db: &TestDb, matter: Uuid) -> briefrail::ledger::models::OutboxRow {
    use briefrail::schema::ops::domain_event_outbox::dsl as o;
    let mut c = db.pool.get().await.unwrap();
    o::domain_event_outbox
        .filter(o::matter_id.eq(matter))
        .order(o::seq.desc())
        .select(briefrail::ledger::models::OutboxRow::as_select())
        .first(&mut c)
        .await
        .unwrap()
}

/// Issue "trust only the ledger", defect 1, end to end: a nudge on the bus with a real event
/// id and another matter's id is refused to the dead-letter queue; the real nudge that follows
/// still brings the document into the Brief.
#[actix_rt::test]
async fn a_forged_nudge_on_the_bus_is_dead_lettered_and_the_real_fact_reaches_the_brief() {
    let r = rig(Duration::from_secs(600)).await;
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    let ch = channel().await;
    let ex = r.scope.topology.events_exchange.clone();
    let (firm, a, b) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    for m in [a, b] {
        facts::create_matter(&mut c, firm, m, "Acme v. Globex")
            .await
            .unwrap();
        publish_row(&ch, &ex, &newest_event(&r.db, m).await.envelope()).await;
        eventually(Duration::from_secs(20), "the matter served", || async {
            served(&r.db, firm, m).await.then_some(())
        })
        .await;
    }
    facts::add_document(
        &mut c,
        facts::NewDocument {
            document_id: Uuid::new_v4(),
            firm_id: firm,
            matter_id: a,
            title: "Exhibit Seven".into(),
            dated: None,
            body: "the evidence".into(),
        },
    )
    .await
    .unwrap();
    let real = newest_event(&r.db, a).await.envelope();
    let mut forged = real.clone();
    forged.matter_id = b;
    publish_row(&ch, &ex, &forged).await;
    eventually(Duration::from_secs(20), "the forgery handled", || async {
        (get(&r.opts.metrics.counters.dead_lettered)
            + get(&r.opts.metrics.counters.events_consumed)
            >= 3)
            .then_some(())
    })
    .await;
    publish_row(&ch, &ex, &real).await;
    eventually(
        Duration::from_secs(20),
        "the document in matter A's Brief",
        || async {
            let mut c = r.db.pool.get().await.unwrap();
            let f = reads::latest_frame(&mut c, firm, a).await.unwrap()?;
            f.body.to_string().contains("Exhibit Seven").then_some(())
        },
    )
    .await;
    let reason = next_dead_letter_reason(&ch, &r.scope).await;
    assert_eq!(
        get(&r.opts.metrics.counters.nudges_refused),
        1,
        "the refusal is counted"
    );
    assert!(
        reason.contains("matter_id"),
        "the reason names the field: {reason}"
    );
}

/// Defect 6: a fact the rail does not hear (matter.archived) is still routable, so it drains
/// from the outbox instead of being retried forever.
#[actix_rt::test]
async fn every_recorded_fact_drains_from_the_outbox_even_one_the_rail_does_not_hear() {
    let r = rig(Duration::from_secs(600)).await;
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    facts::archive_matter(&mut c, firm, matter).await.unwrap();
    let _relay = Relay::new(r.opts.clone()).start();
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    eventually(
        Duration::from_secs(20),
        "every outbox row published",
        || async {
            (count(
                &mut r.db.pool.get().await.unwrap(),
                "SELECT count(*) AS n FROM ops.domain_event_outbox WHERE published_at IS NULL",
            )
            .await
                == 0)
                .then_some(())
        },
    )
    .await;
    eventually(Duration::from_secs(20), "every event consumed", || async {
        (count(
            &mut r.db.pool.get().await.unwrap(),
            "SELECT count(*) AS n FROM ops.consumed_events",
        )
        .await
            == 2)
            .then_some(())
    })
    .await;
    assert_eq!(
        get(&r.opts.metrics.counters.dead_lettered),
        0,
        "a valid fact is not a dead letter"
    );
}

/// Defect 7: two nodes on the postgres transport drain interleaved demands for the same
/// matters at once; neither may deadlock (each locks job rows in one global order).
#[actix_rt::test]
async fn two_postgres_transports_draining_interleaved_demands_never_deadlock() {
    use briefrail::transport::postgres::drain_once;
    let r = rig(Duration::from_secs(600)).await;
    let opts = pg_transport(&r, 40);
    let firm = Uuid::new_v4();
    let mut c = r.db.pool.get().await.unwrap();
    let mut matters = Vec::new();
    for i in 0..40 {
        let m = Uuid::new_v4();
        facts::create_matter(&mut c, firm, m, &format!("Matter {i}"))
            .await
            .unwrap();
        matters.push(m);
    }
    while drain_once(&opts, &r.node.nudges()).await.unwrap() > 0 {}
    let deadlocks = || async {
        #[derive(QueryableByName)]
        struct D {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut c = r.db.pool.get().await.unwrap();
        c.batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap();
        diesel::sql_query(
            "SELECT deadlocks AS n FROM pg_stat_database WHERE datname = current_database()",
        )
        .get_result::<D>(&mut c)
        .await
        .unwrap()
        .n
    };
    let before = deadlocks().await;
    for round in 0..3 {
        // Ascending, descending, ascending: batches of 40 lock the same rows in opposite orders.
        let order: Vec<Uuid> = matters
            .iter()
            .chain(matters.iter().rev())
            .chain(matters.iter())
            .copied()
            .collect();
        for m in order {
            facts::request_brief(&mut c, firm, m).await.unwrap();
        }
        let nudges = r.node.nudges();
        let (x, y, z) = tokio::join!(
            drain_once(&opts, &nudges),
            drain_once(&opts, &nudges),
            drain_once(&opts, &nudges)
        );
        for (i, d) in [x, y, z].into_iter().enumerate() {
            assert!(d.is_ok(), "round {round}, drain {i}: {:?}", d.err());
        }
        while drain_once(&opts, &r.node.nudges()).await.unwrap() > 0 {}
    }
    // Statistics reach pg_stat_database when a backend goes idle (at most a second later).
    // Kept as a sleep: it waits on Postgres' statistics, not on a lease or a backoff, so the
    // ledger clock cannot stand in for it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(deadlocks().await, before, "Postgres detected a deadlock");
}

/// The mutation controls (`tests/common/mutations.rs`): every deliberate bug in the live SQL
/// that names a killer in this binary makes each of those killers fail.
#[actix_rt::test]
async fn every_planted_bug_fails_a_guarantee_test() {
    common::mutations::assert_caught(module_path!()).await;
}

/// A cluster's members listed in `transport.amqp_url`: a member that does not answer is passed
/// over, and successive connections start at successive members (a session that lost its
/// broker reconnects to a survivor). None answering is a broker error naming no password.
#[actix_rt::test]
async fn a_listed_member_that_does_not_answer_is_passed_over() {
    // Port 9 (discard) refuses on loopback: a member that is down.
    let down = "amqp://guest:guest@127.0.0.1:9/%2f";
    let list = SecretUrl::new(format!("{down},{AMQP_URL}"));
    for _ in 0..3 {
        let conn = amqp::connect(&list, "briefrail-test-failover")
            .await
            .expect("the live member answers whichever member is tried first");
        conn.close(200, "done".into()).await.unwrap();
    }
    let dead =
        SecretUrl::new("amqp://guest:s3cr3t@127.0.0.1:9/%2f,amqp://guest:s3cr3t@127.0.0.1:7/%2f");
    let e = amqp::connect(&dead, "briefrail-test-failover")
        .await
        .expect_err("no member answers");
    assert_eq!(e.kind(), briefrail::error::ErrorKind::Transient, "{e}");
    assert!(!briefrail::error::report(&e).contains("s3cr3t"), "{e}");
}

/// Retention (issue "long life"): a late copy of an event retention removed (the broker kept a
/// duplicate past `retention.events_days`) is acked with no effect and counted, never
/// dead-lettered; a message for an id the ledger never held still is.
#[actix_rt::test]
async fn a_late_copy_of_an_event_retention_removed_is_acked_counted_and_changes_nothing() {
    let r = rig(Duration::from_secs(600)).await;
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    let ch = channel().await;
    let ex = r.scope.topology.events_exchange.clone();
    let (firm, m) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, m, "Acme v. Globex")
        .await
        .unwrap();
    let event = newest_event(&r.db, m).await;
    outbox::mark_published(&mut c, &[event.event_id])
        .await
        .unwrap();
    publish_row(&ch, &ex, &event.envelope()).await;
    eventually(Duration::from_secs(20), "the matter served", || async {
        served(&r.db, firm, m).await.then_some(())
    })
    .await;
    let before = reads::job(&mut c, firm, m).await.unwrap().unwrap();
    r.db.advance_ledger_clock(Duration::from_secs(31 * 86_400))
        .await
        .unwrap();
    let removed = briefrail::ledger::retention::prune_events(
        &mut c,
        briefrail::ledger::inbox::BRIEF_RAIL,
        Duration::from_secs(30 * 86_400),
        100,
    )
    .await
    .unwrap();
    assert_eq!(removed.events, 1);

    publish_row(&ch, &ex, &event.envelope()).await;
    eventually(Duration::from_secs(20), "the late copy counted", || async {
        (get(&r.opts.metrics.counters.nudges_expired) == 1).then_some(())
    })
    .await;
    let mut unknown = event.envelope();
    unknown.event_id = Uuid::new_v4();
    unknown.occurred_at = chrono::Utc::now() + chrono::Duration::days(60);
    publish_row(&ch, &ex, &unknown).await;
    let reason = next_dead_letter_reason(&ch, &r.scope).await;
    assert!(
        reason.contains(&unknown.event_id.to_string()),
        "only the unknown id is dead-lettered: {reason}"
    );
    r.dead_lettered(1).await;
    let after = reads::job(&mut c, firm, m).await.unwrap().unwrap();
    assert_eq!(
        (after.requested_generation, after.landed_generation),
        (before.requested_generation, before.landed_generation),
        "neither message changed the ledger"
    );
}

/// Seconds, by the ledger's clock, from `since` (an SQL expression: a time the ledger stamped)
/// to a matter's first claim.
async fn claimed_after(db: &TestDb, matter: Uuid, since: &str) -> f64 {
    #[derive(QueryableByName)]
    struct S {
        #[diesel(sql_type = diesel::sql_types::Double)]
        s: f64,
    }
    let mut c = db.pool.get().await.unwrap();
    diesel::sql_query(format!(
        "SELECT extract(epoch FROM (SELECT min(started_at) FROM ops.matter_frame_runs
                                     WHERE matter_id = '{matter}') - ({since}))::float8 AS s"
    ))
    .get_result::<S>(&mut c)
    .await
    .unwrap()
    .s
}

/// When a matter's first event was recorded.
fn recorded(matter: Uuid) -> String {
    format!("SELECT min(created_at) FROM ops.domain_event_outbox WHERE matter_id = '{matter}'")
}

/// When a matter's first demand was recorded (its event consumed): from there the wait is the
/// matter actor's alone, not the transport's start.
fn consumed(matter: Uuid) -> String {
    format!(
        "SELECT min(c.consumed_at) FROM ops.consumed_events c
           JOIN ops.domain_event_outbox o USING (event_id) WHERE o.matter_id = '{matter}'"
    )
}

/// The debounce window counts from the record, by the ledger's clock: a fact recorded a minute
/// before any transport ran is claimed at once, not a window after its nudge arrives; a fact
/// recorded while the transport runs still waits its whole window (so a burst of uploads lands
/// in one build). `start` starts the transport under test and returns what keeps it running.
async fn the_debounce_counts_from_the_record<K>(start: impl FnOnce(&Rig) -> K) {
    const WINDOW: Duration = Duration::from_millis(2500);
    let r = rig_with(Duration::from_secs(600), WINDOW).await;
    let firm = Uuid::new_v4();
    let (backlog, fresh) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, backlog, "Backlog v. Node")
        .await
        .unwrap();
    r.db.advance_ledger_clock(Duration::from_secs(60))
        .await
        .unwrap();
    let _transport = start(&r);
    eventually(Duration::from_secs(20), "the backlog served", || async {
        served(&r.db, firm, backlog).await.then_some(())
    })
    .await;
    // From its demand's recording to its claim, by the ledger's clock: the transport's start
    // (connections, declarations) is not part of it.
    let waited = claimed_after(&r.db, backlog, &consumed(backlog)).await;
    assert!(
        waited < WINDOW.as_secs_f64() / 2.0,
        "a fact recorded a minute ago waited for a debounce window: claimed {waited:.3} s \
         after its demand was recorded (window {WINDOW:?})"
    );

    facts::create_matter(&mut c, firm, fresh, "Fresh v. Node")
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the fresh fact served", || async {
        served(&r.db, firm, fresh).await.then_some(())
    })
    .await;
    let waited = claimed_after(&r.db, fresh, &recorded(fresh)).await;
    assert!(
        waited >= WINDOW.as_secs_f64() - 0.02,
        "a fact recorded while the node ran was claimed {waited:.3} s after it was recorded, \
         inside its {WINDOW:?} debounce window"
    );
}

#[actix_rt::test]
async fn over_amqp_the_debounce_counts_from_the_record() {
    the_debounce_counts_from_the_record(|r| {
        (
            Relay::new(r.opts.clone()).start(),
            TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start(),
        )
    })
    .await;
}

#[actix_rt::test]
async fn over_postgres_the_debounce_counts_from_the_record() {
    use briefrail::transport::postgres::PgTransport;
    the_debounce_counts_from_the_record(|r| {
        PgTransport::new(pg_transport(r, 50), r.node.nudges()).start()
    })
    .await;
}

/// A refused message that cannot be dead-lettered (here the ledger refuses to record it) stays
/// unacked and comes back; the genuine messages of its batch are still acked and their matters
/// nudged at once, not left for reconcile (their redelivery would be a duplicate, which nudges
/// no one).
#[actix_rt::test]
async fn a_dead_letter_that_fails_does_not_strand_the_rest_of_its_batch() {
    let r = rig(Duration::from_secs(600)).await;
    let ch = channel().await;
    let ex = r.scope.topology.events_exchange.clone();
    let (firm, a, b) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    refuse_dead_letters(&mut c).await;
    for m in [a, b] {
        facts::create_matter(&mut c, firm, m, "Acme v. Globex")
            .await
            .unwrap();
    }
    let mut forged = newest_event(&r.db, a).await.envelope();
    forged.matter_id = b;
    // Queued before any consumer runs, so they are delivered together, the forgery first.
    publish_row(&ch, &ex, &forged).await;
    for m in [a, b] {
        publish_row(&ch, &ex, &newest_event(&r.db, m).await.envelope()).await;
    }
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    for m in [a, b] {
        eventually(
            Duration::from_secs(20),
            "each genuine matter of the batch served",
            || async { served(&r.db, firm, m).await.then_some(()) },
        )
        .await;
    }
    // The ledger refuses the forgery's dead letter every time: after its tries it is kept in
    // the dead-letter queue alone, saying why, and the session goes on.
    eventually(
        Duration::from_secs(20),
        "the forgery in the dead-letter queue only",
        || async { (get(&r.opts.metrics.counters.dead_lettered) == 1).then_some(()) },
    )
    .await;
    assert_eq!(get(&r.opts.metrics.counters.dead_letters_unrecorded), 1);
    let why = next_dead_letter_header(&ch, &r.scope, message::UNRECORDED).await;
    assert!(why.contains("this test refuses every dead letter"), "{why}");
    assert_eq!(
        sequence(&r.db, "refusals").await,
        i64::from(briefrail::transport::amqp::consumer::RECORD_ATTEMPTS),
        "tried a bounded number of times"
    );
}

/// A batch's failure ends the consumer's session only once the batches already applying have
/// settled. Here the genuine pair is held mid-transaction (its inbox insert waits for a lock
/// this test holds) when a forgery arrives on its own and its dead letter cannot be published
/// (the dead-letter exchange was deleted: the broker closes the channel), which ends the
/// session. The held batch must then commit, ack and nudge in that session: each genuine
/// delivery is recorded once. A session that dropped the batch in flight rolled it back and
/// applied it again on redelivery (seen as a second insert attempt, counted by a sequence,
/// which no rollback undoes).
#[actix_rt::test]
async fn a_failed_batch_ends_the_session_only_after_the_batches_in_flight_settle() {
    let r = rig(Duration::from_secs(600)).await;
    let ch = channel().await;
    let ex = r.scope.topology.events_exchange.clone();
    let (firm, a, b) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    c.batch_execute(
        "CREATE SEQUENCE public.inserts;
         CREATE FUNCTION public.hold_inserts() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM nextval('public.inserts');
               -- Held as long as the test says, not the pool's lock_timeout.
               PERFORM set_config('lock_timeout', '0', true);
               PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$;
         CREATE TRIGGER hold_inserts BEFORE INSERT ON ops.consumed_events
         FOR EACH ROW EXECUTE FUNCTION public.hold_inserts();",
    )
    .await
    .unwrap();
    for m in [a, b] {
        facts::create_matter(&mut c, firm, m, "Acme v. Globex")
            .await
            .unwrap();
    }
    let mut holder = r.db.connection().await.unwrap();
    holder
        .batch_execute("SELECT pg_advisory_lock(4242)")
        .await
        .unwrap();
    for m in [a, b] {
        publish_row(&ch, &ex, &newest_event(&r.db, m).await.envelope()).await;
    }
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    let held = || async {
        count(
            &mut r.db.pool.get().await.unwrap(),
            "SELECT count(*) AS n FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event = 'advisory'",
        )
        .await
    };
    eventually(
        Duration::from_secs(20),
        "the genuine pair's batch waits in its transaction",
        || async { (held().await > 0).then_some(()) },
    )
    .await;
    // Both genuine deliveries are in a batch already (each batch locks its events' outbox rows
    // before it applies them, and nothing else here locks or updates them): otherwise the
    // second could wait for a lane and go in one batch with the forgery, which then waits on
    // the held lock with it.
    eventually(
        Duration::from_secs(20),
        "both genuine deliveries taken into a batch",
        || async {
            let locked = count(
                &mut r.db.pool.get().await.unwrap(),
                &format!(
                    "SELECT count(*) AS n FROM ops.domain_event_outbox
                      WHERE matter_id IN ('{a}', '{b}') AND xmax::text <> '0'"
                ),
            )
            .await;
            (locked == 2).then_some(())
        },
    )
    .await;
    ch.exchange_delete(
        r.scope.topology.dead_exchange.as_str().into(),
        Default::default(),
    )
    .await
    .unwrap();
    let mut forged = newest_event(&r.db, a).await.envelope();
    forged.matter_id = b;
    publish_row(&ch, &ex, &forged).await;
    eventually(
        Duration::from_secs(20),
        "the forgery's dead letter filed, then its publication refused",
        || async {
            (count(
                &mut r.db.pool.get().await.unwrap(),
                "SELECT count(*) AS n FROM ops.dead_letters",
            )
            .await
                > 0)
            .then_some(())
        },
    )
    .await;
    // A consumer that ended the session at once reconnects (200 ms) and applies the genuine
    // pair again, a second waiter on the held lock: seen, or two seconds without it, the lock
    // is let go.
    let since = std::time::Instant::now();
    while held().await < 2 && since.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holder
        .batch_execute("SELECT pg_advisory_unlock(4242)")
        .await
        .unwrap();
    for m in [a, b] {
        eventually(
            Duration::from_secs(20),
            "each genuine matter served",
            || async { served(&r.db, firm, m).await.then_some(()) },
        )
        .await;
    }
    assert_eq!(
        sequence(&r.db, "inserts").await,
        2,
        "each genuine delivery recorded once: its batch settled in the session that applied it"
    );
    assert!(
        get(&r.opts.metrics.counters.consumer_sessions_ended) >= 1,
        "the refused publication ended the session"
    );
}

/// Makes the ledger refuse every dead letter (a trigger that raises), counting each refusal in
/// the sequence `public.refusals`.
async fn refuse_dead_letters(c: &mut diesel_async::AsyncPgConnection) {
    c.batch_execute(
        "CREATE SEQUENCE public.refusals;
         CREATE FUNCTION public.refuse_dead_letters() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM nextval('public.refusals'); RAISE EXCEPTION 'this test refuses every dead letter'; END $$;
         CREATE TRIGGER refuse_dead_letters BEFORE INSERT ON ops.dead_letters
         FOR EACH ROW EXECUTE FUNCTION public.refuse_dead_letters();",
    )
    .await
    .unwrap();
}

/// How many values `public.<name>` has handed out (0 before the first).
async fn sequence(db: &TestDb, name: &str) -> i64 {
    let mut c = db.pool.get().await.unwrap();
    diesel::sql_query(format!(
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM public.{name}"
    ))
    .get_result::<crate::common::Count>(&mut c)
    .await
    .unwrap()
    .n
}

/// A consumer that stopped between its commit and its nudge (here: the demand applied by hand,
/// no nudge sent) leaves the message unacked; its redelivery is a duplicate, and the duplicate
/// nudges the matter, so it is served now rather than when reconcile finds it.
#[actix_rt::test]
async fn a_duplicate_delivery_nudges_its_matter() {
    let r = rig(Duration::from_secs(600)).await;
    let ch = channel().await;
    let ex = r.scope.topology.events_exchange.clone();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    let event = newest_event(&r.db, matter).await.envelope();
    let applied =
        briefrail::ledger::inbox::apply(&mut c, briefrail::ledger::inbox::BRIEF_RAIL, &event)
            .await
            .unwrap();
    assert!(
        matches!(applied, briefrail::ledger::inbox::Applied::Demand { .. }),
        "{applied:?}"
    );
    publish_row(&ch, &ex, &event).await;
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    until_served(
        &r.db,
        firm,
        matter,
        Duration::from_secs(20),
        "the matter served after its duplicate",
    )
    .await;
    assert_eq!(get(&r.opts.metrics.counters.events_duplicate), 1);
}

/// How many deliveries of `queue` the broker holds unacknowledged (`rabbitmqctl`, the
/// broker's own count).
fn unacked(queue: &str) -> i64 {
    let out = std::process::Command::new("rabbitmqctl")
        .args([
            "list_queues",
            "-q",
            "--no-table-headers",
            "name",
            "messages_unacknowledged",
        ])
        .output()
        .expect("rabbitmqctl must be installed beside the broker for this test");
    assert!(out.status.success(), "rabbitmqctl list_queues: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(queue)).then(|| f.next().and_then(|n| n.parse().ok()))?
        })
        .unwrap_or_else(|| panic!("queue {queue} not listed by rabbitmqctl"))
}

/// One ack frame settles many deliveries, but never one whose batch is still applying: a
/// delivery held up in the ledger (its matter's job row locked) stays unacknowledged at the
/// broker while later batches commit around it, so a crash now would redeliver it; once it
/// commits, every delivery is acked.
#[actix_rt::test]
async fn a_batch_committed_behind_one_still_applying_never_acks_it() {
    let r = rig(Duration::from_secs(600)).await;
    let ch = channel().await;
    let ex = r.scope.topology.events_exchange.clone();
    let firm = Uuid::new_v4();
    let held = Uuid::new_v4();
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, held, "Held v. Lock")
        .await
        .unwrap();
    briefrail::ledger::transitions::demand(&mut c, firm, held)
        .await
        .unwrap();
    facts::request_brief(&mut c, firm, held).await.unwrap();
    let mut holder = r.db.connection().await.unwrap();
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .batch_execute(&format!(
            "SELECT 1 FROM ops.matter_frame_jobs WHERE matter_id = '{held}' FOR UPDATE"
        ))
        .await
        .unwrap();
    publish_row(&ch, &ex, &newest_event(&r.db, held).await.envelope()).await;
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    eventually(
        Duration::from_secs(10),
        "the held delivery's batch waiting on the lock",
        || async {
            (count(
                &mut r.db.pool.get().await.unwrap(),
                "SELECT count(*) AS n FROM pg_stat_activity
                  WHERE wait_event_type = 'Lock' AND datname = current_database()",
            )
            .await
                > 0)
            .then_some(())
        },
    )
    .await;
    let others: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    for m in &others {
        facts::create_matter(&mut c, firm, *m, "Later v. Batch")
            .await
            .unwrap();
        publish_row(&ch, &ex, &newest_event(&r.db, *m).await.envelope()).await;
    }
    let later = format!(
        "SELECT count(*) AS n FROM ops.consumed_events c JOIN ops.domain_event_outbox o
           USING (event_id) WHERE o.matter_id IN ({})",
        others
            .iter()
            .map(|m| format!("'{m}'"))
            .collect::<Vec<_>>()
            .join(",")
    );
    eventually(
        Duration::from_secs(20),
        "the later deliveries committed",
        || async { (count(&mut r.db.pool.get().await.unwrap(), &later).await == 10).then_some(()) },
    )
    .await;
    // The broker's count is refreshed every `collect_statistics_interval` (5 s): watched for
    // longer than that while the lock is held, it must never reach zero (the held delivery
    // acked before its demand was recorded: a crash now would lose it).
    let queue = r.scope.topology.trigger_queue.clone();
    eventually(
        Duration::from_secs(20),
        "the broker counting the held delivery",
        || async { (unacked(&queue) >= 1).then_some(()) },
    )
    .await;
    let watch = std::time::Instant::now();
    while watch.elapsed() < Duration::from_secs(8) {
        let n = unacked(&queue);
        assert!(
            n >= 1,
            "the held delivery was acked while its batch was still applying"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    eventually(
        Duration::from_secs(30),
        "the held matter served",
        || async { served(&r.db, firm, held).await.then_some(()) },
    )
    .await;
    eventually(Duration::from_secs(20), "every delivery acked", || async {
        (unacked(&queue) == 0).then_some(())
    })
    .await;
}

/// Deliveries that arrive together are acked together: a backlog of 200 costs a few ack
/// frames (one per batch at most), not one per delivery, and leaves nothing unacknowledged.
#[actix_rt::test]
async fn a_backlog_is_acked_in_a_few_frames_and_nothing_is_left_unacked() {
    let r = rig(Duration::from_secs(600)).await;
    let ch = channel().await;
    let ex = r.scope.topology.events_exchange.clone();
    let firm = Uuid::new_v4();
    let mut c = r.db.pool.get().await.unwrap();
    let matters: Vec<Uuid> = (0..200).map(|_| Uuid::new_v4()).collect();
    for m in &matters {
        facts::create_matter(&mut c, firm, *m, "Backlog v. Frames")
            .await
            .unwrap();
        publish_row(&ch, &ex, &newest_event(&r.db, *m).await.envelope()).await;
    }
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    eventually(
        Duration::from_secs(30),
        "every delivery consumed",
        || async { (get(&r.opts.metrics.counters.events_consumed) == 200).then_some(()) },
    )
    .await;
    let queue = r.scope.topology.trigger_queue.clone();
    eventually(Duration::from_secs(20), "every delivery acked", || async {
        (unacked(&queue) == 0).then_some(())
    })
    .await;
    let frames = get(&r.opts.metrics.counters.ack_frames);
    assert!(
        frames * 4 <= 200,
        "{frames} ack frames for 200 deliveries that arrived together"
    );
}

/// Publishes `body` to the rig's events exchange under `key`, as a foreign publisher would.
async fn publish_raw(ch: &lapin::Channel, r: &Rig, key: &str, body: &[u8]) {
    ch.basic_publish(
        r.scope.topology.events_exchange.as_str().into(),
        key.into(),
        BasicPublishOptions::default(),
        body,
        Default::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

/// Postgres `text` refuses the NUL character. A message whose routing key holds one, or whose
/// body makes the decoder's error quote one, is still dead-lettered into the ledger (the text
/// escaped, the routing key's raw bytes kept beside it), and the trigger's session never ends
/// over it: a real upload right after is served at once, not after a reconnect backoff grown
/// by every message.
#[actix_rt::test]
async fn messages_with_nul_bytes_are_dead_lettered_and_the_trigger_keeps_serving() {
    let r = rig(Duration::from_secs(600)).await;
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    let ch = channel().await;
    let key = "document.uploaded\0forged";
    let named = serde_json::json!({
        "event_id": Uuid::new_v4(), "event_name": "document.uploaded", "firm_id": Uuid::new_v4(),
        "matter_id": Uuid::new_v4(), "occurred_at": chrono::Utc::now() })
    .to_string();
    // The decoder's error quotes the id's characters as they are: a NUL among them.
    let quoting = r#"{"event_id":"\u0000oops","event_name":"document.uploaded"}"#;
    for _ in 0..3 {
        publish_raw(&ch, &r, key, named.as_bytes()).await;
        publish_raw(&ch, &r, "document.uploaded", quoting.as_bytes()).await;
    }
    let mut c = r.db.pool.get().await.unwrap();
    let letters = eventually(
        Duration::from_secs(20),
        "six dead letters in the ledger",
        || async {
            let mut c = r.db.pool.get().await.unwrap();
            let l = briefrail::ledger::dead_letters::list(&mut c, false, 20)
                .await
                .unwrap();
            (l.len() == 6).then_some(l)
        },
    )
    .await;
    let (keyed, quoted): (Vec<_>, Vec<_>) =
        letters.iter().partition(|d| d.routing_key_hex.is_some());
    assert_eq!((keyed.len(), quoted.len()), (3, 3), "{letters:?}");
    for d in &keyed {
        assert_eq!(d.routing_key, "document.uploaded\\u{0}forged");
        assert_eq!(
            d.routing_key_hex.as_deref(),
            Some(hex(key.as_bytes()).as_str()),
            "the raw routing key is kept"
        );
    }
    for d in &quoted {
        assert!(d.reason.contains("\\u{0}"), "the NUL escaped: {}", d.reason);
        assert!(
            d.body_text.contains("oops"),
            "the body kept: {}",
            d.body_text
        );
    }
    r.dead_lettered(6).await;
    assert_eq!(get(&r.opts.metrics.counters.dead_letters_unrecorded), 0);
    assert_eq!(get(&r.opts.metrics.counters.consumer_sessions_ended), 0);
    // The session survived: a real upload is consumed and served at once.
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    let _relay = Relay::new(r.opts.clone()).start();
    until_served(
        &r.db,
        firm,
        matter,
        Duration::from_secs(5),
        "a real upload after the NUL messages",
    )
    .await;
}

/// A fact published but not consumed (here: the consumer stopped) is owed once it is older
/// than `OWED_AFTER`: its matter, whose every recorded demand is served, reads `owed`, never
/// `fresh`, and the gauges count it; once the trigger consumes it the matter is no longer owed.
#[actix_rt::test]
async fn a_published_fact_the_trigger_has_not_consumed_is_owed_not_fresh() {
    use briefrail::ledger::matters::{self, MatterState, OWED_AFTER};
    let r = rig(Duration::from_secs(600)).await;
    let consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, "Acme v. Globex")
        .await
        .unwrap();
    let _relay = Relay::new(r.opts.clone()).start();
    until_served(&r.db, firm, matter, Duration::from_secs(20), "the matter").await;
    let state = async || {
        let mut c = r.db.pool.get().await.unwrap();
        matters::state_of(&mut c, firm, matter, 3).await.unwrap()
    };
    assert_eq!(state().await, Some(MatterState::Fresh));
    consumer.send(briefrail::transport::Stop).await.unwrap();
    let event = facts::request_brief(&mut c, firm, matter).await.unwrap();
    eventually(Duration::from_secs(20), "the request published", || async {
        let n = count(
            &mut r.db.pool.get().await.unwrap(),
            &format!(
                "SELECT count(*) AS n FROM ops.domain_event_outbox
                  WHERE event_id = '{event}' AND published_at IS NOT NULL"
            ),
        )
        .await;
        (n == 1).then_some(())
    })
    .await;
    assert_eq!(state().await, Some(MatterState::Fresh), "not owed yet");
    r.db.advance_ledger_clock(OWED_AFTER + Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(state().await, Some(MatterState::Owed));
    let g = reads::gauges(&mut c).await.unwrap();
    assert_eq!(g.owed_facts, 1, "{g:?}");
    assert!(g.oldest_owed_seconds > OWED_AFTER.as_secs_f64(), "{g:?}");
    // The trigger back: consumed, the matter is built again and no longer owed.
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    eventually(Duration::from_secs(20), "the fact consumed", || async {
        (state().await != Some(MatterState::Owed)).then_some(())
    })
    .await;
    assert_eq!(reads::gauges(&mut c).await.unwrap().owed_facts, 0);
}

/// An outbox row whose event name cannot be a routing key (longer than an AMQP short string's
/// 255 bytes; a database may hold one written before the ledger refused such names) is failed
/// alone, its error kept on the row and the row unpublished; the relay publishes the events
/// before and after it. It used to stop the relay at its first attempt, on every node.
#[actix_rt::test]
async fn an_event_name_too_long_for_a_routing_key_fails_its_row_alone() {
    let r = rig(Duration::from_secs(600)).await;
    let firm = Uuid::new_v4();
    let (before, after) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = r.db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, before, "Before v. Long")
        .await
        .unwrap();
    let long = format!("matter.{}", "a".repeat(300));
    c.batch_execute(&format!(
        "ALTER TABLE ops.domain_event_outbox
             DROP CONSTRAINT IF EXISTS domain_event_outbox_event_name_fits_a_routing_key;
         INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name)
         VALUES (gen_random_uuid(), '{firm}', '{before}', '{long}')"
    ))
    .await
    .unwrap();
    let _consumer = TriggerConsumer::new(r.opts.clone(), r.node.nudges()).start();
    let _relay = Relay::new(r.opts.clone()).start();
    until_served(
        &r.db,
        firm,
        before,
        Duration::from_secs(20),
        "the event recorded before the long one",
    )
    .await;
    facts::create_matter(&mut c, firm, after, "After v. Long")
        .await
        .unwrap();
    until_served(
        &r.db,
        firm,
        after,
        Duration::from_secs(20),
        "an event recorded after the long one",
    )
    .await;
    #[derive(QueryableByName)]
    struct Failed {
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
        last_error: Option<String>,
        #[diesel(sql_type = diesel::sql_types::Bool)]
        published: bool,
    }
    let sql = format!(
        "SELECT last_error, published_at IS NOT NULL AS published
           FROM ops.domain_event_outbox WHERE event_name = '{long}'"
    );
    let row = eventually(
        Duration::from_secs(10),
        "the long row's failure recorded",
        || async {
            let row: Failed = diesel::sql_query(&sql)
                .get_result(&mut r.db.pool.get().await.unwrap())
                .await
                .unwrap();
            (row.published || row.last_error.is_some()).then_some(row)
        },
    )
    .await;
    assert!(
        !row.published,
        "a row the bus cannot carry is never marked published"
    );
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.contains("routing key") && error.contains("307 bytes"),
        "the row names why it is not published: {error:?}"
    );
}
