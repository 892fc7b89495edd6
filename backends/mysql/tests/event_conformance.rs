//! The core crate's event conformance suite, each case on a fresh database of the
//! MariaDB/MySQL server `MYSQL_URL` names, dropped when the case ends.

mod common;

slot_booking::event_conformance_tests!(|| common::owned_store("evconf"));
