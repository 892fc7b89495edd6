//! Pools in [`MemoryStore`]: a table of pools behind one lock, taken after the slots an
//! operation holds. A hold on a slot of pools takes from them under its slot's lock; a pool
//! short only by expired holds of its other slots is refilled by giving those back slot by
//! slot (each under its own lock) before the hold is tried once more.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::*;
use crate::model::{CapacityChange, NewPool, Pool, PoolUsage, MAX_POOLS_PER_SLOT};
use crate::store::{PoolChange, PoolEdit, PoolStore};

/// Every pool, by id.
#[derive(Debug, Default)]
pub(super) struct PoolTable {
    pub(super) by_id: BTreeMap<PoolId, Pool>,
    last_id: i64,
    /// How each slot's line stands, for slots with one (see [`pool_lines`](super::pool_lines)).
    pub(super) lines: std::collections::HashMap<SlotId, super::pool_lines::LineState>,
}

impl PoolTable {
    /// The pools of `needs` (pool, units) that cannot give their units even with `extra(pool)`
    /// more free, and whether any needs those extra units.
    pub(super) fn short_of(
        &self,
        needs: &[(PoolId, i32)],
        extra: impl Fn(PoolId) -> i32,
    ) -> (Vec<PoolId>, bool) {
        let mut short = Vec::new();
        let mut tight = false;
        for &(pool_id, units) in needs {
            let Some(pool) = self.by_id.get(&pool_id) else {
                continue;
            };
            if pool.stored_remaining + extra(pool_id) < units {
                short.push(pool_id);
            } else if pool.stored_remaining < units {
                tight = true;
            }
        }
        (short, tight)
    }

    /// Takes the units of `needs` from their pools, every one or none (the conditional
    /// decrement); the short pools otherwise.
    pub(super) fn take(&mut self, needs: &[(PoolId, i32)]) -> Result<(), Vec<PoolId>> {
        let (short, _) = self.short_of(needs, |_| 0);
        if !short.is_empty() {
            return Err(short);
        }
        for &(pool_id, units) in needs {
            if let Some(pool) = self.by_id.get_mut(&pool_id) {
                pool.stored_remaining -= units;
            }
        }
        Ok(())
    }

    /// Gives `units` back to each of `pools`.
    pub(super) fn give_back(&mut self, pools: &[PoolId], units: i32) {
        for pool_id in pools {
            if let Some(pool) = self.by_id.get_mut(pool_id) {
                pool.stored_remaining += units;
            }
        }
    }
}

impl MemoryStore {
    /// Gives back the expired holds of every slot of `pools`, slot by slot in id order;
    /// whether any unit came back.
    pub(super) fn reclaim_pools(&self, pools: &[PoolId], now: Timestamp) -> bool {
        let mut slots: Vec<SlotId> = {
            let table = lock(&self.pools);
            pools
                .iter()
                .filter_map(|id| table.by_id.get(id))
                .flat_map(|pool| pool.slots.iter().copied())
                .collect()
        };
        slots.sort_unstable();
        slots.dedup();
        let mut any = false;
        for slot_id in slots {
            if let Some(row) = self.slot_row(slot_id) {
                let mut row = lock(&row);
                any |= !row
                    .reclaim(now, usize::MAX, &self.log, &self.pools)
                    .is_empty();
            }
        }
        any
    }

