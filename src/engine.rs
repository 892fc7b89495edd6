//! [`BookingEngine`]: the booking rules on top of any store, its configuration, and what its
//! operations share (validation, running a write to its end, mapping outcomes to errors).
//! The operations themselves: the hold lifecycle in [`holds`](crate::holds), slot
//! administration in [`admin`](crate::admin), events in [`events`](crate::events).

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use crate::availability::{window, Availability, AvailabilitySnapshot};
use crate::cache::{CacheConfig, CacheError, SingleFlightCache};
use crate::changes::Invalidator;
use crate::clock::{Clock, SystemClock};
use crate::error::BookingError;
use crate::model::{
    truncate_to_micros, AvailabilityQuery, Hold, IdempotencyKey, NewSlot, OwnerId, SlotId,
    Timestamp, MAX_PAGE_SIZE,
};
use crate::observe::{Op, Operation};
use crate::store::{Decided, HoldRequest, HoldStore, StoreError, Transition};
use futures::FutureExt;

mod finish;

pub(crate) use finish::detached;

/// Default time a fresh availability snapshot is served from the cache.
pub const DEFAULT_CACHE_PERIOD: Duration = Duration::from_secs(10);
/// Default lifetime of an unconfirmed hold.
pub const DEFAULT_HOLD_TTL: Duration = Duration::from_secs(5 * 60);
/// Longest hold lifetime the builder accepts; longer values are clamped to it.
pub const MAX_HOLD_TTL: Duration = Duration::from_secs(10 * 366 * 24 * 60 * 60);
/// Default shortest lifetime a request may ask for.
pub const DEFAULT_MIN_REQUESTED_TTL: Duration = Duration::from_secs(1);
/// Default longest lifetime a request may ask for.
pub const DEFAULT_MAX_REQUESTED_TTL: Duration = Duration::from_secs(60 * 60);
/// Default longest total life of a hold, from its creation, however often it is renewed.
pub const DEFAULT_MAX_HOLD_LIFE: Duration = Duration::from_secs(2 * 60 * 60);

/// The booking rules: validation, hold lifetimes, outcome mapping and the availability cache,
/// on top of a [`Store`](crate::Store) that does each operation atomically.
///
/// Cloning is cheap and gives a handle to the same engine (same store, same cache).
///
/// ```
/// use chrono::{Duration, Utc};
/// use slot_booking::{memory::MemoryStore, AvailabilityQuery, BookingEngine, HoldStatus, NewSlot, Scope};
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
/// let booked = engine.confirm(&Scope::Anonymous, placed.hold.hold_id).await?;
/// assert_eq!(booked.status, HoldStatus::Confirmed);
///
/// let listing = engine.availability(AvailabilityQuery::all()).await?;
/// assert_eq!(listing[0].remaining, 1);
/// # Ok::<(), slot_booking::BookingError>(())
/// # }).unwrap();
/// ```
pub struct BookingEngine<S> {
    pub(crate) inner: Arc<Inner<S>>,
}

pub(crate) struct Inner<S> {
    pub(crate) store: Arc<S>,
    pub(crate) cache: SingleFlightCache<AvailabilitySnapshot, StoreError>,
    /// Dropped with the engine: tells [`Invalidator`]s that it is gone.
    alive: tokio::sync::watch::Sender<()>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) lifetimes: Lifetimes,
    /// Whether idempotency keys are scoped to their owner.
    keys_per_owner: bool,
    /// The turn of the next round-robin "any one of these" hold.
    pub(crate) turn: std::sync::atomic::AtomicUsize,
}

impl<S> Inner<S> {
    /// The key a request's `key` is stored under: checked, and scoped to `owner` when the
    /// engine scopes keys.
    pub(crate) fn stored_key(
        &self,
        key: String,
        owner: Option<&OwnerId>,
    ) -> Result<IdempotencyKey, BookingError> {
        let key = IdempotencyKey::new(key)?;
        Ok(match owner {
            Some(owner) if self.keys_per_owner => IdempotencyKey::of_owner(owner, &key),
            _ => key,
        })
    }
}

/// The engine's hold lifetimes: the default, the bounds a request may ask within, and the
/// longest total life. Always `min <= default <= max <= max_life`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lifetimes {
    pub(crate) default: Duration,
    min: Duration,
    max: Duration,
    pub(crate) max_life: Duration,
}

