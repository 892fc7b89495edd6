//! Slot administration as stored by SQLite: what the rows look like after each change, the
//! operator's listing checked against the reference store, and the edges of 64-bit arithmetic.

mod common;

use slot_booking::{HoldStore, SlotAdmin};
use std::future::Future;

use chrono::Duration;
use common::*;
use slot_booking::{
    AvailabilityQuery, Decided, HoldOutcome, MemoryStore, NewSlot, PageRequest, ResourceId, Scope,
    SlotChange, SlotCursor, SlotId, SlotUsage, Store, StoreError, Timestamp, Transition,
};
use slot_booking_sqlite::SqliteStore;
use sqlx::SqlitePool;

fn applied(change: SlotChange) -> slot_booking::Slot {
    match change {
        SlotChange::Applied(slot) => slot,
        other => panic!("expected Applied, got {other:?}"),
    }
}

fn in_use(change: SlotChange) -> SlotUsage {
    match change {
        SlotChange::InUse(usage) => usage,
        other => panic!("expected InUse, got {other:?}"),
    }
}

/// A migrated store on a fresh file named after `name`, holding one slot of `capacity`: the
/// file (keep it until the end of the test), the store, its pool and the slot.
async fn one_slot(name: &str, capacity: i32) -> (TempDb, SqliteStore, SqlitePool, SlotId) {
    let db = TempDb::new(name);
    let store = db.store().await;
    let slot_id = slot(&store, capacity).await;
    let pool = store.pool().clone();
    (db, store, pool, slot_id)
}

/// What the store decided, for a call that must not fail.
async fn outcome<T>(call: impl Future<Output = Result<Decided<T>, StoreError>>) -> T {
    call.await.unwrap().outcome
}

/// (capacity, remaining) of the slot after a capacity change that must apply.
async fn resized(store: &impl Store, slot_id: SlotId, capacity: i32, now: Timestamp) -> (i32, i32) {
    let slot = applied(outcome(store.change_capacity(slot_id, capacity.into(), now)).await);
    (slot.capacity, slot.stored_remaining)
}

/// Statuses of the slot's holds by id, read with SQL.
async fn statuses(pool: &SqlitePool, slot_id: SlotId) -> Vec<String> {
    sqlx::query_scalar("SELECT status FROM slot_booking_holds WHERE slot_id = ?1 ORDER BY id")
        .bind(slot_id.get())
        .fetch_all(pool)
        .await
        .unwrap()
}

/// Two holds of 2 units on a slot of 5, one expiring at `at(60)`: lowering the capacity
/// reclaims the expired hold only when that makes it fit, and a refused change leaves it held.
#[tokio::test]
async fn capacity_changes_reclaim_only_when_that_makes_them_fit() {
    let (_db, store, pool, slot_id) = one_slot("capacity", 5).await;
    for (k, lifetime) in [("short", 60), ("long", 600)] {
        let k = key(k);
        let mut req = request(slot_id, &k, at(0));
        req.quantity = 2;
        req.expires_at = at(lifetime);
        created(outcome(store.create_hold(req)).await);
    }
    // Fits as stored (1 free unit): nothing reclaimed, though the short hold has expired.
    assert_eq!(resized(&store, slot_id, 4, at(120)).await, (4, 0));
    assert_eq!(statuses(&pool, slot_id).await, ["held", "held"]);
    // 1 would take an active unit even with the expired ones: refused, nothing reclaimed,
    // the units as stored.
    let usage = in_use(outcome(store.change_capacity(slot_id, 1.into(), at(120))).await);
    assert_eq!(
        (usage.slot.stored_remaining, usage.held, usage.expired),
        (0, 2, 2)
    );
    assert_eq!(usage.taken(), 2);
    assert_eq!(statuses(&pool, slot_id).await, ["held", "held"]);
    assert_eq!(counts(&pool, slot_id).await, (4, 0, 4, 0));
    // 2 fits only with the expired hold reclaimed: it is, and the change applies.
    assert_eq!(resized(&store, slot_id, 2, at(120)).await, (2, 0));
    assert_eq!(statuses(&pool, slot_id).await, ["expired", "held"]);
    assert_invariant(&pool, slot_id).await;
    // Raising adds free units; a started slot changes too.
    assert_eq!(resized(&store, slot_id, 7, at(4000)).await, (7, 5));
    assert_invariant(&pool, slot_id).await;
    assert_eq!(
        outcome(store.change_capacity(SlotId(99), 3.into(), at(0))).await,
        SlotChange::NotFound
    );
}

