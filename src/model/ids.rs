//! Identifiers: the store-assigned ids of slots and holds, and the caller-chosen tokens
//! (idempotency keys, owners, resources, consumers, lease holders).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

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
id_type!(
    /// Identifies a pool: a capacity shared by several slots.
    PoolId
);
id_type!(
    /// Identifies a waitlist entry. An entry and the hold offered to it share one number: the
    /// offer is hold `HoldId(entry_id.0)`.
    EntryId
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

    /// The key as stored when keys are scoped to their owner
    /// ([`EngineBuilder::keys_per_owner`](crate::EngineBuilder::keys_per_owner)): the owner id,
    /// a space, the client's key. Neither part has a space, so two owners' keys never meet,
    /// and none meets an anonymous client's key (which has no space); stores keep it unique like
    /// any key, so no two holds share a stored key.
    pub fn of_owner(owner: &OwnerId, key: &IdempotencyKey) -> Self {
        IdempotencyKey(format!("{} {}", owner.as_str(), key.as_str()))
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
