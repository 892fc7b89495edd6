//! The pools' statements (migration 9), with this store's table names: the SQL of `pools.rs`
//! and of the pool steps of `units.rs`.

use crate::fragments::{CAPACITY_AFTER, HOLD_COLUMNS};
use slot_booking::store::TablePrefix;

/// The pools' statements, with this store's table names.
#[derive(Debug)]
pub(crate) struct PoolStatements {
    pub(crate) create_pool: String,
    pub(crate) pool_usage: String,
    pub(crate) every_pool: String,
    pub(crate) give_back: String,
    pub(crate) pools_of_slot: String,
    pub(crate) reclaim_pool: String,
    pub(crate) reclaim_short_pools: String,
    pub(crate) attach: String,
    pub(crate) add_member: String,
    pub(crate) membership: String,
    pub(crate) detach: String,
    pub(crate) detach_give_back: String,
    pub(crate) change_capacity: String,
}

impl PoolStatements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let slots = format!("{prefix}slots");
        let holds = format!("{prefix}holds");
        let pools = format!("{prefix}pools");
        let slot_pools = format!("{prefix}slot_pools");
        // A pool's units stored as held over its slots, split at ?1 (now) into active and
        // expired (each sum one range of `slot_pools_by_pool`, then of the partial index over
        // held holds per slot), and its slots (sorted when decoded).
        let held = |cmp: &str| {
            format!(
                "(SELECT coalesce(SUM(h.quantity), 0) FROM {slot_pools} sp \
                  JOIN {holds} h ON h.slot_id = sp.slot_id \
                  WHERE sp.pool_id = p.id AND h.status = 'held' AND h.expires_at {cmp} ?1)"
            )
        };
        let usage = format!(
            "SELECT p.id, p.capacity, p.remaining, {} AS held, {} AS expired, \
                    (SELECT group_concat(sp.slot_id) FROM {slot_pools} sp \
                     WHERE sp.pool_id = p.id) AS slots \
             FROM {pools} p",
            held(">"),
            held("<=")
        );
        // The taken units of the slot ?1 (held, expired not reclaimed, confirmed): its
        // capacity less its `remaining`, by the slot's own invariant; NULL for a removed slot
        // or none.
        let taken = format!(
            "(SELECT capacity - remaining FROM {slots} WHERE id = ?1 AND removed_at IS NULL)"
        );
        PoolStatements {
            // ?1 capacity, ?2 now.
            create_pool: format!(
                "INSERT INTO {pools} (capacity, remaining, created_at) VALUES (?1, ?1, ?2) \
                 RETURNING id, capacity, remaining"
            ),
            // ?1 now, ?2 pool id.
            pool_usage: format!("{usage} WHERE p.id = ?2"),
            // ?1 now: every pool, by id. No pool, no row: one look at an empty table.
            every_pool: format!("{usage} ORDER BY p.id"),
            // ?1 units, ?2 slot id: the units a slot got back, given back to its pools.
            give_back: format!(
                "UPDATE {pools} SET remaining = remaining + ?1 \
                 WHERE id IN (SELECT pool_id FROM {slot_pools} WHERE slot_id = ?2)"
            ),
            // ?1 slot id.
            pools_of_slot: format!(
                "SELECT pool_id FROM {slot_pools} WHERE slot_id = ?1 ORDER BY pool_id"
            ),
            // ?1 slot id, ?2 now, ?3 units: the expired held holds of the slots of the slot's
            // pools that have fewer than ?3 units (a hold's or line's insert aborted by one of
            // them), if the slot is selling.
            reclaim_short_pools: format!(
                "UPDATE {holds} SET status = 'expired' \
                 WHERE slot_id IN (SELECT o.slot_id FROM {slot_pools} m \
                                   JOIN {pools} p ON p.id = m.pool_id AND p.remaining < ?3 \
                                   JOIN {slot_pools} o ON o.pool_id = m.pool_id \
                                   WHERE m.slot_id = ?1) \
                   AND status = 'held' AND expires_at <= ?2 \
                   AND EXISTS (SELECT 1 FROM {slots} WHERE id = ?1 AND starts_at > ?2 \
                                 AND closed = 0 AND removed_at IS NULL) \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 pool id, ?2 now: the expired held holds of the pool's slots.
            reclaim_pool: format!(
                "UPDATE {holds} SET status = 'expired' \
                 WHERE status = 'held' AND expires_at <= ?2 \
                   AND slot_id IN (SELECT slot_id FROM {slot_pools} WHERE pool_id = ?1) \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 slot id, ?2 pool id, ?3 most pools per slot: the slot's taken units taken
            // from the pool, only for a live slot not yet attached and in fewer than ?3
            // pools, where the pool has them free.
            attach: format!(
                "UPDATE {pools} SET remaining = remaining - {taken} \
                 WHERE id = ?2 AND remaining >= {taken} \
                   AND NOT EXISTS (SELECT 1 FROM {slot_pools} \
                                   WHERE slot_id = ?1 AND pool_id = ?2) \
                   AND (SELECT count(*) FROM {slot_pools} WHERE slot_id = ?1) < ?3"
            ),
            add_member: format!("INSERT INTO {slot_pools} (slot_id, pool_id) VALUES (?1, ?2)"),
            // ?1 slot id, ?2 pool id: why attaching or detaching changed nothing.
            membership: format!(
                "SELECT EXISTS (SELECT 1 FROM {slots} WHERE id = ?1), \
                        EXISTS (SELECT 1 FROM {pools} WHERE id = ?2), \
                        EXISTS (SELECT 1 FROM {slots} WHERE id = ?1 AND removed_at IS NULL), \
                        EXISTS (SELECT 1 FROM {slot_pools} WHERE slot_id = ?1 AND pool_id = ?2), \
                        (SELECT count(*) FROM {slot_pools} WHERE slot_id = ?1)"
            ),
            // ?1 slot id, ?2 pool id.
            detach: format!("DELETE FROM {slot_pools} WHERE slot_id = ?1 AND pool_id = ?2"),
            detach_give_back: format!(
                "UPDATE {pools} SET remaining = remaining + \
                     (SELECT capacity - remaining FROM {slots} WHERE id = ?1) \
                 WHERE id = ?2"
            ),
            // ?1 pool id, ?2 keep, ?3 add, ?4 expected: as a slot's (`change_capacity` in
            // sql.rs), the capacity after it in 0..=i32::MAX.
            change_capacity: format!(
                "UPDATE {pools} SET capacity = {CAPACITY_AFTER}, \
                     remaining = remaining + ({CAPACITY_AFTER} - capacity) \
                 WHERE id = ?1 AND (?4 IS NULL OR capacity = ?4) \
                   AND {CAPACITY_AFTER} <> capacity \
                   AND {CAPACITY_AFTER} BETWEEN 0 AND 2147483647 \
                   AND remaining + ({CAPACITY_AFTER} - capacity) >= 0 \
                 RETURNING id"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pool_statement_names_only_prefixed_tables() {
        let sql = PoolStatements::new(&TablePrefix::new("zz_", None).unwrap());
        let PoolStatements {
            create_pool,
            pool_usage,
            every_pool,
            give_back,
            pools_of_slot,
            reclaim_pool,
            reclaim_short_pools,
            attach,
            add_member,
            membership,
            detach,
            detach_give_back,
            change_capacity,
        } = &sql;
        for statement in [
            create_pool,
            pool_usage,
            every_pool,
            give_back,
            pools_of_slot,
            reclaim_pool,
            reclaim_short_pools,
            attach,
            add_member,
            membership,
            detach,
            detach_give_back,
            change_capacity,
        ] {
            assert!(statement.contains("zz_"), "{statement}");
            for table in ["slots", "holds", "pools", "slot_pools"] {
                for verb in ["FROM", "JOIN", "INTO", "UPDATE"] {
                    let bare = format!("{verb} {table} ");
                    assert!(!statement.contains(&bare), "{statement}");
                }
            }
        }
    }
}