/// A capacity moves between 1 and `i32::MAX` in both directions without overflowing.
#[tokio::test]
async fn capacity_changes_span_the_whole_i32_range() {
    let (_db, store, pool, slot_id) = one_slot("extremes", i32::MAX).await;
    assert_eq!(resized(&store, slot_id, 1, at(0)).await, (1, 1));
    assert_eq!(
        resized(&store, slot_id, i32::MAX, at(0)).await,
        (i32::MAX, i32::MAX)
    );
    created(hold(&store, slot_id, "one", at(0)).await);
    assert_eq!(resized(&store, slot_id, 1, at(0)).await, (1, 0));
    assert_invariant(&pool, slot_id).await;
}

/// Removal archives: `removed_at` is the `now` passed, the holds stay stored and replay, and
/// the slot is gone for every later change and for new holds.
#[tokio::test]
async fn removal_keeps_the_row_and_its_holds() {
    let (_db, store, pool, slot_id) = one_slot("removal", 2).await;
    let active = created(hold(&store, slot_id, "active", at(0)).await);
    let usage = in_use(outcome(store.remove_slot(slot_id, at(1))).await);
    assert_eq!((usage.held, usage.confirmed()), (1, 0));
    let cancelled = outcome(store.cancel_hold(active.hold_id, &Scope::BackOffice, at(2))).await;
    assert!(matches!(cancelled, Transition::Applied(_)));
    // An expired hold stands in the way only until the removal reclaims it.
    created(hold(&store, slot_id, "expiring", at(3)).await);
    let removed = applied(outcome(store.remove_slot(slot_id, at(1000))).await);
    assert_eq!(removed.removed_at, Some(at(1000)));
    assert_eq!(statuses(&pool, slot_id).await, ["cancelled", "expired"]);
    assert_eq!(store.get_slot(slot_id).await.unwrap(), Some(removed));
    assert_invariant(&pool, slot_id).await;

    for change in [
        outcome(store.remove_slot(slot_id, at(1001))).await,
        outcome(store.change_capacity(slot_id, 5.into(), at(1001))).await,
        outcome(store.set_closed(slot_id, true, at(1001))).await,
    ] {
        assert_eq!(change, SlotChange::NotFound);
    }
    assert!(matches!(
        hold(&store, slot_id, "new", at(1001)).await,
        HoldOutcome::SlotNotFound
    ));
    assert!(matches!(
        hold(&store, slot_id, "active", at(1001)).await,
        HoldOutcome::Replayed(h) if h.hold_id == active.hold_id
    ));
    assert!(outcome(store.availability(at(1001))).await.is_empty());
}

/// A closed slot leaves availability and takes no hold (the trigger refuses it, and nothing is
/// reclaimed for it), while its holds can still be confirmed.
#[tokio::test]
async fn closed_sales_refuse_holds_and_reclaim_nothing() {
    let (_db, store, pool, slot_id) = one_slot("closed", 2).await;
    let first = created(hold(&store, slot_id, "first", at(0)).await);
    created(hold(&store, slot_id, "expiring", at(0)).await);
    let closed = applied(outcome(store.set_closed(slot_id, true, at(1))).await);
    assert!(closed.closed);
    assert!(applied(outcome(store.set_closed(slot_id, true, at(1))).await).closed);
    assert!(outcome(store.availability(at(1))).await.is_empty());
    // At 400 the second hold has expired; a hold on the closed slot must not reclaim it.
    assert!(matches!(
        hold(&store, slot_id, "late", at(400)).await,
        HoldOutcome::SlotClosed
    ));
    assert_eq!(statuses(&pool, slot_id).await, ["held", "held"]);
    let confirmed = outcome(store.confirm_hold(first.hold_id, &Scope::BackOffice, at(200))).await;
    assert!(matches!(confirmed, Transition::Applied(_)));
    let reopened = applied(outcome(store.set_closed(slot_id, false, at(400))).await);
    assert!(!reopened.closed);
    created(hold(&store, slot_id, "late", at(400)).await);
    assert_eq!(
        statuses(&pool, slot_id).await,
        ["confirmed", "expired", "held"]
    );
    assert_invariant(&pool, slot_id).await;
    assert_eq!(
        outcome(store.set_closed(SlotId(99), true, at(0))).await,
        SlotChange::NotFound
    );
}

