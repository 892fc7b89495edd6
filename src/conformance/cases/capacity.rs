//! Capacity changes that lose no concurrent change: by a number of units, and compare-and-set,
//! for slots and pools, each decided by the row it changes.

use std::sync::Arc;

use crate::conformance::support::hours;
use crate::conformance::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{CapacityChange, SlotId};
use crate::scope::Scope;
use crate::store::{BookingStore, HoldStore, PoolStore, SlotAdmin};

/// A slot's capacity moved by units and by compare-and-set: a move adds to whatever is there,
/// a decrease takes free units only (`capacity_taken` with the units taken), never below one
/// unit (`invalid_slot`), expired holds given back when that makes it fit; a `Replace` applies
/// while the capacity is the one expected and is `capacity_changed` with the capacity found
/// otherwise, changing nothing; a move by zero changes nothing.
pub(super) async fn capacity_moves_by_units_and_by_compare_and_set<S: HoldStore + SlotAdmin>(
    store: S,
) {
    let f = Fixture::new(store);
    let slot = f.slot(4, hours(1)).await;
    let by = |units| CapacityChange::By(units);
    let moved = f.engine.change_capacity(slot, by(2)).await.unwrap();
    assert_eq!((moved.capacity, moved.stored_remaining), (6, 6));
    let held = f
        .engine
        .place_hold(NewHold::new(slot, "three").quantity(3))
        .await
        .unwrap()
        .hold;
    f.engine
        .confirm(&Scope::Anonymous, held.hold_id)
        .await
        .unwrap();
    let moved = f.engine.change_capacity(slot, by(-2)).await.unwrap();
    assert_eq!((moved.capacity, moved.stored_remaining), (4, 1));
    assert_err!(
        f.engine.change_capacity(slot, by(-2)).await,
        BookingError::CapacityTaken {
            requested: 2,
            taken: 3,
            ..
        }
    );
    assert_err!(
        f.engine.change_capacity(slot, by(i32::MIN)).await,
        BookingError::InvalidSlot(_)
    );
    assert_err!(
        f.engine.change_capacity(slot, by(i32::MAX)).await,
        BookingError::InvalidSlot(_)
    );
    let unmoved = f.engine.change_capacity(slot, by(0)).await.unwrap();
    assert_eq!((unmoved.capacity, unmoved.stored_remaining), (4, 1));

    // Compare-and-set: applied while the capacity is the one read, refused after a change.
    let replace = |expected, to| CapacityChange::Replace { expected, to };
    let set = f.engine.change_capacity(slot, replace(4, 7)).await.unwrap();
    assert_eq!((set.capacity, set.stored_remaining), (7, 4));
    assert_err!(
        f.engine.change_capacity(slot, replace(4, 9)).await,
        BookingError::CapacityChanged {
            expected: 4,
            actual: 7,
            ..
        }
    );
    assert_err!(
        f.engine.change_capacity(slot, replace(7, 2)).await,
        BookingError::CapacityTaken {
            requested: 2,
            taken: 3,
            ..
        }
    );
    assert_err!(
        f.engine.change_capacity(slot, replace(7, 0)).await,
        BookingError::InvalidSlot(_)
    );
    let stored = f.stored_slot(slot).await;
    assert_eq!((stored.capacity, stored.stored_remaining), (7, 4));

    // A decrease that fits once the slot's expired holds are given back.
    let short = f.minute_hold(slot, "short").await;
    f.advance(chrono::Duration::seconds(61));
    let moved = f.engine.change_capacity(slot, by(-4)).await.unwrap();
    assert_eq!((moved.capacity, moved.stored_remaining), (3, 0));
    f.assert_invariant(slot, &[held.hold_id, short.hold_id])
        .await;
    assert_err!(
        f.engine.change_capacity(SlotId(slot.0 + 1000), by(1)).await,
        BookingError::SlotNotFound { .. }
    );
}

/// Fifty concurrent moves by one unit on a slot of four end at exactly 54, and fifty more by
/// minus one at exactly 4, holds racing them; of twenty concurrent compare-and-sets of the
/// same capacity exactly one applies, the others are `capacity_changed`.
pub(super) async fn race_capacity_moves_add_up<S: HoldStore + SlotAdmin>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(4, hours(1)).await;
    for (units, expected) in [(1, 54), (-1, 4)] {
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let f = Arc::clone(&f);
                tokio::spawn(async move {
                    f.engine
                        .change_capacity(slot, CapacityChange::By(units))
                        .await
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task").expect("a move by one unit");
        }
        let stored = f.stored_slot(slot).await;
        assert_eq!(
            (stored.capacity, stored.stored_remaining),
            (expected, expected),
            "fifty moves by {units}: none lost"
        );
    }
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let f = Arc::clone(&f);
            tokio::spawn(async move {
                let to = 10 + i;
                f.engine
                    .change_capacity(slot, CapacityChange::Replace { expected: 4, to })
                    .await
            })
        })
        .collect();
    let (mut applied, mut changed) = (Vec::new(), 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(slot) => applied.push(slot.capacity),
            Err(BookingError::CapacityChanged { expected: 4, .. }) => changed += 1,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        (applied.len(), changed),
        (1, 19),
        "one compare-and-set wins"
    );
    assert_eq!(f.stored_slot(slot).await.capacity, applied[0]);
    f.assert_invariant(slot, &[]).await;
}

/// A pool's capacity moved by units and by compare-and-set, as a slot's: moves add up under
/// fifty concurrent ones, a decrease takes free units only (`pool_in_use`), never below zero
/// (`invalid_pool`), and a `Replace` of another capacity is `pool_capacity_changed`.
pub(super) async fn pool_capacity_moves_by_units_and_by_compare_and_set<
    S: PoolStore + BookingStore + SlotAdmin,
>(
    store: S,
) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(10, hours(1)).await;
    let pool = f.pool(3, &[slot]).await;
    f.engine
        .place_hold(NewHold::new(slot, "two").quantity(2))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let f = Arc::clone(&f);
            tokio::spawn(async move {
                f.engine
                    .change_pool_capacity(pool, CapacityChange::By(1))
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task").expect("a move by one unit");
    }
    let read = f.read_pool(pool).await;
    assert_eq!((read.capacity, read.remaining), (53, 51), "no move lost");
    let moved = f
        .engine
        .change_pool_capacity(pool, CapacityChange::By(-51))
        .await
        .unwrap();
    assert_eq!((moved.capacity, moved.remaining), (2, 0));
    assert_err!(
        f.engine
            .change_pool_capacity(pool, CapacityChange::By(-1))
            .await,
        BookingError::PoolInUse {
            requested: 1,
            taken: 2,
            ..
        }
    );
    assert_err!(
        f.engine
            .change_pool_capacity(pool, CapacityChange::By(i32::MIN))
            .await,
        BookingError::InvalidPool { .. }
    );
    let replace = |expected, to| CapacityChange::Replace { expected, to };
    assert_eq!(
        f.engine
            .change_pool_capacity(pool, replace(2, 5))
            .await
            .unwrap()
            .capacity,
        5
    );
    assert_err!(
        f.engine.change_pool_capacity(pool, replace(2, 6)).await,
        BookingError::PoolCapacityChanged {
            expected: 2,
            actual: 5,
            ..
        }
    );
    let read = f.read_pool(pool).await;
    assert_eq!((read.capacity, read.remaining), (5, 3));
}
