//! [`BookingEngine`]: the booking rules on top of any [`Store`].

use std::fmt;
use std::future::Future;
use std::ops::{Deref, Range};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use serde::ser::{Serialize, Serializer};

use crate::cache::{CacheConfig, CacheError, SingleFlightCache};
use crate::clock::{Clock, SystemClock};
use crate::error::BookingError;
use crate::model::{
    AvailabilityEntry, AvailabilityQuery, Hold, HoldId, HoldStatus, IdempotencyKey, NewSlot, Slot,
    SlotId, Timestamp,
};
use crate::store::{Decided, HoldOutcome, HoldRequest, Store, StoreError, Transition};

/// Default time a fresh availability snapshot is served from the cache.
pub const DEFAULT_CACHE_PERIOD: Duration = Duration::from_secs(10);
/// Default lifetime of an unconfirmed hold.
pub const DEFAULT_HOLD_TTL: Duration = Duration::from_secs(5 * 60);
/// Longest hold lifetime the builder accepts; longer values are clamped to it.
pub const MAX_HOLD_TTL: Duration = Duration::from_secs(10 * 366 * 24 * 60 * 60);

/// The booking rules: validation, hold lifetimes, outcome mapping and the availability cache,
/// on top of a [`Store`] that does each operation atomically.
///
/// Cloning is cheap and gives a handle to the same engine (same store, same cache).
///
/// ```
/// use chrono::{Duration, Utc};
/// use slot_booking::{memory::MemoryStore, AvailabilityQuery, BookingEngine, HoldStatus, NewSlot};
///
/// # tokio_test::block_on(async {
/// let engine = BookingEngine::new(MemoryStore::new());
/// let start = Utc::now() + Duration::days(1);
/// let slot = engine
///     .create_slot(NewSlot::new(start, start + Duration::hours(1), 2))
///     .await?;
///
/// let placed = engine.hold(slot.slot_id, "order-7").await?;
/// assert_eq!(placed.hold.status, HoldStatus::Held);
/// let booked = engine.confirm(placed.hold.hold_id).await?;
/// assert_eq!(booked.status, HoldStatus::Confirmed);
///
/// let listing = engine.availability(AvailabilityQuery::all()).await?;
/// assert_eq!(listing[0].remaining, 1);
/// # Ok::<(), slot_booking::BookingError>(())
/// # }).unwrap();
/// ```
pub struct BookingEngine<S> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    store: Arc<S>,
    cache: SingleFlightCache<AvailabilitySnapshot, StoreError>,
    clock: Arc<dyn Clock>,
    hold_ttl: chrono::Duration,
}

impl<S> Clone for BookingEngine<S> {
    fn clone(&self) -> Self {
        BookingEngine {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> fmt::Debug for BookingEngine<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BookingEngine")
            .field("cache", &self.inner.cache)
            .field("clock", &self.inner.clock)
            .field("hold_ttl", &self.inner.hold_ttl)
            .finish_non_exhaustive()
    }
}

/// Configures a [`BookingEngine`]; start with [`BookingEngine::builder`].
#[derive(Debug)]
pub struct EngineBuilder<S> {
    store: S,
    cache_period: Duration,
    max_age: Option<Duration>,
    hold_ttl: Duration,
    clock: Arc<dyn Clock>,
}

impl<S: Store> EngineBuilder<S> {
    /// How long an availability snapshot is fresh (default 10 s): served with no store read.
    /// Zero disables caching of fresh values; reads still share one load in flight.
    pub fn cache_period(mut self, period: Duration) -> Self {
        self.cache_period = period;
        self
    }

    /// The oldest availability the engine ever serves (default: twice the cache period).
    ///
    /// Between the cache period and this bound a reader gets the previous snapshot at once
    /// while one refresh runs (or after a refresh failed); past it, readers wait for a fresh
    /// read. A bound below the cache period shortens the period to it. Measured from the
    /// moment the store read began, so availability is never older than this.
    pub fn max_age(mut self, bound: Duration) -> Self {
        self.max_age = Some(bound);
        self
    }

    /// How long a hold reserves its unit before it must be confirmed (default 5 minutes;
    /// at least one microsecond, at most [`MAX_HOLD_TTL`]).
    pub fn hold_ttl(mut self, ttl: Duration) -> Self {
        self.hold_ttl = ttl.clamp(Duration::from_micros(1), MAX_HOLD_TTL);
        self
    }

