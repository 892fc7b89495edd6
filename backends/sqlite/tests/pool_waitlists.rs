//! Waitlists on slots that belong to pools, in the SQLite store beyond the conformance suite:
//! each step that frees a pool's units serves the pool's line in its own transaction (a cancel
//! on another slot of the pool, a pool capacity raise, a detach, the sweeper's reclaim, a
//! newcomer's pool refill), in strict order across the pool's slots; entries of a slot that
//! stopped selling do not block the pool's line; newcomers are refused while the line waits;
//! and a race of many tasks on a file database, checked afterwards with SQL.

mod common;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use chrono::Duration;
use common::*;
use slot_booking::waitlists::Joined;
use slot_booking::{
    BookingEngine, EventStore, HoldId, HoldOutcome, HoldRequest, HoldStatus, HoldStore,
    JoinOutcome, JoinRequest, ManualClock, NewHold, NewPool, NewSlot, OwnerId, PoolChange, PoolId,
    PoolStore, Scope, SlotId, Timestamp, Transition, WaitlistEntry, WaitlistStore,
};
use slot_booking_sqlite::SqliteStore;
use sqlx::{AssertSqlSafe, SqlitePool};
use tokio::task::JoinSet;

const ANYONE: Scope = Scope::Anonymous;

/// An engine on `clock` that reads the store on every availability call.
fn engine(store: SqliteStore, clock: &ManualClock) -> BookingEngine<SqliteStore> {
    BookingEngine::builder(store)
        .clock(clock.clone())
        .cache_period(std::time::Duration::ZERO)
        .build()
}

/// A slot of `capacity` starting `starts` seconds after `t0()`.
async fn slot_at(engine: &BookingEngine<SqliteStore>, capacity: i32, starts: i64) -> SlotId {
    engine
        .create_slot(NewSlot::new(at(starts), at(starts + 3600), capacity))
        .await
        .unwrap()
        .slot_id
}

/// A pool of `capacity` with `slots` attached.
async fn pool_of(engine: &BookingEngine<SqliteStore>, capacity: i32, slots: &[SlotId]) -> PoolId {
    let pool_id = engine
        .create_pool(NewPool::new(capacity))
        .await
        .unwrap()
        .pool_id;
    for &slot_id in slots {
        engine.attach_slot(pool_id, slot_id).await.unwrap();
    }
    pool_id
}

/// A hold of `quantity` units on `slot_id`, which must be placed.
async fn held(
    engine: &BookingEngine<SqliteStore>,
    slot_id: SlotId,
    key: &str,
    quantity: i32,
) -> HoldId {
    engine
        .place_hold(NewHold::new(slot_id, key).quantity(quantity))
        .await
        .unwrap()
        .hold
        .hold_id
}

/// Joins with `key` for `quantity` units at `priority`; the entry, which must wait.
async fn wait(
    engine: &BookingEngine<SqliteStore>,
    slot_id: SlotId,
    key: &str,
    quantity: i32,
    priority: i32,
) -> WaitlistEntry {
    match engine
        .join_waitlist(NewHold::new(slot_id, key).quantity(quantity), priority)
        .await
    {
        Ok(Joined::Waiting { entry, .. }) => entry,
        other => panic!("{key} should wait, got {other:?}"),
    }
}

/// The entry's offer as stored, if it was made.
async fn offer(store: &SqliteStore, entry: &WaitlistEntry) -> Option<slot_booking::Hold> {
    store
        .get_hold(entry.offer_id(), &Scope::BackOffice, t0())
        .await
        .unwrap()
        .outcome
}

