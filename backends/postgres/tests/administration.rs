//! Slot administration as the PostgreSQL statements do it (the shared behaviour is the
//! conformance suite): which of the two statements of a capacity change or a removal decides,
//! what a refused change leaves stored, capacities near `i32::MAX`, the listing's bounds, and
//! answers on the database's clock.

mod common;

use chrono::{Duration, TimeZone, Utc};
use common::*;
use slot_booking::{
    AvailabilityQuery, HoldId, HoldOutcome, NewSlot, PageRequest, ResourceId, SlotChange,
    SlotCursor, SlotId, SlotUsage,
};
use slot_booking::{HoldStore, SlotAdmin};
use slot_booking_postgres::PostgresStore;
use sqlx::AssertSqlSafe;

/// Places an anonymous one-unit hold at `now` lasting five minutes; its id.
async fn held(store: &PostgresStore, slot_id: SlotId, k: &str, now: i64) -> HoldId {
    match hold(store, slot_id, k, at(now)).await {
        HoldOutcome::Created(h) => h.hold_id,
        other => panic!("{k}: {other:?}"),
    }
}

/// Each hold's status as stored.
async fn statuses(store: &PostgresStore, ids: &[HoldId]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        out.push(
            sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT status FROM \"{}\".holds WHERE id = $1",
                store.schema()
            )))
            .bind(id.get())
            .fetch_one(store.pool())
            .await
            .unwrap(),
        );
    }
    out
}

/// The change of `slot_id`'s capacity to `capacity` at `now` (seconds after `t0`).
async fn capacity_change(
    store: &PostgresStore,
    slot_id: SlotId,
    capacity: i32,
    now: i64,
) -> SlotChange {
    store
        .change_capacity(slot_id, capacity.into(), at(now))
        .await
        .unwrap()
        .outcome
}

fn in_use(change: SlotChange) -> SlotUsage {
    match change {
        SlotChange::InUse(usage) => usage,
        other => panic!("expected InUse, got {other:?}"),
    }
}

fn applied(change: SlotChange) -> slot_booking::Slot {
    match change {
        SlotChange::Applied(slot) => slot,
        other => panic!("expected Applied, got {other:?}"),
    }
}

/// Lowering a capacity or removing a slot reclaims expired holds exactly when that makes the
/// change fit (in the second statement), and a refused change leaves them stored as held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reclaim_expired_holds_only_when_that_makes_them_fit() {
    let Some(ctx) = setup("admin_reclaim").await else {
        return;
    };
    let store = &ctx.store;
    // At(600): a and b (from at(0)) have expired, c (from at(400)) is active.
    let slot_id = slot(store, 3).await;
    let (a, b) = (
        held(store, slot_id, "a", 0).await,
        held(store, slot_id, "b", 0).await,
    );
    let c = held(store, slot_id, "c", 400).await;

    // To 1: needs both expired units. Reclaimed and changed in one update.
    let changed = applied(capacity_change(store, slot_id, 1, 600).await);
    assert_eq!((changed.capacity, changed.stored_remaining), (1, 0));
    assert_eq!(
        statuses(store, &[a, b, c]).await,
        ["expired", "expired", "held"]
    );
    assert_eq!(counts(store, slot_id).await, (1, 0, 1, 0));

    // Removal with active holds: refused, with their units; nothing reclaimed.
    let other = slot(store, 3).await;
    let (d, e, f) = (
        held(store, other, "d", 0).await,
        held(store, other, "e", 400).await,
        held(store, other, "f", 400).await,
    );
    let usage = in_use(store.remove_slot(other, at(600)).await.unwrap().outcome);
    assert_eq!((usage.held, usage.expired, usage.confirmed()), (2, 1, 0));
    assert_eq!(usage.slot.stored_remaining, 0);
    // Lowering to 1 would need an active unit too: refused, the expired one stays held.
    let usage = in_use(capacity_change(store, other, 1, 600).await);
    assert_eq!((usage.held, usage.expired, usage.taken()), (2, 1, 2));
    assert_eq!(statuses(store, &[d, e, f]).await, ["held", "held", "held"]);
    assert_eq!(counts(store, other).await, (3, 0, 3, 0));
    // To 2 fits with the expired unit reclaimed.
    let changed = applied(capacity_change(store, other, 2, 600).await);
    assert_eq!((changed.capacity, changed.stored_remaining), (2, 0));
    assert_eq!(
        statuses(store, &[d, e, f]).await,
        ["expired", "held", "held"]
    );

    // Once the last holds expire (at(700)) the removal reclaims them and goes through, on a
    // started slot as well (reclaim applies whether or not the slot has started).
    let removed = applied(store.remove_slot(other, at(4000)).await.unwrap().outcome);
    assert_eq!(removed.removed_at, Some(at(4000)));
    assert_eq!((removed.capacity, removed.stored_remaining), (2, 2));
    assert_eq!(
        statuses(store, &[d, e, f]).await,
        ["expired", "expired", "expired"]
    );
    for id in [slot_id, other] {
        assert_invariant(store, id).await;
    }
}

