//! Events after commit: a transactional outbox of every change, read by durable consumers.
//!
//! Every change a store commits appends an [`Event`] in the same atomic step (the same SQL
//! transaction, or under the same lock in memory): a hold placed, confirmed, cancelled,
//! renewed or expired, a slot created, its capacity changed, its sales closed or reopened, the
//! slot removed. A change that is refused or rolled back appends nothing, so an email sent for
//! a `hold_confirmed` event is never sent for a confirmation that did not happen.
//!
//! A consumer (an email sender, a payment releaser, a dashboard) reads with
//! [`BookingEngine::read_events`]: the events after its cursor, oldest first. It handles them
//! and then [`acknowledges`](BookingEngine::acknowledge_events) the last one it handled; the
//! cursor is stored in the same database, so a consumer that crashes before acknowledging
//! reads the same events again (delivery is at least once: handle them idempotently, keyed
//! by [`Event::position`]) and one that acknowledged never sees them again.
//!
//! Events come in the order their changes committed as far as a consumer can tell: every
//! event a reader returns is above every one it returned before, and an event that commits
//! later comes later, so a consumer that acknowledges what it read never skips one. (On
//! PostgreSQL, where sequence values become visible out of commit order, an event is placed
//! by the first snapshot that saw its transaction committed; nothing waits for a transaction
//! still running, see its docs.)
//!
//! Several instances sharing one consumer take turns through a lease, and an acknowledgement
//! can commit in the application's own transaction: see [`consumers`](crate::consumers).
//!
//! `expired` events need a write: a hold's expiry is decided by its `expires_at` alone, and
//! its units come back lazily when a slot looks full. [`BookingEngine::reclaim_expired`]
//! marks expired holds in bounded batches (each exactly once, decided by rows affected, so
//! several sweepers on several instances never report a hold twice), and
//! [`BookingEngine::purge`] deletes old history. Neither is needed for correctness.

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use serde::{Serialize, Serializer};

use crate::engine::{detached, guarded, BookingEngine};
use crate::error::BookingError;
use crate::model::{rfc3339, ConsumerId, Hold, HoldId, LeaseHolder, OwnerId, SlotId, Timestamp};
use crate::observe::{Op, Operation};
use crate::store::{Store, StoreError};

/// The most events one read returns, and the most rows one reclaim or purge touches.
pub const MAX_BATCH: u32 = 1_000;

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
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 10] = [
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

    /// The event at `position`.
    pub fn at_position(self, position: EventPosition) -> Event {
        Event {
            position,
            kind: self.kind,
            slot_id: self.slot_id,
            hold_id: self.hold_id,
            owner: self.owner,
            quantity: self.quantity,
            at: self.at,
        }
    }
}

/// What one [`purge`](EventStore::purge) deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Purged {
    /// Cancelled and expired holds.
    pub holds: u64,
    /// Events every consumer had acknowledged.
    pub events: u64,
}

/// A [`Store`] that keeps the event log: every write of [`Store`] appends its [`Event`]s in
/// the same atomic step (and a refused or rolled-back write appends none), and these
/// operations read it, keep consumers' cursors, reclaim expired holds and purge history.
///
/// The conformance suite's `event_conformance_tests!` holds a store to all of it.
#[async_trait]
pub trait EventStore: Store {
    /// Up to `limit` events after `consumer`'s acknowledged position (the start, for a
    /// consumer never seen), in ascending position. An event committed later is never given a
    /// position at or below one already returned: a reader that acknowledges what it read
    /// skips nothing.
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError>;

    /// Moves `consumer`'s cursor to `through` (registering the consumer if new); never moves
    /// it back.
    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError>;

    /// `consumer`'s acknowledged position, `None` for a consumer never seen.
    async fn consumer_position(
        &self,
        consumer: &ConsumerId,
    ) -> Result<Option<EventPosition>, StoreError>;

    /// Gives `consumer`'s lease to `holder` until `until` when nobody holds it, when its
    /// holder's lease ended at or before `now`, or when `holder` holds it already (the lease is
    /// then extended), registering a consumer never seen at the start. Returns whether
    /// `holder` holds the lease afterwards. One atomic step: of several holders racing for a
    /// free lease, exactly one gets it.
    async fn lease_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError>;

    /// Ends `holder`'s lease of `consumer`, so another holder may take it at once; nothing
    /// when another holder (or nobody) holds it.
    async fn release_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
    ) -> Result<(), StoreError>;

    /// As [`acknowledge`](EventStore::acknowledge), but only while `holder` is the holder of
    /// `consumer`'s lease (even one past its end, as long as nobody took it over): returns
    /// `false` and moves nothing otherwise. Decided in the same atomic step as the move.
    async fn acknowledge_leased(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<bool, StoreError>;

    /// Reclaims up to `limit` holds stored as held whose `expires_at <= now`: each is marked
    /// expired, its units given back to its slot and a [`EventKind::HoldExpired`] appended,
    /// in one atomic step per batch, decided by rows affected (a hold reclaimed concurrently
    /// elsewhere is not returned here). Returns the holds it reclaimed, as stored after.
    async fn reclaim_expired(&self, now: Timestamp, limit: u32) -> Result<Vec<Hold>, StoreError>;

    /// Deletes up to `limit` holds cancelled or expired (reclaimed) before `before` —
    /// confirmed holds and holds still stored as held are never deleted — and up to `limit`
    /// events older than `before` that every registered consumer has acknowledged (with no
    /// consumer registered, every event older than `before`).
    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError>;
}

