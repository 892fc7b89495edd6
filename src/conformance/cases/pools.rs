//! Pool cases: a capacity several slots draw from, taken with every unit of its slots and given
//! back with them, shown in availability, administered without selling a unit twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::Duration;

use crate::bookings::NewBooking;
use crate::conformance::fixture::cached_engine;
use crate::conformance::support::hours;
use crate::conformance::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{
    AvailabilityQuery, HoldId, HoldStatus, LineProblem, LineShortfall, NewPool, PoolId,
    PoolSummary, SlotId, MAX_POOLS_PER_SLOT,
};
use crate::scope::Scope;
use crate::store::{BookingStore, PoolStore, SlotAdmin};

const ANY: Scope = Scope::Anonymous;

impl<S: PoolStore + BookingStore + SlotAdmin> Fixture<S> {
    /// A pool of `capacity` with `slots` attached.
    pub(crate) async fn pool(&self, capacity: i32, slots: &[SlotId]) -> PoolId {
        let pool = self
            .engine
            .create_pool(NewPool::new(capacity))
            .await
            .unwrap();
        for slot in slots {
            self.engine.attach_slot(pool.pool_id, *slot).await.unwrap();
        }
        pool.pool_id
    }

    /// The pool as the engine reads it.
    pub(crate) async fn read_pool(&self, pool_id: PoolId) -> PoolSummary {
        self.engine.get_pool(pool_id).await.expect("get_pool")
    }

    /// A hold of `quantity` on `slot`; its id.
    async fn take(&self, slot: SlotId, key: &str, quantity: i32) -> Result<HoldId, BookingError> {
        let hold = NewHold::new(slot, key).quantity(quantity);
        self.engine.place_hold(hold).await.map(|h| h.hold.hold_id)
    }

    /// Checks the pool invariant, given every hold ever placed on its slots (holds on other
    /// slots are left out): `remaining + held (as stored) + confirmed == capacity`, no unit
    /// sold twice, and each slot's own invariant.
    pub(crate) async fn assert_pool(&self, pool_id: PoolId, holds: &[HoldId]) {
        let pool = self
            .engine
            .store()
            .get_pool(pool_id, self.now())
            .await
            .expect("get_pool")
            .outcome
            .expect("pool exists");
        let (mut stored_held, mut confirmed, mut active) = (0i64, 0i64, 0i64);
        let mut by_slot: std::collections::BTreeMap<SlotId, Vec<HoldId>> = Default::default();
        for &hold_id in holds {
            let hold = self.stored_hold(hold_id).await.expect("hold exists");
            if !pool.pool.slots.contains(&hold.slot_id) {
                continue;
            }
            by_slot.entry(hold.slot_id).or_default().push(hold_id);
            let units = i64::from(hold.quantity);
            match hold.status {
                HoldStatus::Held => stored_held += units,
                HoldStatus::Confirmed => confirmed += units,
                _ => {}
            }
            if hold.is_active_at(self.now()) {
                active += units;
            }
        }
        let (capacity, remaining) = (
            i64::from(pool.pool.capacity),
            i64::from(pool.pool.stored_remaining),
        );
        assert!(
            (0..=capacity).contains(&remaining),
            "pool {pool_id}: remaining {remaining} outside 0..={capacity}"
        );
        assert_eq!(
            remaining + stored_held + confirmed,
            capacity,
            "pool {pool_id}: remaining {remaining} + held {stored_held} + confirmed {confirmed} != capacity {capacity}"
        );
        assert!(
            confirmed + active <= capacity,
            "pool {pool_id} oversold: confirmed {confirmed} + active {active} > {capacity}"
        );
        for (slot, holds) in by_slot {
            self.assert_invariant(slot, &holds).await;
        }
    }
}

