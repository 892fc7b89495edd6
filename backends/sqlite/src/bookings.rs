//! Bookings of several lines (migration 8): the store's [`BookingStore`], on the one write
//! path ([`Run`]) that serves the pool and the caller's transaction alike.
//!
//! A booking of N lines is N hold rows, inserted in one unit of work in slot id order, so the
//! first line gets the lowest id, which is the booking's id and the `booking_id` of every line.
//! Only the first line carries the client's idempotency key; each other line carries a key of
//! the store's own (see [`line_key`]), since the column is `NOT NULL` and unique. Each line's
//! insert is its conditional decrement (the `holds_take_a_unit` trigger), and appends its
//! `hold_placed` event (the `holds_placed_event` trigger) in the same statement.
//!
//! Every change of an existing hold (confirm, cancel, renew, through the store or on the
//! caller's connection) is one `UPDATE … RETURNING` of every line of the booking the hold
//! belongs to, guarded so that it changes every line or none ([`change_lines`]).

use slot_booking::store::LineState;
use slot_booking::store::{take_with_refill, Attempt, HoldChange};
use slot_booking::{
    Booking, BookingLine, BookingOutcome, BookingRequest, Decided, Hold, HoldId, PoolId,
    RenewRequest, Scope, SlotLimits, StoreError, Timestamp, Transition,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::AssertSqlSafe;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::group::Insert;
use crate::lines::change_lines;
use crate::map_err;
use crate::pools::pool_usage;
use crate::reads::{booking_by_id, booking_by_key};
use crate::rows::{from_micros, hold_from_row, to_micros};
use crate::run::{Run, Step};
use crate::sql::Statements;
use crate::writes::{insert, Renewal, Retake, Taking};

/// The key of a line that is not its booking's first: a leading space (no stored client key
/// starts with one: a client's key is visible ASCII, and a key scoped to its owner starts with
/// the owner's id), the booking's id and the line's slot id, unique as the pair is. `booking` is `None` while the first line was not taken: the booking is refused then, and
/// the line's row rolled back.
pub(crate) fn line_key(booking: Option<HoldId>, line: &BookingLine) -> String {
    match booking {
        Some(booking) => format!(" line {}/{}", booking.get(), line.slot_id.get()),
        None => format!(" line -/{}", line.slot_id.get()),
    }
}

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

/// What one line's insert did.
enum LineInsert {
    /// The line's hold, its units taken.
    Taken(Hold),
    /// The line did not fit (or its slot does not sell).
    Short,
    /// The key is taken (only the first line's can be: see [`take_line`]).
    KeyInUse,
    /// The key is a waiting entry's (only the first line's can be).
    KeyWaits,
}

/// Inserts `line`'s hold (its conditional decrement); when it finds no unit for a reason the
/// statement could not settle, inserts it again by the core's rule ([`take_with_refill`]:
/// the slot's expired holds reclaimed, then a short pool's slots'). `key`
/// is the client's key for the first line, [`line_key`] for the others. The first line's key
/// was read free in this unit, under the write lock; it is taken at its insert only if that
/// read was somehow not the last word, and the unique key then refuses the insert.
async fn take_line(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &BookingRequest<'_>,
    line: &BookingLine,
    key: &str,
    booking: Option<HoldId>,
) -> Result<LineInsert, StoreError> {
    let taking = Taking::Line {
        request,
        line,
        key,
        booking,
    };
    let first = insert(sql, conn, &taking).await?;
    // Only a selling slot is reclaimed; the booking's unit of work is rolled back (and the
    // reclaims with it) if any line stays short.
    let last = take_with_refill(&mut Retake::new(sql, conn, taking), first).await?;
    Ok(match last {
        Attempt::Done(Insert::Created(hold)) => LineInsert::Taken(hold),
        Attempt::Done(Insert::KeyTaken) => LineInsert::KeyInUse,
        Attempt::Done(Insert::KeyWaits) => LineInsert::KeyWaits,
        // Settled inside the statement (nothing expired to reclaim), or still short.
        Attempt::Done(_) | Attempt::Short { .. } | Attempt::RefillApart => LineInsert::Short,
    })
}

/// [`BookingStore::create_booking`](slot_booking::BookingStore::create_booking) in the unit of
/// work `conn` is in: the key first, then each line's insert in slot id order (the request's
/// lines come so), then the first line marked as the booking's. Refused, its step undoes every
/// line taken and every reclaim.
pub(crate) async fn create_booking(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &BookingRequest<'_>,
) -> Result<Step<BookingOutcome>, StoreError> {
    // Read under the write lock the unit holds: no other writer can take the key before this
    // unit ends, and the first line's insert is under the unique key all the same.
    if let Some(holder) = booking_by_key(sql, &mut *conn, request.key.as_str()).await? {
        return Ok(Step::undo(BookingOutcome::refused(
            request,
            Some(holder),
            &[],
        )));
    }
    let mut taken: Vec<Option<Hold>> = Vec::with_capacity(request.lines.len());
    let mut booking: Option<HoldId> = None;
    for (i, line) in request.lines.iter().enumerate() {
        let key = if i == 0 {
            request.key.as_str().to_owned()
        } else {
            line_key(booking, line)
        };
        match take_line(sql, conn, request, line, &key, booking).await? {
            LineInsert::Taken(hold) => {
                if i == 0 {
                    booking = Some(hold.hold_id);
                }
                taken.push(Some(hold));
            }
            LineInsert::Short => taken.push(None),
            LineInsert::KeyInUse if i == 0 => {
                let holder = booking_by_key(sql, &mut *conn, request.key.as_str()).await?;
                let holder = holder.ok_or_else(|| {
                    StoreError::failed(
                        "a unique violation on the booking's key, but no hold has it",
                    )
                })?;
                return Ok(Step::undo(BookingOutcome::refused(
                    request,
                    Some(holder),
                    &[],
                )));
            }
            // A waiting entry's key: taken, by no hold or booking to show.
            LineInsert::KeyWaits if i == 0 => {
                return Ok(Step::undo(BookingOutcome::KeyReused(None)));
            }
            LineInsert::KeyInUse | LineInsert::KeyWaits => {
                return Err(StoreError::failed(format!(
                    "the line key {key:?} of a new booking is taken"
                )))
            }
        }
    }
    if taken.iter().all(Option::is_some) {
        let Some(booking_id) = booking else {
            return Err(StoreError::failed("a booking of no lines"));
        };
        let marked = sqlx::query(AssertSqlSafe(sql.mark_booking.as_str()))
            .bind(booking_id.get())
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        if marked.rows_affected() != 1 {
            return Err(StoreError::failed(
                "the first line of a new booking is gone",
            ));
        }
        let booking = Booking::of_lines(taken.into_iter().flatten().collect())
            .ok_or_else(|| StoreError::failed("a booking of no lines"))?;
        return Ok(Step::keep(BookingOutcome::Created(booking)));
    }
    // Some line is short: read each line's slot in this unit (every line taken still counts
    // its own units as free: they are given back with the rollback), then undo everything.
    let mut states = Vec::with_capacity(request.lines.len());
    for (line, hold) in request.lines.iter().zip(&taken) {
        let own = hold.as_ref().map_or(0, |hold| hold.quantity);
        states.push(line_state(sql, conn, line, request.now, own, hold.is_none()).await?);
    }
    let states = pool_line_states(sql, conn, request, &taken, states).await?;
    Ok(Step::undo(BookingOutcome::refused(request, None, &states)))
}

/// What the store reads of `line`'s slot after the booking was refused: its limits and the
/// units a hold could take, `own` (the line's own units, taken in this unit) counted free.
async fn line_state(
    sql: &Statements,
    conn: &mut SqliteConnection,
    line: &BookingLine,
    now: Timestamp,
    own: i32,
    failed: bool,
) -> Result<LineState, StoreError> {
    let row: Option<(i64, i32, bool, Option<i64>, i64)> =
        sqlx::query_as(AssertSqlSafe(sql.line_state.as_str()))
            .bind(line.slot_id.get())
            .bind(to_micros(now))
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    let Some((starts_at, capacity, closed, removed_at, free)) = row else {
        return Ok(LineState {
            line: *line,
            slot: None,
            free: 0,
            failed,
        });
    };
    let free = free.saturating_add(i64::from(own));
    Ok(LineState {
        line: *line,
        slot: Some(SlotLimits {
            starts_at: from_micros(starts_at)?,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        free: i32::try_from(free).unwrap_or(i32::MAX),
        failed,
    })
}

/// A refused booking's line states with its pools ([`LineState::within_pools`], as every
/// store explains one): each pool of the lines' slots read in this unit, the units the lines
/// taken in it on the pool's slots counted free (they go back with the rollback), as the
/// slots' own are.
pub(crate) async fn pool_line_states(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &BookingRequest<'_>,
    taken: &[Option<Hold>],
    states: Vec<LineState>,
) -> Result<Vec<LineState>, StoreError> {
    // Per pool, by id: the units the lines taken in this unit took from it.
    let mut own: BTreeMap<i64, i64> = BTreeMap::new();
    for (line, hold) in request.lines.iter().zip(taken) {
        let pools: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.pools.pools_of_slot.as_str()))
            .bind(line.slot_id.get())
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        for pool in pools {
            *own.entry(pool).or_default() += hold.as_ref().map_or(0, |h| i64::from(h.quantity));
        }
    }
    if own.is_empty() {
        return Ok(states);
    }
    let mut pools = Vec::with_capacity(own.len());
    for (pool_id, own) in own {
        if let Some(mut usage) = pool_usage(sql, conn, PoolId(pool_id), request.now).await? {
            let remaining = i64::from(usage.pool.stored_remaining) + own;
            usage.pool.stored_remaining = i32::try_from(remaining).unwrap_or(i32::MAX);
            pools.push(usage);
        }
    }
    Ok(states
        .into_iter()
        .map(|state| state.within_pools(request, &pools))
        .collect())
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
    pub(crate) async fn create_booking(
        &mut self,
        request: BookingRequest<'_>,
    ) -> Result<Decided<BookingOutcome>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = create_booking(&sql, unit.connection(), &request).await;
        Ok(Decided::new(request.now, unit.finish(step).await?))
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
