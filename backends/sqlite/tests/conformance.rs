//! The core crate's conformance suite, each case on a fresh SQLite database file (removed when
//! the case ends).

mod common;

slot_booking::conformance_tests!(|| common::owned_store("conformance"));
