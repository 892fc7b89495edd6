//! Instants: [`Timestamp`], truncated to whole microseconds, and their wire format.

use chrono::{DateTime, SubsecRound, Utc};

/// An instant in UTC. Values produced by this crate are truncated to whole microseconds.
pub type Timestamp = DateTime<Utc>;

/// Truncates a timestamp to whole microseconds, the precision every backend keeps.
pub fn truncate_to_micros(t: Timestamp) -> Timestamp {
    t.trunc_subsecs(6)
}

/// Serde helpers for the wire format of timestamps: RFC 3339, six fractional digits, `+00:00`.
pub mod rfc3339 {
    use super::{truncate_to_micros, Timestamp};
    use chrono::DateTime;
    use serde::{Deserialize, Deserializer, Serializer};

    const FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6f+00:00";

    /// Formats a timestamp as `2026-11-21T10:00:00.000000+00:00`.
    pub fn format(t: &Timestamp) -> String {
        t.format(FORMAT).to_string()
    }

    /// Parses any RFC 3339 timestamp, converting it to UTC and truncating it to microseconds.
    pub fn parse(s: &str) -> Result<Timestamp, chrono::ParseError> {
        DateTime::parse_from_rfc3339(s).map(|t| truncate_to_micros(t.to_utc()))
    }

    /// Serializes a timestamp in the wire format.
    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&t.format(FORMAT))
    }

    /// Deserializes any RFC 3339 timestamp.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        parse(&raw).map_err(serde::de::Error::custom)
    }

    /// The same for `Option<Timestamp>`, `null` when absent.
    pub mod option {
        use super::*;

        /// Serializes `Some` in the wire format and `None` as `null`.
        pub fn serialize<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.collect_str(&t.format(FORMAT)),
                None => s.serialize_none(),
            }
        }

        /// Deserializes `null` or an RFC 3339 timestamp.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
            let raw = <Option<std::borrow::Cow<'de, str>>>::deserialize(d)?;
            raw.map(|r| parse(&r).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}
