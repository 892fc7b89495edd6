//! The core crate's waitlist conformance suite, each case on a fresh SQLite database file
//! (removed when the case ends).

mod common;

slot_booking::waitlist_conformance_tests!(|| common::owned_store("waitlists"));