/// The pool's stored `remaining`.
async fn pool_remaining(pool: &SqlitePool, pool_id: PoolId) -> i64 {
    sqlx::query_scalar("SELECT remaining FROM slot_booking_pools WHERE id = ?1")
        .bind(pool_id.get())
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The kinds of the events about `hold_id`, in log order.
async fn kinds_of(pool: &SqlitePool, hold_id: i64) -> Vec<String> {
    sqlx::query_scalar("SELECT kind FROM slot_booking_events WHERE hold_id = ?1 ORDER BY id")
        .bind(hold_id)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// A newcomer's hold of one unit: its error code, or "created".
async fn newcomer(engine: &BookingEngine<SqliteStore>, slot_id: SlotId, key: &str) -> String {
    match engine.place_hold(NewHold::new(slot_id, key)).await {
        Ok(_) => "created".to_owned(),
        Err(error) => error.code().to_owned(),
    }
}

/// What the store's availability lists for `slot_id`.
async fn available(store: &SqliteStore, slot_id: SlotId) -> Option<i32> {
    store
        .availability(t0())
        .await
        .unwrap()
        .outcome
        .iter()
        .find(|a| a.slot_id == slot_id)
        .map(|a| a.remaining)
}

/// A cancel on one slot of a pool offers the freed pool units to the pool's head waiting on
/// another slot, in the cancel's transaction (its events after the cancel's); while the pool's
/// line waits, a newcomer on a third slot that has the units is refused and availability lists
/// that slot with 0.
#[tokio::test]
async fn a_cancel_on_another_slot_of_the_pool_offers_to_the_pools_head() {
    let db = TempDb::new("pwl_cancel");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b, c) = (
        slot_at(&engine, 3, 3600).await,
        slot_at(&engine, 3, 3600).await,
        slot_at(&engine, 3, 3600).await,
    );
    let pool_id = pool_of(&engine, 4, &[a, b, c]).await;
    let taken = held(&engine, a, "a", 3).await;
    // The pool has 1 unit: 2 wait on slot b, which has 3.
    let entry = wait(&engine, b, "w", 2, 0).await;
    assert_eq!(available(&store, c).await, Some(0), "the pool's line waits");
    assert_eq!(newcomer(&engine, c, "n1").await, "sold_out");
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 1);

    engine.cancel(&ANYONE, taken).await.unwrap();
    let offered = offer(&store, &entry).await.expect("offered by the cancel");
    assert_eq!(
        (offered.slot_id, offered.quantity, offered.status),
        (b, 2, HoldStatus::Held)
    );
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 2);
    let order: Vec<(String, i64)> = sqlx::query_as(
        "SELECT kind, hold_id FROM slot_booking_events WHERE hold_id IS NOT NULL \
         ORDER BY id DESC LIMIT 3",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        order,
        vec![
            ("waitlist_offered".to_owned(), entry.entry_id.0),
            ("hold_placed".to_owned(), entry.entry_id.0),
            ("hold_cancelled".to_owned(), taken.get()),
        ]
    );
    // The line is empty: newcomers take the pool's units again.
    assert!(available(&store, c).await > Some(0));
    assert_eq!(newcomer(&engine, c, "n2").await, "created");
    for slot_id in [a, b, c] {
        assert_invariant(store.pool(), slot_id).await;
    }
}

/// A pool capacity raise serves the pool's line in strict order across its slots: a raise that
/// does not cover the head offers nobody (not even a smaller entry behind it on another slot),
/// a larger one offers the head, then the next.
#[tokio::test]
async fn a_pool_capacity_raise_serves_the_pools_line_in_order() {
    let db = TempDb::new("pwl_raise");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b) = (
        slot_at(&engine, 5, 3600).await,
        slot_at(&engine, 5, 3600).await,
    );
    let pool_id = pool_of(&engine, 2, &[a, b]).await;
    held(&engine, a, "a", 2).await;
    let first = wait(&engine, b, "first", 2, 0).await;
    let second = wait(&engine, a, "second", 1, 0).await;

    engine.change_pool_capacity(pool_id, 3).await.unwrap();
    assert_eq!(offer(&store, &first).await, None, "2 wanted, 1 free");
    assert_eq!(
        offer(&store, &second).await,
        None,
        "1 would fit, but it is behind the pool's head"
    );
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 1);

    let raised = engine.change_pool_capacity(pool_id, 5).await.unwrap();
    assert_eq!(
        (raised.capacity, raised.remaining),
        (5, 3),
        "answered as the change left the pool, before its line took units"
    );
    assert_eq!(offer(&store, &first).await.map(|h| h.quantity), Some(2));
    assert_eq!(offer(&store, &second).await.map(|h| h.quantity), Some(1));
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 0);
    assert_eq!(
        kinds_of(store.pool(), second.entry_id.0).await,
        vec!["hold_placed", "waitlist_offered"]
    );
}

/// Detaching a slot serves the pool's line (the slot's taken units went back to the pool) and
/// the detached slot's line (its entries left the pool's line, and may now fit its own units).
#[tokio::test]
async fn a_detach_serves_the_pools_line_and_the_detached_slots() {
    let db = TempDb::new("pwl_detach");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    // The pool's units go back to it.
    let (a, b) = (
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
    );
    let pool_id = pool_of(&engine, 2, &[a, b]).await;
    held(&engine, a, "a", 2).await;
    let on_b = wait(&engine, b, "on-b", 2, 0).await;
    let detached = engine.detach_slot(pool_id, a).await.unwrap();
    assert_eq!(
        (detached.slots.clone(), detached.remaining),
        (vec![b], 2),
        "answered as the detach left the pool, before its line took units"
    );
    assert_eq!(offer(&store, &on_b).await.map(|h| h.quantity), Some(2));
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 0);

    // The detached slot's own line.
    let (c, d) = (
        slot_at(&engine, 3, 3600).await,
        slot_at(&engine, 3, 3600).await,
    );
    let other = pool_of(&engine, 2, &[c, d]).await;
    held(&engine, d, "d", 2).await;
    let on_c = wait(&engine, c, "on-c", 1, 0).await;
    assert_eq!(offer(&store, &on_c).await, None, "the pool is short");
    engine.detach_slot(other, c).await.unwrap();
    let offered = offer(&store, &on_c)
        .await
        .expect("out of the pool, its slot's units are enough");
    assert_eq!(offered.slot_id, c);
    assert_eq!(pool_remaining(store.pool(), other).await, 0);
    for slot_id in [a, b, c, d] {
        assert_invariant(store.pool(), slot_id).await;
    }
}

