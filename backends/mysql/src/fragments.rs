//! Pieces of SQL text that several statement builders share (`sql.rs`, `waitlist_sql.rs`,
//! `events.rs`), and the table prefix every name starts with. It imports none of them.

use std::fmt;

/// The capacity a change gives a slot's or pool's row: `keep * capacity + add`, two
/// parameters ([`CapacityChange::terms`](slot_booking::CapacityChange::terms)).
pub(crate) const CAPACITY_AFTER: &str = "(? * capacity + ?)";

/// The prefix [`MySqlStore::new`](crate::MySqlStore::new) gives its tables:
/// `slot_booking_slots`, `slot_booking_holds`, `slot_booking_migrations`.
pub const DEFAULT_TABLE_PREFIX: &str = "slot_booking_";

/// The columns [`hold_from_row`](crate::rows::hold_from_row) reads.
pub(crate) const HOLD_COLUMNS: &str =
    "id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity, owner, created_at";

/// A table prefix that is not a plain identifier start.
///
/// Accepted: 1 to 32 characters, lowercase ASCII letters, digits and `_`, starting with a
/// letter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid table prefix {0:?}: use 1-32 of [a-z0-9_], starting with a letter")]
pub struct InvalidTablePrefix(pub String);

/// A bad name is a permanent failure of the store's set-up, never "unavailable".
impl From<InvalidTablePrefix> for slot_booking::StoreError {
    fn from(error: InvalidTablePrefix) -> Self {
        slot_booking::StoreError::failed(error)
    }
}

/// A validated table prefix: every name this store creates starts with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TablePrefix(String);

impl TablePrefix {
    pub(crate) fn new(prefix: &str) -> Result<Self, InvalidTablePrefix> {
        let bytes = prefix.as_bytes();
        let valid = (1..=32).contains(&bytes.len())
            && bytes[0].is_ascii_lowercase()
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

/// `?, ?, …`: `n` placeholders, for a list of ids.
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
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
            "x y",
            "x`",
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

    #[test]
    fn placeholders_are_counted() {
        assert_eq!(placeholders(1), "?");
        assert_eq!(placeholders(3), "?, ?, ?");
    }
}
