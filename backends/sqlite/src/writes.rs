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
use slot_booking::{
    Decided, Hold, HoldId, HoldOutcome, HoldRequest, NewSlot, RenewRequest, ResourceId, Scope,
    Slot, SlotChange, SlotId, SlotLimits, StoreError, Timestamp, TransactionWrites,
    TransactionalStore, Transition,
};
use sqlx::sqlite::{SqliteArguments, SqliteConnection};
use sqlx::{Connection, Sqlite, Transaction};
use std::sync::Arc;
use tokio::sync::OwnedMutexGuard;

use crate::sql::Statements;
use crate::{
    from_micros, give_back, hold_by_id, hold_by_key, hold_from_row, insert_hold, map_err,
    not_applied, reclaim, slot_from_row, to_micros, usage_from_row, Insert, SqliteStore,
};

/// A conditional update of one row, returning it when it changed.
type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;

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

/// Stores a new slot.
pub(crate) async fn create_slot(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot: &NewSlot,
) -> Result<Step<Slot>, StoreError> {
    let row = sqlx::query(&sql.create_slot)
        .bind(to_micros(slot.starts_at))
        .bind(to_micros(slot.ends_at))
        .bind(slot.capacity)
        .bind(slot.resource.as_ref().map(ResourceId::as_str))
        .fetch_one(conn)
        .await
        .map_err(map_err)?;
    Ok(Step::keep(slot_from_row(&row)?))
}

/// A hold in a unit of work: the insert as the slot is stored, then, if it found no unit,
/// [`hold_after_reclaim`].
pub(crate) async fn hold(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &HoldRequest<'_>,
) -> Result<Step<HoldOutcome>, StoreError> {
    match insert_hold(sql, &mut *conn, request).await? {
        Insert::Created(hold) => Ok(Step::keep(HoldOutcome::Created(hold))),
        Insert::KeyTaken => key_taken(sql, conn, request).await.map(Step::undo),
        Insert::NoUnit => hold_after_reclaim(sql, conn, request).await,
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

/// A hold that found no unit: reclaims the slot's expired holds and inserts once more. Tried
/// even if this reclaimed nothing: a racing hold may have reclaimed units since. Refused, it
/// says why and undoes the reclaim (the next hold that needs the units redoes it).
pub(crate) async fn hold_after_reclaim(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &HoldRequest<'_>,
) -> Result<Step<HoldOutcome>, StoreError> {
    let slot_id = request.slot_id.get();
    reclaim(sql, &sql.reclaim, conn, slot_id, to_micros(request.now)).await?;
    let insert = insert_hold(sql, &mut *conn, request).await?;
    if let Insert::Created(hold) = insert {
        return Ok(Step::keep(HoldOutcome::Created(hold)));
    }
    // Nothing was stored: say why.
    let key_holder = hold_by_key(sql, &mut *conn, request.key.as_str()).await?;
    if key_holder.is_none() && matches!(insert, Insert::KeyTaken) {
        return Err(StoreError::failed(KEY_TAKEN_BY_NONE));
    }
    let limits: Option<(i64, i32, bool, Option<i64>)> = sqlx::query_as(&sql.slot_limits)
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

/// Runs one of the conditional updates on a hold (confirm, renew); when it changes nothing,
/// reads the hold in the same scope to say why.
async fn transition(
    sql: &Statements,
    conn: &mut SqliteConnection,
    update: Query<'_>,
    hold_id: HoldId,
    scope: &Scope,
) -> Result<Step<Transition>, StoreError> {
    let updated = update.fetch_optional(&mut *conn).await.map_err(map_err)?;
    let transition = match updated {
        Some(row) => Transition::Applied(hold_from_row(&row)?),
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
    let update = sqlx::query(&sql.confirm)
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner);
    transition(sql, conn, update, hold_id, scope).await
}

/// Renews an active held hold.
pub(crate) async fn renew(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition>, StoreError> {
    let micros = |d: chrono::Duration| {
        d.num_microseconds()
            .ok_or_else(|| StoreError::failed("a hold lifetime overflows microseconds"))
    };
    let (any, owner) = request.scope.as_filter();
    let update = sqlx::query(&sql.renew)
        .bind(to_micros(request.now))
        .bind(request.hold_id.get())
        .bind(micros(request.lifetime)?)
        .bind(micros(request.max_life)?)
        .bind(any)
        .bind(owner);
    transition(sql, conn, update, request.hold_id, request.scope).await
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
    let updated = sqlx::query(&sql.cancel)
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
            Transition::Applied(hold)
        }
        None => not_applied(hold_by_id(sql, conn, hold_id, scope).await?),
    };
    Ok(Step::keep(transition))
}

/// Closes or reopens a slot's sales: one conditional update.
pub(crate) async fn set_closed(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    closed: bool,
) -> Result<Step<SlotChange>, StoreError> {
    let updated = sqlx::query(&sql.set_closed)
        .bind(slot_id.get())
        .bind(closed)
        .fetch_optional(conn)
        .await
        .map_err(map_err)?;
    Ok(Step::keep(match updated {
        Some(row) => SlotChange::Applied(slot_from_row(&row)?),
        None => SlotChange::NotFound,
    }))
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
        sqlx::query(&sql.change_capacity)
            .bind(slot_id.get())
            .bind(capacity)
    };
    change_taking_free_units(sql, conn, slot_id, now, update).await
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
        sqlx::query(&sql.remove_slot)
            .bind(slot_id.get())
            .bind(micros)
    };
    change_taking_free_units(sql, conn, slot_id, now, update).await
}

