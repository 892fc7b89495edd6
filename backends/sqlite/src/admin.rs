//! Slot administration: closing and reopening sales, changing a capacity and removing a slot,
//! each taking only free units, on the one write path ([`Run`]).

use super::*;
use crate::rows::usage_from_row;
use crate::run::{finish, Run, Step};
use crate::serve::serve;
use crate::units::{log_slot, reclaim, Query};
use slot_booking::{CapacityChange, SlotChange};
use sqlx::Connection;

impl Run<'_> {
    pub(crate) async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let conn = unit.connection();
        // Read in the unit of work (the store's one writer holds the write lock): the slot
        // before the change, to serve its line only when the change gave it units or changed
        // its capacity, as every store does.
        let step = match live_slot(&sql, conn, slot_id).await {
            Ok(before) => match change_capacity(&sql, conn, slot_id, change, now).await {
                Ok(step) => {
                    let gave = |after: &Slot| {
                        before.as_ref().is_some_and(|b| {
                            after.capacity != b.capacity
                                || after.stored_remaining > b.stored_remaining
                        })
                    };
                    served_after(&sql, conn, step, now, gave).await
                }
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn set_closed(
        &mut self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let conn = unit.connection();
        let step = match live_slot(&sql, conn, slot_id).await {
            Ok(before) => match set_closed(&sql, conn, slot_id, closed, now).await {
                // Reopened: units freed while sales were closed go to the line now (its
                // entries are back in its pools' lines too). Closed: its entries leave its
                // pools' lines, whose next heads may be ready.
                Ok(step) if before.as_ref().is_some_and(|b| b.closed != closed) => {
                    served_after(&sql, conn, step, now, |_| true).await
                }
                other => other,
            },
            Err(error) => Err(error),
        };
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn remove_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let conn = unit.connection();
        // Removed, its entries leave its pools' lines, whose next heads may be ready: they
        // are served after the change (its own line no longer sells).
        let step = match remove_slot(&sql, conn, slot_id, now).await {
            Ok(step) => served_after(&sql, conn, step, now, |_| true).await,
            Err(error) => Err(error),
        };
        Ok(Decided::new(now, unit.finish(step).await?))
    }
}

/// After an administrative change of a slot that applied and `gave` it something (a capacity
/// changed, units given back, sales reopened or closed, the slot removed), serves the slot's
/// line and its pools' lines in the same unit of work: a raise, the expired holds the change
/// reclaimed, or reopened sales may let its head in; closed sales or a removal take its
/// entries out of its pools' lines, whose next heads may be ready. The answer is the change itself,
/// as every store answers it: the slot before the line took any units.
async fn served_after(
    sql: &Statements,
    conn: &mut SqliteConnection,
    step: Step<SlotChange>,
    now: Timestamp,
    gave: impl Fn(&Slot) -> bool,
) -> Result<Step<SlotChange>, StoreError> {
    if let SlotChange::Applied(slot) = step.value() {
        if gave(slot) {
            serve(sql, conn, slot.slot_id, now).await?;
        }
    }
    Ok(step)
}

/// Closes or reopens a slot's sales: one conditional update, which changes the row (and then
/// appends `slot_closed` or `slot_reopened`) only if the sales are not already as asked. When
/// it changes nothing, the slot read in the same unit of work says whether it already was
/// (applied, no event) or is not there.
pub(crate) async fn set_closed(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    closed: bool,
    now: Timestamp,
) -> Result<Step<SlotChange>, StoreError> {
    let updated = sqlx::query(AssertSqlSafe(sql.set_closed.as_str()))
        .bind(slot_id.get())
        .bind(closed)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    if let Some(row) = updated {
        let slot = slot_from_row(&row)?;
        let kind = if closed {
            EventKind::SlotClosed
        } else {
            EventKind::SlotReopened
        };
        log_slot(sql, conn, kind, &slot, now).await?;
        return Ok(Step::keep(SlotChange::Applied(slot)));
    }
    Ok(Step::keep(match live_slot(sql, conn, slot_id).await? {
        Some(slot) => SlotChange::Applied(slot),
        None => SlotChange::NotFound,
    }))
}

/// The slot as stored, unless there is none or it has been removed.
pub(crate) async fn live_slot(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
) -> Result<Option<Slot>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(sql.slot_by_id.as_str()))
        .bind(slot_id.get())
        .fetch_optional(conn)
        .await
        .map_err(map_err)?;
    Ok(row
        .as_ref()
        .map(slot_from_row)
        .transpose()?
        .filter(|slot| slot.removed_at.is_none()))
}

