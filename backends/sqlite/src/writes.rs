//! Every write of the store as statements on one connection, and the two ways they run: in
//! the store's own write transactions (its [`Store`](slot_booking::Store) methods and its
//! [`TransactionalStore`]), and on a connection or transaction the caller owns
//! ([`SqliteStore::on`]).
//!
//! An operation runs inside a unit of work it is handed (a transaction, or a savepoint in the
//! caller's transaction) and answers with a [`Step`]: its outcome and whether its writes stay.
//! [`finish`] then commits or releases the unit, or rolls it back, so both paths share one
//! implementation of each rule and differ only in how the unit is opened.

use async_trait::async_trait;
use slot_booking::events::NewEvent;
use slot_booking::{
    ConsumerId, Decided, EventKind, EventPosition, Hold, HoldId, HoldOutcome, HoldRequest,
    LeaseHolder, NewSlot, Purged, RenewRequest, ResourceId, Scope, Slot, SlotChange, SlotId,
    SlotLimits, StoreError, Timestamp, TransactionWrites, TransactionalStore, Transition,
};
use sqlx::sqlite::{SqliteArguments, SqliteConnection};
use sqlx::{AssertSqlSafe, Connection, Sqlite, Transaction};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::OwnedMutexGuard;

use crate::group::Held;
use crate::sql::Statements;
use crate::{
    append_event, from_micros, give_back, hold_by_id, hold_by_key, hold_from_row, insert_hold,
    map_err, not_applied, reclaim, slot_from_row, sold_out, to_micros, usage_from_row, Insert,
    SqliteStore,
};

/// A conditional update of one row, returning it when it changed.
type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments>;

/// What an operation decided, and whether its writes stay.
pub(crate) struct Step<T> {
    value: T,
    keep: bool,
}

impl<T> Step<T> {
    /// An outcome whose writes stay.
    fn keep(value: T) -> Self {
        Step { value, keep: true }
    }

    /// An outcome whose writes (if any) are undone: a refusal changes nothing.
    fn undo(value: T) -> Self {
        Step { value, keep: false }
    }
}

/// Ends the unit of work `unit` as `step` says: commits it (or releases its savepoint) when
/// the writes stay, rolls it back when they do not, and rolls it back on an error too, so a
/// failed call leaves the connection's transaction as the call found it.
pub(crate) async fn finish<T>(
    unit: Transaction<'_, Sqlite>,
    step: Result<Step<T>, StoreError>,
) -> Result<T, StoreError> {
    match step {
        Ok(Step { value, keep: true }) => {
            unit.commit().await.map_err(map_err)?;
            Ok(value)
        }
        Ok(Step { value, keep: false }) => {
            unit.rollback().await.map_err(map_err)?;
            Ok(value)
        }
        Err(error) => {
            // The error is the answer; a rollback that fails as well (the connection is gone)
            // adds nothing to it, and sqlx retries the rollback before the connection's next
            // statement anyway.
            let _ = unit.rollback().await;
            Err(error)
        }
    }
}

/// A unit of work on the caller's connection: a savepoint inside its transaction, or, on a
/// connection outside any transaction, a transaction of its own begun `BEGIN IMMEDIATE` (so
/// that it takes the write lock up front instead of failing with `SQLITE_BUSY`).
async fn begin_unit(conn: &mut SqliteConnection) -> Result<Transaction<'_, Sqlite>, StoreError> {
    let unit = if conn.is_in_transaction() {
        Connection::begin(conn).await
    } else {
        conn.begin_with("BEGIN IMMEDIATE").await
    };
    unit.map_err(map_err)
}

/// Stores a new slot and appends its `slot_created` event at `now`.
pub(crate) async fn create_slot(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot: &NewSlot,
    now: Timestamp,
) -> Result<Step<Slot>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(sql.create_slot.as_str()))
        .bind(to_micros(slot.starts_at))
        .bind(to_micros(slot.ends_at))
        .bind(slot.capacity)
        .bind(slot.resource.as_ref().map(ResourceId::as_str))
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    let slot = slot_from_row(&row)?;
    log_slot(sql, conn, EventKind::SlotCreated, &slot, now).await?;
    Ok(Step::keep(slot))
}

