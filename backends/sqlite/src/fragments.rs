//! Pieces of SQL text that several statement builders share (`sql.rs`, `pool_sql.rs`,
//! `waitlist_sql.rs`), and the table prefix every name starts with. It imports none of them.

use std::fmt;

/// The prefix [`SqliteStore::new`](crate::SqliteStore::new) and
/// [`SqliteStore::connect`](crate::SqliteStore::connect) give their tables:
/// `slot_booking_slots`, `slot_booking_holds`, `slot_booking_migrations`.
pub const DEFAULT_TABLE_PREFIX: &str = "slot_booking_";

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

/// A table prefix that is not a plain identifier start.
///
/// Accepted: 1 to 32 characters, lowercase ASCII letters, digits and `_`, starting with a
/// letter, and not starting with `sqlite_` (reserved by SQLite).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid table prefix {0:?}: use 1-32 of [a-z0-9_], starting with a letter, not sqlite_")]
pub struct InvalidTablePrefix(pub String);

/// A validated table prefix: every name this store creates starts with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TablePrefix(String);

impl TablePrefix {
    pub(crate) fn new(prefix: &str) -> Result<Self, InvalidTablePrefix> {
        let bytes = prefix.as_bytes();
        let valid = (1..=32).contains(&bytes.len())
            && bytes[0].is_ascii_lowercase()
            && !prefix.starts_with("sqlite_")
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
        if valid {
            Ok(TablePrefix(prefix.to_owned()))
        } else {
            Err(InvalidTablePrefix(prefix.to_owned()))
        }
    }

    pub(crate) fn default_prefix() -> Self {
        TablePrefix(DEFAULT_TABLE_PREFIX.to_owned())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// `sql` with every `{p}` replaced by the prefix (the migrations are written that way).
    pub(crate) fn apply(&self, sql: &str) -> String {
        sql.replace("{p}", &self.0)
    }
}

impl fmt::Display for TablePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A bad name is a permanent failure of the store's set-up, never "unavailable".
impl From<InvalidTablePrefix> for slot_booking::StoreError {
    fn from(error: InvalidTablePrefix) -> Self {
        slot_booking::StoreError::failed(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_plain_identifier_starts() {
        for good in ["slot_booking_", "b", "booking2_", "a_b_c"] {
            assert!(TablePrefix::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "_x",
            "1x",
            "Booking_",
            "sqlite_x",
            "x y",
            "x\"",
            "x;drop",
            &"a".repeat(33),
        ] {
            assert_eq!(
                TablePrefix::new(bad),
                Err(InvalidTablePrefix(bad.to_owned())),
                "{bad}"
            );
        }
    }
}
