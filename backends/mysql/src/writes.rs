//! Every write of the hold lifecycle as statements on one connection inside a transaction,
//! answering with a [`Step`]: its outcome and whether its writes stay. [`finish`] commits or
//! rolls back as the step says, and the store answers only once that succeeded
//! ([`in_transaction!`](crate::retry::in_transaction) retries a step that lost a conflict).
//!
//! Lock order: a write takes a slot's row before any hold of that slot, and several slots by
//! ascending id, so two writes never wait for each other in turn.
//!
//! A confirm, cancel or renewal of a hold that is a line of a booking of several lines changes
//! every line of that booking, whole or not at all (`lines::change_booking`); a plain hold's is
//! the one conditional update of its row here.

use slot_booking::events::NewEvent;
use slot_booking::store::HoldChange;
use slot_booking::{
    EventKind, HoldId, NewSlot, RenewRequest, ResourceId, Scope, Slot, SlotId, SlotLimits,
    StoreError, Timestamp, Transition,
};
use sqlx::mysql::MySqlConnection;
use sqlx::AssertSqlSafe;

use crate::lines::{change_booking, hold_place, line_transition, renewal_micros};
use crate::map_err;
use crate::rows::{from_micros, hold_from_row, to_micros};
use crate::serve::{serve, Lines};
use crate::sql::Statements;
pub(crate) use crate::units::{
    append_event, gave_back, hold_by_id, lock_slot, log_hold, not_applied, reclaim_slot, Step,
};
use crate::units::{give_back, id_of, lock_pools_of};

/// Stores a new slot and appends its `slot_created` event at `now`.
pub(crate) async fn create_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    new: &NewSlot,
    now: Timestamp,
) -> Result<Step<Slot>, StoreError> {
    let inserted = sqlx::query(AssertSqlSafe(sql.create_slot.as_str()))
        .bind(to_micros(new.starts_at))
        .bind(to_micros(new.ends_at))
        .bind(new.capacity)
        .bind(new.capacity)
        .bind(new.resource.as_ref().map(ResourceId::as_str))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    let slot = Slot {
        slot_id: SlotId(id_of(inserted)?),
        starts_at: new.starts_at,
        ends_at: new.ends_at,
        capacity: new.capacity,
        stored_remaining: new.capacity,
        resource: new.resource.clone(),
        closed: false,
        removed_at: None,
    };
    let event = NewEvent::of_slot(EventKind::SlotCreated, slot.slot_id, slot.capacity, now);
    append_event(sql, conn, &event).await?;
    Ok(Step::keep(slot))
}

/// Takes `units` from a pool by its conditional decrement, whoever waits: whether one row
/// matched.
pub(crate) async fn take_pool(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    units: i64,
) -> Result<bool, StoreError> {
    let taken = sqlx::query(AssertSqlSafe(sql.pools.take_pool.as_str()))
        .bind(units)
        .bind(pool)
        .bind(units)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(taken.rows_affected() == 1)
}