/// Every unit a hold takes is taken from its slot and its pool; cancelling gives both back;
/// availability shows each slot the least of its own and its pool's free units.
pub(super) async fn pool_caps_its_slots_together<S: PoolStore + BookingStore + SlotAdmin>(
    store: S,
) {
    let f = Fixture::new(store);
    let (a, b, lone) = (
        f.slot(4, hours(1)).await,
        f.slot(4, hours(2)).await,
        f.slot(4, hours(3)).await,
    );
    let pool = f.pool(5, &[a, b]).await;
    assert_eq!(f.read_pool(pool).await.slots, vec![a, b]);
    let first = f.take(a, "a", 4).await.unwrap();
    assert_eq!(
        f.available(b).await,
        Some(1),
        "b shows its pool's last unit"
    );
    assert_eq!(
        f.available(lone).await,
        Some(4),
        "a slot in no pool is its own"
    );
    let refused = f.take(b, "b", 2).await.unwrap_err();
    assert!(matches!(refused, BookingError::SoldOut { slot_id } if slot_id == b));
    assert_eq!(
        f.remaining(b).await,
        4,
        "a refused hold takes nothing of its slot"
    );
    let second = f.take(b, "b1", 1).await.unwrap();
    let summary = f.read_pool(pool).await;
    assert_eq!(
        (summary.remaining, summary.held, summary.confirmed),
        (0, 5, 0)
    );
    f.engine.confirm(&ANY, second).await.unwrap();
    f.assert_pool(pool, &[first, second]).await;

    f.engine.cancel(&ANY, first).await.unwrap();
    let summary = f.read_pool(pool).await;
    assert_eq!(
        (summary.remaining, summary.held, summary.confirmed),
        (4, 0, 1)
    );
    assert_eq!(f.available(a).await, Some(4));
    assert_eq!(
        f.available(b).await,
        Some(3),
        "b's own 3 units are fewer than the pool's 4"
    );
    f.assert_pool(pool, &[first, second]).await;
}

/// A booking short in a pool takes nothing from any slot or pool, and names every line on the
/// short pool's slots with the units it could have.
pub(super) async fn pool_refusal_takes_nothing<S: PoolStore + BookingStore + SlotAdmin>(store: S) {
    let f = Fixture::new(store);
    let (a, b, c) = (
        f.slot(5, hours(1)).await,
        f.slot(5, hours(2)).await,
        f.slot(5, hours(3)).await,
    );
    let pool = f.pool(3, &[a, b]).await;
    let request = NewBooking::new("k").line(a, 2).line(b, 2).line(c, 1);
    let refused = f.engine.book(request).await.unwrap_err();
    let BookingError::LinesUnavailable { lines } = refused else {
        panic!("expected lines_unavailable, got {refused:?}");
    };
    let short = |slot_id, quantity| LineShortfall {
        slot_id,
        quantity,
        problem: LineProblem::SoldOut { free: 1 },
    };
    // Each line alone fits the pool's 3, not both: each is named with the units it could
    // have, at most one fewer than it asked.
    assert_eq!(lines, vec![short(a, 2), short(b, 2)]);
    assert_eq!(f.remainders(&[a, b, c]).await, vec![5, 5, 5]);
    assert_eq!(f.read_pool(pool).await.remaining, 3);
    let placed = f
        .engine
        .book(NewBooking::new("k2").line(a, 2).line(b, 1).line(c, 1))
        .await
        .unwrap();
    assert_eq!(f.read_pool(pool).await.remaining, 0);
    let ids: Vec<HoldId> = placed.booking.lines.iter().map(|h| h.hold_id).collect();
    f.assert_pool(pool, &ids).await;
    f.engine
        .cancel_booking(&ANY, placed.booking.booking_id)
        .await
        .unwrap();
    assert_eq!(
        f.read_pool(pool).await.remaining,
        3,
        "a cancelled booking gives back"
    );
    f.assert_pool(pool, &ids).await;
}

/// Expired holds on any slot of a short pool are given back before a hold is refused: the
/// units the listing shows free can be had.
pub(super) async fn pool_reclaims_expired_holds_of_its_slots<
    S: PoolStore + BookingStore + SlotAdmin,
>(
    store: S,
) {
    let f = Fixture::new(store);
    let (a, b) = (f.slot(5, hours(2)).await, f.slot(5, hours(3)).await);
    let pool = f.pool(2, &[a, b]).await;
    let old = f.take(a, "old", 2).await.unwrap();
    assert_eq!(f.available(b).await, Some(0));
    f.advance(Duration::minutes(10));
    assert_eq!(f.available(b).await, Some(2), "expired units are free");
    let summary = f.read_pool(pool).await;
    assert_eq!((summary.remaining, summary.held), (2, 0));
    let new = f.take(b, "new", 2).await.unwrap();
    assert_eq!(f.stored_status(old).await, Some(HoldStatus::Expired));
    f.assert_pool(pool, &[old, new]).await;

    // A booking too.
    f.advance(Duration::minutes(10));
    let booking = f
        .engine
        .book(NewBooking::new("both").line(a, 1).line(b, 1))
        .await
        .unwrap();
    assert_eq!(f.stored_status(new).await, Some(HoldStatus::Expired));
    let mut ids = vec![old, new];
    ids.extend(booking.booking.lines.iter().map(|h| h.hold_id));
    f.assert_pool(pool, &ids).await;
}