/// Changes a slot's capacity, taking free units only.
pub(crate) async fn change_capacity(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    change: CapacityChange,
    now: Timestamp,
) -> Result<Step<SlotChange>, StoreError> {
    let terms = change.terms();
    let update = || {
        sqlx::query(AssertSqlSafe(sql.change_capacity.as_str()))
            .bind(slot_id.get())
            .bind(terms.keep)
            .bind(terms.add)
            .bind(terms.expected)
    };
    let change = AdminChange {
        kind: EventKind::SlotCapacityChanged,
        already: |slot: &Slot| change.leaves(slot.capacity),
        update,
    };
    change_taking_free_units(sql, conn, slot_id, now, change).await
}

/// Archives a slot no unit of which is held or confirmed.
pub(crate) async fn remove_slot(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Step<SlotChange>, StoreError> {
    let micros = to_micros(now);
    let update = || {
        sqlx::query(AssertSqlSafe(sql.remove_slot.as_str()))
            .bind(slot_id.get())
            .bind(micros)
    };
    let change = AdminChange {
        kind: EventKind::SlotRemoved,
        // A removed slot is not found: a live one always has something to change.
        already: |_: &Slot| false,
        update,
    };
    change_taking_free_units(sql, conn, slot_id, now, change).await
}

/// An administrative change of a slot row that may only take free units.
pub(crate) struct AdminChange<A, U> {
    /// The event a change appends.
    kind: EventKind,
    /// Whether the slot, as stored, already is as asked (the update then changes no row).
    already: A,
    /// Builds the conditional update, which returns the slot it changed.
    update: U,
}

/// Applies an administrative change of a slot row that may only take free units
/// (`change_capacity`, `remove_slot`):
///
/// 1. the update as the slot is stored; a row changed appends the change's event;
/// 2. if that changed no row, the slot read in the same unit of work says whether it is not
///    there (no such slot, or removed) or already as asked (applied, no event, no reclaim);
/// 3. otherwise the slot's expired holds are reclaimed under a savepoint (one `hold_expired`
///    event each) and the update runs again; if it still changes no row the savepoint is
///    rolled back, events included, so a refused change reclaims nothing (and the units read
///    next still count those holds as expired);
/// 4. refused: the slot's units, read in the same unit of work, say whether it is in use or
///    not there.
pub(crate) async fn change_taking_free_units<'q, A, U>(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    now: Timestamp,
    change: AdminChange<A, U>,
) -> Result<Step<SlotChange>, StoreError>
where
    A: Fn(&Slot) -> bool,
    U: Fn() -> Query<'q>,
{
    let AdminChange {
        kind,
        already,
        update,
    } = change;
    let mut changed = update().fetch_optional(&mut *conn).await.map_err(map_err)?;
    if changed.is_none() {
        match live_slot(sql, conn, slot_id).await? {
            None => return Ok(Step::undo(SlotChange::NotFound)),
            Some(slot) if already(&slot) => return Ok(Step::keep(SlotChange::Applied(slot))),
            Some(_) => {}
        }
        // Always a savepoint: the caller runs this inside a unit of work.
        let mut savepoint = Connection::begin(&mut *conn).await.map_err(map_err)?;
        let retried = update_after_reclaim(sql, &mut savepoint, slot_id, now, &update).await;
        changed = finish(
            savepoint,
            retried.map(|row| match row {
                Some(row) => Step::keep(Some(row)),
                None => Step::undo(None),
            }),
        )
        .await?;
    }
    if let Some(row) = changed {
        let slot = slot_from_row(&row)?;
        log_slot(sql, conn, kind, &slot, now).await?;
        return Ok(Step::keep(SlotChange::Applied(slot)));
    }
    let usage = sqlx::query(AssertSqlSafe(sql.slot_usage.as_str()))
        .bind(to_micros(now))
        .bind(slot_id.get())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(usage_from_row)
        .transpose()?;
    let change = match usage {
        Some(usage) if usage.slot.removed_at.is_none() => SlotChange::InUse(usage),
        _ => SlotChange::NotFound,
    };
    Ok(Step::undo(change))
}

/// Step 2 of [`change_taking_free_units`]: the slot's expired holds reclaimed, the update run
/// again; the changed row, if it changed one.
pub(crate) async fn update_after_reclaim<'q>(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    now: Timestamp,
    update: &impl Fn() -> Query<'q>,
) -> Result<Option<sqlx::sqlite::SqliteRow>, StoreError> {
    let reclaimed = reclaim(sql, &sql.reclaim_expired, conn, slot_id.get(), now).await?;
    // Nothing reclaimed: the slot is as it was, and the update would change nothing again.
    if reclaimed.is_empty() {
        return Ok(None);
    }
    update().fetch_optional(conn).await.map_err(map_err)
}
