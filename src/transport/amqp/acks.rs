//! One ack frame for many deliveries, never for one that is not yet settled.
//!
//! Each `basic.ack` is a command the quorum queue writes to its log: acked one by one, the
//! broker spent about a sixth of its CPU on them (`briefrail-bench e2e`, 10,000 matters). An
//! ack with `multiple` set settles every outstanding delivery of the channel up to its tag, so
//! it may only be sent for a tag below which every delivery is settled: committed in the
//! ledger, or dead-lettered or given back on its own. Batches are applied concurrently and
//! commit out of order; this window keeps the channel's deliveries in tag order and answers,
//! when a batch commits, which acks may go out now.
//!
//! A batch that commits behind one still applying waits for it (its acks go out with the
//! earlier batch's). Two cases would make that wait unbounded, and there the window falls back
//! to one ack per delivery: a batch retrying in place while the database says "not now"
//! ([`AckWindow::stall`]), and a delivery that must stay unacknowledged until the session ends
//! (its dead-lettering failed: [`AckWindow::leave_unacked`]). A session that ends with acks
//! still waiting has them redelivered: duplicates, which the inbox absorbs and which nudge
//! their matters.

use std::collections::BTreeMap;

/// What to send for a delivery: `T` is its acker (a plain value in the unit tests).
#[derive(Debug, PartialEq, Eq)]
pub enum Ack<T> {
    /// `basic.ack` with `multiple`: this delivery and every outstanding one below it.
    UpTo(T),
    /// `basic.ack` for this delivery alone.
    One(T),
}

/// The outstanding deliveries of one channel, by delivery tag.
#[derive(Debug)]
pub struct AckWindow<T> {
    /// Received and not yet acked by this window or settled on their own: `None` while their
    /// batch is applying, `Some(acker)` once committed.
    outstanding: BTreeMap<u64, Option<T>>,
    /// Batches retrying in place right now: while any is, committed deliveries are acked one
    /// by one instead of waiting behind it.
    stalled: usize,
    /// A delivery is left unacknowledged for the rest of the session: from then on every ack
    /// is one by one (a multiple ack would settle it).
    one_by_one: bool,
}

impl<T> Default for AckWindow<T> {
    fn default() -> Self {
        Self {
            outstanding: BTreeMap::new(),
            stalled: 0,
            one_by_one: false,
        }
    }
}

impl<T> AckWindow<T> {
    /// A delivery came off the channel. Called in the order the channel delivers (tags rise).
    pub fn received(&mut self, tag: u64) {
        self.outstanding.insert(tag, None);
    }

    /// The delivery was acked or given back on its own (a dead letter, a requeue): it no
    /// longer holds back the acks above it.
    pub fn settled_alone(&mut self, tag: u64) {
        self.outstanding.remove(&tag);
    }

    /// The delivery stays unacknowledged until the session ends (it comes back then). Returns
    /// the acks that were waiting, one by one; every later ack is one by one too.
    pub fn leave_unacked(&mut self, tag: u64) -> Vec<Ack<T>> {
        self.outstanding.remove(&tag);
        self.one_by_one = true;
        self.release_waiting()
    }

    /// A batch retries in place: returns the acks waiting (behind it or anything else), one by
    /// one, and acks one by one until every stalled batch has [resumed](Self::resume).
    pub fn stall(&mut self) -> Vec<Ack<T>> {
        self.stalled += 1;
        self.release_waiting()
    }

    /// A stalled batch stopped retrying (applied, or failed for good).
    pub fn resume(&mut self) {
        self.stalled = self.stalled.saturating_sub(1);
    }

    /// The deliveries' effects are committed: returns the acks that may go out now. At most
    /// one multiple ack (for the highest tag below which everything is committed), or one
    /// ack per delivery while the window acks one by one.
    pub fn committed(&mut self, acked: impl IntoIterator<Item = (u64, T)>) -> Vec<Ack<T>> {
        let mut unknown = Vec::new();
        for (tag, acker) in acked {
            match self.outstanding.get_mut(&tag) {
                Some(slot) => *slot = Some(acker),
                // Never received here (not expected): acked on its own, never left behind.
                None => unknown.push(Ack::One(acker)),
            }
        }
        if self.one_by_one || self.stalled > 0 {
            unknown.extend(self.release_waiting());
            return unknown;
        }
        let mut last = None;
        while let Some(entry) = self.outstanding.first_entry() {
            if entry.get().is_none() {
                break;
            }
            last = entry.remove();
        }
        unknown.extend(last.map(Ack::UpTo));
        unknown
    }

    /// Every committed delivery still waiting, each to be acked on its own.
    fn release_waiting(&mut self) -> Vec<Ack<T>> {
        let (ready, pending): (BTreeMap<_, _>, BTreeMap<_, _>) =
            std::mem::take(&mut self.outstanding)
                .into_iter()
                .partition(|(_, slot)| slot.is_some());
        self.outstanding = pending;
        ready.into_values().flatten().map(Ack::One).collect()
    }

