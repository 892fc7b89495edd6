//! The core crate's booking conformance suite, each case on a fresh SQLite database file
//! (removed when the case ends), the cases that read the event log and the model-based
//! sequences included.
//!
//! The core's `conformance::kit::Owned` does not forward `BookingStore` (yet), so the store and
//! its file are kept together here by a wrapper of this file's own, which forwards every trait
//! the booking cases use.

mod common;

use slot_booking_sqlite::SqliteStore;

/// A store on a temporary database file, removed after the store (fields drop in order).
struct BookingDb {
    store: SqliteStore,
    _db: common::TempDb,
}

slot_booking::forward_store!(
    impl[] HoldStore, BookingStore, SlotAdmin, HoldQueries, EventStore for BookingDb,
    |this| &this.store
);

async fn booking_db() -> BookingDb {
    let db = common::TempDb::new("bookings");
    BookingDb {
        store: db.store().await,
        _db: db,
    }
}

slot_booking::booking_conformance_tests!(events, booking_db);
