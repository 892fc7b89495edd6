//! The store's own write transactions ([`SqliteTransaction`]), its writes on the caller's
//! connection ([`SqliteWrites`]), and its traits, each generated from the one write path
//! ([`Run`](crate::run::Run)).

use super::*;
use crate::run::{Run, SqliteTransaction, Target};
// The administrative writes of `Run` (forwarded below) follow from its `edit_slot`.
use slot_booking::store::{EditPools as _, EditSlots as _};

// Every operation of the store's own, through the same statements as the caller's writes.
slot_booking::forward_store!(
    impl[] HoldStore, BookingStore, PoolStore, WaitlistStore, SlotAdmin, HoldQueries for SqliteStore,
    |this| this.run()
);

/// The store's writes on a connection or transaction the caller owns: the
/// [`TransactionWrites`](slot_booking::TransactionWrites) of [`SqliteStore::on`], which an
/// [`EngineTransaction`](slot_booking::EngineTransaction) runs its calls with.
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
    pub(crate) run: Run<'c>,
}

impl std::fmt::Debug for SqliteWrites<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteWrites").finish_non_exhaustive()
    }
}

impl SqliteWrites<'_> {
    /// The caller's connection these writes run on, for its own statements in between.
    pub fn connection(&mut self) -> &mut SqliteConnection {
        match &mut self.run.target {
            Target::Caller(conn) => conn,
            // `SqliteStore::on` is the only maker of these writes.
            Target::Store(_) => unreachable!("SqliteWrites runs on the caller's connection"),
        }
    }
}

impl SqliteStore {
    /// This store's writes on `conn`, a connection or transaction the caller owns: the
    /// [`TransactionWrites`](slot_booking::TransactionWrites) that
    /// [`TransactionalStore::writes`] hands an
    /// [`EngineTransaction`](slot_booking::EngineTransaction) (see [`SqliteWrites`]), whose
    /// calls are the way an application writes inside its transaction
    /// ([`BookingEngine::transaction`](slot_booking::BookingEngine::transaction)). Called
    /// directly, they are the store-level operations, each with the store's contract.
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
            run: Run {
                sql: Arc::clone(&self.sql),
                target: Target::Caller(conn),
                fast_paths: self.fast_paths,
            },
        }
    }
}

// Every write on the caller's connection, through the same statements as the store's own.
slot_booking::forward_store!(
    impl['c] TransactionWrites, TransactionBookings for SqliteWrites<'c>,
    |this| &mut this.run
);

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