    /// Where the engine reads the time (default [`SystemClock`]).
    ///
    /// In tests a [`ManualClock`](crate::ManualClock) drives hold expiry exactly. The
    /// availability cache ages by tokio's clock, not this one: with a manual clock, also set
    /// `cache_period(Duration::ZERO)` (every read goes to the store), or advance tokio's paused
    /// clock (`tokio::time::advance`) along with it. The crate docs show a complete example.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the engine.
    pub fn build(self) -> BookingEngine<S> {
        // Microsecond-whole and within MAX_HOLD_TTL, so the conversion cannot fail.
        let micros = i64::try_from(self.hold_ttl.as_micros()).unwrap_or(i64::MAX);
        let max_age = self
            .max_age
            .unwrap_or_else(|| self.cache_period.saturating_mul(2));
        let fresh_for = self.cache_period.min(max_age);
        let cache = CacheConfig {
            fresh_for,
            serve_stale_for: max_age - fresh_for,
        };
        BookingEngine {
            inner: Arc::new(Inner {
                store: Arc::new(self.store),
                cache: SingleFlightCache::new(cache),
                clock: self.clock,
                hold_ttl: chrono::Duration::microseconds(micros),
            }),
        }
    }
}

/// A hold returned by [`BookingEngine::hold`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldPlaced {
    /// The hold, its status resolved at the time of the call.
    pub hold: Hold,
    /// True when the idempotency key had already placed this hold: nothing new was reserved.
    pub replayed: bool,
}

/// One store read of availability, as the cache shares it between readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvailabilitySnapshot {
    /// The engine's clock when the read was made: the `now` the store was asked about.
    pub read_at: Timestamp,
    /// Every slot that had not started at `read_at`, by `starts_at` then `slot_id`.
    pub entries: Vec<AvailabilityEntry>,
}

/// An availability listing: a window onto the shared cached snapshot (no entries are copied).
///
/// Dereferences to `[AvailabilityEntry]` and serializes as a JSON array.
#[derive(Clone)]
pub struct Availability {
    snapshot: Arc<AvailabilitySnapshot>,
    range: Range<usize>,
    fresh_for: Duration,
    age: Duration,
}

impl Availability {
    /// The entries, ordered by `starts_at` then `slot_id`.
    pub fn entries(&self) -> &[AvailabilityEntry] {
        &self.snapshot.entries[self.range.clone()]
    }

    /// How much longer the underlying snapshot is fresh (for `Cache-Control: max-age`).
    pub fn fresh_for(&self) -> Duration {
        self.fresh_for
    }

    /// How long before this read the store read behind it began: never more than the engine's
    /// [`max_age`](EngineBuilder::max_age).
    pub fn age(&self) -> Duration {
        self.age
    }

    /// The whole snapshot this listing is a window of.
    pub fn snapshot(&self) -> &Arc<AvailabilitySnapshot> {
        &self.snapshot
    }
}

impl Deref for Availability {
    type Target = [AvailabilityEntry];

    fn deref(&self) -> &[AvailabilityEntry] {
        self.entries()
    }
}

impl fmt::Debug for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Availability")
            .field("entries", &self.entries())
            .field("fresh_for", &self.fresh_for)
            .field("age", &self.age)
            .finish()
    }
}

impl Serialize for Availability {
    fn serialize<Ser: Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        serializer.collect_seq(self.entries())
    }
}

impl<S: Store> Inner<S> {
    /// Invalidates the cached availability once a transition has committed (R3): after the
    /// store call returned, never before.
    fn invalidate_if_applied(
        &self,
        transition: Result<Decided<Transition>, StoreError>,
    ) -> Result<Decided<Transition>, StoreError> {
        if let Ok(Decided {
            outcome: Transition::Applied(_),
            ..
        }) = &transition
        {
            self.cache.invalidate();
        }
        transition
    }
}

/// Turns a store transition into the caller's answer, resolving statuses at the instant the
/// store decided at. `target` is the status the operation moves a hold to; a hold already
/// there is the idempotent repeat.
fn settle(
    transition: Decided<Transition>,
    hold_id: HoldId,
    target: HoldStatus,
) -> Result<Hold, BookingError> {
    let now = transition.at;
    match transition.outcome {
        Transition::Applied(hold) => Ok(hold.at(now)),
        Transition::NotFound => Err(BookingError::HoldNotFound { hold_id }),
        Transition::NotApplied(hold) => match hold.status_at(now) {
            status if status == target => Ok(hold.at(now)),
            HoldStatus::Cancelled => Err(BookingError::HoldCancelled { hold_id }),
            HoldStatus::Expired => Err(BookingError::HoldExpired { hold_id }),
            status => Err(BookingError::Store(StoreError::failed(format!(
                "store refused to move hold {hold_id} from {status} to {target}"
            )))),
        },
    }
}

