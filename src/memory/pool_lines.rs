//! Pools' lines in [`MemoryStore`]: the waiting entries of a pool's selling slots. The pool
//! table keeps, for each slot with a line, how many wait and whether it sells, so a newcomer
//! on any slot of the pool sees the pool's line under its own slot's lock. Serving a pool's
//! line takes every slot it can touch in id order, then the pool table, after the step that
//! freed the units let its own locks go (the memory store's one lock order), so each head is
//! judged on one whole state.

use super::*;
use crate::model::{EntryId, Pool, WaitlistEntry};
use crate::store::{HeadState, Units};

/// What the pool table knows of a slot's line.
#[derive(Debug, Clone, Copy)]
pub(super) struct LineState {
    waiting: usize,
    starts_at: Timestamp,
    open: bool,
}

impl PoolTable {
    /// Whether a line of one of `pools` waits at `now`: an entry of one of its slots that
    /// sells.
    pub(super) fn line_waits(&self, pools: &[PoolId], now: Timestamp) -> bool {
        pools
            .iter()
            .filter_map(|id| self.by_id.get(id))
            .flat_map(|pool| &pool.slots)
            .filter_map(|slot| self.lines.get(slot))
            .any(|line| line.waiting > 0 && line.open && line.starts_at > now)
    }

    /// The least capacity of `pools` (`i32::MAX` for none).
    pub(super) fn least_capacity(&self, pools: &[PoolId]) -> i32 {
        pools
            .iter()
            .filter_map(|id| self.by_id.get(id))
            .map(|pool| pool.capacity)
            .fold(i32::MAX, i32::min)
    }
}

impl SlotRow {
    /// Tells the pool table how this slot's line stands.
    pub(super) fn sync_line(&self, pools: &Mutex<PoolTable>) {
        let mut table = lock(pools);
        if self.waiting.is_empty() {
            table.lines.remove(&self.slot.slot_id);
        } else {
            let state = LineState {
                waiting: self.waiting.len(),
                starts_at: self.slot.starts_at,
                open: !self.slot.closed && self.slot.removed_at.is_none(),
            };
            table.lines.insert(self.slot.slot_id, state);
        }
    }

    /// The head of this slot's line if the slot sells at `now`.
    fn selling_head(&self, now: Timestamp) -> Option<&WaitlistEntry> {
        self.waiting
            .first()
            .map(|(entry, _)| entry)
            .filter(|_| self.slot.is_selling_at(now))
    }
}

