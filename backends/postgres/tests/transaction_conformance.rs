//! The core crate's conformance suite for writes inside a transaction, each case on a fresh
//! PostgreSQL schema (dropped when the case ends). Without `DATABASE_URL` every case prints that
//! it was SKIPPED (on CI, where `CI` is set, it panics instead).

mod common;

slot_booking::transaction_conformance_tests!(optional: || common::owned_store("txconf"));
