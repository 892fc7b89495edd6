//! Pieces of SQL text that several statement builders share (`sql.rs`, `pool_sql.rs`,
//! `waitlist_sql.rs`), and the prefix the database reserves for its own tables. It imports
//! none of them.

/// The prefix SQLite reserves for its own tables: no table prefix may start with it
/// ([`TablePrefix::new`](slot_booking::store::TablePrefix::new)).
pub(crate) const RESERVED_PREFIX: Option<&str> = Some("sqlite_");

/// The capacity a change gives a slot's or pool's row, from its terms `?2` keep and `?3` add
/// ([`CapacityChange::terms`](slot_booking::CapacityChange::terms)).
pub(crate) const CAPACITY_AFTER: &str = "(?2 * capacity + ?3)";

/// The columns [`hold_from_row`](crate::hold_from_row) reads.
pub(crate) const HOLD_COLUMNS: &str =
    "id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity, owner, created_at";

/// The id of a new hold (or waitlist entry): one more than the highest of the holds' ids and
/// of every waitlist entry's id ever drawn (`waitlist_ids`, migration 10), so that no hold
/// takes the number of an entry, whose offer is the hold of that number. Each term is one
/// lookup: the last rowid of the holds, the one row of `waitlist_ids`.
pub(crate) fn next_hold_id(prefix: &str) -> String {
    format!(
        "max(coalesce((SELECT max(id) FROM {prefix}holds), 0), \
             coalesce((SELECT last_id FROM {prefix}waitlist_ids WHERE one = 1), 0)) + 1"
    )
}
