//! What one node keeps in flight: builds running (slots) and claims held (holds).
//!
//! A build takes one of `builders.concurrency` slots only while the builder works; a matter
//! takes a hold before it claims and keeps it until the claim is settled (claiming, waiting for
//! a slot, building, committing). Holds beyond the slots are what lets the next claims and the
//! last commits go to the ledger, in batches, while the builders build.
//!
//! How many holds beyond the slots is decided by how long builds take: a claim that waits for a
//! slot is a matter no other node can take, so the node keeps only about [`AHEAD_BUDGET`] of
//! builds waiting (`concurrency × budget / mean build`), never more than `builders.held_claims`
//! in all and never fewer than one per slot. Fast builds (the brief builder: a millisecond or
//! two) get every hold; builds of seconds get one per slot and no queue, so a second node with
//! free builders takes the backlog instead. The mean is a moving average of the builds this
//! node ran; until the first one ends, the node holds two claims per slot. The mean follows
//! only as builds end, so a claim that has waited four times the budget anyway (builds suddenly
//! slower) is handed back by token rather than kept from other nodes
//! ([`Capacity::wait_limit`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// About how much of the node's build time a claim may wait for a slot (see the module doc).
pub const AHEAD_BUDGET: Duration = Duration::from_millis(500);

/// The node's slots and holds. Shared (`Arc`) by the pool and every build.
pub struct Capacity {
    slots: Arc<Semaphore>,
    /// Bytes of records read ahead by builds not yet building (see [`Capacity::keep_ahead`]).
    ahead_bytes: Arc<AtomicUsize>,
    concurrency: usize,
    holds: Arc<Semaphore>,
    max_holds: usize,
    /// Holds the semaphore stands for now (taken and free); moved towards the target after
    /// each build. Only this lock changes it.
    granted: Mutex<usize>,
    /// Moving average of a build's time in a slot, µs; 0 until the first build ends.
    mean_build_us: AtomicU64,
}

/// The right to hold one claim; dropping it lets the next matter claim, unless the node holds
/// more than its target (then the hold is retired instead: released permits go straight to
/// waiting matters, so a free one is rarely there to take back).
pub struct Hold {
    permit: Option<OwnedSemaphorePermit>,
    capacity: Arc<Capacity>,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        if let Ok(mut granted) = self.capacity.granted.lock()
            && *granted > self.capacity.target()
        {
            permit.forget();
            *granted -= 1;
            return;
        }
        drop(permit);
    }
}

/// The most bytes of records a node keeps read ahead for builds that have not started.
pub const READ_AHEAD_BUDGET: usize = 64 << 20;

/// A record kept in memory ahead of its build ([`Capacity::keep_ahead`]); dropping it gives
/// its bytes back to the budget.
pub struct KeptAhead {
    bytes: usize,
    held: Arc<AtomicUsize>,
}

impl Drop for KeptAhead {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A build's right to run; dropping it lets the next waiting claim build.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Capacity {
    /// `concurrency` slots; at most `max_holds` holds (at least one per slot).
    pub fn new(concurrency: usize, max_holds: usize) -> Arc<Self> {
        let concurrency = concurrency.max(1);
        let max_holds = max_holds.max(concurrency);
        let first = (2 * concurrency).min(max_holds);
        Arc::new(Self {
            slots: Arc::new(Semaphore::new(concurrency)),
            ahead_bytes: Arc::default(),
            concurrency,
            holds: Arc::new(Semaphore::new(first)),
            max_holds,
            granted: Mutex::new(first),
            mean_build_us: AtomicU64::new(0),
        })
    }

    /// Waits for a hold (first come, first served: only the node's admission waits here, and
    /// it decides who gets each hold).
    pub async fn hold(self: &Arc<Self>) -> Option<Hold> {
        let permit = self.holds.clone().acquire_owned().await.ok()?;
        Some(Hold {
            permit: Some(permit),
            capacity: self.clone(),
        })
    }

    /// A hold if one is free now, without waiting.
    pub fn try_hold(self: &Arc<Self>) -> Option<Hold> {
        let permit = self.holds.clone().try_acquire_owned().ok()?;
        Some(Hold {
            permit: Some(permit),
            capacity: self.clone(),
        })
    }

    /// Waits for a slot (first come, first served).
    pub async fn slot(&self) -> Option<Slot> {
        let permit = self.slots.clone().acquire_owned().await.ok()?;
        Some(Slot { _permit: permit })
    }