/// Awaits a store call, turning a panic inside the store into a [`StoreError`]: a buggy store
/// must not take the caller's task down with it, and the engine's API never panics.
async fn guarded<T>(call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    AssertUnwindSafe(call)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(StoreError::failed("the store panicked")))
}

/// Runs a store write so that dropping the caller's future never cancels it half way: the
/// write and the cache invalidation after its commit (R3) always run to the end, as if only the
/// answer had been lost (the idempotency key lets a client ask again). A panic in the store
/// becomes a [`StoreError`].
///
/// The write is polled once in place: a store that finishes without waiting (the memory store)
/// has no await point a caller could be dropped at, and pays no task. One that has to wait is
/// moved to a task of its own, which the runtime polls again (with a real waker) at once.
/// Outside a tokio runtime the write runs inline.
async fn detached<T: Send + 'static>(
    write: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return guarded(write).await;
    };
    let mut write = Box::pin(write);
    let first = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut context = Context::from_waker(futures::task::noop_waker_ref());
        write.as_mut().poll(&mut context)
    }));
    match first {
        Ok(Poll::Ready(result)) => return result,
        Ok(Poll::Pending) => {}
        Err(_) => return Err(StoreError::failed("the store panicked")),
    }
    runtime.spawn(write).await.unwrap_or_else(|error| {
        Err(if error.is_panic() {
            StoreError::failed("the store panicked")
        } else {
            // Whether the write committed is unknown; the same call may work once a runtime
            // runs again (the idempotency key makes a retried hold safe).
            StoreError::unavailable("the store call was cancelled by a runtime shutting down")
        })
    })
}

/// The part of a snapshot (sorted by `starts_at`) a reader at `now` asking `query` may see.
fn window(
    entries: &[AvailabilityEntry],
    now: Timestamp,
    query: &AvailabilityQuery,
) -> Range<usize> {
    // The snapshot was taken up to one cache period ago: drop slots that have started since.
    // Usually none has, and the first entry says so without a search.
    let mut start = match entries.first() {
        Some(first) if first.starts_at <= now => entries.partition_point(|e| e.starts_at <= now),
        _ => 0,
    };
    if let Some(from) = query.from {
        start = start.max(entries.partition_point(|e| e.starts_at < from));
    }
    let end = match query.to {
        Some(to) => entries.partition_point(|e| e.starts_at < to),
        None => entries.len(),
    };
    start..end.max(start)
}

impl<S: Store> BookingEngine<S> {
    /// An engine with the default configuration (10 s cache, 5 minute holds, system clock).
    pub fn new(store: S) -> Self {
        Self::builder(store).build()
    }

