//! Every write of the store as statements on one connection, and the two ways they run: in
//! the store's own write transactions (its [`Store`](slot_booking::Store) methods and its
//! [`TransactionalStore`]), and on a connection or transaction the caller owns
//! ([`SqliteStore::on`]).
//!
//! An operation runs inside a unit of work it is handed (a transaction, or a savepoint in the
//! caller's transaction) and answers with a [`Step`]: its outcome and whether its writes stay.
//! [`finish`] then commits or releases the unit, or rolls it back, so both paths share one
//! implementation of each rule and differ only in how the unit is opened.

use slot_booking::{
    Decided, EventKind, Hold, HoldId, HoldOutcome, HoldRequest, NewSlot, RenewRequest, ResourceId,
    Scope, Slot, SlotLimits, StoreError, Timestamp, Transition,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, Connection, Sqlite, Transaction};
use std::sync::Arc;

use slot_booking::store::first_that_fits;
use slot_booking::{AnyHoldOutcome, AnyHoldRequest, PlaceOne};

use crate::group::Held;
use crate::group::{insert_hold, sold_out, Insert};
use crate::lines::{booking_by_key, change_lines};
use crate::pools::reclaim_short_pools;
use crate::rows::{from_micros, hold_from_row, slot_from_row, to_micros};
use crate::sql::Statements;
use crate::units::{log_slot, reclaim, Query};
use crate::{map_err, SqliteStore};
use tokio::sync::OwnedMutexGuard;

/// What an operation decided, and whether its writes stay (the core's, shared by the stores).
pub(crate) use slot_booking::store::Step;

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
        Insert::KeyWaits => Ok(HoldOutcome::KeyReused(None)),
        Insert::NoUnit | Insert::PoolShort => {
            let mut unit = begin_unit(conn).await?;
            let step = hold_after_reclaim(sql, &mut unit, request).await;
            finish(unit, step).await
        }
    }
}

/// The answer to a hold whose key is taken: the key's hold, replayed or refused, or the
/// booking of several lines it is the first line of, refused.
pub(crate) async fn key_taken<'e, E>(
    sql: &Statements,
    executor: E,
    request: &HoldRequest<'_>,
) -> Result<HoldOutcome, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    booking_by_key(sql, executor, request.key.as_str())
        .await?
        .map(|holder| HoldOutcome::key_taken(request, holder))
        .ok_or_else(|| StoreError::failed(KEY_TAKEN_BY_NONE))
}

const KEY_TAKEN_BY_NONE: &str = "a unique violation on the idempotency key, but no hold has it";

/// A hold that found no unit: reclaims the slot's expired holds (one `hold_expired` event each)
/// and inserts once more; when a pool of the slot is short then, reclaims the expired holds of
/// the short pools' slots ([`reclaim_short_pools`]) and inserts once more. Tried even if this reclaimed nothing: a racing hold may have
/// reclaimed units since. Refused, it says why and undoes the reclaim and its events (the next
/// hold that needs the units redoes it).
pub(crate) async fn hold_after_reclaim(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &HoldRequest<'_>,
) -> Result<Step<HoldOutcome>, StoreError> {
    let slot_id = request.slot_id.get();
    reclaim(sql, &sql.reclaim, conn, slot_id, request.now).await?;
    let mut insert = insert_hold(sql, &mut *conn, request).await?;
    if matches!(insert, Insert::PoolShort) {
        reclaim_short_pools(sql, conn, slot_id, request.quantity, request.now).await?;
        insert = insert_hold(sql, &mut *conn, request).await?;
    }
    match insert {
        Insert::Created(hold) => return Ok(Step::keep(HoldOutcome::Created(hold))),
        // Settled by the trigger after the reclaim: nothing left to read.
        Insert::SoldOut => return Ok(Step::undo(sold_out())),
        Insert::KeyWaits => return Ok(Step::undo(HoldOutcome::KeyReused(None))),
        Insert::KeyTaken | Insert::NoUnit | Insert::PoolShort => {}
    }
    // Nothing was stored: say why. A key in use wins over every other answer.
    if let Some(holder) = booking_by_key(sql, &mut *conn, request.key.as_str()).await? {
        return Ok(Step::undo(HoldOutcome::key_taken(request, holder)));
    }
    if matches!(insert, Insert::KeyTaken) {
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
    Ok(Step::undo(HoldOutcome::refused(request, None, limits)))
}

/// The line `hold_id` of the booking whose lines a change returned: `None` when it changed
/// nothing.
fn line_of(lines: Vec<Hold>, hold_id: HoldId) -> Result<Option<Hold>, StoreError> {
    if lines.is_empty() {
        return Ok(None);
    }
    lines
        .into_iter()
        .find(|hold| hold.hold_id == hold_id)
        .map(Some)
        .ok_or_else(|| {
            StoreError::failed("a change of a booking left out the line it was asked of")
        })
}

/// Confirms the active held hold `hold_id` with every line of its booking (see
/// [`change_lines`](crate::lines::change_lines)).
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
    let lines = change_lines(sql, conn, update, EventKind::HoldConfirmed, now).await?;
    let transition = match line_of(lines, hold_id)? {
        Some(hold) => Transition::Applied(hold),
        None => not_applied(hold_by_id(sql, conn, hold_id, scope).await?),
    };
    Ok(Step::keep(transition))
}

