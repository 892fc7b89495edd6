//! The SQL text of the waitlists' statements (migration 5), built once per store from its
//! table names. A waiting entry is a row of the holds table with status `waiting` (its key in
//! the key space of holds and bookings, its id the id its offer will have); offering it turns
//! the row into a held hold.

use crate::guard::write_statement;

/// The columns [`entry_from_row`](crate::rows::entry_from_row) reads, of the holds table aliased `e`.
const ENTRY_COLUMNS: &str = "e.id, e.slot_id, e.quantity, e.owner, e.priority, \
     e.created_at AS joined_at, e.offer_micros";

/// The waitlists' statements.
#[derive(Debug)]
pub(crate) struct WaitlistStatements {
    pub(crate) insert_entry: String,
    pub(crate) count_slot: String,
    pub(crate) count_pool: String,
    pub(crate) entry_by_key: String,
    pub(crate) entry_in_scope: String,
    pub(crate) leave: String,
    pub(crate) slot_head: String,
    pub(crate) pool_head: String,
    pub(crate) lock_slot_skip: String,
    pub(crate) lock_pool_skip: String,
    pub(crate) take_offer_units: String,
    pub(crate) offer: String,
    pub(crate) join_limits: String,
    pub(crate) waiting_slots: String,
    pub(crate) waiting_pools: String,
}

impl WaitlistStatements {
    pub(crate) fn new(slots: &str, holds: &str, pools: &str, pool_slots: &str) -> Self {
        let selling = "s.starts_at > ? AND NOT s.closed AND s.removed_at IS NULL";
        // An entry's place in its slot's line: the entries ahead of it, and itself.
        let position = format!(
            "CAST((SELECT COUNT(*) FROM {holds} o WHERE o.slot_id = e.slot_id \
               AND o.status = 'waiting' \
               AND (o.priority > e.priority OR (o.priority = e.priority AND o.id <= e.id))) \
             AS SIGNED) AS position"
        );
        WaitlistStatements {
            // (key, now, now, quantity, owner, priority, offer window, slot id, now, quantity,
            // quantity): stored only where the slot sells and has the capacity, and so has
            // every pool of it; the key's unique constraint refuses a second row with it.
            insert_entry: write_statement!(
                "INSERT INTO {holds} (slot_id, idempotency_key, status, expires_at, created_at, \
                     quantity, owner, priority, offer_micros) \
                 SELECT s.id, ?, 'waiting', ?, ?, ?, ?, ?, ? FROM {slots} s \
                 WHERE s.id = ? AND {selling} AND s.capacity >= ? \
                   AND NOT EXISTS (SELECT 1 FROM {pool_slots} ps JOIN {pools} p \
                                     ON p.id = ps.pool_id \
                                   WHERE ps.slot_id = s.id AND p.capacity < ?)"
            ),
            // (change, slot id) and (change, pool id): the count of waiting entries.
            count_slot: write_statement!("UPDATE {slots} SET waiting = waiting + ? WHERE id = ?"),
            count_pool: write_statement!("UPDATE {pools} SET waiting = waiting + ? WHERE id = ?"),
            // (key)
            entry_by_key: format!(
                "SELECT {ENTRY_COLUMNS}, {position} FROM {holds} e \
                 WHERE e.idempotency_key = ? AND e.status = 'waiting'"
            ),
            // (entry id, any, owner)
            entry_in_scope: format!(
                "SELECT {ENTRY_COLUMNS}, {position} FROM {holds} e \
                 WHERE e.id = ? AND e.status = 'waiting' AND (? OR e.owner <=> ?)"
            ),
            leave: write_statement!(
                "DELETE FROM {holds} WHERE id = ? AND status = 'waiting' AND (? OR owner <=> ?)"
            ),
            // (slot id, now): the head of a selling slot's line.
            slot_head: format!(
                "SELECT {ENTRY_COLUMNS} FROM {holds} e JOIN {slots} s ON s.id = e.slot_id \
                 WHERE e.slot_id = ? AND e.status = 'waiting' AND {selling} \
                 ORDER BY e.priority DESC, e.id LIMIT 1"
            ),
            // (pool id, now): the head of a pool's line, the entries of its selling slots.
            pool_head: format!(
                "SELECT {ENTRY_COLUMNS} FROM {pool_slots} ps \
                 JOIN {holds} e ON e.slot_id = ps.slot_id AND e.status = 'waiting' \
                 JOIN {slots} s ON s.id = ps.slot_id \
                 WHERE ps.pool_id = ? AND {selling} \
                 ORDER BY e.priority DESC, e.id LIMIT 1"
            ),
            // Locks taken out of the lock order never wait: a row another step holds is
            // skipped, and its head left in line for the next step that frees its units.
            lock_slot_skip: format!("SELECT id FROM {slots} WHERE id = ? FOR UPDATE SKIP LOCKED"),
            lock_pool_skip: format!("SELECT id FROM {pools} WHERE id = ? FOR UPDATE SKIP LOCKED"),
            // (quantity, slot id, quantity, now): an offer's decrement, which no line blocks.
            take_offer_units: write_statement!(
                "UPDATE {slots} s SET s.remaining = s.remaining - ? \
                 WHERE s.id = ? AND s.remaining >= ? AND {selling}"
            ),
            // (now, now, entry id): the entry becomes its held offer.
            offer: write_statement!(
                "UPDATE {holds} SET status = 'held', created_at = ?, expires_at = ? + offer_micros \
                 WHERE id = ? AND status = 'waiting'"
            ),
            // The lines anyone waits in, for the sweeper's pass.
            waiting_slots: format!("SELECT id FROM {slots} WHERE waiting > 0 ORDER BY id"),
            waiting_pools: format!("SELECT id FROM {pools} WHERE waiting > 0 ORDER BY id"),
            // (slot id): the slot's limits and the least capacity of its pools.
            join_limits: format!(
                "SELECT s.starts_at, s.capacity, s.closed, s.removed_at, \
                        (SELECT MIN(p.capacity) FROM {pool_slots} ps JOIN {pools} p \
                           ON p.id = ps.pool_id WHERE ps.slot_id = s.id) AS pool_capacity \
                 FROM {slots} s WHERE s.id = ?"
            ),
        }
    }
}
