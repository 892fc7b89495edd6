//! A slot's units and where each one is: free, held, expired but not reclaimed, confirmed.

use serde::{Deserialize, Serialize};

use super::ids::{ResourceId, SlotId};
use super::slot::Slot;
use super::time::{rfc3339, Timestamp};

/// A slot as stored with the units of its holds still stored as held, split at the instant of
/// the read: what a store reports for the operator's listing and for a refused change.
///
/// Confirmed units follow from the capacity invariant
/// (`remaining + held + expired + confirmed == capacity`), so a store need not count them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotUsage {
    /// The slot as stored.
    pub slot: Slot,
    /// Units of holds stored as held that are still active.
    pub held: i32,
    /// Units of holds stored as held that have expired but were not yet reclaimed: free.
    pub expired: i32,
}

impl SlotUsage {
    /// Units a new hold could take (if the slot is selling): free plus expired.
    pub fn available(&self) -> i32 {
        self.slot.stored_remaining + self.expired
    }

    /// Units of confirmed holds.
    pub fn confirmed(&self) -> i32 {
        self.slot.capacity - self.slot.stored_remaining - self.held - self.expired
    }

    /// Units held (active) or confirmed: what no capacity change or removal may take.
    pub fn taken(&self) -> i32 {
        self.held + self.confirmed()
    }
}

/// One slot of the operator's listing: the slot and where each of its units is.
/// `capacity == remaining + held + confirmed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotSummary {
    /// The slot's id.
    pub slot_id: SlotId,
    /// When it begins.
    #[serde(with = "rfc3339")]
    pub starts_at: Timestamp,
    /// When it ends.
    #[serde(with = "rfc3339")]
    pub ends_at: Timestamp,
    /// Total units.
    pub capacity: i32,
    /// Units a new hold could take (free, expired holds included), were it selling.
    pub remaining: i32,
    /// Units of active holds.
    pub held: i32,
    /// Units of confirmed holds.
    pub confirmed: i32,
    /// Its resource, if any.
    pub resource: Option<ResourceId>,
    /// Whether its sales are closed.
    pub closed: bool,
    /// When it was removed, if it was.
    #[serde(with = "rfc3339::option")]
    pub removed_at: Option<Timestamp>,
}

impl From<SlotUsage> for SlotSummary {
    fn from(usage: SlotUsage) -> Self {
        let (remaining, confirmed) = (usage.available(), usage.confirmed());
        let SlotUsage { slot, held, .. } = usage;
        SlotSummary {
            slot_id: slot.slot_id,
            starts_at: slot.starts_at,
            ends_at: slot.ends_at,
            capacity: slot.capacity,
            remaining,
            held,
            confirmed,
            resource: slot.resource,
            closed: slot.closed,
            removed_at: slot.removed_at,
        }
    }
}
