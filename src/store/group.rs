//! [`GroupCommit`]: requests of one lane that arrive while one of them is being written are
//! written together, in one step, by whoever gets the lane next.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{oneshot, OwnedMutexGuard};

use super::StoreError;

/// Requests of one lane (a slot's holds, a store's one writer) that arrive while one of them is
/// being written, written together by whoever gets the lane next: a group commit.
///
/// A request's caller leaves it in its lane's queue, then waits for either its answer or the
/// lane's gate (a lock that admits one writer of the lane at a time). Whoever gets the gate
/// takes every request waiting, up to the group's bound:
///
/// * one, its own: the caller writes it alone, on its own future ([`submit`](Self::submit)'s
///   `alone`), so a lane with one writer at a time pays nothing but the gate for the grouping;
/// * several: they are written together (`group`) on a task of its own, which holds the gate
///   until every caller of the group has its answer, so a caller that goes away (its future
///   dropped) abandons no other caller.
///
/// A request whose caller went away before it was taken is dropped unwritten. A group whose
/// task ends without answering (a runtime shutting down) answers its callers
/// [`StoreError::unavailable`]: whether their writes committed is unknown, and a retry with
/// the same idempotency key finds out.
///
/// The rules stay in the store's steps: a group is one step that decides every request it
/// takes by rows affected, as the request alone would have been decided, and answers each
/// only once the step committed. A store can answer a request of a group "not decided here"
/// (in its `T`) and let the caller go on alone, for whatever the group's step does not settle.
///
/// ```
/// use std::sync::Arc;
/// use slot_booking::store::GroupCommit;
///
/// # tokio_test::block_on(async {
/// let group: Arc<GroupCommit<u64, u32, u32>> = Arc::new(GroupCommit::new(64));
/// let doubled = group
///     .submit(
///         7,                                   // the lane: a slot's id, say
///         21,                                  // the request
///         |n| async move { Ok(n * 2) },        // written alone
///         |ns: Vec<u32>| async move {          // written together: one answer each, in order
///             Ok(ns.into_iter().map(|n| Ok(n * 2)).collect())
///         },
///     )
///     .await?;
/// assert_eq!(doubled, 42);
/// # Ok::<(), slot_booking::StoreError>(())
/// # }).unwrap();
/// ```
pub struct GroupCommit<K, R, T> {
    lanes: Mutex<Lanes<K, R, T>>,
    /// The gate every lane shares, if one was given ([`with_gate`](Self::with_gate)).
    gate: Option<Arc<tokio::sync::Mutex<()>>>,
    max_group: usize,
    stats: Mutex<GroupStats>,
}

impl<K, R, T> std::fmt::Debug for GroupCommit<K, R, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("max_group", &self.max_group)
            .field(
                "stats",
                &*self.stats.lock().unwrap_or_else(PoisonError::into_inner),
            )
            .finish_non_exhaustive()
    }
}

/// How many requests a [`GroupCommit`] has written together.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GroupStats {
    /// Steps that wrote more than one request together.
    pub groups: u64,
    /// The requests those steps took (whatever each one's answer).
    pub requests: u64,
    /// The most requests one of them took.
    pub largest: u64,
}

/// The lanes in use, each held weakly: a lane lives while a caller or a group holds it.
struct Lanes<K, R, T> {
    map: HashMap<K, Weak<Lane<R, T>>>,
    /// The map's size at which its dead entries are swept next.
    sweep_at: usize,
}

/// One lane: the requests waiting, and the gate its writers take one at a time.
struct Lane<R, T> {
    waiting: Mutex<Vec<Pending<R, T>>>,
    gate: Arc<tokio::sync::Mutex<()>>,
    next_id: AtomicU64,
}