/// A removed slot is kept, listed, and refuses every change and hold; a closed one refuses
/// holds and leaves availability, and reopens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_and_closed_slots() {
    let Some(ctx) = setup("admin_removed_closed").await else {
        return;
    };
    let store = &ctx.store;
    let (x, y) = (slot(store, 2).await, slot(store, 2).await);
    let closed = applied(store.set_closed(x, true, at(0)).await.unwrap().outcome);
    assert!(closed.closed);
    assert!(matches!(
        hold(store, x, "k1", at(0)).await,
        HoldOutcome::SlotClosed
    ));
    let listed: Vec<SlotId> = store
        .availability(at(0))
        .await
        .unwrap()
        .outcome
        .iter()
        .map(|e| e.slot_id)
        .collect();
    assert_eq!(listed, [y]);
    // Closed slots still change capacity and can be removed.
    applied(capacity_change(store, x, 5, 0).await);
    assert!(!applied(store.set_closed(x, false, at(0)).await.unwrap().outcome).closed);
    assert!(matches!(
        hold(store, x, "k2", at(0)).await,
        HoldOutcome::Created(_)
    ));

    let removed = applied(store.remove_slot(y, at(1)).await.unwrap().outcome);
    assert_eq!(removed.removed_at, Some(at(1)));
    assert!(matches!(
        hold(store, y, "k3", at(2)).await,
        HoldOutcome::SlotNotFound
    ));
    for change in [
        store.set_closed(y, true, at(2)).await.unwrap().outcome,
        capacity_change(store, y, 9, 2).await,
        store.remove_slot(y, at(2)).await.unwrap().outcome,
        store.remove_slot(SlotId(999), at(2)).await.unwrap().outcome,
        capacity_change(store, SlotId(999), 9, 2).await,
        store
            .set_closed(SlotId(999), true, at(2))
            .await
            .unwrap()
            .outcome,
    ] {
        assert_eq!(change, SlotChange::NotFound);
    }
    assert_eq!(store.get_slot(y).await.unwrap(), Some(removed.clone()));
    let page = store
        .list_slots(&AvailabilityQuery::all(), PageRequest::first(10), at(2))
        .await
        .unwrap()
        .outcome;
    assert_eq!(page.len(), 2);
    assert_eq!(page[1].slot, removed);
    assert_eq!(
        store
            .availability(at(2))
            .await
            .unwrap()
            .outcome
            .iter()
            .map(|e| e.slot_id)
            .collect::<Vec<_>>(),
        [x]
    );
}

/// Capacities near `i32::MAX` move `remaining` without overflowing the arithmetic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_arithmetic_does_not_overflow() {
    let Some(ctx) = setup("admin_overflow").await else {
        return;
    };
    let store = &ctx.store;
    let slot_id = slot(store, i32::MAX).await;
    held(store, slot_id, "a", 0).await;
    // Down and up again at(1), then through the reclaiming statement: the hold has expired
    // at(600).
    for (capacity, now, remaining) in [
        (1, 1, 0),
        (i32::MAX, 1, i32::MAX - 1),
        (1, 600, 0),
        (i32::MAX, 600, i32::MAX - 1),
    ] {
        let slot = applied(capacity_change(store, slot_id, capacity, now).await);
        assert_eq!(
            (slot.capacity, slot.stored_remaining),
            (capacity, remaining)
        );
    }
    assert_invariant(store, slot_id).await;
}