/// Appends the event `kind` about `slot` as it is after the change, at `now`.
async fn log_slot(
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
async fn log_hold(
    sql: &Statements,
    conn: &mut SqliteConnection,
    kind: EventKind,
    hold: &Hold,
    now: Timestamp,
) -> Result<(), StoreError> {
    append_event(sql, conn, &NewEvent::of_hold(kind, hold, now)).await
}

/// A hold on the caller's connection: the insert as the slot is stored, outside any unit of
/// work, then, only if it found no unit for a reason the statement could not settle,
/// [`hold_after_reclaim`] in a unit of work of its own. The insert needs no savepoint: a
/// statement aborted by the trigger or by the unique key undoes only itself, so a refusal
/// leaves the caller's transaction as it was (and usable), and a hold it stored stays in that
/// transaction as it would under a released savepoint. So a hold that is created, replayed or
/// sold out costs the insert (and, for a key in use, the key's read) and nothing else. The
/// insert's `hold_placed` event is appended by the `holds_placed_event` trigger (migration 5)
/// inside the insert itself.
pub(crate) async fn hold(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &HoldRequest<'_>,
) -> Result<HoldOutcome, StoreError> {
    match insert_hold(sql, &mut *conn, request).await? {
        Insert::Created(hold) => Ok(HoldOutcome::Created(hold)),
        Insert::KeyTaken => key_taken(sql, conn, request).await,
        Insert::SoldOut => Ok(sold_out()),
        Insert::NoUnit => {
            let mut unit = begin_unit(conn).await?;
            let step = hold_after_reclaim(sql, &mut unit, request).await;
            finish(unit, step).await
        }
    }
}

/// The answer to a hold whose key is taken: the key's hold, replayed or refused.
pub(crate) async fn key_taken<'e, E>(
    sql: &Statements,
    executor: E,
    request: &HoldRequest<'_>,
) -> Result<HoldOutcome, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    hold_by_key(sql, executor, request.key.as_str())
        .await?
        .map(|holder| HoldOutcome::refused(request, Some(holder), None))
        .ok_or_else(|| StoreError::failed(KEY_TAKEN_BY_NONE))
}

const KEY_TAKEN_BY_NONE: &str = "a unique violation on the idempotency key, but no hold has it";

