//! Lifecycle cases about quantities: a hold takes all of its units or none, within bounds, and
//! gives them all back when cancelled or expired.

use chrono::Duration;

use crate::conformance::support::{hours, place, ttl};
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::model::HoldStatus;
use crate::scope::Scope;
use crate::store::HoldStore;

/// A hold takes all of its units by one conditional decrement, or none.
pub(super) async fn a_hold_takes_its_quantity_all_or_nothing<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(5, hours(1)).await;
    let three = place(&f, slot, "three", 3, None).await.unwrap().hold;
    assert_eq!(three.quantity, 3);
    assert_eq!(
        (f.remaining(slot).await, f.available(slot).await),
        (2, Some(2))
    );
    assert_err!(
        place(&f, slot, "three-more", 3, None).await,
        BookingError::SoldOut { .. }
    );
    assert_eq!(f.remaining(slot).await, 2, "a refused hold takes nothing");
    let two = place(&f, slot, "two", 2, Some("alice")).await.unwrap().hold;
    assert_eq!(f.available(slot).await, Some(0));
    assert_err!(
        place(&f, slot, "one", 1, None).await,
        BookingError::SoldOut { .. }
    );
    f.assert_invariant(slot, &[three.hold_id, two.hold_id])
        .await;
}

/// Quantities outside 1..=1000 never reach the store; more than the slot's capacity is
/// its own error; neither changes anything.
pub(super) async fn quantities_out_of_bounds_are_refused<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(5, hours(1)).await;
    for bad in [0, -1, 1001, i32::MAX, i32::MIN] {
        let error = assert_err!(
            place(&f, slot, "q", bad, None).await,
            BookingError::InvalidQuantity { .. }
        );
        assert_eq!(error.code(), "invalid_quantity");
    }
    let error = assert_err!(
        place(&f, slot, "q", 6, None).await,
        BookingError::QuantityExceedsCapacity { .. }
    );
    match error {
        BookingError::QuantityExceedsCapacity {
            slot_id,
            quantity,
            capacity,
        } => assert_eq!((slot_id, quantity, capacity), (slot, 6, 5)),
        _ => unreachable!(),
    }
    assert_eq!(f.remaining(slot).await, 5);
    // The key was not consumed: the whole slot in one hold works.
    assert_eq!(
        place(&f, slot, "q", 5, None).await.unwrap().hold.quantity,
        5
    );
}

/// Cancel gives back every unit of a hold; an expired hold's units count as free and are
/// reclaimed together.
pub(super) async fn cancel_and_expiry_return_every_unit_of_a_hold<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(6, hours(2)).await;
    let cancelled = place(&f, slot, "c", 3, None).await.unwrap().hold;
    let expiring = place(&f, slot, "e", 2, None).await.unwrap().hold;
    f.engine
        .confirm(&Scope::Anonymous, cancelled.hold_id)
        .await
        .unwrap();
    f.engine
        .cancel(&Scope::Anonymous, cancelled.hold_id)
        .await
        .unwrap();
    assert_eq!(f.remaining(slot).await, 4);
    f.advance(ttl());
    assert_eq!(
        f.available(slot).await,
        Some(6),
        "the expired 2 count as free"
    );
    let big = place(&f, slot, "big", 6, None).await.unwrap().hold;
    let stored = f
        .engine
        .get_hold(&Scope::BackOffice, expiring.hold_id)
        .await
        .unwrap();
    assert_eq!(stored.status, HoldStatus::Expired);
    assert_eq!(f.remaining(slot).await, 0);
    f.assert_invariant(slot, &[cancelled.hold_id, expiring.hold_id, big.hold_id])
        .await;
}

/// A hold that does not fit even with the expired units is refused and reclaims nothing.
pub(super) async fn a_refused_hold_reclaims_nothing<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(4, hours(2)).await;
    let short = f.minute_hold(slot, "short").await;
    let long = place(&f, slot, "long", 2, None).await.unwrap().hold;
    f.advance(Duration::seconds(61));
    assert_err!(
        place(&f, slot, "three", 3, None).await,
        BookingError::SoldOut { .. }
    );
    assert_eq!(
        f.stored_status(short.hold_id).await,
        Some(HoldStatus::Held),
        "still stored as held: nothing was reclaimed"
    );
    assert_eq!(f.remaining(slot).await, 1);
    let two = place(&f, slot, "two", 2, None).await.unwrap().hold;
    assert_eq!(f.remaining(slot).await, 0);
    f.assert_invariant(slot, &[short.hold_id, long.hold_id, two.hold_id])
        .await;
}
