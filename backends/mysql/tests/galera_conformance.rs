//! The conformance suites on the three-node Galera cluster `.ci/galera` starts, through a
//! store that sends each call to the next node in turn: writes certified across nodes, reads
//! served by another node than the write before them, races between nodes. Bookings and
//! pools raced across nodes are where a transaction aborted under a step showed (units taken
//! with no hold for them, before the store's units guarded against it: see the crate's
//! `units` module).
//!
//! Writes inside the caller's transaction run on one node (a transaction is one connection's):
//! the transaction conformance suite, with bookings, on node 2.

mod common;

slot_booking::conformance_tests!(|| common::spread_store("gconf"));

mod events {
    slot_booking::event_conformance_tests!(|| super::common::spread_store("gevents"));
}

mod bookings {
    slot_booking::booking_conformance_tests!(events, || super::common::spread_store("gbook"));
}

mod pools {
    slot_booking::pool_conformance_tests!(|| super::common::spread_store("gpool"));
}

mod waitlists {
    slot_booking::waitlist_conformance_tests!(|| super::common::spread_store("gwait"));
}

mod transactions {
    slot_booking::transaction_conformance_tests!(|| super::common::node_store("gtx"));

    mod bookings {
        slot_booking::booking_conformance_tests!(
            transactions,
            || super::super::common::node_store("gtxbookings")
        );
    }
}