/// The listing's pages, for every filter tried, walked one and three slots at a time, equal
/// the reference store's: ties on `starts_at` broken by id, bounds half-open, closed, removed
/// and past slots included, units split at `now`.
#[tokio::test]
async fn listing_pages_match_the_reference_store() {
    let db = TempDb::new("listing");
    let sqlite = db.store().await;
    let memory = MemoryStore::new();
    let resources = [None, Some("room-a"), Some("room-b")];
    for i in 0..24_i64 {
        // Four slots share each start: ties are the common case.
        let starts = at(600 * (i / 4) - 1200);
        let mut new = NewSlot::new(starts, starts + Duration::minutes(30), 3);
        if let Some(r) = resources[(i % 3) as usize] {
            new = new.resource(ResourceId::new(r).unwrap());
        }
        let a = sqlite
            .create_slot(&new, chrono::Utc::now())
            .await
            .unwrap()
            .slot_id;
        let b = memory
            .create_slot(&new, chrono::Utc::now())
            .await
            .unwrap()
            .slot_id;
        assert_eq!(a, b);
    }
    // The same history on both: holds (one expiring early), a closed and a removed slot.
    for store in [&sqlite as &dyn Store, &memory as &dyn Store] {
        for (slot, k, lifetime) in [(13, "a", 600), (13, "b", 30), (14, "c", 600), (20, "d", 30)] {
            let k = key(k);
            let mut req = request(SlotId(slot), &k, at(0));
            req.expires_at = at(lifetime);
            created(outcome(store.create_hold(req)).await);
        }
        applied(outcome(store.set_closed(SlotId(15), true, at(0))).await);
        applied(outcome(store.remove_slot(SlotId(16), at(0))).await);
    }
    let now = at(60);
    let room_a = ResourceId::new("room-a").unwrap();
    let filters = [
        AvailabilityQuery::all(),
        AvailabilityQuery::all().resource(room_a.clone()),
        AvailabilityQuery::all().resource(ResourceId::new("nobody").unwrap()),
        AvailabilityQuery::all().from(at(0)).to(at(1800)),
        AvailabilityQuery::all().resource(room_a).from(at(-600)),
        AvailabilityQuery::all().to(at(-1200)),
    ];
    for filter in &filters {
        let expected = outcome(memory.list_slots(filter, PageRequest::first(100), now)).await;
        let whole = outcome(sqlite.list_slots(filter, PageRequest::first(100), now)).await;
        assert_eq!(whole, expected, "{filter:?}");
        for limit in [1, 3] {
            let mut walked = Vec::new();
            let mut page = PageRequest::first(limit);
            loop {
                let rows = outcome(sqlite.list_slots(filter, page, now)).await;
                assert!(rows.len() <= limit as usize);
                let Some(last) = rows.last() else { break };
                page = PageRequest::after(SlotCursor::after(&last.slot), limit);
                walked.extend(rows);
            }
            assert_eq!(walked, expected, "{filter:?} by {limit}");
        }
    }
    let all =
        outcome(sqlite.list_slots(&AvailabilityQuery::all(), PageRequest::first(100), now)).await;
    assert_eq!(all.len(), 24);
    let slot_13 = all.iter().find(|u| u.slot.slot_id == SlotId(13)).unwrap();
    assert_eq!(
        (slot_13.slot.stored_remaining, slot_13.held, slot_13.expired),
        (1, 1, 1)
    );
}
