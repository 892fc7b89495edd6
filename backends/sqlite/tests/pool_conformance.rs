//! The core crate's pool conformance suite, each case on a fresh SQLite database file
//! (removed when the case ends), the model-based and concurrent pool sequences and the reads
//! in the caller's transaction included.

mod common;

slot_booking::pool_conformance_tests!(|| common::owned_store("pools"));

mod transactions {
    slot_booking::pool_conformance_tests!(transactions, || super::common::owned_store("pools"));
}

/// The same cases on a store without its fast path: every hold placed by the core's rule over
/// the store's kernel.
mod composed {
    use super::common;

    slot_booking::pool_conformance_tests!(|| common::composed_store("pools"));
}
