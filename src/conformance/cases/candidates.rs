//! Lifecycle cases about "any one of these" holds: the first candidate that fits is taken, a
//! refusal names every candidate, replays return the slot first taken, strategies spread holds
//! as documented, and racing holds never take a unit twice.

use std::sync::Arc;

use crate::candidates::NewAnyHold;
use crate::conformance::support::{hours, ids, owner};
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::model::{CandidateProblem, CandidateRefused, SlotId, Strategy};
use crate::scope::Scope;
use crate::store::HoldStore;

/// An id no store assigned.
const UNKNOWN: SlotId = SlotId(987_654_321);

/// The first candidate, in the listed order, that has the units free is taken; the others
/// are untouched.
pub(super) async fn any_hold_takes_the_first_candidate_that_fits<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let (full, two, one) = (
        f.slot(1, hours(1)).await,
        f.slot(2, hours(1)).await,
        f.slot(1, hours(1)).await,
    );
    let first = f.engine.hold(full, "fills").await.unwrap().hold;
    let placed = f
        .engine
        .hold_any(NewAnyHold::new(vec![UNKNOWN, full, two, one], "any").quantity(2))
        .await
        .unwrap();
    assert!(!placed.replayed);
    assert_eq!((placed.hold.slot_id, placed.hold.quantity), (two, 2));
    assert_eq!(
        (
            f.remaining(full).await,
            f.remaining(two).await,
            f.remaining(one).await
        ),
        (0, 0, 1)
    );
    // The listed order is a preference: both fit, the first listed is taken.
    let next = f
        .engine
        .hold_any(NewAnyHold::new(vec![one, two], "prefers-one"))
        .await
        .unwrap();
    assert_eq!(next.hold.slot_id, one);
    f.assert_invariant(full, &[first.hold_id]).await;
    f.assert_invariant(two, &[placed.hold.hold_id]).await;
    f.assert_invariant(one, &[next.hold.hold_id]).await;
}

/// When no candidate can be had, the refusal names each, in the order tried, with the code a
/// hold on it alone gets; nothing is taken. Invalid candidates never reach the store.
pub(super) async fn any_hold_refusal_names_every_candidate<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let (full, small) = (f.slot(1, hours(1)).await, f.slot(2, hours(1)).await);
    f.engine.hold(full, "fills").await.unwrap();
    f.engine.hold(small, "half").await.unwrap();
    let error = f
        .engine
        .hold_any(NewAnyHold::new(vec![full, UNKNOWN, small], "none").quantity(2))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "no_candidate_available");
    let BookingError::NoCandidateAvailable { candidates } = error else {
        unreachable!()
    };
    let refused = |slot_id, problem| CandidateRefused { slot_id, problem };
    assert_eq!(
        candidates,
        vec![
            refused(full, CandidateProblem::ExceedsCapacity { capacity: 1 }),
            refused(UNKNOWN, CandidateProblem::SlotNotFound),
            refused(small, CandidateProblem::SoldOut),
        ]
    );
    assert_eq!((f.remaining(full).await, f.remaining(small).await), (0, 1));
    for bad in [
        vec![],
        vec![full, small, full],
        (1..=21).map(SlotId).collect(),
    ] {
        let error = f
            .engine
            .hold_any(NewAnyHold::new(bad, "bad"))
            .await
            .unwrap_err();
        assert_eq!(error.code(), "invalid_candidates");
    }
    assert_eq!(
        f.engine
            .hold_any(NewAnyHold::new(vec![small], "q").quantity(0))
            .await
            .unwrap_err()
            .code(),
        "invalid_quantity"
    );
    assert_eq!(f.remaining(small).await, 1, "nothing reached the store");
}

