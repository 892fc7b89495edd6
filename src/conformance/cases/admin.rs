//! Administration cases: capacity changes, closing and reopening sales, removal, the
//! operator's listing, and that a cached listing shows each change at once.

use chrono::Duration;

use crate::conformance::support::{hours, resource};
use crate::conformance::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{AvailabilityQuery, Hold, HoldId, HoldStatus, InvalidSlot, NewSlot, SlotId};
use crate::model::{PageRequest, SlotCursor};
use crate::scope::Scope;
use crate::store::{HoldStore, SlotAdmin};
use crate::BookingEngine;

/// Three holds on one slot: two units held, one unit confirmed, one unit held for 60 s only.
struct Mix {
    two: Hold,
    booked: Hold,
    short: Hold,
}

impl Mix {
    async fn on<S: HoldStore + SlotAdmin>(f: &Fixture<S>, slot: SlotId) -> Mix {
        let place = |request: NewHold| async { f.engine.place_hold(request).await.unwrap().hold };
        let two = place(NewHold::new(slot, "two").quantity(2)).await;
        let booked = place(NewHold::new(slot, "booked")).await;
        let booked = f
            .engine
            .confirm(&Scope::Anonymous, booked.hold_id)
            .await
            .unwrap();
        let short = f.minute_hold(slot, "short").await;
        Mix { two, booked, short }
    }

    fn ids(&self) -> [HoldId; 3] {
        [self.two.hold_id, self.booked.hold_id, self.short.hold_id]
    }
}

/// Raising a capacity adds free units at once; a sold-out slot sells again.
pub(super) async fn raising_capacity_adds_free_units<S: HoldStore + SlotAdmin>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let first = f.engine.hold(slot, "a").await.unwrap().hold;
    let second = f.engine.hold(slot, "b").await.unwrap().hold;
    assert_err!(f.engine.hold(slot, "c").await, BookingError::SoldOut { .. });
    let raised = f.engine.change_capacity(slot, 5).await.unwrap();
    assert_eq!((raised.capacity, raised.stored_remaining), (5, 3));
    assert_eq!(f.available(slot).await, Some(3));
    let third = f.engine.hold(slot, "c").await.unwrap().hold;
    f.assert_invariant(slot, &[first.hold_id, second.hold_id, third.hold_id])
        .await;
}

/// Lowering a capacity takes free units only: down to the units taken it works, below them
/// it is refused with how many are taken and changes nothing. Expired holds are reclaimed
/// when that makes it fit, and only then.
pub(super) async fn lowering_capacity_takes_only_free_units<S: HoldStore + SlotAdmin>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(8, hours(2)).await;

    let mix = Mix::on(&f, slot).await;
    let holds = mix.ids();
    // Taken: 2 held + 1 confirmed + 1 held (short) = 4 of 8.
    let lowered = f.engine.change_capacity(slot, 5).await.unwrap();
    assert_eq!((lowered.capacity, lowered.stored_remaining), (5, 1));
    let refused = assert_err!(
        f.engine.change_capacity(slot, 3).await,
        BookingError::CapacityTaken { .. }
    );
    assert_eq!(refused.code(), "capacity_taken");
    assert!(
        matches!(refused, BookingError::CapacityTaken { slot_id, requested: 3, taken: 4 } if slot_id == slot),
        "{refused:?}"
    );
    let unchanged = f.stored_slot(slot).await;
    assert_eq!((unchanged.capacity, unchanged.stored_remaining), (5, 1));
    f.assert_invariant(slot, &holds).await;

    // The short hold expires: its unit is free, but a change that does not fit even with it
    // reclaims nothing.
    f.advance(Duration::seconds(61));
    assert!(matches!(
        f.engine.change_capacity(slot, 2).await,
        Err(BookingError::CapacityTaken {
            requested: 2,
            taken: 3,
            ..
        })
    ));

    assert_eq!(
        f.stored_status(mix.short.hold_id).await,
        Some(HoldStatus::Held),
        "a refused change reclaims nothing"
    );
    // Down to exactly the units taken fits by reclaiming the expired unit.
    let exact = f.engine.change_capacity(slot, 3).await.unwrap();
    assert_eq!((exact.capacity, exact.stored_remaining), (3, 0));

    assert_eq!(
        f.stored_status(mix.short.hold_id).await,
        Some(HoldStatus::Expired),
        "reclaimed to make room"
    );
    assert_err!(
        f.engine.hold(slot, "more").await,
        BookingError::SoldOut { .. }
    );
    f.assert_invariant(slot, &holds).await;

    // Cancelling gives units back and makes room to lower further.
    f.engine
        .cancel(&Scope::Anonymous, mix.two.hold_id)
        .await
        .unwrap();
    let one = f.engine.change_capacity(slot, 1).await.unwrap();
    assert_eq!((one.capacity, one.stored_remaining), (1, 0));
    f.assert_invariant(slot, &holds).await;
}