/// Entries of a slot whose sales are closed, or that has started, are not in its pool's line:
/// they do not block the entries of its other slots, which a cancel serves; they stay waiting
/// on their own slot.
#[tokio::test]
async fn closed_and_started_slots_entries_do_not_block_the_pools_line() {
    let db = TempDb::new("pwl_stopped");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let early = slot_at(&engine, 2, 600).await;
    let (closed, open, other) = (
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
    );
    let pool_id = pool_of(&engine, 2, &[early, closed, open, other]).await;
    let taken = engine
        .place_hold(
            NewHold::new(other, "other")
                .quantity(2)
                .lifetime(std::time::Duration::from_secs(1800)),
        )
        .await
        .unwrap()
        .hold
        .hold_id;
    let on_early = wait(&engine, early, "early", 1, 0).await;
    let on_closed = wait(&engine, closed, "closed", 1, 0).await;
    let on_open = wait(&engine, open, "open", 2, 0).await;
    engine.close_sales(closed).await.unwrap();
    clock.set(at(700));

    engine.cancel(&ANYONE, taken).await.unwrap();
    assert_eq!(offer(&store, &on_early).await, None, "started");
    assert_eq!(offer(&store, &on_closed).await, None, "closed");
    assert_eq!(
        offer(&store, &on_open).await.map(|h| h.quantity),
        Some(2),
        "the first entry of a selling slot is the pool's head"
    );
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 0);
    let waiting: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM slot_booking_waitlist_entries ORDER BY id")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(waiting, vec![on_early.entry_id.0, on_closed.entry_id.0]);
}

/// The sweeper's reclaim of an expired hold on one slot of a pool offers the pool's units to
/// the head waiting on another slot, in its transaction (`hold_expired`, then the offer's
/// `hold_placed` and `waitlist_offered`).
#[tokio::test]
async fn the_sweepers_reclaim_offers_the_pools_units() {
    let db = TempDb::new("pwl_sweep");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b) = (
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
    );
    let pool_id = pool_of(&engine, 2, &[a, b]).await;
    let expiring = engine
        .place_hold(
            NewHold::new(a, "short")
                .quantity(2)
                .lifetime(std::time::Duration::from_secs(60)),
        )
        .await
        .unwrap()
        .hold
        .hold_id;
    let entry = wait(&engine, b, "w", 2, 0).await;
    let reclaimed = store.reclaim_expired(at(120), 100).await.unwrap();
    assert_eq!(
        reclaimed.iter().map(|h| h.hold_id).collect::<Vec<_>>(),
        vec![expiring]
    );
    let offered = offer(&store, &entry).await.expect("offered by the sweeper");
    assert_eq!((offered.created_at, offered.quantity), (at(120), 2));
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 0);
    let tail: Vec<(String, i64)> =
        sqlx::query_as("SELECT kind, hold_id FROM slot_booking_events ORDER BY id DESC LIMIT 3")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(
        tail,
        vec![
            ("waitlist_offered".to_owned(), entry.entry_id.0),
            ("hold_placed".to_owned(), entry.entry_id.0),
            ("hold_expired".to_owned(), expiring.get()),
        ]
    );
}

