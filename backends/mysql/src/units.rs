//! The primitives every write step is made of: the [`Step`] a write answers, the unit of work
//! it runs in ([`finish_unit`]) and [`finish`] that ends a savepoint inside it, a slot's row
//! locked, units given back, a hold read, and events appended in the write's own transaction.
//! Nothing here decides an outcome.
//!
//! **A unit never commits in pieces.** On Galera, a transaction that another node's commit
//! aborts is rolled back under the client, and the statement that should report it does not
//! always do so (seen on MariaDB 10.11 with galera-4 26.4: an `UPDATE` answered with its rows
//! matched while its transaction was already gone). Each statement after that would run on its
//! own, in autocommit, and commit at once: a unit taken from a slot with no hold for it. So
//! every write statement starts with [`WRITE_GUARD`](crate::guard::WRITE_GUARD)
//! (`SET STATEMENT tx_read_only = 1 FOR …`): inside the unit's transaction it runs as written
//! (the access mode applies to transactions that start, not to the one open), and outside any
//! transaction it fails (1792) instead of committing, a conflict the step is run again for.
//! Before the unit ends (commit or rollback), [`finish_unit`] checks that its transaction is
//! still open (`@@in_transaction`, MariaDB); a unit found gone is a conflict too, so no answer,
//! success or refusal, is made of writes that did not commit.
//!
//! **A cut step leaves nothing behind.** The guard is the statement's own, not the session's:
//! a step whose future is dropped at any await point (a web request the client left) leaves
//! its connection as it found it. Its transaction or savepoint is rolled back by sqlx before
//! the connection's next use, and no session variable was changed (`tests/cuts.rs` cuts every
//! write at every await point, on the pool and in the caller's transaction, then writes on the
//! same connection).

use std::collections::BTreeMap;

use slot_booking::events::NewEvent;
use slot_booking::{
    EventKind, Hold, HoldId, HoldStatus, OwnerId, Scope, SlotId, StoreError, Timestamp, Transition,
};
use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::{AssertSqlSafe, MySql, Transaction};

use crate::map_err;
use crate::rows::{hold_from_row, to_micros};
use crate::sql::Statements;

/// What a step decided, and whether its writes stay (the core's, shared by the stores).
pub(crate) use slot_booking::store::Step;

