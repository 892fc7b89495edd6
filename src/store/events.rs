//! [`EventStore`]: the event log a store keeps beside its data, its consumers' cursors and
//! leases, and the reclaiming and purging of history.

use async_trait::async_trait;

use super::error::StoreError;
use super::holds::HoldStore;
use crate::model::{ConsumerId, Event, EventPosition, Hold, LeaseHolder, Purged, Timestamp};

/// A store that keeps the event log: every write of its other traits appends its [`Event`]s in
/// the same atomic step (and a refused or rolled-back write appends none), and these
/// operations read it, keep consumers' cursors, reclaim expired holds and purge history.
///
/// The conformance suite's `event_conformance_tests!` holds a store to all of it.
#[async_trait]
pub trait EventStore: HoldStore {
    /// Up to `limit` events after `consumer`'s acknowledged position (the start, for a
    /// consumer never seen), in ascending position. An event committed later is never given a
    /// position at or below one already returned: a reader that acknowledges what it read
    /// skips nothing.
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError>;

    /// Up to `limit` events after `after`, in ascending position, with no consumer and no
    /// cursor: the read a follower that keeps its own position makes (a live feed resuming
    /// from the last position a client saw). The same events, in the same positions, as a
    /// consumer whose cursor is at `after` would read, and the same guarantee: an event
    /// committed later is never given a position at or below one already returned, so a
    /// follower that reads on from the last position it got skips nothing. Events a purge
    /// deleted are not returned.
    async fn read_events_after(
        &self,
        after: EventPosition,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError>;

    /// The end of the log as read so far: a position at or after every event any read has
    /// returned, such that a read after it returns only events not returned before (the
    /// changes from now on). [`EventPosition::START`] for an empty log. It need not be an
    /// event's position.
    async fn event_log_end(&self) -> Result<EventPosition, StoreError>;

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
    /// expired, its units given back to its slot and a [`EventKind::HoldExpired`](crate::EventKind::HoldExpired) appended,
    /// in one atomic step per batch, decided by rows affected (a hold reclaimed concurrently
    /// elsewhere is not returned here). Returns the holds it reclaimed, as stored after.
    async fn reclaim_expired(&self, now: Timestamp, limit: u32) -> Result<Vec<Hold>, StoreError>;

    /// Deletes up to `limit` holds cancelled or expired (reclaimed) before `before` —
    /// confirmed holds and holds still stored as held are never deleted — and up to `limit`
    /// events older than `before` that every registered consumer has acknowledged (with no
    /// consumer registered, every event older than `before`).
    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError>;
}
