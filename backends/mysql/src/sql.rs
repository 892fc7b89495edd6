//! Table names and the SQL text of every statement, built once per store from its table prefix.
//!
//! Parameters are positional (`?`), bound in the order they appear. Timestamps are
//! microseconds since the Unix epoch. A caller's [`Scope`](slot_booking::Scope) is the
//! predicate `(? OR owner <=> ?)`: `<=>` compares NULLs as equal, so an anonymous scope (`any`
//! false, `owner` NULL) admits only holds without an owner.
//!
//! Rows affected are *found* rows: sqlx's MySQL driver always connects with
//! `CLIENT_FOUND_ROWS`, so an `UPDATE` reports every row its `WHERE` matched, changed or not.
//! Every conditional update here therefore states its whole condition in its `WHERE`, including
//! "the value moves" where a write must tell a change from a no-op (a renewal, a capacity, a
//! close): one row matched is one row changed.

use crate::fragments::{CAPACITY_AFTER, HOLD_COLUMNS};
use crate::guard::write_statement;
use crate::pool_sql::PoolStatements;
use crate::waitlist_sql::WaitlistStatements;
use slot_booking::store::TablePrefix;

/// The columns [`slot_from_row`](crate::rows::slot_from_row) reads.
const SLOT_COLUMNS: &str =
    "id, starts_at, ends_at, capacity, remaining, resource, closed, removed_at";

/// [`SLOT_COLUMNS`] of the slots table aliased `s`.
const S_SLOT_COLUMNS: &str =
    "s.id, s.starts_at, s.ends_at, s.capacity, s.remaining, s.resource, s.closed, s.removed_at";

/// The columns [`event_from_row`](crate::rows::event_from_row) reads.
const EVENT_COLUMNS: &str = "position, kind, slot_id, hold_id, owner, quantity, occurred_at";

/// Every statement the store runs, with its table names.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) create_slot: String,
    pub(crate) slot_by_id: String,
    pub(crate) slot_limits: String,
    pub(crate) lock_slot: String,
    pub(crate) take_units: String,
    pub(crate) give_back: String,
    pub(crate) hold_by_id: String,
    pub(crate) hold_slot: String,
    pub(crate) expired_of_slot: String,
    pub(crate) expire_of_slot: String,
    pub(crate) confirm: String,
    pub(crate) cancel: String,
    pub(crate) renew: String,
    pub(crate) renew_unmoved: String,
    pub(crate) availability: String,
    pub(crate) owner_holds: String,
    pub(crate) slot_holds: String,
    pub(crate) change_capacity: String,
    pub(crate) set_closed: String,
    pub(crate) remove_slot: String,
    pub(crate) slot_usage: String,
    pub(crate) slots_page: String,
    pub(crate) resource_slots_page: String,
    pub(crate) append_event: String,
    pub(crate) lock_event_log: String,
    pub(crate) unplaced: String,
    pub(crate) any_unplaced: String,
    pub(crate) move_event_log: String,
    pub(crate) read_events: String,
    pub(crate) read_events_after: String,
    pub(crate) event_log_end: String,
    pub(crate) acknowledge: String,
    pub(crate) acknowledge_leased: String,
    pub(crate) consumer_position: String,
    pub(crate) extend_lease: String,
    pub(crate) register_leased: String,
    pub(crate) release_consumer: String,
    pub(crate) expired_candidates: String,
    pub(crate) purge_holds: String,
    pub(crate) purge_events: String,
    pub(crate) insert_line: String,
    pub(crate) mark_booking: String,
    pub(crate) booking_lines: String,
    pub(crate) booking_by_key: String,
    pub(crate) booking_slots: String,
    pub(crate) lock_booking_lines: String,
    pub(crate) confirm_booking: String,
    pub(crate) cancel_booking: String,
    pub(crate) renew_booking: String,
    pub(crate) renew_booking_unmoved: String,
    pub(crate) line_state: String,
    pub(crate) pools: PoolStatements,
    pub(crate) waitlists: WaitlistStatements,
    /// Table names, for the statements built per call around a list of ids.
    pub(crate) slots: String,
    pub(crate) holds: String,
    pub(crate) events: String,
}