/// Closing a slot's sales takes its entries out of its pools' lines: the closing serves them,
/// and the next head, which fits, is offered (answered with the slot as closed). Removing a
/// slot does the same.
#[tokio::test]
async fn closing_or_removing_a_slot_serves_its_pools_lines() {
    let db = TempDb::new("pwl_close");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b, c) = (
        slot_at(&engine, 3, 3600).await,
        slot_at(&engine, 3, 3600).await,
        slot_at(&engine, 3, 3600).await,
    );
    let pool_id = pool_of(&engine, 3, &[a, b, c]).await;
    held(&engine, a, "a", 1).await;
    let blocking = wait(&engine, a, "blocking", 3, 0).await;
    let behind = wait(&engine, b, "behind", 2, 0).await;
    assert_eq!(offer(&store, &behind).await, None, "behind the pool's head");
    let closed = engine.close_sales(a).await.unwrap();
    assert!(closed.closed);
    assert_eq!(offer(&store, &behind).await.map(|h| h.quantity), Some(2));
    assert_eq!(offer(&store, &blocking).await, None, "its slot is closed");
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 0);

    // Removal: the entry on e heads pool r's line but waits for pool s, which is spent; once
    // e is removed, the entry behind it on f is served.
    let (e, f, g) = (
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 1, 3600).await,
    );
    let r = pool_of(&engine, 4, &[e, f]).await;
    pool_of(&engine, 1, &[e, g]).await;
    held(&engine, g, "g", 1).await;
    let on_e = wait(&engine, e, "on-e", 1, 5).await;
    let on_f = wait(&engine, f, "on-f", 1, 0).await;
    assert_eq!(offer(&store, &on_f).await, None, "behind the head of r");
    let removed = engine.remove_slot(e).await.unwrap();
    assert!(removed.removed_at.is_some());
    assert_eq!(offer(&store, &on_f).await.map(|h| h.slot_id), Some(f));
    assert_eq!(offer(&store, &on_e).await, None);
    assert_eq!(pool_remaining(store.pool(), r).await, 3);
}

/// A newcomer whose pool is short reclaims the expired holds of the pool's slots (the pool
/// refill) to make room for itself, and serves nothing: a slot it reclaimed is also in a second
/// pool, whose head then has its units, but is served by the next step that serves that line
/// (here the sweeper's pass), as every store does.
#[tokio::test]
async fn a_newcomers_pool_refill_serves_no_line() {
    let db = TempDb::new("pwl_refill");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b, c) = (
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
    );
    let p = pool_of(&engine, 2, &[a, b]).await;
    let q = pool_of(&engine, 2, &[b, c]).await;
    let expiring = engine
        .place_hold(
            NewHold::new(b, "short")
                .quantity(2)
                .lifetime(std::time::Duration::from_secs(60)),
        )
        .await
        .unwrap()
        .hold
        .hold_id;
    let on_c = wait(&engine, c, "on-c", 2, 0).await;
    clock.set(at(120));
    assert_eq!(newcomer(&engine, a, "newcomer").await, "created");
    assert_eq!(
        kinds_of(store.pool(), expiring.get()).await,
        vec!["hold_placed", "hold_expired"],
        "reclaimed for the newcomer"
    );
    assert_eq!(
        offer(&store, &on_c).await,
        None,
        "the refill serves no line"
    );
    store.reclaim_expired(at(121), 100).await.unwrap();
    let offered = offer(&store, &on_c)
        .await
        .expect("the sweeper serves every line");
    assert_eq!((offered.slot_id, offered.quantity), (c, 2));
    assert_eq!(
        (
            pool_remaining(store.pool(), p).await,
            pool_remaining(store.pool(), q).await
        ),
        (1, 0)
    );
}

/// A head whose pool is short only by expired holds on another slot of the pool is ready: the
/// step that serves the pool's line reclaims them first (the pool refill, `hold_expired`),
/// then offers it.
#[tokio::test]
async fn a_ready_head_refills_its_pool_from_expired_holds_of_other_slots() {
    let db = TempDb::new("pwl_head_refill");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b, c) = (
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
    );
    let pool_id = pool_of(&engine, 2, &[a, b, c]).await;
    let expiring = engine
        .place_hold(
            NewHold::new(a, "short")
                .quantity(2)
                .lifetime(std::time::Duration::from_secs(60)),
        )
        .await
        .unwrap()
        .hold
        .hold_id;
    let on_b = wait(&engine, b, "on-b", 2, 0).await;
    clock.set(at(120));
    // A join on c serves c's line and the pool's: the pool's head, on b, is ready with a's
    // expired units.
    let on_c = wait(&engine, c, "on-c", 1, 0).await;
    assert_eq!(offer(&store, &on_b).await.map(|h| h.quantity), Some(2));
    assert_eq!(offer(&store, &on_c).await, None, "the pool is spent");
    let tail: Vec<(String, i64)> =
        sqlx::query_as("SELECT kind, hold_id FROM slot_booking_events ORDER BY id DESC LIMIT 3")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(
        tail,
        vec![
            ("waitlist_offered".to_owned(), on_b.entry_id.0),
            ("hold_placed".to_owned(), on_b.entry_id.0),
            ("hold_expired".to_owned(), expiring.get()),
        ]
    );
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 0);
    for slot_id in [a, b, c] {
        assert_invariant(store.pool(), slot_id).await;
    }
}

