//! Slot administration: closing and reopening sales, changing a capacity and removing a slot,
//! each taking only free units, each one conditional update of the slot's row decided by the
//! rows it matched.

use slot_booking::{CapacityChange, EventKind, Slot, SlotChange, SlotId, StoreError, Timestamp};
use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Connection};

use crate::map_err;
use crate::rows::{slot_from_row, to_micros, usage_from_row};
use crate::serve::{serve, Lines};
use crate::sql::Statements;
use crate::writes::{append_event, finish, reclaim_slot, Step};
use slot_booking::events::NewEvent;

/// Closes or reopens a slot's sales: the update matches only when the sales are not already
/// as asked (and then appends `slot_closed` or `slot_reopened`). When it matches nothing, the
/// slot read in the same transaction says whether it already was (applied, no event) or is not
/// there.
pub(crate) async fn set_closed(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    closed: bool,
    now: Timestamp,
) -> Result<Step<SlotChange>, StoreError> {
    let updated = sqlx::query(AssertSqlSafe(sql.set_closed.as_str()))
        .bind(closed)
        .bind(slot_id.get())
        .bind(closed)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    let slot = live_slot(sql, conn, slot_id).await?;
    match slot {
        Some(slot) if updated.rows_affected() == 1 => {
            let kind = if closed {
                EventKind::SlotClosed
            } else {
                EventKind::SlotReopened
            };
            log_slot(sql, conn, kind, &slot, now).await?;
            serve_slot(sql, conn, slot_id, now).await?;
            Ok(Step::keep(SlotChange::Applied(slot)))
        }
        Some(slot) => Ok(Step::keep(SlotChange::Applied(slot))),
        None => Ok(Step::keep(SlotChange::NotFound)),
    }
}

/// Changes a slot's capacity, taking free units only.
pub(crate) async fn change_capacity(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    capacity: CapacityChange,
    now: Timestamp,
) -> Result<Step<SlotChange>, StoreError> {
    let change = AdminChange {
        kind: EventKind::SlotCapacityChanged,
        already: &|slot: &Slot| capacity.leaves(slot.capacity),
        statement: &sql.change_capacity,
        binds: Binds::Capacity(capacity),
    };
    change_taking_free_units(sql, conn, slot_id, now, change).await
}

/// Archives a slot no unit of which is held or confirmed.
pub(crate) async fn remove_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Step<SlotChange>, StoreError> {
    let change = AdminChange {
        kind: EventKind::SlotRemoved,
        // A removed slot is not found: a live one always has something to change.
        already: &|_: &Slot| false,
        statement: &sql.remove_slot,
        binds: Binds::Removal(now),
    };
    change_taking_free_units(sql, conn, slot_id, now, change).await
}

/// Binds a capacity change's statement (`change_capacity`, `change_pool_capacity`): the new
/// capacity's terms ([`CAPACITY_AFTER`](crate::fragments::CAPACITY_AFTER))
/// capacity's terms for each place `SET` names it, the row's id, the capacity expected twice,
/// then the terms for each later place the `WHERE` names the new capacity (`places` of them).
pub(crate) fn bind_capacity<'q>(
    query: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    change: slot_booking::CapacityChange,
    id: i64,
    places: usize,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let terms = change.terms();
    let mut query = query
        .bind(terms.keep)
        .bind(terms.add)
        .bind(terms.keep)
        .bind(terms.add)
        .bind(id)
        .bind(terms.expected)
        .bind(terms.expected);
    for _ in 0..places {
        query = query.bind(terms.keep).bind(terms.add);
    }
    query
}

/// The parameters of an administrative update, bound around the slot id.
#[derive(Clone, Copy)]
enum Binds {
    /// `change_capacity`: the change's binds around the slot id (`bind_capacity`).
    Capacity(CapacityChange),
    /// `remove_slot`: (now, slot id).
    Removal(Timestamp),
}

/// An administrative change of a slot row that may only take free units.
struct AdminChange<'a> {
    /// The event a change appends.
    kind: EventKind,
    /// Whether the slot, as stored, already is as asked (the update then matches nothing).
    already: &'a (dyn Fn(&Slot) -> bool + Sync),
    statement: &'a str,
    binds: Binds,
}