/// Renews the active held hold `hold_id` with every line of its booking. The update changes
/// the rows only when the renewal moves their expiry (and then appends `hold_renewed` for each
/// line); when it changes nothing, a read with the same parameters tells a renewal with nothing
/// to move (applied, the hold unchanged, no event) from a refusal.
pub(crate) async fn renew(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition>, StoreError> {
    let renewal = Renewal::of(request)?;
    let lines = change_lines(
        sql,
        conn,
        renewal.bind(&sql.renew),
        EventKind::HoldRenewed,
        request.now,
    )
    .await?;
    if let Some(hold) = line_of(lines, request.hold_id)? {
        return Ok(Step::keep(Transition::Applied(hold)));
    }
    let unmoved = renewal
        .bind(&sql.renew_unmoved)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let transition = match unmoved {
        Some(row) => Transition::Applied(hold_from_row(&row)?),
        None => not_applied(hold_by_id(sql, conn, request.hold_id, request.scope).await?),
    };
    Ok(Step::keep(transition))
}

/// A renewal's parameters, bound the same way to each of its statements: `?1` now, `?2` the
/// hold's (or booking's) id, `?3` lifetime and `?4` maximum life in microseconds, `?5` and `?6`
/// the scope.
pub(crate) struct Renewal<'r> {
    request: &'r RenewRequest<'r>,
    lifetime: i64,
    max_life: i64,
}

impl<'r> Renewal<'r> {
    pub(crate) fn of(request: &'r RenewRequest<'r>) -> Result<Self, StoreError> {
        let micros = |d: chrono::Duration| {
            d.num_microseconds()
                .ok_or_else(|| StoreError::failed("a hold lifetime overflows microseconds"))
        };
        Ok(Renewal {
            request,
            lifetime: micros(request.lifetime)?,
            max_life: micros(request.max_life)?,
        })
    }

    pub(crate) fn bind<'q>(&self, statement: &'q str) -> Query<'q> {
        let (any, owner) = self.request.scope.as_filter();
        sqlx::query(AssertSqlSafe(statement))
            .bind(to_micros(self.request.now))
            .bind(self.request.hold_id.get())
            .bind(self.lifetime)
            .bind(self.max_life)
            .bind(any)
            .bind(owner.map(str::to_owned))
    }
}

/// Cancels the active held or confirmed hold `hold_id` with every line of its booking, giving
/// each line's units back to its slot.
pub(crate) async fn cancel(
    sql: &Statements,
    conn: &mut SqliteConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let (any, owner) = scope.as_filter();
    let update = sqlx::query(AssertSqlSafe(sql.cancel.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner);
    let lines = change_lines(sql, conn, update, EventKind::HoldCancelled, now).await?;
    let transition = match line_of(lines, hold_id)? {
        Some(hold) => Transition::Applied(hold),
        None => not_applied(hold_by_id(sql, conn, hold_id, scope).await?),
    };
    Ok(Step::keep(transition))
}

/// Where a [`Run`]'s writes open their unit of work.
pub(crate) enum Target<'a> {
    /// The store's own: a place in its write queue, then `BEGIN IMMEDIATE` (a hold tries the
    /// group commit first); reads on a connection of the pool.
    Store(&'a SqliteStore),
    /// The caller's connection: a savepoint in its transaction, or a transaction of its own.
    Caller(&'a mut SqliteConnection),
}

/// The store's operations on one target: the one implementation of each, run by the store's
/// own traits and by [`SqliteWrites`](crate::SqliteWrites) alike. Each write opens its unit
/// of work, runs its statements ([`Step`]) and finishes the unit as the step says.
pub(crate) struct Run<'a> {
    pub(crate) sql: Arc<Statements>,
    pub(crate) target: Target<'a>,
}

/// An open unit of work: the store's write transaction, or one on the caller's connection.
pub(crate) enum Unit<'a> {
    Store(SqliteTransaction),
    Caller(Transaction<'a, Sqlite>),
}

impl Unit<'_> {
    pub(crate) fn connection(&mut self) -> &mut SqliteConnection {
        match self {
            Unit::Store(tx) => tx.connection(),
            Unit::Caller(tx) => tx,
        }
    }

    pub(crate) async fn finish<T>(
        self,
        step: Result<Step<T>, StoreError>,
    ) -> Result<T, StoreError> {
        match self {
            Unit::Store(tx) => tx.finish(step).await,
            Unit::Caller(tx) => finish(tx, step).await,
        }
    }
}