/// An entry on a slot of two pools must be the head of both: the freed units of one pool wait
/// while the other is short (newcomers on its slots refused), and go to the line when the
/// other frees too; its offer serves the next in its other pool's line in the same step.
#[tokio::test]
async fn an_entry_in_two_pools_waits_for_both() {
    let db = TempDb::new("pwl_two_pools");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b, c) = (
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
        slot_at(&engine, 2, 3600).await,
    );
    let p = pool_of(&engine, 2, &[a, b]).await;
    let q = pool_of(&engine, 2, &[b, c]).await;
    let on_a = held(&engine, a, "a", 2).await;
    let on_c = held(&engine, c, "c", 2).await;
    let first = wait(&engine, b, "first", 1, 0).await;
    let second = wait(&engine, c, "second", 1, 0).await;
    engine.cancel(&ANYONE, on_c).await.unwrap();
    assert_eq!(offer(&store, &first).await, None, "pool p is short");
    assert_eq!(offer(&store, &second).await, None, "behind the head of q");
    assert_eq!(pool_remaining(store.pool(), q).await, 2);
    assert_eq!(newcomer(&engine, c, "n").await, "sold_out");

    engine.cancel(&ANYONE, on_a).await.unwrap();
    assert!(offer(&store, &first).await.is_some(), "head of b, p and q");
    // Its offer made `second` the head of q: served in the same step.
    assert!(offer(&store, &second).await.is_some(), "next in q, at once");
    assert_eq!(
        (
            pool_remaining(store.pool(), p).await,
            pool_remaining(store.pool(), q).await
        ),
        (1, 0)
    );
}

/// A join on a slot of a pool: refused when it wants more than a pool's capacity (even if the
/// slot has it), held at once when every line is empty and the units are free.
#[tokio::test]
async fn joins_on_pooled_slots_are_refused_beyond_a_pools_capacity_or_held_at_once() {
    let db = TempDb::new("pwl_join");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let a = slot_at(&engine, 5, 3600).await;
    let pool_id = pool_of(&engine, 3, &[a]).await;
    let too_many = engine
        .join_waitlist(NewHold::new(a, "too-many").quantity(4), 0)
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), "quantity_exceeds_capacity");
    match engine
        .join_waitlist(NewHold::new(a, "at-once").quantity(3), 0)
        .await
    {
        Ok(Joined::Held { hold, replayed }) => {
            assert!(!replayed);
            assert_eq!(hold.quantity, 3);
        }
        other => panic!("expected a hold at once, got {other:?}"),
    }
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 0);
    let entry = wait(&engine, a, "later", 1, 0).await;
    assert_eq!(entry.slot_id, a);
}

// ---------------------------------------------------------------------------------------
// The race.

/// A small deterministic generator per task.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// The race's clock: every operation takes the next millisecond after `t0()`.
struct Ticks(AtomicI64);

