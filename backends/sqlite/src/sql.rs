//! Table names and the SQL text of every statement, built once per store from its table prefix.
//!
//! Timestamps are microseconds since the Unix epoch. Parameters of the hold statements: `?1`
//! slot id, `?2` idempotency key, `?3` now, `?4` expires_at, `?5` quantity, `?6` owner. A
//! caller's [`Scope`](slot_booking::Scope) is the predicate `(?any OR owner IS ?owner)`:
//! `IS` compares NULLs as equal, so an anonymous scope (`any` false, `owner` NULL) admits
//! only holds without an owner.

use std::sync::OnceLock;

use crate::fragments::{next_hold_id, CAPACITY_AFTER, HOLD_COLUMNS};
use crate::pool_sql::PoolStatements;
use crate::waitlist_sql::WaitlistStatements;
use slot_booking::store::TablePrefix;

/// Most holds' `INSERT`s [`Statements::insert_holds`] puts in one text. Each text is one entry
/// of a connection's statement cache (sqlx keeps 100 by default), so they are few.
pub(crate) const MAX_INSERTS_AT_ONCE: usize = 32;

/// The columns [`slot_from_row`](crate::slot_from_row) reads.
const SLOT_COLUMNS: &str =
    "id, starts_at, ends_at, capacity, remaining, resource, closed, removed_at";

/// The columns [`event_from_row`](crate::event_from_row) reads.
const EVENT_COLUMNS: &str = "id, kind, slot_id, hold_id, owner, quantity, occurred_at";

/// [`SLOT_COLUMNS`] of the slots table aliased `s`.
const S_SLOT_COLUMNS: &str =
    "s.id, s.starts_at, s.ends_at, s.capacity, s.remaining, s.resource, s.closed, s.removed_at";

/// The scope of confirm and cancel: `?3` any, `?4` owner.
const SCOPE_3_4: &str = "(?3 OR owner IS ?4)";

const CONFIRM_SET: &str = "status = 'confirmed', confirmed_at = ?1";
const CANCEL_SET: &str = "status = 'cancelled', cancelled_at = ?1";
const RENEW_SET: &str = "expires_at = min(?1 + ?3, created_at + ?4)";

/// The ids of the lines of the booking whose id is `booking` (an SQL expression): the hold
/// itself when it is a plain hold (`booking_id` NULL), else every hold whose `booking_id` it is
/// (through `holds_by_booking`, migration 8). The id of a line that is not the first is no
/// booking's: nothing.
fn lines_of(holds: &str, booking: &str) -> String {
    format!(
        "SELECT id FROM {holds} WHERE id = {booking} AND booking_id IS NULL \
         UNION ALL SELECT id FROM {holds} WHERE booking_id = {booking}"
    )
}

/// Every statement the store runs, with its table names.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) create_slot: String,
    pub(crate) slot_by_id: String,
    pub(crate) hold_by_id: String,
    pub(crate) owner_holds: String,
    pub(crate) slot_holds: String,
    pub(crate) availability: String,
    pub(crate) insert_hold: String,
    pub(crate) reclaim: String,
    pub(crate) give_back: String,
    pub(crate) confirm: String,
    pub(crate) cancel: String,
    pub(crate) renew: String,
    pub(crate) reclaim_expired: String,
    pub(crate) change_capacity: String,
    pub(crate) set_closed: String,
    pub(crate) remove_slot: String,
    pub(crate) slot_usage: String,
    pub(crate) slots_page: String,
    pub(crate) resource_slots_page: String,
    pub(crate) renew_unmoved: String,
    pub(crate) append_event: String,
    pub(crate) read_events: String,
    pub(crate) read_events_after: String,
    pub(crate) event_log_end: String,
    pub(crate) acknowledge: String,
    pub(crate) acknowledge_leased: String,
    pub(crate) consumer_position: String,
    pub(crate) lease_consumer: String,
    pub(crate) release_consumer: String,
    pub(crate) reclaim_expired_every: String,
    pub(crate) purge_holds: String,
    pub(crate) keep_highest_hold_id: String,
    pub(crate) purge_events: String,
    pub(crate) booking_lines: String,
    pub(crate) booking_by_key: String,
    pub(crate) insert_line: String,
    pub(crate) mark_booking: String,
    pub(crate) line_state: String,
    pub(crate) confirm_booking: String,
    pub(crate) cancel_booking: String,
    pub(crate) renew_booking: String,
    pub(crate) renew_booking_unmoved: String,
    /// The pools' statements (`pool_sql.rs`).
    pub(crate) pools: PoolStatements,
    /// The waitlists' statements (`waitlist_sql.rs`).
    pub(crate) waitlists: WaitlistStatements,
    /// The holds table's name, for [`Statements::insert_holds`].
    holds: String,
    /// [`next_hold_id`], for [`Statements::insert_holds`].
    next_id: String,
    /// [`Statements::insert_holds`]'s texts, made on first use: `insert_holds_texts[k - 1]`
    /// holds `k` inserts.
    insert_holds_texts: Vec<OnceLock<String>>,
}