/// A hold that found no unit: reclaims the slot's expired holds (one `hold_expired` event each)
/// and inserts once more. Tried even if this reclaimed nothing: a racing hold may have
/// reclaimed units since. Refused, it says why and undoes the reclaim and its events (the next
/// hold that needs the units redoes it).
pub(crate) async fn hold_after_reclaim(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &HoldRequest<'_>,
) -> Result<Step<HoldOutcome>, StoreError> {
    let slot_id = request.slot_id.get();
    reclaim(sql, &sql.reclaim, conn, slot_id, request.now).await?;
    let insert = insert_hold(sql, &mut *conn, request).await?;
    match insert {
        Insert::Created(hold) => return Ok(Step::keep(HoldOutcome::Created(hold))),
        // Settled by the trigger after the reclaim: nothing left to read.
        Insert::SoldOut => return Ok(Step::undo(sold_out())),
        Insert::KeyTaken | Insert::NoUnit => {}
    }
    // Nothing was stored: say why.
    let key_holder = hold_by_key(sql, &mut *conn, request.key.as_str()).await?;
    if key_holder.is_none() && matches!(insert, Insert::KeyTaken) {
        return Err(StoreError::failed(KEY_TAKEN_BY_NONE));
    }
    let limits: Option<(i64, i32, bool, Option<i64>)> =
        sqlx::query_as(AssertSqlSafe(sql.slot_limits.as_str()))
            .bind(slot_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    let limits = match limits {
        Some((starts_at, capacity, closed, removed_at)) => Some(SlotLimits {
            starts_at: from_micros(starts_at)?,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        None => None,
    };
    Ok(Step::undo(HoldOutcome::refused(
        request, key_holder, limits,
    )))
}

/// Runs one of the conditional updates on a hold (confirm, renew); when it changes a row,
/// appends the event `kind` about it at `now`, and when it changes nothing, reads the hold in
/// the same scope to say why.
async fn transition(
    sql: &Statements,
    conn: &mut SqliteConnection,
    update: Query<'_>,
    kind: EventKind,
    now: Timestamp,
    hold_id: HoldId,
    scope: &Scope,
) -> Result<Step<Transition>, StoreError> {
    let updated = update.fetch_optional(&mut *conn).await.map_err(map_err)?;
    let transition = match updated {
        Some(row) => {
            let hold = hold_from_row(&row)?;
            log_hold(sql, conn, kind, &hold, now).await?;
            Transition::Applied(hold)
        }
        None => not_applied(hold_by_id(sql, conn, hold_id, scope).await?),
    };
    Ok(Step::keep(transition))
}

/// Confirms an active held hold.
pub(crate) async fn confirm(
    sql: &Statements,
    conn: &mut SqliteConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let (any, owner) = scope.as_filter();
    let update = sqlx::query(AssertSqlSafe(sql.confirm.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner);
    transition(
        sql,
        conn,
        update,
        EventKind::HoldConfirmed,
        now,
        hold_id,
        scope,
    )
    .await
}

/// Renews an active held hold. The update changes the row only when the renewal moves its
/// expiry (and then appends `hold_renewed`); when it changes nothing, a read with the same
/// parameters tells a renewal with nothing to move (applied, the hold unchanged, no event)
/// from a refusal.
pub(crate) async fn renew(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition>, StoreError> {
    let micros = |d: chrono::Duration| {
        d.num_microseconds()
            .ok_or_else(|| StoreError::failed("a hold lifetime overflows microseconds"))
    };
    let (lifetime, max_life) = (micros(request.lifetime)?, micros(request.max_life)?);
    let (any, owner) = request.scope.as_filter();
    let bind = |statement: &str| {
        sqlx::query(AssertSqlSafe(statement))
            .bind(to_micros(request.now))
            .bind(request.hold_id.get())
            .bind(lifetime)
            .bind(max_life)
            .bind(any)
            .bind(owner)
    };
    let updated = bind(&sql.renew)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    if let Some(row) = updated {
        let hold = hold_from_row(&row)?;
        log_hold(sql, conn, EventKind::HoldRenewed, &hold, request.now).await?;
        return Ok(Step::keep(Transition::Applied(hold)));
    }
    let unmoved = bind(&sql.renew_unmoved)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let transition = match unmoved {
        Some(row) => Transition::Applied(hold_from_row(&row)?),
        None => not_applied(hold_by_id(sql, conn, request.hold_id, request.scope).await?),
    };
    Ok(Step::keep(transition))
}

/// Cancels an active held or a confirmed hold and gives its units back.
pub(crate) async fn cancel(
    sql: &Statements,
    conn: &mut SqliteConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let (any, owner) = scope.as_filter();
    let updated = sqlx::query(AssertSqlSafe(sql.cancel.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let transition = match updated {
        Some(row) => {
            let hold = hold_from_row(&row)?;
            give_back(sql, conn, i64::from(hold.quantity), hold.slot_id.get()).await?;
            log_hold(sql, conn, EventKind::HoldCancelled, &hold, now).await?;
            Transition::Applied(hold)
        }
        None => not_applied(hold_by_id(sql, conn, hold_id, scope).await?),
    };
    Ok(Step::keep(transition))
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
async fn live_slot(
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
    capacity: i32,
    now: Timestamp,
) -> Result<Step<SlotChange>, StoreError> {
    let update = || {
        sqlx::query(AssertSqlSafe(sql.change_capacity.as_str()))
            .bind(slot_id.get())
            .bind(capacity)
    };
    let change = AdminChange {
        kind: EventKind::SlotCapacityChanged,
        already: |slot: &Slot| slot.capacity == capacity,
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
struct AdminChange<A, U> {
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
async fn change_taking_free_units<'q, A, U>(
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
async fn update_after_reclaim<'q>(
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

/// The sweeper's reclaim ([`EventStore::reclaim_expired`](slot_booking::EventStore)): marks
/// up to `limit` held holds that expired by `now` as expired (on any slot, decided by the rows
/// the update returned, so a hold reclaimed by a racing sweeper or a lazy reclaim is not among
/// them), gives their units back slot by slot and appends one `hold_expired` event each.
pub(crate) async fn sweep_expired(
    sql: &Statements,
    conn: &mut SqliteConnection,
    now: Timestamp,
    limit: u32,
) -> Result<Step<Vec<Hold>>, StoreError> {
    let rows = sqlx::query(AssertSqlSafe(sql.sweep_expired.as_str()))
        .bind(to_micros(now))
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
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
        log_hold(sql, conn, EventKind::HoldExpired, hold, now).await?;
    }
    Ok(Step::keep(reclaimed))
}

/// [`EventStore::purge`](slot_booking::EventStore): deletes up to `limit` holds that ended
/// (cancelled, or expired and reclaimed) before `before`, their idempotency keys with them, and
/// up to `limit` events older than `before` that every consumer has acknowledged.
pub(crate) async fn purge(
    sql: &Statements,
    conn: &mut SqliteConnection,
    before: Timestamp,
    limit: u32,
) -> Result<Step<Purged>, StoreError> {
    let mut purged = Purged::default();
    for (statement, count) in [
        (&sql.purge_holds, &mut purged.holds),
        (&sql.purge_events, &mut purged.events),
    ] {
        *count = sqlx::query(AssertSqlSafe(statement.as_str()))
            .bind(to_micros(before))
            .bind(i64::from(limit))
            .execute(&mut *conn)
            .await
            .map_err(map_err)?
            .rows_affected();
    }
    Ok(Step::keep(purged))
}

/// [`EventStore::acknowledge`](slot_booking::EventStore::acknowledge) (`holder` `None`:
/// always `true`) or [`acknowledge_leased`](slot_booking::EventStore::acknowledge_leased)
/// (`false`, nothing moved, when `holder` does not hold the lease): one statement.
pub(crate) async fn acknowledge(
    sql: &Statements,
    conn: &mut SqliteConnection,
    consumer: &ConsumerId,
    holder: Option<&LeaseHolder>,
    through: EventPosition,
) -> Result<bool, StoreError> {
    if through.epoch() != 0 {
        return Err(StoreError::failed(format!(
            "event position {through} is not one of this store's (0_<id>)"
        )));
    }
    let query = match holder {
        None => sqlx::query(AssertSqlSafe(sql.acknowledge.as_str())),
        Some(_) => sqlx::query(AssertSqlSafe(sql.acknowledge_leased.as_str())),
    }
    .bind(consumer.as_str())
    .bind(through.sequence());
    let query = match holder {
        None => query,
        Some(holder) => query.bind(holder.as_str()),
    };
    let done = query.execute(conn).await.map_err(map_err)?;
    Ok(holder.is_none() || done.rows_affected() == 1)
}

/// A write transaction of a [`SqliteStore`], its [`TransactionalStore::Transaction`]: begun
/// with `BEGIN IMMEDIATE`, so it holds SQLite's write lock from its first statement to its
/// end, and holding the store's in-process write queue as long, so that the store's other
/// writers wait in that queue rather than in SQLite's busy handler.
///
/// While it is open, write through it (with [`TransactionalStore::writes`] or
/// [`SqliteStore::on`] on [`connection`](Self::connection)), not through the store or an engine
/// over it: those writes wait for this transaction to end, so one made by the task that holds
/// the transaction never returns. Reads through the store do not wait. Dropped uncommitted,
/// it rolls back.
pub struct SqliteTransaction {
    // Fields drop in order: the transaction (rolled back if not committed) before the queue
    // slot, so that the next writer does not find SQLite's lock still taken.
    tx: Transaction<'static, Sqlite>,
    gate: OwnedMutexGuard<Held>,
}

impl std::fmt::Debug for SqliteTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTransaction").finish_non_exhaustive()
    }
}

impl SqliteTransaction {
    pub(crate) fn new(tx: Transaction<'static, Sqlite>, gate: OwnedMutexGuard<Held>) -> Self {
        SqliteTransaction { tx, gate }
    }

    /// The transaction's connection, for the application's own statements in it.
    pub fn connection(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }

    /// Commits the transaction.
    pub async fn commit(self) -> Result<(), StoreError> {
        let SqliteTransaction { tx, gate } = self;
        tx.commit().await.map_err(map_err)?;
        drop(gate);
        Ok(())
    }

    /// Rolls the transaction back: nothing written in it stays.
    pub async fn rollback(self) -> Result<(), StoreError> {
        let SqliteTransaction { tx, gate } = self;
        tx.rollback().await.map_err(map_err)?;
        drop(gate);
        Ok(())
    }

    /// Ends the transaction as `step` says (see [`finish`]), then leaves the write queue.
    pub(crate) async fn finish<T>(
        self,
        step: Result<Step<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let SqliteTransaction { tx, gate } = self;
        let done = finish(tx, step).await;
        drop(gate);
        done
    }
}

/// The store's writes on a connection or transaction the caller owns: the
/// [`TransactionWrites`] of [`SqliteStore::on`], for
/// [`BookingEngine::within`](slot_booking::BookingEngine::within).
///
/// Each call is all or nothing inside the caller's transaction, its events included (they
/// commit or roll back with the caller's transaction): it runs under a savepoint,
/// released when the call's writes stay and rolled back when the request is refused (a hold
/// that found no unit, a capacity change or removal that does not fit, the expired holds it
/// reclaimed to try included) or fails, so the caller's transaction stays usable and
/// unchanged by it. A hold's first `INSERT` needs none: a statement aborted by the trigger or
/// the unique key undoes only itself, so a hold created, replayed or refused as sold out by
/// that one statement opens no savepoint. On a connection outside any transaction, each call
/// runs in a transaction of its own, begun `BEGIN IMMEDIATE` and committed before it returns
/// (a hold's first `INSERT` autocommits on its own: it writes first, so it takes the write lock
/// up front all the same).
pub struct SqliteWrites<'c> {
    conn: &'c mut SqliteConnection,
    sql: Arc<Statements>,
}

impl std::fmt::Debug for SqliteWrites<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteWrites").finish_non_exhaustive()
    }
}

impl SqliteWrites<'_> {
    /// The caller's connection these writes run on, for its own statements in between.
    pub fn connection(&mut self) -> &mut SqliteConnection {
        self.conn
    }
}

impl SqliteStore {
    /// This store's writes on `conn`, a connection or transaction the caller owns, for
    /// [`BookingEngine::within`](slot_booking::BookingEngine::within): they commit or roll
    /// back with the caller's own rows (see [`SqliteWrites`]).
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     engine: slot_booking::BookingEngine<slot_booking_sqlite::SqliteStore>,
    /// #     hold_id: slot_booking::HoldId,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// let store = engine.store();
    /// let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await?;
    /// let booked = engine.within(store.on(&mut tx)).confirm(hold_id).await?;
    /// slot_booking_sqlite::sqlx::query("INSERT INTO orders (hold_id) VALUES (?1)")
    ///     .bind(booked.hold_id.get())
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?; // both, or neither
    /// # Ok(()) }
    /// ```
    ///
    /// - **Begin the transaction with `BEGIN IMMEDIATE`** (sqlx:
    ///   `pool.begin_with("BEGIN IMMEDIATE")`). A plain `BEGIN` starts as a reader; its first
    ///   write must then upgrade to the write lock, and SQLite refuses that at once with
    ///   `SQLITE_BUSY` (no busy handler, no retry) when another connection wrote since the
    ///   transaction's first read: [`StoreError::unavailable`] for a write that would have
    ///   succeeded.
    /// - **The store's in-process write queue is not taken** on the caller's connection: the
    ///   caller holds SQLite's write lock for its whole transaction, and the store's own
    ///   writers (and any other connection's) wait for it in SQLite's busy handler, up to their
    ///   `busy_timeout`. Keep such transactions short; [`TransactionalStore::begin`] opens one
    ///   that queues with the store's writers instead.
    /// - Begin the transaction through sqlx (as above), which keeps count of it: each call
    ///   nests a savepoint in it. A transaction begun with a raw `BEGIN` statement is unknown to
    ///   sqlx, and calls on it fail ("cannot start a transaction within a transaction").
    pub fn on<'c>(&self, conn: &'c mut SqliteConnection) -> SqliteWrites<'c> {
        SqliteWrites {
            conn,
            sql: Arc::clone(&self.sql),
        }
    }
}

#[async_trait]
impl TransactionWrites for SqliteWrites<'_> {
    async fn create_hold(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let outcome = hold(&self.sql, self.conn, &request).await?;
        Ok(Decided::new(request.now, outcome))
    }

    async fn confirm_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let mut unit = begin_unit(self.conn).await?;
        let step = confirm(&self.sql, &mut unit, hold_id, scope, now).await;
        Ok(Decided::new(now, finish(unit, step).await?))
    }

    async fn cancel_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let mut unit = begin_unit(self.conn).await?;
        let step = cancel(&self.sql, &mut unit, hold_id, scope, now).await;
        Ok(Decided::new(now, finish(unit, step).await?))
    }

    async fn renew_hold(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let mut unit = begin_unit(self.conn).await?;
        let step = renew(&self.sql, &mut unit, &request).await;
        Ok(Decided::new(request.now, finish(unit, step).await?))
    }

    async fn get_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        // A read: one statement, nothing to undo.
        let hold = hold_by_id(&self.sql, &mut *self.conn, hold_id, scope).await?;
        Ok(Decided::new(now, hold))
    }

    async fn create_slot(&mut self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError> {
        let mut unit = begin_unit(self.conn).await?;
        let step = create_slot(&self.sql, &mut unit, slot, now).await;
        finish(unit, step).await
    }

    async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        capacity: i32,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let mut unit = begin_unit(self.conn).await?;
        let step = change_capacity(&self.sql, &mut unit, slot_id, capacity, now).await;
        Ok(Decided::new(now, finish(unit, step).await?))
    }

    async fn set_closed(
        &mut self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let mut unit = begin_unit(self.conn).await?;
        let step = set_closed(&self.sql, &mut unit, slot_id, closed, now).await;
        Ok(Decided::new(now, finish(unit, step).await?))
    }

    async fn remove_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let mut unit = begin_unit(self.conn).await?;
        let step = remove_slot(&self.sql, &mut unit, slot_id, now).await;
        Ok(Decided::new(now, finish(unit, step).await?))
    }

    async fn acknowledge(
        &mut self,
        consumer: &ConsumerId,
        holder: Option<&LeaseHolder>,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        acknowledge(&self.sql, self.conn, consumer, holder, through).await
    }
}

/// Transactions that queue with the store's own writers: [`begin`](Self::begin) takes a place
/// in the store's in-process write queue, then begins `BEGIN IMMEDIATE` (see
/// [`SqliteTransaction`]).
#[async_trait]
impl TransactionalStore for SqliteStore {
    type Transaction = SqliteTransaction;

    type Writes<'t>
        = SqliteWrites<'t>
    where
        Self: 't;

    async fn begin(&self) -> Result<SqliteTransaction, StoreError> {
        self.begin_write().await
    }

    fn writes<'t>(&'t self, transaction: &'t mut SqliteTransaction) -> SqliteWrites<'t> {
        self.on(transaction.connection())
    }

    async fn commit(&self, transaction: SqliteTransaction) -> Result<(), StoreError> {
        transaction.commit().await
    }

    async fn rollback(&self, transaction: SqliteTransaction) -> Result<(), StoreError> {
        transaction.rollback().await
    }
}
