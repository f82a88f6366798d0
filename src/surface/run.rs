//! `briefrail run`: one node. Must be called inside an actix `System` (the binary's `main`
//! creates one); an embedding application calls [`run`] from its own.
//!
//! Shutdown is an argument: when `shutdown` completes (SIGTERM or Ctrl-C in the binary), the
//! node stops claiming, lets in-flight builds finish for `shutdown.grace_seconds`, then
//! cancels the rest and hands their claims back by token.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;

use crate::actors::{Node, NodeOptions};
use crate::build::Builder;
use crate::config::{Settings, TransportKind};
use crate::db;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::transport::postgres::{PgTransport, PgTransportOptions};

/// Runs a node until `shutdown` completes.
pub async fn run(
    settings: Arc<Settings>,
    builder: Arc<dyn Builder>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let url = settings.database.url.clone();
    let pending = db::migrate::pending(url.expose()).await?;
    if !pending.is_empty() {
        return Err(Error::migration(
            format!(
                "{} migration(s) pending ({}): run `briefrail migrate` first",
                pending.len(),
                pending.join(", ")
            ),
            None,
        ));
    }
    let pool = db::connect(&db::PoolOptions::from(&settings.database)).await?;
    let metrics = Arc::new(Metrics::default());
    let mut opts = NodeOptions::new(builder);
    opts.metrics = metrics.clone();
    let node = Node::start(settings.clone(), pool.clone(), opts);
    let transport = match settings.transport.kind {
        TransportKind::Postgres => PgTransport::new(
            PgTransportOptions {
                url: url.clone(),
                pool: pool.clone(),
                poll: Duration::from_millis(settings.relay.poll_ms),
                batch: settings.relay.batch as i64,
                metrics: metrics.clone(),
            },
            node.supervisor.clone(),
        )
        .start()
        .recipient(),
        TransportKind::Amqp => {
            crate::transport::amqp::start(
                &settings,
                pool.clone(),
                metrics.clone(),
                node.supervisor.clone(),
            )
            .await?
        }
    };
    let (_addr, http) = crate::surface::http::serve(crate::surface::http::HttpState {
        settings: settings.clone(),
        pool: pool.clone(),
        metrics: metrics.clone(),
        node_id: node.context.node_id.clone(),
    })?;
    tracing::info!(node_id = %node.context.node_id, transport = ?settings.transport.kind, "briefrail is running");
    shutdown.await;
    http.stop(true).await;
    // Stop hearing new events first, then drain builds.
    let _ = transport.send(crate::actors::node::StopActor).await;
    node.shutdown(Duration::from_secs_f64(settings.shutdown.grace_seconds))
        .await;
    Ok(())
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM received"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C received"),
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
