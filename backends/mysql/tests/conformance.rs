//! The core crate's conformance suite, each case on a fresh database of the MariaDB/MySQL
//! server `MYSQL_URL` names (the local MariaDB by default), dropped when the case ends.

mod common;

slot_booking::conformance_tests!(|| common::owned_store("conf"));
