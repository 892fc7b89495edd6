//! Pools in the model: what creating, attaching, detaching, resizing and reading a pool
//! should do, how pools limit holds and bookings, the step check that runs them against a
//! store (comparing the state as it reads, since a store may give back a pool's expired holds
//! its own way), and their property test.
//!
//! The model keeps no `remaining` per pool: a pool's free units are its capacity less the
//! units of the active held and confirmed holds of its slots, which is what every correct
//! store's stored `remaining` plus its expired units comes to.

use std::future::Future;

use proptest::prelude::*;

use crate::engine::BookingEngine;
use crate::error::BookingError;
use crate::model::{
    HoldStatus, LineProblem, NewPool, PoolId, PoolSummary, SlotId, Timestamp, MAX_POOLS_PER_SLOT,
};
use crate::scope::Scope;
use crate::store::{BookingStore, HoldStore, PoolStore, Store};

use super::bookings::{booking_op, BookingSteps};
use super::ops::ModelOp;
use super::reference::{Model, ModelPool, Seen};
use super::runner::{run_checked, run_property, NoEvents, StepCheck};
use super::strategies::{admin_op, after_opening, lifecycle_op};
use super::Mismatch;

impl Model {
    /// Units of slot `id` held by active holds and confirmed at `now`.
    fn taken(&self, id: SlotId, now: Timestamp) -> i32 {
        self.held_units(id, now).0 + self.confirmed_units(id)
    }

    /// Units of pool `pool` held by active holds and confirmed on its slots at `now`.
    fn pool_taken(&self, pool: &ModelPool, now: Timestamp) -> i32 {
        pool.slots.iter().map(|&slot| self.taken(slot, now)).sum()
    }

    /// Units a hold could take from `pool` at `now`.
    fn pool_free(&self, pool: &ModelPool, now: Timestamp) -> i32 {
        pool.capacity - self.pool_taken(pool, now)
    }

    /// The least free units of the pools slot `id` draws from (`i32::MAX` for none).
    pub(super) fn pool_free_of(&self, id: SlotId, now: Timestamp) -> i32 {
        self.pools
            .iter()
            .filter(|pool| pool.slots.contains(&id))
            .map(|pool| self.pool_free(pool, now))
            .fold(i32::MAX, i32::min)
    }

    /// Whether any pool of slot `id` has fewer free units than `lines` (slot, units) ask of
    /// its slots together.
    pub(super) fn pool_short(&self, id: SlotId, lines: &[(SlotId, i32)], now: Timestamp) -> bool {
        self.pools
            .iter()
            .filter(|pool| pool.slots.contains(&id))
            .any(|pool| {
                let asked: i32 = lines
                    .iter()
                    .filter(|(slot, _)| pool.slots.contains(slot))
                    .map(|(_, units)| units)
                    .sum();
                self.pool_free(pool, now) < asked
            })
    }

    /// A booking line's problem once pools count, for a line whose slot alone has none or too
    /// few units: sold out when its slot or one of its pools is short, with the least free
    /// units of them all.
    pub(super) fn within_pools(
        &self,
        id: SlotId,
        quantity: i32,
        asked: &[(SlotId, i32, usize)],
        now: Timestamp,
    ) -> Option<LineProblem> {
        let slot = self.slots.iter().find(|s| s.id == id)?;
        let slot_free = match self.line_waits(id, now) {
            true => 0,
            false => slot.remaining + self.held_units(id, now).1,
        };
        let lines: Vec<(SlotId, i32)> = asked.iter().map(|&(s, q, _)| (s, q)).collect();
        let short = slot_free < quantity || self.pool_short(id, &lines, now);
        let least = slot_free.min(self.pool_free_of(id, now));
        short.then(|| LineProblem::SoldOut {
            free: least.clamp(0, quantity - 1),
        })
    }

    fn pool_seen(&self, index: usize, now: Timestamp) -> Seen {
        let pool = &self.pools[index];
        let held: i32 = pool.slots.iter().map(|&s| self.held_units(s, now).0).sum();
        let confirmed: i32 = pool.slots.iter().map(|&s| self.confirmed_units(s)).sum();
        Seen::Pool(PoolSummary {
            pool_id: pool.id,
            capacity: pool.capacity,
            remaining: self.pool_free(pool, now),
            held,
            confirmed,
            slots: pool.slots.clone(),
        })
    }