impl Ticks {
    fn now(&self) -> Timestamp {
        t0() + Duration::milliseconds(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

/// What the race's tasks did, for the checks to know the run exercised every path.
#[derive(Default, Debug)]
struct Tally {
    held: u32,
    sold_out: u32,
    cancelled: u32,
    joined_waiting: u32,
    joined_held: u32,
    pool_changes: u32,
    reclaimed: u32,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.held += other.held;
        self.sold_out += other.sold_out;
        self.cancelled += other.cancelled;
        self.joined_waiting += other.joined_waiting;
        self.joined_held += other.joined_held;
        self.pool_changes += other.pool_changes;
        self.reclaimed += other.reclaimed;
    }
}

const ROUNDS: u64 = 60;

/// Holds on the "freeing" slots (some short-lived), half of them cancelled.
async fn freer(store: Arc<SqliteStore>, ticks: Arc<Ticks>, slots: Vec<SlotId>, i: u64) -> Tally {
    let mut rng = Lcg(i + 1);
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let slot_id = slots[rng.next(slots.len() as u64) as usize];
        let key = key(&format!("freer-{i}-{round}"));
        let now = ticks.now();
        let lifetime = if rng.next(2) == 0 { 15 } else { 60 };
        let request = HoldRequest {
            quantity: 1 + rng.next(2) as i32,
            expires_at: now + Duration::milliseconds(lifetime),
            ..request(slot_id, &key, now)
        };
        match store.create_hold(request).await.unwrap().outcome {
            HoldOutcome::Created(hold) => {
                tally.held += 1;
                if rng.next(2) == 0 {
                    tokio::task::yield_now().await;
                    let cancelled = store
                        .cancel_hold(hold.hold_id, &ANYONE, ticks.now())
                        .await
                        .unwrap()
                        .outcome;
                    if matches!(cancelled, Transition::Applied(_)) {
                        tally.cancelled += 1;
                    }
                }
            }
            HoldOutcome::SoldOut => tally.sold_out += 1,
            other => panic!("freer: {other:?}"),
        }
    }
    tally
}

/// Joins on the "waiting" slots (owned, short offer windows, two priorities); some offers
/// are cancelled by their owner.
async fn joiner(store: Arc<SqliteStore>, ticks: Arc<Ticks>, slots: Vec<SlotId>, i: u64) -> Tally {
    let mut rng = Lcg(100 + i);
    let mut tally = Tally::default();
    let owner = OwnerId::new(format!("joiner-{i}")).unwrap();
    let mut mine = Vec::new();
    for round in 0..ROUNDS / 4 {
        // Between joins, the rest of the race moves on.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        let slot_id = slots[rng.next(slots.len() as u64) as usize];
        let key = key(&format!("joiner-{i}-{round}"));
        let now = ticks.now();
        let join = JoinRequest {
            hold: HoldRequest {
                owner: Some(&owner),
                quantity: 1 + rng.next(3) as i32,
                expires_at: now + Duration::milliseconds(10),
                ..request(slot_id, &key, now)
            },
            priority: if rng.next(4) == 0 { 5 } else { 0 },
        };
        match store.join_waitlist(join).await.unwrap().outcome {
            JoinOutcome::Waiting { entry, .. } => {
                tally.joined_waiting += 1;
                mine.push(entry.offer_id());
            }
            JoinOutcome::Held { hold, .. } => {
                tally.joined_held += 1;
                mine.push(hold.hold_id);
            }
            other => panic!("joiner: {other:?}"),
        }
        // Often, cancel an offer made to an earlier entry of this owner.
        if rng.next(2) == 0 {
            if let Some(&offer_id) = mine.get(rng.next(mine.len() as u64) as usize) {
                let cancelled = store
                    .cancel_hold(offer_id, &Scope::Owner(owner.clone()), ticks.now())
                    .await
                    .unwrap()
                    .outcome;
                if matches!(cancelled, Transition::Applied(_)) {
                    tally.cancelled += 1;
                }
            }
        }
    }
    tally
}

/// Newcomers' one-unit holds on the "waiting" slots.
async fn newcomers(
    store: Arc<SqliteStore>,
    ticks: Arc<Ticks>,
    slots: Vec<SlotId>,
    i: u64,
) -> Tally {
    let mut rng = Lcg(200 + i);
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let slot_id = slots[rng.next(slots.len() as u64) as usize];
        let key = key(&format!("newcomer-{i}-{round}"));
        let now = ticks.now();
        let request = HoldRequest {
            expires_at: now + Duration::milliseconds(30),
            ..request(slot_id, &key, now)
        };
        match store.create_hold(request).await.unwrap().outcome {
            HoldOutcome::Created(_) => tally.held += 1,
            HoldOutcome::SoldOut => tally.sold_out += 1,
            other => panic!("newcomer: {other:?}"),
        }
    }
    tally
}

/// The pool's capacity moved up and down (a cut that would take held units is refused).
async fn admin(store: Arc<SqliteStore>, ticks: Arc<Ticks>, pool_id: PoolId) -> Tally {
    let mut rng = Lcg(300);
    let mut tally = Tally::default();
    for _ in 0..ROUNDS / 2 {
        let capacity = 8 + rng.next(6) as i32;
        match store
            .change_pool_capacity(pool_id, capacity.into(), ticks.now())
            .await
            .unwrap()
            .outcome
        {
            PoolChange::Applied(_) => tally.pool_changes += 1,
            PoolChange::InUse(_) => {}
            other => panic!("admin: {other:?}"),
        }
        tokio::task::yield_now().await;
    }
    tally
}