/// A lifetime the builder has clamped to `1 µs..=MAX_HOLD_TTL` as a chrono duration.
pub(crate) fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::microseconds(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

impl Lifetimes {
    /// `requested`, if within bounds, else the default.
    pub(crate) fn pick(
        &self,
        requested: Option<Duration>,
    ) -> Result<chrono::Duration, BookingError> {
        let lifetime = requested.unwrap_or(self.default);
        if lifetime < self.min || lifetime > self.max {
            return Err(BookingError::InvalidLifetime {
                requested: lifetime,
                min: self.min,
                max: self.max,
            });
        }
        Ok(chrono_duration(lifetime))
    }
}

impl<S> Clone for BookingEngine<S> {
    fn clone(&self) -> Self {
        BookingEngine {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// A handle to an engine that does not keep it alive: for background tasks that should end
/// with it.
pub(crate) struct WeakEngine<S>(std::sync::Weak<Inner<S>>);

impl<S> WeakEngine<S> {
    /// The engine, if some handle still holds it.
    pub(crate) fn upgrade(&self) -> Option<BookingEngine<S>> {
        self.0.upgrade().map(|inner| BookingEngine { inner })
    }
}

impl<S> BookingEngine<S> {
    pub(crate) fn downgrade(&self) -> WeakEngine<S> {
        WeakEngine(Arc::downgrade(&self.inner))
    }
}

impl<S> fmt::Debug for BookingEngine<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BookingEngine")
            .field("cache", &self.inner.cache)
            .field("clock", &self.inner.clock)
            .field("lifetimes", &self.inner.lifetimes)
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
    requested_ttl: (Duration, Duration),
    max_hold_life: Duration,
    clock: Arc<dyn Clock>,
    keys_per_owner: bool,
}

impl<S: HoldStore> EngineBuilder<S> {
    /// Scopes idempotency keys to their owner (default: off, one key space for everybody, as
    /// the seed has it). With it, two owners may both send `cart-1` and get two holds, where
    /// by default the second is `idempotency_key_reused`; anonymous holds keep one shared key
    /// space. Stored keys stay unique ([`IdempotencyKey::of_owner`]). Switch it on for a new
    /// database, or knowing that an owner's retry of a hold placed before the switch makes a
    /// new hold.
    pub fn keys_per_owner(mut self, scoped: bool) -> Self {
        self.keys_per_owner = scoped;
        self
    }

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

    /// The lifetimes a request may ask for with [`NewHold::lifetime`] or a renewal (default 1 s
    /// to 1 hour; within `1 µs..=`[`MAX_HOLD_TTL`]). The bounds are widened to include the
    /// default [`hold_ttl`](EngineBuilder::hold_ttl).
    pub fn requested_ttl_bounds(mut self, min: Duration, max: Duration) -> Self {
        let clamp = |d: Duration| d.clamp(Duration::from_micros(1), MAX_HOLD_TTL);
        self.requested_ttl = (clamp(min.min(max)), clamp(max.max(min)));
        self
    }

    /// The longest a hold may live from its creation, however often it is renewed (default
    /// 2 hours; never below the longest requested lifetime, at most [`MAX_HOLD_TTL`]). A
    /// renewal past it stops there.
    pub fn max_hold_life(mut self, life: Duration) -> Self {
        self.max_hold_life = life.clamp(Duration::from_micros(1), MAX_HOLD_TTL);
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
        let (min, max) = self.requested_ttl;
        let lifetimes = Lifetimes {
            default: self.hold_ttl,
            min: min.min(self.hold_ttl),
            max: max.max(self.hold_ttl),
            max_life: self.max_hold_life.max(max.max(self.hold_ttl)),
        };
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
                alive: tokio::sync::watch::Sender::new(()),
                clock: self.clock,
                lifetimes,
                keys_per_owner: self.keys_per_owner,
                turn: std::sync::atomic::AtomicUsize::new(0),
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

/// A hold to place: which slot, the idempotency key, and optionally how many units, for whom
/// and for how long. Checked by [`BookingEngine::place_hold`] before any store sees it.
///
/// ```
/// # use slot_booking::{NewHold, OwnerId, SlotId};
/// # use std::time::Duration;
/// let request = NewHold::new(SlotId(7), "cart-31-seat-hold")
///     .quantity(3)
///     .owner(OwnerId::new("cart-31")?)
///     .lifetime(Duration::from_secs(600));
/// # Ok::<(), slot_booking::model::InvalidOwnerId>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHold {
    /// The slot to take units of.
    pub slot_id: SlotId,
    /// The idempotency key: 1 to 255 visible ASCII characters, unique across all holds.
    pub key: String,
    /// Units to take, all or none (default 1). Every count of units in the crate is an `i32`.
    pub quantity: i32,
    /// Who the hold belongs to (default: nobody, an anonymous hold).
    pub owner: Option<OwnerId>,
    /// How long the hold lasts (default: the engine's hold lifetime).
    pub lifetime: Option<Duration>,
}

impl NewHold {
    /// One unit of `slot_id`, anonymous, for the engine's hold lifetime.
    pub fn new(slot_id: SlotId, key: impl Into<String>) -> Self {
        NewHold {
            slot_id,
            key: key.into(),
            quantity: 1,
            owner: None,
            lifetime: None,
        }
    }

    /// Takes `quantity` units together (`1..=1000`, and no more than the slot's capacity).
    pub fn quantity(mut self, quantity: i32) -> Self {
        self.quantity = quantity;
        self
    }

    /// Makes the hold `owner`'s: later calls on it must act in that owner's [`Scope`](crate::Scope).
    pub fn owner(mut self, owner: OwnerId) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Asks for a lifetime of its own, within the engine's
    /// [`requested_ttl_bounds`](EngineBuilder::requested_ttl_bounds).
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = Some(lifetime);
        self
    }
}

impl<S: HoldStore> Inner<S> {
    /// Shows units this engine's own committed hold or booking took in its cached listing at
    /// once (a patch of the snapshot: no reload, no store read).
    pub(crate) fn show_taken(&self, units: &[(SlotId, i32)]) {
        self.cache.patch(|snapshot| snapshot.take(units));
    }

    /// Invalidates the cached availability once a transition has committed (R3): after the
    /// store call returned, never before.
    pub(crate) fn invalidate_if_applied<T>(
        &self,
        transition: Result<Decided<Transition<T>>, StoreError>,
    ) -> Result<Decided<Transition<T>>, StoreError> {
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

/// A checked hold request: what [`BookingEngine::place_hold`] hands the store.
pub(crate) struct PreparedHold {
    pub(crate) slot_id: SlotId,
    pub(crate) key: IdempotencyKey,
    pub(crate) owner: Option<OwnerId>,
    pub(crate) quantity: i32,
    pub(crate) now: Timestamp,
    pub(crate) expires_at: Timestamp,
}

impl PreparedHold {
    /// The request as the store takes it.
    pub(crate) fn request(&self) -> HoldRequest<'_> {
        HoldRequest {
            slot_id: self.slot_id,
            key: &self.key,
            owner: self.owner.as_ref(),
            quantity: self.quantity,
            now: self.now,
            expires_at: self.expires_at,
        }
    }
}

/// A new slot as stored: timestamps truncated to microseconds, then validated.
pub(crate) fn prepare_slot(slot: NewSlot) -> Result<NewSlot, BookingError> {
    let slot = NewSlot {
        starts_at: truncate_to_micros(slot.starts_at),
        ends_at: truncate_to_micros(slot.ends_at),
        ..slot
    };
    slot.validate()?;
    Ok(slot)
}

/// Awaits a store call, turning a panic inside the store into a [`StoreError`]: a buggy store
/// must not take the caller's task down with it, and the engine's API never panics.
pub(crate) async fn guarded<T>(
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    AssertUnwindSafe(call)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(StoreError::failed("the store panicked")))
}

impl<S: HoldStore> BookingEngine<S> {
    /// Runs an administrative write (of a slot or a pool) to its end whatever happens to the
    /// caller, and invalidates the cached availability once it has committed a change, which
    /// `changed` tells from the store's answer (R3).
    pub(crate) async fn changing_write<T, F, Fut>(
        &self,
        op: &Op,
        write: F,
        changed: fn(&T) -> bool,
    ) -> Result<Decided<T>, BookingError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Decided<T>, StoreError>> + Send + 'static,
    {
        let store = self.store_handle();
        let engine = self.clone();
        Ok(op
            .store(detached(async move {
                let change = write(store).await?;
                if changed(&change.outcome) {
                    engine.invalidate_availability();
                }
                Ok(change)
            }))
            .await?)
    }
}

/// The one bound on every page and batch a caller asks for: `1..=`[`MAX_PAGE_SIZE`].
pub(crate) fn check_limit(limit: u32) -> Result<(), BookingError> {
    if (1..=MAX_PAGE_SIZE).contains(&limit) {
        Ok(())
    } else {
        Err(BookingError::InvalidPage { limit })
    }
}

impl<S: HoldStore> BookingEngine<S> {
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
            requested_ttl: (DEFAULT_MIN_REQUESTED_TTL, DEFAULT_MAX_REQUESTED_TTL),
            max_hold_life: DEFAULT_MAX_HOLD_LIFE,
            clock: Arc::new(SystemClock),
            keys_per_owner: false,
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// A handle to the store for a write that may outlive its caller (see [`detached`]).
    pub(crate) fn store_handle(&self) -> Arc<S> {
        Arc::clone(&self.inner.store)
    }

    /// The engine's clock.
    pub fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    /// How long holds last unless a request asks for another lifetime.
    pub fn hold_ttl(&self) -> Duration {
        self.inner.lifetimes.default
    }

    /// The longest a hold may live from its creation, renewals included.
    pub fn max_hold_life(&self) -> Duration {
        self.inner.lifetimes.max_life
    }

    /// Drops the cached availability so the next read loads it again (the engine does this
    /// itself after confirm, cancel and every slot change; call it after changing the store
    /// behind the engine's back).
    pub fn invalidate_availability(&self) {
        self.inner.cache.invalidate();
    }

    /// Shows units this engine's own committed write took in its cached listing at once.
    pub(crate) fn show_taken(&self, units: &[(SlotId, i32)]) {
        self.inner.show_taken(units);
    }

    /// A handle that invalidates this engine's cached availability from elsewhere: for a
    /// [`ChangeFeed`](crate::changes::ChangeFeed) follower (see
    /// [`follow_changes`](crate::changes::follow_changes)), which it also tells when the
    /// engine has been dropped.
    pub fn invalidator(&self) -> Invalidator {
        Invalidator::new(self.inner.cache.clone(), self.inner.alive.subscribe())
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
        // Not `Op::run`: a hit awaits nothing to nest spans under, and the cheapest hit is
        // one future without a wrapper; the load's span names this read as its parent.
        let op = Op::new(Operation::Availability);
        if let Err(error) = query.check() {
            let refused = Err(error);
            op.finish(&refused, None);
            return refused;
        }
        // The loader takes its handles only when a load really starts: a hit clones nothing.
        // It reads the clock when the cache starts the load (after the cache noted the load's
        // start), so `read_at + age` never runs behind the clock.
        let load = || {
            let store = Arc::clone(&self.inner.store);
            let read_at = self.inner.clock.now();
            let load = Op::cache_load(&op);
            async move {
                load.run(async {
                    // The slots, then their pools: one store read as the metrics count it.
                    let (read, pools) = load
                        .store(guarded(async {
                            let read = store.availability(read_at).await?;
                            Ok((read, store.pools(read_at).await?))
                        }))
                        .await?;
                    Ok(AvailabilitySnapshot::new(read.at, read.outcome).with_pools(pools.outcome))
                })
                .await
            }
        };
        let snapshot = match self.inner.cache.get(load).await {
            Ok(snapshot) => snapshot,
            Err(error) => {
                let error = match error {
                    CacheError::Load(error) => BookingError::Store(error),
                    CacheError::LoadAborted => BookingError::Store(StoreError::failed(
                        "the availability load panicked or was cancelled",
                    )),
                };
                let failed = Err(error);
                op.finish(&failed, None);
                return failed;
            }
        };
        let served = snapshot.served();
        // A wall clock can answer from the snapshot's read time and age without a second
        // clock read; a manual clock is read.
        let now = self
            .inner
            .clock
            .now_after(snapshot.value().read_at, snapshot.age());
        let fresh_for = snapshot.fresh_for();
        let age = snapshot.age();
        let snapshot = snapshot.into_value();
        let (group, range) = match &query.resource {
            None => (None, window(&snapshot.entries, now, &query)),
            Some(resource) => match snapshot
                .by_resource
                .binary_search_by(|(r, _)| r.cmp(resource))
            {
                Ok(i) => (Some(i), window(&snapshot.by_resource[i].1, now, &query)),
                // No selling slot of this resource: an empty window.
                Err(_) => (None, 0..0),
            },
        };
        let read = Ok(Availability {
            group,
            range,
            snapshot,
            fresh_for,
            age,
        });
        op.finish(&read, Some(served));
        read
    }
}
