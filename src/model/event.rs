//! Events: what the event log records of each committed change, and where each stands in it.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use super::hold::Hold;
use super::ids::{HoldId, OwnerId, SlotId};
use super::time::{rfc3339, Timestamp};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A hold was placed (its units taken).
    HoldPlaced,
    /// A hold was confirmed.
    HoldConfirmed,
    /// A hold (held or confirmed) was cancelled and its units given back.
    HoldCancelled,
    /// A held hold's expiry moved forward.
    HoldRenewed,
    /// An expired hold was reclaimed: marked expired, its units given back.
    HoldExpired,
    /// A slot was created.
    SlotCreated,
    /// A slot's capacity changed (the event's quantity is the new capacity).
    SlotCapacityChanged,
    /// A slot's sales were closed.
    SlotClosed,
    /// A slot's sales were reopened.
    SlotReopened,
    /// A slot was removed.
    SlotRemoved,
    /// A waitlist entry was offered its units: the hold of the same number, placed just
    /// before (its `hold_placed` event counts the units; this one says why).
    WaitlistOffered,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 11] = [
        EventKind::HoldPlaced,
        EventKind::HoldConfirmed,
        EventKind::HoldCancelled,
        EventKind::HoldRenewed,
        EventKind::HoldExpired,
        EventKind::SlotCreated,
        EventKind::SlotCapacityChanged,
        EventKind::SlotClosed,
        EventKind::SlotReopened,
        EventKind::SlotRemoved,
        EventKind::WaitlistOffered,
    ];

    /// The snake_case name used in storage and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::HoldPlaced => "hold_placed",
            EventKind::HoldConfirmed => "hold_confirmed",
            EventKind::HoldCancelled => "hold_cancelled",
            EventKind::HoldRenewed => "hold_renewed",
            EventKind::HoldExpired => "hold_expired",
            EventKind::SlotCreated => "slot_created",
            EventKind::SlotCapacityChanged => "slot_capacity_changed",
            EventKind::SlotClosed => "slot_closed",
            EventKind::SlotReopened => "slot_reopened",
            EventKind::SlotRemoved => "slot_removed",
            EventKind::WaitlistOffered => "waitlist_offered",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event kind name that is not one of [`EventKind::as_str`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event kind `{0}`")]
pub struct UnknownEventKind(pub String);

impl FromStr for EventKind {
    type Err = UnknownEventKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| UnknownEventKind(s.to_owned()))
    }
}

impl Serialize for EventKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Where an event sits in its store's log: events are read in ascending position.
///
/// Two numbers, compared in order: an `epoch` (PostgreSQL: the number of the first reader's
/// snapshot that saw the event committed; 0 in stores whose writes commit in sequence order)
/// and a `sequence` within it. Written as `<epoch>_<sequence>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EventPosition {
    epoch: i64,
    sequence: i64,
}

impl EventPosition {
    /// Before every event: where a new consumer starts.
    pub const START: EventPosition = EventPosition {
        epoch: 0,
        sequence: 0,
    };

    /// A position (for stores).
    pub fn new(epoch: i64, sequence: i64) -> Self {
        EventPosition { epoch, sequence }
    }

    /// The first number compared.
    pub fn epoch(self) -> i64 {
        self.epoch
    }

    /// The second number compared.
    pub fn sequence(self) -> i64 {
        self.sequence
    }
}

impl fmt::Display for EventPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.epoch, self.sequence)
    }
}

/// A string that is not `<epoch>_<sequence>` of two non-negative integers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid event position `{0}`: expected <epoch>_<sequence>")]
pub struct InvalidEventPosition(pub String);

impl FromStr for EventPosition {
    type Err = InvalidEventPosition;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidEventPosition(s.to_owned());
        let (epoch, sequence) = s.split_once('_').ok_or_else(invalid)?;
        let number = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid());
            }
            part.parse::<i64>().map_err(|_| invalid())
        };
        Ok(EventPosition::new(number(epoch)?, number(sequence)?))
    }
}

impl Serialize for EventPosition {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One committed change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Where it sits in the log; unique, and the key to handle it idempotently.
    pub position: EventPosition,
    /// What happened.
    pub kind: EventKind,
    /// The slot it happened to (a hold event's slot).
    pub slot_id: SlotId,
    /// The hold, for hold events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_id: Option<HoldId>,
    /// The booking the hold is a line of, for hold events of a booking of several lines: the
    /// booking's id (its first line's hold id), shared by the events of every line of it.
    /// `None` for a hold placed alone (a booking of one line) and for slot events. To act once
    /// per booking, act on the events whose `booking_id` is `None` or equal to their
    /// `hold_id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub booking_id: Option<HoldId>,
    /// The hold's owner, for hold events of an owned hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<OwnerId>,
    /// Hold events: the hold's units. Slot events: the slot's capacity after the change.
    pub quantity: i32,
    /// When the change was made (the engine's clock).
    #[serde(with = "rfc3339")]
    pub at: Timestamp,
}

/// An event about to be appended: an [`Event`] without its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// What happened.
    pub kind: EventKind,
    /// The slot.
    pub slot_id: SlotId,
    /// The hold, for hold events.
    pub hold_id: Option<HoldId>,
    /// The hold's owner.
    pub owner: Option<OwnerId>,
    /// The hold's units, or the slot's capacity after the change.
    pub quantity: i32,
    /// When.
    pub at: Timestamp,
}

impl NewEvent {
    /// The event of `kind` about `hold` at `at`, before the store gave it a position.
    pub fn of_hold(kind: EventKind, hold: &Hold, at: Timestamp) -> Self {
        NewEvent {
            kind,
            slot_id: hold.slot_id,
            hold_id: Some(hold.hold_id),
            owner: hold.owner.clone(),
            quantity: hold.quantity,
            at,
        }
    }

    /// The event of `kind` about slot `slot_id` whose capacity is now `capacity`.
    pub fn of_slot(kind: EventKind, slot_id: SlotId, capacity: i32, at: Timestamp) -> Self {
        NewEvent {
            kind,
            slot_id,
            hold_id: None,
            owner: None,
            quantity: capacity,
            at,
        }
    }

    /// The event at `position`, of the booking `booking_id` (see [`Event::booking_id`]).
    pub fn at_position(self, position: EventPosition, booking_id: Option<HoldId>) -> Event {
        Event {
            position,
            kind: self.kind,
            slot_id: self.slot_id,
            hold_id: self.hold_id,
            booking_id,
            owner: self.owner,
            quantity: self.quantity,
            at: self.at,
        }
    }
}

/// What one [`purge`](crate::EventStore::purge) deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Purged {
    /// Cancelled and expired holds.
    pub holds: u64,
    /// Events every consumer had acknowledged.
    pub events: u64,
}
