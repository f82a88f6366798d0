//! Admission: which waiting matter takes the node's next hold, in the ledger's fair order.
//!
//! A matter actor takes a hold before it claims, and the node has few holds when builds are
//! slow (one per slot). Who gets a hold that comes free is who is built next, so that choice is
//! where fairness lives: a first-come queue there served one firm's bulk import ahead of every
//! other firm's uploads. Matters now wait here grouped by firm and class, and a hold goes to
//! the group `ops.fair_order` names (interactive first, then the firm with the fewest builds
//! running on every node per unit of weight, then the oldest: `crate::ledger::fairness`).
//!
//! The ledger is asked only when the choice is real: with one group waiting, and that firm not
//! paused, the hold goes to its oldest matter at once; with none waiting and a hold free, the
//! matter takes it on the spot. What is paused is read from the ledger every
//! [`PAUSE_REFRESH`], so a pause or a resume takes effect on every node within it; a node
//! that has not read it yet (just started, the ledger slow) hands out nothing. If the
//! ledger cannot answer the pick, the node orders its waiters by the same rules with what it
//! knows (its own claims, the pauses it read last) rather than stall: order is never a
//! question of correctness, the claim's compare-and-swap is.
//!
//! While the fleet's limits toward the builder are set (a cap, a rate, or the builder's hold:
//! `crate::ledger::limits`), the matter a hold goes to also needs the ledger's permit first; the
//! hold waits, with its matter first in line, for as long as the ledger says.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot, watch};
use uuid::Uuid;

use super::capacity::{Capacity, Hold};
use crate::db::Pool;
use crate::ledger::DemandClass;
use crate::ledger::fairness::{self, Candidate, Paused};
use crate::ledger::limits::{self, Limits};
use crate::nudge::MatterKey;

/// How often a node reads what is paused.
pub const PAUSE_REFRESH: Duration = Duration::from_secs(1);
/// How long the pick may take before the node orders its waiters itself.
const PICK_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a hold waits for a permit before the ledger is asked again: a build ending on
/// another node frees a slot of the cap without telling this one.
const PERMIT_POLL: Duration = Duration::from_millis(250);

/// The node's admission: its waiting matters and who gets the next hold.
pub struct Admission {
    capacity: Arc<Capacity>,
    pool: Pool,
    promote_after: Duration,
    node_id: String,
    /// How long a permit the ledger grants lasts without a claim (the lease: a node that dies
    /// between the two frees the slot when its claims would be swept too).
    permit_ttl: Duration,
    queue: Mutex<Queue>,
    /// Rung when a matter starts waiting, and when the node starts draining.
    wake: Notify,
}

/// Matters waiting for a hold, by firm and class, and the claims this node granted that the
/// ledger does not show as running yet.
#[derive(Default)]
struct Queue {
    groups: HashMap<(Uuid, DemandClass), BinaryHeap<Waiter>>,
    /// Granted, not yet claimed, by firm: counted as running by the pick, so that a burst of
    /// grants does not all go to the firm the ledger last saw idle.
    pending: HashMap<Uuid, u32>,
    paused: Paused,
    limits: Limits,
    /// `paused` and `limits` have been read from the ledger at least once. Until then they are
    /// defaults that say "nothing paused, no limit", which a node may not assume: a node that
    /// started while the ledger was slow to answer would otherwise build past the fleet's cap
    /// and through a pause. Nothing is handed out before this is true.
    read: bool,
    /// Waiters taken out of their groups while the dispatcher asks the ledger for their order.
    /// While any are out, a new arrival waits in line too: the queue looking empty is not
    /// nobody waiting, and a hold freed meanwhile belongs to the order being asked for.
    offered: usize,
    seq: u64,
    /// The node is draining: nobody new waits, and waiters are let go.
    closed: bool,
}

impl Queue {
    fn waiting(&self) -> usize {
        self.groups.values().map(BinaryHeap::len).sum()
    }