/// Capacities below 1 and unknown slots are refused before anything changes.
pub(super) async fn capacity_changes_are_validated<S: HoldStore + SlotAdmin>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    for bad in [0, -1, -5, i32::MIN] {
        let error = assert_err!(
            f.engine.change_capacity(slot, bad).await,
            BookingError::InvalidSlot(InvalidSlot::Capacity(_))
        );
        assert_eq!(error.code(), "invalid_slot");
    }
    assert_eq!(f.stored_slot(slot).await.capacity, 3);
    let missing = SlotId(slot.0 + 1000);
    for result in [
        f.engine.get_slot(missing).await,
        f.engine.change_capacity(missing, 2).await,
        f.engine.close_sales(missing).await,
        f.engine.reopen_sales(missing).await,
        f.engine.remove_slot(missing).await,
    ] {
        assert_err!(result, BookingError::SlotNotFound { .. });
    }
    let top = f.engine.change_capacity(slot, i32::MAX).await.unwrap();
    assert_eq!((top.capacity, top.stored_remaining), (i32::MAX, i32::MAX));
    let back = f.engine.change_capacity(slot, 1).await.unwrap();
    assert_eq!((back.capacity, back.stored_remaining), (1, 1));
}

/// A closed slot refuses new holds and leaves availability; its holds can still be confirmed,
/// cancelled and renewed, a key's replay still replays, and reopening sells again.
pub(super) async fn closed_slots_refuse_new_holds_and_keep_their_holds<S: HoldStore + SlotAdmin>(
    store: S,
) {
    let f = Fixture::new(store);
    let slot = f.slot(5, hours(1)).await;
    let other = f.slot(5, hours(1)).await;
    let a = f.engine.hold(slot, "a").await.unwrap().hold;
    let b = f.engine.hold(slot, "b").await.unwrap().hold;
    let c = f.engine.hold(slot, "c").await.unwrap().hold;
    let closed = f.engine.close_sales(slot).await.unwrap();
    assert!(closed.closed);
    assert!(
        f.engine.close_sales(slot).await.unwrap().closed,
        "closing twice is fine"
    );
    assert_eq!(f.listed(AvailabilityQuery::all()).await, vec![other]);
    let error = assert_err!(
        f.engine.hold(slot, "d").await,
        BookingError::SlotClosed { .. }
    );
    assert_eq!(error.code(), "slot_closed");
    assert_err!(
        f.engine
            .place_hold(NewHold::new(slot, "e").quantity(9))
            .await,
        BookingError::SlotClosed { .. }
    );
    assert!(f.engine.hold(slot, "a").await.unwrap().replayed);
    assert_eq!(
        f.engine
            .confirm(&Scope::Anonymous, a.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Confirmed
    );
    assert_eq!(
        f.engine
            .cancel(&Scope::Anonymous, b.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Cancelled
    );
    f.advance(Duration::minutes(1));
    let renewed = f
        .engine
        .renew(&Scope::Anonymous, c.hold_id, None)
        .await
        .unwrap();
    assert!(renewed.expires_at > c.expires_at);
    assert_eq!(f.remaining(slot).await, 3, "the cancel gave its unit back");
    f.assert_invariant(slot, &[a.hold_id, b.hold_id, c.hold_id])
        .await;

    let reopened = f.engine.reopen_sales(slot).await.unwrap();
    assert!(!reopened.closed);
    assert_eq!(f.listed(AvailabilityQuery::all()).await, vec![slot, other]);
    let d = f.engine.hold(slot, "d").await.unwrap().hold;
    f.assert_invariant(slot, &[a.hold_id, b.hold_id, c.hold_id, d.hold_id])
        .await;
}

/// A slot with units held or confirmed cannot be removed, and the error says how many. Once
/// none are (expired holds reclaimed), removal archives it: no availability, no new holds,
/// no further changes, but its holds still read and their keys still replay.
pub(super) async fn removal_needs_a_slot_with_nothing_held_or_confirmed<
    S: HoldStore + SlotAdmin,
>(
    store: S,
) {
    let f = Fixture::new(store);
    let slot = f.slot(6, hours(2)).await;

    let mix = Mix::on(&f, slot).await;
    let holds = mix.ids();
    let error = assert_err!(
        f.engine.remove_slot(slot).await,
        BookingError::SlotInUse { .. }
    );
    assert_eq!(error.code(), "slot_in_use");
    assert!(
        matches!(
            error,
            BookingError::SlotInUse {
                held: 3,
                confirmed: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(f.stored_slot(slot).await.removed_at, None);

    f.engine
        .cancel(&Scope::Anonymous, mix.two.hold_id)
        .await
        .unwrap();
    assert!(matches!(
        f.engine.remove_slot(slot).await,
        Err(BookingError::SlotInUse {
            held: 1,
            confirmed: 1,
            ..
        })
    ));
    f.engine
        .cancel(&Scope::Anonymous, mix.booked.hold_id)
        .await
        .unwrap();
    assert!(matches!(
        f.engine.remove_slot(slot).await,
        Err(BookingError::SlotInUse {
            held: 1,
            confirmed: 0,
            ..
        })
    ));
    // The last hold expires: removal reclaims it.
    f.advance(Duration::seconds(61));
    let removed = f.engine.remove_slot(slot).await.unwrap();
    assert_eq!(removed.removed_at, Some(f.now()));
    assert_eq!((removed.capacity, removed.stored_remaining), (6, 6));
    assert_eq!(f.stored_slot(slot).await.removed_at, Some(f.now()));
    assert_eq!(
        f.engine.get_slot(slot).await.unwrap(),
        removed,
        "a removed slot still reads"
    );
    f.assert_invariant(slot, &holds).await;

    assert!(f.listed(AvailabilityQuery::all()).await.is_empty());
    assert_err!(
        f.engine.hold(slot, "new").await,
        BookingError::SlotNotFound { .. }
    );
    let replay = f.engine.hold(slot, "booked").await.unwrap();
    assert!(replay.replayed, "a key's hold outlives its slot's removal");
    assert_eq!(replay.hold.status, HoldStatus::Cancelled);
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, mix.short.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Expired
    );
    for result in [
        f.engine.change_capacity(slot, 9).await,
        f.engine.close_sales(slot).await,
        f.engine.reopen_sales(slot).await,
        f.engine.remove_slot(slot).await,
    ] {
        assert_err!(result, BookingError::SlotNotFound { .. });
    }
    let listed = f.list_all(&AvailabilityQuery::all(), 10).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].removed_at,
        Some(f.now()),
        "the operator still sees it"
    );
}

/// The operator's listing shows every slot (past, closed and removed included) by start then
/// id, in keyset pages, with capacity split into free, held and confirmed units, narrowed by
/// resource and time range.
pub(super) async fn operator_listing_pages_every_slot_with_its_units<S: HoldStore + SlotAdmin>(
    store: S,
) {
    let f = Fixture::new(store);
    let room = resource("room-1");
    let past = f.slot(2, Duration::minutes(1)).await;
    let busy = f.resource_slot(10, hours(2), &room).await;
    let closed = f.resource_slot(3, hours(2), &room).await;
    let removed = f.slot(1, hours(3)).await;
    let late = f.resource_slot(4, hours(5), &room).await;

    let mix = Mix::on(&f, busy).await;
    f.engine.close_sales(closed).await.unwrap();
    f.engine.remove_slot(removed).await.unwrap();
    // The first slot starts and the short hold expires; the others stay active.
    f.advance(Duration::minutes(2));

    for limit in [1, 2, 10] {
        let all = f.list_all(&AvailabilityQuery::all(), limit).await;
        let ids: Vec<SlotId> = all.iter().map(|s| s.slot_id).collect();
        assert_eq!(
            ids,
            vec![past, busy, closed, removed, late],
            "limit {limit}"
        );
        for summary in &all {
            assert_eq!(
                summary.capacity,
                summary.remaining + summary.held + summary.confirmed,
                "{summary:?}"
            );
        }
        let busy_row = &all[1];
        // The short hold has expired: its unit counts as free.
        assert_eq!(
            (
                busy_row.capacity,
                busy_row.remaining,
                busy_row.held,
                busy_row.confirmed
            ),
            (10, 7, 2, 1)
        );
        assert_eq!(busy_row.resource.as_ref(), Some(&room));
        assert!(all[2].closed && all[3].removed_at.is_some());
        assert!(!all[1].closed && all[1].removed_at.is_none());
    }
    // One name, one meaning: the expired unit is free in the listing and in availability,
    // taken only in the slot row's counter, which says so in its name.
    let stored = f.engine.get_slot(busy).await.unwrap();
    assert_eq!(stored.stored_remaining, 6);
    let listed = f
        .engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap();
    let entry = listed.iter().find(|e| e.slot_id == busy).unwrap();
    assert_eq!(entry.remaining, 7);
    let of_room = f
        .list_all(&AvailabilityQuery::all().resource(room.clone()), 2)
        .await;
    assert_eq!(
        of_room.iter().map(|s| s.slot_id).collect::<Vec<_>>(),
        vec![busy, closed, late]
    );
    let window = AvailabilityQuery::all()
        .resource(room)
        .from(f.now() + hours(1))
        .to(f.now() + hours(4));
    assert_eq!(
        f.list_all(&window, 1)
            .await
            .iter()
            .map(|s| s.slot_id)
            .collect::<Vec<_>>(),
        vec![busy, closed]
    );
    // A page's cursor is its last slot; the next page starts right after it.
    let first = f
        .engine
        .list_slots(&AvailabilityQuery::all(), PageRequest::first(2))
        .await
        .unwrap();
    let busy_slot = f.stored_slot(busy).await;
    assert_eq!(first.next_after, Some(SlotCursor::after(&busy_slot)));
    for limit in [0, 1001] {
        assert_err!(
            f.engine
                .list_slots(&AvailabilityQuery::all(), PageRequest::first(limit))
                .await,
            BookingError::InvalidPage { .. }
        );
    }
    let backwards = AvailabilityQuery::all()
        .from(f.now() + hours(2))
        .to(f.now());
    assert_err!(
        f.engine
            .list_slots(&backwards, PageRequest::first(10))
            .await,
        BookingError::InvalidQuery
    );

    f.assert_invariant(busy, &mix.ids()).await;
}

/// With a real cache period, every slot change shows in the very next availability read (R3).
pub(super) async fn slot_changes_show_in_cached_availability_at_once<S: HoldStore + SlotAdmin>(
    store: S,
) {
    let (engine, start) = crate::conformance::fixture::cached_engine(store);
    let slot = engine
        .create_slot(NewSlot::new(start, start + hours(1), 2))
        .await
        .unwrap()
        .slot_id;
    let read = |engine: BookingEngine<S>| async move {
        engine
            .availability(AvailabilityQuery::all())
            .await
            .unwrap()
            .iter()
            .map(|e| (e.slot_id, e.remaining))
            .collect::<Vec<_>>()
    };
    assert_eq!(read(engine.clone()).await, vec![(slot, 2)]);
    engine.change_capacity(slot, 4).await.unwrap();
    assert_eq!(
        read(engine.clone()).await,
        vec![(slot, 4)],
        "capacity change"
    );
    engine.close_sales(slot).await.unwrap();
    assert_eq!(read(engine.clone()).await, vec![], "closed");
    engine.reopen_sales(slot).await.unwrap();
    assert_eq!(read(engine.clone()).await, vec![(slot, 4)], "reopened");
    let second = engine
        .create_slot(NewSlot::new(start, start + hours(1), 1))
        .await
        .unwrap()
        .slot_id;
    assert_eq!(
        read(engine.clone()).await,
        vec![(slot, 4), (second, 1)],
        "created"
    );
    engine.remove_slot(slot).await.unwrap();
    assert_eq!(read(engine.clone()).await, vec![(second, 1)], "removed");
    // A refused change invalidates nothing it did not change: the listing stays right.
    engine.hold(second, "k").await.unwrap();
    assert!(engine.remove_slot(second).await.is_err());
}
