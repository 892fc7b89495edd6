//! Domain types: slots, holds, availability and the idempotency key.
//!
//! Every timestamp is a [`Timestamp`] (UTC) truncated to whole microseconds, so that every
//! backend stores and returns exactly the same value. On the wire timestamps are RFC 3339 with
//! six fractional digits and a numeric offset: `2026-11-21T10:00:00.000000+00:00`.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

/// An instant in UTC. Values produced by this crate are truncated to whole microseconds.
pub type Timestamp = DateTime<Utc>;

/// Truncates a timestamp to whole microseconds, the precision every backend keeps.
pub fn truncate_to_micros(t: Timestamp) -> Timestamp {
    t.trunc_subsecs(6)
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// Ids are assigned by the store. Any value may be passed in; one the store never
        /// assigned is simply not found. [`FromStr`] accepts ASCII digits only (no sign, no
        /// spaces), the form ids take in URL paths.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl $name {
            /// The raw integer value.
            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                parse_digits(s).map($name)
            }
        }
    };
}

id_type!(
    /// Identifies a slot.
    SlotId
);
id_type!(
    /// Identifies a hold.
    HoldId
);

/// Why a string is not an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseIdError {
    /// Empty, or a character other than an ASCII digit (signs included).
    #[error("an id is made of ASCII digits only")]
    NotDigits,
    /// All digits, but larger than any id can be.
    #[error("the id is too large")]
    TooLarge,
}

fn parse_digits(s: &str) -> Result<i64, ParseIdError> {
    // `i64::from_str` would accept a leading `+` or `-`; paths must be digits only.
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseIdError::NotDigits);
    }
    s.parse::<i64>().map_err(|_| ParseIdError::TooLarge)
}

/// A slot as stored: a time window with a fixed capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// The slot's id.
    pub slot_id: SlotId,
    /// When the slot begins. Holds can only be placed before this instant.
    #[serde(with = "rfc3339")]
    pub starts_at: Timestamp,
    /// When the slot ends; always after `starts_at`.
    #[serde(with = "rfc3339")]
    pub ends_at: Timestamp,
    /// Total units the slot can sell.
    pub capacity: i32,
    /// Units not taken by a stored hold or booking (expired holds not yet reclaimed count as
    /// taken here; [`AvailabilityEntry::remaining`] counts them as free).
    pub remaining: i32,
    /// What the slot is a time of, if the application said.
    #[serde(default)]
    pub resource: Option<ResourceId>,
    /// Whether sales are closed: no new holds, while existing ones can still be confirmed,
    /// cancelled and renewed. A closed slot is not listed in availability.
    #[serde(default)]
    pub closed: bool,
    /// When the slot was removed (archived): it takes no holds, is not listed in availability
    /// and cannot be changed, but it and its holds' history are kept.
    #[serde(default, with = "rfc3339::option")]
    pub removed_at: Option<Timestamp>,
}

impl Slot {
    /// Whether a hold could be placed on it at `now` if units were free: it has not started,
    /// its sales are open and it has not been removed.
    pub fn is_selling_at(&self, now: Timestamp) -> bool {
        self.starts_at > now && !self.closed && self.removed_at.is_none()
    }
}

/// A slot to create. Checked by [`NewSlot::validate`] before any store sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSlot {
    /// When the slot begins.
    #[serde(with = "rfc3339")]
    pub starts_at: Timestamp,
    /// When the slot ends; must be after `starts_at`.
    #[serde(with = "rfc3339")]
    pub ends_at: Timestamp,
    /// Units to sell, `1..=i32::MAX`.
    pub capacity: i32,
    /// What the slot is a time of (default: nothing in particular).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceId>,
}

impl NewSlot {
    /// A new slot; timestamps are truncated to microseconds. Call [`NewSlot::validate`] (the
    /// engine does) before storing it.
    pub fn new(starts_at: Timestamp, ends_at: Timestamp, capacity: i32) -> Self {
        NewSlot {
            starts_at: truncate_to_micros(starts_at),
            ends_at: truncate_to_micros(ends_at),
            capacity,
            resource: None,
        }
    }

    /// Makes the slot a time of `resource`.
    pub fn resource(mut self, resource: ResourceId) -> Self {
        self.resource = Some(resource);
        self
    }

    /// Checks `ends_at > starts_at` and `capacity >= 1`.
    pub fn validate(&self) -> Result<(), InvalidSlot> {
        if self.capacity < 1 {
            return Err(InvalidSlot::Capacity(i64::from(self.capacity)));
        }
        if self.ends_at <= self.starts_at {
            return Err(InvalidSlot::EndsBeforeStart);
        }
        Ok(())
    }
}

