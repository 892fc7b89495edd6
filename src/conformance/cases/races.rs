//! Lifecycle races: many callers holding, replaying, reclaiming, confirming and cancelling at
//! once, on one slot or across owners, never sell more than the capacity.

use std::collections::HashSet;
use std::sync::Arc;

use crate::conformance::support::{hours, ids, join_racing_holds, owner, place, race_holds, ttl};
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::model::{HoldId, HoldStatus, SlotId};
use crate::scope::Scope;
use crate::store::HoldStore;

/// Many concurrent holds on one slot: exactly `capacity` succeed, the rest are sold out.
pub(super) async fn race_holds_on_one_slot_take_exactly_its_capacity<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(7, hours(1)).await;
    let (held, sold_out) = race_holds(&f, slot, (0..250).map(|i| format!("race-{i}"))).await;
    assert_eq!((held.len(), sold_out), (7, 243));
    assert_eq!(f.remaining(slot).await, 0);
    f.assert_invariant(slot, &ids(&held)).await;
}

/// Many concurrent holds with one key: one hold, every caller gets it.
pub(super) async fn race_one_key_makes_one_hold<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(100, hours(1)).await;
    let tasks: Vec<_> = (0..60)
        .map(|_| {
            let f = Arc::clone(&f);
            tokio::spawn(async move { f.engine.hold(slot, "one-key").await })
        })
        .collect();
    let mut ids = HashSet::new();
    let mut created = 0;
    for task in tasks {
        let placed = task.await.expect("task").expect("hold or replay");
        ids.insert(placed.hold.hold_id);
        created += usize::from(!placed.replayed);
    }
    assert_eq!(created, 1, "exactly one caller created the hold");
    assert_eq!(ids.len(), 1, "everyone got the same hold");
    assert_eq!(f.remaining(slot).await, 99);
    let id = ids.into_iter().next().unwrap_or(HoldId(0));
    f.assert_invariant(slot, &[id]).await;
}

/// Racing holds on a slot full of expired holds reclaim each unit once.
pub(super) async fn race_reclaim_returns_each_expired_unit_once<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(5, hours(2)).await;
    let mut all = f.hold_each(slot, (0..5).map(|i| format!("old-{i}"))).await;
    f.advance(ttl());
    let (won, _) = race_holds(&f, slot, (0..80).map(|i| format!("new-{i}"))).await;
    all.extend(ids(&won));
    assert_eq!(won.len(), 5);
    assert_eq!(f.remaining(slot).await, 0);
    f.assert_invariant(slot, &all).await;
}

/// Concurrent cancels of one hold give its unit back once.
pub(super) async fn race_cancels_of_one_hold_return_one_unit<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(3, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold.hold_id;
    f.engine.confirm(&Scope::Anonymous, hold).await.unwrap();
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let f = Arc::clone(&f);
            tokio::spawn(async move { f.engine.cancel(&Scope::Anonymous, hold).await })
        })
        .collect();
    for task in tasks {
        let cancelled = task.await.expect("task").expect("cancel is idempotent");
        assert_eq!(cancelled.status, HoldStatus::Cancelled);
    }
    assert_eq!(f.remaining(slot).await, 3);
    f.assert_invariant(slot, &[hold]).await;
}

/// Holds, confirms, cancels and expiries racing on two slots keep the invariant.
pub(super) async fn race_mixed_operations_keep_the_invariant<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slots = [f.slot(4, hours(2)).await, f.slot(1, hours(2)).await];
    // Replays hand several tasks the same hold: a set counts each hold once.
    let mut all = std::collections::BTreeSet::<(SlotId, HoldId)>::new();
    for round in 0..4 {
        let tasks: Vec<_> = (0..48)
            .map(|i| {
                let f = Arc::clone(&f);
                let slot = slots[i % 2];
                tokio::spawn(async move {
                    let placed = f.engine.hold(slot, &format!("r{round}-{}", i % 24)).await;
                    let Ok(placed) = placed else { return None };
                    let id = placed.hold.hold_id;
                    match i % 3 {
                        0 => {
                            let _ = f.engine.confirm(&Scope::Anonymous, id).await;
                        }
                        1 => {
                            let _ = f.engine.cancel(&Scope::Anonymous, id).await;
                        }
                        _ => {
                            let _ = f.engine.confirm(&Scope::Anonymous, id).await;
                            let _ = f.engine.cancel(&Scope::Anonymous, id).await;
                        }
                    }
                    Some((slot, id))
                })
            })
            .collect();
        for task in tasks {
            if let Some(placed) = task.await.expect("task") {
                all.insert(placed);
            }
        }
        f.advance(ttl() / 2);
        for slot in slots {
            let ids: Vec<HoldId> = all
                .iter()
                .filter(|(s, _)| *s == slot)
                .map(|(_, h)| *h)
                .collect();
            f.assert_invariant(slot, &ids).await;
        }
    }
    assert!(!all.is_empty());
}

