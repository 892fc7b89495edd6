//! Engine behaviour that is not a store's business: validation before the store, cache
//! invalidation order (R3), one store read per cache period (R1, R2), the snapshot window.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::TimeZone;
use slot_booking::store::{Decided, HoldOutcome, HoldRequest, RenewRequest, Transition};
use slot_booking::{
    AvailabilityEntry, AvailabilityQuery, BookingEngine, BookingError, Hold, HoldId, HoldStatus,
    HoldStore, ManualClock, MemoryStore, NewSlot, PageRequest, ResourceId, Scope, Slot, SlotId,
    Store, StoreError, Timestamp,
};
use tokio::sync::Semaphore;

/// A store that counts calls, can hold cancels at a gate (saying when a cancel has reached it
/// and when one has finished), and can fail on demand.
#[derive(Default)]
struct Probe {
    inner: MemoryStore,
    availability_reads: AtomicUsize,
    store_calls: AtomicUsize,
    cancel_gate: Option<Arc<Semaphore>>,
    /// One permit per availability read.
    availability_read: Signal,
    /// One permit per cancel that reached the store (before the gate).
    cancel_reached: Signal,
    /// One permit per cancel the store finished.
    cancel_done: Signal,
    fail: std::sync::atomic::AtomicBool,
    broken: std::sync::atomic::AtomicBool,
    refuse_confirm: bool,
}

/// Counts events a test can wait for, instead of yielding and hoping.
struct Signal(Semaphore);

impl Default for Signal {
    fn default() -> Self {
        Signal(Semaphore::new(0))
    }
}

impl Signal {
    fn raise(&self) {
        self.0.add_permits(1);
    }

    /// Waits until the event has happened `n` times in all.
    async fn wait_total(&self, n: u32) {
        self.0.acquire_many(n).await.unwrap().forget();
        self.0.add_permits(n as usize);
    }
}

impl Probe {
    fn reads(&self) -> usize {
        self.availability_reads.load(Ordering::SeqCst)
    }

    /// Waits until the store has been asked for availability `n` times in all.
    async fn read_signalled(&self, n: u32) {
        self.availability_read.wait_total(n).await;
    }

    fn check(&self) -> Result<(), StoreError> {
        self.store_calls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("connection refused"));
        }
        if self.broken.load(Ordering::SeqCst) {
            return Err(StoreError::failed(r#"relation "holds" does not exist"#));
        }
        Ok(())
    }
}