/// Why a [`NewSlot`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSlot {
    /// Capacity outside `1..=i32::MAX`.
    #[error("capacity must be between 1 and 2147483647, got {0}")]
    Capacity(i64),
    /// `ends_at` is not after `starts_at`.
    #[error("ends_at must be after starts_at")]
    EndsBeforeStart,
}

/// One slot in an availability listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvailabilityEntry {
    /// The slot's id.
    pub slot_id: SlotId,
    /// When the slot begins.
    #[serde(with = "rfc3339")]
    pub starts_at: Timestamp,
    /// When the slot ends.
    #[serde(with = "rfc3339")]
    pub ends_at: Timestamp,
    /// Total units of the slot.
    pub capacity: i32,
    /// Units a new hold could take at the time the listing was read: the stored remaining
    /// capacity plus holds that have expired but not yet been reclaimed.
    pub remaining: i32,
    /// The slot's resource; not serialized when it has none, so a listing of slots without
    /// resources keeps exactly the five fields above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceId>,
}

/// Narrows a listing of slots — availability, or the operator's listing as a
/// [`SlotFilter`](crate::SlotFilter) — to slots whose `starts_at` lies in `[from, to)`, and
/// optionally to one resource's slots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvailabilityQuery {
    /// Inclusive lower bound on `starts_at`.
    #[serde(default, with = "rfc3339::option")]
    pub from: Option<Timestamp>,
    /// Exclusive upper bound on `starts_at`.
    #[serde(default, with = "rfc3339::option")]
    pub to: Option<Timestamp>,
    /// Only the slots of this resource.
    #[serde(default)]
    pub resource: Option<ResourceId>,
}

impl AvailabilityQuery {
    /// Every future slot.
    pub fn all() -> Self {
        Self::default()
    }

    /// Slots starting at or after `from`.
    pub fn from(mut self, from: Timestamp) -> Self {
        self.from = Some(from);
        self
    }

    /// Slots starting before `to`.
    pub fn to(mut self, to: Timestamp) -> Self {
        self.to = Some(to);
        self
    }

    /// Only the slots of `resource`.
    pub fn resource(mut self, resource: ResourceId) -> Self {
        self.resource = Some(resource);
        self
    }

    /// Whether `slot` passes the filter (its resource and start; not whether it is selling).
    pub fn admits(&self, slot: &Slot) -> bool {
        self.resource
            .as_ref()
            .is_none_or(|r| slot.resource.as_ref() == Some(r))
            && self.from.is_none_or(|from| slot.starts_at >= from)
            && self.to.is_none_or(|to| slot.starts_at < to)
    }

    /// `invalid_query` when `from` is after `to`.
    pub(crate) fn check(&self) -> Result<(), crate::BookingError> {
        match (self.from, self.to) {
            (Some(from), Some(to)) if from > to => Err(crate::BookingError::InvalidQuery),
            _ => Ok(()),
        }
    }
}

/// The status of a hold as seen by clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HoldStatus {
    /// Reserving a unit until `expires_at`.
    Held,
    /// Booked for good (until cancelled).
    Confirmed,
    /// Given back by a cancel.
    Cancelled,
    /// Held, but `expires_at` has passed: the unit is free again.
    Expired,
}

impl HoldStatus {
    /// The lowercase name used in storage and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldStatus::Held => "held",
            HoldStatus::Confirmed => "confirmed",
            HoldStatus::Cancelled => "cancelled",
            HoldStatus::Expired => "expired",
        }
    }
}

impl fmt::Display for HoldStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HoldStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "held" => Ok(HoldStatus::Held),
            "confirmed" => Ok(HoldStatus::Confirmed),
            "cancelled" => Ok(HoldStatus::Cancelled),
            "expired" => Ok(HoldStatus::Expired),
            other => Err(UnknownStatus(other.to_owned())),
        }
    }
}

/// A status string that is not one of the four statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown hold status {0:?}")]
pub struct UnknownStatus(pub String);

