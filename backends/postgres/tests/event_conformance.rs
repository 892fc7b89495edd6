//! The core crate's event conformance suite, each case on a fresh PostgreSQL schema (dropped
//! when the case ends). Without a usable server (`DATABASE_URL`, or PostgreSQL's default local
//! address) every case prints that it was SKIPPED and the binary says at exit how many were (on
//! CI, where `CI` is set, it panics instead).

mod common;

slot_booking::event_conformance_tests!(optional: || common::owned_store("evconf"));
