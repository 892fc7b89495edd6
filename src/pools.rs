//! Pools: capacities shared by several slots (a day's total over its delivery windows, a
//! venue over its rooms, a trainer's sessions per day).
//!
//! A slot draws from its own capacity and from each pool it is attached to; a hold takes its
//! units from all of them or from none, and gives them back to all of them when it is
//! cancelled or expires. The availability listing shows each slot the least of its own and
//! its pools' free units.
//!
//! ```
//! use chrono::{Duration, Utc};
//! use slot_booking::{BookingEngine, MemoryStore, NewHold, NewPool, NewSlot};
//!
//! # tokio_test::block_on(async {
//! let engine = BookingEngine::new(MemoryStore::new());
//! let start = Utc::now() + Duration::days(1);
//! let morning = engine.create_slot(NewSlot::new(start, start + Duration::hours(1), 4)).await?;
//! let evening = engine.create_slot(NewSlot::new(start + Duration::hours(8), start + Duration::hours(9), 4)).await?;
//! // The trainer teaches at most 5 seats a day over both classes.
//! let day = engine.create_pool(NewPool::new(5)).await?;
//! engine.attach_slot(day.pool_id, morning.slot_id).await?;
//! engine.attach_slot(day.pool_id, evening.slot_id).await?;
//!
//! engine.place_hold(NewHold::new(morning.slot_id, "a").quantity(4)).await?;
//! let refused = engine.place_hold(NewHold::new(evening.slot_id, "b").quantity(2)).await.unwrap_err();
//! assert_eq!(refused.code(), "sold_out");
//! let listing = engine.availability(Default::default()).await?;
//! assert_eq!(listing.entry(evening.slot_id).map(|e| e.remaining), Some(1));
//! # Ok::<(), slot_booking::BookingError>(())
//! # }).unwrap();
//! ```

use crate::engine::{detached, guarded, BookingEngine};
use crate::error::BookingError;
use crate::model::{CapacityChange, NewPool, PoolId, PoolSummary, PoolUsage, SlotId};
use crate::observe::{Op, Operation};
use crate::store::{PoolChange, PoolStore};

impl<S: PoolStore> BookingEngine<S> {
    /// Creates a pool of `capacity` units (`0..=i32::MAX`) with no slots.
    pub async fn create_pool(&self, pool: NewPool) -> Result<PoolSummary, BookingError> {
        let op = Op::new(Operation::CreatePool);
        op.run(async {
            if pool.capacity < 0 {
                return Err(BookingError::InvalidPool {
                    capacity: i64::from(pool.capacity),
                });
            }
            let store = self.store_handle();
            let now = self.clock().now();
            let created = op
                .store(detached(async move { store.create_pool(&pool, now).await }))
                .await?;
            Ok(PoolSummary::from(PoolUsage {
                pool: created,
                held: 0,
                expired: 0,
            }))
        })
        .await
    }

    /// The pool with its units: free (expired holds included), held and confirmed over its
    /// slots. `pool_not_found` when no pool has this id.
    pub async fn get_pool(&self, pool_id: PoolId) -> Result<PoolSummary, BookingError> {
        let op = Op::new(Operation::GetPool);
        op.run(async {
            let now = self.clock().now();
            op.store(guarded(self.store().get_pool(pool_id, now)))
                .await?
                .outcome
                .map(PoolSummary::from)
                .ok_or(BookingError::PoolNotFound { pool_id })
        })
        .await
    }

    /// Makes the slot draw from the pool too: its units held and confirmed are taken from the
    /// pool at once (expired holds given back first when that makes them fit), and from then
    /// on every hold on the slot takes units of both. `pool_in_use` when the pool has not
    /// that many free; `too_many_pools` past [`MAX_POOLS_PER_SLOT`](crate::MAX_POOLS_PER_SLOT);
    /// attaching an attached slot changes nothing.
    pub async fn attach_slot(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
    ) -> Result<PoolSummary, BookingError> {
        let op = Op::new(Operation::AttachSlot).slot(slot_id);
        op.run(async {
            let now = self.clock().now();
            let change = self
                .changing_write(
                    &op,
                    move |store| async move { store.attach_slot(pool_id, slot_id, now).await },
                    |change| matches!(change, PoolChange::Applied(_)),
                )
                .await?;
            answer(change.outcome, pool_id, slot_id, None)
        })
        .await
    }

