//! The core crate's booking conformance suite (with the event log's booking cases), each case
//! on a fresh database of the MariaDB/MySQL server `MYSQL_URL` names (the local MariaDB by
//! default), dropped when the case ends.

mod common;

slot_booking::booking_conformance_tests!(events, || common::owned_store("bookings"));