    /// Up to `k` live waiters of each group, each group's in its order, taken out of the queue
    /// (what is not granted goes back with [`Queue::put_back`]): the demands a burst of `k`
    /// holds could go to, whichever firms the order favours. Waiters that gave up (their
    /// matter actor stopped waiting) are dropped as they are met: only the first `k` of a group
    /// are looked at, since a bulk import puts thousands of matters in one group, and a
    /// hand-out must cost the number of groups, not the length of the backlog.
    fn offer(&mut self, k: usize) -> Vec<Offer> {
        let mut keys: Vec<(Uuid, DemandClass)> = self.groups.keys().copied().collect();
        // A stable order, so that equal candidates are decided the same way every time.
        keys.sort();
        let mut out = Vec::new();
        for group in keys {
            let pending = self.pending.get(&group.0).copied().unwrap_or(0);
            let Some(heap) = self.groups.get_mut(&group) else {
                continue;
            };
            let mut taken = 0;
            while taken < k {
                let Some(waiter) = heap.pop() else { break };
                if waiter.reply.is_closed() {
                    continue;
                }
                taken += 1;
                out.push(Offer {
                    candidate: Candidate {
                        firm_id: group.0,
                        class: group.1,
                        waited: waiter.recorded_at.elapsed(),
                        pending,
                    },
                    waiter,
                });
            }
        }
        self.groups.retain(|_, h| !h.is_empty());
        self.offered += out.len();
        out
    }

    /// Returns offered waiters that were not granted to their places.
    fn put_back(&mut self, offers: impl IntoIterator<Item = Offer>) {
        for o in offers {
            self.offered = self.offered.saturating_sub(1);
            self.groups.entry(o.group()).or_default().push(o.waiter);
        }
    }

    /// An offered waiter is being granted its hold: it is no longer out on offer.
    fn granted(&mut self, offer: &Offer) {
        self.offered = self.offered.saturating_sub(1);
        self.add_pending(offer.candidate.firm_id);
    }

    /// Whether a new demand of `firm` may take a free hold at once, without waiting in line:
    /// only when nobody waits (none in a group, none out on offer), the ledger has been read,
    /// and neither a pause nor a limit asks for the dispatcher's judgement.
    fn may_go_first(&self, firm: Uuid) -> bool {
        self.groups.is_empty()
            && self.offered == 0
            && self.read
            && !self.paused.holds(firm)
            && !self.limits.active()
    }

    fn add_pending(&mut self, firm: Uuid) {
        *self.pending.entry(firm).or_default() += 1;
    }

    fn settle_pending(&mut self, firm: Uuid) {
        if let Some(n) = self.pending.get_mut(&firm) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.pending.remove(&firm);
            }
        }
    }
}

/// A waiter taken out of its group while a burst of holds is ordered.
struct Offer {
    candidate: Candidate,
    waiter: Waiter,
}

impl Offer {
    fn group(&self) -> (Uuid, DemandClass) {
        (self.candidate.firm_id, self.candidate.class)
    }
}

