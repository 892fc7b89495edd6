//! A single-flight cache for one value, with stale-while-revalidate and generation-checked
//! invalidation. It knows nothing about bookings; the engine keeps its availability snapshot in
//! one.
//!
//! Why not an existing crate: `moka` runs a merged load inside the first caller's future (if that
//! caller is dropped the others wait) and has no stale-while-revalidate; `futures`' `Shared`
//! caches errors and poisons on panic; tokio's `OnceCell` never expires. Here every load runs
//! as its own spawned task, so callers can give up without cancelling it.
//!
//! The rules:
//!
//! - **Fresh hit** (C1): while the value is younger than `fresh_for`, a read returns the shared
//!   `Arc` without calling the loader and without copying the value.
//! - **Single flight** (C2): however many readers find the value missing, expired or
//!   invalidated, one load is in flight at a time.
//! - **Stale while revalidate** (C3): once `fresh_for` has passed (but not `fresh_for +
//!   serve_stale_for`), readers get the old value at once while one refresh runs in the
//!   background. The refresh completes even if every reader goes away.
//! - **Invalidation** (C4): [`SingleFlightCache::invalidate`] bumps a generation counter: it is
//!   synchronous and O(1). A read that starts after it returns never receives a value whose load
//!   started before it; a load that started before it is never stored.
//! - **Errors** (C5): a failed load is not cached. Readers that had a usable stale copy were
//!   already given it; the next read tries again.
//! - **Cancellation and panics** (C6): dropping any reader, or a loader that panics, never leaves
//!   other readers waiting or the cache stuck: waiters get [`CacheError::LoadAborted`] and the
//!   next read starts a new load.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long a cached value is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// How long after its load began a value is fresh (served without any load).
    pub fresh_for: Duration,
    /// How long after it stops being fresh a value may still be served while a refresh runs
    /// or after a refresh failed. Past that, readers wait for a load.
    pub serve_stale_for: Duration,
}

impl Default for CacheConfig {
    /// Fresh for 10 seconds, then served stale for up to 60 more.
    fn default() -> Self {
        CacheConfig {
            fresh_for: Duration::from_secs(10),
            serve_stale_for: Duration::from_secs(60),
        }
    }
}

/// Why a read produced no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError<E> {
    /// The loader returned an error (not cached).
    #[error("load failed: {0}")]
    Load(E),
    /// The loader panicked, or its task was cancelled by a runtime shutting down, or there was
    /// no tokio runtime to run it on.
    #[error("load aborted before it produced a value")]
    LoadAborted,
}

/// How a read was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Served {
    /// A fresh value, without any load (a hit).
    Fresh,
    /// The previous value, past its freshness, while a refresh runs or after one failed.
    Stale,
    /// The value of a load the read waited for: nothing was cached, or it was too old or
    /// invalidated (a miss).
    Loaded,
}

impl Served {
    /// `fresh`, `stale` or `loaded`.
    pub const fn name(self) -> &'static str {
        match self {
            Served::Fresh => "fresh",
            Served::Stale => "stale",
            Served::Loaded => "loaded",
        }
    }
}

/// A value read from the cache: a shared pointer to it, plus how old it is.
#[derive(Debug)]
pub struct Snapshot<T> {
    value: Arc<T>,
    /// Time since the load that produced the value began, when the read was served.
    age: Duration,
    /// The cache's freshness period.
    period: Duration,
    /// How the read was served.
    served: Served,
}

impl<T> Snapshot<T> {
    /// The shared value.
    pub fn value(&self) -> &Arc<T> {
        &self.value
    }

    /// Takes the shared value out.
    pub fn into_value(self) -> Arc<T> {
        self.value
    }

    /// How much longer this value is fresh; zero for a stale copy.
    pub fn fresh_for(&self) -> Duration {
        self.period.saturating_sub(self.age)
    }

    /// How long before the read the load that produced this value began (tokio time).
    pub fn age(&self) -> Duration {
        self.age
    }

    /// How the read was served: a fresh hit, a stale copy, or a load it waited for.
    pub fn served(&self) -> Served {
        self.served
    }
}

impl<T> Clone for Snapshot<T> {
    fn clone(&self) -> Self {
        Snapshot {
            value: Arc::clone(&self.value),
            age: self.age,
            period: self.period,
            served: self.served,
        }
    }
}