    /// `pool_ids` with their units at `now`, read under their slots' locks (by id) and then
    /// the pool table's, so each is one consistent state.
    pub(super) fn usage_of(&self, pool_ids: Option<&[PoolId]>, now: Timestamp) -> Vec<PoolUsage> {
        loop {
            let wanted = |table: &PoolTable| -> Vec<Pool> {
                match pool_ids {
                    Some(ids) => ids
                        .iter()
                        .filter_map(|id| table.by_id.get(id).cloned())
                        .collect(),
                    None => table.by_id.values().cloned().collect(),
                }
            };
            let before = wanted(&lock(&self.pools));
            let mut slots: Vec<SlotId> = before.iter().flat_map(|p| p.slots.clone()).collect();
            slots.sort_unstable();
            slots.dedup();
            let rows: Vec<_> = slots.iter().filter_map(|&id| self.slot_row(id)).collect();
            let guards: Vec<_> = rows.iter().map(|row| lock(row)).collect();
            let table = lock(&self.pools);
            let pools = wanted(&table);
            // An attach or detach between the two reads: read again.
            if pools
                .iter()
                .map(|p| &p.slots)
                .ne(before.iter().map(|p| &p.slots))
            {
                continue;
            }
            return pools
                .into_iter()
                .map(|pool| {
                    let of_pool = || {
                        guards
                            .iter()
                            .filter(|row| pool.slots.contains(&row.slot.slot_id))
                    };
                    let expired = of_pool().map(|row| row.expired_units(now)).sum();
                    let held: i32 = of_pool().map(|row| row.usage(now).held).sum();
                    PoolUsage {
                        pool,
                        held,
                        expired,
                    }
                })
                .collect();
        }
    }

    fn pool_usage(&self, pool_id: PoolId, now: Timestamp) -> Option<PoolUsage> {
        self.usage_of(Some(&[pool_id]), now).pop()
    }

    /// A change of `slot_id`'s membership of `pool_id`, made under the slot's lock and then
    /// the pool table's; `None` when the pool is short and the caller may reclaim and retry.
    fn change_membership(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
        attach: bool,
        now: Timestamp,
    ) -> Option<PoolChange> {
        let Some(row) = self.slot_row(slot_id) else {
            return Some(PoolChange::SlotNotFound);
        };
        let mut row = lock(&row);
        let mut table = lock(&self.pools);
        let Some(pool) = table.by_id.get_mut(&pool_id) else {
            return Some(PoolChange::PoolNotFound);
        };
        if attach && row.slot.removed_at.is_some() {
            return Some(PoolChange::SlotNotFound);
        }
        // Units held (expired ones included) or confirmed: the slot row's own invariant.
        let taken = row.slot.capacity - row.slot.stored_remaining;
        let member = row.pools.contains(&pool_id);
        match (attach, member) {
            (true, false) if row.pools.len() >= MAX_POOLS_PER_SLOT => {
                return Some(PoolChange::TooManyPools)
            }
            (true, false) if pool.stored_remaining < taken => return None,
            (true, false) => {
                pool.stored_remaining -= taken;
                pool.slots.push(slot_id);
                pool.slots.sort_unstable();
                row.pools.push(pool_id);
                row.pools.sort_unstable();
            }
            (false, true) => {
                pool.stored_remaining += taken;
                pool.slots.retain(|&s| s != slot_id);
                row.pools.retain(|&p| p != pool_id);
            }
            _ => {}
        }
        drop((table, row));
        Some(
            self.pool_usage(pool_id, now)
                .map_or(PoolChange::PoolNotFound, PoolChange::Applied),
        )
    }

    /// A change of `pool_id`'s capacity: `Some(true)` applied, `Some(false)` no such pool,
    /// `None` when it does not fit as stored (or does not apply).
    fn change_capacity_of(&self, pool_id: PoolId, change: CapacityChange) -> Option<bool> {
        let mut table = lock(&self.pools);
        let Some(pool) = table.by_id.get_mut(&pool_id) else {
            return Some(false);
        };
        let capacity = pool_capacity_after(change, pool.capacity)?;
        let remaining =
            i64::from(pool.stored_remaining) + i64::from(capacity) - i64::from(pool.capacity);
        let remaining = i32::try_from(remaining).ok().filter(|r| *r >= 0)?;
        pool.stored_remaining = remaining;
        pool.capacity = capacity;
        Some(true)
    }
}

#[async_trait]
impl PoolStore for MemoryStore {
    async fn create_pool(&self, new: &NewPool, _now: Timestamp) -> Result<Pool, StoreError> {
        let mut table = lock(&self.pools);
        table.last_id += 1;
        let pool = Pool {
            pool_id: PoolId(table.last_id),
            capacity: new.capacity,
            stored_remaining: new.capacity,
            slots: Vec::new(),
        };
        table.by_id.insert(pool.pool_id, pool.clone());
        Ok(pool)
    }

