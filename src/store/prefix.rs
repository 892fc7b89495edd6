//! The table prefix of a SQL store that names its tables with one ([`TablePrefix`]): checked
//! once, here, for every such store, so that a name written into a statement's text is always
//! a plain identifier start.

use std::fmt;

use super::error::StoreError;

/// The prefix a SQL store gives its tables unless told otherwise: `slot_booking_slots`,
/// `slot_booking_holds`, `slot_booking_migrations`.
pub const DEFAULT_TABLE_PREFIX: &str = "slot_booking_";

/// A table prefix that is not a plain identifier start.
///
/// Accepted: 1 to 32 characters, lowercase ASCII letters, digits and `_`, starting with a
/// letter, and not starting with the prefix the database reserves for itself, if any
/// (`sqlite_` for SQLite).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTablePrefix {
    /// The prefix refused.
    pub prefix: String,
    /// The prefix the database reserves, if it has one.
    pub reserved: Option<&'static str>,
}

impl fmt::Display for InvalidTablePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid table prefix {:?}: use 1-32 of [a-z0-9_], starting with a letter",
            self.prefix
        )?;
        match self.reserved {
            Some(reserved) => write!(f, ", not {reserved}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for InvalidTablePrefix {}

/// A bad name is a permanent failure of the store's set-up, never "unavailable".
impl From<InvalidTablePrefix> for StoreError {
    fn from(error: InvalidTablePrefix) -> Self {
        StoreError::failed(error)
    }
}

/// A checked table prefix: every name the store creates starts with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablePrefix(String);

impl TablePrefix {
    /// `prefix`, if it is a plain identifier start that does not start with `reserved`.
    pub fn new(prefix: &str, reserved: Option<&'static str>) -> Result<Self, InvalidTablePrefix> {
        let bytes = prefix.as_bytes();
        let valid = (1..=32).contains(&bytes.len())
            && bytes[0].is_ascii_lowercase()
            && !reserved.is_some_and(|reserved| prefix.starts_with(reserved))
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
        match valid {
            true => Ok(TablePrefix(prefix.to_owned())),
            false => Err(InvalidTablePrefix {
                prefix: prefix.to_owned(),
                reserved,
            }),
        }
    }

    /// The prefix itself.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `sql` with every `{p}` replaced by the prefix (migrations are written that way).
    pub fn apply(&self, sql: &str) -> String {
        sql.replace("{p}", &self.0)
    }
}

/// [`DEFAULT_TABLE_PREFIX`].
impl Default for TablePrefix {
    fn default() -> Self {
        TablePrefix(DEFAULT_TABLE_PREFIX.to_owned())
    }
}

impl fmt::Display for TablePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_plain_identifier_starts() {
        let sqlite = Some("sqlite_");
        for good in [
            "slot_booking_",
            "b",
            "booking2_",
            "a_b_c",
            DEFAULT_TABLE_PREFIX,
        ] {
            assert!(TablePrefix::new(good, None).is_ok(), "{good}");
            assert!(TablePrefix::new(good, sqlite).is_ok(), "{good}");
        }
        let long = "a".repeat(33);
        for bad in [
            "", "_x", "1x", "Booking_", "x y", "x\"", "x`", "x;drop", &long,
        ] {
            let refused = Err(InvalidTablePrefix {
                prefix: bad.to_owned(),
                reserved: None,
            });
            assert_eq!(TablePrefix::new(bad, None), refused, "{bad}");
        }
        assert!(TablePrefix::new("sqlite_x", None).is_ok());
        let reserved = TablePrefix::new("sqlite_x", sqlite).map_err(|e| e.to_string());
        let expected = "invalid table prefix \"sqlite_x\": use 1-32 of [a-z0-9_], starting \
                        with a letter, not sqlite_";
        assert_eq!(reserved, Err(expected.to_owned()));
        assert_eq!(
            TablePrefix::default().apply("{p}holds"),
            "slot_booking_holds"
        );
    }
}