impl<T> Deref for Snapshot<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

type LoadResult<T, E> = Result<(Arc<T>, Instant), CacheError<E>>;

/// A cache for one value of type `T`, loaded by a fallible async loader with error `E`.
///
/// Cloning gives another handle to the same cache. Reads need a tokio runtime (loads are
/// spawned on it).
///
/// ```
/// use std::time::Duration;
/// use slot_booking::cache::{CacheConfig, SingleFlightCache};
///
/// # tokio_test::block_on(async {
/// let cache: SingleFlightCache<u32, String> = SingleFlightCache::new(CacheConfig {
///     fresh_for: Duration::from_secs(10),
///     serve_stale_for: Duration::from_secs(60),
/// });
/// let first = cache.get(|| async { Ok(7) }).await.unwrap();
/// // Fresh: the loader is not called, the same allocation is shared.
/// let again = cache.get(|| async { Ok(8) }).await.unwrap();
/// assert_eq!((*first, *again), (7, 7));
/// cache.invalidate();
/// assert_eq!(*cache.get(|| async { Ok(9) }).await.unwrap(), 9);
/// # });
/// ```
pub struct SingleFlightCache<T, E> {
    inner: Arc<Inner<T, E>>,
}

struct Inner<T, E> {
    config: CacheConfig,
    /// Bumped by `invalidate`; values and loads carry the generation they started in.
    generation: AtomicU64,
    state: Mutex<State<T, E>>,
}

struct State<T, E> {
    value: Option<Cached<T>>,
    inflight: Option<Inflight<T, E>>,
    next_load_id: u64,
}

struct Cached<T> {
    value: Arc<T>,
    /// When the load that produced it began: the data is at least this old.
    loaded_at: Instant,
    generation: u64,
}

struct Inflight<T, E> {
    id: u64,
    generation: u64,
    result: watch::Receiver<Option<LoadResult<T, E>>>,
}

