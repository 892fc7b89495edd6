//! [`TransactionWrites`] and [`TransactionalStore`]: a store's writes on a connection or
//! transaction the caller owns.

use async_trait::async_trait;

#[allow(unused_imports)] // for the docs
use super::admin::SlotAdmin;
use super::error::StoreError;
use super::holds::HoldStore;
use super::outcome::{Decided, HoldOutcome, HoldRequest, RenewRequest, SlotChange, Transition};
use crate::model::{
    Booking, CapacityChange, ConsumerId, EventPosition, Hold, HoldId, LeaseHolder, NewSlot, Slot,
    SlotId, Timestamp,
};
use crate::scope::Scope;

/// A store's writes on a connection or transaction the caller owns: the write operations of
/// [`HoldStore`] and [`SlotAdmin`], each with the same contract, run on the caller's connection.
///
/// A statement that fails inside a PostgreSQL transaction aborts the whole transaction, so an
/// implementation runs each step that may fail (a hold's unique key, say) under a savepoint:
/// a refused request leaves the caller's transaction usable.
#[async_trait]
pub trait TransactionWrites: Send {
    /// As [`HoldStore::create_hold`].
    async fn create_hold(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError>;

    /// As [`HoldStore::confirm_hold`].
    async fn confirm_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError>;

    /// As [`HoldStore::cancel_hold`].
    async fn cancel_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError>;

    /// As [`HoldStore::renew_hold`].
    async fn renew_hold(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError>;

    /// As [`HoldStore::get_hold`], seeing the transaction's own writes.
    async fn get_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError>;

    /// As [`HoldStore::create_slot`].
    async fn create_slot(&mut self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError>;

    /// As [`SlotAdmin::change_capacity`].
    async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError>;

    /// As [`SlotAdmin::set_closed`].
    async fn set_closed(
        &mut self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError>;

    /// As [`SlotAdmin::remove_slot`].
    async fn remove_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError>;

    /// As [`EventStore::acknowledge`](super::EventStore::acknowledge) (`holder` `None`,
    /// always `true`) or [`EventStore::acknowledge_leased`](super::EventStore::acknowledge_leased)
    /// (`false`, nothing moved, when another holder has the lease): the cursor moves with the
    /// caller's transaction. On PostgreSQL it keeps the consumer's row locked until the
    /// transaction ends, so a lease taken over meanwhile waits for it.
    async fn acknowledge(
        &mut self,
        consumer: &ConsumerId,
        holder: Option<&LeaseHolder>,
        through: EventPosition,
    ) -> Result<bool, StoreError>;
}

/// Bookings of several lines on a connection or transaction the caller owns: the operations of
/// [`BookingStore`](super::BookingStore), each with the same contract, run on the caller's
/// connection, so a booking and the application's own rows commit or roll back together. A
/// store's [`TransactionWrites`] type implements it when the store has bookings.
#[async_trait]
pub trait TransactionBookings: Send {
    /// As [`BookingStore::create_booking`](super::BookingStore::create_booking).
    async fn create_booking(
        &mut self,
        request: super::BookingRequest<'_>,
    ) -> Result<Decided<super::BookingOutcome>, StoreError>;

    /// As [`BookingStore::get_booking`](super::BookingStore::get_booking), seeing the
    /// transaction's own writes.
    async fn get_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Booking>>, StoreError>;

    /// As [`BookingStore::confirm_booking`](super::BookingStore::confirm_booking).
    async fn confirm_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError>;

    /// As [`BookingStore::cancel_booking`](super::BookingStore::cancel_booking).
    async fn cancel_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError>;

    /// As [`BookingStore::renew_booking`](super::BookingStore::renew_booking).
    async fn renew_booking(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError>;
}

/// A store that can open a transaction of its own for the engine's writes, hand out its
/// [`TransactionWrites`], and commit or roll it back. What the conformance suite drives; an
/// application may use it too, or the backend's own way of wrapping a connection it holds.
#[async_trait]
pub trait TransactionalStore: HoldStore {
    /// An open transaction.
    type Transaction: Send + 'static;

    /// The store's writes on an open transaction.
    type Writes<'t>: TransactionWrites
    where
        Self: 't;

    /// Opens a transaction.
    async fn begin(&self) -> Result<Self::Transaction, StoreError>;

    /// The store's writes on `transaction`.
    fn writes<'t>(&'t self, transaction: &'t mut Self::Transaction) -> Self::Writes<'t>;

    /// Commits `transaction`.
    async fn commit(&self, transaction: Self::Transaction) -> Result<(), StoreError>;

    /// Rolls `transaction` back: nothing written through it stays.
    async fn rollback(&self, transaction: Self::Transaction) -> Result<(), StoreError>;
}