/// A flash sale: 240 concurrent holds of 1 to 3 units on one slot of 100, every fifth
/// request sent twice at once (the same key, quantity and owner). Nothing is sold twice: the
/// units taken are the holds created, each key has one hold, both copies of a request get the
/// same answer (one creates, the other replays it, or both are sold out), and no request is
/// refused while the units it asked for are still free when the sale ends (units only go, so a
/// refusal of `q` units means fewer than `q` were left then and after).
pub(super) async fn race_a_flash_sale_sells_every_unit_once<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(100, hours(1)).await;
    let requests: Vec<(String, i32, String)> = (0..200)
        .map(|i| (format!("sale-{i}"), i % 3 + 1, format!("buyer-{}", i % 7)))
        .collect();
    let sent: Vec<usize> = (0..requests.len())
        .flat_map(|i| std::iter::repeat_n(i, if i % 5 == 0 { 2 } else { 1 }))
        .collect();
    let tasks: Vec<_> = sent
        .iter()
        .map(|&i| {
            let f = Arc::clone(&f);
            let (key, quantity, who) = requests[i].clone();
            tokio::spawn(async move { place(&f, slot, &key, quantity, Some(&who)).await })
        })
        .collect();
    let mut answers: Vec<Vec<Result<(HoldId, bool), i32>>> = vec![Vec::new(); requests.len()];
    let mut created = Vec::new();
    for (task, &i) in tasks.into_iter().zip(&sent) {
        let quantity = requests[i].1;
        match task.await.expect("task") {
            Ok(placed) => {
                assert_eq!(placed.hold.quantity, quantity);
                if !placed.replayed {
                    created.push(placed.hold.clone());
                }
                answers[i].push(Ok((placed.hold.hold_id, placed.replayed)));
            }
            Err(BookingError::SoldOut { .. }) => answers[i].push(Err(quantity)),
            Err(other) => panic!("request {i}: unexpected {other:?}"),
        }
    }
    let sold: i32 = created.iter().map(|h| h.quantity).sum();
    let left = f.remaining(slot).await;
    assert_eq!(left, 100 - sold, "the units taken are the holds created");
    let unique: HashSet<HoldId> = created.iter().map(|h| h.hold_id).collect();
    assert_eq!(unique.len(), created.len());
    for (i, answer) in answers.iter().enumerate() {
        match answer.as_slice() {
            [Ok((_, false))] | [Err(_)] | [Err(_), Err(_)] => {}
            [Ok((a, ra)), Ok((b, rb))] => {
                assert_eq!(a, b, "request {i}: both copies get the same hold");
                assert!(ra != rb, "request {i}: one copy creates, the other replays");
            }
            other => panic!("request {i}: inconsistent answers {other:?}"),
        }
        for refused in answer.iter().filter_map(|a| a.err()) {
            assert!(
                refused > left,
                "request {i} of {refused} units was refused, yet {left} units are left"
            );
        }
    }
    assert!(
        left < 3,
        "with 1-unit requests among the 240, at most 2 units stay unsold: {left}"
    );
    f.assert_invariant(slot, &ids(&created)).await;
}

/// Ten concurrent 3-unit holds on a 6-unit slot sell exactly two, every round.
pub(super) async fn race_multi_unit_holds_sell_whole_holds<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    for round in 0..20 {
        let slot = f.slot(6, hours(1)).await;
        let tasks: Vec<_> = (0..10)
            .map(|i| {
                let f = Arc::clone(&f);
                tokio::spawn(async move {
                    let key = format!("r{round}-{i}");
                    place(&f, slot, &key, 3, Some(&format!("buyer-{i}"))).await
                })
            })
            .collect();
        let (sold, refused) = join_racing_holds(tasks, &format!("round {round}: ")).await;
        assert_eq!((sold.len(), refused), (2, 8), "round {round}");
        assert_eq!(f.remaining(slot).await, 0, "round {round}");
        f.assert_invariant(slot, &ids(&sold)).await;
    }
}

/// Owners racing on each other's holds: every foreign call is `hold_not_found`, every own
/// call lands, and the invariant holds.
pub(super) async fn race_owners_touch_only_their_own_holds<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(40, hours(1)).await;
    let mut holds = Vec::new();
    for i in 0..20 {
        let who = if i % 2 == 0 { "alice" } else { "bob" };
        holds.push(
            place(&f, slot, &format!("k{i}"), 2, Some(who))
                .await
                .unwrap()
                .hold,
        );
    }
    let tasks: Vec<_> = holds
        .iter()
        .flat_map(|hold| {
            let mine = Scope::of(hold.owner.clone());
            let theirs = Scope::Owner(owner(if hold.owner == Some(owner("alice")) {
                "bob"
            } else {
                "alice"
            }));
            let id = hold.hold_id;
            [(mine, true), (theirs, false)].map(|(scope, own)| {
                let f = Arc::clone(&f);
                tokio::spawn(async move {
                    let result = if id.0 % 2 == 0 {
                        f.engine.cancel(&scope, id).await
                    } else {
                        f.engine.confirm(&scope, id).await
                    };
                    (own, result)
                })
            })
        })
        .collect();
    for task in tasks {
        match task.await.expect("task") {
            (true, Ok(_)) => {}
            (false, Err(BookingError::HoldNotFound { .. })) => {}
            (own, other) => panic!("own {own}: {other:?}"),
        }
    }
    let ids: Vec<_> = holds.iter().map(|h| h.hold_id).collect();
    f.assert_invariant(slot, &ids).await;
}
