//! The lines of a booking, below the writes that change them: a booking read by its key or
//! its id, and one change of all its lines. A hold's confirm, cancel or renewal changes every
//! line of the booking it belongs to, so both the hold writes (`writes`) and the booking
//! writes (`bookings`) change a booking of several lines here.
//!
//! A booking of several lines is one hold per line; `booking_id` is its first line's hold id on
//! every line (migration 3), and NULL on a plain hold, a booking of one line. A line's slot and
//! booking never change.
//!
//! Lock order: every line's slot row by ascending id, then their pools' rows by ascending id,
//! then the lines' rows (by hold id, which is
//! their slot order). A change is one conditional `UPDATE` of every line whose rows matched
//! decide: all of them, the change stays; none, nothing changed; some (which the locks rule
//! out), everything is undone.

use slot_booking::store::HoldChange;
use slot_booking::{
    Booking, Hold, HoldId, RenewRequest, Scope, SlotId, StoreError, Timestamp, Transition,
};
use sqlx::mysql::MySqlConnection;
use sqlx::AssertSqlSafe;

use crate::map_err;
use crate::rows::{hold_from_row, to_micros};
use crate::serve::{serve, Lines};
use crate::sql::Statements;
use crate::units::{give_back, lock_pools_of, lock_slot, log_hold, Step};

/// Every line of the booking (or the plain hold) whose first line has the idempotency `key`.
pub(crate) async fn booking_by_key(
    sql: &Statements,
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<Option<Booking>, StoreError> {
    let root: Option<i64> = sqlx::query_scalar(AssertSqlSafe(sql.booking_by_key.as_str()))
        .bind(key)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    match root {
        Some(root) => booking_by_id(sql, conn, HoldId(root), &Scope::BackOffice).await,
        None => Ok(None),
    }
}

/// Every line of the booking whose id is `booking_id`, if it exists in `scope`: a plain hold is
/// a booking of one line; the id of a line that is not the first is no booking's.
pub(crate) async fn booking_by_id(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking_id: HoldId,
    scope: &Scope,
) -> Result<Option<Booking>, StoreError> {
    let (any, owner) = scope.as_filter();
    let rows = sqlx::query(AssertSqlSafe(sql.booking_lines.as_str()))
        .bind(booking_id.get())
        .bind(booking_id.get())
        .bind(any)
        .bind(owner)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let lines = rows.iter().map(hold_from_row).collect::<Result<_, _>>()?;
    Ok(Booking::of_lines(lines))
}

/// What the hold `hold_id` is part of: its slot and its booking's id (`None` for a plain
/// hold), both fixed when it was placed; `None` when there is no such hold.
pub(crate) async fn hold_place(
    sql: &Statements,
    conn: &mut MySqlConnection,
    hold_id: HoldId,
) -> Result<Option<(SlotId, Option<HoldId>)>, StoreError> {
    let row: Option<(i64, Option<i64>)> = sqlx::query_as(AssertSqlSafe(sql.hold_slot.as_str()))
        .bind(hold_id.get())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(row.map(|(slot, booking)| (SlotId(slot), booking.map(HoldId))))
}

/// A renewal's expiry parameters in microseconds: (now + lifetime, maximum life).
pub(crate) fn renewal_micros(request: &RenewRequest<'_>) -> Result<(i64, i64), StoreError> {
    let (lifetime, max_life) = request.micros()?;
    Ok((to_micros(request.now).saturating_add(lifetime), max_life))
}

/// Changes every line of the booking of several lines `booking_id` (its lines' slots locked by
/// ascending id, then its lines), in `scope`, at `now`: one event per line changed, by slot id,
/// and a cancel gives each line's units back. A renewal with nothing to move is applied,
/// unchanged, with no event.
pub(crate) async fn change_booking(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking_id: HoldId,
    scope: &Scope,
    now: Timestamp,
    change: HoldChange<'_>,
) -> Result<Step<Transition<Booking>>, StoreError> {
    let slots: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.booking_slots.as_str()))
        .bind(booking_id.get())
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    for slot in &slots {
        lock_slot(sql, conn, SlotId(*slot)).await?;
    }
    let locked: Vec<SlotId> = slots.iter().map(|slot| SlotId(*slot)).collect();
    lock_pools_of(sql, conn, &locked).await?;
    let rows = sqlx::query(AssertSqlSafe(sql.lock_booking_lines.as_str()))
        .bind(booking_id.get())
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let locked = rows
        .iter()
        .map(hold_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let Some(before) = Booking::of_lines(locked) else {
        return Ok(Step::keep(Transition::NotFound));
    };
    if !before.lines.iter().all(|line| scope.admits(line)) {
        return Ok(Step::keep(Transition::NotFound));
    }
    let (any, owner) = scope.as_filter();
    let at = to_micros(now);
    let update = match change {
        HoldChange::Confirm => sqlx::query(AssertSqlSafe(sql.confirm_booking.as_str()))
            .bind(at)
            .bind(booking_id.get())
            .bind(at)
            .bind(any)
            .bind(owner),
        HoldChange::Cancel => sqlx::query(AssertSqlSafe(sql.cancel_booking.as_str()))
            .bind(at)
            .bind(booking_id.get())
            .bind(at)
            .bind(any)
            .bind(owner),
        HoldChange::Renew(request) => {
            let (wanted, max_life) = renewal_micros(request)?;
            sqlx::query(AssertSqlSafe(sql.renew_booking.as_str()))
                .bind(wanted)
                .bind(max_life)
                .bind(booking_id.get())
                .bind(at)
                .bind(any)
                .bind(owner)
                .bind(wanted)
                .bind(max_life)
        }
    };
    let matched = update.execute(&mut *conn).await.map_err(map_err)?;
    let lines = before.lines.len() as u64;
    if matched.rows_affected() == lines {
        let after = booking_by_id(sql, conn, booking_id, &Scope::BackOffice)
            .await?
            .ok_or_else(|| StoreError::failed("a booking changed, then not found"))?;
        let mut lines = Lines::new();
        for line in &after.lines {
            if change.gives_back() {
                give_back(sql, conn, i64::from(line.quantity), line.slot_id.get()).await?;
                lines.slot_and_pools(sql, conn, line.slot_id).await?;
            }
            log_hold(sql, conn, change.event(), line, now).await?;
        }
        if change.gives_back() {
            serve(sql, conn, lines, now).await?;
        }
        return Ok(Step::keep(Transition::Applied(after)));
    }
    if matched.rows_affected() != 0 {
        // Some lines but not all: the change of a booking is whole or nothing.
        return Ok(Step::undo(Transition::NotApplied(before)));
    }
    if let HoldChange::Renew(request) = change {
        if renewal_unmoved(sql, conn, booking_id, scope, request).await? == lines {
            return Ok(Step::keep(Transition::Applied(before)));
        }
    }
    Ok(Step::keep(Transition::NotApplied(before)))
}

