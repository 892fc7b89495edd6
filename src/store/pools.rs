//! [`PoolStore`]: capacities shared by several slots, taken and given back with every unit
//! of their slots.

use async_trait::async_trait;

use super::error::StoreError;
use super::holds::HoldStore;
use super::outcome::Decided;
use crate::model::{
    CapacityChange, NewPool, Pool, PoolId, PoolUsage, SlotId, SlotUsage, Timestamp,
};

/// Pools: capacities that several slots draw from, each unit a hold takes being taken from
/// its slot and from each of the slot's pools, all or nothing.
///
/// A store with pools keeps a `remaining` per pool beside each slot's, under the pool
/// invariant `remaining + Σ quantity(stored held) + Σ quantity(confirmed) == capacity` over
/// the holds of the pool's slots (with `remaining >= 0`). The rules on top of
/// [`HoldStore`]'s, for every operation that moves units:
///
/// - **Taking** ([`HoldStore::create_hold`], [`BookingStore::create_booking`](super::BookingStore::create_booking)):
///   after the slots' conditional decrements, one conditional decrement per pool
///   (`remaining >= units`, the units of every line on its slots summed), decided by rows
///   affected; a pool that affects no row refuses the hold or booking (as
///   [`HoldOutcome::SoldOut`](super::HoldOutcome::SoldOut), or a
///   [`LineState`](super::LineState) with `failed` for each line on its slots) and nothing of
///   it stays taken. Before refusing, a store gives back the expired holds of that pool's
///   slots (as it reclaims a slot's) and tries once more; a store that must take locks in
///   order does so in a step of its own (slots by id, then the pool), since those units were
///   free already.
/// - **Giving back** (cancel, reclaiming expired holds, lazily or by
///   [`EventStore::reclaim_expired`](super::EventStore::reclaim_expired), administrative
///   reclaims): every unit given back to a slot is given back to each of its pools in the
///   same step.
/// - **One lock order**: slots by id ascending, then pools by id ascending, in every
///   operation, so nothing deadlocks.
/// - [`HoldStore::pools`] reports every pool with its units, for availability: a slot's
///   units there are the least of its own and its pools'.
///
/// The [`conformance`](crate::conformance) suite's pool cases check an implementation.
#[async_trait]
pub trait PoolStore: HoldStore {
    /// Stores a validated pool with `remaining = capacity` and no slots; returns it with its
    /// new id.
    async fn create_pool(&self, pool: &NewPool, now: Timestamp) -> Result<Pool, StoreError>;

    /// The pool with its units at `now`, if it exists.
    async fn get_pool(
        &self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Decided<Option<PoolUsage>>, StoreError>;

    /// Makes a slot (not removed) draw from a pool, atomically: the units of the slot's holds
    /// stored as held or confirmed are taken from the pool by one conditional decrement
    /// (`remaining >= units`); when it affects no row, the expired holds of the slot and of
    /// the pool's slots are given back and it is tried once more. Attaching an attached slot
    /// changes nothing; a slot has at most [`MAX_POOLS_PER_SLOT`](crate::model::MAX_POOLS_PER_SLOT)
    /// pools ([`PoolChange::TooManyPools`]).
    async fn attach_slot(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError>;

    /// Makes a slot stop drawing from a pool, atomically: the units of its holds stored as
    /// held or confirmed are given back to the pool. Detaching a slot that is not attached
    /// changes nothing (the pool must exist).
    async fn detach_slot(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError>;

    /// Changes a pool's capacity as `change` says ([`CapacityChange`]: to a number, by a
    /// number, or to a number while it still is the one read), the capacity after it in
    /// `0..=i32::MAX`, moving its `remaining` by the same amount where the new `remaining` is
    /// `>= 0` (one conditional update: [`CapacityChange::terms`]); when that affects no row and
    /// the expired holds of its slots would make it fit, they are given back and it is tried
    /// once more. A change that leaves the capacity as it is is applied without a write.
    /// [`PoolChange::InUse`] when anything refused it (held and confirmed units in the way, a
    /// capacity out of range, another capacity than `Replace` expected), with the pool read
    /// after the refusal: the engine says which.
    async fn change_pool_capacity(
        &self,
        pool_id: PoolId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError>;
}

/// What an administrative change of a pool did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolChange {
    /// The pool changed (or already was as asked); here it is now.
    Applied(PoolUsage),
    /// No pool has this id; nothing changed.
    PoolNotFound,
    /// No slot has this id, or it has been removed; nothing changed.
    SlotNotFound,
    /// The change would take units held or confirmed (a lower capacity, or a slot whose taken
    /// units the pool has not free); nothing changed. The pool as read right after.
    InUse(PoolUsage),
    /// The slot already belongs to [`MAX_POOLS_PER_SLOT`](crate::model::MAX_POOLS_PER_SLOT)
    /// pools; nothing changed.
    TooManyPools,
}

/// Reads of units on a connection the caller owns, inside its transaction, so an application
/// never reads the crate's tables by raw SQL: what it reads is what its transaction will
/// commit against.
#[async_trait]
pub trait TransactionPools: Send {
    /// The pool with its units at `now`, if it exists.
    async fn get_pool(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Option<PoolUsage>, StoreError>;

    /// The slot with its units at `now`, if it exists (removed slots included).
    async fn slot_usage(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError>;
}
