//! The core crate's pool conformance cases (capacities shared by several slots: taken and
//! given back with every unit of their slots, shown in availability, administered, raced; the
//! model-based sequences with pools; the reads in the caller's transaction), each on a fresh
//! PostgreSQL schema (dropped when the case ends). Without a usable server (`DATABASE_URL`, or
//! PostgreSQL's default local address) every case prints that it was SKIPPED and the binary
//! says at exit how many were (on CI, where `CI` is set, it panics instead).

mod common;

slot_booking::pool_conformance_tests!(optional: || common::owned_store("poolconf"));

mod transactions {
    use super::common;

    slot_booking::pool_conformance_tests!(transactions, optional: || common::owned_store("pooltx"));
}

/// The same cases on a store without its fast paths: every hold and booking placed by the
/// core's rules over the store's kernel.
mod composed {
    use super::common;

    slot_booking::pool_conformance_tests!(optional: || common::composed_store("poolconf"));
}
