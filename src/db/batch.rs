//! Group requests that arrive while a round trip is on the wire.
//!
//! Under load most of a short transaction's cost is the transaction itself (the round trips,
//! the executor's start, the commit), not its rows: eight claims and commits in one transaction
//! cost a third of eight transactions. A [`Batcher`] lets callers ask one at a time and sends
//! what piled up together. It never waits to fill a batch: a request that finds a free lane
//! goes at once, alone, so an idle node's latency is a single request's. Only requests that
//! arrive while every lane is busy share the next batch, so batches grow with the load. At
//! idle (every lane free) a request does not even pass through the queue: it takes a lane and
//! runs in its caller's task. Once a lane is busy, requests go through the queue even when
//! another lane is free, so that a crowd asking together (the claims of a burst of holds, the
//! commits of builds that ended together) shares that lane: the first of it no longer goes
//! alone, at several times a member's cost in a batch.
//!
//! It knows nothing of the ledger: the function it is started with runs one batch (on a
//! connection of its own) and answers each member in order. A request that never reached a
//! batch gets [`Unanswered::NotSent`] (the caller does it alone); one whose batch ran but gave
//! it no answer gets [`Unanswered::Lost`]: that batch may have committed, so the caller must
//! find out from the ledger what happened before it acts again. A member whose caller has gone
//! is left out of its batch.

use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Why [`Batcher::ask`] has no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    /// The request never reached a batch (the batcher has stopped): nothing was done for it.
    NotSent,
    /// Its batch ran (or was dropped mid-way, or answered too few): its effect is unknown.
    Lost,
}

/// A queue of requests of type `Q`, each answered with an `A`. Cloning shares the queue.
pub struct Batcher<Q, A> {
    tx: mpsc::UnboundedSender<(Q, oneshot::Sender<A>)>,
    lanes: Arc<Semaphore>,
    /// How many lanes there are: the fast path is for a batcher with all of them free.
    lane_count: usize,
    run: Run<Q, A>,
}

impl<Q, A> Clone for Batcher<Q, A> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            lanes: self.lanes.clone(),
            lane_count: self.lane_count,
            run: self.run.clone(),
        }
    }
}

impl<Q: Send + 'static, A: Send + 'static> Batcher<Q, A> {
    /// Starts the batcher on the current (actix or tokio `LocalSet`) thread: at most `lanes`
    /// batches in flight, at most `max` members each. `run` gets the members in arrival order
    /// and must answer each, in the same order. The batcher stops when its last handle drops.
    pub fn start<F, Fut>(lanes: usize, max: usize, run: F) -> Self
    where
        F: Fn(Vec<Q>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<A>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let lane_count = lanes.max(1);
        let lanes = Arc::new(Semaphore::new(lane_count));
        let run: Run<Q, A> = Arc::new(move |members| Box::pin(run(members)));
        tokio::task::spawn_local(drive(rx, lanes.clone(), max.max(1), run.clone()));
        Self {
            tx,
            lanes,
            lane_count,
            run,
        }
    }

    /// Asks, and waits for the answer (see [`Unanswered`] for its absence). A request that
    /// finds every lane free runs at once in the caller's own task, as a batch of one: no hop
    /// through the queue at idle. Otherwise it joins the queue, and the next batch, which
    /// leaves at once when a lane is free.
    pub async fn ask(&self, request: Q) -> Result<A, Unanswered> {
        if self.lanes.available_permits() == self.lane_count
            && let Ok(lane) = self.lanes.clone().try_acquire_owned()
        {
            let answer = (self.run)(vec![request]).await.into_iter().next();
            drop(lane);
            return answer.ok_or(Unanswered::Lost);
        }
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((request, reply))
            .map_err(|_| Unanswered::NotSent)?;
        answer.await.map_err(|_| Unanswered::Lost)
    }
}

/// Send and Sync, so a handle (and a caller's future that asks) may move between threads.
type Run<Q, A> = Arc<dyn Fn(Vec<Q>) -> BoxFuture<'static, Vec<A>> + Send + Sync>;

