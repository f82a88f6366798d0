//! The RabbitMQ transport (`transport.kind = "amqp"`).
//!
//! * [`topology`]: a durable topic exchange for domain events, the Brief rail's durable quorum
//!   queue bound to the event names it hears, a dead-letter exchange and queue. Declared at
//!   start, idempotently.
//! * [`relay`]: the outbox → broker relay, with publisher confirms and `mandatory`.
//! * [`consumer`]: the trigger's consumer: inbox, gates, demand, then ack, then nudge.
//! * [`acks`]: which acks the consumer may send once a batch commits (one frame for many).
//! * [`message`]: the wire format: IDs and trace context only.

pub mod acks;
pub mod consumer;
pub mod message;
pub mod relay;
pub mod topology;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::config::Settings;
use crate::db::Pool;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::nudge::Nudge;
use crate::secret::SecretUrl;

pub use topology::Topology;

/// Opens a connection to the broker. Errors never carry the password.
///
/// `url` may list several members of a RabbitMQ cluster separated by commas (as
/// `transport.amqp_url = "amqp://h1/%2f,amqp://h2/%2f"`). Each call starts one member further
/// along the list than the last call of this process, and tries each member once: a session
/// that lost its broker reconnects to a survivor instead of waiting for the member it lost.
pub async fn connect(url: &SecretUrl, name: &str) -> Result<lapin::Connection> {
    let members = url.members();
    let first = NEXT_MEMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut last: Option<Error> = None;
    for k in 0..members.len() {
        let member = &members[(first + k) % members.len()];
        // No automatic recovery: our sessions reconnect themselves and re-read the ledger,
        // which is the truth; a transparently recovered channel could hide lost confirms.
        let props =
            lapin::ConnectionProperties::default().with_connection_name(name.to_owned().into());
        match lapin::Connection::connect(member.expose(), props).await {
            Ok(conn) => return Ok(conn),
            Err(e) => {
                if members.len() > 1 {
                    tracing::warn!(broker = %member, error = %crate::secret::redact_urls(&e.to_string()), "broker member did not answer; trying the next");
                }
                last = Some(Error::Broker(crate::error::Redacted::context(
                    format!("cannot connect to {}", describe(member.expose())),
                    e,
                )));
            }
        }
    }
    Err(last.unwrap_or_else(|| Error::broker("transport.amqp_url names no broker")))
}

/// Which broker an AMQP URL names, for an error to say: `host:port as user "u"` (lapin's
/// defaults when the URL leaves them out: port 5672, or 5671 for amqps, and user guest).
/// Never the password.
pub fn describe(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => {
            let port = u
                .port()
                .unwrap_or(if u.scheme() == "amqps" { 5671 } else { 5672 });
            let host = match u.host() {
                Some(url::Host::Ipv6(a)) => format!("[{a}]"),
                Some(h) => h.to_string(),
                None => "localhost".to_owned(),
            };
            let user = match u.username() {
                "" => "guest".to_owned(),
                name => percent_decode(name),
            };
            format!("{host}:{port} as user {user:?}")
        }
        Err(_) => crate::secret::redact_urls(url),
    }
}

/// `%XX` escapes of a URL's user name decoded (lossily: a name is for a person to read).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(Ok(b)) = s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16))
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Which member the next connection of this process tries first.
static NEXT_MEMBER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub(crate) fn broker(e: lapin::Error) -> Error {
    Error::from(e)
}

/// Options shared by the relay and the consumer.
#[derive(Clone)]
pub struct AmqpOptions {
    pub url: SecretUrl,
    pub topology: Topology,
    pub db_url: SecretUrl,
    pub pool: Pool,
    pub metrics: Arc<Metrics>,
    pub relay_batch: i64,
    pub relay_poll: Duration,
    pub reconcile_after: Duration,
    pub prefetch: u16,
    pub node_id: String,
}

impl AmqpOptions {
    pub fn from_settings(settings: &Settings, pool: Pool, metrics: Arc<Metrics>) -> Self {
        Self {
            url: settings.transport.amqp_url.clone(),
            topology: Topology::new(&settings.transport.prefix),
            db_url: settings.database.url.clone(),
            pool,
            metrics,
            relay_batch: settings.relay.batch as i64,
            relay_poll: Duration::from_millis(settings.relay.poll_ms),
            reconcile_after: crate::config::seconds(settings.reconcile.after_seconds),
            prefetch: consumer::PREFETCH,
            node_id: settings.node_id(),
        }
    }
}

/// Declares the topology (failing fast if the broker does not answer at start), then starts
/// the relay and the consumer. Both reconnect on their own after a broker outage.
pub async fn start(opts: AmqpOptions, nudges: Recipient<Nudge>) -> Result<super::Running> {
    let conn = connect(&opts.url, &format!("briefrail-{}-setup", opts.node_id)).await?;
    let ch = conn.create_channel().await.map_err(broker)?;
    opts.topology.declare(&ch).await?;
    let _ = ch.close(200, "topology declared".into()).await;
    let _ = conn.close(200, "topology declared".into()).await;
    // The consumer stops first (no more intake), then the relay.
    let consumer = consumer::TriggerConsumer::new(opts.clone(), nudges)
        .declared()
        .start();
    let relay = relay::Relay::new(opts).start();
    Ok(super::Running::new(vec![
        consumer.recipient(),
        relay.recipient(),
    ]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_broker_is_described_by_host_port_and_user_never_the_password() {
        assert_eq!(
            super::describe("amqp://guest:secretpw@127.0.0.1:1/%2f"),
            "127.0.0.1:1 as user \"guest\""
        );
        assert_eq!(
            super::describe("amqps://app%40x:pw@mq.example/%2f"),
            "mq.example:5671 as user \"app@x\""
        );
        assert_eq!(
            super::describe("amqp://[::1]/%2f"),
            "[::1]:5672 as user \"guest\""
        );
    }
}
