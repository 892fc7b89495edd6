//! The waitlists' statements (migrations 10 and 11), with this store's table names: the SQL
//! of `waitlists.rs` and `serve.rs`.

use crate::fragments::{next_hold_id, HOLD_COLUMNS};
use slot_booking::store::TablePrefix;

/// The columns [`entry_from_row`](crate::rows::entry_from_row) reads.
pub(crate) const ENTRY_COLUMNS: &str =
    "id, slot_id, quantity, owner, priority, joined_at, offer_micros";

/// [`ENTRY_COLUMNS`] of the entries table aliased `e`.
const E_ENTRY_COLUMNS: &str =
    "e.id, e.slot_id, e.quantity, e.owner, e.priority, e.joined_at, e.offer_micros";

/// The waitlists' statements, with this store's table names.
#[derive(Debug)]
pub(crate) struct WaitlistStatements {
    pub(crate) join: String,
    pub(crate) join_limits: String,
    pub(crate) entry_by_key: String,
    pub(crate) entry_in_scope: String,
    pub(crate) leave: String,
    pub(crate) slot_head: String,
    pub(crate) pool_head: String,
    pub(crate) pools_lined: String,
    pub(crate) offer_entry: String,
    pub(crate) drop_entry: String,
    pub(crate) entry_state: String,
    pub(crate) slot_pools_state: String,
    pub(crate) slots_lined: String,
}

