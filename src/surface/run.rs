//! `briefrail run`: one node. Must be called inside an actix `System` (the binary's `main`
//! creates one); an embedding application calls [`run`] from its own.
//!
//! Shutdown is an argument: when `shutdown` completes (SIGTERM or Ctrl-C in the binary), the
//! node stops claiming, lets in-flight builds finish for `shutdown.grace_seconds`, then
//! cancels the rest and hands their claims back by token.

use std::future::Future;
use std::sync::Arc;

use crate::builders::Builder;
use crate::config::Settings;
use crate::error::Result;
use crate::node::Node;

/// Runs a node (its transport and its HTTP surface) until `shutdown` completes.
pub async fn run(
    settings: Arc<Settings>,
    builder: Arc<dyn Builder>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let node = Node::builder(settings, builder);
    #[cfg(feature = "http")]
    let node = node.surface(crate::surface::http::admin());
    let node = node.start().await?;
    tracing::info!(node_id = %node.node_id(), "briefrail is running");
    shutdown.await;
    node.shutdown().await;
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
