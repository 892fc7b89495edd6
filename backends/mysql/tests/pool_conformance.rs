//! The core crate's pool conformance suite, each case on a fresh database of the MariaDB/MySQL
//! server `MYSQL_URL` names (the local MariaDB by default), dropped when the case ends.

mod common;

slot_booking::pool_conformance_tests!(|| common::owned_store("pools"));

mod transactions {
    slot_booking::pool_conformance_tests!(transactions, || super::common::owned_store("pools"));
}
