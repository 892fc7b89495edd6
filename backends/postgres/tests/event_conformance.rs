//! The core crate's event conformance suite, each case on a fresh PostgreSQL schema (dropped
//! when the case ends). Without `DATABASE_URL` every case prints that it was SKIPPED (on CI,
//! where `CI` is set, it panics instead).

mod common;

slot_booking::event_conformance_tests!(optional: || common::owned_store("evconf"));
