use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_test::{assert_pending, assert_ready, task};

use super::{CacheConfig, CacheError, Patched, Served, SingleFlightCache, Snapshot};

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

    /// A loader whose first `loads` loads run at once; later ones block until released.
    fn letting_through(loads: usize) -> Self {
        let loader = Loader::new();
        loader.release(loads);
        loader
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

/// Lets one load of `loader` through, then lets it and the readers it wakes run.
async fn finish_load(loader: &Loader) {
    loader.release(1);
    settle().await;
}

/// A read of `cache` that starts or joins a load of `loader`, polled once: it waits.
fn waiting_read<'a>(
    cache: &'a SingleFlightCache<usize, &'static str>,
    loader: &'a Loader,
) -> task::Spawn<impl Future<Output = Result<Snapshot<usize>, CacheError<&'static str>>> + 'a> {
    let mut read = task::spawn(cache.get(loader.ok()));
    assert_pending!(read.poll());
    read
}

/// A new cache holding `loader`'s next load (which the loader must let through).
async fn cache_with(loader: &Loader) -> SingleFlightCache<usize, &'static str> {
    let cache = cache();
    cache.get(loader.ok()).await.unwrap();
    cache
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
    let loader = Loader::open();
    let cache = cache_with(&loader).await;
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
    let loader = Loader::open();
    let cache = cache_with(&loader).await;
    cache.invalidate();
    let gated = Loader::new();
    let mut readers: Vec<_> = (0..100)
        .map(|_| task::spawn(cache.get(gated.ok())))
        .collect();
    for reader in &mut readers {
        assert_pending!(reader.poll());
    }
    assert_eq!(gated.calls(), 1);
    finish_load(&gated).await;
    for reader in &mut readers {
        assert!(reader.is_woken());
        assert_eq!(*assert_ready!(reader.poll()).unwrap(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn c3_stale_copy_is_served_at_once_while_one_refresh_runs() {
    let loader = Loader::letting_through(1);
    let cache = cache_with(&loader).await;
    tokio::time::advance(FRESH + Duration::from_secs(1)).await;
    for _ in 0..50 {
        let mut read = task::spawn(cache.get(loader.ok()));
        let snapshot = assert_ready!(read.poll()).unwrap();
        assert_eq!(*snapshot, 1, "stale copy served without waiting");
    }
    assert_eq!(loader.calls(), 2, "one refresh for all stale readers");
    finish_load(&loader).await;
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
    let first = waiting_read(&cache, &loader);
    drop(first);
    finish_load(&loader).await;
    assert_eq!(*cache.get(loader.ok()).await.unwrap(), 1);
    assert_eq!(loader.calls(), 1, "the dropped reader's load was stored");
}

#[tokio::test(start_paused = true)]
async fn c3_stale_copy_is_not_served_past_its_bound() {
    let loader = Loader::letting_through(1);
    let cache = cache_with(&loader).await;
    tokio::time::advance(FRESH + STALE).await;
    let mut read = task::spawn(cache.get(loader.ok()));
    assert_pending!(read.poll(), "too old to serve: the reader waits");
    finish_load(&loader).await;
    assert_eq!(*assert_ready!(read.poll()).unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn c4_invalidate_makes_the_next_read_load() {
    let loader = Loader::open();
    let cache = cache_with(&loader).await;
    cache.invalidate();
    assert_eq!(*cache.get(loader.ok()).await.unwrap(), 2);
    assert_eq!(*cache.get(loader.ok()).await.unwrap(), 2);
    assert_eq!(loader.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn c4_a_read_after_invalidate_never_gets_a_load_that_began_before_it() {
    let cache = cache();
    let before = Loader::new();
    let mut early = waiting_read(&cache, &before);

    cache.invalidate();
    let after = Loader::new();
    let mut late = waiting_read(&cache, &after);
    assert_eq!(after.calls(), 1, "the late read started its own load");

    finish_load(&before).await;
    assert_eq!(
        *assert_ready!(early.poll()).unwrap(),
        1,
        "the early read may take the early load"
    );
    assert_pending!(late.poll(), "the late read must not");

    finish_load(&after).await;
    assert_eq!(*assert_ready!(late.poll()).unwrap(), 1);
    // `after` numbers its own loads: value 1 of `after`, the early value was never stored.
    let loader = Loader::open();
    cache.get(loader.ok()).await.unwrap();
    assert_eq!(loader.calls(), 0, "the late load is the fresh value");
}

#[tokio::test(start_paused = true)]
async fn c4_a_refresh_started_before_invalidate_is_never_stored() {
    let loader = Loader::letting_through(1);
    let cache = cache_with(&loader).await;
    tokio::time::advance(FRESH).await;
    assert_eq!(
        *cache.get(loader.ok()).await.unwrap(),
        1,
        "stale, refresh #2 running"
    );
    cache.invalidate();
    finish_load(&loader).await;
    let mut read = task::spawn(cache.get(loader.ok()));
    assert_pending!(
        read.poll(),
        "refresh #2 began before invalidate: not served"
    );
    assert_eq!(loader.calls(), 3);
    finish_load(&loader).await;
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
    let loader = Loader::open();
    let cache = cache_with(&loader).await;
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
    let mut late = waiting_read(&cache, &loader);
    assert_eq!(
        loader.calls(),
        1,
        "the late reader joined the orphaned load"
    );
    finish_load(&loader).await;
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

#[tokio::test(start_paused = true)]
async fn c7_a_patch_changes_the_value_without_a_load_and_keeps_its_age() {
    let loader = Loader::open();
    let cache = cache();
    assert_eq!(cache.patch(|v| *v += 100), Patched::NothingCached);
    cache.get(loader.ok()).await.unwrap();
    tokio::time::advance(Duration::from_secs(4)).await;
    assert_eq!(cache.patch(|v| *v += 100), Patched::Patched);
    let read = cache.get(loader.ok()).await.unwrap();
    assert_eq!((*read, loader.calls()), (101, 1), "patched, not loaded");
    assert_eq!(
        read.age(),
        Duration::from_secs(4),
        "a patch keeps the value's age"
    );
    tokio::time::advance(FRESH).await;
    let stale = cache.get(loader.ok()).await.unwrap();
    assert_eq!(stale.served(), Served::Stale);
    assert_eq!(*stale, 101);
}

#[tokio::test(start_paused = true)]
async fn c7_a_patch_during_a_load_invalidates_it_instead() {
    let cache = cache();
    let gated = Loader::new();
    let mut first = waiting_read(&cache, &gated);
    // The load in flight may have read before the change: it cannot be patched.
    assert_eq!(cache.patch(|v| *v += 100), Patched::Invalidated);
    finish_load(&gated).await;
    assert_eq!(
        *assert_ready!(first.poll()).unwrap(),
        1,
        "its reader still gets it"
    );
    let mut second = waiting_read(&cache, &gated);
    assert_eq!(gated.calls(), 2, "the next read loads again");
    finish_load(&gated).await;
    assert_eq!(*assert_ready!(second.poll()).unwrap(), 2);
}