#[async_trait]
impl HoldStore for Probe {
    async fn create_slot(&self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError> {
        self.check()?;
        self.inner.create_slot(slot, now).await
    }
    async fn availability(
        &self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
        self.check()?;
        self.availability_reads.fetch_add(1, Ordering::SeqCst);
        self.availability_read.raise();
        self.inner.availability(now).await
    }
    async fn create_hold(
        &self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        self.check()?;
        self.inner.create_hold(request).await
    }
    async fn confirm_hold(
        &self,
        id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        self.check()?;
        if self.refuse_confirm {
            let hold = self.inner.get_hold(id, scope, now).await?;
            return Ok(hold.map(|hold| hold.map_or(Transition::NotFound, Transition::NotApplied)));
        }
        self.inner.confirm_hold(id, scope, now).await
    }
    async fn cancel_hold(
        &self,
        id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        self.check()?;
        self.cancel_reached.raise();
        if let Some(gate) = &self.cancel_gate {
            gate.acquire().await.expect("gate open").forget();
        }
        let done = self.inner.cancel_hold(id, scope, now).await;
        self.cancel_done.raise();
        done
    }
    async fn renew_hold(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        self.check()?;
        self.inner.renew_hold(request).await
    }
    async fn get_hold(
        &self,
        id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        self.check()?;
        self.inner.get_hold(id, scope, now).await
    }
    async fn get_slot(&self, id: SlotId) -> Result<Option<Slot>, StoreError> {
        self.check()?;
        self.inner.get_slot(id).await
    }
}

// The rest forwards to the memory store after the probe's failure check.
slot_booking::forward_store!(impl[] SlotAdmin, HoldQueries for Probe, |this| {
    this.check()?;
    &this.inner
});

fn start() -> Timestamp {
    chrono::Utc
        .with_ymd_and_hms(2031, 5, 1, 8, 0, 0)
        .single()
        .unwrap()
}

fn engine(probe: Probe, clock: &ManualClock) -> BookingEngine<Probe> {
    BookingEngine::builder(probe)
        .cache_period(Duration::from_secs(10))
        .clock(clock.clone())
        .build()
}

async fn slot(engine: &BookingEngine<Probe>, capacity: i32, starts_in: chrono::Duration) -> SlotId {
    let starts_at = engine.clock().now() + starts_in;
    engine
        .create_slot(NewSlot::new(
            starts_at,
            starts_at + chrono::Duration::hours(1),
            capacity,
        ))
        .await
        .unwrap()
        .slot_id
}

#[tokio::test]
async fn r3_cancel_invalidates_only_after_its_commit() {
    let gate = Arc::new(Semaphore::new(0));
    let clock = ManualClock::new(start());
    let engine = engine(
        Probe {
            cancel_gate: Some(Arc::clone(&gate)),
            ..Probe::default()
        },
        &clock,
    );
    let slot = slot(&engine, 1, chrono::Duration::hours(1)).await;
    let hold = engine.hold(slot, "k").await.unwrap().hold;
    let before = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(before[0].remaining, 0);

    let cancelling = tokio::spawn({
        let engine = engine.clone();
        async move { engine.cancel(&Scope::Anonymous, hold.hold_id).await }
    });
    // While the cancel is inside the store (not committed), readers are served the cached
    // listing. Had the engine invalidated first, this read would load and cache the
    // pre-commit state under the new generation, and the read after the commit would be wrong.
    engine.store().cancel_reached.wait_total(1).await;
    let during = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(during[0].remaining, 0);
    assert_eq!(engine.store().reads(), 1, "no reload before the commit");

    gate.add_permits(1);
    cancelling.await.unwrap().unwrap();
    let after = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(after[0].remaining, 1, "the unit is back at once");
    assert_eq!(engine.store().reads(), 2);
}

#[tokio::test]
async fn r3_confirm_and_create_slot_invalidate_but_a_hold_patches_the_listing() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let slot = slot(&engine, 3, chrono::Duration::hours(1)).await;
    engine.availability(AvailabilityQuery::all()).await.unwrap();
    let hold = engine.hold(slot, "k").await.unwrap().hold;
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        listing[0].remaining, 2,
        "the engine's own hold shows in its listing at once"
    );
    assert_eq!(engine.store().reads(), 1, "patched, not reloaded");
    engine.hold(slot, "k").await.unwrap();
    let big = slot_booking::NewHold::new(slot, "big").quantity(3);
    assert!(engine.place_hold(big).await.is_err());
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        listing[0].remaining, 2,
        "a replay or a refusal takes nothing"
    );
    assert_eq!(engine.store().reads(), 1);
    engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(listing[0].remaining, 2);
    assert_eq!(engine.store().reads(), 2);
    engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        engine.store().reads(),
        2,
        "an idempotent repeat changes nothing"
    );
    self::slot(&engine, 1, chrono::Duration::hours(2)).await;
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(listing.len(), 2);
    assert_eq!(engine.store().reads(), 3);
}

#[tokio::test(start_paused = true)]
async fn r1_any_number_of_queries_cost_one_store_read_per_period() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    for h in 1..=6 {
        slot(&engine, 1, chrono::Duration::hours(h)).await;
    }
    let first = engine.availability(AvailabilityQuery::all()).await.unwrap();
    for h in 0..6 {
        let from = start() + chrono::Duration::hours(h);
        let listing = engine
            .availability(
                AvailabilityQuery::all()
                    .from(from)
                    .to(from + chrono::Duration::hours(2)),
            )
            .await
            .unwrap();
        assert!(listing.len() <= 2);
        assert!(
            Arc::ptr_eq(listing.snapshot(), first.snapshot()),
            "no copy per query"
        );
    }
    assert_eq!(engine.store().reads(), 1);
    tokio::time::advance(Duration::from_secs(9)).await;
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(listing.fresh_for(), Duration::from_secs(1));
    assert_eq!(engine.store().reads(), 1);
    tokio::time::advance(Duration::from_secs(1)).await;
    engine.availability(AvailabilityQuery::all()).await.unwrap();
    engine.store().read_signalled(2).await;
    assert_eq!(engine.store().reads(), 2, "one refresh after the period");
}

