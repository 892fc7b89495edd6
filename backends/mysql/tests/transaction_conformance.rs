//! The core crate's transaction conformance suite, each case on a fresh database of the
//! MariaDB/MySQL server `MYSQL_URL` names (the local MariaDB by default), dropped when the case
//! ends: writes inside the caller's transaction ([`MySqlStore::on`]), bookings included.

mod common;

slot_booking::transaction_conformance_tests!(|| common::owned_store("transactions"));

mod bookings {
    slot_booking::booking_conformance_tests!(transactions, || super::common::owned_store(
        "txbookings"
    ));
}