    /// Makes the slot stop drawing from the pool: its units held and confirmed go back to the
    /// pool. Detaching a slot that is not attached changes nothing.
    pub async fn detach_slot(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
    ) -> Result<PoolSummary, BookingError> {
        let op = Op::new(Operation::DetachSlot).slot(slot_id);
        op.run(async {
            let now = self.clock().now();
            let change = self
                .changing_write(
                    &op,
                    move |store| async move { store.detach_slot(pool_id, slot_id, now).await },
                    |change| matches!(change, PoolChange::Applied(_)),
                )
                .await?;
            answer(change.outcome, pool_id, slot_id, None)
        })
        .await
    }

    /// Changes the pool's capacity as a slot's ([`BookingEngine::change_capacity`]): to a
    /// number, by a number of units, or to a number only while it is still the capacity read
    /// ([`CapacityChange`]), the capacity after it in `0..=i32::MAX` (`invalid_pool`).
    /// Raising it adds free units, lowering it takes free units only (expired holds given back
    /// first when that makes it fit); `pool_in_use` when units held or confirmed stand in the
    /// way, `pool_capacity_changed` when a `Replace` finds another capacity.
    pub async fn change_pool_capacity(
        &self,
        pool_id: PoolId,
        change: impl Into<CapacityChange>,
    ) -> Result<PoolSummary, BookingError> {
        let change = change.into();
        let op = Op::new(Operation::ChangePoolCapacity);
        op.run(async {
            if let Some(capacity) = change.target().filter(|capacity| *capacity < 0) {
                return Err(BookingError::InvalidPool {
                    capacity: i64::from(capacity),
                });
            }
            let now = self.clock().now();
            let outcome = self
                .changing_write(&op, move |store| async move {
                    store.change_pool_capacity(pool_id, change, now).await
                }, |change| matches!(change, PoolChange::Applied(_)))
                .await?
                .outcome;
            // Refused: why, from the pool as read after the refusal.
            if let PoolChange::InUse(usage) = &outcome {
                let actual = usage.pool.capacity;
                match change.applied_to(actual) {
                    None => {
                        return Err(BookingError::PoolCapacityChanged {
                            pool_id,
                            expected: change.terms().expected.unwrap_or(actual),
                            actual,
                        })
                    }
                    Some(capacity) if !(0..=i64::from(i32::MAX)).contains(&capacity) => {
                        return Err(BookingError::InvalidPool { capacity })
                    }
                    Some(_) => {}
                }
            }
            let requested = change
                .applied_to(match &outcome {
                    PoolChange::InUse(usage) => usage.pool.capacity,
                    _ => 0,
                })
                .and_then(|capacity| i32::try_from(capacity).ok());
            answer(outcome, pool_id, SlotId(0), requested)
        })
        .await
    }
}

/// The engine's answer to a pool change: `capacity` is the capacity asked for, `None` for an
/// attach or detach (of `slot_id`).
pub(crate) fn answer(
    change: PoolChange,
    pool_id: PoolId,
    slot_id: SlotId,
    capacity: Option<i32>,
) -> Result<PoolSummary, BookingError> {
    match change {
        PoolChange::Applied(usage) => Ok(PoolSummary::from(usage)),
        PoolChange::PoolNotFound => Err(BookingError::PoolNotFound { pool_id }),
        PoolChange::SlotNotFound => Err(BookingError::SlotNotFound { slot_id }),
        PoolChange::TooManyPools => Err(BookingError::TooManyPools { slot_id }),
        PoolChange::InUse(usage) => Err(BookingError::PoolInUse {
            pool_id,
            requested: capacity.unwrap_or(usage.pool.capacity),
            taken: usage.taken(),
        }),
    }
}
