//! The core crate's pool conformance suite, each case on a fresh SQLite database file
//! (removed when the case ends), the model-based and concurrent pool sequences included.
//!
//! The core's `conformance::kit::Owned` does not forward `PoolStore` (yet), so the store and
//! its file are kept together here by a wrapper of this test's own.

mod common;

use common::TempDb;
use slot_booking_sqlite::SqliteStore;

/// A store on a database file of its own, the file removed after the store is dropped.
struct PoolDb {
    store: SqliteStore,
    _db: TempDb,
}

slot_booking::forward_store!(
    impl[] HoldStore, BookingStore, PoolStore, SlotAdmin, HoldQueries for PoolDb,
    |this| &this.store
);

async fn pool_db() -> PoolDb {
    let db = TempDb::new("pools");
    PoolDb {
        store: db.store().await,
        _db: db,
    }
}

slot_booking::pool_conformance_tests!(pool_db);
