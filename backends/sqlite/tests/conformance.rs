//! The core crate's conformance suite, each case on a fresh SQLite database file (removed when
//! the case ends).

mod common;

slot_booking::conformance_tests!(|| common::owned_store("conformance"));

/// The same cases on a store without its fast path: every hold placed by the core's rule over
/// the store's kernel.
mod composed {
    use super::common;

    slot_booking::conformance_tests!(|| common::composed_store("conformance"));
}