/// Ends a savepoint inside a unit as `step` says: commits when the writes stay, rolls back when they do
/// not or on an error. The outcome is returned only after the commit succeeded: a commit that
/// fails (a Galera certification conflict, say) is the answer instead.
pub(crate) async fn finish<T>(
    tx: Transaction<'_, MySql>,
    step: Result<Step<T>, StoreError>,
) -> Result<T, StoreError> {
    match step {
        Ok(Step { value, keep: true }) => {
            tx.commit().await.map_err(map_err)?;
            Ok(value)
        }
        Ok(Step { value, keep: false }) => {
            tx.rollback().await.map_err(map_err)?;
            Ok(value)
        }
        Err(error) => {
            // The error is the answer; a rollback that fails too (the connection is gone)
            // adds nothing, and sqlx rolls back before the connection's next use anyway.
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

/// Says whether the unit's transaction is still open.
const UNIT_CHECK: &str = "SELECT CAST(@@in_transaction AS SIGNED)";

/// Ends a unit of work (a transaction of its own, or a savepoint in the caller's transaction)
/// as `step` says: commits when the writes stay, rolls back when they do not or on an error.
/// A unit found gone (its transaction ended under it: see the module's docs) is a
/// [`Conflict`](crate::Conflict), whatever the step decided: a refusal read after its own
/// writes were lost is no more an answer than a success. The outcome is returned only after
/// the commit succeeded.
pub(crate) async fn finish_unit<T>(
    mut tx: Transaction<'_, MySql>,
    step: Result<Step<T>, StoreError>,
) -> Result<T, StoreError> {
    let gone = unit_gone(&mut tx).await;
    match step {
        Ok(Step { value, keep }) => {
            if gone? {
                let _ = tx.rollback().await;
                return Err(StoreError::unavailable(crate::Conflict::lost()));
            }
            if keep {
                tx.commit().await.map_err(map_err)?;
            } else {
                tx.rollback().await.map_err(map_err)?;
            }
            Ok(value)
        }
        Err(error) => {
            // A step that failed in a unit ended under it (a statement of it answered from a
            // half-run statement: a NULL where the column has none, say) failed for the
            // conflict that ended it. Otherwise the error is the answer; a rollback that
            // fails too (the connection is gone) adds nothing, and sqlx rolls back before
            // the connection's next use.
            let _ = tx.rollback().await;
            if matches!(gone, Ok(true)) && !crate::conflict::is_conflict(&error) {
                return Err(StoreError::unavailable(crate::Conflict::lost()));
            }
            Err(error)
        }
    }
}

/// Says whether the unit's transaction is gone (a conflict reported by the check itself says so
/// too).
async fn unit_gone(tx: &mut Transaction<'_, MySql>) -> Result<bool, StoreError> {
    match sqlx::raw_sql(UNIT_CHECK).fetch_all(&mut **tx).await {
        Ok(rows) => {
            let open: Vec<i64> = rows
                .iter()
                .map(|row| sqlx::Row::try_get(row, 0))
                .collect::<Result<_, _>>()
                .map_err(map_err)?;
            Ok(open != [1])
        }
        Err(error) => match crate::conflict::conflict(error) {
            Ok(_) => Ok(true),
            Err(error) => Err(map_err(error)),
        },
    }
}

/// The id an `INSERT` drew.
pub(crate) fn id_of(result: sqlx::mysql::MySqlQueryResult) -> Result<i64, StoreError> {
    i64::try_from(result.last_insert_id()).map_err(StoreError::failed)
}

/// Locks a slot's row (nothing when there is none).
pub(crate) async fn lock_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<(), StoreError> {
    sqlx::query(AssertSqlSafe(sql.lock_slot.as_str()))
        .bind(slot_id.get())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// Adds `units` back to a slot's `remaining` and to each of its pools' (which this transaction
/// locked before any hold: see [`lock_pools_of`]).
pub(crate) async fn give_back(
    sql: &Statements,
    conn: &mut MySqlConnection,
    units: i64,
    slot_id: i64,
) -> Result<(), StoreError> {
    let given = sqlx::query(AssertSqlSafe(sql.give_back.as_str()))
        .bind(units)
        .bind(slot_id)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if given.rows_affected() != 1 {
        return Err(StoreError::failed(format!(
            "could not give {units} units back to slot {slot_id}: no such slot"
        )));
    }
    for pool in pools_of_slot(sql, conn, SlotId(slot_id)).await? {
        let given = sqlx::query(AssertSqlSafe(sql.pools.give_pool.as_str()))
            .bind(units)
            .bind(pool)
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        if given.rows_affected() != 1 {
            return Err(StoreError::failed(format!(
                "could not give {units} units back to pool {pool}: no such pool"
            )));
        }
    }
    Ok(())
}

/// The ids of the pools a slot draws from, ascending. Read once the slot's row is locked:
/// attaching and detaching lock it (and write it) too.
pub(crate) async fn pools_of_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<Vec<i64>, StoreError> {
    sqlx::query_scalar(AssertSqlSafe(sql.pools.pools_of_slot.as_str()))
        .bind(slot_id.get())
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)
}

/// Locks the rows of every pool the slots `slots` (whose rows this transaction locked) draw
/// from, by ascending id: after the slots, before any hold. Returns their ids.
pub(crate) async fn lock_pools_of(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slots: &[SlotId],
) -> Result<Vec<i64>, StoreError> {
    let mut pools = Vec::new();
    for slot in slots {
        pools.extend(pools_of_slot(sql, conn, *slot).await?);
    }
    pools.sort_unstable();
    pools.dedup();
    for pool in &pools {
        sqlx::query(AssertSqlSafe(sql.pools.lock_pool.as_str()))
            .bind(pool)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    }
    Ok(pools)
}

/// A hold an update did not change: as it is now, or not found in the caller's scope.
pub(crate) fn not_applied(hold: Option<Hold>) -> Transition {
    match hold {
        Some(hold) => Transition::NotApplied(hold),
        None => Transition::NotFound,
    }
}

/// The hold `hold_id`, if `scope` admits it.
pub(crate) async fn hold_by_id(
    sql: &Statements,
    conn: &mut MySqlConnection,
    hold_id: HoldId,
    scope: &Scope,
) -> Result<Option<Hold>, StoreError> {
    let (any, owner) = scope.as_filter();
    let row: Option<MySqlRow> = sqlx::query(AssertSqlSafe(sql.hold_by_id.as_str()))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    row.as_ref().map(hold_from_row).transpose()
}

/// Appends the event `kind` about `hold` as it is after the change, at `now`.
pub(crate) async fn log_hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    kind: EventKind,
    hold: &Hold,
    now: Timestamp,
) -> Result<(), StoreError> {
    append_event(sql, conn, &NewEvent::of_hold(kind, hold, now)).await
}

/// Appends `event` unplaced, in the transaction `conn` is in: it commits or rolls back with
/// the change it reports, and is placed in the log by the first read after its commit.
pub(crate) async fn append_event(
    sql: &Statements,
    conn: &mut MySqlConnection,
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

/// Reclaims the held holds of a slot (any, selling or not) that expired by `now`, its row
/// locked first: one `hold_expired` event each, their units given back.
pub(crate) async fn reclaim_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    lock_slot(sql, conn, slot_id).await?;
    reclaim_locked(sql, conn, slot_id, now).await
}

/// The reclaim of a slot whose row this transaction holds: its expired held holds are locked
/// and read, marked expired by one update whose rows matched must be exactly those (every
/// other writer of them waits for the slot's row), their units given back and one
/// `hold_expired` event each appended.
pub(crate) async fn reclaim_locked(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    lock_pools_of(sql, conn, &[slot_id]).await?;
    let rows = sqlx::query(AssertSqlSafe(sql.expired_of_slot.as_str()))
        .bind(slot_id.get())
        .bind(to_micros(now))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let expired = sqlx::query(AssertSqlSafe(sql.expire_of_slot.as_str()))
        .bind(slot_id.get())
        .bind(to_micros(now))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if expired.rows_affected() != rows.len() as u64 {
        return Err(StoreError::failed(format!(
            "reclaiming slot {slot_id}: {} holds locked, {} expired",
            rows.len(),
            expired.rows_affected()
        )));
    }
    let mut reclaimed = rows
        .iter()
        .map(hold_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    for hold in &mut reclaimed {
        hold.status = HoldStatus::Expired;
    }
    gave_back(sql, conn, &reclaimed, now).await?;
    Ok(reclaimed)
}

/// Gives the units of holds just marked expired back to their slots (by ascending slot id),
/// and appends one `hold_expired` event each.
pub(crate) async fn gave_back(
    sql: &Statements,
    conn: &mut MySqlConnection,
    reclaimed: &[Hold],
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut units: BTreeMap<i64, i64> = BTreeMap::new();
    for hold in reclaimed {
        *units.entry(hold.slot_id.get()).or_default() += i64::from(hold.quantity);
    }
    for (slot_id, units) in units {
        give_back(sql, conn, units, slot_id).await?;
    }
    for hold in reclaimed {
        log_hold(sql, conn, EventKind::HoldExpired, hold, now).await?;
    }
    Ok(())
}
