//! Holds: a hold as stored, its status, and how its status reads at an instant.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::ids::{HoldId, OwnerId, SlotId};
use super::time::{rfc3339, Timestamp};

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