/// The listing: resources stored and filtered, `[from, to)` combined with the cursor (the
/// later bound wins), and bounds before PostgreSQL's earliest instant answered, not failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_bounds_and_resources() {
    let Some(ctx) = setup("admin_listing").await else {
        return;
    };
    let store = &ctx.store;
    let room = ResourceId::new("room-1").unwrap();
    let mut ids = Vec::new();
    for i in 0..6 {
        let starts = at(3600 * (i + 1));
        let mut new = NewSlot::new(starts, starts + Duration::minutes(30), 1);
        if i % 2 == 0 {
            new = new.resource(room.clone());
        }
        let slot = store.create_slot(&new, chrono::Utc::now()).await.unwrap();
        assert_eq!(slot.resource, new.resource);
        ids.push(slot.slot_id);
    }
    let list = |filter: AvailabilityQuery, page: PageRequest<SlotCursor>| async move {
        store
            .list_slots(&filter, page, at(0))
            .await
            .unwrap()
            .outcome
            .into_iter()
            .map(|u| u.slot.slot_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list(AvailabilityQuery::all(), PageRequest::first(10)).await,
        ids
    );
    let of_room = list(
        AvailabilityQuery::all().resource(room.clone()),
        PageRequest::first(10),
    )
    .await;
    assert_eq!(of_room, [ids[0], ids[2], ids[4]]);
    let nobody = ResourceId::new("room-2").unwrap();
    assert!(list(
        AvailabilityQuery::all().resource(nobody),
        PageRequest::first(10)
    )
    .await
    .is_empty());
    // Pages of two, each after the last.
    let first = list(AvailabilityQuery::all(), PageRequest::first(2)).await;
    assert_eq!(first, ids[..2]);
    let after = SlotCursor {
        starts_at: at(3600 * 2),
        slot_id: ids[1],
    };
    assert_eq!(
        list(AvailabilityQuery::all(), PageRequest::after(after, 2)).await,
        ids[2..4]
    );
    // `from` later than the cursor wins; the cursor later than `from` wins.
    let from = AvailabilityQuery::all().from(at(3600 * 4));
    assert_eq!(
        list(from.clone(), PageRequest::after(after, 10)).await,
        ids[3..]
    );
    let late = SlotCursor {
        starts_at: at(3600 * 5),
        slot_id: ids[4],
    };
    assert_eq!(list(from, PageRequest::after(late, 10)).await, ids[5..]);
    // `to` is exclusive, also with a resource.
    let window = AvailabilityQuery::all().from(at(3600 * 2)).to(at(3600 * 5));
    assert_eq!(
        list(window.clone(), PageRequest::first(10)).await,
        ids[1..4]
    );
    assert_eq!(
        list(window.resource(room), PageRequest::first(10)).await,
        [ids[2]]
    );
    // Far outside PostgreSQL's range (a cursor is the caller's text): from the start, and an
    // upper bound before every slot.
    let ancient = Utc.with_ymd_and_hms(-100_000, 1, 1, 0, 0, 0).unwrap();
    let cursor = SlotCursor {
        starts_at: ancient,
        slot_id: SlotId(5),
    };
    assert_eq!(
        list(AvailabilityQuery::all(), PageRequest::after(cursor, 10)).await,
        ids
    );
    assert!(
        list(AvailabilityQuery::all().to(ancient), PageRequest::first(10))
            .await
            .is_empty()
    );
    let future = Utc.with_ymd_and_hms(200_000, 1, 1, 0, 0, 0).unwrap();
    let cursor = SlotCursor {
        starts_at: future,
        slot_id: SlotId(1),
    };
    assert!(
        list(AvailabilityQuery::all(), PageRequest::after(cursor, 10))
            .await
            .is_empty()
    );
    assert_eq!(
        list(AvailabilityQuery::all().to(future), PageRequest::first(10)).await,
        ids
    );
}

/// On the database's clock every answer carries the database's instant, refusals and empty
/// pages included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_on_the_database_clock_carry_its_instant() {
    let Some(ctx) = setup("admin_database_clock").await else {
        return;
    };
    let store = ctx.store.clone().with_database_clock();
    let starts = Utc::now() + Duration::hours(1);
    let slot_id = store
        .create_slot(
            &NewSlot::new(starts, starts + Duration::hours(1), 2),
            chrono::Utc::now(),
        )
        .await
        .unwrap()
        .slot_id;
    let engine_now = at(0); // ignored by the store
    let before = Utc::now() - Duration::seconds(5);
    let answers = [
        store
            .set_closed(SlotId(999), true, engine_now)
            .await
            .unwrap()
            .at,
        store
            .set_closed(slot_id, true, engine_now)
            .await
            .unwrap()
            .at,
        store
            .change_capacity(slot_id, 3.into(), engine_now)
            .await
            .unwrap()
            .at,
        store
            .change_capacity(SlotId(999), 3.into(), engine_now)
            .await
            .unwrap()
            .at,
        store.remove_slot(SlotId(999), engine_now).await.unwrap().at,
        store
            .list_slots(
                &AvailabilityQuery::all().resource(ResourceId::new("none").unwrap()),
                PageRequest::first(5),
                engine_now,
            )
            .await
            .unwrap()
            .at,
        store
            .list_slots(&AvailabilityQuery::all(), PageRequest::first(5), engine_now)
            .await
            .unwrap()
            .at,
    ];
    for at in answers {
        assert!(
            at > before && at < Utc::now() + Duration::seconds(5),
            "{at}"
        );
    }
    let removed = applied(
        store
            .remove_slot(slot_id, engine_now)
            .await
            .unwrap()
            .outcome,
    );
    assert!(removed.removed_at.is_some_and(|r| r > before));
}
