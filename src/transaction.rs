//! Writes inside the application's own database transaction.
//!
//! A team confirming a hold usually has a row of its own to write in the same breath (an order,
//! a payment intent). [`BookingEngine::within`] runs the engine's writes — holds, confirms,
//! cancels, renewals, slot administration — on a connection or transaction the caller owns,
//! through the store's [`TransactionWrites`]: the same validation, the same rules decided by
//! rows affected and unique keys, the same [`BookingError`]s, and everything commits or rolls
//! back with the caller's own rows.
//!
//! ```no_run
//! # async fn demo(
//! #     engine: slot_booking::BookingEngine<slot_booking_postgres::PostgresStore>,
//! #     hold_id: slot_booking::HoldId,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! let store = engine.store();
//! let mut tx = store.pool().begin().await?;
//! let booked = engine
//!     .within(store.on(&mut tx))
//!     .confirm_as(&slot_booking::Scope::Anonymous, hold_id)
//!     .await?;
//! slot_booking_postgres::sqlx::query("INSERT INTO orders (hold_id) VALUES ($1)")
//!     .bind(booked.hold_id.get())
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?; // both, or neither
//! # Ok(()) }
//! ```
//!
//! What changes inside a caller's transaction:
//!
//! - **The caller commits.** The engine cannot know when (or whether) that happens, so it does
//!   not invalidate its availability cache itself. The PostgreSQL store notifies every engine
//!   that follows its changes when the transaction commits, and never when it rolls back; with
//!   any other store call [`BookingEngine::invalidate_availability`] after the commit.
//! - **The caller's locks last until the commit.** A cancel or a slot change locks its slot's
//!   row until then. Two transactions that each touch several slots should touch them in the
//!   same order (by slot id, say), as with any rows; a hold or confirm of one hold in a
//!   transaction of its own needs no such care.
//! - **A dropped call is the caller's to clean up.** Outside a transaction the engine finishes
//!   a write whose caller went away; here the write belongs to the caller's transaction, which
//!   the caller rolls back (sqlx does so when a transaction is dropped uncommitted).

use crate::admin::{checked_capacity, sales_operation, SlotOperation};
use crate::answers::{hold_placed, settle};
use crate::engine::{guarded, prepare_slot, BookingEngine, HoldPlaced, NewHold};
use crate::error::BookingError;
use crate::model::{Hold, HoldId, HoldStatus, NewSlot, Slot, SlotId};
use crate::observe::{Op, Operation};
use crate::scope::Scope;

use crate::bookings::{
    booking_placed, checked, whole, whole_transition, BookingPlaced, Checked, NewBooking,
};
use crate::model::Booking;
use crate::store::{BookingStore, HoldStore, RenewRequest};
pub use crate::store::{TransactionBookings, TransactionWrites, TransactionalStore};

/// The engine's writes on the caller's transaction; made by [`BookingEngine::within`].
///
/// Every method validates its input as the engine's own method of the same name does, runs
/// the store's write on the caller's connection, and answers with the same values and the
/// same [`BookingError`]s. Nothing is invalidated: see the [module docs](self).
#[derive(Debug)]
pub struct Within<'e, S, W> {
    engine: &'e BookingEngine<S>,
    writes: W,
}

impl<S: HoldStore> BookingEngine<S> {
    /// The engine's writes on a connection or transaction the caller owns, through `writes`
    /// (for example `PostgresStore::on(&mut tx)` or `SqliteStore::on(&mut tx)`). They commit
    /// or roll back with the caller's transaction.
    pub fn within<W: TransactionWrites>(&self, writes: W) -> Within<'_, S, W> {
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

    /// Gives the store's writes back.
    pub fn into_writes(self) -> W {
        self.writes
    }

    /// As [`BookingEngine::hold`].
    pub async fn hold(&mut self, slot_id: SlotId, key: &str) -> Result<HoldPlaced, BookingError> {
        self.place_hold(NewHold::new(slot_id, key)).await
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
    #[deprecated(
        since = "0.2.0",
        note = "acts as an anonymous client: an owner's hold answers hold_not_found. Name the scope: `confirm_as(&Scope::Anonymous, ..)`, `Scope::Owner(..)` or `Scope::BackOffice`"
    )]
    pub async fn confirm(&mut self, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.confirm_as(&Scope::Anonymous, hold_id).await
    }

    /// As [`BookingEngine::confirm_as`].
    pub async fn confirm_as(
        &mut self,
        scope: &Scope,
        hold_id: HoldId,
    ) -> Result<Hold, BookingError> {
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
    #[deprecated(
        since = "0.2.0",
        note = "acts as an anonymous client: an owner's hold answers hold_not_found. Name the scope: `cancel_as(&Scope::Anonymous, ..)`, `Scope::Owner(..)` or `Scope::BackOffice`"
    )]
    pub async fn cancel(&mut self, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.cancel_as(&Scope::Anonymous, hold_id).await
    }

    /// As [`BookingEngine::cancel_as`].
    pub async fn cancel_as(
        &mut self,
        scope: &Scope,
        hold_id: HoldId,
    ) -> Result<Hold, BookingError> {
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

    /// As [`BookingEngine::renew`]: an anonymous hold, for the engine's hold lifetime.
    #[deprecated(
        since = "0.2.0",
        note = "acts as an anonymous client: an owner's hold answers hold_not_found. Name the scope: `renew_as(&Scope::Anonymous, ..)`, `Scope::Owner(..)` or `Scope::BackOffice`"
    )]
    pub async fn renew(&mut self, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.renew_as(&Scope::Anonymous, hold_id, None).await
    }

    /// As [`BookingEngine::renew_as`].
    pub async fn renew_as(
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

    /// As [`BookingEngine::get_hold`]: an anonymous hold, seeing the transaction's own writes.
    #[deprecated(
        since = "0.2.0",
        note = "acts as an anonymous client: an owner's hold answers hold_not_found. Name the scope: `get_hold_as(&Scope::Anonymous, ..)`, `Scope::Owner(..)` or `Scope::BackOffice`"
    )]
    pub async fn get_hold(&mut self, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.get_hold_as(&Scope::Anonymous, hold_id).await
    }

    /// As [`BookingEngine::get_hold_as`], seeing the transaction's own writes.
    pub async fn get_hold_as(
        &mut self,
        scope: &Scope,
        hold_id: HoldId,
    ) -> Result<Hold, BookingError> {
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
        capacity: i32,
    ) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::ChangeCapacity)
            .slot(slot_id)
            .in_transaction();
        op.run(async {
            let capacity = checked_capacity(capacity)?;
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

    /// As [`BookingEngine::get_booking_as`], seeing the transaction's own writes.
    pub async fn get_booking_as(
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

    /// As [`BookingEngine::confirm_booking_as`].
    pub async fn confirm_booking_as(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        self.end_booking(scope, booking_id, HoldStatus::Confirmed)
            .await
    }

    /// As [`BookingEngine::cancel_booking_as`].
    pub async fn cancel_booking_as(
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

    /// As [`BookingEngine::renew_booking_as`].
    pub async fn renew_booking_as(
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