/// The expired-hold sweeper, every millisecond until `done`.
async fn sweeper(store: Arc<SqliteStore>, ticks: Arc<Ticks>, done: Arc<AtomicBool>) -> Tally {
    let mut tally = Tally::default();
    while !done.load(Ordering::Relaxed) {
        let reclaimed = store.reclaim_expired(ticks.now(), 20).await.unwrap();
        tally.reclaimed += u32::try_from(reclaimed.len()).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    tally
}

/// A count from SQL.
async fn count(pool: &SqlitePool, sql: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Many tasks on two stores over one file: holds with cancels and expiries on some slots of a
/// pool, joins (with offers cancelled) and newcomers on its other slots, the pool's capacity
/// raised and cut, the sweeper. Checked afterwards with SQL: no slot and no pool oversold
/// (offers counted as held), every counter as the rows say, no entry offered twice, no
/// newcomer hold placed while an entry waited in the pool's line, and, after a last sweep, no
/// entry waiting that is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pool_waitlists_race() {
    let db = TempDb::new("pwl_race");
    let (a, b) = (Arc::new(db.store().await), Arc::new(db.store().await));
    let ticks = Arc::new(Ticks(AtomicI64::new(0)));
    let setup = t0();
    let mut slots = Vec::new();
    for _ in 0..6 {
        let slot = a
            .create_slot(&NewSlot::new(at(3600), at(7200), 4), setup)
            .await
            .unwrap();
        slots.push(slot.slot_id);
    }
    let pool_id = a
        .create_pool(&NewPool::new(8), setup)
        .await
        .unwrap()
        .pool_id;
    for &slot_id in &slots {
        let attached = a
            .attach_slot(pool_id, slot_id, setup)
            .await
            .unwrap()
            .outcome;
        assert!(matches!(attached, PoolChange::Applied(_)), "{attached:?}");
    }
    let (freeing, waiting) = (slots[..3].to_vec(), slots[3..].to_vec());

    let store_of = |i: u64| Arc::clone(if i.is_multiple_of(2) { &a } else { &b });
    let mut tasks = JoinSet::new();
    for i in 0..4 {
        tasks.spawn(freer(store_of(i), Arc::clone(&ticks), freeing.clone(), i));
    }
    for i in 0..4 {
        tasks.spawn(joiner(store_of(i), Arc::clone(&ticks), waiting.clone(), i));
    }
    for i in 0..3 {
        tasks.spawn(newcomers(
            store_of(i),
            Arc::clone(&ticks),
            waiting.clone(),
            i,
        ));
    }
    tasks.spawn(admin(Arc::clone(&b), Arc::clone(&ticks), pool_id));
    let done = Arc::new(AtomicBool::new(false));
    let sweeping = tokio::spawn(sweeper(
        Arc::clone(&a),
        Arc::clone(&ticks),
        Arc::clone(&done),
    ));
    let mut tally = Tally::default();
    while let Some(finished) = tasks.join_next().await {
        tally.add(&finished.unwrap());
    }
    done.store(true, Ordering::Relaxed);
    tally.add(&sweeping.await.unwrap());
    // A last sweep at the end of the run.
    let end = ticks.now();
    a.reclaim_expired(end, 10_000).await.unwrap();
    let pool = a.pool();

    // No slot oversold: offers are held holds; each slot's remaining is its capacity less
    // what its held and confirmed holds take.
    let oversold_slots = count(
        pool,
        "SELECT count(*) FROM slot_booking_slots s WHERE s.remaining < 0 \
           OR s.capacity - s.remaining <> (SELECT coalesce(SUM(h.quantity), 0) \
                                           FROM slot_booking_holds h WHERE h.slot_id = s.id \
                                             AND h.status IN ('held', 'confirmed'))",
    )
    .await;
    assert_eq!(oversold_slots, 0, "slots oversold or miscounted");
    let oversold_pools = count(
        pool,
        "SELECT count(*) FROM slot_booking_pools p WHERE p.remaining < 0 \
           OR p.capacity - p.remaining <> (SELECT coalesce(SUM(h.quantity), 0) \
                                           FROM slot_booking_slot_pools sp \
                                           JOIN slot_booking_holds h ON h.slot_id = sp.slot_id \
                                           WHERE sp.pool_id = p.id \
                                             AND h.status IN ('held', 'confirmed'))",
    )
    .await;
    assert_eq!(oversold_pools, 0, "the pool oversold or miscounted");
    let miscounted_lines = count(
        pool,
        "SELECT count(*) FROM slot_booking_slots s WHERE s.waiting <> \
           (SELECT count(*) FROM slot_booking_waitlist_entries e WHERE e.slot_id = s.id)",
    )
    .await;
    assert_eq!(miscounted_lines, 0, "a slot's waiting counter is off");

    // No entry offered twice; every offer is the hold of an entry's number, and no entry
    // still waits once offered.
    let offered_twice = count(
        pool,
        "SELECT count(*) FROM (SELECT hold_id FROM slot_booking_events \
                               WHERE kind = 'waitlist_offered' \
                               GROUP BY hold_id HAVING count(*) > 1)",
    )
    .await;
    assert_eq!(offered_twice, 0, "an entry offered twice");
    let placed_twice = count(
        pool,
        "SELECT count(*) FROM (SELECT hold_id FROM slot_booking_events \
                               WHERE kind = 'hold_placed' \
                               GROUP BY hold_id HAVING count(*) > 1)",
    )
    .await;
    assert_eq!(placed_twice, 0, "a hold id placed twice");
    let offered_and_waiting = count(
        pool,
        "SELECT count(*) FROM slot_booking_waitlist_entries e \
         JOIN slot_booking_holds h ON h.id = e.id",
    )
    .await;
    assert_eq!(offered_and_waiting, 0, "an offered entry still waits");
    let offers = count(
        pool,
        "SELECT count(*) FROM slot_booking_events o \
         JOIN slot_booking_holds h ON h.id = o.hold_id \
         WHERE o.kind = 'waitlist_offered'",
    )
    .await;

    // No newcomer placed while anyone waited in the pool's line (every slot of the one pool
    // sells all along). Ids are drawn in commit order from one sequence shared by holds and
    // entries, and events are logged in commit order: an entry with a lower id than a newcomer
    // joined before it, and waited at its insert unless its offer was logged before the
    // newcomer's `hold_placed`. No entry leaves in this race.
    let jumped = count(
        pool,
        "WITH offered AS (SELECT hold_id AS id, id AS event FROM slot_booking_events \
                          WHERE kind = 'waitlist_offered'), \
              entries AS (SELECT id FROM slot_booking_waitlist_entries \
                          UNION SELECT id FROM offered), \
              newcomers AS (SELECT h.id, p.id AS placed FROM slot_booking_holds h \
                            JOIN slot_booking_events p ON p.hold_id = h.id \
                                                      AND p.kind = 'hold_placed' \
                            WHERE h.id NOT IN (SELECT id FROM offered)) \
         SELECT count(*) FROM newcomers n \
         WHERE EXISTS (SELECT 1 FROM entries e WHERE e.id < n.id \
                       AND NOT EXISTS (SELECT 1 FROM offered o \
                                       WHERE o.id = e.id AND o.event < n.placed))",
    )
    .await;
    assert_eq!(
        jumped, 0,
        "a newcomer took units while the pool's line waited"
    );

    // After the last sweep, the pool's head (every slot sells) is not ready: its slot or the
    // pool is short of its quantity.
    let ready_heads = count(
        pool,
        "SELECT count(*) FROM (SELECT e.quantity, s.remaining AS slot_left, \
                                      p.remaining AS pool_left \
                               FROM slot_booking_waitlist_entries e \
                               JOIN slot_booking_slots s ON s.id = e.slot_id \
                               JOIN slot_booking_slot_pools sp ON sp.slot_id = e.slot_id \
                               JOIN slot_booking_pools p ON p.id = sp.pool_id \
                               ORDER BY e.priority DESC, e.id LIMIT 1) \
         WHERE slot_left >= quantity AND pool_left >= quantity",
    )
    .await;
    assert_eq!(ready_heads, 0, "a ready head was left waiting");
    for &slot_id in &slots {
        assert_invariant(pool, slot_id).await;
    }

    // The run exercised every path.
    assert!(tally.held > 0 && tally.sold_out > 0, "{tally:?}");
    assert!(tally.cancelled > 0 && tally.reclaimed > 0, "{tally:?}");
    assert!(
        tally.joined_waiting > 0 && tally.pool_changes > 0,
        "{tally:?}"
    );
    assert!(offers > 0, "no entry was offered: {tally:?}");
    let expired_offers = count(
        pool,
        "SELECT count(*) FROM slot_booking_holds h \
         JOIN slot_booking_events o ON o.hold_id = h.id AND o.kind = 'waitlist_offered' \
         WHERE h.status = 'expired'",
    )
    .await;
    eprintln!("race: {tally:?}, offers {offers}, offers expired {expired_offers}");
}

/// A booking with a line on a slot whose pool's line waits is refused, that line sold out
/// (0 units free) although the slot and the pool have the units, and nothing is taken.
#[tokio::test]
async fn a_booking_line_waits_behind_its_pools_line() {
    let db = TempDb::new("pwl_booking");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b, c) = (
        slot_at(&engine, 3, 3600).await,
        slot_at(&engine, 3, 3600).await,
        slot_at(&engine, 3, 3600).await,
    );
    let pool_id = pool_of(&engine, 4, &[a, b]).await;
    held(&engine, a, "a", 3).await;
    wait(&engine, a, "w", 2, 0).await;
    let refused = engine
        .book(
            slot_booking::NewBooking::new("booking")
                .line(b, 2)
                .line(c, 1),
        )
        .await
        .unwrap_err();
    match refused {
        slot_booking::BookingError::LinesUnavailable { lines } => {
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert_eq!(lines[0].slot_id, b);
            assert_eq!(
                lines[0].problem,
                slot_booking::LineProblem::SoldOut { free: 0 },
                "{lines:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(pool_remaining(store.pool(), pool_id).await, 1);
    assert_counts(store.pool(), c, (3, 3, 0, 0)).await;
}