impl<T, E> Clone for SingleFlightCache<T, E> {
    fn clone(&self) -> Self {
        SingleFlightCache {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T, E> fmt::Debug for SingleFlightCache<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SingleFlightCache")
            .field("config", &self.inner.config)
            .field("generation", &self.inner.generation.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

/// What a read decided while holding the lock.
enum Plan<T, E> {
    Serve(Snapshot<T>),
    Wait(watch::Receiver<Option<LoadResult<T, E>>>),
}

impl<T, E> SingleFlightCache<T, E>
where
    T: Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// An empty cache.
    pub fn new(config: CacheConfig) -> Self {
        SingleFlightCache {
            inner: Arc::new(Inner {
                config,
                generation: AtomicU64::new(0),
                state: Mutex::new(State {
                    value: None,
                    inflight: None,
                    next_load_id: 0,
                }),
            }),
        }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> CacheConfig {
        self.inner.config
    }

    /// Reads the value, calling `load` (at most once, and only if this read is the one that
    /// starts a load) when there is no fresh value.
    ///
    /// The future `load` returns is spawned as a task of its own: it runs to the end even if
    /// this read is dropped.
    pub async fn get<F, Fut>(&self, load: F) -> Result<Snapshot<T>, CacheError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        match self.plan(load) {
            Plan::Serve(snapshot) => Ok(snapshot),
            Plan::Wait(mut result) => {
                let outcome = match result.wait_for(Option::is_some).await {
                    Ok(done) => done.clone(),
                    // The load task's guard always sends before the sender goes away; this is
                    // only reachable if that guarantee is broken, and waiting on is not an option.
                    Err(_) => None,
                };
                match outcome {
                    Some(Ok((value, loaded_at))) => Ok(Snapshot {
                        value,
                        age: Instant::now().saturating_duration_since(loaded_at),
                        period: self.inner.config.fresh_for,
                        served: Served::Loaded,
                    }),
                    Some(Err(error)) => Err(error),
                    None => Err(CacheError::LoadAborted),
                }
            }
        }
    }

    /// Marks the current value and any load in flight as out of date. Synchronous and O(1):
    /// one atomic increment. Reads that start after this returns wait for a load that starts
    /// after it.
    pub fn invalidate(&self) {
        self.inner.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, State<T, E>> {
        // The state is only ever replaced whole, never left half-updated, so a poisoned lock
        // still holds consistent state.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn plan<F, Fut>(&self, load: F) -> Plan<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let config = self.inner.config;
        let state = self.lock();
        let generation = self.inner.generation.load(Ordering::SeqCst);
        let now = Instant::now();

        let mut stale = None;
        if let Some(cached) = state.value.as_ref().filter(|c| c.generation == generation) {
            let age = now.saturating_duration_since(cached.loaded_at);
            if age < config.fresh_for {
                return Plan::Serve(Snapshot {
                    value: Arc::clone(&cached.value),
                    age,
                    period: config.fresh_for,
                    served: Served::Fresh,
                });
            }
            if age < config.fresh_for.saturating_add(config.serve_stale_for) {
                stale = Some(Snapshot {
                    value: Arc::clone(&cached.value),
                    age,
                    period: config.fresh_for,
                    served: Served::Stale,
                });
            }
        }

        let joinable = state
            .inflight
            .as_ref()
            .filter(|inflight| inflight.generation == generation)
            .map(|inflight| inflight.result.clone());
        let result = match joinable {
            Some(result) => Some(result),
            None => self.start_load(state, generation, now, load),
        };
        match (stale, result) {
            (Some(snapshot), _) => Plan::Serve(snapshot),
            (None, Some(result)) => Plan::Wait(result),
            (None, None) => Plan::Wait(aborted()),
        }
    }

    /// Registers a new load for `generation` and spawns it. Takes the lock guard so the loader
    /// is called after the lock is released (it may itself read this cache).
    fn start_load<F, Fut>(
        &self,
        mut state: MutexGuard<'_, State<T, E>>,
        generation: u64,
        started: Instant,
        load: F,
    ) -> Option<watch::Receiver<Option<LoadResult<T, E>>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let id = state.next_load_id;
        state.next_load_id += 1;
        let (sender, receiver) = watch::channel(None);
        state.inflight = Some(Inflight {
            id,
            generation,
            result: receiver.clone(),
        });
        drop(state);

        // From here on the guard owns the outcome: if the loader panics (now or inside the
        // task) or the task is dropped, its `Drop` releases the waiters and the in-flight slot.
        let guard = LoadGuard {
            inner: Arc::clone(&self.inner),
            id,
            generation,
            started,
            sender: Some(sender),
        };
        let future = load();
        runtime.spawn(async move {
            let result = future.await;
            guard.finish(result);
        });
        Some(receiver)
    }
}

fn aborted<T, E>() -> watch::Receiver<Option<LoadResult<T, E>>> {
    watch::channel(Some(Err(CacheError::LoadAborted))).1
}

/// Owns one load's outcome; publishes it exactly once, on success, failure, panic or drop.
struct LoadGuard<T, E> {
    inner: Arc<Inner<T, E>>,
    id: u64,
    generation: u64,
    started: Instant,
    sender: Option<watch::Sender<Option<LoadResult<T, E>>>>,
}

impl<T, E> LoadGuard<T, E> {
    fn finish(mut self, result: Result<T, E>) {
        let outcome = result
            .map(|value| (Arc::new(value), self.started))
            .map_err(CacheError::Load);
        self.publish(outcome);
    }

    fn publish(&mut self, outcome: LoadResult<T, E>) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        {
            let mut state = self
                .inner
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Checked under the lock that readers take, so a read either sees the new value or
            // sees the invalidation that keeps it out.
            let current = self.inner.generation.load(Ordering::SeqCst);
            if let Ok((value, loaded_at)) = &outcome {
                if self.generation == current {
                    state.value = Some(Cached {
                        value: Arc::clone(value),
                        loaded_at: *loaded_at,
                        generation: self.generation,
                    });
                }
            }
            if state.inflight.as_ref().is_some_and(|i| i.id == self.id) {
                state.inflight = None;
            }
        }
        // Nobody waiting is fine: the value (if any) is already stored.
        let _ = sender.send(Some(outcome));
    }
}

impl<T, E> Drop for LoadGuard<T, E> {
    fn drop(&mut self) {
        self.publish(Err(CacheError::LoadAborted));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::Semaphore;
    use tokio_test::{assert_pending, assert_ready, task};

    const FRESH: Duration = Duration::from_secs(10);
    const STALE: Duration = Duration::from_secs(30);

    fn cache() -> SingleFlightCache<usize, &'static str> {
        SingleFlightCache::new(CacheConfig {
            fresh_for: FRESH,
            serve_stale_for: STALE,
        })
    }

    /// A loader whose loads are numbered from 1 and block until the test releases them.
    #[derive(Clone)]
    struct Loader {
        calls: Arc<AtomicUsize>,
        gate: Arc<Semaphore>,
    }

    impl Loader {
        fn new() -> Self {
            Loader {
                calls: Arc::new(AtomicUsize::new(0)),
                gate: Arc::new(Semaphore::new(0)),
            }
        }

        /// A loader that never blocks.
        fn open() -> Self {
            let loader = Loader::new();
            loader.gate.add_permits(Semaphore::MAX_PERMITS);
            loader
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }

        fn release(&self, loads: usize) {
            self.gate.add_permits(loads);
        }

        fn ok(&self) -> impl FnOnce() -> BoxedLoad + '_ {
            self.with(Ok)
        }

        fn failing(&self) -> impl FnOnce() -> BoxedLoad + '_ {
            self.with(|_| Err("store down"))
        }

        fn with(
            &self,
            outcome: impl FnOnce(usize) -> Result<usize, &'static str> + Send + 'static,
        ) -> impl FnOnce() -> BoxedLoad + '_ {
            move || {
                let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
                let gate = Arc::clone(&self.gate);
                Box::pin(async move {
                    gate.acquire().await.unwrap().forget();
                    outcome(n)
                })
            }
        }
    }

    type BoxedLoad =
        std::pin::Pin<Box<dyn Future<Output = Result<usize, &'static str>> + Send + 'static>>;

    /// Lets spawned load tasks run to completion under the paused clock.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn c1_fresh_hit_calls_no_loader_and_shares_the_value() {
        let cache = cache();
        let loader = Loader::open();
        let first = cache.get(loader.ok()).await.unwrap();
        tokio::time::advance(FRESH - Duration::from_millis(1)).await;
        let second = cache.get(loader.ok()).await.unwrap();
        assert_eq!(loader.calls(), 1);
        assert_eq!(
            (first.served(), second.served()),
            (Served::Loaded, Served::Fresh)
        );
        assert!(
            Arc::ptr_eq(first.value(), second.value()),
            "a hit copies nothing"
        );
        assert_eq!(second.fresh_for(), Duration::from_millis(1));
    }

    #[tokio::test(start_paused = true)]
    async fn c1_value_stops_being_fresh_exactly_at_the_period() {
        let cache = cache();
        let loader = Loader::open();
        cache.get(loader.ok()).await.unwrap();
        tokio::time::advance(FRESH).await;
        let stale = cache.get(loader.ok()).await.unwrap();
        assert_eq!(*stale, 1, "served stale");
        assert_eq!(stale.served(), Served::Stale);
        assert_eq!(stale.fresh_for(), Duration::ZERO);
        settle().await;
        assert_eq!(loader.calls(), 2, "a refresh started at the period's end");
        assert_eq!(*cache.get(loader.ok()).await.unwrap(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn c2_ten_thousand_concurrent_cold_reads_make_one_load() {
        let cache = cache();
        let loader = Loader::new();
        let waiting = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..10_000)
            .map(|_| {
                let cache = cache.clone();
                let loader = loader.clone();
                let waiting = Arc::clone(&waiting);
                tokio::spawn(async move {
                    let mut read = std::pin::pin!(cache.get(loader.ok()));
                    let mut counted = false;
                    let snapshot = std::future::poll_fn(|cx| {
                        let poll = read.as_mut().poll(cx);
                        if poll.is_pending() && !counted {
                            counted = true;
                            waiting.fetch_add(1, Ordering::SeqCst);
                        }
                        poll
                    })
                    .await;
                    snapshot.map(Snapshot::into_value)
                })
            })
            .collect();
        // Every reader is parked on the load before it is allowed to finish.
        while waiting.load(Ordering::SeqCst) < 10_000 {
            tokio::task::yield_now().await;
        }
        loader.release(1);
        let mut values = Vec::new();
        for reader in readers {
            values.push(reader.await.unwrap().unwrap());
        }
        assert_eq!(loader.calls(), 1);
        assert!(values
            .iter()
            .all(|v| Arc::ptr_eq(v, &values[0]) && **v == 1));
    }

    #[tokio::test(start_paused = true)]
    async fn c2_readers_of_an_invalidated_value_share_one_load() {
        let cache = cache();
        let loader = Loader::open();
        cache.get(loader.ok()).await.unwrap();
        cache.invalidate();
        let gated = Loader::new();
        let mut readers: Vec<_> = (0..100)
            .map(|_| task::spawn(cache.get(gated.ok())))
            .collect();
        for reader in &mut readers {
            assert_pending!(reader.poll());
        }
        assert_eq!(gated.calls(), 1);
        gated.release(1);
        settle().await;
        for reader in &mut readers {
            assert!(reader.is_woken());
            assert_eq!(*assert_ready!(reader.poll()).unwrap(), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn c3_stale_copy_is_served_at_once_while_one_refresh_runs() {
        let cache = cache();
        let loader = Loader::new();
        loader.release(1);
        cache.get(loader.ok()).await.unwrap();
        tokio::time::advance(FRESH + Duration::from_secs(1)).await;
        for _ in 0..50 {
            let mut read = task::spawn(cache.get(loader.ok()));
            let snapshot = assert_ready!(read.poll()).unwrap();
            assert_eq!(*snapshot, 1, "stale copy served without waiting");
        }
        assert_eq!(loader.calls(), 2, "one refresh for all stale readers");
        loader.release(1);
        settle().await;
        let fresh = cache.get(loader.ok()).await.unwrap();
        assert_eq!(*fresh, 2);
        assert_eq!(
            fresh.fresh_for(),
            FRESH,
            "freshness counts from the refresh's start"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn c3_refresh_finishes_even_if_the_reader_that_started_it_is_dropped() {
        let cache = cache();
        let loader = Loader::new();
        let mut first = task::spawn(cache.get(loader.ok()));
        assert_pending!(first.poll());
        drop(first);
        loader.release(1);
        settle().await;
        assert_eq!(*cache.get(loader.ok()).await.unwrap(), 1);
        assert_eq!(loader.calls(), 1, "the dropped reader's load was stored");
    }

    #[tokio::test(start_paused = true)]
    async fn c3_stale_copy_is_not_served_past_its_bound() {
        let cache = cache();
        let loader = Loader::new();
        loader.release(1);
        cache.get(loader.ok()).await.unwrap();
        tokio::time::advance(FRESH + STALE).await;
        let mut read = task::spawn(cache.get(loader.ok()));
        assert_pending!(read.poll(), "too old to serve: the reader waits");
        loader.release(1);
        settle().await;
        assert_eq!(*assert_ready!(read.poll()).unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn c4_invalidate_makes_the_next_read_load() {
        let cache = cache();
        let loader = Loader::open();
        cache.get(loader.ok()).await.unwrap();
        cache.invalidate();
        assert_eq!(*cache.get(loader.ok()).await.unwrap(), 2);
        assert_eq!(*cache.get(loader.ok()).await.unwrap(), 2);
        assert_eq!(loader.calls(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn c4_a_read_after_invalidate_never_gets_a_load_that_began_before_it() {
        let cache = cache();
        let before = Loader::new();
        let mut early = task::spawn(cache.get(before.ok()));
        assert_pending!(early.poll());

        cache.invalidate();
        let after = Loader::new();
        let mut late = task::spawn(cache.get(after.ok()));
        assert_pending!(late.poll());
        assert_eq!(after.calls(), 1, "the late read started its own load");

        before.release(1);
        settle().await;
        assert_eq!(
            *assert_ready!(early.poll()).unwrap(),
            1,
            "the early read may take the early load"
        );
        assert_pending!(late.poll(), "the late read must not");

        after.release(1);
        settle().await;
        assert_eq!(*assert_ready!(late.poll()).unwrap(), 1);
        // `after` numbers its own loads: value 1 of `after`, the early value was never stored.
        let loader = Loader::open();
        cache.get(loader.ok()).await.unwrap();
        assert_eq!(loader.calls(), 0, "the late load is the fresh value");
    }

    #[tokio::test(start_paused = true)]
    async fn c4_a_refresh_started_before_invalidate_is_never_stored() {
        let cache = cache();
        let loader = Loader::new();
        loader.release(1);
        cache.get(loader.ok()).await.unwrap();
        tokio::time::advance(FRESH).await;
        assert_eq!(
            *cache.get(loader.ok()).await.unwrap(),
            1,
            "stale, refresh #2 running"
        );
        cache.invalidate();
        loader.release(1);
        settle().await;
        let mut read = task::spawn(cache.get(loader.ok()));
        assert_pending!(
            read.poll(),
            "refresh #2 began before invalidate: not served"
        );
        assert_eq!(loader.calls(), 3);
        loader.release(1);
        settle().await;
        assert_eq!(*assert_ready!(read.poll()).unwrap(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn c5_errors_are_not_cached_and_the_next_read_retries() {
        let cache = cache();
        let loader = Loader::open();
        assert_eq!(
            cache.get(loader.failing()).await.unwrap_err(),
            CacheError::Load("store down")
        );
        assert_eq!(*cache.get(loader.ok()).await.unwrap(), 2);
        assert_eq!(loader.calls(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn c5_stale_copy_is_served_while_refreshes_fail_then_the_error_surfaces() {
        let cache = cache();
        let loader = Loader::open();
        cache.get(loader.ok()).await.unwrap();
        tokio::time::advance(FRESH).await;
        for _ in 0..3 {
            assert_eq!(*cache.get(loader.failing()).await.unwrap(), 1);
            settle().await;
            tokio::time::advance(Duration::from_secs(5)).await;
        }
        assert_eq!(loader.calls(), 4, "every read after a failure tries again");
        tokio::time::advance(STALE).await;
        assert_eq!(
            cache.get(loader.failing()).await.unwrap_err(),
            CacheError::Load("store down"),
            "past the bound the error reaches the reader"
        );
    }

    fn loader_bug() -> Result<usize, &'static str> {
        panic!("loader bug")
    }

    #[tokio::test(start_paused = true)]
    async fn c6_a_panicking_loader_releases_every_waiter_and_the_next_read_retries() {
        let cache = cache();
        let mut waiters: Vec<_> = (0..10)
            .map(|_| {
                task::spawn(cache.get(|| async {
                    tokio::task::yield_now().await;
                    loader_bug()
                }))
            })
            .collect();
        for waiter in &mut waiters {
            assert_pending!(waiter.poll());
        }
        settle().await;
        for waiter in &mut waiters {
            assert_eq!(
                assert_ready!(waiter.poll()).unwrap_err(),
                CacheError::LoadAborted
            );
        }
        let loader = Loader::open();
        assert_eq!(*cache.get(loader.ok()).await.unwrap(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn c6_a_loader_that_panics_before_returning_a_future_does_not_stick() {
        let cache = cache();
        let cache2 = cache.clone();
        let panicked = tokio::spawn(async move {
            cache2
                .get(|| -> BoxedLoad { panic!("loader constructor bug") })
                .await
        })
        .await;
        assert!(panicked.unwrap_err().is_panic());
        let loader = Loader::open();
        assert_eq!(*cache.get(loader.ok()).await.unwrap(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn c6_dropping_every_reader_leaves_the_cache_usable() {
        let cache = cache();
        let loader = Loader::new();
        let readers: Vec<_> = (0..10)
            .map(|_| task::spawn(cache.get(loader.ok())))
            .collect();
        for mut reader in readers {
            assert_pending!(reader.poll());
        }
        let mut late = task::spawn(cache.get(loader.ok()));
        assert_pending!(late.poll());
        assert_eq!(
            loader.calls(),
            1,
            "the late reader joined the orphaned load"
        );
        loader.release(1);
        settle().await;
        assert_eq!(*assert_ready!(late.poll()).unwrap(), 1);
    }

    #[test]
    fn without_a_runtime_a_read_fails_instead_of_panicking() {
        let cache = cache();
        let loader = Loader::open();
        let mut read = task::spawn(cache.get(loader.ok()));
        assert_eq!(
            assert_ready!(read.poll()).unwrap_err(),
            CacheError::LoadAborted
        );
        assert_eq!(loader.calls(), 0);
    }
}
