//! Pools: a capacity several slots draw from (a day's total over its delivery windows, a
//! venue over its rooms, a trainer's sessions per day).

use serde::{Deserialize, Serialize};

use super::ids::{PoolId, SlotId};

/// The most pools one slot may belong to. Every unit a hold takes is taken from its slot and
/// from each of the slot's pools, so this bounds the rows one hold locks.
pub const MAX_POOLS_PER_SLOT: usize = 4;

/// A pool as stored: a capacity that several slots draw from.
///
/// Its invariant, like a slot's: `stored_remaining` plus the units of the holds stored as
/// held (expired ones included until reclaimed) and confirmed on its slots equals
/// `capacity`, and `stored_remaining >= 0`. A hold on a slot of the pool takes its units from
/// the slot and from the pool, all or nothing; cancelling and reclaiming give them back to
/// both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    /// The store-assigned id.
    pub pool_id: PoolId,
    /// Units its slots may take together.
    pub capacity: i32,
    /// Units not taken, as stored: expired holds not yet reclaimed still count as taken.
    pub stored_remaining: i32,
    /// Its slots, by id.
    pub slots: Vec<SlotId>,
}

/// A pool to create: its capacity, `0..=i32::MAX`. It starts with no slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewPool {
    /// Units its slots may take together.
    pub capacity: i32,
}

impl NewPool {
    /// A pool of `capacity` units.
    pub fn new(capacity: i32) -> Self {
        NewPool { capacity }
    }
}

/// A pool with the units of its slots' holds stored as held, split at the instant of the
/// read into active and expired: what a store reports for reads and refused changes.
/// Confirmed units follow from the invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUsage {
    /// The pool as stored.
    pub pool: Pool,
    /// Units of its slots' holds stored as held that are still active.
    pub held: i32,
    /// Units of its slots' holds stored as held that have expired but were not reclaimed:
    /// free.
    pub expired: i32,
}

impl PoolUsage {
    /// Units a new hold could take from the pool: free plus expired.
    pub fn available(&self) -> i32 {
        self.pool.stored_remaining + self.expired
    }

    /// Units of its slots' confirmed holds.
    pub fn confirmed(&self) -> i32 {
        self.pool.capacity - self.pool.stored_remaining - self.held - self.expired
    }

    /// Units held (active) or confirmed: what no capacity change may take.
    pub fn taken(&self) -> i32 {
        self.held + self.confirmed()
    }
}

/// A pool and where its units are, as the API shows it:
/// `capacity == remaining + held + confirmed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSummary {
    /// The pool's id.
    pub pool_id: PoolId,
    /// Units its slots may take together.
    pub capacity: i32,
    /// Units a new hold could take (free, expired holds included).
    pub remaining: i32,
    /// Units of active holds on its slots.
    pub held: i32,
    /// Units of confirmed holds on its slots.
    pub confirmed: i32,
    /// Its slots, by id.
    pub slots: Vec<SlotId>,
}

impl From<PoolUsage> for PoolSummary {
    fn from(usage: PoolUsage) -> Self {
        let (remaining, confirmed) = (usage.available(), usage.confirmed());
        PoolSummary {
            pool_id: usage.pool.pool_id,
            capacity: usage.pool.capacity,
            remaining,
            held: usage.held,
            confirmed,
            slots: usage.pool.slots,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_splits_a_pool_into_free_held_and_confirmed() {
        let usage = PoolUsage {
            pool: Pool {
                pool_id: PoolId(1),
                capacity: 10,
                stored_remaining: 3,
                slots: vec![SlotId(1), SlotId(2)],
            },
            held: 2,
            expired: 1,
        };
        assert_eq!(
            (usage.available(), usage.confirmed(), usage.taken()),
            (4, 4, 6)
        );
        let summary = PoolSummary::from(usage);
        assert_eq!(
            (summary.remaining, summary.held, summary.confirmed),
            (4, 2, 4)
        );
    }
}