impl AdminChange<'_> {
    /// Runs the update: whether it matched the slot's row.
    async fn update(
        &self,
        conn: &mut MySqlConnection,
        slot_id: SlotId,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(AssertSqlSafe(self.statement));
        let query = match self.binds {
            Binds::Capacity(change) => bind_capacity(query, change, slot_id.get(), 3),
            Binds::Removal(now) => query.bind(to_micros(now)).bind(slot_id.get()),
        };
        let done = query.execute(conn).await.map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }
}

/// Applies an administrative change that may only take free units:
///
/// 1. the update as the slot is stored; a row matched appends the change's event;
/// 2. if it matched nothing, the slot read in the same transaction says whether it is not
///    there (or removed) or already as asked (applied, no event, no reclaim);
/// 3. otherwise the slot's expired holds are reclaimed under a savepoint (its row locked
///    first; one `hold_expired` event each) and the update runs again; if it still matches
///    nothing the savepoint is rolled back, so a refused change reclaims nothing;
/// 4. refused: the slot's units, read in the same transaction, say it is in use.
async fn change_taking_free_units(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    now: Timestamp,
    change: AdminChange<'_>,
) -> Result<Step<SlotChange>, StoreError> {
    let mut changed = change.update(conn, slot_id).await?;
    if !changed {
        match live_slot(sql, conn, slot_id).await? {
            None => return Ok(Step::undo(SlotChange::NotFound)),
            Some(slot) if (change.already)(&slot) => {
                return Ok(Step::keep(SlotChange::Applied(slot)))
            }
            Some(_) => {}
        }
        let mut savepoint = Connection::begin(&mut *conn).await.map_err(map_err)?;
        let retried = async {
            let reclaimed = reclaim_slot(sql, &mut savepoint, slot_id, now).await?;
            if reclaimed.is_empty() {
                return Ok(false);
            }
            change.update(&mut savepoint, slot_id).await
        }
        .await;
        changed = finish(
            savepoint,
            retried.map(|again| {
                if again {
                    Step::keep(true)
                } else {
                    Step::undo(false)
                }
            }),
        )
        .await?;
    }
    if changed {
        let slot = live_slot(sql, conn, slot_id).await?;
        // A removal leaves no live slot: read it as stored.
        let slot = match slot {
            Some(slot) => slot,
            None => stored_slot(sql, conn, slot_id)
                .await?
                .ok_or_else(|| StoreError::failed("a slot changed, then not found"))?,
        };
        log_slot(sql, conn, change.kind, &slot, now).await?;
        serve_slot(sql, conn, slot_id, now).await?;
        return Ok(Step::keep(SlotChange::Applied(slot)));
    }
    let usage = sqlx::query(AssertSqlSafe(sql.slot_usage.as_str()))
        .bind(to_micros(now))
        .bind(to_micros(now))
        .bind(slot_id.get())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(usage_from_row)
        .transpose()?;
    Ok(Step::undo(match usage {
        Some(usage) if usage.slot.removed_at.is_none() => SlotChange::InUse(usage),
        _ => SlotChange::NotFound,
    }))
}

/// Serves the lines of a slot that changed and of its pools (the answer is the change, before
/// the serving): units freed by a capacity raise or reclaimed, sales reopened, or a slot that
/// stopped selling and so left its pools' lines.
async fn serve_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut lines = Lines::new();
    lines.slot_and_pools(sql, conn, slot_id).await?;
    serve(sql, conn, lines, now).await?;
    Ok(())
}

/// The slot as stored, removed or not.
pub(crate) async fn stored_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<Option<Slot>, StoreError> {
    sqlx::query(AssertSqlSafe(sql.slot_by_id.as_str()))
        .bind(slot_id.get())
        .fetch_optional(conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(slot_from_row)
        .transpose()
}

/// The slot as stored, unless there is none or it has been removed.
async fn live_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<Option<Slot>, StoreError> {
    Ok(stored_slot(sql, conn, slot_id)
        .await?
        .filter(|slot| slot.removed_at.is_none()))
}

/// Appends the event `kind` about `slot` as it is after the change, at `now`.
async fn log_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    kind: EventKind,
    slot: &Slot,
    now: Timestamp,
) -> Result<(), StoreError> {
    let event = NewEvent::of_slot(kind, slot.slot_id, slot.capacity, now);
    append_event(sql, conn, &event).await
}
