//! Pieces of SQL text that several statement builders share (`sql.rs`, `waitlist_sql.rs`,
//! `events.rs`), and the prefix the database reserves for its own tables. It imports none of
//! them.

/// MySQL reserves no table prefix
/// ([`TablePrefix::new`](slot_booking::store::TablePrefix::new)).
pub(crate) const RESERVED_PREFIX: Option<&str> = None;

/// The capacity a change gives a slot's or pool's row: `keep * capacity + add`, two
/// parameters ([`CapacityChange::terms`](slot_booking::CapacityChange::terms)).
pub(crate) const CAPACITY_AFTER: &str = "(? * capacity + ?)";

/// The columns [`hold_from_row`](crate::rows::hold_from_row) reads.
pub(crate) const HOLD_COLUMNS: &str =
    "id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity, owner, created_at";

/// `?, ?, …`: `n` placeholders, for a list of ids.
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_counted() {
        assert_eq!(placeholders(1), "?");
        assert_eq!(placeholders(3), "?, ?, ?");
    }
}
