//! The core crate's waitlist conformance suite, each case on a fresh database of the
//! MariaDB/MySQL server `MYSQL_URL` names (the local MariaDB by default), dropped when the case
//! ends: the suite's cases and its models without and with pools.

mod common;

slot_booking::waitlist_conformance_tests!(|| common::owned_store("waitlists"));