    /// The expected result of a pool operation; `created` is the pool the store created.
    fn pool_op(&mut self, op: &ModelOp, now: Timestamp, created: Option<PoolId>) -> Seen {
        match *op {
            ModelOp::CreatePool { capacity } if capacity < 0 => Seen::Error("invalid_pool"),
            ModelOp::CreatePool { capacity } => {
                let Some(id) = created else {
                    return Seen::Error("(model expected a new pool here)");
                };
                self.pools.push(ModelPool {
                    id,
                    capacity,
                    slots: Vec::new(),
                });
                self.pool_seen(self.pools.len() - 1, now)
            }
            ModelOp::GetPool { pool } => self.pool_seen(pool, now),
            ModelOp::SetPoolCapacity { change, .. }
                if change.target().is_some_and(|capacity| capacity < 0) =>
            {
                Seen::Error("invalid_pool")
            }
            ModelOp::SetPoolCapacity { pool, change } => {
                let current = self.pools[pool].capacity;
                let Some(capacity) = change.applied_to(current) else {
                    return Seen::PoolCapacityChanged(current);
                };
                let Some(capacity) = i32::try_from(capacity).ok().filter(|c| *c >= 0) else {
                    return Seen::Error("invalid_pool");
                };
                let taken = self.pool_taken(&self.pools[pool], now);
                if capacity < taken {
                    return Seen::PoolInUse(capacity, taken);
                }
                let changed = self.pools[pool].capacity != capacity;
                self.pools[pool].capacity = capacity;
                // The answer is the change; the pool's line is served after it.
                let seen = self.pool_seen(pool, now);
                if changed {
                    self.serve(&[], &[self.pools[pool].id], now);
                }
                seen
            }
            ModelOp::PoolMember { pool, slot, attach } => {
                let slot_id = self.slot_id(slot);
                let removed = self.slots.get(slot).is_none_or(|s| s.removed_at.is_some());
                let member = self.pools[pool].slots.contains(&slot_id);
                let pools_of = self
                    .pools
                    .iter()
                    .filter(|p| p.slots.contains(&slot_id))
                    .count();
                // Detaching a removed slot is fine; no slot at all is not found.
                if self.slots.get(slot).is_none() || (attach && removed) {
                    return Seen::Error("slot_not_found");
                }
                if attach && !member {
                    if pools_of >= MAX_POOLS_PER_SLOT {
                        return Seen::Error("too_many_pools");
                    }
                    let pool_taken = self.pool_taken(&self.pools[pool], now);
                    if self.pool_free(&self.pools[pool], now) < self.taken(slot_id, now) {
                        return Seen::PoolInUse(self.pools[pool].capacity, pool_taken);
                    }
                    self.pools[pool].slots.push(slot_id);
                    self.pools[pool].slots.sort_unstable();
                } else if !attach && member {
                    self.pools[pool].slots.retain(|&s| s != slot_id);
                    let seen = self.pool_seen(pool, now);
                    self.serve(&[slot_id], &[self.pools[pool].id], now);
                    return seen;
                }
                self.pool_seen(pool, now)
            }
            _ => Seen::Error("(not a pool operation)"),
        }
    }
}

/// What the engine answered, as the model says it.
fn seen(result: Result<PoolSummary, BookingError>) -> Seen {
    match result {
        Ok(pool) => Seen::Pool(pool),
        Err(BookingError::PoolInUse {
            requested, taken, ..
        }) => Seen::PoolInUse(requested, taken),
        Err(BookingError::PoolCapacityChanged { actual, .. }) => Seen::PoolCapacityChanged(actual),
        Err(error) => Seen::Error(error.code()),
    }
}

/// Runs the pool operations against the engine and the model, the booking and lifecycle ones
/// through [`BookingSteps`] (and what `C` runs), and once pools exist checks the state as it
/// reads.
pub(super) struct PoolSteps<C>(pub(super) BookingSteps<C>);