#[tokio::test]
async fn resource_queries_are_windows_onto_the_one_cached_snapshot() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let room = |name: &str| ResourceId::new(name).unwrap();
    let mut made = Vec::new();
    for (h, name) in [(3, "b"), (1, "a"), (2, "b"), (4, "a"), (5, "c")] {
        let starts_at = start() + chrono::Duration::hours(h);
        let slot = engine
            .create_slot(
                NewSlot::new(starts_at, starts_at + chrono::Duration::hours(1), 1)
                    .resource(room(name)),
            )
            .await
            .unwrap();
        made.push(slot.slot_id);
    }
    let plain = slot(&engine, 1, chrono::Duration::minutes(90)).await;
    let all = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(all.len(), 6);
    let ids = |query: AvailabilityQuery| {
        let engine = engine.clone();
        let first = all.snapshot().clone();
        async move {
            let listing = engine.availability(query).await.unwrap();
            assert!(
                Arc::ptr_eq(listing.snapshot(), &first),
                "no store read and no new snapshot per resource"
            );
            listing.iter().map(|e| e.slot_id).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        ids(AvailabilityQuery::all().resource(room("a"))).await,
        [made[1], made[3]]
    );
    assert_eq!(
        ids(AvailabilityQuery::all().resource(room("b"))).await,
        [made[2], made[0]]
    );
    assert_eq!(
        ids(AvailabilityQuery::all()
            .resource(room("b"))
            .from(start() + chrono::Duration::hours(3)))
        .await,
        [made[0]]
    );
    assert_eq!(ids(AvailabilityQuery::all().resource(room("z"))).await, []);
    assert!(ids(AvailabilityQuery::all()).await.contains(&plain));
    assert_eq!(
        engine.store().reads(),
        1,
        "one store read for every resource"
    );
    // Once a slot has started it leaves its resource's window too.
    clock.advance(chrono::Duration::hours(1));
    assert_eq!(
        ids(AvailabilityQuery::all().resource(room("a"))).await,
        [made[3]]
    );
    assert_eq!(engine.store().reads(), 1);
}

#[tokio::test]
async fn slot_changes_invalidate_after_commit_and_refused_ones_do_not() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let slot = slot(&engine, 3, chrono::Duration::hours(1)).await;
    engine.availability(AvailabilityQuery::all()).await.unwrap();
    let hold = engine.hold(slot, "k").await.unwrap().hold;
    engine.change_capacity(slot, 5).await.unwrap();
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!((listing[0].capacity, listing[0].remaining), (5, 4));
    assert_eq!(engine.store().reads(), 2);
    // Refused changes commit nothing and keep the cached listing.
    assert_eq!(
        engine.change_capacity(slot, 0).await.unwrap_err().code(),
        "invalid_slot"
    );
    let error = engine.remove_slot(slot).await.unwrap_err();
    assert_eq!(error.code(), "slot_in_use");
    engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(engine.store().reads(), 2);
    engine.close_sales(slot).await.unwrap();
    assert!(engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(engine.store().reads(), 3);
    engine.reopen_sales(slot).await.unwrap();
    engine
        .cancel(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    engine.remove_slot(slot).await.unwrap();
    assert!(engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        engine.store().reads(),
        4,
        "reopen and cancel and removal: one reload"
    );
}

#[tokio::test]
async fn invalid_administration_never_reaches_the_store() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let slot = slot(&engine, 1, chrono::Duration::hours(1)).await;
    let calls = engine.store().store_calls.load(Ordering::SeqCst);
    for capacity in [0, -3, i32::MIN] {
        let error = engine.change_capacity(slot, capacity).await.unwrap_err();
        assert_eq!(error.code(), "invalid_slot");
    }
    for limit in [0, 1001] {
        let error = engine
            .list_slots(&AvailabilityQuery::all(), PageRequest::first(limit))
            .await
            .unwrap_err();
        assert_eq!(error.code(), "invalid_page");
    }
    let backwards = AvailabilityQuery::all()
        .from(start())
        .to(start() - chrono::Duration::seconds(1));
    let error = engine
        .list_slots(&backwards, PageRequest::first(10))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "invalid_query");
    assert_eq!(engine.store().store_calls.load(Ordering::SeqCst), calls);
}

