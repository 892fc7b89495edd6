//! The core crate's conformance suite, each case on a fresh PostgreSQL schema (dropped when the
//! case ends). Without a usable server (`DATABASE_URL`, or PostgreSQL's default local address)
//! every case prints that it was SKIPPED and the binary says at exit how many were (on CI,
//! where `CI` is set, it panics instead).

mod common;

slot_booking::conformance_tests!(optional: || common::owned_store("conformance"));

/// The same cases on a store without its fast paths: every hold and booking placed by the
/// core's rules over the store's kernel.
mod composed {
    use super::common;

    slot_booking::conformance_tests!(optional: || common::composed_store("conformance"));
}
