//! Concurrent batches of bookings over slots that share pools: the batches of
//! [`check_concurrent_bookings`](super::check_concurrent_bookings), on slots two pools
//! overlap, with each pool's invariant checked after every batch too.

use std::collections::HashMap;
use std::future::Future;

use proptest::prelude::*;

use crate::conformance::{Fixture, HOLD_TTL};
use crate::model::{Hold, HoldStatus, NewPool, SlotId, Timestamp};
use crate::store::{BookingStore, PoolStore, Store};

use super::concurrent_bookings::{batch_slots, run_batches_on, step, BookingStep};
use super::runner::run_property;
use super::Mismatch;

/// Runs batches concurrently against a fresh store whose four slots (capacities 1, 2, 3, 5)
/// draw from two pools: 4 units over the last three, 3 over the first and the last.
async fn run_pooled<S: Store + BookingStore + PoolStore>(
    store: S,
    batches: &[(Vec<BookingStep>, i64)],
) -> Result<(), Mismatch> {
    let f = Fixture::new(store);
    let slots = batch_slots(&f).await?;
    let mut pools = Vec::new();
    for (capacity, members) in [(4, vec![1, 2, 3]), (3, vec![0, 3])] {
        let failed = |e: crate::BookingError| Mismatch(format!("pool setup: {e}"));
        let pool = f
            .engine
            .create_pool(NewPool::new(capacity))
            .await
            .map_err(failed)?;
        for i in members {
            f.engine
                .attach_slot(pool.pool_id, slots[i])
                .await
                .map_err(failed)?;
        }
        pools.push(pool.pool_id);
    }
    let check = async |lines: &HashMap<SlotId, Vec<Hold>>, now: Timestamp| {
        for &pool_id in &pools {
            let usage = f
                .engine
                .store()
                .get_pool(pool_id, now)
                .await
                .map_err(|e| Mismatch(format!("get_pool: {e}")))?
                .outcome
                .ok_or_else(|| Mismatch(format!("pool {pool_id} is missing")))?;
            let holds = usage
                .pool
                .slots
                .iter()
                .flat_map(|s| lines.get(s).into_iter().flatten());
            let (mut stored, mut confirmed, mut active) = (0, 0, 0);
            for hold in holds {
                match hold.status {
                    HoldStatus::Held => stored += hold.quantity,
                    HoldStatus::Confirmed => confirmed += hold.quantity,
                    _ => {}
                }
                if hold.is_active_at(now) {
                    active += hold.quantity;
                }
            }
            let (capacity, remaining) = (usage.pool.capacity, usage.pool.stored_remaining);
            if remaining < 0 || remaining + stored + confirmed != capacity {
                return Err(Mismatch(format!(
                    "pool {pool_id}: remaining {remaining} + held {stored} + confirmed {confirmed} != capacity {capacity}"
                )));
            }
            if confirmed + active > capacity {
                return Err(Mismatch(format!(
                    "pool {pool_id} oversold: confirmed {confirmed} + active {active} > {capacity}"
                )));
            }
        }
        Ok(())
    };
    run_batches_on(&f, &slots, batches, check).await
}

/// Runs `cases` random sequences of concurrent batches of bookings over slots that share two
/// pools (more with `PROPTEST_CASES`), each on a fresh store from `factory`: after each batch
/// every booking is whole, every success shows, and every slot's and pool's invariant holds
/// (no pool oversold).
///
/// # Panics
///
/// When a batch leaves the store violating any of these.
pub fn check_concurrent_pools<S, F, Fut>(factory: F, cases: u32)
where
    S: Store + BookingStore + PoolStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let ttl = HOLD_TTL.as_micros() as i64;
    let batch = (
        proptest::collection::vec(step(), 1..=12),
        prop_oneof![Just(0i64), Just(1_000_000), Just(ttl)],
    );
    let batches = proptest::collection::vec(batch, 1..=6);
    run_property(
        "concurrent pool check",
        cases,
        4,
        &batches,
        factory,
        |store, batches| async move { run_pooled(store, &batches).await },
    );
}
