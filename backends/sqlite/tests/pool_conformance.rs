//! The core crate's pool conformance suite, each case on a fresh SQLite database file
//! (removed when the case ends), the model-based and concurrent pool sequences and the reads
//! in the caller's transaction included.
//!
//! The core's `conformance::kit::Owned` does not forward `PoolStore` (yet), so the store and
//! its file are kept together here by a wrapper of this test's own.

mod common;

use common::TempDb;
use slot_booking::{StoreError, TransactionalStore};
use slot_booking_sqlite::{SqliteStore, SqliteTransaction, SqliteWrites};

/// A store on a database file of its own, the file removed after the store is dropped.
struct PoolDb {
    store: SqliteStore,
    _db: TempDb,
}

slot_booking::forward_store!(
    impl[] HoldStore, BookingStore, PoolStore, SlotAdmin, HoldQueries for PoolDb,
    |this| &this.store
);

#[slot_booking::async_trait]
impl TransactionalStore for PoolDb {
    type Transaction = SqliteTransaction;

    type Writes<'t>
        = SqliteWrites<'t>
    where
        Self: 't;

    async fn begin(&self) -> Result<SqliteTransaction, StoreError> {
        self.store.begin().await
    }

    fn writes<'t>(&'t self, transaction: &'t mut SqliteTransaction) -> SqliteWrites<'t> {
        self.store.writes(transaction)
    }

    async fn commit(&self, transaction: SqliteTransaction) -> Result<(), StoreError> {
        self.store.commit(transaction).await
    }

    async fn rollback(&self, transaction: SqliteTransaction) -> Result<(), StoreError> {
        self.store.rollback(transaction).await
    }
}

async fn pool_db() -> PoolDb {
    let db = TempDb::new("pools");
    PoolDb {
        store: db.store().await,
        _db: db,
    }
}

slot_booking::pool_conformance_tests!(pool_db);

mod transactions {
    slot_booking::pool_conformance_tests!(transactions, super::pool_db);
}
