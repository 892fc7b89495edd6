//! Serving waiting lines, the one rule every store follows: [`serve_lines`] over a store's
//! [`LineOps`], run in the unit of work of the write that freed the lines' units.
//!
//! A set of [`Lines`] (slots' lines and pools' lines) is served in strict order to a
//! fixpoint: of the heads of the lines, in line order
//! ([`WaitlistEntry::line_order`]), the first that is ready is offered its units, and the
//! heads are looked at again, the offered entry's slot and pools joining the set (the next in
//! each of its lines may have waited only behind it), until no head is ready. A head is ready
//! ([`HeadState::plan`]) when its slot sells, it heads its slot's line and the line of every
//! pool of its slot, and its whole quantity fits in its slot and in every such pool, their
//! expired holds counted free. The expired holds that make it fit are reclaimed before the
//! offer: its slot's when the slot's stored `remaining` is short, and the pool's slots' for
//! each pool that is (the pool refill). Nothing is reclaimed for a head that is not ready.
//!
//! A store offers the primitives ([`LineOps`]): the heads of lines, a head's state read in
//! the unit of work (its rows locked as the store's lock order allows), the reclaims, the
//! offer itself (units taken from the slot and its pools by rows affected, the entry turned
//! into its held offer, `hold_placed` then `waitlist_offered` appended) and a slot's pools. It
//! decides nothing: the order, readiness and what to reclaim are decided here.

use std::collections::BTreeSet;

use async_trait::async_trait;

use super::error::StoreError;
use crate::model::{Hold, PoolId, SlotId, Timestamp, WaitlistEntry};

/// A set of lines to serve: slots' lines and pools' lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    /// The slots whose own lines to serve.
    pub slots: BTreeSet<SlotId>,
    /// The pools whose lines (the waiting entries of their selling slots) to serve.
    pub pools: BTreeSet<PoolId>,
}

impl Lines {
    /// No line.
    pub fn new() -> Self {
        Lines::default()
    }

    /// The line of slot `slot` alone (which [`Kernel::serve`](super::Kernel::serve) serves
    /// with the lines of the slot's pools).
    pub fn of_slot(slot: SlotId) -> Self {
        Lines {
            slots: BTreeSet::from([slot]),
            pools: BTreeSet::new(),
        }
    }

    /// Whether there is no line in the set.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.pools.is_empty()
    }
}

/// Units of one account (a slot or a pool) as a head's unit of work reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Units {
    /// The stored `remaining`.
    pub remaining: i64,
    /// Units of held holds expired by now that count against it (not yet given back).
    pub expired: i64,
}

impl Units {
    /// Units free: the stored `remaining` and the expired units.
    pub fn free(&self) -> i64 {
        self.remaining + self.expired
    }
}

/// What a store read of a line's head in the unit of work: enough for [`HeadState::plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadState {
    /// The head's slot sells, and the entry heads its slot's line and the line of every pool
    /// of its slot.
    pub heads_every_line: bool,
    /// The slot's units.
    pub slot: Units,
    /// Each pool of the slot, with its units (its slots' expired holds counted).
    pub pools: Vec<(PoolId, Units)>,
}

/// What to do before an offer: the reclaims that make the head fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferPlan {
    /// Reclaim the slot's expired holds first (its stored `remaining` is short).
    pub reclaim_slot: bool,
    /// Reclaim the expired holds of these pools' slots first (their stored `remaining` is
    /// short), by id.
    pub refill: Vec<PoolId>,
}

impl HeadState {
    /// Whether a head of `quantity` units in this state is ready, and if it is, what to
    /// reclaim before its offer; `None` when it is not ready.
    pub fn plan(&self, quantity: i32) -> Option<OfferPlan> {
        let quantity = i64::from(quantity);
        let fits = self.slot.free() >= quantity
            && self.pools.iter().all(|(_, pool)| pool.free() >= quantity);
        if !self.heads_every_line || !fits {
            return None;
        }
        let mut refill: Vec<PoolId> = (self.pools.iter())
            .filter(|(_, pool)| pool.remaining < quantity)
            .map(|(id, _)| *id)
            .collect();
        refill.sort_unstable();
        Some(OfferPlan {
            reclaim_slot: self.slot.remaining < quantity,
            refill,
        })
    }
}

/// The primitives serving needs of a store, in the unit of work of one write (see the
/// module's docs). Each says what it did; none decides.
#[async_trait]
pub trait LineOps: Send {
    /// The head of each line of `lines` at `now` (a pool's line is the waiting entries of its
    /// slots that sell at `now`), in any order; an entry heading several lines may come more
    /// than once.
    async fn heads(
        &mut self,
        lines: &Lines,
        now: Timestamp,
    ) -> Result<Vec<WaitlistEntry>, StoreError>;

