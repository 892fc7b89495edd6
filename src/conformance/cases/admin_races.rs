//! Administration races: capacity changes and removals racing holds and cancels never
//! oversell or strand a booking.

use std::sync::Arc;

use crate::conformance::support::{hours, join_racing_holds};
use crate::conformance::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{HoldId, HoldStatus};
use crate::scope::Scope;
use crate::store::{HoldStore, SlotAdmin};

/// Rounds of 200 holds racing for one slot in waves, each wave together with an attempt to
/// lower the capacity by 10: the slot never sells more than its capacity, a lowering applies
/// exactly when the units sold leave room for it, a refused one saw more units taken than it
/// asked for, and the invariant holds after every wave.
pub(super) async fn race_lowering_capacity_while_holds_race<S: HoldStore + SlotAdmin>(store: S) {
    let f = Arc::new(Fixture::new(store));
    for round in 0..3 {
        let slot = f.slot(120, hours(1)).await;
        let (mut granted, mut units) = (Vec::<HoldId>::new(), 0);
        let (mut applied, mut refused) = (0, 0);
        for wave in 0..10 {
            let target = 110 - 10 * wave;
            let lowering = {
                let f = Arc::clone(&f);
                tokio::spawn(async move { f.engine.change_capacity(slot, target).await })
            };
            let holds: Vec<_> = (0..20)
                .map(|i| {
                    let f = Arc::clone(&f);
                    let key = format!("r{round}-w{wave}-{i}");
                    let quantity = 1 + i32::from(i % 3 == 0);
                    tokio::spawn(async move {
                        f.engine
                            .place_hold(NewHold::new(slot, key).quantity(quantity))
                            .await
                    })
                })
                .collect();
            let (placed, _) = join_racing_holds(holds, &format!("round {round}: ")).await;
            for hold in placed {
                units += hold.quantity;
                granted.push(hold.hold_id);
            }
            match lowering.await.expect("task") {
                Ok(changed) => {
                    assert_eq!(changed.capacity, target);
                    applied += 1;
                }
                Err(BookingError::CapacityTaken {
                    requested, taken, ..
                }) => {
                    assert!(taken > requested, "refused {requested} with {taken} taken");
                    refused += 1;
                }
                Err(other) => panic!("round {round}: unexpected {other:?}"),
            }
            let stored = f.stored_slot(slot).await;
            assert!(
                units <= stored.capacity,
                "round {round} wave {wave}: {units} units sold of {}",
                stored.capacity
            );
            assert_eq!(
                stored.stored_remaining,
                stored.capacity - units,
                "round {round} wave {wave}"
            );
            f.assert_invariant(slot, &granted).await;
        }
        // Down to exactly the units sold works; one below is refused with exactly that many.
        f.engine.change_capacity(slot, units).await.unwrap();
        assert!(matches!(
            f.engine.change_capacity(slot, units - 1).await,
            Err(BookingError::CapacityTaken { taken, .. }) if taken == units
        ));
        f.assert_invariant(slot, &granted).await;
        eprintln!(
            "race_lowering_capacity round {round}: {} holds ({units} units) granted of 200, \
             lowerings applied {applied} refused {refused}",
            granted.len(),
        );
    }
}

/// Rounds of cancels, new holds and a removal racing on one slot: a removed slot never keeps
/// an active or confirmed hold (the removal and the holds decide on the same slot row), and
/// the invariant holds after every round.
pub(super) async fn race_removal_never_strands_a_booking<S: HoldStore + SlotAdmin>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let (mut removals, mut refusals) = (0, 0);
    for round in 0..16 {
        let slot = f.slot(4, hours(1)).await;
        let early = f
            .hold_each(slot, (0..2).map(|i| format!("e{round}-{i}")))
            .await;
        f.engine.confirm(&Scope::Anonymous, early[1]).await.unwrap();
        let mut tasks = Vec::new();
        for &id in &early {
            let f = Arc::clone(&f);
            tasks.push(tokio::spawn(async move {
                f.engine.cancel(&Scope::Anonymous, id).await.map(|_| None)
            }));
        }
        // The removal starts before or after the new holds, by turns.
        let remover = |f: Arc<Fixture<S>>| {
            tokio::spawn(async move {
                for _ in 0..4 {
                    match f.engine.remove_slot(slot).await {
                        Ok(_) => return true,
                        Err(BookingError::SlotInUse { .. }) => tokio::task::yield_now().await,
                        Err(other) => panic!("round {round}: unexpected {other:?}"),
                    }
                }
                false
            })
        };
        let early_remover = (round % 2 == 0).then(|| remover(Arc::clone(&f)));
        for i in 0..2 {
            let f = Arc::clone(&f);
            tasks.push(tokio::spawn(async move {
                f.engine
                    .hold(slot, &format!("n{round}-{i}"))
                    .await
                    .map(|placed| Some(placed.hold.hold_id))
            }));
        }
        let remover = early_remover.unwrap_or_else(|| remover(Arc::clone(&f)));
        let mut holds = early.clone();
        for task in tasks {
            match task.await.expect("task") {
                Ok(Some(id)) => holds.push(id),
                Ok(None) => {}
                Err(BookingError::SlotNotFound { .. }) => {}
                Err(other) => panic!("round {round}: unexpected {other:?}"),
            }
        }
        let was_removed = remover.await.expect("task");
        let stored = f.stored_slot(slot).await;
        assert_eq!(stored.removed_at.is_some(), was_removed, "round {round}");
        if was_removed {
            removals += 1;
            for &id in &holds {
                let hold = f.engine.get_hold(&Scope::BackOffice, id).await.unwrap();
                assert!(
                    !matches!(hold.status, HoldStatus::Held | HoldStatus::Confirmed),
                    "round {round}: hold {id} is {} on a removed slot",
                    hold.status
                );
            }
        } else {
            refusals += 1;
            // Once its holds are gone, the slot can be removed.
            for &id in &holds[2..] {
                f.engine.cancel(&Scope::Anonymous, id).await.unwrap();
            }
            f.engine.remove_slot(slot).await.unwrap();
        }
        f.assert_invariant(slot, &holds).await;
    }
    eprintln!("race_removal: {removals} rounds removed the slot at once, {refusals} refused it");
}