/// A matter waiting for a hold.
struct Waiter {
    key: MatterKey,
    recorded_at: Instant,
    seq: u64,
    reply: oneshot::Sender<Grant>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    /// The oldest demand is the greatest (a `BinaryHeap` pops the greatest); arrival breaks ties.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .recorded_at
            .cmp(&self.recorded_at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// A hold granted to a matter. It counts as one of its firm's claims on this node until
/// [`Grant::into_hold`] (after the claim) or until it is dropped.
pub struct Grant {
    hold: Option<Hold>,
    firm_id: Uuid,
    /// The ledger's permit for this matter, while the fleet's limits are set.
    permit: Option<MatterKey>,
    admission: Arc<Admission>,
}

impl Grant {
    /// The hold, once the claim it was granted for has been answered: from now on the ledger
    /// counts the claim (or there is none to count). `built`: the claim was won, so its permit
    /// (if any) became the running build; otherwise the permit is given back at once.
    pub fn into_hold(mut self, built: bool) -> Option<Hold> {
        if built {
            self.permit = None;
        }
        self.hold.take()
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Ok(mut q) = self.admission.queue.lock() {
            q.settle_pending(self.firm_id);
        }
        if let Some(key) = self.permit.take() {
            // An unused permit would count as a running build until it lapses.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let (pool, node_id) = (self.admission.pool.clone(), self.admission.node_id.clone());
                rt.spawn(async move {
                    let given = async {
                        let mut c = pool.get().await?;
                        limits::return_permit(&mut c, key, &node_id).await
                    };
                    if let Err(e) = given.await {
                        tracing::debug!(error = %e, "could not give a permit back; it lapses");
                    }
                });
            }
        }
    }
}

/// What became of a hold the dispatcher offered.
enum HandOut {
    /// A waiter has it (or nobody waits any more).
    Done,
    /// Nobody may have it now: every waiter's firm is paused. The hold is given back.
    Paused,
    /// The fleet's limits hold the next build back this long; the dispatcher keeps the hold.
    Wait(Hold, Duration),
}

impl Admission {
    pub fn new(
        capacity: Arc<Capacity>,
        pool: Pool,
        promote_after: Duration,
        node_id: String,
        permit_ttl: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            pool,
            promote_after,
            node_id,
            permit_ttl,
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
        })
    }

    /// Matters waiting for a hold now.
    pub fn waiting(&self) -> usize {
        self.queue.lock().map(|q| q.waiting()).unwrap_or(0)
    }

    /// Whether the node has read what is paused and the fleet's limits since it started.
    fn has_read(&self) -> bool {
        self.queue.lock().is_ok_and(|q| q.read)
    }

    /// The fleet's limits as this node read them last.
    pub fn limits(&self) -> Limits {
        self.queue.lock().map(|q| q.limits).unwrap_or_default()
    }

    /// The builder asked the rail to wait `wait` (this node's build heard it; the ledger has
    /// it too): this node asks for permits from now on, without waiting for its next read.
    pub fn note_builder_hold(&self, wait: Duration) {
        if let Ok(mut q) = self.queue.lock() {
            q.limits.builder_held_for = Some(wait);
        }
    }

    /// Waits for a hold for `key`'s demand of `class`, recorded at `recorded_at` (by the
    /// ledger's clock, carried as an instant of this process). `None` once the node drains.
    pub async fn admit(
        self: &Arc<Self>,
        key: MatterKey,
        class: DemandClass,
        recorded_at: Instant,
    ) -> Option<Grant> {
        let rx = {
            let mut q = self.queue.lock().ok()?;
            if q.closed {
                return None;
            }
            if q.may_go_first(key.firm_id)
                && let Some(hold) = self.capacity.try_hold()
            {
                q.add_pending(key.firm_id);
                return Some(self.grant(hold, key.firm_id, None));
            }
            let (tx, rx) = oneshot::channel();
            q.seq += 1;
            let seq = q.seq;
            q.groups
                .entry((key.firm_id, class))
                .or_default()
                .push(Waiter {
                    key,
                    recorded_at,
                    seq,
                    reply: tx,
                });
            rx
        };
        self.wake.notify_one();
        rx.await.ok()
    }

    fn grant(self: &Arc<Self>, hold: Hold, firm_id: Uuid, permit: Option<MatterKey>) -> Grant {
        Grant {
            hold: Some(hold),
            firm_id,
            permit,
            admission: self.clone(),
        }
    }

    /// Hands out holds until the node drains (its one task: see the module).
    pub async fn run(self: Arc<Self>, mut draining: watch::Receiver<bool>) {
        let mut refresh = tokio::time::interval(PAUSE_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if *draining.borrow() {
                break;
            }
            if !self.has_read() {
                // Fail closed: the limits are a promise to the builder and a pause a promise to
                // the operator, so nothing is handed out until the ledger has said what they are.
                self.refresh_paused().await;
                if !self.has_read() {
                    tokio::select! {
                        _ = tokio::time::sleep(PERMIT_POLL) => {}
                        _ = draining.changed() => {}
                    }
                }
                continue;
            }
            let waiting = self.queue.lock().map(|q| q.waiting()).unwrap_or(0);
            if waiting == 0 {
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = refresh.tick() => self.refresh_paused().await,
                    _ = draining.changed() => {}
                }
                continue;
            }
            let hold = tokio::select! {
                h = self.capacity.hold() => h,
                _ = refresh.tick() => { self.refresh_paused().await; continue; }
                _ = draining.changed() => continue,
            };
            let Some(mut hold) = hold else { break };
            if !self.limits().active() {
                // Every hold free now goes out on one order of the ledger (see `hand_out_many`).
                let mut holds = vec![hold];
                while holds.len() < waiting {
                    match self.capacity.try_hold() {
                        Some(h) => holds.push(h),
                        None => break,
                    }
                }
                if let HandOut::Paused = self.hand_out_many(holds).await {
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = refresh.tick() => self.refresh_paused().await,
                        _ = draining.changed() => {}
                    }
                }
                continue;
            }
            loop {
                match self.hand_out(hold).await {
                    HandOut::Done => break,
                    HandOut::Paused => {
                        // Every waiter's firm is paused: look again when something changes.
                        tokio::select! {
                            _ = self.wake.notified() => {}
                            _ = refresh.tick() => self.refresh_paused().await,
                            _ = draining.changed() => {}
                        }
                        break;
                    }
                    HandOut::Wait(h, wait) => {
                        hold = h;
                        tokio::select! {
                            _ = tokio::time::sleep(wait.min(PERMIT_POLL)) => {}
                            _ = refresh.tick() => self.refresh_paused().await,
                            _ = draining.changed() => {}
                        }
                        if *draining.borrow() {
                            break;
                        }
                    }
                }
            }
        }
        if let Ok(mut q) = self.queue.lock() {
            q.closed = true;
            q.groups.clear();
        }
    }

    /// Gives each of `holds` to a waiter, in the fair order, with no limit set. One order for
    /// the whole burst: holds come free several at once as builds end, and asking the ledger
    /// once per hold made each wait for the answer before it, so claims went out a few at a
    /// time. Returns `Paused` when holds are left that no waiter may have (their firms paused).
    async fn hand_out_many(self: &Arc<Self>, mut holds: Vec<Hold>) -> HandOut {
        while !holds.is_empty() {
            let (offers, paused) = {
                let Ok(mut q) = self.queue.lock() else {
                    return HandOut::Paused;
                };
                (q.offer(holds.len()), q.paused.clone())
            };
            if offers.is_empty() {
                return HandOut::Done;
            }
            let order = self.order(&offers, &paused, holds.len()).await;
            let nobody = order.is_empty();
            let mut offers: Vec<Option<Offer>> = offers.into_iter().map(Some).collect();
            for i in order {
                let Some(hold) = holds.pop() else { break };
                let Some(offer) = offers.get_mut(i).and_then(Option::take) else {
                    holds.push(hold);
                    continue;
                };
                let firm = offer.candidate.firm_id;
                if let Ok(mut q) = self.queue.lock() {
                    q.granted(&offer);
                }
                // One that stopped waiting meanwhile gives the hold back, for the next round.
                if let Err(mut grant) = offer.waiter.reply.send(self.grant(hold, firm, None)) {
                    holds.extend(grant.hold.take());
                }
            }
            if let Ok(mut q) = self.queue.lock() {
                q.put_back(offers.into_iter().flatten());
            }
            if nobody {
                // Every waiter's firm is paused (or the rail): the holds go back.
                return HandOut::Paused;
            }
        }
        HandOut::Done
    }

    /// The order of up to `count` of `offers` (their indexes). With one group offered and its
    /// firm not paused there is no choice to ask about: its waiters in their order. Otherwise
    /// the ledger's order, or the same rules on this node's knowledge when the ledger cannot
    /// answer in time.
    async fn order(&self, offers: &[Offer], paused: &Paused, count: usize) -> Vec<usize> {
        let Some(first) = offers.first() else {
            return Vec::new();
        };
        if offers.iter().all(|o| o.group() == first.group())
            && !paused.holds(first.candidate.firm_id)
        {
            return (0..offers.len().min(count)).collect();
        }
        let cands: Vec<Candidate> = offers.iter().map(|o| o.candidate).collect();
        let asked = tokio::time::timeout(PICK_TIMEOUT, async {
            let mut conn = self.pool.get().await?;
            fairness::order(&mut conn, &cands, self.promote_after, count).await
        })
        .await;
        match asked {
            Ok(Ok(order)) => order,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the fair order failed; ordering this node's waiters itself");
                local_order(&cands, paused, self.promote_after, count)
            }
            Err(_) => {
                tracing::warn!("the fair order timed out; ordering this node's waiters itself");
                local_order(&cands, paused, self.promote_after, count)
            }
        }
    }

    /// Gives `hold` to the waiter the fair order names, once the fleet's limits let its build
    /// start. The candidates are each group's oldest, offered as for a burst of one.
    async fn hand_out(self: &Arc<Self>, mut hold: Hold) -> HandOut {
        loop {
            let (offers, paused, limited) = {
                let Ok(mut q) = self.queue.lock() else {
                    return HandOut::Paused;
                };
                (q.offer(1), q.paused.clone(), q.limits.active())
            };
            if offers.is_empty() {
                return HandOut::Done;
            }
            let pick = self.order(&offers, &paused, 1).await.first().copied();
            let mut offers: Vec<Option<Offer>> = offers.into_iter().map(Some).collect();
            let chosen = pick.and_then(|i| offers.get_mut(i).and_then(Option::take));
            {
                let Ok(mut q) = self.queue.lock() else {
                    return HandOut::Paused;
                };
                q.put_back(offers.into_iter().flatten());
                if let Some(offer) = &chosen {
                    q.granted(offer);
                }
            }
            let Some(offer) = chosen else {
                return HandOut::Paused;
            };
            let firm = offer.candidate.firm_id;
            let permit = if limited {
                match self.take_permit(offer.waiter.key).await {
                    None => Some(offer.waiter.key),
                    Some(wait) => {
                        // First in line still: back to its place until the limits let it go.
                        if let Ok(mut q) = self.queue.lock() {
                            q.settle_pending(firm);
                            q.groups.entry(offer.group()).or_default().push(offer.waiter);
                        }
                        return HandOut::Wait(hold, wait);
                    }
                }
            } else {
                None
            };
            match offer.waiter.reply.send(self.grant(hold, firm, permit)) {
                Ok(()) => return HandOut::Done,
                // It stopped waiting meanwhile (its permit goes back with the grant): the next.
                Err(mut grant) => match grant.hold.take() {
                    Some(h) => hold = h,
                    None => return HandOut::Done,
                },
            }
        }
    }

    /// The ledger's permit for `key` (`None`: granted), or how long to wait. A ledger that
    /// cannot answer holds the build back too: the limits are a promise to the builder.
    async fn take_permit(&self, key: MatterKey) -> Option<Duration> {
        let asked = tokio::time::timeout(PICK_TIMEOUT, async {
            let mut conn = self.pool.get().await?;
            limits::take_permit(&mut conn, key, &self.node_id, self.permit_ttl).await
        })
        .await;
        match asked {
            Ok(Ok(wait)) => wait,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the build permit could not be asked for; waiting");
                Some(PERMIT_POLL)
            }
            Err(_) => {
                tracing::warn!("the build permit timed out; waiting");
                Some(PERMIT_POLL)
            }
        }
    }

    async fn refresh_paused(&self) {
        let read = tokio::time::timeout(PICK_TIMEOUT, async {
            let mut conn = self.pool.get().await?;
            let paused = fairness::paused(&mut conn).await?;
            Ok::<_, crate::Error>((paused, limits::read(&mut conn).await?.limits))
        })
        .await;
        match read {
            Ok(Ok((paused, limits))) => {
                let changed = {
                    let Ok(mut q) = self.queue.lock() else { return };
                    let changed = q.paused != paused;
                    if changed {
                        tracing::info!(
                            rail_paused = paused.rail,
                            firms_paused = paused.firms.len(),
                            "what is paused changed"
                        );
                    }
                    q.paused = paused;
                    if q.limits.active() != limits.active() {
                        tracing::info!(max_running = ?limits.max_running,
                                       starts_per_minute = ?limits.starts_per_minute,
                                       builder_held = limits.builder_held_for.is_some(),
                                       "the fleet's build limits changed");
                    }
                    q.limits = limits;
                    q.read = true;
                    changed
                };
                if changed {
                    self.wake.notify_one();
                }
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "could not read what is paused"),
            Err(_) => tracing::debug!("reading what is paused timed out"),
        }
    }
}

