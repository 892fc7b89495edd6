//! The conformance suite against the in-memory store.

slot_booking::conformance_tests!(|| async { slot_booking::MemoryStore::new() });