#[async_trait::async_trait]
impl<S: Store + BookingStore + PoolStore, C: StepCheck<S>> StepCheck<S> for PoolSteps<C> {
    async fn extra_op(
        &mut self,
        engine: &BookingEngine<S>,
        model: &mut Model,
        op: &ModelOp,
        now: Timestamp,
    ) -> Option<(Seen, Seen)> {
        let pools = model.pools.len();
        let pool_id = |pool: usize| model.pools.get(pool % pools.max(1)).map(|p| p.id);
        let actual = match *op {
            ModelOp::CreatePool { capacity } => {
                let result = engine.create_pool(NewPool::new(capacity)).await;
                let created = result.as_ref().ok().map(|pool| pool.pool_id);
                let expected = model.pool_op(op, now, created);
                return Some((expected, seen(result)));
            }
            // No pool yet: nothing to do on either side.
            _ if pools == 0 && is_pool_op(op) => return Some((Seen::Done, Seen::Done)),
            ModelOp::GetPool { pool } => engine.get_pool(pool_id(pool)?).await,
            ModelOp::SetPoolCapacity { pool, change } => {
                engine.change_pool_capacity(pool_id(pool)?, change).await
            }
            ModelOp::PoolMember { pool, slot, attach } => {
                let slot_id = model.slot_id(slot);
                match attach {
                    true => engine.attach_slot(pool_id(pool)?, slot_id).await,
                    false => engine.detach_slot(pool_id(pool)?, slot_id).await,
                }
            }
            _ => return self.0.extra_op(engine, model, op, now).await,
        };
        let op = match *op {
            ModelOp::GetPool { pool } => ModelOp::GetPool { pool: pool % pools },
            ModelOp::SetPoolCapacity { pool, change } => ModelOp::SetPoolCapacity {
                pool: pool % pools,
                change,
            },
            ModelOp::PoolMember { pool, slot, attach } => ModelOp::PoolMember {
                pool: pool % pools,
                slot,
                attach,
            },
            ref other => other.clone(),
        };
        Some((model.pool_op(&op, now, None), seen(actual)))
    }

    async fn after_step(
        &mut self,
        engine: &BookingEngine<S>,
        before: &Model,
        after: &Model,
    ) -> Result<(), Mismatch> {
        if !after.pools.is_empty() {
            check_state_as_read(engine, after).await?;
        }
        self.0.after_step(engine, before, after).await
    }
}

fn is_pool_op(op: &ModelOp) -> bool {
    matches!(
        op,
        ModelOp::GetPool { .. } | ModelOp::SetPoolCapacity { .. } | ModelOp::PoolMember { .. }
    )
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(Mismatch(format!($($fmt)*)));
        }
    };
}