/// The fair order of `ops.fair_order` on what a node knows alone: its own grants instead of
/// the fleet's running builds, no weights, the pauses it read last. Up to `count` indexes.
fn local_order(
    cands: &[Candidate],
    paused: &Paused,
    promote_after: Duration,
    count: usize,
) -> Vec<usize> {
    let later = |c: &Candidate| !(c.class == DemandClass::Interactive || c.waited >= promote_after);
    let mut live: Vec<usize> = (0..cands.len())
        .filter(|&i| !paused.holds(cands[i].firm_id))
        .collect();
    // Each demand's turn among its firm's: its firm's demands before it in this burst.
    live.sort_by(|&a, &b| {
        let (x, y) = (&cands[a], &cands[b]);
        later(x)
            .cmp(&later(y))
            .then(y.waited.cmp(&x.waited))
            .then(a.cmp(&b))
    });
    let mut turns: HashMap<Uuid, u32> = HashMap::new();
    let mut placed: Vec<(bool, u32, Duration, usize)> = live
        .into_iter()
        .map(|i| {
            let c = &cands[i];
            let turn = turns.entry(c.firm_id).or_default();
            let share = c.pending.saturating_add(*turn);
            *turn += 1;
            (later(c), share, c.waited, i)
        })
        .collect();
    placed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.cmp(&b.1))
            .then(b.2.cmp(&a.2))
            .then(a.3.cmp(&b.3))
    });
    placed.into_iter().take(count).map(|p| p.3).collect()
}