/// An `Arc` of an event store is one (as for [`Store`]): `Arc<dyn EventStore>` included.
#[async_trait]
impl<S: EventStore + ?Sized> EventStore for std::sync::Arc<S> {
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        (**self).read_events(consumer, limit).await
    }

    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError> {
        (**self).acknowledge(consumer, through).await
    }

    async fn consumer_position(
        &self,
        consumer: &ConsumerId,
    ) -> Result<Option<EventPosition>, StoreError> {
        (**self).consumer_position(consumer).await
    }

    async fn lease_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        (**self).lease_consumer(consumer, holder, now, until).await
    }

    async fn release_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
    ) -> Result<(), StoreError> {
        (**self).release_consumer(consumer, holder).await
    }

    async fn acknowledge_leased(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        (**self).acknowledge_leased(consumer, holder, through).await
    }

    async fn reclaim_expired(&self, now: Timestamp, limit: u32) -> Result<Vec<Hold>, StoreError> {
        (**self).reclaim_expired(now, limit).await
    }

    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError> {
        (**self).purge(before, limit).await
    }
}

pub(crate) fn check_batch(limit: u32) -> Result<(), BookingError> {
    if (1..=MAX_BATCH).contains(&limit) {
        Ok(())
    } else {
        Err(BookingError::InvalidPage { limit })
    }
}

impl<S: EventStore> BookingEngine<S> {
    /// Up to `limit` (1–1000) events after `consumer`'s cursor, oldest first. Call
    /// [`acknowledge_events`](Self::acknowledge_events) with the last one's position once
    /// they are handled; until then they come again.
    pub async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, BookingError> {
        let op = Op::new(Operation::ReadEvents);
        op.run(async {
            check_batch(limit)?;
            let read = op.store(guarded(self.store().read_events(consumer, limit)));
            Ok(read.await?)
        })
        .await
    }

    /// Records that `consumer` has handled every event up to `through` (a position it read).
    /// The cursor never moves back. Acknowledging [`EventPosition::START`] registers a
    /// consumer before it has read anything, so [`purge`](Self::purge) keeps events for it.
    pub async fn acknowledge_events(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), BookingError> {
        let op = Op::new(Operation::AcknowledgeEvents);
        op.run(async {
            let store = self.store_handle();
            let consumer = consumer.clone();
            let write = detached(async move { store.acknowledge(&consumer, through).await });
            Ok(op.store(write).await?)
        })
        .await
    }

    /// Reclaims up to `limit` (1–1000) expired holds, each yielding one `hold_expired` event,
    /// and invalidates the cached availability when any units came back. Returns the holds
    /// reclaimed by this call (a hold reclaimed concurrently elsewhere is not among them).
    pub async fn reclaim_expired(&self, limit: u32) -> Result<Vec<Hold>, BookingError> {
        let op = Op::new(Operation::ReclaimExpired);
        op.run(async {
            check_batch(limit)?;
            let now = self.clock().now();
            let store = self.store_handle();
            let invalidator = self.invalidator();
            let write = detached(async move {
                let reclaimed = store.reclaim_expired(now, limit).await?;
                if !reclaimed.is_empty() {
                    // The listing counted them as free already; its `remaining` is exact
                    // either way, but a cache that changes only on reads would keep serving
                    // a snapshot taken before the reclaim for its whole period.
                    invalidator.invalidate();
                }
                Ok(reclaimed)
            });
            Ok(op.store(write).await?)
        })
        .await
    }

    /// Deletes up to `limit` (1–1000) cancelled or expired holds and up to `limit` delivered
    /// events that are older than `age`.
    ///
    /// A purged hold's idempotency key is free again: a retry with it after the purge places
    /// a new hold instead of replaying the old one. Keep `age` longer than any client's retry
    /// window (Stripe keeps keys for at least 24 hours). Confirmed holds (bookings) and holds
    /// still held are never purged. An event is delivered when every consumer with a cursor
    /// has acknowledged it; with no consumer, every event counts as delivered.
    pub async fn purge(
        &self,
        age: std::time::Duration,
        limit: u32,
    ) -> Result<Purged, BookingError> {
        let op = Op::new(Operation::Purge);
        op.run(async {
            check_batch(limit)?;
            let now = self.clock().now();
            // An age reaching before the earliest representable time purges nothing.
            let Some(before) = chrono::Duration::from_std(age)
                .ok()
                .and_then(|age| now.checked_sub_signed(age))
            else {
                return Ok(Purged::default());
            };
            let store = self.store_handle();
            let write = detached(async move { store.purge(before, limit).await });
            Ok(op.store(write).await?)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>(), Ok(kind));
        }
        assert!("hold_lost".parse::<EventKind>().is_err());
    }

    #[test]
    fn positions_order_by_epoch_then_sequence_and_round_trip() {
        let (a, b) = (EventPosition::new(7, 900), EventPosition::new(8, 1));
        assert!(EventPosition::START < a && a < b);
        assert_eq!(b.to_string(), "8_1");
        assert_eq!("8_1".parse::<EventPosition>(), Ok(b));
        for bad in [
            "",
            "8",
            "8_",
            "_1",
            "-8_1",
            "8_1_2",
            "8_+1",
            "99999999999999999999_1",
        ] {
            assert!(bad.parse::<EventPosition>().is_err(), "{bad:?} accepted");
        }
    }
}