/// A slot in two pools, each short only by the expired holds of its other slot: a hold on it,
/// and then a booking, reclaim both pools and are placed (every short pool is given back, not
/// only the first found short).
pub(super) async fn every_short_pool_is_reclaimed<S: PoolStore + BookingStore + SlotAdmin>(
    store: S,
) {
    let f = Fixture::new(store);
    // Two slots `a`, `b` and a slot `shared` in pool {a, shared} and pool {b, shared}, each of
    // one unit, both taken by holds on `a` and `b` that then expire.
    let setup = async |n: &str| {
        let (a, b, shared) = (
            f.slot(5, hours(2)).await,
            f.slot(5, hours(2)).await,
            f.slot(5, hours(2)).await,
        );
        let pools = [f.pool(1, &[a, shared]).await, f.pool(1, &[b, shared]).await];
        let old = [
            f.take(a, &format!("{n}-a"), 1).await.unwrap(),
            f.take(b, &format!("{n}-b"), 1).await.unwrap(),
        ];
        assert_eq!(f.available(shared).await, Some(0));
        (shared, pools, old)
    };
    let (shared, pools, old) = setup("hold").await;
    f.advance(Duration::minutes(10));
    assert_eq!(f.available(shared).await, Some(1), "expired units are free");
    let hold = f.take(shared, "shared", 1).await.unwrap();
    for (pool, old) in pools.into_iter().zip(old) {
        assert_eq!(f.stored_status(old).await, Some(HoldStatus::Expired));
        f.assert_pool(pool, &[old, hold]).await;
    }

    // A booking too.
    let (shared, pools, old) = setup("booking").await;
    let other = f.slot(5, hours(2)).await;
    f.advance(Duration::minutes(10));
    let booking = f
        .engine
        .book(NewBooking::new("both").line(shared, 1).line(other, 1))
        .await
        .unwrap();
    for (pool, old) in pools.into_iter().zip(old) {
        assert_eq!(f.stored_status(old).await, Some(HoldStatus::Expired));
        let mut ids = vec![old];
        ids.extend(booking.booking.lines.iter().map(|h| h.hold_id));
        f.assert_pool(pool, &ids).await;
    }
}

/// Attaching a slot takes its units held and confirmed from the pool, detaching gives them
/// back; the pool never holds more than its capacity, and every refusal changes nothing.
pub(super) async fn attaching_and_detaching_move_the_slots_units<
    S: PoolStore + BookingStore + SlotAdmin,
>(
    store: S,
) {
    let f = Fixture::new(store);
    let (a, b) = (f.slot(5, hours(1)).await, f.slot(5, hours(2)).await);
    let sold = f.take(a, "sold", 3).await.unwrap();
    f.engine.confirm(&ANY, sold).await.unwrap();
    let pool = f.pool(2, &[]).await;
    let refused = f.engine.attach_slot(pool, a).await.unwrap_err();
    assert!(
        matches!(
            refused,
            BookingError::PoolInUse {
                taken: 0,
                requested: 2,
                ..
            }
        ),
        "the pool's own units taken are 0; its capacity 2 cannot hold a's 3: {refused:?}"
    );
    assert!(f.read_pool(pool).await.slots.is_empty(), "nothing changed");
    f.engine.change_pool_capacity(pool, 4).await.unwrap();
    let attached = f.engine.attach_slot(pool, a).await.unwrap();
    assert_eq!((attached.remaining, attached.confirmed), (1, 3));
    assert_eq!(
        f.engine.attach_slot(pool, a).await.unwrap(),
        attached,
        "attached already"
    );
    f.assert_pool(pool, &[sold]).await;
    assert_eq!(f.available(a).await, Some(1));
    let detached = f.engine.detach_slot(pool, a).await.unwrap();
    assert_eq!((detached.remaining, detached.confirmed), (4, 0));
    assert!(detached.slots.is_empty());
    assert_eq!(
        f.engine.detach_slot(pool, a).await.unwrap(),
        detached,
        "detached already"
    );
    assert_eq!(f.available(a).await, Some(2));

    let code = |r: Result<PoolSummary, BookingError>| r.unwrap_err().code();
    assert_eq!(
        code(f.engine.attach_slot(PoolId(i64::MAX), a).await),
        "pool_not_found"
    );
    assert_eq!(
        code(f.engine.attach_slot(pool, SlotId(i64::MAX)).await),
        "slot_not_found"
    );
    assert_eq!(
        code(f.engine.detach_slot(PoolId(i64::MAX), a).await),
        "pool_not_found"
    );
    assert_eq!(
        code(f.engine.get_pool(PoolId(i64::MAX)).await),
        "pool_not_found"
    );
    for _ in 0..MAX_POOLS_PER_SLOT {
        f.pool(10, &[b]).await;
    }
    assert_eq!(code(f.engine.attach_slot(pool, b).await), "too_many_pools");
    assert!(!f.read_pool(pool).await.slots.contains(&b));
    f.engine.cancel(&ANY, sold).await.unwrap();
    f.engine.remove_slot(a).await.unwrap();
    assert_eq!(code(f.engine.attach_slot(pool, a).await), "slot_not_found");
}

