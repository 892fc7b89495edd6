//! Bookings of several lines (migration 8): the store's [`BookingStore`], on the one write
//! path ([`Run`]) that serves the pool and the caller's transaction alike.
//!
//! A booking of N lines is N hold rows, placed in one unit of work by the core's rule
//! ([`place_booking`]) on the store's placement primitives (`place.rs`): each line's insert
//! takes its units and appends its `hold_placed` event in the same statement.
//!
//! Every change of an existing hold (confirm, cancel, renew, through the store or on the
//! caller's connection) is one `UPDATE … RETURNING` of every line of the booking the hold
//! belongs to, guarded so that it changes every line or none ([`change_lines`]).

use slot_booking::store::{booking_key_answer, place_booking, HoldChange, PlaceKernel, Placing};
use slot_booking::{
    Booking, BookingOutcome, BookingRequest, Decided, Hold, HoldId, RenewRequest, Scope,
    StoreError, Timestamp, Transition,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::AssertSqlSafe;
use std::sync::Arc;

use crate::kernel::Kernel;
use crate::lines::change_lines;
use crate::map_err;
use crate::place::REFILLED_IN_PLACE;
use crate::reads::booking_by_id;
use crate::rows::{hold_from_row, to_micros};
use crate::run::{Run, Step};
use crate::sql::Statements;
use crate::writes::Renewal;

/// A whole booking's change by the rows it returned: applied, or (nothing changed) the
/// booking as it is now in `scope`, or not found.
async fn booking_transition(
    sql: &Statements,
    conn: &mut SqliteConnection,
    lines: Vec<Hold>,
    booking_id: HoldId,
    scope: &Scope,
) -> Result<Transition<Booking>, StoreError> {
    if let Some(booking) = Booking::of_lines(lines) {
        return Ok(Transition::Applied(booking));
    }
    Ok(match booking_by_id(sql, conn, booking_id, scope).await? {
        Some(booking) => Transition::NotApplied(booking),
        None => Transition::NotFound,
    })
}

/// Confirms (`change` [`HoldChange::Confirm`], with `statement` `confirm_booking`) or cancels
/// ([`HoldChange::Cancel`], `cancel_booking`, giving each line's units back) every line of the
/// booking `booking_id` (see [`change_lines`]).
async fn end_booking(
    sql: &Statements,
    conn: &mut SqliteConnection,
    statement: &str,
    change: HoldChange<'_>,
    booking_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition<Booking>>, StoreError> {
    let (any, owner) = scope.as_filter();
    let update = sqlx::query(AssertSqlSafe(statement))
        .bind(to_micros(now))
        .bind(booking_id.get())
        .bind(any)
        .bind(owner);
    let lines = change_lines(sql, conn, update, change, now).await?;
    let transition = booking_transition(sql, conn, lines, booking_id, scope).await?;
    Ok(Step::keep(transition))
}

/// Renews every line of the booking `request.hold_id`; a renewal with nothing to move is
/// applied, unchanged, as for a hold.
async fn renew_booking(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition<Booking>>, StoreError> {
    let renewal = Renewal::of(request)?;
    let update = renewal.bind(&sql.renew_booking);
    let lines = change_lines(sql, conn, update, HoldChange::Renew(request), request.now).await?;
    if let Some(booking) = Booking::of_lines(lines) {
        return Ok(Step::keep(Transition::Applied(booking)));
    }
    let rows = renewal
        .bind(&sql.renew_booking_unmoved)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let unmoved = rows.iter().map(hold_from_row).collect::<Result<_, _>>()?;
    if let Some(booking) = Booking::of_lines(unmoved) {
        return Ok(Step::keep(Transition::Applied(booking)));
    }
    let transition =
        booking_transition(sql, conn, Vec::new(), request.hold_id, request.scope).await?;
    Ok(Step::keep(transition))
}

impl Run<'_> {
    /// A booking, placed by the core's rule ([`place_booking`]) in a unit of work of its own.
    pub(crate) async fn create_booking(
        &mut self,
        request: BookingRequest<'_>,
    ) -> Result<Decided<BookingOutcome>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let kernel = &mut Kernel {
            sql: &sql,
            conn: unit.connection(),
        };
        let step = place_booking(kernel, &request, false).await;
        let outcome = match unit.finish(step).await? {
            Placing::Done(outcome) => outcome,
            Placing::KeyTaken => {
                let mut conn = self.conn().await?;
                let reader = &mut Kernel {
                    sql: &sql,
                    conn: &mut conn,
                };
                booking_key_answer(&request, reader.key_holder(request.key.as_str()).await?)
            }
            Placing::Refill(_) => return Err(StoreError::failed(REFILLED_IN_PLACE)),
        };
        Ok(Decided::new(request.now, outcome))
    }

    pub(crate) async fn get_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Booking>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        let booking = booking_by_id(&sql, &mut conn, booking_id, scope).await?;
        Ok(Decided::new(now, booking))
    }

    pub(crate) async fn confirm_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        self.end_booking(HoldChange::Confirm, booking_id, scope, now)
            .await
    }

    pub(crate) async fn cancel_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        self.end_booking(HoldChange::Cancel, booking_id, scope, now)
            .await
    }

    /// Confirms or cancels (`change`) a whole booking in a unit of work of its own.
    async fn end_booking(
        &mut self,
        change: HoldChange<'_>,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let statement = match change {
            HoldChange::Confirm => &sql.confirm_booking,
            _ => &sql.cancel_booking,
        };
        let mut unit = self.unit().await?;
        let conn = unit.connection();
        let step = end_booking(&sql, conn, statement, change, booking_id, scope, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn renew_booking(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = renew_booking(&sql, unit.connection(), &request).await;
        Ok(Decided::new(request.now, unit.finish(step).await?))
    }
}