/// A connection to read on: one of the pool's for this call, or the caller's.
pub(crate) enum Conn<'a> {
    Pooled(sqlx::pool::PoolConnection<Sqlite>),
    Caller(&'a mut SqliteConnection),
}

impl std::ops::Deref for Conn<'_> {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        match self {
            Conn::Pooled(conn) => conn,
            Conn::Caller(conn) => conn,
        }
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        match self {
            Conn::Pooled(conn) => conn,
            Conn::Caller(conn) => conn,
        }
    }
}

impl SqliteStore {
    /// The operations on this store's own transactions and pool.
    pub(crate) fn run(&self) -> Run<'_> {
        Run {
            sql: Arc::clone(&self.sql),
            target: Target::Store(self),
        }
    }
}

impl Run<'_> {
    /// Opens a write's unit of work on the target.
    pub(crate) async fn unit(&mut self) -> Result<Unit<'_>, StoreError> {
        Ok(match &mut self.target {
            Target::Store(store) => Unit::Store(store.begin_write().await?),
            Target::Caller(conn) => Unit::Caller(begin_unit(conn).await?),
        })
    }

    /// A connection to read on.
    pub(crate) async fn conn(&mut self) -> Result<Conn<'_>, StoreError> {
        Ok(match &mut self.target {
            Target::Store(store) => Conn::Pooled(store.pool.acquire().await.map_err(map_err)?),
            Target::Caller(conn) => Conn::Caller(conn),
        })
    }

    pub(crate) async fn create_slot(
        &mut self,
        slot: &NewSlot,
        now: Timestamp,
    ) -> Result<Slot, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = create_slot(&sql, unit.connection(), slot, now).await;
        unit.finish(step).await
    }

    pub(crate) async fn create_hold(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let outcome = match &mut self.target {
            Target::Store(store) => store.place_hold(&request).await?,
            Target::Caller(conn) => hold(&self.sql, conn, &request).await?,
        };
        Ok(Decided::new(request.now, outcome))
    }

    /// An "any one of these" hold: the core's rule, each candidate's attempt on this target.
    pub(crate) async fn create_hold_any(
        &mut self,
        request: AnyHoldRequest<'_>,
    ) -> Result<Decided<AnyHoldOutcome>, StoreError> {
        first_that_fits(self, request).await
    }

    pub(crate) async fn confirm_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = confirm(&sql, unit.connection(), hold_id, scope, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn cancel_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = cancel(&sql, unit.connection(), hold_id, scope, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn renew_hold(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = renew(&sql, unit.connection(), &request).await;
        Ok(Decided::new(request.now, unit.finish(step).await?))
    }
}

/// A hold an update did not change: as it is now, or not found in the caller's scope.
pub(crate) fn not_applied(hold: Option<Hold>) -> Transition {
    match hold {
        Some(hold) => Transition::NotApplied(hold),
        None => Transition::NotFound,
    }
}

pub(crate) async fn hold_by_id<'e, E>(
    sql: &Statements,
    executor: E,
    hold_id: HoldId,
    scope: &Scope,
) -> Result<Option<Hold>, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let (any, owner) = scope.as_filter();
    sqlx::query(AssertSqlSafe(sql.hold_by_id.as_str()))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner)
        .fetch_optional(executor)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(hold_from_row)
        .transpose()
}

/// A write transaction of a [`SqliteStore`], its [`TransactionalStore::Transaction`](slot_booking::TransactionalStore::Transaction): begun
/// with `BEGIN IMMEDIATE`, so it holds SQLite's write lock from its first statement to its
/// end, and holding the store's in-process write queue as long, so that the store's other
/// writers wait in that queue rather than in SQLite's busy handler.
///
/// While it is open, write through it (with [`TransactionalStore::writes`](slot_booking::TransactionalStore::writes) or
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

#[slot_booking::async_trait]
impl PlaceOne for Run<'_> {
    async fn place_one(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        self.create_hold(request).await
    }
}
