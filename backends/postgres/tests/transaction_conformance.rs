//! The core crate's conformance suite for writes inside a transaction, each case on a fresh
//! PostgreSQL schema (dropped when the case ends). Without a usable server (`DATABASE_URL`, or
//! PostgreSQL's default local address) every case prints that it was SKIPPED and the binary
//! says at exit how many were (on CI, where `CI` is set, it panics instead).

mod common;

slot_booking::transaction_conformance_tests!(optional: || common::owned_store("txconf"));

mod bookings {
    use super::common;

    slot_booking::booking_conformance_tests!(transactions, optional: || common::owned_store("txbook"));
}