    /// Keeps a record read ahead for a build that has not started (`bytes` long), while the
    /// records kept come to at most [`READ_AHEAD_BUDGET`]; `None` past it, and the build reads
    /// its record when it runs. A node holds many claims when builds are fast, and a matter's
    /// record can be large: this bounds what waits in memory. The bytes count until the
    /// returned [`KeptAhead`] drops.
    pub fn keep_ahead(&self, bytes: usize) -> Option<KeptAhead> {
        self.ahead_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|&n| n <= READ_AHEAD_BUDGET)
            })
            .ok()?;
        Some(KeptAhead {
            bytes,
            held: self.ahead_bytes.clone(),
        })
    }

    /// A build held its slot for `took`: the average moves, and the holds with it.
    pub fn built(&self, took: Duration) {
        let us = took.as_micros().clamp(1, u128::from(u32::MAX)) as u64;
        let old = self.mean_build_us.load(Ordering::Relaxed);
        let mean = if old == 0 {
            us
        } else {
            // An eighth of the way to the new build: a few slow builds move it, one does not.
            (old * 7 + us) / 8
        };
        self.mean_build_us.store(mean.max(1), Ordering::Relaxed);
        self.retarget();
    }

    /// The holds the current mean build calls for.
    pub fn target(&self) -> usize {
        let mean = self.mean_build_us.load(Ordering::Relaxed);
        if mean == 0 {
            return (2 * self.concurrency).min(self.max_holds);
        }
        let budget = AHEAD_BUDGET.as_micros() as u64;
        let ahead = (self.concurrency as u64).saturating_mul(budget) / mean;
        let ahead = usize::try_from(ahead).unwrap_or(usize::MAX);
        self.concurrency + ahead.min(self.max_holds - self.concurrency)
    }

    /// Moves the semaphore's holds towards [`Self::target`]: adds the missing ones, and takes
    /// back free ones beyond it (held ones are retired as they are dropped).
    fn retarget(&self) {
        let target = self.target();
        let Ok(mut granted) = self.granted.lock() else {
            return;
        };
        if target > *granted {
            self.holds.add_permits(target - *granted);
            *granted = target;
        } else if target < *granted {
            *granted -= self.holds.forget_permits(*granted - target);
        }
    }

    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// `builders.held_claims`: the most holds the node ever grants.
    pub fn max_holds(&self) -> usize {
        self.max_holds
    }

    /// Builds running now.
    pub fn busy(&self) -> usize {
        self.concurrency
            .saturating_sub(self.slots.available_permits())
    }

    /// Claims held now: claiming, waiting for a slot, building or settling. Read under the
    /// lock that changes the grant, so a grant moving meanwhile cannot make it read zero.
    pub fn held(&self) -> usize {
        match self.granted.lock() {
            Ok(granted) => granted.saturating_sub(self.holds.available_permits()),
            Err(_) => self.max_holds,
        }
    }

    /// How long a claim may wait for a slot before it is handed back: four times the budget. Holds
    /// follow the mean build only as builds end, so after builds suddenly slow down the claims
    /// already held would otherwise wait behind them (for as long as builds take) where no other
    /// node can take them; in the steady state a wait is about the budget.
    pub fn wait_limit(&self) -> Duration {
        4 * AHEAD_BUDGET
    }

    /// Waits until no claim is held, or `timeout` passes. Returns whether none is.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let poll = async {
            while self.held() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(timeout, poll).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_ahead_stay_within_the_budget_until_their_builds_take_them() {
        let c = Capacity::new(8, 256);
        let big = READ_AHEAD_BUDGET / 3;
        let kept: Vec<KeptAhead> = (0..3)
            .map(|_| c.keep_ahead(big).expect("three thirds fit"))
            .collect();
        assert!(
            c.keep_ahead(big).is_none(),
            "a fourth third is past the budget: its build reads its own record"
        );
        assert!(
            c.keep_ahead(READ_AHEAD_BUDGET - 3 * big).is_some(),
            "what is left of the budget fits (and is given back at once)"
        );
        drop(kept);
        assert!(
            c.keep_ahead(READ_AHEAD_BUDGET).is_some(),
            "builds that took their records gave their bytes back"
        );
        assert!(c.keep_ahead(READ_AHEAD_BUDGET + 1).is_none(), "never past it");
    }

    #[test]
    fn fast_builds_get_every_hold_and_slow_ones_one_per_slot() {
        let c = Capacity::new(8, 128);
        assert_eq!(c.target(), 16, "two per slot before any build ends");
        for _ in 0..20 {
            c.built(Duration::from_millis(2));
        }
        assert_eq!(c.target(), 128, "8 slots × 500 ms / 2 ms is past the most");
        for _ in 0..60 {
            c.built(Duration::from_secs(30));
        }
        assert_eq!(c.target(), 8, "30 s builds: no claim waits for a slot");
        for _ in 0..200 {
            c.built(Duration::from_millis(100));
        }
        let t = c.target();
        assert!(
            (44..=48).contains(&t),
            "100 ms builds: 500 ms of them waiting (40): {t}"
        );
    }

    #[tokio::test]
    async fn holds_follow_the_target_and_taken_ones_are_returned_later() {
        let c = Capacity::new(2, 10);
        let mut taken = Vec::new();
        for _ in 0..4 {
            taken.push(c.hold().await.expect("a hold"));
        }
        assert_eq!(c.held(), 4);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), c.hold())
                .await
                .is_err(),
            "four granted, four held: the fifth waits"
        );
        c.built(Duration::from_micros(10));
        assert_eq!(c.target(), 10);
        taken.push(
            c.hold()
                .await
                .expect("a hold, once fast builds raised the target"),
        );
        assert_eq!(c.held(), 5);
        for _ in 0..40 {
            c.built(Duration::from_secs(10));
        }
        assert_eq!(c.target(), 2);
        // Five are held: none can be taken back until they come free, and each is retired as
        // it does.
        assert_eq!(c.held(), 5);
        taken.truncate(1);
        assert_eq!(c.held(), 1);
        assert_eq!(
            c.holds.available_permits(),
            1,
            "retired down to the target of two"
        );
        let _second = c.hold().await.expect("one more fits under two");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), c.hold())
                .await
                .is_err(),
            "the target is two: a third waits"
        );
        assert!(
            !c.wait_idle(Duration::from_millis(30)).await,
            "two are held"
        );
        drop(taken);
        drop(_second);
        assert!(c.wait_idle(Duration::from_millis(30)).await, "none is held");
    }
}
