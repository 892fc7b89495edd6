//! Lifecycle cases under failure: a store that fails, stalls and panics, and calls dropped
//! part-way, never break the invariant or leak capacity.

use std::sync::Arc;

use crate::conformance::support::hours;
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::model::{AvailabilityQuery, HoldId, SlotId};
use crate::scope::Scope;
use crate::store::HoldStore;

/// Finds every hold placed with one of `keys` on `slot` by replaying the keys (a replay
/// returns the hold a lost or dropped call may have created; a key with no hold places one
/// now, which the invariant then counts too).
async fn discover<S: HoldStore>(f: &Fixture<S>, slot: SlotId, keys: &[String]) -> Vec<HoldId> {
    let mut ids = Vec::new();
    for key in keys {
        match f.engine.hold(slot, key).await {
            Ok(placed) => ids.push(placed.hold.hold_id),
            Err(BookingError::SoldOut { .. }) => {}
            Err(other) => panic!("replaying {key}: {other:?}"),
        }
    }
    ids.sort();
    ids.dedup();
    ids
}

/// A store that fails, stalls and panics at random (before or after committing) never
/// leaves the invariant broken or a caller waiting; errors arrive as `BookingError`s.
pub(super) async fn faults_never_break_the_invariant_or_hang_a_caller<S: HoldStore>(store: S) {
    use crate::conformance::faults::{FaultRates, FaultyStore};
    let faulty = Arc::new(FaultyStore::new(store, FaultRates::CHAOS, 0x5eed));
    faulty.set_enabled(false);
    let f = Arc::new(Fixture::new(Arc::clone(&faulty)));
    let slot = f.slot(6, hours(1)).await;
    faulty.set_enabled(true);
    let keys: Vec<String> = (0..30).map(|i| format!("fault-{i}")).collect();
    let tasks: Vec<_> = (0..150)
        .map(|i| {
            let f = Arc::clone(&f);
            let key = keys[i % keys.len()].clone();
            tokio::spawn(async move {
                let mut errors = Vec::new();
                let bounded = std::time::Duration::from_secs(20);
                let placed = tokio::time::timeout(bounded, f.engine.hold(slot, &key))
                    .await
                    .expect("a hold hung");
                let id = match placed {
                    Ok(placed) => placed.hold.hold_id,
                    Err(error) => {
                        errors.push(error);
                        return errors;
                    }
                };
                let second = if i % 2 == 0 {
                    tokio::time::timeout(bounded, f.engine.confirm(&Scope::Anonymous, id)).await
                } else {
                    tokio::time::timeout(bounded, f.engine.cancel(&Scope::Anonymous, id)).await
                };
                if let Err(error) = second.expect("a confirm or cancel hung") {
                    errors.push(error);
                }
                let listing =
                    tokio::time::timeout(bounded, f.engine.availability(AvailabilityQuery::all()))
                        .await
                        .expect("availability hung");
                if let Err(error) = listing {
                    errors.push(error);
                }
                errors
            })
        })
        .collect();
    let mut store_errors = 0;
    for task in tasks {
        for error in task.await.expect("no panic reaches the caller") {
            match error {
                BookingError::Store(_) => store_errors += 1,
                BookingError::SoldOut { .. }
                | BookingError::HoldCancelled { .. }
                | BookingError::HoldExpired { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert!(store_errors > 0, "the faults struck");
    faulty.set_enabled(false);
    let holds = discover(&f, slot, &keys).await;
    f.assert_invariant(slot, &holds).await;
}

/// Calls dropped part-way (at a spread of points) leave no capacity taken without a hold,
/// and no unit returned twice; the store keeps working afterwards.
pub(super) async fn dropped_calls_leak_no_capacity<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(4, hours(1)).await;
    let keys: Vec<String> = (0..40).map(|i| format!("drop-{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let budget = std::time::Duration::from_micros((i as u64 * 97) % 2_000);
        let _ = tokio::time::timeout(budget, f.engine.hold(slot, key)).await;
        if let Ok(placed) = f.engine.hold(slot, key).await {
            let id = placed.hold.hold_id;
            if i % 3 == 0 {
                let _ = tokio::time::timeout(budget, f.engine.cancel(&Scope::Anonymous, id)).await;
            } else {
                let _ = tokio::time::timeout(budget, f.engine.confirm(&Scope::Anonymous, id)).await;
            }
        }
        // A dropped availability read must not wedge the cache either.
        let _ = tokio::time::timeout(budget, f.engine.availability(AvailabilityQuery::all())).await;
    }
    let holds = discover(&f, slot, &keys).await;
    f.assert_invariant(slot, &holds).await;
    let more = f.slot(1, hours(2)).await;
    assert!(
        f.engine.hold(more, "after-the-drops").await.is_ok(),
        "the store still works"
    );
    assert!(f
        .engine
        .availability(AvailabilityQuery::all())
        .await
        .is_ok());
}