/// A hold: `quantity` units of one slot, reserved until `expires_at` unless confirmed.
///
/// Serializes as `hold_id`, `slot_id`, `status`, `expires_at`, `confirmed_at`,
/// `cancelled_at` (the six fields of the original wire format, in that order), then
/// `quantity`, `owner` (`null` for an anonymous hold) and `created_at`. An HTTP layer that
/// promised its clients the six fields serializes a view of its own.
///
/// Stores return the status they have stored; the engine returns holds whose status has been
/// resolved against its clock with [`Hold::at`], so a hold stored as `held` whose `expires_at`
/// has passed reads as `expired`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The hold's id.
    pub hold_id: HoldId,
    /// The slot it reserves units of.
    pub slot_id: SlotId,
    /// Its status.
    pub status: HoldStatus,
    /// When an unconfirmed hold stops reserving its units.
    #[serde(with = "rfc3339")]
    pub expires_at: Timestamp,
    /// When it was confirmed, if it was.
    #[serde(with = "rfc3339::option")]
    pub confirmed_at: Option<Timestamp>,
    /// When it was cancelled, if it was.
    #[serde(with = "rfc3339::option")]
    pub cancelled_at: Option<Timestamp>,
    /// Units it takes, `1..=`[`MAX_QUANTITY`], all of them together.
    pub quantity: i32,
    /// Who it belongs to; `None` for an anonymous hold.
    pub owner: Option<OwnerId>,
    /// When it was placed. Renewal never extends a hold past `created_at` plus the engine's
    /// maximum hold life.
    #[serde(with = "rfc3339")]
    pub created_at: Timestamp,
}

/// The most units one hold may take.
pub const MAX_QUANTITY: i32 = 1_000;

/// The most holds one page of a query returns.
pub const MAX_PAGE_SIZE: u32 = 1_000;

/// One page of a keyset query over holds: the holds with ids greater than `after`, in id
/// order, at most `limit` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRequest {
    /// Only holds with a greater id; `None` starts at the first.
    pub after: Option<HoldId>,
    /// At most this many holds, `1..=`[`MAX_PAGE_SIZE`].
    pub limit: u32,
}

impl PageRequest {
    /// The first page of up to `limit` holds.
    pub fn first(limit: u32) -> Self {
        PageRequest { after: None, limit }
    }

    /// The page of up to `limit` holds after `after`.
    pub fn after(after: HoldId, limit: u32) -> Self {
        PageRequest {
            after: Some(after),
            limit,
        }
    }
}

impl Default for PageRequest {
    /// The first page of 100 holds.
    fn default() -> Self {
        PageRequest::first(100)
    }
}

/// A page of holds, by id, each with its status resolved at the time of the read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldPage {
    /// The holds, in ascending id order.
    pub holds: Vec<Hold>,
    /// Where the next page starts ([`PageRequest::after`]) when this one was full; `None` when
    /// there is nothing after it.
    pub next_after: Option<HoldId>,
}

impl Hold {
    /// The status clients see at `now`: `held` becomes `expired` once `expires_at <= now`.
    pub fn status_at(&self, now: Timestamp) -> HoldStatus {
        match self.status {
            HoldStatus::Held if self.expires_at <= now => HoldStatus::Expired,
            status => status,
        }
    }

    /// This hold with its status resolved at `now` (see [`Hold::status_at`]).
    pub fn at(mut self, now: Timestamp) -> Self {
        self.status = self.status_at(now);
        self
    }

    /// Whether the hold still reserves its unit at `now` without being confirmed.
    pub fn is_active_at(&self, now: Timestamp) -> bool {
        self.status_at(now) == HoldStatus::Held
    }
}

/// A client-chosen key that makes hold creation idempotent.
///
/// 1 to 255 characters, each visible ASCII (`0x21..=0x7E`): no spaces, no control characters,
/// nothing outside ASCII.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Longest key accepted, in characters (bytes, since keys are ASCII).
    pub const MAX_LEN: usize = 255;

    /// Validates and wraps a key.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidIdempotencyKey> {
        let key = key.into();
        check_token(&key)?;
        Ok(IdempotencyKey(key))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        IdempotencyKey::new(raw).map_err(serde::de::Error::custom)
    }
}

/// Why an idempotency key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidIdempotencyKey {
    /// The key is empty.
    #[error("the idempotency key is empty")]
    Empty,
    /// The key is longer than 255 characters.
    #[error("the idempotency key has {0} characters; at most 255 are allowed")]
    TooLong(usize),
    /// A byte outside visible ASCII (`0x21..=0x7E`).
    #[error("the idempotency key has a character outside visible ASCII at byte {position}")]
    BadCharacter {
        /// Byte offset of the first offending character.
        position: usize,
    },
}

