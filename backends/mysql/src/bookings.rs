//! Bookings of several lines: the store's [`BookingStore`], every line taken or none, and ended
//! together.
//!
//! A booking of N lines is N hold rows inserted in one transaction in slot id order, so the
//! first line gets the lowest id, which is the booking's id and every line's `booking_id`.
//! Only the first line carries the client's idempotency key (its unique constraint refuses a
//! second booking or hold with it); each later line carries a key of the store's own
//! ([`line_key`](slot_booking::store::line_key)), since the column is `NOT NULL` and unique.
//!
//! **Placing a booking** is the core's rule ([`place_booking`]) on the store's placement
//! primitives (`place.rs`): every line's slot row locked by ascending id, then every pool of
//! them, then each line placed (its units taken from its slot and pools, its row inserted).
//!
//! **Changing a booking** (confirm, cancel, renew, by its id or by a hold change of any line)
//! is the `lines` module's whole-booking change.

use slot_booking::store::{booking_key_answer, place_booking, HoldChange, Placing};
use slot_booking::{
    Booking, BookingOutcome, BookingRequest, Decided, HoldId, RenewRequest, Scope, SlotId,
    StoreError, Timestamp, Transition,
};
use sqlx::mysql::MySqlConnection;

use crate::kernel::Kernel;
use crate::lines::{booking_by_id, change_booking, hold_place};
use crate::retry::reading;
use crate::run::{in_unit, Run};
use crate::sql::Statements;
use crate::units::Step;
use crate::writes::{cancel_hold, confirm_hold, renew_hold};

/// What a booking id names, for the whole-booking changes.
enum Target {
    None,
    /// A plain hold (a booking of one line), of this slot.
    Hold(SlotId),
    /// A booking of several lines.
    Booking,
}

async fn target(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking_id: HoldId,
) -> Result<Target, StoreError> {
    Ok(match hold_place(sql, conn, booking_id).await? {
        Some((slot_id, None)) => Target::Hold(slot_id),
        Some((_, Some(booking))) if booking == booking_id => Target::Booking,
        // A later line's id, or none.
        _ => Target::None,
    })
}

/// A plain hold's transition as its booking's.
fn of_hold(step: Step<Transition>) -> Result<Step<Transition<Booking>>, StoreError> {
    step.try_map(|transition| {
        Ok(match transition {
            Transition::Applied(hold) => Transition::Applied(Booking::of_hold(hold)),
            Transition::NotApplied(hold) => Transition::NotApplied(Booking::of_hold(hold)),
            Transition::NotFound => Transition::NotFound,
        })
    })
}

/// Confirms, cancels or renews a whole booking, or a plain hold as the booking of one line.
async fn change(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking_id: HoldId,
    scope: &Scope,
    now: Timestamp,
    change: HoldChange<'_>,
) -> Result<Step<Transition<Booking>>, StoreError> {
    match target(sql, conn, booking_id).await? {
        Target::None => Ok(Step::keep(Transition::NotFound)),
        Target::Booking => change_booking(sql, conn, booking_id, scope, now, change).await,
        Target::Hold(slot_id) => of_hold(match change {
            HoldChange::Confirm => confirm_hold(sql, conn, booking_id, scope, now).await?,
            HoldChange::Cancel => cancel_hold(sql, conn, slot_id, booking_id, scope, now).await?,
            HoldChange::Renew(request) => renew_hold(sql, conn, request).await?,
        }),
    }
}

impl Run<'_> {
    /// A booking, placed by the core's rule ([`place_booking`]) in a unit of work; when a pool
    /// is short, the pools' reclaim in a unit of its own and the booking once more.
    pub(crate) async fn create_booking(
        &mut self,
        request: BookingRequest<'_>,
    ) -> Result<Decided<BookingOutcome>, StoreError> {
        let sql = self.statements();
        let request = &request;
        let mut refilled = false;
        loop {
            let placing = in_unit!(self, |conn| async move {
                place_booking(&mut Kernel { sql, conn }, request, refilled).await
            })?;
            let outcome = match placing {
                Placing::Done(outcome) => outcome,
                Placing::KeyTaken => {
                    booking_key_answer(request, self.key_holder(request.key).await?)
                }
                Placing::Refill(pools) => {
                    self.refill(&pools, request.now).await?;
                    refilled = true;
                    continue;
                }
            };
            return Ok(Decided::new(request.now, outcome));
        }
    }

    pub(crate) async fn get_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Booking>>, StoreError> {
        let sql = self.statements();
        let booking = reading!(self, |conn| booking_by_id(sql, conn, booking_id, scope))?;
        Ok(Decided::new(now, booking))
    }

    pub(crate) async fn confirm_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        self.change_booking(booking_id, scope, now, HoldChange::Confirm)
            .await
    }

    pub(crate) async fn cancel_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        self.change_booking(booking_id, scope, now, HoldChange::Cancel)
            .await
    }

    pub(crate) async fn renew_booking(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let (id, scope, now) = (request.hold_id, request.scope, request.now);
        self.change_booking(id, scope, now, HoldChange::Renew(&request))
            .await
    }

    /// Confirms, cancels or renews a booking (a plain hold as the booking of one line).
    async fn change_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        what: HoldChange<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let sql = self.statements();
        let done = in_unit!(self, |conn| change(sql, conn, booking_id, scope, now, what))?;
        Ok(Decided::new(now, done))
    }
}