#[tokio::test]
async fn a_cached_snapshot_hides_slots_that_have_started_since() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let soon = slot(&engine, 1, chrono::Duration::seconds(1)).await;
    let later = slot(&engine, 1, chrono::Duration::hours(1)).await;
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        listing.iter().map(|e| e.slot_id).collect::<Vec<_>>(),
        [soon, later]
    );
    clock.advance(chrono::Duration::seconds(1));
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        listing.iter().map(|e| e.slot_id).collect::<Vec<_>>(),
        [later]
    );
    assert_eq!(engine.store().reads(), 1, "filtered from the same snapshot");
}

#[tokio::test]
async fn invalid_input_never_reaches_the_store() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let slot = slot(&engine, 1, chrono::Duration::hours(1)).await;
    let calls = engine.store().store_calls.load(Ordering::SeqCst);
    let bad_key = engine.hold(slot, "no spaces allowed").await.unwrap_err();
    assert_eq!(bad_key.code(), "invalid_idempotency_key");
    let bad_slot = engine
        .create_slot(NewSlot::new(start(), start(), 1))
        .await
        .unwrap_err();
    assert_eq!(bad_slot.code(), "invalid_slot");
    let bad_query = engine
        .availability(
            AvailabilityQuery::all()
                .from(start())
                .to(start() - chrono::Duration::seconds(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(bad_query.code(), "invalid_query");
    assert_eq!(engine.store().store_calls.load(Ordering::SeqCst), calls);
}

#[tokio::test]
async fn store_failures_surface_as_store_unavailable_and_change_nothing() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let slot = slot(&engine, 2, chrono::Duration::hours(1)).await;
    engine.store().fail.store(true, Ordering::SeqCst);
    for error in [
        engine.hold(slot, "k").await.unwrap_err(),
        engine
            .confirm(&Scope::Anonymous, HoldId(1))
            .await
            .unwrap_err(),
        engine
            .cancel(&Scope::Anonymous, HoldId(1))
            .await
            .unwrap_err(),
        engine
            .get_hold(&Scope::Anonymous, HoldId(1))
            .await
            .unwrap_err(),
        engine
            .availability(AvailabilityQuery::all())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(error.code(), "store_unavailable");
        let BookingError::Store(store_error) = error else {
            panic!("not a store error")
        };
        assert!(store_error.is_transient());
    }
    engine.store().fail.store(false, Ordering::SeqCst);
    assert!(
        !engine.hold(slot, "k").await.unwrap().replayed,
        "nothing was half done"
    );
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        listing[0].remaining, 1,
        "the failed availability read was not cached"
    );
}

#[tokio::test]
async fn a_permanent_store_failure_is_store_failed_not_unavailable() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let slot = slot(&engine, 2, chrono::Duration::hours(1)).await;
    engine.store().broken.store(true, Ordering::SeqCst);
    for error in [
        engine.hold(slot, "k").await.unwrap_err(),
        engine
            .confirm(&Scope::Anonymous, HoldId(1))
            .await
            .unwrap_err(),
        engine
            .cancel(&Scope::Anonymous, HoldId(1))
            .await
            .unwrap_err(),
        engine
            .get_hold(&Scope::Anonymous, HoldId(1))
            .await
            .unwrap_err(),
        engine
            .availability(AvailabilityQuery::all())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(error.code(), "store_failed", "{error}");
        assert!(
            !error.is_transient(),
            "retrying a broken schema cannot help"
        );
    }
    // The transient kind keeps its own code.
    engine.store().broken.store(false, Ordering::SeqCst);
    engine.store().fail.store(true, Ordering::SeqCst);
    let error = engine.hold(slot, "k").await.unwrap_err();
    assert_eq!(error.code(), "store_unavailable");
    assert!(error.is_transient());
}