    /// `entry`'s state at `now`, its rows locked in the unit of work; `None` when its rows
    /// cannot be had now (a store that locks out of its lock order without waiting: the
    /// entry is left in line for the next write that frees its units) or it is gone.
    async fn head_state(
        &mut self,
        entry: &WaitlistEntry,
        now: Timestamp,
    ) -> Result<Option<HeadState>, StoreError>;

    /// Reclaims the held holds of slot `slot` expired by `now`: `hold_expired` each, units
    /// back to the slot and its pools.
    async fn reclaim_slot(&mut self, slot: SlotId, now: Timestamp) -> Result<(), StoreError>;

    /// Reclaims the held holds expired by `now` of the slots of pool `pool` (those whose rows
    /// can be had), units back to their slots and pools.
    async fn refill(&mut self, pool: PoolId, now: Timestamp) -> Result<(), StoreError>;

    /// Offers `entry` its units: takes them from its slot and every pool of it, all or none,
    /// by rows affected; turns the entry into its held offer; appends `hold_placed`, then
    /// `waitlist_offered`. `None` when the units could not be taken (nothing changed).
    async fn offer(
        &mut self,
        entry: &WaitlistEntry,
        now: Timestamp,
    ) -> Result<Option<Hold>, StoreError>;

    /// The pools slot `slot` draws from.
    async fn pools_of(&mut self, slot: SlotId) -> Result<Vec<PoolId>, StoreError>;
}

/// Serves `lines` at `now` to a fixpoint (see the module's docs): returns the offers made, in
/// the order made.
pub async fn serve_lines<O: LineOps + ?Sized>(
    ops: &mut O,
    mut lines: Lines,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let mut offers = Vec::new();
    loop {
        let mut heads = ops.heads(&lines, now).await?;
        heads.sort_by_key(WaitlistEntry::line_order);
        heads.dedup_by_key(|entry| entry.entry_id);
        let mut offered = None;
        for entry in heads {
            if let Some(hold) = offer_if_ready(ops, &entry, now).await? {
                offered = Some(hold);
                break;
            }
        }
        let Some(hold) = offered else {
            return Ok(offers);
        };
        lines.slots.insert(hold.slot_id);
        lines.pools.extend(ops.pools_of(hold.slot_id).await?);
        offers.push(hold);
    }
}

/// Offers `entry` its units if it is ready: its plan's reclaims, then the offer.
async fn offer_if_ready<O: LineOps + ?Sized>(
    ops: &mut O,
    entry: &WaitlistEntry,
    now: Timestamp,
) -> Result<Option<Hold>, StoreError> {
    let Some(state) = ops.head_state(entry, now).await? else {
        return Ok(None);
    };
    let Some(plan) = state.plan(entry.quantity) else {
        return Ok(None);
    };
    if plan.reclaim_slot {
        ops.reclaim_slot(entry.slot_id, now).await?;
    }
    for pool in plan.refill {
        ops.refill(pool, now).await?;
    }
    ops.offer(entry, now).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(remaining: i64, expired: i64) -> Units {
        Units { remaining, expired }
    }

    fn state(heads: bool, slot: Units, pools: &[(i64, Units)]) -> HeadState {
        HeadState {
            heads_every_line: heads,
            slot,
            pools: pools.iter().map(|(id, u)| (PoolId(*id), *u)).collect(),
        }
    }

    #[test]
    fn a_head_behind_another_line_is_not_ready() {
        assert_eq!(state(false, units(5, 0), &[]).plan(1), None);
    }

    #[test]
    fn a_head_fits_with_expired_units_counted_free() {
        let plan = state(true, units(1, 2), &[]).plan(3);
        let expected = OfferPlan {
            reclaim_slot: true,
            refill: vec![],
        };
        assert_eq!(plan, Some(expected));
        assert_eq!(state(true, units(1, 1), &[]).plan(3), None);
    }

    #[test]
    fn only_short_pools_are_refilled_and_every_pool_must_fit() {
        let pools = [(7, units(0, 2)), (3, units(1, 1)), (5, units(4, 0))];
        let plan = state(true, units(2, 0), &pools).plan(2);
        let expected = OfferPlan {
            reclaim_slot: false,
            refill: vec![PoolId(3), PoolId(7)],
        };
        assert_eq!(plan, Some(expected));
        let short = [(7, units(0, 1))];
        assert_eq!(state(true, units(2, 0), &short).plan(2), None);
    }
}