/// How many lines of the booking a renewal finds renewable but would not move (already at
/// their maximum life).
async fn renewal_unmoved(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking_id: HoldId,
    scope: &Scope,
    request: &RenewRequest<'_>,
) -> Result<u64, StoreError> {
    let (wanted, max_life) = renewal_micros(request)?;
    let (any, owner) = scope.as_filter();
    let rows = sqlx::query(AssertSqlSafe(sql.renew_booking_unmoved.as_str()))
        .bind(booking_id.get())
        .bind(to_micros(request.now))
        .bind(any)
        .bind(owner)
        .bind(wanted)
        .bind(max_life)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(rows.len() as u64)
}

/// A whole booking's transition as the transition of its line `hold_id`.
pub(crate) fn line_transition(
    transition: Transition<Booking>,
    hold_id: HoldId,
) -> Result<Transition, StoreError> {
    let line = |booking: Booking| -> Result<Hold, StoreError> {
        booking
            .lines
            .into_iter()
            .find(|line| line.hold_id == hold_id)
            .ok_or_else(|| StoreError::failed(format!("hold {hold_id} is not its booking's")))
    };
    Ok(match transition {
        Transition::Applied(booking) => Transition::Applied(line(booking)?),
        Transition::NotApplied(booking) => Transition::NotApplied(line(booking)?),
        Transition::NotFound => Transition::NotFound,
    })
}