#[tokio::test(start_paused = true)]
async fn availability_is_never_older_than_twice_the_cache_period() {
    let clock = ManualClock::new(start());
    // The defaults: a 10 s cache period, so nothing older than 20 s is served.
    let engine = BookingEngine::builder(Probe::default())
        .clock(clock.clone())
        .build();
    let first = slot(&engine, 1, chrono::Duration::hours(1)).await;
    assert_eq!(
        engine
            .availability(AvailabilityQuery::all())
            .await
            .unwrap()
            .len(),
        1
    );
    // A second slot the cache cannot know about (written behind the engine's back).
    let hidden = NewSlot::new(
        start() + chrono::Duration::hours(2),
        start() + chrono::Duration::hours(3),
        1,
    );
    engine
        .store()
        .inner
        .create_slot(&hidden, chrono::Utc::now())
        .await
        .unwrap();

    // Inside the bound a reader is served the stale copy at once while one refresh runs.
    tokio::time::advance(Duration::from_secs(15)).await;
    let stale = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!((stale.len(), stale[0].slot_id), (1, first));
    assert_eq!(stale.age(), Duration::from_secs(15));
    engine.store().read_signalled(2).await;
    assert_eq!(engine.store().reads(), 2, "one refresh for the stale read");

    // After a quiet spell past the bound, a reader waits for a fresh read instead of being
    // handed the old copy.
    engine
        .store()
        .inner
        .create_slot(&hidden, chrono::Utc::now())
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(21)).await;
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(listing.len(), 3, "a fresh read, not a 21 s old copy");
    assert_eq!(listing.age(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn the_staleness_bound_is_configurable() {
    let clock = ManualClock::new(start());
    let engine = BookingEngine::builder(Probe::default())
        .clock(clock.clone())
        .cache_period(Duration::from_secs(10))
        .max_age(Duration::from_secs(60))
        .build();
    slot(&engine, 1, chrono::Duration::hours(1)).await;
    engine.availability(AvailabilityQuery::all()).await.unwrap();
    let hidden = NewSlot::new(
        start() + chrono::Duration::hours(2),
        start() + chrono::Duration::hours(3),
        1,
    );
    engine
        .store()
        .inner
        .create_slot(&hidden, chrono::Utc::now())
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(59)).await;
    let stale = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!((stale.len(), stale.age()), (1, Duration::from_secs(59)));

    // A bound below the period shortens the period: nothing is served past it.
    let engine = BookingEngine::builder(Probe::default())
        .clock(clock.clone())
        .cache_period(Duration::from_secs(10))
        .max_age(Duration::from_secs(3))
        .build();
    slot(&engine, 1, chrono::Duration::hours(1)).await;
    engine.availability(AvailabilityQuery::all()).await.unwrap();
    tokio::time::advance(Duration::from_secs(3)).await;
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(listing.age(), Duration::ZERO);
    assert_eq!(engine.store().reads(), 2);
}

#[tokio::test]
async fn a_store_that_refuses_an_active_hold_is_an_error_not_a_panic() {
    let clock = ManualClock::new(start());
    let engine = engine(
        Probe {
            refuse_confirm: true,
            ..Probe::default()
        },
        &clock,
    );
    let slot = slot(&engine, 1, chrono::Duration::hours(1)).await;
    let hold = engine.hold(slot, "k").await.unwrap().hold;
    let error = engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "store_failed");
    assert!(!error.is_transient());
    assert!(
        error
            .to_string()
            .contains("refused to confirm hold 1, which is held"),
        "{error}"
    );
}

#[tokio::test]
async fn holds_last_the_configured_lifetime() {
    let clock = ManualClock::new(start());
    let engine = BookingEngine::builder(MemoryStore::new())
        .hold_ttl(Duration::from_secs(90))
        .clock(clock.clone())
        .build();
    let starts_at = start() + chrono::Duration::hours(1);
    let slot = engine
        .create_slot(NewSlot::new(
            starts_at,
            starts_at + chrono::Duration::hours(1),
            1,
        ))
        .await
        .unwrap();
    let hold = engine.hold(slot.slot_id, "k").await.unwrap().hold;
    assert_eq!(hold.expires_at, start() + chrono::Duration::seconds(90));
    clock.advance(chrono::Duration::seconds(90));
    assert_eq!(
        engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Expired
    );
    assert_eq!(
        BookingEngine::new(MemoryStore::new()).hold_ttl(),
        Duration::from_secs(300),
        "default hold lifetime"
    );
}

#[tokio::test]
async fn the_engine_works_over_a_trait_object() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine = BookingEngine::new(store);
    let starts_at = chrono::Utc::now() + chrono::Duration::hours(1);
    let slot = engine
        .create_slot(NewSlot::new(
            starts_at,
            starts_at + chrono::Duration::hours(1),
            1,
        ))
        .await
        .unwrap();
    assert!(engine.hold(slot.slot_id, "k").await.is_ok());
    fn assert_send_sync<T: Send + Sync + Clone + 'static>(_: &T) {}
    assert_send_sync(&engine);
}

