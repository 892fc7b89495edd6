//! The small statements every write shares, below all of them: giving a slot's units back
//! (to its pools too), reclaiming a slot's expired holds (or those of a short pool's slots),
//! and appending the events of a change in the same unit of work.

use std::collections::BTreeMap;

use slot_booking::events::NewEvent;
use slot_booking::{EventKind, Hold, HoldId, OwnerId, Slot, StoreError, Timestamp};
use sqlx::sqlite::{SqliteArguments, SqliteConnection};
use sqlx::{AssertSqlSafe, Sqlite};

use crate::map_err;
use crate::rows::{hold_from_row, to_micros};
use crate::sql::Statements;

/// A conditional update of one row, returning it when it changed.
pub(crate) type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments>;

/// Appends the event `kind` about `slot` as it is after the change, at `now`.
pub(crate) async fn log_slot(
    sql: &Statements,
    conn: &mut SqliteConnection,
    kind: EventKind,
    slot: &Slot,
    now: Timestamp,
) -> Result<(), StoreError> {
    let event = NewEvent::of_slot(kind, slot.slot_id, slot.capacity, now);
    append_event(sql, conn, &event).await
}

/// Appends the event `kind` about `hold` as it is after the change, at `now`.
pub(crate) async fn log_hold(
    sql: &Statements,
    conn: &mut SqliteConnection,
    kind: EventKind,
    hold: &Hold,
    now: Timestamp,
) -> Result<(), StoreError> {
    append_event(sql, conn, &NewEvent::of_hold(kind, hold, now)).await
}

/// Marks held holds that expired by `now` as expired with `statement`, bound to `(id, now)`:
/// `reclaim` (a selling slot's), `reclaim_expired` (any slot's), or a pool's slots'
/// ([`reclaim_short_pools`]); see [`reclaim_by`].
pub(crate) async fn reclaim(
    sql: &Statements,
    statement: &str,
    conn: &mut SqliteConnection,
    id: i64,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let update = sqlx::query(AssertSqlSafe(statement))
        .bind(id)
        .bind(to_micros(now));
    reclaim_by(sql, conn, update, now).await
}

/// Runs `update`, a reclaim that marks held holds expired by `now` as expired and returns them;
/// gives their units back, slot by slot in id order (to each slot's pools too), and appends one
/// `hold_expired` event each, at `now`. Returns the holds it reclaimed, as stored after.
///
/// It serves no line: the writes that must serve lines do so themselves, once their own change
/// is made (`waitlists::serve`, `waitlists::serve_lines`). The reclaims a write makes only to
/// make room for itself (a newcomer's hold or booking line, the pool refill, an administrative
/// change) serve nothing: a line's readiness already counts expired units free, so such a
/// reclaim never makes a head ready by itself.
pub(crate) async fn reclaim_by(
    sql: &Statements,
    conn: &mut SqliteConnection,
    update: Query<'_>,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let rows = update.fetch_all(&mut *conn).await.map_err(map_err)?;
    let reclaimed = rows
        .iter()
        .map(hold_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let mut units: BTreeMap<i64, i64> = BTreeMap::new();
    for hold in &reclaimed {
        *units.entry(hold.slot_id.get()).or_default() += i64::from(hold.quantity);
    }
    for (slot_id, units) in units {
        give_back(sql, conn, units, slot_id).await?;
    }
    for hold in &reclaimed {
        append_event(
            sql,
            &mut *conn,
            &NewEvent::of_hold(EventKind::HoldExpired, hold, now),
        )
        .await?;
    }
    Ok(reclaimed)
}

/// Appends `event` to the log, in the unit of work `conn` is in: it commits or rolls back with
/// the change it reports. Its id is handed out now, under the write lock the unit holds until
/// it ends, so ids follow commit order (see migration 5).
pub(crate) async fn append_event(
    sql: &Statements,
    conn: &mut SqliteConnection,
    event: &NewEvent,
) -> Result<(), StoreError> {
    sqlx::query(AssertSqlSafe(sql.append_event.as_str()))
        .bind(event.kind.as_str())
        .bind(event.slot_id.get())
        .bind(event.hold_id.map(HoldId::get))
        .bind(event.owner.as_ref().map(OwnerId::as_str))
        .bind(event.quantity)
        .bind(to_micros(event.at))
        .execute(conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// Adds `units` back to the slot's `remaining` and, when the slot belongs to pools (as the
/// slot's update returns), to each of its pools' in the same unit of work: a slot of no pool
/// costs the one statement. Returns whether anyone may wait for the units (as the same update
/// returns): someone waits in the slot's line, or the slot belongs to a pool, whose line the
/// units may serve. The caller then serves the slot's line and its pools' lines
/// ([`serve`](crate::serve::serve)) in its unit of work, once its change is made.
pub(crate) async fn give_back(
    sql: &Statements,
    conn: &mut SqliteConnection,
    units: i64,
    slot_id: i64,
) -> Result<bool, StoreError> {
    let given: Option<(bool, bool)> = sqlx::query_as(AssertSqlSafe(sql.give_back.as_str()))
        .bind(units)
        .bind(slot_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    match given {
        None => Err(StoreError::failed(format!(
            "could not give {units} units back to slot {slot_id}: no such slot"
        ))),
        Some((false, lined)) => Ok(lined),
        Some((true, _)) => {
            give_back_to_pools(sql, conn, units, slot_id).await?;
            Ok(true)
        }
    }
}

/// Gives `units` a slot got back to each of its pools (see [`give_back`], which calls it for a
/// slot of some pool).
async fn give_back_to_pools(
    sql: &Statements,
    conn: &mut SqliteConnection,
    units: i64,
    slot_id: i64,
) -> Result<(), StoreError> {
    sqlx::query(AssertSqlSafe(sql.pools.give_back.as_str()))
        .bind(units)
        .bind(slot_id)
        .execute(conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// For a hold (or a booking's line) of `quantity` units on `slot_id` that a pool refused after
/// the slot's own expired holds were reclaimed: reclaims the expired holds of every slot of
/// the slot's pools short of `quantity`, giving them back to their slots and all their pools.
/// The caller's unit of work is rolled back, and this with it, if it is refused all the same.
/// Returns the holds reclaimed.
pub(crate) async fn reclaim_short_pools(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: i64,
    quantity: i32,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let update = sqlx::query(AssertSqlSafe(sql.pools.reclaim_short_pools.as_str()))
        .bind(slot_id)
        .bind(to_micros(now))
        .bind(quantity);
    reclaim_by(sql, conn, update, now).await
}
