//! [`Within`]: the engine's operations on a store's writes over one transaction, each with the
//! validation and answers of the engine's own method of the same name. What an
//! [`EngineTransaction`](super::EngineTransaction) runs each call with, on a task that owns the
//! transaction.

use crate::admin::{checked_capacity, sales_operation, SlotOperation};
use crate::answers::{hold_placed, settle};
use crate::engine::{guarded, prepare_slot, BookingEngine, HoldPlaced, NewHold};
use crate::error::BookingError;
use crate::model::{CapacityChange, Hold, HoldId, HoldStatus, NewSlot, Slot, SlotId};
use crate::observe::{Op, Operation};
use crate::scope::Scope;

use crate::bookings::{
    booking_placed, checked, whole, whole_transition, BookingPlaced, Checked, NewBooking,
};
use crate::model::Booking;
use crate::store::{BookingStore, HoldStore, RenewRequest};
use crate::store::{TransactionBookings, TransactionWrites};

/// The engine's writes on one transaction's [`TransactionWrites`].
///
/// Every method validates its input as the engine's own method of the same name does, runs
/// the store's write on the transaction's connection, and answers with the same values and the
/// same [`BookingError`]s. Nothing is invalidated here: the
/// [`EngineTransaction`](super::EngineTransaction) that runs it does that after its commit.
#[derive(Debug)]
pub struct Within<'e, S, W> {
    engine: &'e BookingEngine<S>,
    writes: W,
}

impl<S: HoldStore> BookingEngine<S> {
    /// The engine's writes through `writes` (a [`TransactionalStore`](crate::TransactionalStore)'s
    /// writes on an open transaction): they commit or roll back with it. Used by
    /// [`EngineTransaction`](super::EngineTransaction) and by the conformance suite, which
    /// drive a store's transactions through it.
    pub(crate) fn within<W: TransactionWrites>(&self, writes: W) -> Within<'_, S, W> {
        Within {
            engine: self,
            writes,
        }
    }
}

impl<S: HoldStore, W: TransactionWrites> Within<'_, S, W> {
    /// The store's writes this runs on (to reach the caller's connection through them).
    pub fn writes(&mut self) -> &mut W {
        &mut self.writes
    }

    /// As [`BookingEngine::place_hold`].
    pub async fn place_hold(&mut self, request: NewHold) -> Result<HoldPlaced, BookingError> {
        let op = Op::new(Operation::Hold)
            .slot(request.slot_id)
            .in_transaction();
        op.run(async {
            let prepared = self.engine.prepare_hold(request)?;
            let outcome = op
                .store(guarded(self.writes.create_hold(prepared.request())))
                .await?;
            hold_placed(&op, outcome, prepared.slot_id, prepared.quantity)
        })
        .await
    }

    /// As [`BookingEngine::confirm`].
    pub async fn confirm(&mut self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::Confirm).hold(hold_id).in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            let transition = op
                .store(guarded(self.writes.confirm_hold(hold_id, scope, now)))
                .await?;
            settle(&op, transition, hold_id, HoldStatus::Confirmed)
        })
        .await
    }

    /// As [`BookingEngine::cancel`].
    pub async fn cancel(&mut self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::Cancel).hold(hold_id).in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            let transition = op
                .store(guarded(self.writes.cancel_hold(hold_id, scope, now)))
                .await?;
            settle(&op, transition, hold_id, HoldStatus::Cancelled)
        })
        .await
    }

    /// As [`BookingEngine::renew`].
    pub async fn renew(
        &mut self,
        scope: &Scope,
        hold_id: HoldId,
        lifetime: Option<std::time::Duration>,
    ) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::Renew).hold(hold_id).in_transaction();
        op.run(async {
            let (lifetime, max_life, now) = self.engine.prepare_renew(lifetime)?;
            let request = RenewRequest {
                hold_id,
                scope,
                now,
                lifetime,
                max_life,
            };
            let transition = op.store(guarded(self.writes.renew_hold(request))).await?;
            settle(&op, transition, hold_id, HoldStatus::Confirmed)
        })
        .await
    }

    /// As [`BookingEngine::get_hold`], seeing the transaction's own writes.
    pub async fn get_hold(&mut self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::GetHold).hold(hold_id).in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            let read = op
                .store(guarded(self.writes.get_hold(hold_id, scope, now)))
                .await?;
            match read.outcome {
                Some(hold) => Ok(hold.at(read.at)),
                None => Err(BookingError::HoldNotFound { hold_id }),
            }
        })
        .await
    }

    /// As [`BookingEngine::create_slot`].
    pub async fn create_slot(&mut self, slot: NewSlot) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::CreateSlot).in_transaction();
        op.run(async {
            let slot = prepare_slot(slot)?;
            let now = self.engine.clock().now();
            let created = op
                .store(guarded(self.writes.create_slot(&slot, now)))
                .await?;
            op.record_slot(created.slot_id);
            Ok(created)
        })
        .await
    }

    /// As [`BookingEngine::change_capacity`].
    pub async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        change: CapacityChange,
    ) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::ChangeCapacity)
            .slot(slot_id)
            .in_transaction();
        op.run(async {
            let capacity = checked_capacity(change)?;
            let now = self.engine.clock().now();
            let change = op
                .store(guarded(self.writes.change_capacity(slot_id, capacity, now)))
                .await?;
            SlotOperation::Capacity(capacity).answer(change.outcome, slot_id)
        })
        .await
    }

    /// As [`BookingEngine::close_sales`].
    pub async fn close_sales(&mut self, slot_id: SlotId) -> Result<Slot, BookingError> {
        self.set_closed(slot_id, true).await
    }

    /// As [`BookingEngine::reopen_sales`].
    pub async fn reopen_sales(&mut self, slot_id: SlotId) -> Result<Slot, BookingError> {
        self.set_closed(slot_id, false).await
    }

    async fn set_closed(&mut self, slot_id: SlotId, closed: bool) -> Result<Slot, BookingError> {
        let op = Op::new(sales_operation(closed))
            .slot(slot_id)
            .in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            let change = op
                .store(guarded(self.writes.set_closed(slot_id, closed, now)))
                .await?;
            SlotOperation::Sales.answer(change.outcome, slot_id)
        })
        .await
    }

    /// As [`BookingEngine::remove_slot`].
    pub async fn remove_slot(&mut self, slot_id: SlotId) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::RemoveSlot)
            .slot(slot_id)
            .in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            let change = op
                .store(guarded(self.writes.remove_slot(slot_id, now)))
                .await?;
            SlotOperation::Remove.answer(change.outcome, slot_id)
        })
        .await
    }
}

