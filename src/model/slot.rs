//! Slots: a slot as stored, a new slot, and the availability listing's entries and query.

use serde::{Deserialize, Serialize};

use super::ids::{ResourceId, SlotId};
use super::time::{rfc3339, truncate_to_micros, Timestamp};

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
    /// The stored counter: units not taken by any hold stored as held or confirmed. A hold
    /// that has expired but was not yet reclaimed still counts as taken here, so this is not
    /// what a new hold could take: for that (the "sold out?" question) read
    /// [`AvailabilityEntry::remaining`], or [`SlotSummary::remaining`](crate::SlotSummary)
    /// in the operator's listing, which count such holds as free. Named apart from them since
    /// version 0.2 (it was `remaining`; JSON still accepts that name on input).
    #[serde(alias = "remaining")]
    pub stored_remaining: i32,
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

/// Narrows a listing of slots — availability, or the operator's listing
/// ([`BookingEngine::list_slots`](crate::BookingEngine::list_slots)) — to slots whose
/// `starts_at` lies in `[from, to)`, and optionally to one resource's slots.
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
