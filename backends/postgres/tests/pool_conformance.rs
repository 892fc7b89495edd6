//! The core crate's pool conformance cases (capacities shared by several slots: taken and
//! given back with every unit of their slots, shown in availability, administered, raced; the
//! model-based sequences with pools), each on a fresh PostgreSQL schema (dropped when the case
//! ends). Without a usable server (`DATABASE_URL`, or PostgreSQL's default local address)
//! every case prints that it was SKIPPED and the binary says at exit how many were (on CI,
//! where `CI` is set, it panics instead).

mod common;

use common::SchemaGuard;
use slot_booking_postgres::PostgresStore;

/// The store and its schema's guard, dropped after it: `conformance::kit::Owned` with
/// `PoolStore` too (the kit's forwards every store trait but that one).
struct PoolOwned {
    store: PostgresStore,
    _guard: SchemaGuard,
}

slot_booking::forward_store!(
    impl[] HoldStore, BookingStore, SlotAdmin, HoldQueries, PoolStore for PoolOwned,
    |this| &this.store
);

async fn owned(test: &str) -> Option<PoolOwned> {
    let ctx = common::setup(test).await?;
    Some(PoolOwned {
        store: ctx.store,
        _guard: ctx.guard,
    })
}

slot_booking::pool_conformance_tests!(optional: || owned("poolconf"));
