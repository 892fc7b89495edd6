//! The store's writes on a connection the caller owns ([`MySqlWrites`], made by
//! [`MySqlStore::on`]) and transactions the store opens on its pool
//! ([`TransactionalStore`]): the same operations as the store's own ([`Run`]), each in a
//! savepoint of the caller's transaction instead of a transaction of its own.

use slot_booking::{
    async_trait, PoolId, PoolUsage, SlotId, SlotUsage, StoreError, Timestamp, TransactionPools,
    TransactionalStore,
};
use sqlx::mysql::MySqlConnection;
use sqlx::MySql;

use crate::run::Run;
use crate::{map_err, MySqlStore};
// The administrative writes of `Run` (forwarded below) follow from its `edit_slot`.
use slot_booking::store::EditSlots as _;

/// The store's writes on a connection or transaction the caller owns, made by
/// [`MySqlStore::on`], for [`BookingEngine::within`](slot_booking::BookingEngine::within).
///
/// Each call is all or nothing inside the caller's transaction, its events included (they
/// commit or vanish with it): it runs under a `SAVEPOINT`, released when the call's writes
/// stay and rolled back when the request is refused or fails, so the caller's transaction stays
/// usable and unchanged by a refusal. See [`MySqlStore::on`] for conflicts.
pub struct MySqlWrites<'c> {
    store: MySqlStore,
    conn: &'c mut MySqlConnection,
}

impl std::fmt::Debug for MySqlWrites<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlWrites")
            .field("table_prefix", &self.store.table_prefix())
            .finish_non_exhaustive()
    }
}

impl MySqlWrites<'_> {
    /// The caller's connection, to run statements of its own between the store's writes.
    pub fn connection(&mut self) -> &mut MySqlConnection {
        self.conn
    }

    fn run(&mut self) -> Run<'_> {
        Run {
            store: &self.store,
            caller: Some(&mut *self.conn),
        }
    }
}

impl MySqlStore {
    /// This store's writes on `conn`, a connection the caller owns, usually inside the caller's
    /// own transaction: the [`TransactionWrites`](slot_booking::TransactionWrites) that [`TransactionalStore::writes`] hands an
    /// [`EngineTransaction`](slot_booking::EngineTransaction), whose calls are the way an
    /// application writes inside its transaction
    /// ([`BookingEngine::transaction`](slot_booking::BookingEngine::transaction)). Called
    /// directly, they are the store-level operations, each with the store's contract.
    ///
    /// - **Each call runs in a `SAVEPOINT`** of the caller's transaction, released when its
    ///   writes stay and rolled back when it refuses (a hold that found no unit, a change that
    ///   does not fit: the expired holds it reclaimed to try are undone too) or fails. On a
    ///   connection outside any transaction, each call is a transaction of its own, committed
    ///   before it answers and retried on a conflict as the store's own writes are.
    /// - **A conflict is not retried inside your transaction.** A deadlock (1213) or lock wait
    ///   timeout (1205) in a call, or a Galera certification failure, ends or dooms the whole
    ///   transaction, your own writes included: InnoDB rolls a deadlock victim back, and on a
    ///   Galera cluster the `COMMIT` fails. The call answers [`StoreError::unavailable`] with a
    ///   [`Conflict`](crate::Conflict) as its source; your `COMMIT` can fail the same way.
    ///   Roll back and run your whole transaction again.
    /// - **Row locks are held until your transaction ends**, the rows of a refusal's rolled
    ///   back savepoint included (InnoDB keeps them): keep such transactions short. A call may
    ///   lock rows out of the store's lock order relative to what your transaction locked
    ///   before; a deadlock is then answered as above.
    /// - Begin the transaction through sqlx (as above), which keeps count of it: each call
    ///   nests a savepoint in it. On a transaction begun by a raw `BEGIN` statement sqlx
    ///   would issue `BEGIN` again, which commits it implicitly.
    /// - READ COMMITTED is advised for the caller's connection, as for the pool's.
    /// - Do not drop a call before it answers: sqlx's MySQL connections are not safe to stop
    ///   midway (a result half read leaves the connection out of step with the server; its
    ///   next statement can wait forever). An `EngineTransaction` finishes a dropped call on a
    ///   task of its own; the store's own calls on its pool close a connection they were cut
    ///   on instead of returning it. No call changes a session variable.
    pub fn on<'c>(&self, conn: &'c mut MySqlConnection) -> MySqlWrites<'c> {
        MySqlWrites {
            store: self.clone(),
            conn,
        }
    }
}

// Every write on the caller's connection, through the same path as the store's own.
slot_booking::forward_store!(
    impl['c] TransactionWrites, TransactionBookings for MySqlWrites<'c>,
    |this| this.run()
);

/// Units of pools and slots read on the caller's connection, inside its transaction: what it
/// reads is what its transaction commits against.
#[async_trait]
impl TransactionPools for MySqlWrites<'_> {
    async fn get_pool(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Option<PoolUsage>, StoreError> {
        Ok(self.run().get_pool(pool_id, now).await?.outcome)
    }

    async fn slot_usage(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError> {
        self.run().slot_usage(slot_id, now).await
    }
}

/// Transactions on the store's pool: [`begin`](TransactionalStore::begin) is the pool's
/// `begin` (READ COMMITTED on a pool of [`MySqlStore::connect`]), and
/// [`writes`](TransactionalStore::writes) is [`MySqlStore::on`] on the transaction's
/// connection. A conflict in its writes or at its commit is not retried: see
/// [`MySqlStore::on`].
#[async_trait]
impl TransactionalStore for MySqlStore {
    type Transaction = sqlx::Transaction<'static, MySql>;

    type Writes<'t> = MySqlWrites<'t>;

    async fn begin(&self) -> Result<Self::Transaction, StoreError> {
        // On a task of its own: a `BEGIN` cut while it waits for the server would leave the
        // connection out of step (see `pooled.rs`); finished there, a transaction nobody
        // awaits any more is rolled back when dropped and its connection goes back clean.
        let pool = self.pool().clone();
        tokio::spawn(async move { pool.begin().await })
            .await
            .map_err(|_| StoreError::failed("beginning a transaction panicked"))?
            .map_err(map_err)
    }

    fn writes<'t>(&'t self, transaction: &'t mut Self::Transaction) -> MySqlWrites<'t> {
        self.on(transaction)
    }

    async fn commit(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        transaction.commit().await.map_err(map_err)
    }

    async fn rollback(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        transaction.rollback().await.map_err(map_err)
    }
}