#[tokio::test(start_paused = true)]
async fn c5_a_failing_store_gets_the_stale_listing_then_the_error() {
    let clock = ManualClock::new(start());
    let engine = engine(Probe::default(), &clock);
    let slot = slot(&engine, 2, chrono::Duration::hours(1)).await;
    engine.availability(AvailabilityQuery::all()).await.unwrap();
    engine.store().fail.store(true, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(11)).await;
    let stale = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        stale[0].slot_id, slot,
        "stale copy served while the store is down"
    );
    assert_eq!(stale.fresh_for(), Duration::ZERO);
    tokio::time::advance(Duration::from_secs(10)).await;
    let error = engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "store_unavailable", "past the stale bound");
    engine.store().fail.store(false, Ordering::SeqCst);
    assert_eq!(
        engine
            .availability(AvailabilityQuery::all())
            .await
            .unwrap()
            .len(),
        1,
        "the error was not cached"
    );
}

#[tokio::test]
async fn a_panicking_store_is_a_store_error_not_a_panic() {
    use slot_booking::conformance::faults::{FaultRates, FaultyStore};
    let rates = FaultRates {
        panic_before: 100,
        ..FaultRates::NONE
    };
    let store = FaultyStore::new(MemoryStore::new(), rates, 7);
    store.set_enabled(false);
    let engine = BookingEngine::new(store);
    let starts_at = chrono::Utc::now() + chrono::Duration::hours(1);
    let slot = engine
        .create_slot(NewSlot::new(
            starts_at,
            starts_at + chrono::Duration::hours(1),
            1,
        ))
        .await
        .unwrap();
    engine.store().set_enabled(true);
    for error in [
        engine.hold(slot.slot_id, "k").await.unwrap_err(),
        engine
            .get_hold(&Scope::Anonymous, HoldId(1))
            .await
            .unwrap_err(),
        engine
            .availability(AvailabilityQuery::all())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(
            error.code(),
            "store_failed",
            "a panic is a bug, not an outage"
        );
        assert!(error.to_string().contains("panicked"), "{error}");
    }
}

#[tokio::test]
async fn a_dropped_cancel_still_commits_and_invalidates() {
    let gate = Arc::new(Semaphore::new(0));
    let clock = ManualClock::new(start());
    let engine = engine(
        Probe {
            cancel_gate: Some(Arc::clone(&gate)),
            ..Probe::default()
        },
        &clock,
    );
    let slot = slot(&engine, 1, chrono::Duration::hours(1)).await;
    let hold = engine.hold(slot, "k").await.unwrap().hold;
    let before = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(before[0].remaining, 0);

    let caller = tokio::spawn({
        let engine = engine.clone();
        async move { engine.cancel(&Scope::Anonymous, hold.hold_id).await }
    });
    engine.store().cancel_reached.wait_total(1).await;
    caller.abort();
    assert!(
        caller.await.unwrap_err().is_cancelled(),
        "the caller went away"
    );

    gate.add_permits(1);
    // On this single-threaded runtime the engine's write task runs on from the store's return
    // to its cache invalidation without yielding, before this test task runs again.
    engine.store().cancel_done.wait_total(1).await;
    assert_eq!(
        engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Cancelled,
        "the store write ran to the end without its caller"
    );
    let after = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        after[0].remaining, 1,
        "and the cache was invalidated after its commit"
    );
}

