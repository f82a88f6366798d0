//! Faults on the bus itself: lost nudges (purge), unroutable publishes, duplicates, and
//! messages nobody may believe (malformed, forged). Every message the suite publishes carries
//! a `message_id` of its own, so the dead-letter check can tell its own input from the rail's.

use std::time::{Duration, Instant};

use briefrail::ledger::inbox::EventEnvelope;
use briefrail::secret::SecretUrl;
use briefrail::transport::amqp::{self, Topology, message};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
use uuid::Uuid;

use crate::world::{Injected, World};

async fn channel(w: &World) -> Result<(Connection, Channel), String> {
    let url = SecretUrl::new(w.broker.amqp_url_list());
    let conn = amqp::connect(&url, "briefrail-faults")
        .await
        .map_err(|e| format!("cannot connect to the broker cluster: {e}"))?;
    let ch = conn
        .create_channel()
        .await
        .map_err(|e| format!("no channel: {e}"))?;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| format!("confirm_select: {e}"))?;
    Ok((conn, ch))
}

/// Publishes to the events exchange and waits for the broker's ack.
async fn publish(
    ch: &Channel,
    t: &Topology,
    key: &str,
    body: &[u8],
    props: BasicProperties,
) -> Result<(), String> {
    let confirm = ch
        .basic_publish(
            t.events_exchange.as_str().into(),
            key.into(),
            BasicPublishOptions::default(),
            body,
            props,
        )
        .await
        .map_err(|e| format!("publish: {e}"))?
        .await
        .map_err(|e| format!("confirm: {e}"))?;
    if confirm.is_ack() {
        Ok(())
    } else {
        Err(format!("the broker did not ack: {confirm:?}"))
    }
}

