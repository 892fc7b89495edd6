//! The SQL text of the pools' statements (migration 4), built once per store from its table
//! names: a pool is a row of the pools table (`capacity`, `remaining`) and its slots rows of
//! the pool-slots table, each slot's row counting its pools (`pool_count`).

use crate::fragments::CAPACITY_AFTER;
use crate::guard::write_statement;

/// The pools' statements.
#[derive(Debug)]
pub(crate) struct PoolStatements {
    pub(crate) create_pool: String,
    pub(crate) lock_pool: String,
    pub(crate) pool_slots: String,
    pub(crate) pools_of_slot: String,
    pub(crate) take_pool: String,
    pub(crate) pool_line_waits: String,
    pub(crate) take_pool_newcomer: String,
    pub(crate) give_pool: String,
    pub(crate) pool_usage: String,
    pub(crate) all_pools: String,
    pub(crate) all_pool_slots: String,
    pub(crate) attach: String,
    pub(crate) count_pool: String,
    pub(crate) detach: String,
    pub(crate) uncount_pool: String,
    pub(crate) slot_taken_units: String,
    pub(crate) membership: String,
    pub(crate) change_pool_capacity: String,
}

impl PoolStatements {
    pub(crate) fn new(slots: &str, holds: &str, pools: &str, pool_slots: &str) -> Self {
        // A pool's units of its slots' held holds, split at the first `?` (now) into active
        // and expired.
        let pool_columns = format!(
            "p.id, p.capacity, p.remaining, \
             CAST((SELECT COALESCE(SUM(h.quantity), 0) FROM {pool_slots} ps \
                   JOIN {holds} h ON h.slot_id = ps.slot_id \
              WHERE ps.pool_id = p.id AND h.status = 'held' AND h.expires_at > ?) AS SIGNED) \
             AS held, \
             CAST((SELECT COALESCE(SUM(h.quantity), 0) FROM {pool_slots} ps \
                   JOIN {holds} h ON h.slot_id = ps.slot_id \
              WHERE ps.pool_id = p.id AND h.status = 'held' AND h.expires_at <= ?) AS SIGNED) \
             AS expired"
        );
        PoolStatements {
            // (capacity, capacity)
            create_pool: write_statement!(
                "INSERT INTO {pools} (capacity, remaining) VALUES (?, ?)"
            ),
            // (pool id): its capacity, the row locked.
            lock_pool: format!("SELECT capacity FROM {pools} WHERE id = ? FOR UPDATE"),
            // (pool id)
            pool_slots: format!(
                "SELECT slot_id FROM {pool_slots} WHERE pool_id = ? ORDER BY slot_id"
            ),
            // (slot id): read once the slot's row is locked (attaching and detaching lock it).
            pools_of_slot: format!(
                "SELECT pool_id FROM {pool_slots} WHERE slot_id = ? ORDER BY pool_id"
            ),
            // (units, pool id, units): the pool's conditional decrement.
            take_pool: write_statement!(
                "UPDATE {pools} SET remaining = remaining - ? WHERE id = ? AND remaining >= ?"
            ),
            // (units, pool id, units, now): a newcomer's, refused while anyone waits in the
            // pool's line (the entries of its selling slots).
            take_pool_newcomer: write_statement!(
                "UPDATE {pools} SET remaining = remaining - ? WHERE id = ? AND remaining >= ? \
                   AND (waiting = 0 OR NOT EXISTS ( \
                       SELECT 1 FROM {pool_slots} ps \
                       JOIN {holds} e ON e.slot_id = ps.slot_id AND e.status = 'waiting' \
                       JOIN {slots} s ON s.id = ps.slot_id \
                       WHERE ps.pool_id = {pools}.id AND s.starts_at > ? AND NOT s.closed \
                         AND s.removed_at IS NULL))"
            ),
            // (pool id, now): anyone waiting in the pool's line (the entries of its selling
            // slots), which refuses a newcomer's take of its units.
            pool_line_waits: format!(
                "SELECT 1 FROM {pool_slots} ps \
                 JOIN {holds} e ON e.slot_id = ps.slot_id AND e.status = 'waiting' \
                 JOIN {slots} s ON s.id = ps.slot_id \
                 WHERE ps.pool_id = ? AND s.starts_at > ? AND NOT s.closed \
                   AND s.removed_at IS NULL LIMIT 1"
            ),
            // (units, pool id)
            give_pool: write_statement!(
                "UPDATE {pools} SET remaining = remaining + ? WHERE id = ?"
            ),
            // (now, now, pool id)
            pool_usage: format!("SELECT {pool_columns} FROM {pools} p WHERE p.id = ?"),
            // (now, now)
            all_pools: format!("SELECT {pool_columns} FROM {pools} p ORDER BY p.id"),
            all_pool_slots: format!(
                "SELECT pool_id, slot_id FROM {pool_slots} ORDER BY pool_id, slot_id"
            ),
            // (pool id, slot id): one row when the slot was not attached yet.
            attach: write_statement!(
                "INSERT IGNORE INTO {pool_slots} (pool_id, slot_id) VALUES (?, ?)"
            ),
            // (slot id, most): a live slot with room for one more pool.
            count_pool: write_statement!(
                "UPDATE {slots} SET pool_count = pool_count + 1 \
                 WHERE id = ? AND removed_at IS NULL AND pool_count < ?"
            ),
            // (pool id, slot id)
            detach: write_statement!("DELETE FROM {pool_slots} WHERE pool_id = ? AND slot_id = ?"),
            uncount_pool: write_statement!(
                "UPDATE {slots} SET pool_count = pool_count - 1 WHERE id = ? AND pool_count > 0"
            ),
            // (slot, pool, slot, slot, pool, slot): why attaching or detaching changed nothing.
            membership: format!(
                "SELECT EXISTS (SELECT 1 FROM {slots} WHERE id = ?), \
                        EXISTS (SELECT 1 FROM {pools} WHERE id = ?), \
                        EXISTS (SELECT 1 FROM {slots} WHERE id = ? AND removed_at IS NULL), \
                        EXISTS (SELECT 1 FROM {pool_slots} WHERE slot_id = ? AND pool_id = ?), \
                        (SELECT COUNT(*) FROM {pool_slots} WHERE slot_id = ?)"
            ),
            // (slot id): units of the slot's holds stored as held or confirmed; read once the
            // slot's row is locked (every writer of those holds locks it first).
            slot_taken_units: format!(
                "SELECT CAST(COALESCE(SUM(quantity), 0) AS SIGNED) FROM {holds} \
                 WHERE slot_id = ? AND status IN ('held', 'confirmed')"
            ),
            // (the capacity change's binds around the pool id, as a slot's): the capacity after
            // it in 0..=i32::MAX (assigned left to right, as a slot's).
            change_pool_capacity: write_statement!(
                "UPDATE {pools} SET remaining = remaining + ({NEW} - capacity), capacity = {NEW} \
                 WHERE id = ? AND (? IS NULL OR capacity = ?) \
                   AND {NEW} BETWEEN 0 AND 2147483647 \
                   AND remaining + ({NEW} - capacity) >= 0",
                NEW = CAPACITY_AFTER
            ),
        }
    }
}