impl WaitlistStatements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let slots = format!("{prefix}slots");
        let holds = format!("{prefix}holds");
        let entries = format!("{prefix}waitlist_entries");
        let slot_pools = format!("{prefix}slot_pools");
        let pools = format!("{prefix}pools");
        let next_id = next_hold_id(prefix.as_str());
        // The place in line of the entry `e`: the entries of its slot served before it, and
        // itself (one range of `waitlist_line`).
        let position = format!(
            "(SELECT count(*) FROM {entries} o WHERE o.slot_id = e.slot_id \
              AND (o.priority > e.priority OR (o.priority = e.priority AND o.id <= e.id))) \
             AS position"
        );
        // The slot `s` sells at `now` (a parameter).
        let selling = |s: &str, now: &str| {
            format!("{s}.starts_at > {now} AND {s}.closed = 0 AND {s}.removed_at IS NULL")
        };
        let selling_s = selling("s", "?2");
        let selling_t = selling("t", "?2");
        // The entry `x` comes before the entry `e` in a line.
        let before = "(x.priority > e.priority OR (x.priority = e.priority AND x.id < e.id))";
        // The entry `e` is the head of its slot's line and of the line of every pool of its
        // slot (the waiting entries of the pool's slots selling at ?2): nobody is before it in
        // any of them. One range of `waitlist_line`, then per pool of the slot one range of
        // `slot_pools_by_pool` and, for each of its slots with a line, a range of
        // `waitlist_line`.
        let head_everywhere = format!(
            "NOT EXISTS (SELECT 1 FROM {entries} x WHERE x.slot_id = e.slot_id AND {before}) \
             AND NOT EXISTS (SELECT 1 FROM {slot_pools} m \
                             JOIN {slot_pools} o ON o.pool_id = m.pool_id \
                             JOIN {slots} t ON t.id = o.slot_id \
                             JOIN {entries} x ON x.slot_id = o.slot_id \
                             WHERE m.slot_id = e.slot_id AND t.waiting > 0 AND {selling_t} \
                               AND {before})"
        );
        // Every pool of the entry `e`'s slot has its quantity in its stored `remaining`.
        let pools_fit = format!(
            "NOT EXISTS (SELECT 1 FROM {slot_pools} m JOIN {pools} p ON p.id = m.pool_id \
                         WHERE m.slot_id = e.slot_id AND p.remaining < e.quantity)"
        );
        WaitlistStatements {
            // ?1 slot id, ?2 key, ?3 quantity, ?4 owner, ?5 priority, ?6 now, ?7 offer window
            // (µs). Stores the entry only where the slot sells and has the capacity, so has
            // every pool of it, and no hold has the key; another entry with the key is the
            // unique constraint's. No row: the core's `join_line` reads why.
            join: format!(
                "INSERT INTO {entries} \
                     (id, slot_id, idempotency_key, quantity, owner, priority, joined_at, \
                      offer_micros) \
                 SELECT {next_id}, ?1, ?2, ?3, ?4, ?5, ?6, ?7 \
                 WHERE EXISTS (SELECT 1 FROM {slots} WHERE id = ?1 AND starts_at > ?6 \
                                 AND closed = 0 AND removed_at IS NULL AND capacity >= ?3) \
                   AND NOT EXISTS (SELECT 1 FROM {slot_pools} m \
                                   JOIN {pools} p ON p.id = m.pool_id \
                                   WHERE m.slot_id = ?1 AND p.capacity < ?3) \
                   AND NOT EXISTS (SELECT 1 FROM {holds} WHERE idempotency_key = ?2) \
                 RETURNING {ENTRY_COLUMNS}"
            ),
            // ?1 slot id: its limits, and the smallest capacity of its pools (NULL: none).
            join_limits: format!(
                "SELECT starts_at, capacity, closed, removed_at, \
                        (SELECT min(p.capacity) FROM {slot_pools} m \
                         JOIN {pools} p ON p.id = m.pool_id WHERE m.slot_id = ?1) \
                            AS pool_capacity \
                 FROM {slots} WHERE id = ?1"
            ),
            // ?1 key: the waiting entry that has it, with its place in line.
            entry_by_key: format!(
                "SELECT {E_ENTRY_COLUMNS}, {position} FROM {entries} e \
                 WHERE e.idempotency_key = ?1"
            ),
            // ?1 entry id, ?2 and ?3 the scope: the waiting entry, with its place in line.
            entry_in_scope: format!(
                "SELECT {E_ENTRY_COLUMNS}, {position} FROM {entries} e \
                 WHERE e.id = ?1 AND (?2 OR e.owner IS ?3)"
            ),
            // ?1 entry id, ?2 and ?3 the scope.
            leave: format!(
                "DELETE FROM {entries} WHERE id = ?1 AND (?2 OR owner IS ?3) \
                 RETURNING {ENTRY_COLUMNS}"
            ),
            // ?1 slot id: the head of its line, by (priority DESC, id), through
            // `waitlist_line`.
            slot_head: format!(
                "SELECT {ENTRY_COLUMNS} FROM {entries} WHERE slot_id = ?1 \
                 ORDER BY priority DESC, id LIMIT 1"
            ),
            // ?1 pool id, ?2 now: the head of the pool's line, the first of the entries of its
            // slots that sell at ?2.
            pool_head: format!(
                "SELECT x.id, x.slot_id, x.quantity, x.owner, x.priority, x.joined_at, \
                        x.offer_micros \
                 FROM {slot_pools} o JOIN {slots} t ON t.id = o.slot_id \
                 JOIN {entries} x ON x.slot_id = o.slot_id \
                 WHERE o.pool_id = ?1 AND t.waiting > 0 AND {selling_t} \
                 ORDER BY x.priority DESC, x.id LIMIT 1"
            ),
            // ?1 now: every pool whose line is not empty, by id (the sweeper's pass): the
            // slots with a line through the partial index `slots_lined` (migration 11), then
            // their pools through `slot_pools`' key. The unary `+` keeps the planner off the
            // slots' `starts_at` index, whose range is nearly every slot.
            pools_lined: format!(
                "SELECT DISTINCT o.pool_id FROM {slots} t JOIN {slot_pools} o ON o.slot_id = t.id \
                 WHERE t.waiting > 0 AND +t.starts_at > ?1 AND t.closed = 0 \
                   AND t.removed_at IS NULL \
                 ORDER BY o.pool_id"
            ),
            // ?1 entry id, ?2 now: the entry's offer, if it is ready without a reclaim: its
            // slot sells, it is the head of its slot's line and of each of its pools' lines,
            // and its whole quantity fits in the slot's `remaining` and in each pool's: a hold
            // of the entry's id, key, owner and quantity, created now, expiring after the
            // entry's offer window. The `holds_take_a_unit` trigger takes its units from the
            // slot and its pools (the entry's own offer passes the lines' conditions), and
            // `holds_placed_event` appends its `hold_placed`.
            offer_entry: format!(
                "INSERT INTO {holds} \
                     (id, slot_id, idempotency_key, status, expires_at, created_at, quantity, \
                      owner) \
                 SELECT e.id, e.slot_id, e.idempotency_key, 'held', ?2 + e.offer_micros, ?2, \
                        e.quantity, e.owner \
                 FROM {entries} e JOIN {slots} s ON s.id = e.slot_id \
                 WHERE e.id = ?1 AND {selling_s} AND s.remaining >= e.quantity \
                   AND {head_everywhere} AND {pools_fit} \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 entry id: an offered entry leaves the lines.
            drop_entry: format!("DELETE FROM {entries} WHERE id = ?1"),
            // ?1 entry id, ?2 now: the entry's state for the core's readiness rule: whether
            // its slot sells and it heads its slot's line and every line of its slot's pools,
            // its slot's stored `remaining`, and the units of the slot's held holds expired by
            // ?2.
            entry_state: format!(
                "SELECT ({selling_s} AND {head_everywhere}) AS heads_every_line, s.remaining, \
                        (SELECT coalesce(SUM(h.quantity), 0) FROM {holds} h \
                         WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= ?2) \
                            AS expired \
                 FROM {entries} e JOIN {slots} s ON s.id = e.slot_id WHERE e.id = ?1"
            ),
            // ?1 slot id, ?2 now: each pool of the slot, by id, with its stored `remaining`
            // and the units of its slots' held holds expired by ?2.
            slot_pools_state: format!(
                "SELECT p.id, p.remaining, \
                        (SELECT coalesce(SUM(h.quantity), 0) FROM {slot_pools} o \
                         JOIN {holds} h ON h.slot_id = o.slot_id \
                         WHERE o.pool_id = p.id AND h.status = 'held' AND h.expires_at <= ?2) \
                            AS expired \
                 FROM {slot_pools} m JOIN {pools} p ON p.id = m.pool_id \
                 WHERE m.slot_id = ?1 ORDER BY p.id"
            ),
            // ?1 now: every slot that sells with a line, by id (the sweeper's pass), through
            // the partial index `slots_lined` (migration 11).
            slots_lined: format!(
                "SELECT id FROM {slots} WHERE waiting > 0 AND +starts_at > ?1 AND closed = 0 \
                   AND removed_at IS NULL ORDER BY id"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_waitlist_statement_names_only_prefixed_tables() {
        let sql = WaitlistStatements::new(&TablePrefix::new("zz_", None).unwrap());
        let WaitlistStatements {
            join,
            join_limits,
            entry_by_key,
            entry_in_scope,
            leave,
            slot_head,
            pool_head,
            pools_lined,
            offer_entry,
            drop_entry,
            entry_state,
            slot_pools_state,
            slots_lined,
        } = &sql;
        for statement in [
            join,
            join_limits,
            entry_by_key,
            entry_in_scope,
            leave,
            slot_head,
            pool_head,
            pools_lined,
            offer_entry,
            drop_entry,
            entry_state,
            slot_pools_state,
            slots_lined,
        ] {
            assert!(statement.contains("zz_"), "{statement}");
            for table in [
                "slots",
                "holds",
                "waitlist_entries",
                "waitlist_ids",
                "slot_pools",
                "pools",
            ] {
                for verb in ["FROM", "JOIN", "INTO", "UPDATE"] {
                    let bare = format!("{verb} {table} ");
                    assert!(!statement.contains(&bare), "{statement}");
                }
            }
        }
    }
}