/// The same key with the same candidates (in any order, with any strategy), quantity and
/// owner returns the hold the first call placed, on the slot it took, even when a candidate
/// listed earlier has units free again; anything else is `idempotency_key_reused`.
pub(super) async fn any_hold_replays_on_the_slot_it_took<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let (a, b) = (f.slot(1, hours(1)).await, f.slot(3, hours(1)).await);
    let blocker = f.engine.hold(a, "blocks-a").await.unwrap().hold;
    let alice = owner("alice");
    let request = |candidates: Vec<SlotId>| {
        NewAnyHold::new(candidates, "cart-7")
            .quantity(1)
            .owner(alice.clone())
    };
    let placed = f.engine.hold_any(request(vec![a, b])).await.unwrap().hold;
    assert_eq!(placed.slot_id, b);
    f.engine
        .cancel(&Scope::Anonymous, blocker.hold_id)
        .await
        .unwrap();
    for again in [
        request(vec![a, b]),
        request(vec![b, a]),
        request(vec![a, b]).strategy(Strategy::RoundRobin),
        request(vec![a, b]).strategy(Strategy::LeastBooked),
    ] {
        let replay = f.engine.hold_any(again).await.unwrap();
        assert!(replay.replayed);
        assert_eq!(replay.hold.hold_id, placed.hold_id);
    }
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (1, 2));
    for other in [
        request(vec![a]),
        request(vec![a, b]).quantity(2),
        NewAnyHold::new(vec![a, b], "cart-7"),
    ] {
        let error = f.engine.hold_any(other).await.unwrap_err();
        assert_eq!(error.code(), "idempotency_key_reused");
    }
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (1, 2));
    f.assert_invariant(b, &[placed.hold_id]).await;
}

/// Round robin starts each call one candidate further along; least booked takes the
/// candidate with the fewest units taken (ties in listed order): over candidates that all
/// fit, both spread holds evenly.
pub(super) async fn any_hold_strategies_spread_holds<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let rooms = vec![
        f.slot(10, hours(1)).await,
        f.slot(10, hours(1)).await,
        f.slot(10, hours(1)).await,
    ];
    let mut taken = Vec::new();
    for i in 0..6 {
        let placed = f
            .engine
            .hold_any(
                NewAnyHold::new(rooms.clone(), format!("rr-{i}")).strategy(Strategy::RoundRobin),
            )
            .await
            .unwrap();
        taken.push(placed.hold.slot_id);
    }
    // Each call one further: every window of 3 holds covers the 3 rooms.
    for window in taken.windows(3) {
        let mut seen = window.to_vec();
        seen.sort();
        assert_eq!(seen, rooms, "{taken:?}");
    }
    // Now 2 taken of each. Take 3 more of the first room, 1 of the second.
    for i in 0..3 {
        f.engine
            .hold(rooms[0], &format!("first-{i}"))
            .await
            .unwrap();
    }
    f.engine.hold(rooms[1], "second").await.unwrap();
    let mut least = Vec::new();
    for i in 0..5 {
        let placed = f
            .engine
            .hold_any(
                NewAnyHold::new(rooms.clone(), format!("lb-{i}")).strategy(Strategy::LeastBooked),
            )
            .await
            .unwrap();
        least.push(placed.hold.slot_id);
    }
    // Taken (5, 3, 2): the third room twice (to 4, ties with the second: listed order
    // first), then the second, the third, and with (5, 4, 4)… each step the least booked.
    assert_eq!(
        least,
        vec![rooms[2], rooms[1], rooms[2], rooms[1], rooms[2]],
        "taken before: 5, 3, 2"
    );
    let remaining = [
        f.remaining(rooms[0]).await,
        f.remaining(rooms[1]).await,
        f.remaining(rooms[2]).await,
    ];
    assert_eq!(remaining, [5, 5, 5]);
}

/// Many "any one of these" holds at once over three slots, with every strategy: each slot
/// sells exactly its capacity, no unit twice; the rest are refused naming every candidate.
pub(super) async fn race_any_holds_never_take_a_unit_twice<S: HoldStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let rooms = vec![
        f.slot(4, hours(1)).await,
        f.slot(5, hours(1)).await,
        f.slot(6, hours(1)).await,
    ];
    let strategies = [
        Strategy::Listed,
        Strategy::LeastBooked,
        Strategy::RoundRobin,
    ];
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let (f, rooms) = (Arc::clone(&f), rooms.clone());
            let strategy = strategies[i % 3];
            tokio::spawn(async move {
                f.engine
                    .hold_any(NewAnyHold::new(rooms, format!("race-{i}")).strategy(strategy))
                    .await
            })
        })
        .collect();
    let (mut placed, mut refused) = (Vec::new(), 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(won) => placed.push(won.hold),
            Err(BookingError::NoCandidateAvailable { candidates }) => {
                assert_eq!(candidates.len(), 3);
                refused += 1;
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((placed.len(), refused), (15, 45));
    for &room in &rooms {
        assert_eq!(f.remaining(room).await, 0);
        let on_room: Vec<_> = placed
            .iter()
            .filter(|h| h.slot_id == room)
            .cloned()
            .collect();
        f.assert_invariant(room, &ids(&on_room)).await;
    }
}