    /// Starts configuring an engine.
    pub fn builder(store: S) -> EngineBuilder<S> {
        EngineBuilder {
            store,
            cache_period: DEFAULT_CACHE_PERIOD,
            max_age: None,
            hold_ttl: DEFAULT_HOLD_TTL,
            clock: Arc::new(SystemClock),
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The engine's clock.
    pub fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    /// How long holds last.
    pub fn hold_ttl(&self) -> chrono::Duration {
        self.inner.hold_ttl
    }

    /// Drops the cached availability so the next read loads it again (the engine does this
    /// itself after confirm, cancel and create_slot; call it after changing the store behind
    /// the engine's back).
    pub fn invalidate_availability(&self) {
        self.inner.cache.invalidate();
    }

    /// Slots that have not started, with the units a new hold could take, narrowed by
    /// `query`. Served from the single-flight cache: fresh for the cache period, then stale
    /// while one refresh runs. Any number of distinct queries share one store read.
    ///
    /// Availability is never older than the engine's [`max_age`](EngineBuilder::max_age):
    /// 20 seconds with the defaults (twice the 10 second cache period). A confirm, cancel or
    /// slot change made through this engine shows at once; holds may lag by up to that bound
    /// (the store's conditional decrement, not this listing, decides whether a hold succeeds).
    pub async fn availability(
        &self,
        query: AvailabilityQuery,
    ) -> Result<Availability, BookingError> {
        if let (Some(from), Some(to)) = (query.from, query.to) {
            if from > to {
                return Err(BookingError::InvalidQuery);
            }
        }
        // The loader takes its handles only when a load really starts: a hit clones nothing.
        // It reads the clock when the cache starts the load (after the cache noted the load's
        // start), so `read_at + age` never runs behind the clock.
        let load = || {
            let store = Arc::clone(&self.inner.store);
            let read_at = self.inner.clock.now();
            async move {
                let read = guarded(store.availability(read_at)).await?;
                Ok(AvailabilitySnapshot {
                    read_at: read.at,
                    entries: read.outcome,
                })
            }
        };
        let snapshot = self
            .inner
            .cache
            .get(load)
            .await
            .map_err(|error| match error {
                CacheError::Load(error) => BookingError::Store(error),
                CacheError::LoadAborted => BookingError::Store(StoreError::failed(
                    "the availability load panicked or was cancelled",
                )),
            })?;
        // A wall clock can answer from the snapshot's read time and age without a second
        // clock read; a manual clock is read.
        let now = self
            .inner
            .clock
            .now_after(snapshot.value().read_at, snapshot.age());
        let fresh_for = snapshot.fresh_for();
        let age = snapshot.age();
        let snapshot = snapshot.into_value();
        Ok(Availability {
            range: window(&snapshot.entries, now, &query),
            snapshot,
            fresh_for,
            age,
        })
    }

    /// Places a hold on a unit of `slot_id` for the engine's hold lifetime.
    ///
    /// Idempotent by `key`: calling again with the same key and slot returns the same hold in
    /// its current state with `replayed: true`, reserving nothing more.
    pub async fn hold(&self, slot_id: SlotId, key: &str) -> Result<HoldPlaced, BookingError> {
        let key = IdempotencyKey::new(key)?;
        let now = self.inner.clock.now();
        let expires_at = now
            .checked_add_signed(self.inner.hold_ttl)
            .ok_or_else(|| StoreError::failed("the hold's expiry is past the end of time"))?;
        let inner = Arc::clone(&self.inner);
        let outcome = detached(async move {
            let request = HoldRequest {
                slot_id,
                key: &key,
                now,
                expires_at,
            };
            inner.store.create_hold(request).await
        })
        .await?;
        let now = outcome.at;
        match outcome.outcome {
            HoldOutcome::Created(hold) => Ok(HoldPlaced {
                hold: hold.at(now),
                replayed: false,
            }),
            HoldOutcome::Replayed(hold) => Ok(HoldPlaced {
                hold: hold.at(now),
                replayed: true,
            }),
            HoldOutcome::KeyReused(hold) => Err(BookingError::IdempotencyKeyReused {
                slot_id,
                existing_hold_id: hold.hold_id,
                existing_slot_id: hold.slot_id,
            }),
            HoldOutcome::SoldOut => Err(BookingError::SoldOut { slot_id }),
            HoldOutcome::SlotNotFound => Err(BookingError::SlotNotFound { slot_id }),
            HoldOutcome::SlotClosed => Err(BookingError::SlotClosed { slot_id }),
        }
    }

    /// Confirms an active hold. Confirming a confirmed hold returns it unchanged.
    pub async fn confirm(&self, hold_id: HoldId) -> Result<Hold, BookingError> {
        let now = self.inner.clock.now();
        let inner = Arc::clone(&self.inner);
        let transition = detached(async move {
            inner.invalidate_if_applied(inner.store.confirm_hold(hold_id, now).await)
        })
        .await?;
        settle(transition, hold_id, HoldStatus::Confirmed)
    }

    /// Cancels an active or confirmed hold, giving its unit back. Cancelling a cancelled hold
    /// returns it unchanged.
    pub async fn cancel(&self, hold_id: HoldId) -> Result<Hold, BookingError> {
        let now = self.inner.clock.now();
        let inner = Arc::clone(&self.inner);
        let transition = detached(async move {
            inner.invalidate_if_applied(inner.store.cancel_hold(hold_id, now).await)
        })
        .await?;
        settle(transition, hold_id, HoldStatus::Cancelled)
    }

    /// Reads a hold, its status resolved at the current time.
    pub async fn get_hold(&self, hold_id: HoldId) -> Result<Hold, BookingError> {
        let now = self.inner.clock.now();
        let read = guarded(self.inner.store.get_hold(hold_id, now)).await?;
        match read.outcome {
            Some(hold) => Ok(hold.at(read.at)),
            None => Err(BookingError::HoldNotFound { hold_id }),
        }
    }

    /// Validates and stores a new slot with all its capacity free.
    pub async fn create_slot(&self, slot: NewSlot) -> Result<Slot, BookingError> {
        let slot = NewSlot::new(slot.starts_at, slot.ends_at, slot.capacity);
        slot.validate()?;
        let inner = Arc::clone(&self.inner);
        let created = detached(async move {
            let created = inner.store.create_slot(&slot).await?;
            inner.cache.invalidate();
            Ok(created)
        })
        .await?;
        Ok(created)
    }
}