impl Statements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let slots = format!("{prefix}slots");
        let holds = format!("{prefix}holds");
        let events = format!("{prefix}events");
        let consumers = format!("{prefix}event_consumers");
        // A hold event's booking, read from its hold (NULL for a hold placed alone).
        let booking_of =
            format!("(SELECT booking_id FROM {holds} WHERE id = {events}.hold_id) AS booking_id");
        let slot_pools = format!("{prefix}slot_pools");
        let next_id = next_hold_id(prefix.as_str());
        // Whether the line of a pool of the slot `s` is not empty at ?1: a slot of one of its
        // pools that sells has entries waiting (migration 11). A slot of no pool: one look at
        // the empty range of `slot_pools`' primary key.
        let pool_lined = |now: &str| {
            format!(
                "EXISTS (SELECT 1 FROM {slot_pools} m \
                         JOIN {slot_pools} o ON o.pool_id = m.pool_id \
                         JOIN {slots} t ON t.id = o.slot_id \
                         WHERE m.slot_id = s.id AND t.waiting > 0 AND t.starts_at > {now} \
                           AND t.closed = 0 AND t.removed_at IS NULL)"
            )
        };
        // A slot's units still stored as held, split at ?1 (now) into active and expired: two
        // correlated sums, each one range of the partial index `holds_held_by_slot_expiry`
        // (slot_id, expires_at, quantity), which covers them: a `SlotUsage` per row.
        let usage_columns = format!(
            "{S_SLOT_COLUMNS}, \
             (SELECT coalesce(SUM(h.quantity), 0) FROM {holds} h \
              WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at > ?1) AS held, \
             (SELECT coalesce(SUM(h.quantity), 0) FROM {holds} h \
              WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= ?1) AS expired"
        );
        // The operator's keyset page: ?1 now, ?2 from (inclusive), ?3 to (exclusive), ?4 and
        // ?5 the cursor's (starts_at, id), ?6 the limit, ?7 the resource (bound only for the
        // resource's statement). With the row value comparison the page is one range of the
        // index, read in its (starts_at, id) order: no scan, no sort. The test
        // `slot_listings_read_their_index` (lib.rs) holds both plans to it.
        let page_tail = "s.starts_at >= ?2 AND s.starts_at < ?3 \
                         AND (s.starts_at, s.id) > (?4, ?5) \
                         ORDER BY s.starts_at, s.id LIMIT ?6";
        // The lines of the booking the hold ?2 belongs to, and of the booking whose id is ?2.
        let of_hold = lines_of(
            &holds,
            &format!("coalesce((SELECT booking_id FROM {holds} WHERE id = ?2), ?2)"),
        );
        let of_booking = lines_of(&holds, "?2");
        // Each change's rule, for the line `o` of its guard: an active held line (confirm,
        // renew), or that or a confirmed one (cancel).
        let active = "o.status = 'held' AND o.expires_at > ?1".to_owned();
        let cancellable = format!("(o.status = 'confirmed' OR ({active}))");
        let renew_scope = "(?5 OR owner IS ?6) AND min(?1 + ?3, created_at + ?4) > expires_at";
        // The rule is checked by the guard alone, on every line: written on the updated row as
        // well, it would tempt the planner into a range of `holds_held_by_expiry` instead of
        // the lines' rowids.
        let change = |lines: &str, set: &str, rule: &str, scope: &str| {
            format!(
                "UPDATE {holds} SET {set} \
                 WHERE id IN ({lines}) AND {scope} \
                   AND NOT EXISTS (SELECT 1 FROM {holds} o \
                                   WHERE o.id IN ({lines}) AND NOT ({rule})) \
                 RETURNING {HOLD_COLUMNS}"
            )
        };
        Statements {
            create_slot: format!(
                "INSERT INTO {slots} (starts_at, ends_at, capacity, remaining, resource) \
                 VALUES (?1, ?2, ?3, ?3, ?4) RETURNING {SLOT_COLUMNS}"
            ),
            slot_by_id: format!("SELECT {SLOT_COLUMNS} FROM {slots} WHERE id = ?1"),
            hold_by_id: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} WHERE id = ?1 AND (?2 OR owner IS ?3)"
            ),
            // Keyset pages through `holds_by_owner` and `holds_by_slot` (migration 3); the
            // test `pages_read_their_index` (lib.rs) holds the plans to one range of each.
            owner_holds: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} WHERE owner = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
            ),
            slot_holds: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} WHERE slot_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
            ),
            // The correlated count walks the partial index over held holds of one slot, for
            // selling slots only (not started, sales open, not removed): abandoned holds on
            // past slots are never read. A slot with every unit free has no held hold to
            // count, and is not looked up. A slot with a waiting line (migration 10), or in a
            // pool whose line is not empty (some selling slot of the pool has one, migration
            // 11), has no unit for anyone else: 0.
            availability: format!(
                "SELECT s.id, s.starts_at, s.ends_at, s.capacity, s.resource, \
                        CASE WHEN s.waiting > 0 OR {} THEN 0 \
                        ELSE s.remaining + CASE WHEN s.remaining = s.capacity THEN 0 ELSE \
                            (SELECT coalesce(SUM(h.quantity), 0) FROM {holds} h \
                             WHERE h.slot_id = s.id AND h.status = 'held' \
                               AND h.expires_at <= ?1) END END AS available \
                 FROM {slots} s \
                 WHERE s.starts_at > ?1 AND s.closed = 0 AND s.removed_at IS NULL \
                 ORDER BY s.starts_at, s.id",
                pool_lined("?1")
            ),
            // The `take_a_unit` trigger (migration 2, last recreated by migration 6) runs the
            // conditional decrement inside this statement and aborts it when that changes no
            // row (settling a sold-out refusal itself when it can). Its id is `next_hold_id`.
            insert_hold: format!(
                "INSERT INTO {holds} \
                     (id, slot_id, idempotency_key, status, expires_at, created_at, quantity, \
                      owner) \
                 VALUES ({next_id}, ?1, ?2, 'held', ?4, ?3, ?5, ?6) RETURNING {HOLD_COLUMNS}"
            ),
            // Only a selling slot (not started, sales open, not removed) is reclaimed, so a
            // hold refused because the slot is not selling changes nothing.
            reclaim: format!(
                "UPDATE {holds} SET status = 'expired' \
                 WHERE slot_id = ?1 AND status = 'held' AND expires_at <= ?2 \
                   AND EXISTS (SELECT 1 FROM {slots} WHERE id = ?1 AND starts_at > ?2 \
                                 AND closed = 0 AND removed_at IS NULL) \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 units, ?2 slot id; returns whether the slot belongs to a pool, whose units
            // go back too (`PoolStatements::give_back`, in the same unit of work), and whether
            // anyone waits in its line, which the write then serves (`waitlists.rs`).
            give_back: format!(
                "UPDATE {slots} SET remaining = remaining + ?1 WHERE id = ?2 \
                 RETURNING EXISTS (SELECT 1 FROM {slot_pools} WHERE slot_id = ?2) AS pooled, \
                           waiting > 0 AS lined"
            ),
            // Confirm, cancel and renew act on every line of the booking the hold ?2 belongs
            // to (a plain hold is a booking of one line), in one statement, and only when the
            // rule applies to every line: the guard finds no line it does not apply to. The
            // rows returned are the lines changed, all of them or none.
            confirm: change(&of_hold, CONFIRM_SET, &active, SCOPE_3_4),
            cancel: change(&of_hold, CANCEL_SET, &cancellable, SCOPE_3_4),
            // ?1 now, ?2 hold id, ?3 lifetime, ?4 maximum life (microseconds): the new expiry
            // is now + lifetime, capped at created_at + maximum life, never earlier than it was.
            // The rows change only when that moves their expiry (every line of a booking has
            // the same `created_at` and `expires_at`), so a returned row is a renewal that
            // happened (and appends `hold_renewed`); `renew_unmoved` then tells a renewal
            // with nothing to move (already at its maximum life) from a refusal.
            renew: change(&of_hold, RENEW_SET, &active, renew_scope),
            // Read after `renew` changed no row, in the same unit of work, with the same
            // parameters: the hold if it is renewable (active, held, in scope) and the renewal
            // would not move it. Such a renewal is applied, unchanged, and appends nothing.
            renew_unmoved: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE id = ?2 AND status = 'held' AND expires_at > ?1 \
                   AND (?5 OR owner IS ?6) AND min(?1 + ?3, created_at + ?4) <= expires_at"
            ),
            // The same four for a booking by its id ?2 (its first line's hold id): the id of
            // a line that is not the first names no booking and changes nothing.
            confirm_booking: change(&of_booking, CONFIRM_SET, &active, SCOPE_3_4),
            cancel_booking: change(&of_booking, CANCEL_SET, &cancellable, SCOPE_3_4),
            renew_booking: change(&of_booking, RENEW_SET, &active, renew_scope),
            renew_booking_unmoved: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE id IN ({of_booking}) AND (?5 OR owner IS ?6) \
                   AND min(?1 + ?3, created_at + ?4) <= expires_at \
                   AND NOT EXISTS (SELECT 1 FROM {holds} o \
                                   WHERE o.id IN ({of_booking}) AND NOT ({active}))"
            ),
            // ?1 booking id, ?2 and ?3 the scope: every line of the booking, through
            // `holds_by_booking` (migration 8); a plain hold is a booking of one line.
            booking_lines: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} \
                 WHERE id IN ({}) AND (?2 OR owner IS ?3)",
                lines_of(&holds, "?1")
            ),
            // ?1 key: every line of the booking (or the hold) whose first line has the key.
            booking_by_key: format!(
                "SELECT {HOLD_COLUMNS} FROM {holds} WHERE id IN ({})",
                lines_of(
                    &holds,
                    &format!("(SELECT id FROM {holds} WHERE idempotency_key = ?1)")
                )
            ),
            // A line of a booking: `insert_hold` with ?7, the booking's id (NULL for the first
            // line, which `mark_booking` sets once every line is in). The `take_a_unit`
            // trigger is the line's conditional decrement.
            insert_line: format!(
                "INSERT INTO {holds} \
                     (id, slot_id, idempotency_key, status, expires_at, created_at, quantity, \
                      owner, booking_id) \
                 VALUES ({next_id}, ?1, ?2, 'held', ?4, ?3, ?5, ?6, ?7) RETURNING {HOLD_COLUMNS}"
            ),
            mark_booking: format!("UPDATE {holds} SET booking_id = id WHERE id = ?1"),
            // ?1 slot id, ?2 now: a refused line's slot, and the units a hold could take of it
            // (its `remaining` and its held holds expired by ?2; none while anyone waits in its
            // line or in the line of one of its pools).
            line_state: format!(
                "SELECT s.starts_at, s.capacity, s.closed, s.removed_at, \
                        CASE WHEN s.waiting > 0 OR {} THEN 0 \
                        ELSE s.remaining + (SELECT coalesce(SUM(h.quantity), 0) FROM {holds} h \
                                            WHERE h.slot_id = s.id AND h.status = 'held' \
                                              AND h.expires_at <= ?2) END AS free \
                 FROM {slots} s WHERE s.id = ?1",
                pool_lined("?2")
            ),
            // The administrative writes' reclaim: on any slot, started or not (a capacity
            // change or a removal applies to both). Run under a savepoint that is rolled back
            // when the change still does not fit, so a refused change reclaims nothing.
            reclaim_expired: format!(
                "UPDATE {holds} SET status = 'expired' \
                 WHERE slot_id = ?1 AND status = 'held' AND expires_at <= ?2 \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 slot id, then a capacity change's terms (`CapacityChange::terms`): ?2 keep,
            // ?3 add, ?4 expected. The new capacity is `?2 * capacity + ?3`, in range, and
            // `remaining` moves by the difference, taking only free units: the row is changed
            // only if the new `remaining` is not negative and, for a compare-and-set, the
            // capacity is the one expected. SET reads the row as it was, and SQLite integers
            // are 64-bit, so nothing overflows between two i32 capacities.
            // Leaving the capacity as it is changes no row (and appends no event): the writer
            // then reads the slot to tell that from a refusal.
            change_capacity: format!(
                "UPDATE {slots} SET capacity = {CAPACITY_AFTER}, \
                     remaining = remaining + ({CAPACITY_AFTER} - capacity) \
                 WHERE id = ?1 AND removed_at IS NULL AND (?4 IS NULL OR capacity = ?4) \
                   AND {CAPACITY_AFTER} <> capacity \
                   AND {CAPACITY_AFTER} BETWEEN 1 AND 2147483647 \
                   AND remaining + ({CAPACITY_AFTER} - capacity) >= 0 \
                 RETURNING {SLOT_COLUMNS}"
            ),
            // ?1 slot id, ?2 closed (0 or 1). Setting what already is changes no row (and
            // appends no event); the writer then reads the slot and counts it as applied.
            set_closed: format!(
                "UPDATE {slots} SET closed = ?2 \
                 WHERE id = ?1 AND removed_at IS NULL AND closed <> ?2 \
                 RETURNING {SLOT_COLUMNS}"
            ),
            // ?1 slot id, ?2 now. No unit held or confirmed is the row's own
            // `remaining = capacity` (the invariant), so no hold is counted.
            remove_slot: format!(
                "UPDATE {slots} SET removed_at = ?2 \
                 WHERE id = ?1 AND removed_at IS NULL AND remaining = capacity \
                 RETURNING {SLOT_COLUMNS}"
            ),
            // ?1 now, ?2 slot id: the slot and its units, to say why a change was refused.
            slot_usage: format!("SELECT {usage_columns} FROM {slots} s WHERE s.id = ?2"),
            // Through `slots_starts_at_id` (migration 1).
            slots_page: format!("SELECT {usage_columns} FROM {slots} s WHERE {page_tail}"),
            // Through `slots_by_resource` (migration 4): equality on its first column, then
            // the same range and order as `slots_page`.
            resource_slots_page: format!(
                "SELECT {usage_columns} FROM {slots} s WHERE s.resource = ?7 AND {page_tail}"
            ),
            // ?1 kind, ?2 slot id, ?3 hold id, ?4 owner, ?5 quantity, ?6 when (µs). Every write
            // but a hold's insert (whose event the `holds_placed_event` trigger of migration 5
            // appends in the same statement) runs this in its own unit of work, after the
            // statement whose returned row says the change happened.
            append_event: format!(
                "INSERT INTO {events} (kind, slot_id, hold_id, owner, quantity, occurred_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
            ),
            // ?1 consumer, ?2 limit: the events after its cursor (0, before every id, for a
            // consumer never seen), one range of the primary key, in one snapshot.
            // Each with its hold's booking (`booking_of`).
            read_events: format!(
                "SELECT {EVENT_COLUMNS}, {booking_of} FROM {events} \
                 WHERE id > coalesce((SELECT acknowledged FROM {consumers} WHERE name = ?1), 0) \
                 ORDER BY id LIMIT ?2"
            ),
            // ?1 event id, ?2 limit: the events after that id, one range of the primary key.
            read_events_after: format!(
                "SELECT {EVENT_COLUMNS}, {booking_of} FROM {events} \
                 WHERE id > ?1 ORDER BY id LIMIT ?2"
            ),
            // The largest id ever handed out (AUTOINCREMENT's counter, kept through purges; no
            // row before the first event), or of the events kept if larger (never, but it
            // costs one probe of the primary key's last page).
            event_log_end: format!(
                "SELECT max(coalesce((SELECT max(id) FROM {events}), 0), \
                            coalesce((SELECT seq FROM sqlite_sequence \
                                      WHERE name = '{events}'), 0)) AS id"
            ),
            // ?1 consumer, ?2 event id. Registers a new consumer; never moves a cursor back.
            acknowledge: format!(
                "INSERT INTO {consumers} (name, acknowledged) VALUES (?1, ?2) \
                 ON CONFLICT (name) DO UPDATE \
                 SET acknowledged = max(acknowledged, excluded.acknowledged)"
            ),
            // ?1 consumer, ?2 event id, ?3 holder: moves the cursor (never back) only while ?3
            // holds the consumer's lease; one row changed then, none otherwise.
            acknowledge_leased: format!(
                "UPDATE {consumers} SET acknowledged = max(acknowledged, ?2) \
                 WHERE name = ?1 AND holder = ?3"
            ),
            consumer_position: format!("SELECT acknowledged FROM {consumers} WHERE name = ?1"),
            // ?1 consumer, ?2 holder, ?3 now, ?4 the lease's end (µs). Registers a consumer
            // never seen (at the start) with the lease; takes it when free or lapsed, extends it
            // for its holder. A row is returned when ?2 holds the lease afterwards.
            lease_consumer: format!(
                "INSERT INTO {consumers} (name, acknowledged, holder, lease_until) \
                 VALUES (?1, 0, ?2, ?4) \
                 ON CONFLICT (name) DO UPDATE \
                 SET holder = excluded.holder, lease_until = excluded.lease_until \
                 WHERE holder IS NULL OR holder = excluded.holder OR lease_until <= ?3 \
                 RETURNING name"
            ),
            // ?1 consumer, ?2 holder.
            release_consumer: format!(
                "UPDATE {consumers} SET holder = NULL, lease_until = NULL \
                 WHERE name = ?1 AND holder = ?2"
            ),
            // ?1 now, ?2 limit: the reclaimer's reclaim, up to ?2 held holds that expired by ?1 on
            // any slot, the earliest first, through `holds_held_by_expiry` (migration 5). A hold
            // another reclaimer or a lazy reclaim took first is no longer 'held' and is not
            // returned: each expired hold is reported once.
            reclaim_expired_every: format!(
                "UPDATE {holds} SET status = 'expired' \
                 WHERE id IN (SELECT id FROM {holds} WHERE status = 'held' AND expires_at <= ?1 \
                              ORDER BY expires_at LIMIT ?2) \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 before, ?2 limit: up to ?2 holds that ended before ?1, cancelled or expired
            // (reclaimed), through `holds_ended` (migration 5), whose expression this repeats.
            // Never confirmed or held ones. The idempotency key goes with the row.
            // (run after `purge_events`) A line of a booking an event still kept names stays: a
            // consumer reading it late finds the line's booking (`events_by_hold`, migration 12).
            purge_holds: format!(
                "DELETE FROM {holds} WHERE id IN ( \
                     SELECT id FROM {holds} h WHERE status IN ('cancelled', 'expired') \
                       AND (CASE WHEN status = 'cancelled' THEN cancelled_at ELSE expires_at END) \
                           < ?1 \
                       AND (h.booking_id IS NULL \
                            OR NOT EXISTS (SELECT 1 FROM {events} e WHERE e.hold_id = h.id)) \
                     LIMIT ?2)"
            ),
            // Before a purge: the highest hold id ever drawn is kept in `waitlist_ids` (where
            // entries' ids are kept for the same reason), since `next_hold_id` reads the holds'
            // highest id, which a purge of the newest holds would lower.
            keep_highest_hold_id: format!(
                "UPDATE {prefix}waitlist_ids \
                 SET last_id = max(last_id, coalesce((SELECT max(id) FROM {holds}), 0)) \
                 WHERE one = 1"
            ),
            // ?1 before, ?2 limit: up to ?2 events older than ?1 that every consumer has
            // acknowledged (with no consumer, every one), the oldest first.
            purge_events: format!(
                "DELETE FROM {events} WHERE id IN ( \
                     SELECT id FROM {events} WHERE occurred_at < ?1 \
                       AND id <= (SELECT coalesce(min(acknowledged), 9223372036854775807) \
                                  FROM {consumers}) \
                     ORDER BY id LIMIT ?2)"
            ),
            pools: PoolStatements::new(prefix),
            waitlists: WaitlistStatements::new(prefix),
            holds,
            next_id,
            insert_holds_texts: (0..MAX_INSERTS_AT_ONCE).map(|_| OnceLock::new()).collect(),
        }
    }

    /// `k` holds' `INSERT`s (as `insert_hold`) in one text, run in order by one call. Their
    /// parameters are anonymous (`?`), six per statement, bound in the order they appear:
    /// slot id, key, expiry, now, quantity, owner. Numbered parameters would not do: sqlx
    /// counts every unused number below a statement's highest as one of its arguments, and
    /// stops binding once that count passes the arguments given. `None` beyond
    /// [`MAX_INSERTS_AT_ONCE`].
    pub(crate) fn insert_holds(&self, k: usize) -> Option<&str> {
        let text = self.insert_holds_texts.get(k.checked_sub(1)?)?;
        Some(text.get_or_init(|| {
            let (holds, next_id) = (&self.holds, &self.next_id);
            let one = format!(
                "INSERT INTO {holds} \
                     (id, slot_id, idempotency_key, status, expires_at, created_at, quantity, \
                      owner) \
                 VALUES ({next_id}, ?, ?, 'held', ?, ?, ?, ?) RETURNING {HOLD_COLUMNS};"
            );
            vec![one; k].join("\n")
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_names_only_prefixed_tables() {
        let sql = Statements::new(&TablePrefix::new("zz_", None).unwrap());
        for statement in [
            &sql.create_slot,
            &sql.availability,
            &sql.insert_hold,
            &sql.reclaim,
            &sql.cancel,
            &sql.reclaim_expired,
            &sql.change_capacity,
            &sql.set_closed,
            &sql.remove_slot,
            &sql.slot_usage,
            &sql.slots_page,
            &sql.resource_slots_page,
            &sql.renew,
            &sql.renew_unmoved,
            &sql.append_event,
            &sql.read_events,
            &sql.read_events_after,
            &sql.event_log_end,
            &sql.acknowledge,
            &sql.consumer_position,
            &sql.reclaim_expired_every,
            &sql.purge_holds,
            &sql.purge_events,
            &sql.booking_lines,
            &sql.booking_by_key,
            &sql.insert_line,
            &sql.mark_booking,
            &sql.line_state,
            &sql.confirm,
            &sql.confirm_booking,
            &sql.cancel_booking,
            &sql.renew_booking,
            &sql.renew_booking_unmoved,
            &sql.insert_holds(3).unwrap().to_owned(),
        ] {
            assert!(statement.contains("zz_"), "{statement}");
            assert!(!statement.contains(" slots"), "{statement}");
            assert!(!statement.contains(" holds"), "{statement}");
            assert!(!statement.contains(" events"), "{statement}");
            assert!(!statement.contains(" event_consumers"), "{statement}");
        }
    }

    /// A batch text holds `k` inserts with six anonymous parameters each, and there is none
    /// for an empty batch or beyond the most a call takes.
    #[test]
    fn batch_texts_hold_k_inserts() {
        let sql = Statements::new(&TablePrefix::default());
        for k in [1, 2, MAX_INSERTS_AT_ONCE] {
            let text = sql.insert_holds(k).unwrap();
            assert_eq!(text.matches("INSERT INTO slot_booking_holds").count(), k);
            assert_eq!(text.matches('?').count(), 6 * k);
        }
        assert!(sql.insert_holds(0).is_none());
        assert!(sql.insert_holds(MAX_INSERTS_AT_ONCE + 1).is_none());
    }
}
