//! The one write path of the store ([`Run`]) and its units of work: every write runs as
//! statements on one connection, in the store's own write transactions (its
//! [`Store`](slot_booking::Store) methods and its [`TransactionalStore`](slot_booking::TransactionalStore)),
//! or on a connection or transaction the caller owns ([`SqliteStore::on`]).
//!
//! An operation runs inside a unit of work it is handed (a transaction, or a savepoint in the
//! caller's transaction) and answers with a [`Step`]: its outcome and whether its writes stay.
//! [`finish`] then commits or releases the unit, or rolls it back, so both paths share one
//! implementation of each rule and differ only in how the unit is opened. The operations
//! themselves are `impl Run` blocks in the file of their capability.

use std::sync::Arc;

use slot_booking::StoreError;
use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Sqlite, Transaction};
use tokio::sync::OwnedMutexGuard;

use crate::sql::Statements;
use crate::{map_err, SqliteStore};

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
pub(crate) async fn begin_unit(
    conn: &mut SqliteConnection,
) -> Result<Transaction<'_, Sqlite>, StoreError> {
    let unit = if conn.is_in_transaction() {
        Connection::begin(conn).await
    } else {
        conn.begin_with("BEGIN IMMEDIATE").await
    };
    unit.map_err(map_err)
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
    /// A hold tries the one-statement insert first ([`SqliteStore::without_fast_paths`]).
    pub(crate) fast_paths: bool,
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
            fast_paths: self.fast_paths,
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