/// A pool's capacity changes as a slot's: never below its units held and confirmed, expired
/// holds given back when that makes it fit, invalid values refused.
pub(super) async fn pool_capacity_never_below_its_taken_units<
    S: PoolStore + BookingStore + SlotAdmin,
>(
    store: S,
) {
    let f = Fixture::new(store);
    let (a, b) = (f.slot(5, hours(2)).await, f.slot(5, hours(3)).await);
    let pool = f.pool(5, &[a, b]).await;
    let held = f.take(a, "held", 2).await.unwrap();
    let sold = f.take(b, "sold", 1).await.unwrap();
    f.engine.confirm(&ANY, sold).await.unwrap();
    let refused = f.engine.change_pool_capacity(pool, 2).await.unwrap_err();
    assert!(
        matches!(
            refused,
            BookingError::PoolInUse {
                requested: 2,
                taken: 3,
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(f.read_pool(pool).await.remaining, 2, "nothing changed");
    let invalid = f.engine.change_pool_capacity(pool, -1).await.unwrap_err();
    assert_eq!(invalid.code(), "invalid_pool");
    let invalid = f.engine.create_pool(NewPool::new(-1)).await.unwrap_err();
    assert_eq!(invalid.code(), "invalid_pool");
    assert_eq!(
        f.engine
            .change_pool_capacity(pool, 3)
            .await
            .unwrap()
            .remaining,
        0
    );
    f.assert_pool(pool, &[held, sold]).await;
    f.advance(Duration::minutes(10));
    let lowered = f.engine.change_pool_capacity(pool, 1).await.unwrap();
    assert_eq!((lowered.capacity, lowered.remaining), (1, 0));
    assert_eq!(f.stored_status(held).await, Some(HoldStatus::Expired));
    f.assert_pool(pool, &[held, sold]).await;
    let raised = f.engine.change_pool_capacity(pool, 10).await.unwrap();
    assert_eq!(
        (raised.capacity, raised.remaining, raised.confirmed),
        (10, 9, 1)
    );
}

/// A pool's change reclaims the expired holds of its slots (and of the slot to attach) only
/// when that makes it fit: refused even so, every hold stays as it was.
pub(super) async fn pool_changes_reclaim_only_what_makes_them_fit<
    S: PoolStore + BookingStore + SlotAdmin,
>(
    store: S,
) {
    let f = Fixture::new(store);
    let (a, b) = (f.slot(5, hours(1)).await, f.slot(5, hours(2)).await);
    let pool = f.pool(4, &[a]).await;
    for (slot, key) in [(a, "sold-a"), (b, "sold-b")] {
        let sold = f.take(slot, key, 1).await.unwrap();
        f.engine.confirm(&ANY, sold).await.unwrap();
    }
    let lapsed = f.take(a, "lapsed", 2).await.unwrap();
    let lapsed_b = f.take(b, "lapsed-b", 1).await.unwrap();
    f.advance(Duration::minutes(10));
    let code = |r: Result<PoolSummary, BookingError>| r.unwrap_err().code();

    // Down to 0 the pool would give up its confirmed unit too.
    assert_eq!(
        code(f.engine.change_pool_capacity(pool, 0).await),
        "pool_in_use"
    );
    assert_eq!(
        f.stored_status(lapsed).await,
        Some(HoldStatus::Held),
        "nothing reclaimed"
    );
    // A pool of 0 cannot take b's confirmed unit, expired hold given back or not.
    let empty = f.pool(0, &[]).await;
    assert_eq!(code(f.engine.attach_slot(empty, b).await), "pool_in_use");
    assert_eq!(
        f.stored_status(lapsed_b).await,
        Some(HoldStatus::Held),
        "nothing reclaimed"
    );

    // A pool of 1 can, once b's expired hold is given back.
    let one = f.pool(1, &[]).await;
    let attached = f.engine.attach_slot(one, b).await.unwrap();
    assert_eq!((attached.remaining, attached.confirmed), (0, 1));
    assert_eq!(f.stored_status(lapsed_b).await, Some(HoldStatus::Expired));
    // Down to 1 the pool keeps its confirmed unit, once a's expired hold is given back.
    let lowered = f.engine.change_pool_capacity(pool, 1).await.unwrap();
    assert_eq!((lowered.capacity, lowered.remaining), (1, 0));
    assert_eq!(f.stored_status(lapsed).await, Some(HoldStatus::Expired));
    assert_eq!(f.available(a).await, Some(0));
}

/// An engine's own hold shows at once in its cached listing on every slot of the pool it
/// drew from; a pool change shows at once too.
pub(super) async fn pools_show_in_the_cached_listing_at_once<
    S: PoolStore + BookingStore + SlotAdmin,
>(
    store: S,
) {
    let (engine, start) = cached_engine(store);
    let new_slot = |offset: i64, capacity| {
        let at = start + Duration::hours(offset);
        crate::model::NewSlot::new(at, at + Duration::hours(1), capacity)
    };
    let a = engine.create_slot(new_slot(0, 5)).await.unwrap().slot_id;
    let b = engine.create_slot(new_slot(1, 5)).await.unwrap().slot_id;
    let pool = engine.create_pool(NewPool::new(3)).await.unwrap().pool_id;
    engine.attach_slot(pool, a).await.unwrap();
    engine.attach_slot(pool, b).await.unwrap();
    let shown = |listing: &crate::Availability, slot| listing.entry(slot).map(|e| e.remaining);
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!((shown(&listing, a), shown(&listing, b)), (Some(3), Some(3)));
    let hold = engine
        .place_hold(NewHold::new(a, "k").quantity(2))
        .await
        .unwrap();
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!((shown(&listing, a), shown(&listing, b)), (Some(1), Some(1)));
    engine.cancel(&ANY, hold.hold.hold_id).await.unwrap();
    engine.change_pool_capacity(pool, 4).await.unwrap();
    let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
    assert_eq!((shown(&listing, a), shown(&listing, b)), (Some(4), Some(4)));
}

/// Many tasks holding and booking over slots that share pools never take more than a pool's
/// capacity, and every invariant holds after.
pub(super) async fn race_over_shared_pools_never_oversells<
    S: PoolStore + BookingStore + SlotAdmin,
>(
    store: S,
) {
    let f = Arc::new(Fixture::new(store));
    let mut slots = Vec::new();
    for i in 0..6 {
        slots.push(f.slot(8, hours(1 + i)).await);
    }
    // Slot 2 and 3 are in both pools.
    let day = f.pool(9, &slots[..4]).await;
    let evening = f.pool(7, &slots[2..]).await;
    let slots = Arc::new(slots);
    let tasks: Vec<_> = (0..12u64)
        .map(|task| {
            let (f, slots) = (Arc::clone(&f), Arc::clone(&slots));
            tokio::spawn(async move {
                let mut seed = task.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = |n: u64| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % n
                };
                let (mut ids, mut refused) = (Vec::new(), 0usize);
                for i in 0..8 {
                    let first = next(slots.len() as u64) as usize;
                    let second = (first + 1 + next(slots.len() as u64 - 1) as usize) % slots.len();
                    let key = format!("t{task}-{i}");
                    let placed = if next(2) == 0 {
                        f.take(slots[first], &key, 1 + next(2) as i32)
                            .await
                            .map(|id| vec![id])
                    } else {
                        let request = NewBooking::new(key)
                            .line(slots[first], 1)
                            .line(slots[second], 1);
                        f.engine
                            .book(request)
                            .await
                            .map(|placed| placed.booking.lines.iter().map(|h| h.hold_id).collect())
                    };
                    match placed {
                        Ok(lines) => {
                            if next(4) == 0 {
                                f.engine.cancel(&ANY, lines[0]).await.unwrap();
                            }
                            ids.extend(lines);
                        }
                        Err(
                            BookingError::SoldOut { .. } | BookingError::LinesUnavailable { .. },
                        ) => refused += 1,
                        Err(other) => panic!("task {task}: unexpected {other:?}"),
                    }
                }
                (ids, refused)
            })
        })
        .collect();
    let (mut ids, mut refused) = (Vec::new(), 0);
    for task in tasks {
        let (placed, r) = task.await.expect("race task");
        ids.extend(placed);
        refused += r;
    }
    assert!(
        refused > 0,
        "96 requests for 16 pooled units: some are refused"
    );
    let distinct: BTreeSet<HoldId> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "every hold is its own");
    for pool in [day, evening] {
        f.assert_pool(pool, &ids).await;
    }
}