/// `Scope::Anonymous` acts as an anonymous client: an owner's hold is not found through it, an
/// anonymous one is; the owner's scope finds the owner's hold.
#[tokio::test]
async fn the_anonymous_scope_finds_anonymous_holds_only() {
    let engine = BookingEngine::new(MemoryStore::new());
    let starts_at = chrono::Utc::now() + chrono::Duration::hours(2);
    let slot = engine
        .create_slot(NewSlot::new(
            starts_at,
            starts_at + chrono::Duration::hours(1),
            4,
        ))
        .await
        .unwrap();
    let owned = engine
        .place_hold(
            slot_booking::NewHold::new(slot.slot_id, "owned").owner("alice".parse().unwrap()),
        )
        .await
        .unwrap()
        .hold
        .hold_id;
    let anonymous = engine
        .hold(slot.slot_id, "anonymous")
        .await
        .unwrap()
        .hold
        .hold_id;

    let anon = &Scope::Anonymous;
    let not_found =
        |r: Result<Hold, BookingError>| matches!(r, Err(BookingError::HoldNotFound { .. }));
    assert!(not_found(engine.get_hold(anon, owned).await));
    assert!(not_found(engine.renew(anon, owned, None).await));
    assert!(not_found(engine.confirm(anon, owned).await));
    assert!(not_found(engine.cancel(anon, owned).await));
    assert_eq!(
        engine.get_hold(anon, anonymous).await.unwrap().hold_id,
        anonymous
    );
    assert_eq!(
        engine.renew(anon, anonymous, None).await.unwrap().status,
        HoldStatus::Held
    );
    assert_eq!(
        engine.confirm(anon, anonymous).await.unwrap().status,
        HoldStatus::Confirmed
    );
    assert_eq!(
        engine.cancel(anon, anonymous).await.unwrap().status,
        HoldStatus::Cancelled
    );
    let owner = Scope::Owner("alice".parse().unwrap());
    assert_eq!(
        engine.confirm(&owner, owned).await.unwrap().status,
        HoldStatus::Confirmed
    );
}

/// A store that answers bookings with no lines: broken, and the engine says so with a store
/// error instead of panicking on a first line that is not there.
struct LinelessBookings(MemoryStore);

slot_booking::forward_store!(impl[] HoldStore for LinelessBookings, |this| &this.0);

#[async_trait]
impl slot_booking::BookingStore for LinelessBookings {
    async fn create_booking(
        &self,
        request: slot_booking::BookingRequest<'_>,
    ) -> Result<Decided<slot_booking::BookingOutcome>, StoreError> {
        let empty = slot_booking::Booking {
            booking_id: HoldId(1),
            lines: Vec::new(),
        };
        Ok(Decided::new(
            request.now,
            slot_booking::BookingOutcome::Created(empty),
        ))
    }
    async fn get_booking(
        &self,
        booking_id: HoldId,
        _: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<slot_booking::Booking>>, StoreError> {
        let lines = Vec::new();
        Ok(Decided::new(
            now,
            Some(slot_booking::Booking { booking_id, lines }),
        ))
    }
    async fn confirm_booking(
        &self,
        booking_id: HoldId,
        _: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<slot_booking::Booking>>, StoreError> {
        let lines = Vec::new();
        let empty = slot_booking::Booking { booking_id, lines };
        Ok(Decided::new(now, Transition::NotApplied(empty)))
    }
    async fn cancel_booking(
        &self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<slot_booking::Booking>>, StoreError> {
        self.confirm_booking(booking_id, scope, now).await
    }
    async fn renew_booking(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition<slot_booking::Booking>>, StoreError> {
        self.confirm_booking(request.hold_id, request.scope, request.now)
            .await
    }
}

#[tokio::test]
async fn a_store_answering_a_booking_of_no_lines_fails_the_call_without_a_panic() {
    let engine = BookingEngine::new(LinelessBookings(MemoryStore::new()));
    let starts_at = chrono::Utc::now() + chrono::Duration::hours(2);
    let mut slots = Vec::new();
    for _ in 0..2 {
        let slot = NewSlot::new(starts_at, starts_at + chrono::Duration::hours(1), 4);
        slots.push(engine.create_slot(slot).await.unwrap().slot_id);
    }
    let request = slot_booking::NewBooking::new("k")
        .line(slots[0], 1)
        .line(slots[1], 1);
    let any = Scope::Anonymous;
    let errors = [
        engine.book(request).await.map(|_| ()).unwrap_err(),
        engine
            .get_booking(&any, HoldId(1))
            .await
            .map(|_| ())
            .unwrap_err(),
        engine
            .confirm_booking(&any, HoldId(1))
            .await
            .map(|_| ())
            .unwrap_err(),
        engine
            .cancel_booking(&any, HoldId(1))
            .await
            .map(|_| ())
            .unwrap_err(),
        engine
            .renew_booking(&any, HoldId(1), None)
            .await
            .map(|_| ())
            .unwrap_err(),
    ];
    for error in errors {
        assert_eq!(error.code(), "store_failed", "{error}");
    }
}