/// The store's slots, holds and pools read as the model's do at the clock's time: every field
/// but what a store's own way of giving back expired holds may change (a slot's stored
/// `remaining` and a hold stored as held or expired once it has expired), plus each slot's
/// and pool's invariant counted from the stored holds.
async fn check_state_as_read<S: Store + PoolStore>(
    engine: &BookingEngine<S>,
    model: &Model,
) -> Result<(), Mismatch> {
    let store = engine.store();
    let now = engine.clock().now();
    let failed = |what: &str, e: crate::StoreError| Mismatch(format!("{what}: {e}"));
    let mut stored_holds = Vec::new();
    for hold in &model.holds {
        let stored = store
            .get_hold(hold.hold_id, &Scope::BackOffice, now)
            .await
            .map_err(|e| failed("get_hold", e))?
            .outcome;
        let Some(stored) = stored else {
            return Err(Mismatch(format!("hold {} is missing", hold.hold_id)));
        };
        let (seen, expected) = (stored.clone().at(now), hold.clone().at(now));
        ensure!(
            seen == expected,
            "hold {} reads {seen:?}, model has {expected:?}",
            hold.hold_id
        );
        stored_holds.push(stored);
    }
    let units = |slots: &[SlotId], status: HoldStatus| -> i32 {
        stored_holds
            .iter()
            .filter(|h| slots.contains(&h.slot_id) && h.status == status)
            .map(|h| h.quantity)
            .sum()
    };
    for slot in &model.slots {
        let stored = HoldStore::get_slot(store, slot.id)
            .await
            .map_err(|e| failed("get_slot", e))?
            .ok_or_else(|| Mismatch(format!("slot {} is missing", slot.id)))?;
        let mut expected = slot.as_slot();
        expected.stored_remaining = stored.stored_remaining;
        ensure!(
            stored == expected,
            "slot {} is {stored:?}, model has {slot:?}",
            slot.id
        );
        let holds: Vec<_> = stored_holds
            .iter()
            .filter(|h| h.slot_id == slot.id)
            .cloned()
            .collect();
        crate::conformance::kit::SlotTally::of(&stored, &holds, now)
            .check()
            .map_err(|broken| Mismatch(format!("slot {}: {broken}", slot.id)))?;
        let (_, expired) = model.held_units(slot.id, now);
        let expired_stored: i32 = holds
            .iter()
            .filter(|h| h.status == HoldStatus::Held && h.expires_at <= now)
            .map(|h| h.quantity)
            .sum();
        let reads = stored.stored_remaining + expired_stored;
        ensure!(
            reads == slot.remaining + expired,
            "slot {} has {reads} units free, model has {}",
            slot.id,
            slot.remaining + expired
        );
    }
    for pool in &model.pools {
        let usage = store
            .get_pool(pool.id, now)
            .await
            .map_err(|e| failed("get_pool", e))?
            .outcome
            .ok_or_else(|| Mismatch(format!("pool {} is missing", pool.id)))?;
        ensure!(
            (usage.pool.capacity, &usage.pool.slots) == (pool.capacity, &pool.slots),
            "pool {} is {usage:?}, model has {pool:?}",
            pool.id
        );
        let taken =
            units(&pool.slots, HoldStatus::Held) + units(&pool.slots, HoldStatus::Confirmed);
        ensure!(
            usage.pool.stored_remaining >= 0
                && usage.pool.stored_remaining + taken == usage.pool.capacity,
            "pool {}: remaining {} + held and confirmed {taken} != capacity {}",
            pool.id,
            usage.pool.stored_remaining,
            usage.pool.capacity
        );
        ensure!(
            usage.available() == model.pool_free(pool, now),
            "pool {} has {} units free, model has {}",
            pool.id,
            usage.available(),
            model.pool_free(pool, now)
        );
    }
    Ok(())
}

/// The generator for one pool operation: create (capacities 0 to 6, some below zero), attach
/// or detach slots, resize, read.
pub fn pool_op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        2 => prop_oneof![6 => 0..=6i32, 1 => Just(-1i32)]
            .prop_map(|capacity| ModelOp::CreatePool { capacity }),
        4 => (0..3usize, 0..5usize, prop_oneof![3 => Just(true), 1 => Just(false)])
            .prop_map(|(pool, slot, attach)| ModelOp::PoolMember { pool, slot, attach }),
        2 => (0..3usize, super::strategies::capacity_change(prop_oneof![6 => 0..=8i32, 1 => Just(-1i32)]))
            .prop_map(|(pool, change)| ModelOp::SetPoolCapacity { pool, change }),
        1 => (0..3usize).prop_map(|pool| ModelOp::GetPool { pool }),
    ]
}

/// Runs `cases` random sequences of lifecycle, administration, booking and pool operations
/// (more with `PROPTEST_CASES`), each against a fresh store from `factory`: every outcome must
/// equal the model's, and after every step the store's slots, holds and pools must read as
/// the model's, each slot's and pool's invariant holding.
///
/// # Panics
///
/// When a sequence's outcomes or state differ from the model's.
pub fn check_pools<S, F, Fut>(factory: F, cases: u32, max_len: usize)
where
    S: Store + BookingStore + PoolStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let step = prop_oneof![
        12 => lifecycle_op(),
        2 => admin_op(),
        6 => booking_op(),
        6 => pool_op(),
    ];
    let sequences = after_opening(proptest::collection::vec(step, 1..=max_len));
    run_property(
        "pool model check",
        cases,
        2,
        &sequences,
        factory,
        |store, ops| async move {
            run_checked(store, &ops, &mut PoolSteps(BookingSteps(NoEvents))).await
        },
    );
}
