//! The core crate's transaction conformance suite, each case on a fresh SQLite database file
//! (removed when the case ends).

mod common;

slot_booking::transaction_conformance_tests!(|| common::owned_store("transactions"));

mod bookings {
    use super::common;

    slot_booking::booking_conformance_tests!(transactions, || common::owned_store("txbookings"));
}
