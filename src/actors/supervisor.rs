//! The supervisor: the only place that maps matter ids to matter actors. It starts an actor on
//! a matter's first nudge, and stops it once it has been idle for `trigger.idle_seconds`, so
//! memory tracks active matters, not all matters. An actor that died (a panic in a handler) is
//! replaced by a fresh one with cleared state on the next nudge: no token survives it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;

use super::context::NodeContext;
use super::matter::{Idle, MatterActor, StopIfIdle};
pub use crate::nudge::{MatterKey, Nudge};

/// How many matter actors are alive now.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct ActorCount;

pub struct Supervisor {
    node: Arc<NodeContext>,
    /// Live matter actors. An entry is removed only when its actor agreed it was idle and
    /// stopped, or when its actor is found dead.
    matters: HashMap<MatterKey, Addr<MatterActor>>,
    /// Matters whose actor reported going idle, oldest report first (reports arrive in time
    /// order, so the due ones are always at the front); at most one entry per live actor.
    went_idle: VecDeque<(Instant, MatterKey)>,
    watch: super::liveness::Watch,
}

impl Supervisor {
    pub fn new(node: Arc<NodeContext>) -> Self {
        Self {
            watch: node.liveness.watch("supervisor"),
            node,
            matters: HashMap::new(),
            went_idle: VecDeque::new(),
        }
    }
}

/// Asks the actor of a matter that went idle at least `trigger.idle_seconds` ago to stop.
#[derive(Message)]
#[rtype(result = "()")]
struct Retire(MatterKey);

/// Nudges arrive with `do_send`, which ignores mailbox capacity: a burst is never refused.
impl Actor for Supervisor {
    type Context = Context<Self>;

    /// One timer for every matter: each tick asks the actors whose idle report is due. An
    /// actor stops one to one and a half `trigger.idle_seconds` after its report; one that
    /// worked since reports again when asked, so it stops at most about two and a half
    /// `trigger.idle_seconds` after its last work.
    fn stopped(&mut self, _: &mut Context<Self>) {
        let at_shutdown = *self.node.draining.borrow();
        self.watch.stopped(at_shutdown);
    }

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.node.settings.trigger.idle_after() / 2, |act, ctx| {
            let idle_after = act.node.settings.trigger.idle_after();
            while let Some((at, key)) = act.went_idle.front().copied() {
                if at.elapsed() < idle_after {
                    break;
                }
                act.went_idle.pop_front();
                ctx.notify(Retire(key));
            }
        });
    }
}

/// Panics the supervisor (a test hook): how a test shows that an actor's death is not hidden
/// behind a ready `/readyz`.
#[cfg(feature = "testing")]
#[derive(Message)]
#[rtype(result = "()")]
pub struct Crash;

#[cfg(feature = "testing")]
impl Handler<Crash> for Supervisor {
    type Result = ();
    #[allow(clippy::panic)]
    fn handle(&mut self, _: Crash, _: &mut Context<Self>) {
        panic!("test hook: the supervisor crashes");
    }
}

impl Handler<Nudge> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: Nudge, ctx: &mut Context<Self>) {
        let addr = match self.matters.get(&msg.key) {
            Some(addr) if addr.connected() => addr.clone(),
            found => {
                if found.is_some() {
                    tracing::warn!(firm_id = %msg.key.firm_id, matter_id = %msg.key.matter_id,
                                   "matter actor died; starting a fresh one");
                }
                let actor = MatterActor::new(msg.key, self.node.clone(), ctx.address().recipient());
                let addr = actor.start();
                self.matters.insert(msg.key, addr.clone());
                addr
            }
        };
        // The matter actor's mailbox is unbounded: a nudge is never refused for lack of room.
        addr.do_send(msg);
    }
}

impl Handler<Idle> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: Idle, _ctx: &mut Context<Self>) {
        self.went_idle.push_back((Instant::now(), msg.key));
    }
}

impl Handler<Retire> for Supervisor {
    type Result = AtomicResponse<Self, ()>;

    /// Atomic: while the actor is asked, no nudge is routed, so none can slip into a mailbox
    /// that is about to close. Nudges already queued there, or work since its report, make the
    /// actor refuse to stop.
    fn handle(&mut self, Retire(key): Retire, _ctx: &mut Context<Self>) -> Self::Result {
        let Some(addr) = self.matters.get(&key).cloned() else {
            return AtomicResponse::new(Box::pin(actix::fut::ready(())));
        };
        AtomicResponse::new(Box::pin(
            {
                let addr = addr.clone();
                async move { addr.send(StopIfIdle).await.unwrap_or(true) }
            }
            .into_actor(self)
            .map(move |stopped, act, _| {
                let same = act.matters.get(&key).is_some_and(|a| a == &addr);
                if stopped && same {
                    act.matters.remove(&key);
                }
            }),
        ))
    }
}

impl Handler<ActorCount> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: ActorCount, _: &mut Context<Self>) -> usize {
        self.matters.retain(|_, a| a.connected());
        self.matters.len()
    }
}

/// The matter actor serving a key, if one is alive (a test hook: `feature = "testing"`).
#[cfg(feature = "testing")]
#[derive(Message)]
#[rtype(result = "Option<Addr<MatterActor>>")]
pub struct Lookup(pub MatterKey);

#[cfg(feature = "testing")]
impl Handler<Lookup> for Supervisor {
    type Result = Option<Addr<MatterActor>>;

    fn handle(&mut self, msg: Lookup, _: &mut Context<Self>) -> Self::Result {
        self.matters.get(&msg.0).filter(|a| a.connected()).cloned()
    }
}

/// How many idle reports wait in the supervisor (a test hook: `feature = "testing"`).
#[cfg(feature = "testing")]
#[derive(Message)]
#[rtype(result = "usize")]
pub struct IdleReports;

#[cfg(feature = "testing")]
impl Handler<IdleReports> for Supervisor {
    type Result = usize;

    fn handle(&mut self, _: IdleReports, _: &mut Context<Self>) -> usize {
        self.went_idle.len()
    }
}
