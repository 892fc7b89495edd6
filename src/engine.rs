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
use crate::changes::Invalidator;
use crate::clock::{Clock, SystemClock};
use crate::error::BookingError;
use crate::model::{
    truncate_to_micros, AvailabilityEntry, AvailabilityQuery, Hold, HoldId, HoldPage, HoldStatus,
    IdempotencyKey, NewSlot, OwnerId, PageRequest, ResourceId, Slot, SlotId, Timestamp,
    MAX_PAGE_SIZE, MAX_QUANTITY,
};
use crate::observe::{Op, Operation};
use crate::scope::Scope;
use crate::store::{
    Decided, HoldOutcome, HoldRequest, RenewRequest, Store, StoreError, Transition,
};

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
    /// Dropped with the engine: tells [`Invalidator`]s that it is gone.
    alive: tokio::sync::watch::Sender<()>,
    clock: Arc<dyn Clock>,
    lifetimes: Lifetimes,
}

/// The engine's hold lifetimes: the default, the bounds a request may ask within, and the
/// longest total life. Always `min <= default <= max <= max_life`.
#[derive(Debug, Clone, Copy)]
struct Lifetimes {
    default: Duration,
    min: Duration,
    max: Duration,
    max_life: Duration,
}

/// A lifetime the builder has clamped to `1 µs..=MAX_HOLD_TTL` as a chrono duration.
fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::microseconds(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

impl Lifetimes {
    /// `requested`, if within bounds, else the default.
    fn pick(&self, requested: Option<Duration>) -> Result<chrono::Duration, BookingError> {
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
    /// Units to take, all or none (default 1).
    pub quantity: i64,
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
    pub fn quantity(mut self, quantity: i64) -> Self {
        self.quantity = quantity;
        self
    }

    /// Makes the hold `owner`'s: later calls on it must act in that owner's [`Scope`].
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

/// One store read of availability, as the cache shares it between readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvailabilitySnapshot {
    /// The engine's clock when the read was made: the `now` the store was asked about.
    pub read_at: Timestamp,
    /// Every slot that had not started at `read_at` and is selling, by `starts_at` then
    /// `slot_id`.
    pub entries: Vec<AvailabilityEntry>,
    /// The same entries grouped by resource (sorted by resource id), each group in the order
    /// of `entries`: a query for one resource is a window onto its group, so it costs no store
    /// read and copies nothing.
    pub by_resource: Vec<(ResourceId, Vec<AvailabilityEntry>)>,
}

impl AvailabilitySnapshot {
    /// A snapshot of `entries` (in listing order) read at `read_at`, grouped by resource.
    pub fn new(read_at: Timestamp, entries: Vec<AvailabilityEntry>) -> Self {
        let mut groups: std::collections::BTreeMap<&ResourceId, Vec<AvailabilityEntry>> =
            std::collections::BTreeMap::new();
        for entry in &entries {
            if let Some(resource) = &entry.resource {
                groups.entry(resource).or_default().push(entry.clone());
            }
        }
        let by_resource = groups
            .into_iter()
            .map(|(resource, group)| (resource.clone(), group))
            .collect();
        AvailabilitySnapshot {
            read_at,
            entries,
            by_resource,
        }
    }

    /// The entries a query of `resource` (or of every resource) looks through.
    fn list(&self, group: Option<usize>) -> &[AvailabilityEntry] {
        match group.and_then(|i| self.by_resource.get(i)) {
            Some((_, entries)) => entries,
            None => &self.entries,
        }
    }
}

/// An availability listing: a window onto the shared cached snapshot (no entries are copied).
///
/// Dereferences to `[AvailabilityEntry]` and serializes as a JSON array.
#[derive(Clone)]
pub struct Availability {
    snapshot: Arc<AvailabilitySnapshot>,
    /// The resource group the window is over; `None` for every slot.
    group: Option<usize>,
    range: Range<usize>,
    fresh_for: Duration,
    age: Duration,
}

impl Availability {
    /// The entries, ordered by `starts_at` then `slot_id`.
    pub fn entries(&self) -> &[AvailabilityEntry] {
        &self.snapshot.list(self.group)[self.range.clone()]
    }

    /// The entry of `slot_id` in this listing, if it is listed (a linear search: entries are
    /// ordered by start, not by id).
    pub fn entry(&self, slot_id: SlotId) -> Option<&AvailabilityEntry> {
        self.entries().iter().find(|entry| entry.slot_id == slot_id)
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

/// A checked hold request: what [`BookingEngine::place_hold`] hands the store.
pub(crate) struct PreparedHold {
    pub(crate) slot_id: SlotId,
    key: IdempotencyKey,
    owner: Option<OwnerId>,
    pub(crate) quantity: i32,
    now: Timestamp,
    expires_at: Timestamp,
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

/// Turns what the store did with a hold request into the caller's answer, statuses resolved
/// at the instant the store decided at.
pub(crate) fn hold_placed(
    op: &Op,
    outcome: Decided<HoldOutcome>,
    slot_id: SlotId,
    quantity: i32,
) -> Result<HoldPlaced, BookingError> {
    let now = outcome.at;
    let placed = |hold: Hold, replayed| {
        op.record_hold(hold.hold_id);
        op.record_replayed(replayed);
        Ok(HoldPlaced {
            hold: hold.at(now),
            replayed,
        })
    };
    match outcome.outcome {
        HoldOutcome::Created(hold) => placed(hold, false),
        HoldOutcome::Replayed(hold) => placed(hold, true),
        HoldOutcome::KeyReused(hold) => Err(BookingError::IdempotencyKeyReused {
            slot_id,
            existing_hold_id: hold.as_ref().map(|h| h.hold_id),
            existing_slot_id: hold.as_ref().map(|h| h.slot_id),
        }),
        HoldOutcome::SoldOut => Err(BookingError::SoldOut { slot_id }),
        HoldOutcome::ExceedsCapacity { capacity } => Err(BookingError::QuantityExceedsCapacity {
            slot_id,
            quantity,
            capacity,
        }),
        HoldOutcome::SlotNotFound => Err(BookingError::SlotNotFound { slot_id }),
        HoldOutcome::SlotClosed => Err(BookingError::SlotClosed { slot_id }),
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

/// Turns a store transition into the caller's answer, resolving statuses at the instant the
/// store decided at. A hold the operation did not change is returned as it is when its status
/// is `unchanged_ok` (confirming a confirmed hold, cancelling a cancelled one, renewing a
/// confirmed one), and is an error otherwise.
pub(crate) fn settle(
    op: &Op,
    transition: Decided<Transition>,
    hold_id: HoldId,
    unchanged_ok: HoldStatus,
) -> Result<Hold, BookingError> {
    let now = transition.at;
    match transition.outcome {
        Transition::Applied(hold) => {
            op.record_slot(hold.slot_id);
            Ok(hold.at(now))
        }
        Transition::NotFound => Err(BookingError::HoldNotFound { hold_id }),
        Transition::NotApplied(hold) => {
            op.record_slot(hold.slot_id);
            match hold.status_at(now) {
                status if status == unchanged_ok => Ok(hold.at(now)),
                HoldStatus::Cancelled => Err(BookingError::HoldCancelled { hold_id }),
                HoldStatus::Expired => Err(BookingError::HoldExpired { hold_id }),
                status => Err(BookingError::Store(StoreError::failed(format!(
                    "store refused to {} hold {hold_id}, which is {status}",
                    op.operation().name()
                )))),
            }
        }
    }
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

/// Runs a store write so that dropping the caller's future never cancels it half way: the
/// write and the cache invalidation after its commit (R3) always run to the end, as if only the
/// answer had been lost (the idempotency key lets a client ask again). A panic in the store
/// becomes a [`StoreError`].
///
/// The write is polled once in place: a store that finishes without waiting (the memory store)
/// has no await point a caller could be dropped at, and pays no task. One that has to wait is
/// moved to a task of its own, which the runtime polls again (with a real waker) at once.
/// Outside a tokio runtime the write runs inline.
pub(crate) async fn detached<T: Send + 'static>(
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
    // On a task of its own the write keeps the caller's span (the operation's), so a store's
    // own spans and events nest under it.
    let write = tracing::Instrument::in_current_span(write);
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

fn check_page(page: PageRequest) -> Result<(), BookingError> {
    if (1..=MAX_PAGE_SIZE).contains(&page.limit) {
        Ok(())
    } else {
        Err(BookingError::InvalidPage { limit: page.limit })
    }
}

/// A store's page, resolved at the instant it was read, with where the next page starts.
fn into_page(read: Decided<Vec<Hold>>, page: PageRequest) -> HoldPage {
    let at = read.at;
    let holds: Vec<Hold> = read.outcome.into_iter().map(|h| h.at(at)).collect();
    let full = holds.len() >= page.limit as usize;
    HoldPage {
        next_after: holds.last().filter(|_| full).map(|h| h.hold_id),
        holds,
    }
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
            requested_ttl: (DEFAULT_MIN_REQUESTED_TTL, DEFAULT_MAX_REQUESTED_TTL),
            max_hold_life: DEFAULT_MAX_HOLD_LIFE,
            clock: Arc::new(SystemClock),
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// A handle to the store for a write that runs on a task of its own.
    pub(crate) fn store_handle(&self) -> Arc<S> {
        Arc::clone(&self.inner.store)
    }

    /// The engine's clock.
    pub fn clock(&self) -> &dyn Clock {
        &*self.inner.clock
    }

    /// How long holds last unless a request asks for another lifetime.
    pub fn hold_ttl(&self) -> chrono::Duration {
        chrono_duration(self.inner.lifetimes.default)
    }

    /// The longest a hold may live from its creation, renewals included.
    pub fn max_hold_life(&self) -> chrono::Duration {
        chrono_duration(self.inner.lifetimes.max_life)
    }

    /// Drops the cached availability so the next read loads it again (the engine does this
    /// itself after confirm, cancel and every slot change; call it after changing the store
    /// behind the engine's back).
    pub fn invalidate_availability(&self) {
        self.inner.cache.invalidate();
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
                    let read = load.store(guarded(store.availability(read_at))).await?;
                    Ok(AvailabilitySnapshot::new(read.at, read.outcome))
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

    /// Places an anonymous hold on one unit of `slot_id` for the engine's hold lifetime: the
    /// seed's hold. [`place_hold`](BookingEngine::place_hold) takes quantity, owner and
    /// lifetime.
    ///
    /// Idempotent by `key`: calling again with the same key and slot returns the same hold in
    /// its current state with `replayed: true`, reserving nothing more.
    pub async fn hold(&self, slot_id: SlotId, key: &str) -> Result<HoldPlaced, BookingError> {
        self.place_hold(NewHold::new(slot_id, key)).await
    }

    /// Places a hold on `request.quantity` units of a slot, all or none, for the requested
    /// lifetime (or the engine's), owned by `request.owner` (or anonymous).
    ///
    /// Idempotent by key: the same key with the same slot, quantity and owner returns the same
    /// hold in its current state with `replayed: true`, reserving nothing more. The same key
    /// with anything else is `idempotency_key_reused`; when the key's hold belongs to another
    /// owner the error says nothing about it.
    pub async fn place_hold(&self, request: NewHold) -> Result<HoldPlaced, BookingError> {
        let op = Op::new(Operation::Hold).slot(request.slot_id);
        op.run(async {
            let prepared = self.prepare_hold(request)?;
            let inner = Arc::clone(&self.inner);
            let (slot_id, quantity) = (prepared.slot_id, prepared.quantity);
            let outcome = op
                .store(detached(async move {
                    inner.store.create_hold(prepared.request()).await
                }))
                .await?;
            hold_placed(&op, outcome, slot_id, quantity)
        })
        .await
    }

    /// Checks a hold request and fixes its instant and expiry: everything the store is
    /// handed, before any store sees it.
    pub(crate) fn prepare_hold(&self, request: NewHold) -> Result<PreparedHold, BookingError> {
        let key = IdempotencyKey::new(request.key)?;
        let quantity = match i32::try_from(request.quantity) {
            Ok(q) if (1..=MAX_QUANTITY).contains(&q) => q,
            _ => {
                return Err(BookingError::InvalidQuantity {
                    quantity: request.quantity,
                })
            }
        };
        let lifetime = self.inner.lifetimes.pick(request.lifetime)?;
        let now = self.inner.clock.now();
        let expires_at = now
            .checked_add_signed(lifetime)
            .ok_or_else(|| StoreError::failed("the hold's expiry is past the end of time"))?;
        Ok(PreparedHold {
            slot_id: request.slot_id,
            key,
            owner: request.owner,
            quantity,
            now,
            expires_at,
        })
    }

    /// The lifetime, maximum life and instant of a renewal asking for `lifetime`.
    pub(crate) fn prepare_renew(
        &self,
        lifetime: Option<Duration>,
    ) -> Result<(chrono::Duration, chrono::Duration, Timestamp), BookingError> {
        let lifetime = self.inner.lifetimes.pick(lifetime)?;
        let max_life = chrono_duration(self.inner.lifetimes.max_life);
        Ok((lifetime, max_life, self.inner.clock.now()))
    }

    /// Confirms an active anonymous hold ([`Scope::Anonymous`]). Confirming a confirmed hold
    /// returns it unchanged.
    pub async fn confirm(&self, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.confirm_as(&Scope::Anonymous, hold_id).await
    }

    /// Confirms an active hold in `scope`. Confirming a confirmed hold returns it unchanged;
    /// a hold outside `scope` is `hold_not_found`.
    pub async fn confirm_as(&self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::Confirm).hold(hold_id);
        op.run(async {
            let now = self.inner.clock.now();
            let inner = Arc::clone(&self.inner);
            let scope = scope.clone();
            let transition = op
                .store(detached(async move {
                    inner
                        .invalidate_if_applied(inner.store.confirm_hold(hold_id, &scope, now).await)
                }))
                .await?;
            settle(&op, transition, hold_id, HoldStatus::Confirmed)
        })
        .await
    }

    /// Cancels an active or confirmed anonymous hold ([`Scope::Anonymous`]), giving its units
    /// back. Cancelling a cancelled hold returns it unchanged.
    pub async fn cancel(&self, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.cancel_as(&Scope::Anonymous, hold_id).await
    }

    /// Cancels an active or confirmed hold in `scope`, giving its units back. Cancelling a
    /// cancelled hold returns it unchanged; a hold outside `scope` is `hold_not_found`.
    pub async fn cancel_as(&self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::Cancel).hold(hold_id);
        op.run(async {
            let now = self.inner.clock.now();
            let inner = Arc::clone(&self.inner);
            let scope = scope.clone();
            let transition = op
                .store(detached(async move {
                    inner.invalidate_if_applied(inner.store.cancel_hold(hold_id, &scope, now).await)
                }))
                .await?;
            settle(&op, transition, hold_id, HoldStatus::Cancelled)
        })
        .await
    }

    /// Renews an active anonymous hold for the engine's hold lifetime (see
    /// [`renew_as`](BookingEngine::renew_as)).
    pub async fn renew(&self, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.renew_as(&Scope::Anonymous, hold_id, None).await
    }

    /// Renews an active hold in `scope`: `expires_at` moves to now plus `lifetime` (the
    /// engine's hold lifetime if `None`, else within its
    /// [`requested_ttl_bounds`](EngineBuilder::requested_ttl_bounds)), but never past the
    /// hold's creation plus the [`max_hold_life`](EngineBuilder::max_hold_life), and never
    /// earlier than it was. Capacity does not change.
    ///
    /// An expired hold cannot be renewed (`hold_expired`), nor a cancelled one
    /// (`hold_cancelled`); a confirmed hold has nothing to renew and is returned unchanged.
    pub async fn renew_as(
        &self,
        scope: &Scope,
        hold_id: HoldId,
        lifetime: Option<Duration>,
    ) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::Renew).hold(hold_id);
        op.run(async {
            let (lifetime, max_life, now) = self.prepare_renew(lifetime)?;
            let inner = Arc::clone(&self.inner);
            let scope = scope.clone();
            let transition = op
                .store(detached(async move {
                    let request = RenewRequest {
                        hold_id,
                        scope: &scope,
                        now,
                        lifetime,
                        max_life,
                    };
                    inner.store.renew_hold(request).await
                }))
                .await?;
            // A confirmed hold has nothing to renew: it is returned unchanged.
            settle(&op, transition, hold_id, HoldStatus::Confirmed)
        })
        .await
    }

    /// Reads an anonymous hold ([`Scope::Anonymous`]), its status resolved at the current time.
    pub async fn get_hold(&self, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.get_hold_as(&Scope::Anonymous, hold_id).await
    }

    /// Reads a hold in `scope`, its status resolved at the current time; a hold outside
    /// `scope` is `hold_not_found`.
    pub async fn get_hold_as(&self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::GetHold).hold(hold_id);
        op.run(async {
            let now = self.inner.clock.now();
            let read = op
                .store(guarded(self.inner.store.get_hold(hold_id, scope, now)))
                .await?;
            match read.outcome {
                Some(hold) => Ok(hold.at(read.at)),
                None => Err(BookingError::HoldNotFound { hold_id }),
            }
        })
        .await
    }

    /// A page of `owner`'s holds by id, every status, resolved at the current time.
    pub async fn owner_holds(
        &self,
        owner: &OwnerId,
        page: PageRequest,
    ) -> Result<HoldPage, BookingError> {
        let op = Op::new(Operation::OwnerHolds);
        op.run(async {
            check_page(page)?;
            let now = self.inner.clock.now();
            let read = op
                .store(guarded(self.inner.store.owner_holds(owner, page, now)))
                .await?;
            Ok(into_page(read, page))
        })
        .await
    }

    /// A page of the holds of `slot_id` (the roster: every owner's, every status) by id,
    /// resolved at the current time. Back-office code only: it shows other owners' holds.
    pub async fn slot_holds(
        &self,
        slot_id: SlotId,
        page: PageRequest,
    ) -> Result<HoldPage, BookingError> {
        let op = Op::new(Operation::SlotHolds).slot(slot_id);
        op.run(async {
            check_page(page)?;
            let now = self.inner.clock.now();
            let read = op
                .store(guarded(self.inner.store.slot_holds(slot_id, page, now)))
                .await?;
            Ok(into_page(read, page))
        })
        .await
    }

    /// Validates and stores a new slot with all its capacity free, selling at once.
    pub async fn create_slot(&self, slot: NewSlot) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::CreateSlot);
        op.run(async {
            let slot = prepare_slot(slot)?;
            let now = self.clock().now();
            let inner = Arc::clone(&self.inner);
            let created = op
                .store(detached(async move {
                    let created = inner.store.create_slot(&slot, now).await?;
                    inner.cache.invalidate();
                    Ok(created)
                }))
                .await?;
            op.record_slot(created.slot_id);
            Ok(created)
        })
        .await
    }
}