/// Checks the rules idempotency keys and owner ids share: 1 to 255 bytes of visible ASCII.
fn check_token(token: &str) -> Result<(), InvalidIdempotencyKey> {
    if token.is_empty() {
        return Err(InvalidIdempotencyKey::Empty);
    }
    if token.len() > IdempotencyKey::MAX_LEN {
        return Err(InvalidIdempotencyKey::TooLong(token.chars().count()));
    }
    if let Some(position) = token.bytes().position(|b| !(0x21..=0x7e).contains(&b)) {
        return Err(InvalidIdempotencyKey::BadCharacter { position });
    }
    Ok(())
}

/// An opaque id with the rules of an [`IdempotencyKey`] (1 to 255 visible ASCII characters),
/// its error type wrapping the key's reason, and its serde forms.
macro_rules! token_type {
    ($(#[$doc:meta])* $name:ident, $(#[$err_doc:meta])* $error:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Longest id accepted, in characters.
            pub const MAX_LEN: usize = 255;

            /// Validates and wraps an id.
            pub fn new(id: impl Into<String>) -> Result<Self, $error> {
                let id = id.into();
                check_token(&id).map_err($error)?;
                Ok($name(id))
            }

            /// The id as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = $error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::new(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                $name::new(raw).map_err(serde::de::Error::custom)
            }
        }

        $(#[$err_doc])*
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        #[error("invalid {}: {}", $what, token_reason(.0))]
        pub struct $error(pub InvalidIdempotencyKey);
    };
}

token_type!(
    /// Who a hold belongs to: an opaque id the application chooses (a customer, a session, a
    /// cart). The same rules as an [`IdempotencyKey`]: 1 to 255 visible ASCII characters.
    ///
    /// An owned hold is seen, confirmed, cancelled and renewed only in that owner's
    /// [`Scope`](crate::Scope) (or by back-office code).
    OwnerId,
    /// Why an owner id was refused: the same rules as an idempotency key, broken the same way.
    InvalidOwnerId,
    "owner id"
);

token_type!(
    /// What a slot is a time of: a room, a class, a doctor, a vehicle. An opaque id the
    /// application chooses, with the rules of an [`IdempotencyKey`]: 1 to 255 visible ASCII
    /// characters. Availability and the operator's listing can be narrowed to one resource.
    ResourceId,
    /// Why a resource id was refused: the same rules as an idempotency key, broken the same way.
    InvalidResourceId,
    "resource id"
);

token_type!(
    /// The name of an event consumer (an email sender, a payment releaser): its cursor in the
    /// event log is stored under this name. The rules of an [`IdempotencyKey`]: 1 to 255
    /// visible ASCII characters.
    ConsumerId,
    /// Why a consumer name was refused: the same rules as an idempotency key, broken the same
    /// way.
    InvalidConsumerId,
    "consumer id"
);

token_type!(
    /// Who holds a consumer's lease: one reader (an instance, a process) that alone reads and
    /// acknowledges for the consumer while its lease lasts. The rules of an
    /// [`IdempotencyKey`]: 1 to 255 visible ASCII characters;
    /// [`LeaseHolder::unique`] makes one no other process is using.
    LeaseHolder,
    /// Why a lease holder's name was refused: the same rules as an idempotency key, broken the
    /// same way.
    InvalidLeaseHolder,
    "lease holder"
);