    /// Deliveries received and not yet acked or settled.
    #[cfg(feature = "testing")]
    pub fn len(&self) -> usize {
        self.outstanding.len()
    }

    #[cfg(feature = "testing")]
    pub fn is_empty(&self) -> bool {
        self.outstanding.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::{Ack, AckWindow};

    fn window(tags: std::ops::RangeInclusive<u64>) -> AckWindow<u64> {
        let mut w = AckWindow::default();
        for t in tags {
            w.received(t);
        }
        w
    }

    fn done(tags: &[u64]) -> Vec<(u64, u64)> {
        tags.iter().map(|t| (*t, *t)).collect()
    }

    #[test]
    fn batches_in_order_cost_one_ack_each() {
        let mut w = window(1..=6);
        assert_eq!(w.committed(done(&[1, 2, 3])), vec![Ack::UpTo(3)]);
        assert_eq!(w.committed(done(&[4, 5, 6])), vec![Ack::UpTo(6)]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_batch_committed_early_waits_for_the_one_below_it() {
        let mut w = window(1..=6);
        assert_eq!(w.committed(done(&[4, 5, 6])), vec![], "3 is still applying");
        assert_eq!(w.len(), 6);
        assert_eq!(w.committed(done(&[1, 2, 3])), vec![Ack::UpTo(6)]);
        assert!(w.is_empty());
    }

    #[test]
    fn an_ack_never_reaches_past_an_uncommitted_delivery() {
        let mut w = window(1..=9);
        assert_eq!(w.committed(done(&[1, 2, 3])), vec![Ack::UpTo(3)]);
        assert_eq!(w.committed(done(&[7, 8, 9])), vec![]);
        // 4..6 apply in two batches, the second first.
        assert_eq!(w.committed(done(&[6])), vec![]);
        assert_eq!(w.committed(done(&[4, 5])), vec![Ack::UpTo(9)]);
    }

    #[test]
    fn a_delivery_settled_on_its_own_does_not_hold_back_the_rest() {
        let mut w = window(1..=4);
        w.settled_alone(2);
        assert_eq!(w.committed(done(&[3, 4])), vec![]);
        assert_eq!(w.committed(done(&[1])), vec![Ack::UpTo(4)]);
        // A tag settled alone is never the one a multiple ack names (it is not outstanding).
        let mut w = window(1..=3);
        w.settled_alone(3);
        assert_eq!(w.committed(done(&[1, 2])), vec![Ack::UpTo(2)]);
    }

    #[test]
    fn a_stalled_batch_releases_the_acks_waiting_behind_it_one_by_one() {
        let mut w = window(1..=6);
        assert_eq!(w.committed(done(&[4, 5])), vec![]);
        assert_eq!(w.stall(), vec![Ack::One(4), Ack::One(5)]);
        assert_eq!(w.committed(done(&[6])), vec![Ack::One(6)]);
        w.resume();
        assert_eq!(w.committed(done(&[1, 2, 3])), vec![Ack::UpTo(3)]);
        assert!(w.is_empty());
    }

    #[test]
    fn a_delivery_left_unacked_turns_the_session_to_one_ack_each() {
        let mut w = window(1..=5);
        assert_eq!(w.committed(done(&[3])), vec![]);
        assert_eq!(w.leave_unacked(2), vec![Ack::One(3)]);
        assert_eq!(w.committed(done(&[1])), vec![Ack::One(1)]);
        assert_eq!(w.committed(done(&[4, 5])), vec![Ack::One(4), Ack::One(5)]);
    }

    #[test]
    fn random_schedules_ack_each_delivery_once_and_never_past_a_pending_one() {
        // A small deterministic generator: batches of 1..8 tags commit in a shuffled order;
        // every ack names only committed tags, a multiple ack only tags whose predecessors
        // are all settled, and in the end every tag is acked exactly once.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..200 {
            let total = 1 + next(60);
            let mut w = window(1..=total);
            let mut batches = Vec::new();
            let mut t = 1;
            while t <= total {
                let len = (1 + next(8)).min(total - t + 1);
                batches.push((t..t + len).collect::<Vec<u64>>());
                t += len;
            }
            for i in (1..batches.len()).rev() {
                batches.swap(i, next(i as u64 + 1) as usize);
            }
            let mut committed = std::collections::BTreeSet::new();
            let mut acked = std::collections::BTreeSet::new();
            for b in batches {
                committed.extend(b.iter().copied());
                for ack in w.committed(done(&b)) {
                    let Ack::UpTo(top) = ack else {
                        panic!("no stall: acks are multiple")
                    };
                    for tag in 1..=top {
                        assert!(committed.contains(&tag), "acked {tag} before its commit");
                        acked.insert(tag);
                    }
                }
            }
            assert_eq!(acked.len() as u64, total, "every delivery acked");
            assert!(w.is_empty());
        }
    }
}
