//! How sequences of operations are generated.

use proptest::prelude::*;

use crate::conformance::{HOLD_TTL, MAX_REQUESTED_TTL};

use super::ops::ModelOp;

pub(super) fn lifetime() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        6 => Just(None),
        1 => Just(Some(0)),
        2 => Just(Some(1)),
        2 => Just(Some(120)),
        2 => Just(Some(MAX_REQUESTED_TTL.as_secs())),
        1 => Just(Some(MAX_REQUESTED_TTL.as_secs() + 1)),
    ]
}

/// The generator for one operation: a lifecycle, an administration or a query operation, in
/// the proportions 18 : 5 : 2, so that every operation is drawn as often as its weight within
/// its group says (of 25 in all).
pub fn op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        18 => lifecycle_op(),
        5 => admin_op(),
        2 => query_op(),
    ]
}

/// The generator for one lifecycle operation, which any store must run: create a slot, hold,
/// hold on any one of several slots, confirm, cancel, renew or read a hold, read the availability listing, move the clock.
pub fn lifecycle_op() -> impl Strategy<Value = ModelOp> {
    let ttl = HOLD_TTL.as_micros() as i64;
    let quantity = prop_oneof![8 => Just(1i32), 4 => 2..=3i32, 1 => Just(0i32), 1 => Just(7i32), 1 => Just(1001i32)];
    prop_oneof![
        1 => (1..=6i32, 1..=40i64, 0..3u8).prop_map(|(capacity, m, resource)| ModelOp::CreateSlot { capacity, starts_in: m * 60, resource }),
        6 => (0..4usize, 0..8u8, quantity, 0..3u8, lifetime())
            .prop_map(|(slot, key, quantity, owner, lifetime)| ModelOp::Hold { slot, key, quantity, owner, lifetime }),
        3 => (proptest::collection::vec(0..5usize, 0..=3), 0..8u8, prop_oneof![4 => Just(1i32), 2 => 2..=3i32, 1 => Just(0i32)], 0..3u8)
            .prop_map(|(slots, key, quantity, owner)| ModelOp::HoldAny { slots, key, quantity, owner }),
        2 => (0..10usize, 0..7u8).prop_map(|(hold, scope)| ModelOp::Confirm { hold, scope }),
        2 => (0..10usize, 0..7u8).prop_map(|(hold, scope)| ModelOp::Cancel { hold, scope }),
        2 => (0..10usize, 0..7u8, lifetime()).prop_map(|(hold, scope, lifetime)| ModelOp::Renew { hold, scope, lifetime }),
        1 => (0..10usize, 0..7u8).prop_map(|(hold, scope)| ModelOp::Get { hold, scope }),
        1 => (0..3u8).prop_map(|resource| ModelOp::Availability { resource }),
        2 => prop_oneof![Just(1i64), Just(1_000_000), Just(60_000_000), Just(ttl - 1), Just(ttl), Just(ttl + 1), Just(ttl * 3)]
            .prop_map(|micros| ModelOp::Advance { micros }),
        1 => (0..10usize, -1..=1i64).prop_map(|(hold, offset)| ModelOp::ToExpiry { hold, offset }),
    ]
}

/// A capacity change: to a capacity from `to`, by -3 to 3 units (or far out of range), or
/// to one of `to` while it is 1 to 8 (often what it is, often not).
pub fn capacity_change(
    to: impl Strategy<Value = i32> + Clone,
) -> impl Strategy<Value = crate::CapacityChange> {
    use crate::CapacityChange;
    prop_oneof![
        4 => to.clone().prop_map(CapacityChange::To),
        3 => prop_oneof![6 => -3..=3i32, 1 => Just(i32::MIN), 1 => Just(i32::MAX)]
            .prop_map(CapacityChange::By),
        2 => (1..=8i32, to).prop_map(|(expected, to)| CapacityChange::Replace { expected, to }),
    ]
}

/// The generator for one administration operation: change a capacity (some out of bounds on
/// purpose), close or reopen sales, remove a slot, read the operator's listing.
pub fn admin_op() -> impl Strategy<Value = ModelOp> {
    let capacity =
        prop_oneof![8 => 1..=8i32, 1 => Just(0i32), 1 => Just(-1i32), 1 => Just(i32::MIN)];
    prop_oneof![
        3 => (0..5usize, capacity_change(capacity))
            .prop_map(|(slot, change)| ModelOp::SetCapacity { slot, change }),
        1 => (0..5usize, any::<bool>()).prop_map(|(slot, closed)| ModelOp::SetClosed { slot, closed }),
        1 => (0..5usize).prop_map(|slot| ModelOp::Remove { slot }),
        1 => (1..=3u32, 0..3u8).prop_map(|(limit, resource)| ModelOp::ListSlots { limit, resource }),
    ]
}

/// The generator for one query operation: read every page of an owner's holds or of a slot's
/// roster.
pub fn query_op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        1 => (1..3u8, 1..=3u32).prop_map(|(owner, limit)| ModelOp::OwnerHolds { owner, limit }),
        1 => (0..4usize, 1..=3u32).prop_map(|(slot, limit)| ModelOp::Roster { slot, limit }),
    ]
}

/// A sequence: two slots to start with, then `1..=max_len` random operations.
pub fn sequence(max_len: usize) -> impl Strategy<Value = Vec<ModelOp>> {
    after_opening(proptest::collection::vec(op(), 1..=max_len))
}

/// Every sequence starts with two slots, so most operations have something to act on.
pub(super) fn after_opening(
    ops: impl Strategy<Value = Vec<ModelOp>>,
) -> impl Strategy<Value = Vec<ModelOp>> {
    ops.prop_map(|ops| {
        let mut all = vec![
            ModelOp::CreateSlot {
                capacity: 4,
                starts_in: 3600,
                resource: 1,
            },
            ModelOp::CreateSlot {
                capacity: 1,
                starts_in: 600,
                resource: 0,
            },
        ];
        all.extend(ops);
        all
    })
}
