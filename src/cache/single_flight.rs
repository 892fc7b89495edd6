//! The single-flight core: the shared state, the read's plan, and the load task whose guard
//! publishes each load's outcome exactly once.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;

use super::{CacheConfig, CacheError, Served, Snapshot};

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

    /// Changes the cached value in place, keeping its age: for a change this process has just
    /// committed and knows exactly, so readers see it at once without a load. Copy on write:
    /// when no reader holds the value it is changed where it is (no copy), else a copy is
    /// changed and replaces it, the readers keeping theirs. A load in flight may have read
    /// before that change, so it cannot be patched: the cache is invalidated instead (the next
    /// read waits for a load that sees the change). Nothing cached, nothing to patch.
    pub fn patch(&self, change: impl FnOnce(&mut T)) -> Patched
    where
        T: Clone,
    {
        let mut state = self.lock();
        let generation = self.inner.generation.load(Ordering::SeqCst);
        if state
            .inflight
            .as_ref()
            .is_some_and(|inflight| inflight.generation == generation)
        {
            drop(state);
            self.invalidate();
            return Patched::Invalidated;
        }
        match state.value.as_mut().filter(|c| c.generation == generation) {
            Some(cached) => {
                change(Arc::make_mut(&mut cached.value));
                Patched::Patched
            }
            None => Patched::NothingCached,
        }
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

/// What [`SingleFlightCache::patch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patched {
    /// The cached value now includes the change.
    Patched,
    /// A load was in flight, so the cache was invalidated instead.
    Invalidated,
    /// No current value was cached: the next read loads one, which sees the change.
    NothingCached,
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
