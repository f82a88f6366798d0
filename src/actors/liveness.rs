//! Which of a node's long-lived actors (supervisor, sweeper, presence) have died. A panic in an
//! actor's handler ends that actor's task and nothing else: without this the node would go on
//! answering `/readyz` as ready while, say, no nudge ever reaches a matter again.
//!
//! Each such actor owns a [`Watch`] and tells it from `stopped()` whether the node is shutting
//! down. These actors stop only at shutdown, so one that stops before (actix runs `stopped()`
//! also when a panic ends the actor's task) or whose watch is dropped without being told has
//! died: its name goes to the node's [`Liveness`], which `/readyz` reports.

use std::sync::{Arc, Mutex};

/// The names of the node's actors that died, in the order they did.
#[derive(Debug, Clone, Default)]
pub struct Liveness(Arc<Mutex<Vec<&'static str>>>);

impl Liveness {
    /// The actors that died; empty while every one runs (or stopped at shutdown).
    pub fn dead(&self) -> Vec<&'static str> {
        self.0.lock().map(|d| d.clone()).unwrap_or_default()
    }

    fn record(&self, name: &'static str) {
        if let Ok(mut d) = self.0.lock()
            && !d.contains(&name)
        {
            d.push(name);
        }
    }

    /// A watch for the actor `name`.
    pub fn watch(&self, name: &'static str) -> Watch {
        Watch {
            name,
            liveness: self.clone(),
            stopped: false,
        }
    }
}

/// Held by one actor: dropped without [`Watch::stopped`], the actor is recorded as dead.
#[derive(Debug)]
pub struct Watch {
    name: &'static str,
    liveness: Liveness,
    stopped: bool,
}

impl Watch {
    /// The actor stopped; `at_shutdown`: because the node is shutting down, the one ordinary
    /// way. Otherwise it died and is recorded.
    pub fn stopped(&mut self, at_shutdown: bool) {
        self.stopped = true;
        if !at_shutdown {
            self.died();
        }
    }

    fn died(&self) {
        tracing::error!(
            actor = self.name,
            "actor died (a panic in a handler): the node is not ready"
        );
        self.liveness.record(self.name);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.stopped {
            tracing::error!(
                actor = self.name,
                "actor died (a panic in a handler): the node is not ready"
            );
            self.liveness.record(self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actor_stopped_before_shutdown_or_dropped_unstopped_is_recorded() {
        let l = Liveness::default();
        let mut clean = l.watch("sweeper");
        clean.stopped(true);
        drop(clean);
        assert!(l.dead().is_empty());
        drop(l.watch("supervisor"));
        l.watch("presence").stopped(false);
        assert_eq!(l.dead(), vec!["supervisor", "presence"]);
    }
}
