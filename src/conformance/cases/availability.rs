//! Lifecycle cases about slots and the availability listing: which slots are valid, which are
//! listed and in what order, how a query narrows the listing, and that a cached listing shows a
//! change at once.

use chrono::Duration;

use crate::conformance::support::{hours, resource};
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::model::{AvailabilityQuery, NewSlot, ResourceId, SlotId};
use crate::scope::Scope;
use crate::store::HoldStore;

/// Availability counts an expired, unreclaimed hold as free.
pub(super) async fn availability_counts_expired_holds_as_free<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let a = f.engine.hold(slot, "a").await.unwrap().hold;
    f.advance(Duration::seconds(10));
    f.engine.hold(slot, "b").await.unwrap();
    assert_eq!(f.available(slot).await, Some(1));
    f.clock.set(a.expires_at);
    assert_eq!(f.available(slot).await, Some(2));
    assert_eq!(f.remaining(slot).await, 1, "stored remaining unchanged");
}

/// Future slots only, by `starts_at` then id, sold-out slots included.
pub(super) async fn availability_lists_future_slots_in_order<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let later = f.slot(2, hours(3)).await;
    let soon = f.slot(1, hours(1)).await;
    let tie = f.slot(4, hours(1)).await;
    let started = f.slot(9, Duration::minutes(30)).await;
    let hold = f.engine.hold(soon, "k").await.unwrap().hold;
    f.engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    f.advance(Duration::minutes(30));
    let listing = f
        .engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap();
    let seen: Vec<(SlotId, i32, i32)> = listing
        .iter()
        .map(|e| (e.slot_id, e.capacity, e.remaining))
        .collect();
    assert_eq!(seen, vec![(soon, 1, 0), (tie, 4, 4), (later, 2, 2)]);
    assert!(listing.iter().all(|e| e.slot_id != started));
    let entry = &listing[2];
    assert_eq!(entry.starts_at, f.now() - Duration::minutes(30) + hours(3));
    assert_eq!(entry.ends_at, entry.starts_at + hours(1));
}

/// `from` is inclusive, `to` exclusive, both on `starts_at`.
pub(super) async fn availability_query_narrows_by_starts_at<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let mut slots = Vec::new();
    for h in 1..=5 {
        slots.push(f.slot(1, hours(h)).await);
    }
    let at = |h: i64| f.now() + hours(h);
    let ids = |query| {
        let engine = f.engine.clone();
        async move {
            engine
                .availability(query)
                .await
                .unwrap()
                .iter()
                .map(|e| e.slot_id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        ids(AvailabilityQuery::all().from(at(2)).to(at(4))).await,
        slots[1..3]
    );
    assert_eq!(ids(AvailabilityQuery::all().from(at(4))).await, slots[3..]);
    assert_eq!(ids(AvailabilityQuery::all().to(at(2))).await, slots[..1]);
    assert_eq!(
        ids(AvailabilityQuery::all().from(at(3)).to(at(3))).await,
        []
    );
    let error = assert_err!(
        f.engine
            .availability(AvailabilityQuery::all().from(at(4)).to(at(3)))
            .await,
        BookingError::InvalidQuery
    );
    assert_eq!(error.code(), "invalid_query");
}

/// Slots with no capacity or an empty time window are refused before the store.
pub(super) async fn invalid_slots_are_refused<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let start = f.now() + hours(1);
    for (ends_at, capacity) in [(start + hours(1), 0), (start + hours(1), -3), (start, 2)] {
        let error = assert_err!(
            f.engine
                .create_slot(NewSlot::new(start, ends_at, capacity))
                .await,
            BookingError::InvalidSlot(_)
        );
        assert_eq!(error.code(), "invalid_slot");
    }
    let slot = f
        .engine
        .create_slot(NewSlot::new(start, start + hours(1), i32::MAX))
        .await
        .unwrap();
    assert_eq!((slot.capacity, slot.stored_remaining), (i32::MAX, i32::MAX));
    assert_eq!(
        f.engine
            .availability(AvailabilityQuery::all())
            .await
            .unwrap()
            .len(),
        1
    );
}

/// With a real cache period, a cancel shows in the very next availability read (R3).
pub(super) async fn cancel_shows_in_cached_availability_at_once<S: HoldStore>(store: S) {
    let (engine, start) = crate::conformance::fixture::cached_engine(store);
    let slot = engine
        .create_slot(NewSlot::new(start, start + hours(1), 1))
        .await
        .unwrap()
        .slot_id;
    let hold = engine.hold(slot, "k").await.unwrap().hold;
    engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    let before = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(before[0].remaining, 0);
    engine
        .cancel(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    let after = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!(
        after[0].remaining, 1,
        "the cancel invalidated the cached listing"
    );
}

/// Slots may belong to a resource: entries carry it, and availability narrowed to one
/// resource lists only its slots, in order, combined with `from`/`to`.
pub(super) async fn availability_narrows_by_resource<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let (room_a, room_b) = (resource("room-a"), resource("room-b"));
    let a2 = f.resource_slot(2, hours(2), &room_a).await;
    let b1 = f.resource_slot(1, hours(1), &room_b).await;
    let plain = f.slot(1, hours(1)).await;
    let a1 = f.resource_slot(3, hours(1), &room_a).await;
    let a3 = f.resource_slot(1, hours(3), &room_a).await;

    let all = f
        .engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap();
    let ids: Vec<SlotId> = all.iter().map(|e| e.slot_id).collect();
    assert_eq!(ids, vec![b1, plain, a1, a2, a3]);
    let resources: Vec<Option<&str>> = all
        .iter()
        .map(|e| e.resource.as_ref().map(ResourceId::as_str))
        .collect();
    assert_eq!(
        resources,
        vec![
            Some("room-b"),
            None,
            Some("room-a"),
            Some("room-a"),
            Some("room-a")
        ]
    );
    assert_eq!(
        f.listed(AvailabilityQuery::all().resource(room_a.clone()))
            .await,
        vec![a1, a2, a3]
    );
    assert_eq!(
        f.listed(AvailabilityQuery::all().resource(room_b.clone()))
            .await,
        vec![b1]
    );
    let window = AvailabilityQuery::all()
        .resource(room_a.clone())
        .from(f.now() + hours(2))
        .to(f.now() + hours(3));
    assert_eq!(f.listed(window).await, vec![a2]);
    assert!(f
        .listed(AvailabilityQuery::all().resource(resource("room-z")))
        .await
        .is_empty());
    assert_eq!(f.stored_slot(a1).await.resource, Some(room_a));
    assert_eq!(f.stored_slot(plain).await.resource, None);
    // Once a slot of the resource has started it leaves the resource's listing too.
    f.advance(hours(1));
    assert_eq!(
        f.listed(AvailabilityQuery::all().resource(resource("room-a")))
            .await,
        vec![a2, a3]
    );
}