/// The head of `pool`'s line among `rows` (which hold every slot of it): its line order and
/// the row it waits in.
fn pool_head(
    pool: &Pool,
    rows: &[MutexGuard<'_, SlotRow>],
    now: Timestamp,
) -> Option<((std::cmp::Reverse<i32>, EntryId), usize)> {
    rows.iter()
        .enumerate()
        .filter(|(_, row)| pool.slots.contains(&row.slot.slot_id))
        .filter_map(|(i, row)| row.selling_head(now).map(|e| (e.line_order(), i)))
        .min()
}

impl MemoryStore {
    /// Whether a line waits for `row`'s slot (locked by the caller): its own, or one of its
    /// pools'. Nobody takes units past it.
    pub(super) fn line_waits(&self, row: &SlotRow, now: Timestamp) -> bool {
        !row.waiting.is_empty()
            || (!row.pools.is_empty() && lock(&self.pools).line_waits(&row.pools, now))
    }

    /// Serves the lines of `slots` and `pools` after a step that freed their units, until no
    /// head is ready: under the locks of every slot of those pools, of those slots and of the
    /// other pools of them all (by id), then the pool table's. A slot in no pool is served
    /// under its own lock by the step itself. Returns the offers made.
    pub(super) fn serve_lines(
        &self,
        slots: &[SlotId],
        pools: &[PoolId],
        now: Timestamp,
    ) -> Vec<Hold> {
        let mut offers = Vec::new();
        loop {
            let reached = {
                let table = lock(&self.pools);
                let pooled: Vec<SlotId> = (slots.iter().copied())
                    .filter(|slot| table.by_id.values().any(|p| p.slots.contains(slot)))
                    .collect();
                if pooled.is_empty() && !table.line_waits(pools, now) {
                    return offers;
                }
                reach(&table, &pooled, pools)
            };
            let rows: Vec<_> = (reached.0.iter())
                .filter_map(|&id| self.slot_row(id))
                .collect();
            let mut guards: Vec<MutexGuard<'_, SlotRow>> = rows.iter().map(|r| lock(r)).collect();
            // An attach or detach between the two reads: read again.
            let table = lock(&self.pools);
            let pooled: Vec<SlotId> = (slots.iter().copied())
                .filter(|slot| table.by_id.values().any(|p| p.slots.contains(slot)))
                .collect();
            if reach(&table, &pooled, pools) != reached {
                continue;
            }
            drop(table);
            // An offered entry leaves every line it was in: those are served too.
            let (mut slots, mut pools) = (pooled, pools.to_vec());
            while let Some(hold) = self.offer_ready(&mut guards, &slots, &pools, now) {
                let row = guards.iter().find(|r| r.slot.slot_id == hold.slot_id);
                pools.extend(row.map(|r| r.pools.clone()).unwrap_or_default());
                slots.push(hold.slot_id);
                offers.push(hold);
            }
            return offers;
        }
    }

    /// Offers the first head of the lines of `slots` and `pools` that is ready, if one is, by
    /// the core's rule ([`HeadState::plan`]): it heads its slot's line and every line of its
    /// slot's pools, and fits in its slot and every pool (their expired holds counted free,
    /// and reclaimed first when only they make it fit).
    fn offer_ready(
        &self,
        rows: &mut [MutexGuard<'_, SlotRow>],
        slots: &[SlotId],
        pools: &[PoolId],
        now: Timestamp,
    ) -> Option<Hold> {
        let (index, reclaim_slot, refill) = {
            let table = lock(&self.pools);
            let slot_heads = (rows.iter().enumerate())
                .filter(|(_, row)| slots.contains(&row.slot.slot_id))
                .filter_map(|(i, row)| row.selling_head(now).map(|e| (e.line_order(), i)));
            let mut heads: Vec<_> = pools
                .iter()
                .filter_map(|id| table.by_id.get(id))
                .filter_map(|pool| pool_head(pool, rows, now))
                .chain(slot_heads)
                .collect();
            heads.sort_unstable();
            heads.dedup();
            heads.into_iter().find_map(|(order, index)| {
                let row = &rows[index];
                let quantity = row.selling_head(now)?.quantity;
                let of_row: Vec<&Pool> = row
                    .pools
                    .iter()
                    .filter_map(|id| table.by_id.get(id))
                    .collect();
                let expired_of = |pool: &Pool| -> i32 {
                    rows.iter()
                        .filter(|r| pool.slots.contains(&r.slot.slot_id))
                        .map(|r| r.expired_units(now))
                        .sum()
                };
                let units = |remaining: i32, expired: i32| Units {
                    remaining: i64::from(remaining),
                    expired: i64::from(expired),
                };
                let state = HeadState {
                    heads_every_line: (of_row.iter())
                        .all(|pool| pool_head(pool, rows, now).map(|h| h.0) == Some(order)),
                    slot: units(row.slot.stored_remaining, row.expired_units(now)),
                    pools: (of_row.iter())
                        .map(|pool| (pool.pool_id, units(pool.stored_remaining, expired_of(pool))))
                        .collect(),
                };
                let plan = state.plan(quantity)?;
                let refill: Vec<SlotId> = (of_row.iter())
                    .filter(|pool| plan.refill.contains(&pool.pool_id))
                    .flat_map(|pool| pool.slots.iter().copied())
                    .collect();
                Some((index, plan.reclaim_slot, refill))
            })?
        };
        if reclaim_slot {
            rows[index].reclaim(now, usize::MAX, &self.log, &self.pools);
        }
        for row in rows.iter_mut() {
            if refill.contains(&row.slot.slot_id) {
                row.reclaim(now, usize::MAX, &self.log, &self.pools);
            }
        }
        let hold = rows[index].offer_head(now, &self.owners, &self.pools, &self.log);
        rows[index].sync_line(&self.pools);
        hold
    }
}

/// The slots to lock for serving the lines of `slots` (slots in pools) and `pools`: every
/// slot connected to them through pools (an offer takes its entry out of every line it was
/// in, whose next heads are then served, and each head is judged on all its pools' lines),
/// by id; with those pools.
fn reach(
    table: &PoolTable,
    slots: &[SlotId],
    pools: &[PoolId],
) -> (BTreeSet<SlotId>, BTreeSet<PoolId>) {
    let mut reached: BTreeSet<PoolId> = pools.iter().copied().collect();
    let mut slots: BTreeSet<SlotId> = slots.iter().copied().collect();
    loop {
        let more: BTreeSet<PoolId> = (table.by_id.values())
            .filter(|pool| pool.slots.iter().any(|s| slots.contains(s)))
            .map(|pool| pool.pool_id)
            .chain(reached.iter().copied())
            .collect();
        let all: BTreeSet<SlotId> = (more.iter())
            .filter_map(|id| table.by_id.get(id))
            .flat_map(|pool| pool.slots.iter().copied())
            .chain(slots.iter().copied())
            .collect();
        if more == reached && all == slots {
            return (slots, reached);
        }
        (reached, slots) = (more, all);
    }
}
