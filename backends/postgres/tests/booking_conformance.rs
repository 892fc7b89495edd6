//! The core crate's booking conformance cases (bookings of several lines: all or none, changed
//! whole, replayed by key, raced), each on a fresh PostgreSQL schema (dropped when the case
//! ends). Without a usable server (`DATABASE_URL`, or PostgreSQL's default local address) every
//! case prints that it was SKIPPED and the binary says at exit how many were (on CI, where `CI`
//! is set, it panics instead).

mod common;

/// The store and its schema's guard. The core's `Owned` does not forward `BookingStore` (yet),
/// so the cases run on this wrapper, which forwards what they use.
struct Booked(common::OwnedStore);

slot_booking::forward_store!(
    impl[] HoldStore, SlotAdmin, BookingStore for Booked,
    |this| &this.0.store
);

slot_booking::booking_conformance_tests!(optional: || async {
    common::owned_store("bkconf").await.map(Booked)
});
