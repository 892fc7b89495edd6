//! The model-based property test against the in-memory store, with many more and longer
//! sequences than the per-backend default (SQL stores pay a fresh database per case).

#[test]
fn memory_store_matches_the_model() {
    slot_booking::conformance::oracle::check(
        || async { slot_booking::MemoryStore::new() },
        3000,
        80,
    );
}