/// A request waiting for a writer, with where to answer it.
struct Pending<R, T> {
    /// Tells a caller's own request from the others'.
    id: u64,
    request: R,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<R, T> Lane<R, T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Pending<R, T>>> {
        // A poisoned lock only means another caller panicked while pushing or taking; the
        // vector itself is whole, so go on with it.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K, R, T> GroupCommit<K, R, T>
where
    K: Eq + Hash + Clone,
    R: Send + 'static,
    T: Send + 'static,
{
    /// A group commit whose groups take at most `max_group` requests (at least 1); the rest
    /// wait for the next.
    pub fn new(max_group: usize) -> Self {
        GroupCommit {
            lanes: Mutex::new(Lanes {
                map: HashMap::new(),
                sweep_at: 64,
            }),
            gate: None,
            max_group: max_group.max(1),
            stats: Mutex::new(GroupStats::default()),
        }
    }

    /// A group commit whose lanes all take `gate`, a lock the store's other writers take too:
    /// a store with one writer at a time (SQLite's write lock) queues its grouped requests
    /// behind its other writes, and they behind a group. A writer of the group holds the gate
    /// from taking its requests until each of them is answered.
    pub fn with_gate(max_group: usize, gate: Arc<tokio::sync::Mutex<()>>) -> Self {
        GroupCommit {
            gate: Some(gate),
            ..GroupCommit::new(max_group)
        }
    }

    /// How many requests have been written together so far.
    pub fn stats(&self) -> GroupStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many requests of lane `key` wait to be taken now (not counting one being written
    /// alone, nor a group being written).
    pub fn waiting(&self, key: &K) -> usize {
        let lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        lanes
            .map
            .get(key)
            .and_then(Weak::upgrade)
            .map_or(0, |lane| lane.lock().len())
    }

    /// Writes `request` in lane `key`: alone (`alone(request)`, on this future) when no other
    /// request of the lane is being written or waits, else in a group of the requests waiting
    /// (`group(requests)`, on a task of its own, answering each request in order, or failing
    /// them all); its answer, once written.
    pub async fn submit<A, AF, G, GF>(
        &self,
        key: K,
        request: R,
        alone: A,
        group: G,
    ) -> Result<T, StoreError>
    where
        A: FnOnce(R) -> AF,
        AF: Future<Output = Result<T, StoreError>>,
        G: Fn(Vec<R>) -> GF,
        GF: Future<Output = Result<Vec<Result<T, StoreError>>, StoreError>> + Send + 'static,
    {
        let lane = self.lane(key);
        // Nobody writing or waiting (a waiter would have been handed the gate first): alone,
        // without the queue.
        if let Ok(gate) = Arc::clone(&lane.gate).try_lock_owned() {
            if lane.lock().is_empty() {
                let answer = alone(request).await;
                drop(gate);
                return answer;
            }
            drop(gate);
        }
        let (reply, mut answer) = oneshot::channel();
        let id = lane.next_id.fetch_add(1, Ordering::Relaxed);
        lane.lock().push(Pending { id, request, reply });
        loop {
            let gate = tokio::select! {
                // The answer first: a group that took this request answers it before it lets
                // the gate go, so a caller that finds both ready has been answered.
                biased;
                answered = &mut answer => return answered.unwrap_or_else(|_| Err(abandoned())),
                gate = Arc::clone(&lane.gate).lock_owned() => gate,
            };
            if let Ok(answered) = answer.try_recv() {
                return answered;
            }
            let mut taken = {
                let mut waiting = lane.lock();
                let n = waiting.len().min(self.max_group);
                waiting.drain(..n).collect::<Vec<_>>()
            };
            taken.retain(|pending| !pending.reply.is_closed());
            if taken.len() == 1 && taken[0].id == id {
                // Alone after all: as above.
                if let Some(own) = taken.pop() {
                    let answer = alone(own.request).await;
                    drop(gate);
                    return answer;
                }
            }
            if taken.is_empty() {
                drop(gate);
                continue;
            }
            // This request among them, or (with more than `max_group` waiting) still waiting
            // behind them: either way the group answers or lets the gate go, and this caller
            // waits for whichever comes first again. One other caller's request, taken behind
            // a full group, is not written together with anything: not counted.
            if taken.len() > 1 {
                self.count(taken.len());
            }
            let (requests, replies): (Vec<R>, Vec<_>) = taken
                .into_iter()
                .map(|pending| (pending.request, pending.reply))
                .unzip();
            tokio::spawn(answer_group(group(requests), replies, gate));
        }
    }

    /// The lane of `key`, made if no caller or group holds it.
    fn lane(&self, key: K) -> Arc<Lane<R, T>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lane) = lanes.map.get(&key).and_then(Weak::upgrade) {
            return lane;
        }
        let lane = Arc::new(Lane {
            waiting: Mutex::new(Vec::new()),
            gate: self.gate.clone().unwrap_or_default(),
            next_id: AtomicU64::new(0),
        });
        lanes.map.insert(key, Arc::downgrade(&lane));
        if lanes.map.len() >= lanes.sweep_at {
            // Lanes nobody holds any more: dropped, and the next sweep is due when the map has
            // doubled again, so each insert pays O(1) for the sweeps on average.
            lanes.map.retain(|_, lane| lane.strong_count() > 0);
            lanes.sweep_at = (lanes.map.len() * 2).max(64);
        }
        lane
    }

    fn count(&self, requests: usize) {
        let mut stats = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        let requests = requests as u64;
        stats.groups += 1;
        stats.requests += requests;
        stats.largest = stats.largest.max(requests);
    }
}

/// Runs a group's step, answers each of its callers (one answer per request, in order; the
/// step's error to all of them), then lets the gate go.
async fn answer_group<T>(
    step: impl Future<Output = Result<Vec<Result<T, StoreError>>, StoreError>>,
    replies: Vec<oneshot::Sender<Result<T, StoreError>>>,
    gate: OwnedMutexGuard<()>,
) {
    match step.await {
        Ok(answers) if answers.len() == replies.len() => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                // A caller that went away meanwhile needs no answer.
                let _ = reply.send(answer);
            }
        }
        Ok(_) => {
            let error = StoreError::failed("a group commit answered another number of requests");
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
    drop(gate);
}

/// The group that took a request ended without answering it: its task was stopped (the
/// runtime shutting down). Whether the request was written is unknown; a retry with the same
/// idempotency key finds out.
fn abandoned() -> StoreError {
    StoreError::unavailable("the group commit that took this request stopped before answering it")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Many callers of one lane while the first is being written: the others are written in
    /// groups, each caller gets its own answer, and nothing is written twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_of_one_lane_are_grouped_and_each_answered_once() {
        let group: Arc<GroupCommit<u8, u32, u32>> = Arc::new(GroupCommit::new(16));
        let written = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let first = {
            let (group, written, mut released) = (group.clone(), written.clone(), released.clone());
            tokio::spawn(async move {
                group
                    .submit(
                        0,
                        0,
                        |n| async move {
                            // Held until every other caller waits behind it.
                            let _ = released.wait_for(|r| *r).await;
                            written.fetch_add(1, Ordering::SeqCst);
                            Ok(n)
                        },
                        |_: Vec<u32>| async { Err(StoreError::failed("not a group")) },
                    )
                    .await
            })
        };
        // The first caller holds the gate once its `alone` runs.
        while group.lane(0).gate.try_lock().is_ok() {
            tokio::task::yield_now().await;
        }
        let others: Vec<_> = (1..=40u32)
            .map(|n| {
                let (group, written) = (group.clone(), written.clone());
                tokio::spawn(async move {
                    let written2 = written.clone();
                    group
                        .submit(
                            0,
                            n,
                            move |n| async move {
                                written2.fetch_add(1, Ordering::SeqCst);
                                Ok(n * 10)
                            },
                            move |ns: Vec<u32>| {
                                let written = written.clone();
                                async move {
                                    written.fetch_add(ns.len(), Ordering::SeqCst);
                                    Ok(ns.into_iter().map(|n| Ok(n * 10)).collect())
                                }
                            },
                        )
                        .await
                })
            })
            .collect();
        while group.lane(0).lock().len() < 40 {
            tokio::task::yield_now().await;
        }
        release.send_replace(true);
        assert_eq!(first.await.unwrap().unwrap(), 0);
        for (n, other) in (1..=40u32).zip(others) {
            assert_eq!(other.await.unwrap().unwrap(), n * 10);
        }
        assert_eq!(
            written.load(Ordering::SeqCst),
            41,
            "each request written once"
        );
        let stats = group.stats();
        assert!(
            stats.groups >= 3,
            "40 waiting callers in groups of at most 16: {stats:?}"
        );
        assert_eq!(stats.largest, 16);
        assert!(stats.requests >= 39, "{stats:?}");
    }