/// Bookings of several lines inside the caller's transaction, for a store whose writes also
/// have [`TransactionBookings`]: a booking and the application's own rows commit or roll back
/// together.
impl<S: BookingStore, W: TransactionWrites + TransactionBookings> Within<'_, S, W> {
    /// As [`BookingEngine::book`]; a booking of one line is [`Within::place_hold`].
    pub async fn book(&mut self, request: NewBooking) -> Result<BookingPlaced, BookingError> {
        let request = match checked(request)? {
            Checked::One(hold) => return Ok(self.place_hold(hold).await?.into()),
            Checked::Several(request) => request,
        };
        let op = Op::new(Operation::Book)
            .slot(request.lines[0].slot_id)
            .in_transaction();
        op.run(async {
            let prepared = self.engine.prepare_booking(request)?;
            let first = prepared.lines[0].slot_id;
            let outcome = op
                .store(guarded(self.writes.create_booking(prepared.request())))
                .await?;
            booking_placed(&op, outcome, first)
        })
        .await
    }

    /// As [`BookingEngine::get_booking`], seeing the transaction's own writes.
    pub async fn get_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        let op = Op::new(Operation::GetBooking)
            .hold(booking_id)
            .in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            let read = op
                .store(guarded(self.writes.get_booking(booking_id, scope, now)))
                .await?;
            match read.outcome {
                Some(booking) => Ok(whole(booking)?.at(read.at)),
                None => Err(BookingError::HoldNotFound {
                    hold_id: booking_id,
                }),
            }
        })
        .await
    }

    /// As [`BookingEngine::confirm_booking`].
    pub async fn confirm_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        self.end_booking(scope, booking_id, HoldStatus::Confirmed)
            .await
    }

    /// As [`BookingEngine::cancel_booking`].
    pub async fn cancel_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        self.end_booking(scope, booking_id, HoldStatus::Cancelled)
            .await
    }

    /// Confirms or cancels (`to`) a whole booking on the caller's connection.
    async fn end_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
        to: HoldStatus,
    ) -> Result<Booking, BookingError> {
        let confirm = to == HoldStatus::Confirmed;
        let operation = if confirm {
            Operation::ConfirmBooking
        } else {
            Operation::CancelBooking
        };
        let op = Op::new(operation).hold(booking_id).in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            let changed = if confirm {
                self.writes.confirm_booking(booking_id, scope, now)
            } else {
                self.writes.cancel_booking(booking_id, scope, now)
            };
            let transition = op.store(guarded(changed)).await?;
            settle(&op, whole_transition(transition)?, booking_id, to)
        })
        .await
    }

    /// As [`BookingEngine::renew_booking`].
    pub async fn renew_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
        lifetime: Option<std::time::Duration>,
    ) -> Result<Booking, BookingError> {
        let op = Op::new(Operation::RenewBooking)
            .hold(booking_id)
            .in_transaction();
        op.run(async {
            let (lifetime, max_life, now) = self.engine.prepare_renew(lifetime)?;
            let request = RenewRequest {
                hold_id: booking_id,
                scope,
                now,
                lifetime,
                max_life,
            };
            let transition = op
                .store(guarded(self.writes.renew_booking(request)))
                .await?;
            settle(
                &op,
                whole_transition(transition)?,
                booking_id,
                HoldStatus::Confirmed,
            )
        })
        .await
    }
}

/// Units of slots and pools read on the caller's connection, for a store whose writes also
/// have [`TransactionPools`](crate::TransactionPools): what the transaction sees, its own
/// writes included, with no raw SQL over the crate's tables.
impl<S: HoldStore, W: TransactionWrites + crate::store::TransactionPools> Within<'_, S, W> {
    /// As [`BookingEngine::get_pool`], seeing the transaction's own writes.
    pub async fn get_pool(
        &mut self,
        pool_id: crate::model::PoolId,
    ) -> Result<crate::model::PoolSummary, BookingError> {
        let op = Op::new(Operation::GetPool).in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            op.store(guarded(self.writes.get_pool(pool_id, now)))
                .await?
                .map(crate::model::PoolSummary::from)
                .ok_or(BookingError::PoolNotFound { pool_id })
        })
        .await
    }

    /// The slot with its units free (expired holds included), held and confirmed, seeing the
    /// transaction's own writes; `slot_not_found` when no slot has this id.
    pub async fn slot_usage(
        &mut self,
        slot_id: SlotId,
    ) -> Result<crate::model::SlotSummary, BookingError> {
        let op = Op::new(Operation::GetSlot).slot(slot_id).in_transaction();
        op.run(async {
            let now = self.engine.clock().now();
            op.store(guarded(self.writes.slot_usage(slot_id, now)))
                .await?
                .map(crate::model::SlotSummary::from)
                .ok_or(BookingError::SlotNotFound { slot_id })
        })
        .await
    }
}