/// Applies an administrative change of a slot row that may only take free units
/// (`change_capacity`, `remove_slot`: `update` builds the conditional update, which returns
/// the slot it changed):
///
/// 1. the update as the slot is stored;
/// 2. if that changed no row, the slot's expired holds are reclaimed under a savepoint and the
///    update runs again; if it still changes no row the savepoint is rolled back, so a refused
///    change reclaims nothing (and the units read next still count those holds as expired);
/// 3. refused: the slot's units, read in the same unit of work, say whether it is in use or
///    not there (no such slot, or removed).
async fn change_taking_free_units<'q>(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    now: Timestamp,
    update: impl Fn() -> Query<'q>,
) -> Result<Step<SlotChange>, StoreError> {
    let mut changed = update().fetch_optional(&mut *conn).await.map_err(map_err)?;
    if changed.is_none() {
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
        return Ok(Step::keep(SlotChange::Applied(slot_from_row(&row)?)));
    }
    let usage = sqlx::query(&sql.slot_usage)
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
    let reclaimed = reclaim(
        sql,
        &sql.reclaim_expired,
        conn,
        slot_id.get(),
        to_micros(now),
    )
    .await?;
    // Nothing reclaimed: the slot is as it was, and the update would change nothing again.
    if reclaimed == 0 {
        return Ok(None);
    }
    update().fetch_optional(conn).await.map_err(map_err)
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
    gate: OwnedMutexGuard<()>,
}

impl std::fmt::Debug for SqliteTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTransaction").finish_non_exhaustive()
    }
}

impl SqliteTransaction {
    pub(crate) fn new(tx: Transaction<'static, Sqlite>, gate: OwnedMutexGuard<()>) -> Self {
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
/// Each call is all or nothing inside the caller's transaction: it runs under a savepoint,
/// released when the call's writes stay and rolled back when the request is refused (a hold's
/// key taken or no unit free, a capacity change or removal that does not fit, the expired
/// holds it reclaimed to try included) or fails, so the caller's transaction stays usable and
/// unchanged by it. On a connection outside any transaction, each call runs in a transaction of
/// its own, begun `BEGIN IMMEDIATE` and committed before it returns.
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
        let mut unit = begin_unit(self.conn).await?;
        let step = hold(&self.sql, &mut unit, &request).await;
        Ok(Decided::new(request.now, finish(unit, step).await?))
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

    async fn create_slot(&mut self, slot: &NewSlot, _now: Timestamp) -> Result<Slot, StoreError> {
        let mut unit = begin_unit(self.conn).await?;
        let step = create_slot(&self.sql, &mut unit, slot).await;
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
        let step = set_closed(&self.sql, &mut unit, slot_id, closed).await;
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