/// A slot's limits, as stored now.
pub(crate) async fn slot_limits(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<Option<SlotLimits>, StoreError> {
    let limits: Option<(i64, i32, bool, Option<i64>)> =
        sqlx::query_as(AssertSqlSafe(sql.slot_limits.as_str()))
            .bind(slot_id.get())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    Ok(match limits {
        Some((starts_at, capacity, closed, removed_at)) => Some(SlotLimits {
            starts_at: from_micros(starts_at)?,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        None => None,
    })
}

/// Confirms the active held hold `hold_id` in `scope`, with every line of its booking.
pub(crate) async fn confirm(
    sql: &Statements,
    conn: &mut MySqlConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    match hold_place(sql, conn, hold_id).await? {
        None => Ok(Step::keep(Transition::NotFound)),
        Some((_, Some(booking))) => {
            let change = HoldChange::Confirm;
            by_booking(sql, conn, booking, hold_id, scope, now, change).await
        }
        Some((_, None)) => confirm_hold(sql, conn, hold_id, scope, now).await,
    }
}

/// Cancels the active held or the confirmed hold `hold_id` in `scope`, with every line of its
/// booking, giving their units back.
pub(crate) async fn cancel(
    sql: &Statements,
    conn: &mut MySqlConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    match hold_place(sql, conn, hold_id).await? {
        None => Ok(Step::keep(Transition::NotFound)),
        Some((_, Some(booking))) => {
            let change = HoldChange::Cancel;
            by_booking(sql, conn, booking, hold_id, scope, now, change).await
        }
        Some((slot_id, None)) => cancel_hold(sql, conn, slot_id, hold_id, scope, now).await,
    }
}

/// Renews the active held hold `hold_id`, with every line of its booking.
pub(crate) async fn renew(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition>, StoreError> {
    let hold_id = request.hold_id;
    match hold_place(sql, conn, hold_id).await? {
        None => Ok(Step::keep(Transition::NotFound)),
        Some((_, Some(booking))) => {
            let (scope, now, change) = (request.scope, request.now, HoldChange::Renew(request));
            by_booking(sql, conn, booking, hold_id, scope, now, change).await
        }
        Some((_, None)) => renew_hold(sql, conn, request).await,
    }
}

/// A hold change of the line `hold_id` of a booking of several lines: the whole booking's.
async fn by_booking(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking: HoldId,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
    change: HoldChange<'_>,
) -> Result<Step<Transition>, StoreError> {
    let step = change_booking(sql, conn, booking, scope, now, change).await?;
    step.try_map(|transition| line_transition(transition, hold_id))
}

/// Confirms the active held plain hold `hold_id` in `scope`.
pub(crate) async fn confirm_hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let (any, owner) = scope.as_filter();
    let confirmed = sqlx::query(AssertSqlSafe(sql.confirm.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(to_micros(now))
        .bind(any)
        .bind(owner)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    changed(
        sql,
        conn,
        confirmed.rows_affected(),
        hold_id,
        scope,
        HoldChange::Confirm,
        now,
    )
    .await
}

/// Cancels the active held or the confirmed plain hold `hold_id` of the slot `slot_id` in
/// `scope`, giving its units back: its slot's row locked first, then the hold's.
pub(crate) async fn cancel_hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    lock_slot(sql, conn, slot_id).await?;
    lock_pools_of(sql, conn, &[slot_id]).await?;
    let (any, owner) = scope.as_filter();
    let cancelled = sqlx::query(AssertSqlSafe(sql.cancel.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(to_micros(now))
        .bind(any)
        .bind(owner)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    let step = changed(
        sql,
        conn,
        cancelled.rows_affected(),
        hold_id,
        scope,
        HoldChange::Cancel,
        now,
    )
    .await?;
    if let Transition::Applied(hold) = step.value() {
        give_back(sql, conn, i64::from(hold.quantity), slot_id.get()).await?;
        let mut lines = Lines::new();
        lines.slot_and_pools(sql, conn, slot_id).await?;
        serve(sql, conn, lines, now).await?;
    }
    Ok(step)
}

/// Renews the active held plain hold `hold_id`: the update matches only when the renewal moves the
/// expiry (and then appends `hold_renewed`); otherwise a read with the same parameters tells a
/// renewal with nothing to move (applied, unchanged, no event) from a refusal.
pub(crate) async fn renew_hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition>, StoreError> {
    let (wanted, max_life) = renewal_micros(request)?;
    let now = to_micros(request.now);
    let (any, owner) = request.scope.as_filter();
    let renewed = sqlx::query(AssertSqlSafe(sql.renew.as_str()))
        .bind(wanted)
        .bind(max_life)
        .bind(request.hold_id.get())
        .bind(now)
        .bind(any)
        .bind(owner)
        .bind(wanted)
        .bind(max_life)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if renewed.rows_affected() == 1 {
        return changed(
            sql,
            conn,
            1,
            request.hold_id,
            request.scope,
            HoldChange::Renew(request),
            request.now,
        )
        .await;
    }
    let unmoved = sqlx::query(AssertSqlSafe(sql.renew_unmoved.as_str()))
        .bind(request.hold_id.get())
        .bind(now)
        .bind(any)
        .bind(owner)
        .bind(wanted)
        .bind(max_life)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let transition = match unmoved {
        Some(row) => Transition::Applied(hold_from_row(&row)?),
        None => not_applied(hold_by_id(sql, conn, request.hold_id, request.scope).await?),
    };
    Ok(Step::keep(transition))
}

/// After a conditional update of the hold `hold_id`: when it matched, the hold as it is now
/// (read in the same transaction, which holds its row) with the change's event; otherwise the
/// hold as it is, or not found in the scope.
async fn changed(
    sql: &Statements,
    conn: &mut MySqlConnection,
    matched: u64,
    hold_id: HoldId,
    scope: &Scope,
    change: HoldChange<'_>,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let hold = hold_by_id(sql, conn, hold_id, &Scope::BackOffice).await?;
    if matched == 1 {
        let hold = hold.ok_or_else(|| StoreError::failed("a hold changed, then not found"))?;
        log_hold(sql, conn, change.event(), &hold, now).await?;
        return Ok(Step::keep(Transition::Applied(hold)));
    }
    Ok(Step::keep(not_applied(hold.filter(|h| scope.admits(h)))))
}