    async fn get_pool(
        &self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Decided<Option<PoolUsage>>, StoreError> {
        Ok(Decided::new(now, self.pool_usage(pool_id, now)))
    }

    async fn attach_slot(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let change = match self.change_membership(pool_id, slot_id, true, now) {
            Some(change) => change,
            None => {
                // The expired holds of the pool's slots and of the slot are given back only
                // when that makes the slot's taken units fit (the core's rule, `edit_pool`).
                let slot = self.slot_row(slot_id).map(|row| lock(&row).usage(now));
                let fits = self.pool_usage(pool_id, now).is_some_and(|pool| {
                    PoolEdit::Attach(slot_id).fits_after_reclaim(&pool, slot.as_ref())
                });
                let mut retried = None;
                if fits {
                    self.reclaim_pools(&[pool_id], now);
                    if let Some(row) = self.slot_row(slot_id) {
                        lock(&row).reclaim(now, usize::MAX, &self.log, &self.pools);
                    }
                    retried = self.change_membership(pool_id, slot_id, true, now);
                }
                match retried {
                    Some(change) => change,
                    None => self
                        .pool_usage(pool_id, now)
                        .map_or(PoolChange::PoolNotFound, PoolChange::InUse),
                }
            }
        };
        Ok(Decided::new(now, change))
    }

    async fn detach_slot(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let member = self
            .slot_row(slot_id)
            .is_some_and(|row| lock(&row).pools.contains(&pool_id));
        let change = self
            .change_membership(pool_id, slot_id, false, now)
            .unwrap_or(PoolChange::PoolNotFound);
        // Its units went back to the pool and its entries left the pool's line: the pool's
        // line and the slot's are served (the answer is the change, before).
        if member && matches!(change, PoolChange::Applied(_)) {
            if let Some(row) = self.slot_row(slot_id) {
                let mut row = lock(&row);
                self.serve(&mut row, now);
            }
            self.serve_lines(&[slot_id], &[pool_id], now);
        }
        Ok(Decided::new(now, change))
    }

    async fn change_pool_capacity(
        &self,
        pool_id: PoolId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let before = lock(&self.pools).by_id.get(&pool_id).map(|p| p.capacity);
        let mut changed = self.change_capacity_of(pool_id, change);
        if changed.is_none() {
            let fits = self
                .pool_usage(pool_id, now)
                .is_some_and(|usage| PoolEdit::Capacity(change).fits_after_reclaim(&usage, None));
            if fits && self.reclaim_pools(&[pool_id], now) {
                changed = self.change_capacity_of(pool_id, change);
            }
        }
        let usage = self.pool_usage(pool_id, now);
        let change = match (changed, usage) {
            (Some(true), Some(usage)) => PoolChange::Applied(usage),
            (None, Some(usage)) => PoolChange::InUse(usage),
            _ => PoolChange::PoolNotFound,
        };
        // Another capacity: the pool's line is served (the answer is the change, before).
        let after = lock(&self.pools).by_id.get(&pool_id).map(|p| p.capacity);
        if changed == Some(true) && before != after {
            self.serve_lines(&[], &[pool_id], now);
        }
        Ok(Decided::new(now, change))
    }
}

/// The capacity `change` gives a pool whose capacity is `current`, when it applies and is in
/// `0..=i32::MAX`.
fn pool_capacity_after(change: CapacityChange, current: i32) -> Option<i32> {
    change
        .applied_to(current)
        .and_then(|capacity| i32::try_from(capacity).ok())
        .filter(|capacity| *capacity >= 0)
}

impl MemoryStore {
    /// Every pool with its units: [`HoldStore::pools`](crate::HoldStore::pools).
    pub(super) fn every_pool(&self, now: Timestamp) -> Vec<PoolUsage> {
        if lock(&self.pools).by_id.is_empty() {
            return Vec::new();
        }
        self.usage_of(None, now)
    }
}