async fn drive<Q: 'static, A: 'static>(
    mut rx: mpsc::UnboundedReceiver<(Q, oneshot::Sender<A>)>,
    lanes: Arc<Semaphore>,
    max: usize,
    run: Run<Q, A>,
) {
    while let Some(first) = rx.recv().await {
        // Wait for a lane first: what arrives meanwhile joins this batch.
        let Ok(lane) = lanes.clone().acquire_owned().await else {
            return;
        };
        let mut members = vec![first];
        while members.len() < max {
            match rx.try_recv() {
                Ok(m) => members.push(m),
                Err(_) => break,
            }
        }
        // A caller that gave up (timed out, stopped) is not asked for: its effect would have
        // nobody to hear it.
        members.retain(|(_, reply)| !reply.is_closed());
        if members.is_empty() {
            continue;
        }
        let run = run.clone();
        tokio::task::spawn_local(async move {
            let (requests, replies): (Vec<Q>, Vec<oneshot::Sender<A>>) =
                members.into_iter().unzip();
            let answers = run(requests).await;
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
            drop(lane);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    fn on_local<F: Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        tokio::task::LocalSet::new().block_on(&rt, f)
    }

    #[test]
    fn a_lone_request_goes_at_once_and_a_crowd_shares_batches() {
        on_local(async {
            let sizes = Arc::new(Mutex::new(Vec::new()));
            let seen = sizes.clone();
            let b = Batcher::start(1, 64, move |xs: Vec<u32>| {
                seen.lock().unwrap().push(xs.len());
                async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    xs.into_iter().map(|x| x * 2).collect()
                }
            });
            assert_eq!(b.ask(21).await, Ok(42));
            let answers = futures_util::future::join_all((0..10u32).map(|i| b.ask(i))).await;
            assert_eq!(
                answers,
                (0..10u32).map(|i| Ok(i * 2)).collect::<Vec<_>>(),
                "each member gets its own answer"
            );
            let sizes = sizes.lock().unwrap().clone();
            assert_eq!(sizes[0], 1, "alone, it did not wait for company: {sizes:?}");
            assert!(
                sizes.len() <= 3 && sizes.iter().sum::<usize>() == 11,
                "ten requests behind a busy lane share at most two batches: {sizes:?}"
            );
        });
    }

    #[test]
    fn a_crowd_behind_one_busy_lane_takes_the_free_lane_together() {
        on_local(async {
            let sizes = Arc::new(Mutex::new(Vec::new()));
            let seen = sizes.clone();
            let b = Batcher::start(2, 64, move |xs: Vec<u32>| {
                seen.lock().unwrap().push(xs.len());
                async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    xs
                }
            });
            // One lane busy, as under load; then a crowd asks at once (a burst of holds).
            let busy = tokio::task::spawn_local({
                let b = b.clone();
                async move { b.ask(0).await }
            });
            tokio::task::yield_now().await;
            let answers = futures_util::future::join_all((1..=10u32).map(|i| b.ask(i))).await;
            assert_eq!(answers, (1..=10u32).map(Ok).collect::<Vec<_>>());
            assert_eq!(busy.await.expect("the first ask ran"), Ok(0));
            let sizes = sizes.lock().unwrap().clone();
            assert_eq!(
                sizes,
                vec![1, 10],
                "the crowd shares the free lane: no member of it goes alone ahead of the rest"
            );
        });
    }

    #[test]
    fn a_member_left_unanswered_is_told_so() {
        on_local(async {
            let b = Batcher::start(2, 8, |xs: Vec<u32>| async move {
                xs.into_iter().skip(1).collect::<Vec<_>>()
            });
            let both = futures_util::future::join(b.ask(1), b.ask(2)).await;
            assert!(
                both.0 == Err(Unanswered::Lost) || both.1 == Err(Unanswered::Lost),
                "a short answer leaves someone without, as lost: {both:?}"
            );
        });
    }
}