/// The envelope of the newest event the ledger published.
async fn newest_event(w: &World) -> Result<EventEnvelope, String> {
    let id = w
        .lines(
            "SELECT event_id::text AS what FROM ops.domain_event_outbox
              WHERE published_at IS NOT NULL ORDER BY seq DESC LIMIT 1",
        )
        .await
        .into_iter()
        .next()
        .and_then(|s| s.parse::<Uuid>().ok())
        .ok_or("no published event yet")?;
    let mut c = w.pool.get().await.map_err(|e| e.to_string())?;
    let row = briefrail::ledger::outbox::event(&mut c, id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or(format!("event {id} vanished"))?;
    Ok(row.envelope())
}

/// Lost nudges (rows 21-22): the trigger queue purged; reconciliation must serve what was in it.
pub async fn purge(w: &mut World) -> Result<String, String> {
    let t = Topology::new(&w.prefix);
    let (conn, ch) = channel(w).await?;
    let n = ch
        .queue_purge(t.trigger_queue.as_str().into(), Default::default())
        .await
        .map_err(|e| format!("purge of {} failed: {e}", t.trigger_queue))?;
    let _ = conn.close(200, "done".into()).await;
    Ok(format!("purged {n} messages from the trigger queue"))
}

/// Row 21: the trigger queue unbound while demands are recorded: with `mandatory` the broker
/// returns them, and their rows must stay unpublished until the queue is bound again.
pub async fn unroutable(w: &mut World) -> Result<String, String> {
    let t = Topology::new(&w.prefix);
    let (conn, ch) = channel(w).await?;
    let unbind = async |ch: &Channel| {
        ch.queue_unbind(
            t.trigger_queue.as_str().into(),
            t.events_exchange.as_str().into(),
            "#".into(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("unbind: {e}"))
    };
    unbind(&ch).await?;
    let m = w.any_matter();
    let recorded = w.demand(m, 20).await;
    // A consumer that (re)connects declares the topology again, binding the queue back: the
    // queue is unbound again every half second until a publish comes back.
    let deadline = Instant::now() + Duration::from_secs(20);
    let returned = loop {
        let n = w
            .count(
                "SELECT count(*) AS n FROM ops.domain_event_outbox
                  WHERE published_at IS NULL AND last_error ILIKE '%unroutable%'",
            )
            .await;
        if n > 0 || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        unbind(&ch).await?;
    };
    let rebound = t.declare(&ch).await;
    let _ = conn.close(200, "done".into()).await;
    recorded?;
    rebound.map_err(|e| format!("the trigger queue could not be bound again: {e}"))?;
    if returned <= 0 {
        return Err("no publish came back unroutable within 20 s of the unbind".into());
    }
    Ok(format!(
        "trigger queue unbound: {returned} events returned unroutable and kept, then bound again"
    ))
}

/// Row 23: 200 published events published again by the relays, and one event's message
/// published five more times directly.
pub async fn duplicates(w: &mut World) -> Result<String, String> {
    let n = w
        .count(
            "WITH d AS (UPDATE ops.domain_event_outbox SET published_at = NULL, next_attempt_at = NULL
                WHERE event_id IN (SELECT event_id FROM ops.domain_event_outbox WHERE published_at IS NOT NULL
                                   ORDER BY seq DESC LIMIT 200) RETURNING 1) SELECT count(*) AS n FROM d",
        )
        .await;
    if n <= 0 {
        return Err("no published event to publish again".into());
    }
    let e = newest_event(w).await?;
    let (body, props) = message::encode(&e);
    let t = Topology::new(&w.prefix);
    let (conn, ch) = channel(w).await?;
    for _ in 0..5 {
        publish(&ch, &t, &e.event_name, &body, props.clone()).await?;
    }
    let _ = conn.close(200, "done".into()).await;
    Ok(format!(
        "{n} published events published again; event {} published 5 more times",
        e.event_id
    ))
}

fn props(id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("application/json".into())
        .with_message_id(id.into())
}

/// Row 25: input nobody may believe — not JSON, the wrong schema, 10 MB, an event the ledger
/// never recorded — must be dead-lettered; a real event's message without trace context is
/// valid and must be consumed.
pub async fn malformed(w: &mut World) -> Result<String, String> {
    let t = Topology::new(&w.prefix);
    let (conn, ch) = channel(w).await?;
    let k = w.messages.len();
    let real = newest_event(w).await?;
    let unknown = EventEnvelope {
        event_id: Uuid::new_v4(),
        event_name: "brief.requested".into(),
        firm_id: Uuid::new_v4(),
        matter_id: Uuid::new_v4(),
        occurred_at: chrono::Utc::now(),
        traceparent: None,
        xact_id: None,
    };
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(10 * 1024 * 1024));
    let bodies: Vec<(&str, Vec<u8>, bool)> = vec![
        ("not-json", b"this is not json {".to_vec(), true),
        (
            "wrong-schema",
            br#"{"event":"brief.requested","id":7}"#.to_vec(),
            true,
        ),
        ("ten-megabytes", big.into_bytes(), true),
        ("unknown-event", message::encode(&unknown).0, true),
        (
            "no-traceparent",
            message::encode(&EventEnvelope {
                traceparent: None,
                ..real
            })
            .0,
            false,
        ),
    ];
    let mut sent = Vec::new();
    for (what, body, dead) in bodies {
        let id = format!(
            "briefrail-faults-{}-{what}-{k}",
            if dead { "malformed" } else { "valid" }
        );
        publish(&ch, &t, "brief.requested", &body, props(&id)).await?;
        w.messages.push(Injected {
            message_id: id,
            dead,
        });
        sent.push(what);
    }
    let _ = conn.close(200, "done".into()).await;
    Ok(format!(
        "published {} messages: {}",
        sent.len(),
        sent.join(", ")
    ))
}

/// Row 27: a real event id with forged firm, matter and transaction id: nothing from the wire
/// is believed, the forgery is dead-lettered, the real fact still reaches the Brief.
pub async fn forged(w: &mut World) -> Result<String, String> {
    let real = newest_event(w).await?;
    let t = Topology::new(&w.prefix);
    let (conn, ch) = channel(w).await?;
    let forged = EventEnvelope {
        firm_id: Uuid::new_v4(),
        matter_id: w.any_matter(),
        xact_id: Some(1),
        ..real.clone()
    };
    let id = format!("briefrail-faults-forged-{}", w.messages.len());
    // The wire format with the forged transaction id, as a relay before 0.2 sent it.
    let body = serde_json::to_vec(&serde_json::json!({
        "event_id": forged.event_id,
        "event_name": forged.event_name,
        "firm_id": forged.firm_id,
        "matter_id": forged.matter_id,
        "occurred_at": forged.occurred_at,
        "xact_id": 1,
    }))
    .map_err(|e| e.to_string())?;
    publish(&ch, &t, &forged.event_name, &body, props(&id)).await?;
    w.messages.push(Injected {
        message_id: id,
        dead: true,
    });
    let _ = conn.close(200, "done".into()).await;
    Ok(format!(
        "forged nudge for real event {} (other firm, other matter, xact 1)",
        real.event_id
    ))
}
