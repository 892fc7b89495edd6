//! The store's traits on the pool and on the caller's connection, each generated from the
//! one write path ([`Run`](crate::writes::Run)), and transactions the store opens itself.

use slot_booking::store::EditSlots as _;
use slot_booking::{PoolId, PoolUsage};

use super::*;

// Every operation on a connection of the pool, through the same statements as the caller's.
slot_booking::forward_store!(
    impl[] HoldStore, SlotAdmin, HoldQueries for PostgresStore,
    |this| this.pooled()
);

/// The store's writes on a connection the caller owns, usually inside the caller's own
/// transaction: made by [`PostgresStore::on`], and run through
/// [`BookingEngine::within`](slot_booking::BookingEngine::within), which validates each
/// request and answers as the engine does. Each write runs the same statements as the
/// [`Store`](slot_booking::Store) method of the same name; see [`PostgresStore::on`] for what changes inside a
/// transaction.
#[derive(Debug)]
pub struct PostgresWrites<'c> {
    pub(crate) store: PostgresStore,
    pub(crate) conn: &'c mut PgConnection,
}

impl PostgresWrites<'_> {
    /// The caller's connection, to run statements of its own between the store's writes (in
    /// an [`EngineTransaction`](slot_booking::EngineTransaction), run them with its `run`).
    pub fn connection(&mut self) -> &mut PgConnection {
        self.conn
    }

    /// The store's statements on the caller's connection.
    pub(crate) fn run(&mut self) -> Run<'_> {
        Run {
            store: self.store.clone(),
            conn: Conn::Caller(self.conn),
        }
    }
}

// Every write on the caller's connection, through the same statements as the pool's.
slot_booking::forward_store!(
    impl['c] TransactionWrites, TransactionBookings for PostgresWrites<'c>,
    |this| this.run()
);

/// Transactions on the store's pool, for the conformance suite or an application that lets the
/// store open them: [`begin`](TransactionalStore::begin) is the pool's `begin` (READ
/// COMMITTED, the server's default), and [`writes`](TransactionalStore::writes) is
/// [`PostgresStore::on`] on the transaction's connection.
#[async_trait]
impl TransactionalStore for PostgresStore {
    type Transaction = sqlx::Transaction<'static, Postgres>;

    type Writes<'t> = PostgresWrites<'t>;

    async fn begin(&self) -> Result<Self::Transaction, StoreError> {
        self.pool.begin().await.map_err(map_err)
    }

    fn writes<'t>(&'t self, transaction: &'t mut Self::Transaction) -> PostgresWrites<'t> {
        self.on(transaction)
    }

    async fn commit(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        transaction.commit().await.map_err(map_err)
    }

    async fn rollback(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        transaction.rollback().await.map_err(map_err)
    }
}

impl Run<'_> {
    /// The slot and its units at `now`, on this connection.
    pub(crate) async fn slot_usage_at(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().slot_usage.as_str()))
            .bind(slot_id.get())
            .bind(self.now_param(now))
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        usage_from_row(&row)
    }
}

/// Units of pools and slots read on the caller's connection, inside its transaction.
#[async_trait]
impl slot_booking::TransactionPools for PostgresWrites<'_> {
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
        self.run().slot_usage_at(slot_id, now).await
    }
}
