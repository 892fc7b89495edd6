//! The core crate's event conformance suite, each case on a fresh SQLite database file
//! (removed when the case ends), made as for `conformance.rs`.

mod common;

slot_booking::event_conformance_tests!(|| common::owned_store("events"));