/// The first of [`local_order`].
#[cfg(test)]
fn local_pick(cands: &[Candidate], paused: &Paused, promote_after: Duration) -> Option<usize> {
    local_order(cands, paused, promote_after, 1).first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(firm: Uuid, class: DemandClass, waited_ms: u64, pending: u32) -> Candidate {
        Candidate {
            firm_id: firm,
            class,
            waited: Duration::from_millis(waited_ms),
            pending,
        }
    }

    #[test]
    fn the_local_order_is_class_then_share_then_age_and_skips_paused_firms() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let promote = Duration::from_secs(60);
        let p = Paused::default();
        let bg_old = cand(a, DemandClass::Background, 50_000, 0);
        let inter_busy = cand(a, DemandClass::Interactive, 10, 3);
        let inter_idle = cand(b, DemandClass::Interactive, 5, 0);
        assert_eq!(
            local_pick(&[bg_old, inter_busy, inter_idle], &p, promote),
            Some(2)
        );
        assert_eq!(local_pick(&[bg_old, inter_busy], &p, promote), Some(1));
        let bg_aged = cand(b, DemandClass::Background, 61_000, 0);
        assert_eq!(
            local_pick(&[inter_busy, bg_aged], &p, promote),
            Some(1),
            "aged background joins the interactive tier"
        );
        let mut paused = Paused::default();
        paused.firms.insert(b);
        assert_eq!(
            local_pick(&[inter_busy, inter_idle], &paused, promote),
            Some(0)
        );
        paused.rail = true;
        assert_eq!(
            local_pick(&[inter_busy, inter_idle], &paused, promote),
            None
        );
    }

    #[test]
    fn the_local_order_shares_a_burst_between_firms_by_turns() {
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let promote = Duration::from_secs(60);
        let i = DemandClass::Interactive;
        // A's import is older than B's uploads; B has one grant pending already.
        let cands = [
            cand(a, i, 400, 0),
            cand(a, i, 300, 0),
            cand(a, i, 200, 0),
            cand(b, i, 100, 1),
            cand(b, i, 50, 1),
            cand(c, DemandClass::Background, 900, 0),
        ];
        let p = Paused::default();
        assert_eq!(local_order(&cands, &p, promote, 3), vec![0, 1, 3]);
        assert_eq!(
            local_order(&cands, &p, promote, 9),
            vec![0, 1, 3, 2, 4, 5],
            "background last, however old"
        );
        let mut paused = Paused::default();
        paused.firms.insert(a);
        assert_eq!(local_order(&cands, &paused, promote, 9), vec![3, 4, 5]);
    }

    #[test]
    fn an_offer_takes_each_groups_oldest_and_put_back_restores_them() {
        let mut q = Queue::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let _rx: Vec<_> = [(a, 3000), (a, 2000), (a, 1000), (b, 500)]
            .into_iter()
            .map(|(firm, ago)| wait(&mut q, firm, ago, false))
            .collect();
        wait(&mut q, a, 4000, true);
        let offers = q.offer(2);
        let taken: Vec<(Uuid, u128)> = offers
            .iter()
            .map(|o| (o.candidate.firm_id, o.candidate.waited.as_millis() / 500))
            .collect();
        let mut expected = vec![(a, 6), (a, 4), (b, 1)];
        if b < a {
            expected.rotate_left(2);
        }
        assert_eq!(taken, expected, "the two oldest live ones of a, and b's");
        assert_eq!(q.waiting(), 1, "a's youngest stays");
        q.put_back(offers);
        assert_eq!(q.waiting(), 4, "the one that gave up is gone");
        let head = q.groups[&(a, DemandClass::Interactive)].peek().unwrap();
        assert_eq!(head.recorded_at.elapsed().as_millis() / 500, 6);
    }

    /// A waiter of `firm` recorded `ago_ms` ago; its receiver, or none when it gave up.
    fn wait(
        q: &mut Queue,
        firm: Uuid,
        ago_ms: u64,
        gave_up: bool,
    ) -> Option<oneshot::Receiver<Grant>> {
        let (tx, rx) = oneshot::channel();
        q.seq += 1;
        let seq = q.seq;
        q.groups
            .entry((firm, DemandClass::Interactive))
            .or_default()
            .push(Waiter {
                key: MatterKey {
                    firm_id: firm,
                    matter_id: Uuid::new_v4(),
                },
                recorded_at: Instant::now() - Duration::from_millis(ago_ms),
                seq,
                reply: tx,
            });
        (!gave_up).then_some(rx)
    }

    #[test]
    fn waiters_that_gave_up_leave_as_they_are_offered() {
        let mut q = Queue::default();
        let (gone, busy) = (Uuid::new_v4(), Uuid::new_v4());
        // Every waiter of `gone` gave up: it is no candidate.
        wait(&mut q, gone, 40, true);
        wait(&mut q, gone, 30, true);
        // `busy`'s oldest gave up, the next one waits, and one behind it gave up too.
        wait(&mut q, busy, 50, true);
        let _live = wait(&mut q, busy, 20, false);
        wait(&mut q, busy, 10, true);
        let offers = q.offer(1);
        let firms: Vec<Uuid> = offers.iter().map(|o| o.candidate.firm_id).collect();
        assert_eq!(firms, vec![busy], "the live waiter alone is offered");
        assert!(!offers[0].waiter.reply.is_closed());
        assert_eq!(q.offered, 1);
        assert_eq!(q.waiting(), 1, "the one behind it is not looked at yet");
        q.put_back(offers);
        assert_eq!(q.offered, 0);
        // The live one granted, the one behind it is dropped when it is offered.
        let offers = q.offer(1);
        q.granted(&offers[0]);
        assert_eq!(q.offered, 0);
        assert!(q.offer(1).is_empty());
        assert!(q.groups.is_empty(), "the group that is left empty goes");
    }

    #[test]
    fn a_new_demand_goes_first_only_when_nobody_waits_even_on_offer() {
        let mut q = Queue::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        assert!(!q.may_go_first(b), "nothing is handed out before the first read");
        q.read = true;
        assert!(q.may_go_first(b));
        let _rx = wait(&mut q, a, 100, false);
        assert!(!q.may_go_first(b), "someone waits in a group");
        // The dispatcher took a's demand out to ask for its order: the groups look empty,
        // and a hold freed meanwhile is a's, not b's.
        let offers = q.offer(4);
        assert!(q.groups.is_empty());
        assert!(!q.may_go_first(b), "someone waits on offer");
        q.put_back(offers);
        let offers = q.offer(4);
        q.granted(&offers[0]);
        assert!(q.may_go_first(b), "the offer granted, nobody waits");
        q.paused.firms.insert(b);
        assert!(!q.may_go_first(b), "a paused firm waits");
    }

    #[test]
    fn the_oldest_waiter_of_a_group_comes_first() {
        let now = Instant::now();
        let mut heap = BinaryHeap::new();
        for (i, ago) in [5u64, 50, 20].into_iter().enumerate() {
            let (tx, _rx) = oneshot::channel();
            heap.push(Waiter {
                key: MatterKey {
                    firm_id: Uuid::nil(),
                    matter_id: Uuid::nil(),
                },
                recorded_at: now - Duration::from_millis(ago),
                seq: i as u64,
                reply: tx,
            });
        }
        let order: Vec<u64> = std::iter::from_fn(|| heap.pop().map(|w| w.seq)).collect();
        assert_eq!(order, vec![1, 2, 0]);
    }
}
