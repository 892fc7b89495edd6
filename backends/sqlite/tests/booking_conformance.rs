//! The core crate's booking conformance suite, each case on a fresh SQLite database file
//! (removed when the case ends), the cases that read the event log and the model-based
//! sequences included.

mod common;

slot_booking::booking_conformance_tests!(events, || common::owned_store("bookings"));