impl Statements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let slots = format!("{prefix}slots");
        let holds = format!("{prefix}holds");
        let events = format!("{prefix}events");
        // A hold event's booking, read from its hold (NULL for a hold placed alone).
        let booking_of =
            format!("(SELECT booking_id FROM {holds} WHERE id = {events}.hold_id) AS booking_id");
        let log = format!("{prefix}event_log");
        let consumers = format!("{prefix}event_consumers");
        let pools = format!("{prefix}pools");
        let pool_slots = format!("{prefix}pool_slots");
        // A slot's units still stored as held, split at the first `?` (now) into active and
        // expired: each one range of `holds_by_slot_status_expiry`.
        let usage_columns = format!(
            "{S_SLOT_COLUMNS}, \
             CAST((SELECT COALESCE(SUM(h.quantity), 0) FROM {holds} h \
              WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at > ?) AS SIGNED) \
             AS held, \
             CAST((SELECT COALESCE(SUM(h.quantity), 0) FROM {holds} h \
              WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= ?) AS SIGNED) \
             AS expired"
        );
        // The operator's keyset page after the two `usage_columns` parameters: from
        // (inclusive), to (exclusive), the cursor's (starts_at, id) twice, the limit.
        let page_tail = "s.starts_at >= ? AND s.starts_at < ? \
                         AND (s.starts_at > ? OR (s.starts_at = ? AND s.id > ?)) \
                         ORDER BY s.starts_at, s.id LIMIT ?";
        Statements {
            create_slot: write_statement!(
                "INSERT INTO {slots} (starts_at, ends_at, capacity, remaining, resource) \
                 VALUES (?, ?, ?, ?, ?)"
            ),
            slot_by_id: format!("SELECT {SLOT_COLUMNS} FROM {slots} WHERE id = ?"),
            slot_limits: format!(
                "SELECT starts_at, capacity, closed, removed_at FROM {slots} WHERE id = ?"
            ),
            lock_slot: format!("SELECT id FROM {slots} WHERE id = ? FOR UPDATE"),
            // The conditional decrement (quantity, slot id, quantity, now): one row matched is
            // the units taken from a selling slot nobody waits for (an offer's is the
            // waitlists' own).
            take_units: write_statement!(
                "UPDATE {slots} SET remaining = remaining - ? \
                 WHERE id = ? AND remaining >= ? AND starts_at > ? AND NOT closed \
                   AND removed_at IS NULL AND waiting = 0"
            ),
            // (units, slot id)
            give_back: write_statement!("UPDATE {slots} SET remaining = remaining + ? WHERE id = ?"),
            // (hold id, any, owner)
            hold_by_id: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE id = ? AND status <> 'waiting' AND (? OR owner <=> ?)"
            ),
            // A hold's slot and booking never change: read to lock the slots before the hold.
            hold_slot: format!("SELECT slot_id, booking_id FROM {holds} WHERE id = ?"),
            // (slot id, now): the slot's held holds that expired, locked (their slot's row is
            // locked first).
            expired_of_slot: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE slot_id = ? AND status = 'held' AND expires_at <= ? ORDER BY id FOR UPDATE"
            ),
            expire_of_slot: write_statement!(
                "UPDATE {holds} SET status = 'expired' \
                 WHERE slot_id = ? AND status = 'held' AND expires_at <= ?"
            ),
            // (now, hold id, now, any, owner)
            confirm: write_statement!(
                "UPDATE {holds} SET status = 'confirmed', confirmed_at = ? \
                 WHERE id = ? AND status = 'held' AND expires_at > ? AND (? OR owner <=> ?)"
            ),
            // (now, hold id, now, any, owner)
            cancel: write_statement!(
                "UPDATE {holds} SET status = 'cancelled', cancelled_at = ? \
                 WHERE id = ? AND (status = 'confirmed' OR (status = 'held' AND expires_at > ?)) \
                   AND (? OR owner <=> ?)"
            ),
            // (wanted, max life, hold id, now, any, owner, wanted, max life): the expiry moves
            // to now + lifetime, capped at created_at + the maximum life, and only forward.
            renew: write_statement!(
                "UPDATE {holds} SET expires_at = LEAST(?, created_at + ?) \
                 WHERE id = ? AND status = 'held' AND expires_at > ? AND (? OR owner <=> ?) \
                   AND LEAST(?, created_at + ?) > expires_at"
            ),
            // (hold id, now, any, owner, wanted, max life): a renewable hold the renewal would
            // not move (already at its maximum life): applied, unchanged.
            renew_unmoved: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE id = ? AND status = 'held' AND expires_at > ? AND (? OR owner <=> ?) \
                   AND LEAST(?, created_at + ?) <= expires_at"
            ),
            // (now, now, now): selling slots in (starts_at, id) order, each with its stored
            // units and its held holds expired by now (a slot with every unit free is not
            // probed); none while anyone waits in its line or in the line of one of its pools
            // (the entries of the pools' selling slots).
            availability: format!(
                "SELECT s.id, s.starts_at, s.ends_at, s.capacity, s.resource, \
                        CAST(CASE WHEN s.waiting > 0 OR EXISTS ( \
                             SELECT 1 FROM {pool_slots} ps \
                             JOIN {pool_slots} ps2 ON ps2.pool_id = ps.pool_id \
                             JOIN {holds} e ON e.slot_id = ps2.slot_id AND e.status = 'waiting' \
                             JOIN {slots} s2 ON s2.id = ps2.slot_id \
                             WHERE ps.slot_id = s.id AND s2.starts_at > ? AND NOT s2.closed \
                               AND s2.removed_at IS NULL) THEN 0 \
                        ELSE s.remaining + CASE WHEN s.remaining = s.capacity THEN 0 ELSE \
                            (SELECT COALESCE(SUM(h.quantity), 0) FROM {holds} h \
                             WHERE h.slot_id = s.id AND h.status = 'held' \
                               AND h.expires_at <= ?) END END AS SIGNED) AS available \
                 FROM {slots} s \
                 WHERE s.starts_at > ? AND NOT s.closed AND s.removed_at IS NULL \
                 ORDER BY s.starts_at, s.id"
            ),
            // (owner or slot id, after id, limit): keyset pages of `holds_by_owner` and of
            // the slot's holds.
            owner_holds: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE owner = ? AND id > ? AND status <> 'waiting' ORDER BY id LIMIT ?"
            ),
            slot_holds: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE slot_id = ? AND id > ? AND status <> 'waiting' ORDER BY id LIMIT ?"
            ),
            // (the capacity change's binds, see `bind_capacity`, around the slot id): the new
            // capacity is `keep * capacity + add`, in range, `remaining` moves by the
            // difference, taking free units only, and a compare-and-set needs the capacity it
            // expected. MySQL assigns left to right, so `remaining` is set while `capacity`
            // still holds the old value; integer arithmetic is 64-bit.
            change_capacity: write_statement!(
                "UPDATE {slots} SET remaining = remaining + ({NEW} - capacity), capacity = {NEW} \
                 WHERE id = ? AND removed_at IS NULL AND (? IS NULL OR capacity = ?) \
                   AND {NEW} <> capacity AND {NEW} BETWEEN 1 AND 2147483647 \
                   AND remaining + ({NEW} - capacity) >= 0",
                NEW = CAPACITY_AFTER
            ),
            // (closed, slot id, closed)
            set_closed: write_statement!(
                "UPDATE {slots} SET closed = ? WHERE id = ? AND removed_at IS NULL AND closed <> ?"
            ),
            // (now, slot id): no unit held or confirmed is the row's own `remaining = capacity`.
            remove_slot: write_statement!(
                "UPDATE {slots} SET removed_at = ? \
                 WHERE id = ? AND removed_at IS NULL AND remaining = capacity"
            ),
            // (now, now, slot id)
            slot_usage: format!("SELECT {usage_columns} FROM {slots} s WHERE s.id = ?"),
            slots_page: format!("SELECT {usage_columns} FROM {slots} s WHERE {page_tail}"),
            resource_slots_page: format!(
                "SELECT {usage_columns} FROM {slots} s WHERE s.resource = ? AND {page_tail}"
            ),
            // (kind, slot id, hold id, owner, quantity, at): appended unplaced.
            append_event: write_statement!(
                "INSERT INTO {events} (kind, slot_id, hold_id, owner, quantity, occurred_at) \
                 VALUES (?, ?, ?, ?, ?, ?)"
            ),
            lock_event_log: format!("SELECT placed FROM {log} WHERE one = 1 FOR UPDATE"),
            // (limit): committed events not yet placed, oldest first; an event whose
            // transaction is still open is locked by it and skipped, never waited for.
            unplaced: format!(
                "SELECT seq FROM {events} WHERE position IS NULL ORDER BY seq LIMIT ? \
                 FOR UPDATE SKIP LOCKED"
            ),
            any_unplaced: format!("SELECT seq FROM {events} WHERE position IS NULL LIMIT 1"),
            // (placed)
            move_event_log: write_statement!("UPDATE {log} SET placed = ? WHERE one = 1"),
            // (consumer, limit)
            // Each with its hold's booking (NULL for a hold placed alone).
            read_events: format!(
                "SELECT {EVENT_COLUMNS}, {booking_of} FROM {events} \
                 WHERE position > COALESCE( \
                     (SELECT acknowledged FROM {consumers} WHERE name = ?), 0) \
                 ORDER BY position LIMIT ?"
            ),
            // (position, limit)
            read_events_after: format!(
                "SELECT {EVENT_COLUMNS}, {booking_of} FROM {events} \
                 WHERE position > ? ORDER BY position LIMIT ?"
            ),
            event_log_end: format!("SELECT placed FROM {log} WHERE one = 1"),
            // (consumer, position): registers a consumer; never moves a cursor back.
            acknowledge: write_statement!(
                "INSERT INTO {consumers} (name, acknowledged) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE acknowledged = GREATEST(acknowledged, VALUES(acknowledged))"
            ),
            // (position, consumer, holder): moves the cursor only while the holder holds the
            // lease.
            acknowledge_leased: write_statement!(
                "UPDATE {consumers} SET acknowledged = GREATEST(acknowledged, ?) \
                 WHERE name = ? AND holder = ?"
            ),
            consumer_position: format!("SELECT acknowledged FROM {consumers} WHERE name = ?"),
            // (holder, until, consumer, holder, now): takes a free or lapsed lease, or extends
            // the holder's own.
            extend_lease: write_statement!(
                "UPDATE {consumers} SET holder = ?, lease_until = ? \
                 WHERE name = ? AND (holder IS NULL OR holder = ? OR lease_until <= ?)"
            ),
            // (consumer, holder, until): a consumer never seen, registered at the start with
            // the lease; nothing when it exists (another holder has it).
            register_leased: write_statement!(
                "INSERT IGNORE INTO {consumers} (name, acknowledged, holder, lease_until) \
                 VALUES (?, 0, ?, ?)"
            ),
            // (consumer, holder)
            release_consumer: write_statement!(
                "UPDATE {consumers} SET holder = NULL, lease_until = NULL \
                 WHERE name = ? AND holder = ?"
            ),
            // (now, limit): the sweeper's candidates, the earliest expiry first, through
            // `holds_by_status_expiry`; locked and checked again once their slots are locked.
            expired_candidates: format!(
                "SELECT id, slot_id FROM {holds} WHERE status = 'held' AND expires_at <= ? \
                 ORDER BY expires_at LIMIT ?"
            ),
            // (before, before, limit), after `purge_events`: cancelled and expired holds that
            // ended before the cut-off, but not a line of a booking that an event still kept
            // names (a consumer reading it late finds the line's booking; `events_by_hold`,
            // migration 6); the idempotency key goes with the row.
            purge_holds: write_statement!(
                "DELETE FROM {holds} \
                 WHERE ((status = 'cancelled' AND cancelled_at < ?) \
                        OR (status = 'expired' AND expires_at < ?)) \
                   AND (booking_id IS NULL \
                        OR NOT EXISTS (SELECT 1 FROM {events} e WHERE e.hold_id = {holds}.id)) \
                 LIMIT ?"
            ),
            // (before, limit): placed events older than the cut-off that every consumer has
            // acknowledged (every one, with no consumer), the oldest first.
            purge_events: write_statement!(
                "DELETE FROM {events} WHERE occurred_at < ? AND position IS NOT NULL \
                   AND position <= (SELECT COALESCE(MIN(acknowledged), 9223372036854775807) \
                                    FROM {consumers}) \
                 ORDER BY position LIMIT ?"
            ),
            // (slot id, key, expires_at, now, quantity, owner, booking id): a hold, or a line of
            // a booking (no booking id for a hold and a first line); the key's unique
            // constraint refuses a second row with it.
            insert_line: write_statement!(
                "INSERT INTO {holds} (slot_id, idempotency_key, status, expires_at, created_at, \
                     quantity, owner, booking_id) \
                 VALUES (?, ?, 'held', ?, ?, ?, ?, ?)"
            ),
            // (booking id, booking id): the first line, inserted before its id was known.
            mark_booking: write_statement!(
                "UPDATE {holds} SET booking_id = ? WHERE id = ? AND booking_id IS NULL"
            ),
            // (booking id, booking id, any, owner): a plain hold, or every line of the booking
            // whose first line has this id; the id of a later line is no booking's.
            booking_lines: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE ((id = ? AND booking_id IS NULL) OR booking_id = ?) AND (? OR owner <=> ?) \
                   AND status <> 'waiting' \
                 ORDER BY slot_id, id"
            ),
            // (key): the id of the booking (or plain hold) whose first line has the key.
            booking_by_key: format!(
                "SELECT COALESCE(booking_id, id) FROM {holds} WHERE idempotency_key = ?"
            ),
            // (booking id): the slots of a booking's lines, which never change.
            booking_slots: format!(
                "SELECT slot_id FROM {holds} WHERE booking_id = ? ORDER BY slot_id"
            ),
            // (booking id): a booking's lines locked, once their slots are.
            lock_booking_lines: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} WHERE booking_id = ? ORDER BY id FOR UPDATE"
            ),
            // (now, booking id, now, any, owner): `confirm` and `cancel` of every line.
            confirm_booking: write_statement!(
                "UPDATE {holds} SET status = 'confirmed', confirmed_at = ? \
                 WHERE booking_id = ? AND status = 'held' AND expires_at > ? \
                   AND (? OR owner <=> ?)"
            ),
            cancel_booking: write_statement!(
                "UPDATE {holds} SET status = 'cancelled', cancelled_at = ? \
                 WHERE booking_id = ? \
                   AND (status = 'confirmed' OR (status = 'held' AND expires_at > ?)) \
                   AND (? OR owner <=> ?)"
            ),
            // `renew` and `renew_unmoved` of every line (the booking id for the hold id).
            renew_booking: write_statement!(
                "UPDATE {holds} SET expires_at = LEAST(?, created_at + ?) \
                 WHERE booking_id = ? AND status = 'held' AND expires_at > ? \
                   AND (? OR owner <=> ?) AND LEAST(?, created_at + ?) > expires_at"
            ),
            renew_booking_unmoved: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE booking_id = ? AND status = 'held' AND expires_at > ? \
                   AND (? OR owner <=> ?) AND LEAST(?, created_at + ?) <= expires_at"
            ),
            // (now, now, slot id): a refused line's slot, with the units a hold could take
            // from it (its `remaining` and its held holds expired by now; none while anyone
            // waits in its line or a line of its pools).
            line_state: format!(
                "SELECT s.starts_at, s.capacity, s.closed, s.removed_at, \
                        CAST(CASE WHEN s.waiting > 0 OR EXISTS ( \
                             SELECT 1 FROM {pool_slots} ps \
                             JOIN {pool_slots} ps2 ON ps2.pool_id = ps.pool_id \
                             JOIN {holds} e ON e.slot_id = ps2.slot_id AND e.status = 'waiting' \
                             JOIN {slots} s2 ON s2.id = ps2.slot_id \
                             WHERE ps.slot_id = s.id AND s2.starts_at > ? AND NOT s2.closed \
                               AND s2.removed_at IS NULL) THEN 0 \
                        ELSE s.remaining + (SELECT COALESCE(SUM(h.quantity), 0) FROM {holds} h \
                             WHERE h.slot_id = s.id AND h.status = 'held' \
                               AND h.expires_at <= ?) END AS SIGNED) AS free \
                 FROM {slots} s WHERE s.id = ?"
            ),
            pools: PoolStatements::new(&slots, &holds, &pools, &pool_slots),
            waitlists: WaitlistStatements::new(&slots, &holds, &pools, &pool_slots),
            slots,
            holds,
            events,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::WRITE_GUARD;

    #[test]
    fn every_statement_names_only_prefixed_tables() {
        let sql = Statements::new(&TablePrefix::new("zz_", None).unwrap());
        for statement in [
            &sql.create_slot,
            &sql.availability,
            &sql.insert_line,
            &sql.take_units,
            &sql.expired_of_slot,
            &sql.cancel,
            &sql.change_capacity,
            &sql.slots_page,
            &sql.read_events,
            &sql.purge_events,
        ] {
            assert!(statement.contains("zz_"), "{statement}");
            for table in [
                " slots",
                " holds",
                " events",
                " event_consumers",
                " event_log",
            ] {
                assert!(!statement.contains(table), "{statement}");
            }
        }
    }

    /// Every write statement carries its own guard: none starts with a bare `INSERT`,
    /// `UPDATE` or `DELETE`, so none can commit on its own outside a step's transaction, and
    /// none needs a session setting that a cut call would leave behind.
    #[test]
    fn every_write_statement_is_guarded() {
        let statements = format!("{:?}", Statements::new(&TablePrefix::default()));
        for bare in [": \"INSERT", ": \"UPDATE", ": \"DELETE", ": \"REPLACE"] {
            assert!(!statements.contains(bare), "an unguarded write: {bare}");
        }
        let guarded = statements.matches(WRITE_GUARD).count();
        assert!(guarded >= 39, "{guarded} guarded writes");
    }
}