    /// A group's error reaches every caller of the group.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_group_fails_each_of_its_callers() {
        let group: Arc<GroupCommit<u8, u32, u32>> = Arc::new(GroupCommit::new(64));
        // Held by the test, so the callers' lane is this one.
        let lane = group.lane(1);
        let gate = Arc::clone(&lane.gate).lock_owned().await;
        let callers: Vec<_> = (0..5u32)
            .map(|n| {
                let group = group.clone();
                tokio::spawn(async move {
                    group
                        .submit(
                            1,
                            n,
                            |n| async move { Ok(n) },
                            |_: Vec<u32>| async { Err(StoreError::unavailable("lost")) },
                        )
                        .await
                })
            })
            .collect();
        while lane.lock().len() < 5 {
            tokio::task::yield_now().await;
        }
        drop(gate);
        for caller in callers {
            let error = caller.await.unwrap().unwrap_err();
            assert!(error.is_transient(), "{error}");
        }
    }

    /// A caller that went away before its request was taken is dropped unwritten, and the
    /// lanes nobody holds are swept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_gone_before_its_group_is_not_written() {
        let group: Arc<GroupCommit<u32, u32, u32>> = Arc::new(GroupCommit::new(64));
        let lane = group.lane(2);
        let gate = Arc::clone(&lane.gate).lock_owned().await;
        let written = Arc::new(Mutex::new(Vec::new()));
        let submit = |n: u32| {
            let (group, written) = (group.clone(), written.clone());
            tokio::spawn(async move {
                group
                    .submit(
                        2,
                        n,
                        |n| async move { Ok(n) },
                        move |ns: Vec<u32>| {
                            written.lock().unwrap().extend(ns.iter().copied());
                            async move { Ok(ns.into_iter().map(Ok).collect()) }
                        },
                    )
                    .await
            })
        };
        let (kept, gone, kept2) = (submit(1), submit(2), submit(3));
        while lane.lock().len() < 3 {
            tokio::task::yield_now().await;
        }
        gone.abort();
        let _ = gone.await;
        drop(gate);
        assert_eq!(kept.await.unwrap().unwrap(), 1);
        assert_eq!(kept2.await.unwrap().unwrap(), 3);
        assert_eq!(*written.lock().unwrap(), vec![1, 3]);
        drop(lane);
        for key in 100..300 {
            drop(group.lane(key));
        }
        let live = group.lanes.lock().unwrap().map.len();
        assert!(live < 200, "lanes nobody holds are swept: {live} left");
    }

    /// With a shared gate, every lane waits for it: while another writer holds it, each
    /// request waits, and the first to get it writes the waiting ones together, in one group.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shared_gate_holds_every_lane_until_it_is_let_go() {
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        let group: Arc<GroupCommit<(), u32, u32>> =
            Arc::new(GroupCommit::with_gate(64, Arc::clone(&gate)));
        // Another writer of the store (a transaction, say) holds the gate.
        let other_writer = Arc::clone(&gate).lock_owned().await;
        let callers: Vec<_> = (0..6u32)
            .map(|n| {
                let group = group.clone();
                tokio::spawn(async move {
                    group
                        .submit(
                            (),
                            n,
                            |n| async move { Ok(n) },
                            |ns: Vec<u32>| async move {
                                Ok(ns.into_iter().map(|n| Ok(n + 100)).collect())
                            },
                        )
                        .await
                })
            })
            .collect();
        // Each caller found the gate taken and waits in the lane, none written alone.
        while group.waiting(&()) < 6 {
            tokio::task::yield_now().await;
        }
        drop(other_writer);
        for (n, caller) in (0..6u32).zip(callers) {
            assert_eq!(
                caller.await.unwrap().unwrap(),
                n + 100,
                "written in the group"
            );
        }
        assert_eq!(
            group.stats(),
            GroupStats {
                groups: 1,
                requests: 6,
                largest: 6
            }
        );
        // The group let the shared gate go once every caller was answered.
        assert!(gate.try_lock().is_ok());
    }
}
