//! The conformance suite against the in-memory store.

slot_booking::conformance_tests!(|| async { slot_booking::MemoryStore::new() });

mod events {
    slot_booking::event_conformance_tests!(|| async { slot_booking::MemoryStore::new() });
}

mod bookings {
    slot_booking::booking_conformance_tests!(events, || async { slot_booking::MemoryStore::new() });
}

mod pools {
    slot_booking::pool_conformance_tests!(|| async { slot_booking::MemoryStore::new() });
}

mod waitlists {
    slot_booking::waitlist_conformance_tests!(|| async { slot_booking::MemoryStore::new() });
}

/// Every write cut at each of its await points leaves no half-written step.
#[test]
fn cut_calls_leave_nothing() {
    slot_booking::conformance::run(
        || async { slot_booking::MemoryStore::new() },
        slot_booking::conformance::cuts::cut_calls_leave_nothing,
    );
}
