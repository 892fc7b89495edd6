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
//! several reclaimers on several instances never report a hold twice), and
//! [`BookingEngine::purge`] deletes old history. Neither is needed for correctness.

use crate::engine::{check_limit, detached, guarded, BookingEngine};
use crate::error::BookingError;
use crate::model::{ConsumerId, Hold};
use crate::observe::{Op, Operation};

pub use crate::model::{
    Event, EventKind, EventPosition, InvalidEventPosition, NewEvent, Purged, UnknownEventKind,
};
pub use crate::store::EventStore;

/// The most events one read returns, and the most rows one reclaim or purge touches.
pub const MAX_BATCH: u32 = crate::model::MAX_PAGE_SIZE;

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
            check_limit(limit)?;
            let read = op.store(guarded(self.store().read_events(consumer, limit)));
            Ok(read.await?)
        })
        .await
    }

    /// Up to `limit` (1–1000) events after `after`, oldest first, for a follower that keeps
    /// its own position instead of a cursor in the store: a live feed, a client resuming
    /// from the last event it saw. Reading on from the last position returned skips nothing
    /// and repeats nothing (the guarantee of [`read_events`](Self::read_events)); start
    /// from [`event_log_end`](Self::event_log_end) to follow only the changes from now on,
    /// or from [`EventPosition::START`] for the whole log kept. Nothing is registered, so
    /// [`purge`](Self::purge) does not keep events for such a follower: one that resumes
    /// after a purge of events it had not read does not get them.
    ///
    /// ```
    /// # use slot_booking::{BookingEngine, EventKind, MemoryStore, NewSlot};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = BookingEngine::new(MemoryStore::new());
    /// let now = engine.event_log_end().await?;
    /// let starts = chrono::Utc::now() + chrono::Duration::hours(1);
    /// let slot = engine
    ///     .create_slot(NewSlot::new(starts, starts + chrono::Duration::hours(1), 2))
    ///     .await?;
    /// engine.hold(slot.slot_id, "key-1").await?;
    ///
    /// let changes = engine.read_events_after(now, 100).await?;
    /// let kinds: Vec<EventKind> = changes.iter().map(|event| event.kind).collect();
    /// assert_eq!(kinds, [EventKind::SlotCreated, EventKind::HoldPlaced]);
    /// // A follower resumes from the last position it saw: nothing new yet.
    /// let last = changes.last().map_or(now, |event| event.position);
    /// assert!(engine.read_events_after(last, 100).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn read_events_after(
        &self,
        after: EventPosition,
        limit: u32,
    ) -> Result<Vec<Event>, BookingError> {
        let op = Op::new(Operation::ReadEvents);
        op.run(async {
            check_limit(limit)?;
            let read = op.store(guarded(self.store().read_events_after(after, limit)));
            Ok(read.await?)
        })
        .await
    }

    /// A position at or after every event read so far: [`read_events_after`] it returns
    /// only the changes from now on. [`EventPosition::START`] for an empty log.
    ///
    /// [`read_events_after`]: Self::read_events_after
    pub async fn event_log_end(&self) -> Result<EventPosition, BookingError> {
        let op = Op::new(Operation::ReadEvents);
        op.run(async {
            let read = op.store(guarded(self.store().event_log_end()));
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
            check_limit(limit)?;
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
            check_limit(limit)?;
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