fn token_reason(reason: &InvalidIdempotencyKey) -> String {
    match reason {
        InvalidIdempotencyKey::Empty => "it is empty".to_owned(),
        InvalidIdempotencyKey::TooLong(n) => {
            format!("it has {n} characters; at most 255 are allowed")
        }
        InvalidIdempotencyKey::BadCharacter { position } => {
            format!("a character outside visible ASCII at byte {position}")
        }
    }
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

impl LeaseHolder {
    /// A holder name no other process (and no other call in this one) uses:
    /// `holder-<process id>-<time>-<count>-<random>`, from the process id, the system clock,
    /// a per-process counter and the standard library's per-process random hash keys.
    pub fn unique() -> Self {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let count = COUNT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(count);
        hasher.write_u128(nanos);
        // Visible ASCII and at most 83 characters: within the rules by construction.
        LeaseHolder(format!(
            "holder-{}-{nanos:x}-{count}-{:016x}",
            std::process::id(),
            hasher.finish()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(secs: i64) -> Timestamp {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).single().unwrap()
    }

    #[test]
    fn ids_parse_digits_only() {
        assert_eq!("42".parse::<SlotId>(), Ok(SlotId(42)));
        assert_eq!("0042".parse::<HoldId>(), Ok(HoldId(42)));
        for bad in ["", "+5", "-1", "1a", "abc", " 1", "1 ", "١"] {
            assert_eq!(
                bad.parse::<SlotId>(),
                Err(ParseIdError::NotDigits),
                "{bad:?}"
            );
        }
        assert_eq!(
            "9223372036854775808".parse::<SlotId>(),
            Err(ParseIdError::TooLarge)
        );
        assert_eq!(
            "9223372036854775807".parse::<SlotId>(),
            Ok(SlotId(i64::MAX))
        );
    }

    #[test]
    fn idempotency_key_rules() {
        assert!(IdempotencyKey::new("a").is_ok());
        assert!(IdempotencyKey::new("!~").is_ok());
        assert!(IdempotencyKey::new("k".repeat(255)).is_ok());
        assert_eq!(IdempotencyKey::new(""), Err(InvalidIdempotencyKey::Empty));
        assert_eq!(
            IdempotencyKey::new("k".repeat(256)),
            Err(InvalidIdempotencyKey::TooLong(256))
        );
        for (bad, position) in [("a b", 1), ("\t", 0), ("ké", 1), ("a\u{7f}", 1)] {
            assert_eq!(
                IdempotencyKey::new(bad),
                Err(InvalidIdempotencyKey::BadCharacter { position }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn hold_serializes_the_six_seed_fields_first() {
        let hold = Hold {
            hold_id: HoldId(7),
            slot_id: SlotId(3),
            status: HoldStatus::Confirmed,
            expires_at: t(0) + chrono::Duration::microseconds(1),
            confirmed_at: Some(t(1)),
            cancelled_at: None,
            quantity: 2,
            owner: Some(OwnerId::new("cart-9").unwrap()),
            created_at: t(-300),
        };
        let json = serde_json::to_string(&hold).unwrap();
        assert_eq!(
            json,
            concat!(
                r#"{"hold_id":7,"slot_id":3,"status":"confirmed","#,
                r#""expires_at":"2027-01-15T08:00:00.000001+00:00","#,
                r#""confirmed_at":"2027-01-15T08:00:01.000000+00:00","cancelled_at":null,"#,
                r#""quantity":2,"owner":"cart-9","created_at":"2027-01-15T07:55:00.000000+00:00"}"#
            )
        );
        let back: Hold = serde_json::from_str(&json).unwrap();
        assert_eq!(back, hold);
    }

    #[test]
    fn owner_ids_follow_the_key_rules() {
        assert_eq!(OwnerId::new("customer-1").unwrap().as_str(), "customer-1");
        assert!(OwnerId::new("o".repeat(255)).is_ok());
        assert_eq!(
            OwnerId::new(""),
            Err(InvalidOwnerId(InvalidIdempotencyKey::Empty))
        );
        assert_eq!(
            OwnerId::new("a b").unwrap_err().to_string(),
            "invalid owner id: a character outside visible ASCII at byte 1"
        );
        assert!(serde_json::from_str::<OwnerId>(r#""x y""#).is_err());
    }

    #[test]
    fn held_becomes_expired_exactly_at_expires_at() {
        let hold = Hold {
            hold_id: HoldId(1),
            slot_id: SlotId(1),
            status: HoldStatus::Held,
            expires_at: t(10),
            confirmed_at: None,
            cancelled_at: None,
            quantity: 1,
            owner: None,
            created_at: t(0),
        };
        assert_eq!(
            hold.status_at(t(10) - chrono::Duration::microseconds(1)),
            HoldStatus::Held
        );
        assert_eq!(hold.status_at(t(10)), HoldStatus::Expired);
        let confirmed = Hold {
            status: HoldStatus::Confirmed,
            ..hold
        };
        assert_eq!(confirmed.status_at(t(100)), HoldStatus::Confirmed);
    }

    #[test]
    fn timestamps_parse_any_offset_and_truncate() {
        let parsed = rfc3339::parse("2027-01-15T09:00:00.0000019+01:00").unwrap();
        assert_eq!(parsed, t(0) + chrono::Duration::microseconds(1));
        assert_eq!(rfc3339::format(&parsed), "2027-01-15T08:00:00.000001+00:00");
    }

    #[test]
    fn new_slot_validation() {
        assert!(NewSlot::new(t(0), t(1), 1).validate().is_ok());
        assert_eq!(
            NewSlot::new(t(0), t(1), 0).validate(),
            Err(InvalidSlot::Capacity(0))
        );
        assert_eq!(
            NewSlot::new(t(1), t(1), 5).validate(),
            Err(InvalidSlot::EndsBeforeStart)
        );
    }
}
