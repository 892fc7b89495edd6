//! Pools through the engine on PostgreSQL: units taken from and given back to a slot's pools
//! with every hold, booking, cancel and reclaim; attach, detach and capacity changes; expired
//! holds of another slot of a pool reclaimed so a new hold fits; a race of bookings and
//! cancels over slots sharing pools, with no deadlock in the server's log. Every check of the
//! pool invariant counts with SQL from the tables.

mod common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use common::*;
use slot_booking::{
    BookingEngine, Clock, EventStore, ManualClock, NewBooking, NewHold, NewPool, NewSlot, PoolId,
    Scope, SlotId,
};
use slot_booking_postgres::PostgresStore;
use sqlx::AssertSqlSafe;

/// An engine on `store` whose clock reads `t0()` until a test moves it, with no cache.
fn engine(store: &PostgresStore) -> (BookingEngine<PostgresStore>, ManualClock) {
    let clock = ManualClock::new(t0());
    let engine = BookingEngine::builder(store.clone())
        .clock(clock.clone())
        .cache_period(StdDuration::ZERO)
        .build();
    (engine, clock)
}

async fn new_slot(engine: &BookingEngine<PostgresStore>, capacity: i32) -> SlotId {
    engine
        .create_slot(NewSlot::new(at(3600), at(7200), capacity))
        .await
        .unwrap()
        .slot_id
}

async fn new_pool(engine: &BookingEngine<PostgresStore>, capacity: i32) -> PoolId {
    engine
        .create_pool(NewPool::new(capacity))
        .await
        .unwrap()
        .pool_id
}

/// Every pool's invariant counted with SQL: `remaining + held (stored) + confirmed ==
/// capacity` over the holds of its slots, `remaining >= 0`; every slot's list of pools the
/// same as `slot_pools`; and every slot's own invariant. Returns (capacity, remaining,
/// taken) per pool, by id.
async fn assert_pools(store: &PostgresStore) -> Vec<(i64, i64, i64)> {
    let s = store.schema();
    let pools: Vec<(i64, i64, i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT p.id, p.capacity::int8, p.remaining::int8, \
                (SELECT coalesce(sum(h.quantity), 0)::int8 FROM \"{s}\".slot_pools sp \
                 JOIN \"{s}\".holds h ON h.slot_id = sp.slot_id \
                 WHERE sp.pool_id = p.id AND h.status IN ('held', 'confirmed')) \
         FROM \"{s}\".pools p ORDER BY p.id"
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    for &(id, capacity, remaining, taken) in &pools {
        assert!(remaining >= 0, "pool {id} oversold: remaining {remaining}");
        assert_eq!(
            remaining + taken,
            capacity,
            "pool {id}: remaining {remaining} + taken {taken} != capacity {capacity}"
        );
    }
    let mismatched: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{s}\".slots sl WHERE sl.pools::int8[] IS DISTINCT FROM ARRAY( \
             SELECT sp.pool_id FROM \"{s}\".slot_pools sp WHERE sp.slot_id = sl.id \
             ORDER BY sp.pool_id) AND NOT (sl.pools @> ARRAY( \
             SELECT sp.pool_id FROM \"{s}\".slot_pools sp WHERE sp.slot_id = sl.id) \
             AND sl.pools <@ ARRAY( \
             SELECT sp.pool_id FROM \"{s}\".slot_pools sp WHERE sp.slot_id = sl.id))"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(mismatched, 0, "slots.pools disagrees with slot_pools");
    let slots: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT id FROM \"{s}\".slots ORDER BY id"
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    for slot in slots {
        assert_invariant(store, SlotId(slot)).await;
    }
    pools.into_iter().map(|(_, c, r, t)| (c, r, t)).collect()
}

#[tokio::test]
async fn holds_bookings_and_cancels_move_pool_units() {
    let Some(ctx) = setup("pools_move").await else {
        return;
    };
    let (engine, _clock) = engine(&ctx.store);
    let morning = new_slot(&engine, 4).await;
    let evening = new_slot(&engine, 4).await;
    let day = new_pool(&engine, 5).await;
    engine.attach_slot(day, morning).await.unwrap();
    let summary = engine.attach_slot(day, evening).await.unwrap();
    assert_eq!(summary.slots, vec![morning, evening]);
    assert_eq!((summary.capacity, summary.remaining), (5, 5));

    let a = engine
        .place_hold(NewHold::new(morning, "a").quantity(4))
        .await
        .unwrap();
    let refused = engine
        .place_hold(NewHold::new(evening, "b").quantity(2))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "sold_out");
    let listing = engine.availability(Default::default()).await.unwrap();
    assert_eq!(listing.entry(evening).map(|e| e.remaining), Some(1));
    assert_eq!(assert_pools(&ctx.store).await, vec![(5, 1, 4)]);

    // A booking short in the pool fails, taking nothing.
    let short = engine
        .book(NewBooking::new("bk1").line(evening, 2))
        .await
        .unwrap_err();
    // One line: refused as a hold would be.
    assert_eq!(short.code(), "sold_out");
    assert_eq!(assert_pools(&ctx.store).await, vec![(5, 1, 4)]);

    engine
        .cancel(&Scope::Anonymous, a.hold.hold_id)
        .await
        .unwrap();
    assert_eq!(assert_pools(&ctx.store).await, vec![(5, 5, 0)]);

    let booked = engine
        .book(NewBooking::new("bk2").line(evening, 2).line(morning, 2))
        .await
        .unwrap();
    assert_eq!(assert_pools(&ctx.store).await, vec![(5, 1, 4)]);
    let pool = engine.get_pool(day).await.unwrap();
    assert_eq!((pool.remaining, pool.held, pool.confirmed), (1, 4, 0));
    engine
        .confirm_booking(&Scope::Anonymous, booked.booking.booking_id)
        .await
        .unwrap();
    let pool = engine.get_pool(day).await.unwrap();
    assert_eq!((pool.remaining, pool.held, pool.confirmed), (1, 0, 4));
    // Cancelling one line of a booking cancels the whole booking.
    engine
        .cancel(&Scope::Anonymous, booked.booking.lines[1].hold_id)
        .await
        .unwrap();
    assert_eq!(assert_pools(&ctx.store).await, vec![(5, 5, 0)]);

    // Detach gives a slot's units back; attach takes them.
    engine
        .place_hold(NewHold::new(evening, "c").quantity(3))
        .await
        .unwrap();
    let detached = engine.detach_slot(day, evening).await.unwrap();
    assert_eq!(
        (detached.remaining, detached.slots.clone()),
        (5, vec![morning])
    );
    assert_eq!(engine.detach_slot(day, evening).await.unwrap(), detached);
    engine
        .place_hold(NewHold::new(morning, "d").quantity(3))
        .await
        .unwrap();
    let in_use = engine.attach_slot(day, evening).await.unwrap_err();
    assert_eq!(in_use.code(), "pool_in_use");
    assert_eq!(
        engine
            .change_pool_capacity(day, 2)
            .await
            .unwrap_err()
            .code(),
        "pool_in_use"
    );
    let raised = engine.change_pool_capacity(day, 6).await.unwrap();
    assert_eq!((raised.capacity, raised.remaining), (6, 3));
    let attached = engine.attach_slot(day, evening).await.unwrap();
    assert_eq!((attached.remaining, attached.held), (0, 6));
    assert_eq!(assert_pools(&ctx.store).await, vec![(6, 0, 6)]);

    // Errors.
    let missing = SlotId(evening.get() + 1000);
    assert_eq!(
        engine.attach_slot(day, missing).await.unwrap_err().code(),
        "slot_not_found"
    );
    assert_eq!(
        engine
            .attach_slot(PoolId(day.get() + 1000), morning)
            .await
            .unwrap_err()
            .code(),
        "pool_not_found"
    );
    assert_eq!(
        engine
            .get_pool(PoolId(day.get() + 1000))
            .await
            .unwrap_err()
            .code(),
        "pool_not_found"
    );
    for _ in 0..3 {
        let other = new_pool(&engine, 100).await;
        engine.attach_slot(other, morning).await.unwrap();
    }
    let fifth = new_pool(&engine, 100).await;
    assert_eq!(
        engine.attach_slot(fifth, morning).await.unwrap_err().code(),
        "too_many_pools"
    );
    // A hold on a slot of four pools takes from every one of them.
    engine
        .place_hold(NewHold::new(morning, "e").quantity(1))
        .await
        .unwrap_err();
    engine.change_pool_capacity(day, 7).await.unwrap();
    engine
        .place_hold(NewHold::new(morning, "e").quantity(1))
        .await
        .unwrap();
    let pools = assert_pools(&ctx.store).await;
    assert_eq!(pools[1..4], [(100, 96, 4), (100, 96, 4), (100, 96, 4)]);
    assert_eq!(pools[4], (100, 100, 0));
}

#[tokio::test]
async fn expired_holds_of_another_slot_of_the_pool_are_reclaimed_for_a_new_hold() {
    let Some(ctx) = setup("pools_reclaim").await else {
        return;
    };
    let (engine, clock) = engine(&ctx.store);
    let a = new_slot(&engine, 5).await;
    let b = new_slot(&engine, 5).await;
    let c = new_slot(&engine, 5).await;
    let pool = new_pool(&engine, 5).await;
    for slot in [a, b, c] {
        engine.attach_slot(pool, slot).await.unwrap();
    }
    let old = engine
        .place_hold(NewHold::new(a, "old").quantity(5))
        .await
        .unwrap();
    assert_eq!(
        engine
            .place_hold(NewHold::new(b, "new").quantity(2))
            .await
            .unwrap_err()
            .code(),
        "sold_out"
    );
    clock.advance(Duration::minutes(6));
    // Free already: the listing shows them.
    let listing = engine.availability(Default::default()).await.unwrap();
    assert_eq!(listing.entry(b).map(|e| e.remaining), Some(5));
    let placed = engine
        .place_hold(NewHold::new(b, "new").quantity(2))
        .await
        .unwrap();
    assert!(!placed.replayed);
    let s = ctx.schema();
    let (status,): (String,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT status FROM \"{s}\".holds WHERE id = $1"
    )))
    .bind(old.hold.hold_id.get())
    .fetch_one(ctx.pool())
    .await
    .unwrap();
    assert_eq!(status, "expired");
    let events: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{s}\".events WHERE kind = 'hold_expired' AND hold_id = $1"
    )))
    .bind(old.hold.hold_id.get())
    .fetch_one(ctx.pool())
    .await
    .unwrap();
    assert_eq!(events, 1);
    assert_eq!(assert_pools(&ctx.store).await, vec![(5, 3, 2)]);

    // The same for a booking, and for a capacity change and an attach.
    let second = engine.book(NewBooking::new("bk").line(c, 3)).await.unwrap();
    clock.advance(Duration::minutes(6));
    let booked = engine
        .book(NewBooking::new("bk2").line(a, 2).line(c, 3))
        .await
        .unwrap();
    assert_eq!(booked.booking.lines.len(), 2);
    assert_ne!(second.booking.booking_id, booked.booking.booking_id);
    assert_eq!(assert_pools(&ctx.store).await, vec![(5, 0, 5)]);
    clock.advance(Duration::minutes(6));
    let lowered = engine.change_pool_capacity(pool, 1).await.unwrap();
    assert_eq!(
        (lowered.capacity, lowered.remaining, lowered.held),
        (1, 1, 0)
    );
    engine
        .place_hold(NewHold::new(a, "x").quantity(1))
        .await
        .unwrap();
    clock.advance(Duration::minutes(6));
    let other = new_pool(&engine, 0).await;
    engine.attach_slot(other, a).await.unwrap();
    assert_eq!(assert_pools(&ctx.store).await, vec![(1, 1, 0), (0, 0, 0)]);
}

#[tokio::test]
async fn every_reclaim_and_administrative_change_gives_units_back_to_pools() {
    let Some(ctx) = setup("pools_admin").await else {
        return;
    };
    let (engine, clock) = engine(&ctx.store);
    let a = new_slot(&engine, 4).await;
    let b = new_slot(&engine, 4).await;
    let p = new_pool(&engine, 6).await;
    let q = new_pool(&engine, 10).await;
    engine.attach_slot(p, a).await.unwrap();
    engine.attach_slot(p, b).await.unwrap();
    engine.attach_slot(q, b).await.unwrap();
    for (slot, k) in [(a, "1"), (a, "2"), (b, "3"), (b, "4")] {
        engine
            .place_hold(NewHold::new(slot, k).quantity(1))
            .await
            .unwrap();
    }
    assert_eq!(assert_pools(&ctx.store).await, vec![(6, 2, 4), (10, 8, 2)]);
    clock.advance(Duration::minutes(6));
    // The batch reclaim.
    let reclaimed = ctx.store.reclaim_expired(clock.now(), 1).await.unwrap();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].slot_id, a);
    assert_eq!(assert_pools(&ctx.store).await, vec![(6, 3, 3), (10, 8, 2)]);
    // A capacity change of a slot and its removal reclaim too.
    engine.change_capacity(b, 1).await.unwrap();
    assert_eq!(assert_pools(&ctx.store).await, vec![(6, 5, 1), (10, 10, 0)]);
    engine.remove_slot(a).await.unwrap();
    assert_eq!(assert_pools(&ctx.store).await, vec![(6, 6, 0), (10, 10, 0)]);
    assert_eq!(
        engine.attach_slot(q, a).await.unwrap_err().code(),
        "slot_not_found"
    );
    // A removed slot may still leave its pools.
    assert_eq!(engine.detach_slot(p, a).await.unwrap().slots, vec![b]);
}

#[tokio::test]
async fn pools_read_inside_a_callers_transaction() {
    let Some(ctx) = setup("pools_within").await else {
        return;
    };
    let (engine, _clock) = engine(&ctx.store);
    let a = new_slot(&engine, 4).await;
    let p = new_pool(&engine, 3).await;
    engine.attach_slot(p, a).await.unwrap();
    let mut tx = engine.transaction().await.unwrap();
    tx.place_hold(NewHold::new(a, "in-tx").quantity(2))
        .await
        .unwrap();
    let pool = tx.get_pool(p).await.unwrap();
    assert_eq!((pool.remaining, pool.held), (1, 2));
    let slot = tx.slot_usage(a).await.unwrap();
    assert_eq!(slot.held, 2);
    // Short in the pool: refused, the transaction still usable.
    let refused = tx
        .place_hold(NewHold::new(a, "too-many").quantity(2))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "sold_out");
    assert_eq!(engine.get_pool(p).await.unwrap().remaining, 3);
    tx.rollback().await.unwrap();
    assert_eq!(assert_pools(&ctx.store).await, vec![(3, 3, 0)]);
}

/// The server log's length now, to read what is written after.
fn log_len() -> Option<u64> {
    std::fs::metadata(LOG).ok().map(|m| m.len())
}

const LOG: &str = "/var/log/postgresql/postgresql-15-main.log";

/// Lines with `needle` written to the server log after `from`.
fn log_lines_since(from: Option<u64>, needle: &str) -> Option<usize> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(LOG).ok()?;
    file.seek(SeekFrom::Start(from?)).ok()?;
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    Some(text.lines().filter(|l| l.contains(needle)).count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_bookings_and_cancels_over_shared_pools_never_oversell_or_deadlock() {
    let Some(ctx) = setup("pools_race").await else {
        return;
    };
    let log_from = log_len();
    let (engine, _clock) = engine(&ctx.store);
    let mut slots = Vec::new();
    for _ in 0..10 {
        slots.push(new_slot(&engine, 60).await);
    }
    // Three pools: slots 0-5 in A, 4-9 in B, every even slot in C (some slots in two pools,
    // 4 in all three).
    let pools = [
        new_pool(&engine, 150).await,
        new_pool(&engine, 150).await,
        new_pool(&engine, 120).await,
    ];
    for (i, &slot) in slots.iter().enumerate() {
        if i <= 5 {
            engine.attach_slot(pools[0], slot).await.unwrap();
        }
        if i >= 4 {
            engine.attach_slot(pools[1], slot).await.unwrap();
        }
        if i % 2 == 0 {
            engine.attach_slot(pools[2], slot).await.unwrap();
        }
    }
    let engine = Arc::new(engine);
    let slots = Arc::new(slots);
    let mut tasks = Vec::new();
    for task in 0..16u64 {
        let engine = Arc::clone(&engine);
        let slots = Arc::clone(&slots);
        tasks.push(tokio::spawn(async move {
            let (mut placed, mut refused, mut cancelled) = (0u32, 0u32, 0u32);
            let mut seed = task.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = move |n: u64| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed % n
            };
            // 200 bookings over 16 tasks: 12 or 13 each.
            let mine = 200 / 16 + u64::from(task < 200 % 16);
            for i in 0..mine {
                let lines = 1 + next(5) as usize;
                let mut request = NewBooking::new(format!("race-{task}-{i}"));
                let mut chosen = Vec::new();
                while chosen.len() < lines {
                    let slot = slots[next(10) as usize];
                    if !chosen.contains(&slot) {
                        chosen.push(slot);
                        request = request.line(slot, 1 + next(3) as i32);
                    }
                }
                match engine.book(request).await {
                    Ok(booked) => {
                        placed += 1;
                        if next(3) == 0 {
                            engine
                                .cancel_booking(&Scope::Anonymous, booked.booking.booking_id)
                                .await
                                .unwrap();
                            cancelled += 1;
                        }
                    }
                    Err(error) => {
                        let code = error.code();
                        assert!(code == "lines_unavailable" || code == "sold_out", "{error}");
                        refused += 1;
                    }
                }
            }
            (placed, refused, cancelled)
        }));
    }
    let (mut placed, mut refused, mut cancelled) = (0, 0, 0);
    for task in tasks {
        let (p, r, c) = task.await.unwrap();
        placed += p;
        refused += r;
        cancelled += c;
    }
    println!("pool race: {placed} placed, {refused} refused, {cancelled} cancelled");
    assert_eq!(placed + refused, 200);
    assert!(placed > 0 && refused > 0);
    assert_pools(&ctx.store).await;
    match log_lines_since(log_from, "deadlock detected") {
        Some(deadlocks) => {
            println!("deadlock detected in the server log: {deadlocks}");
            assert_eq!(deadlocks, 0);
        }
        None => println!("server log not readable: deadlocks not counted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bookings_over_the_same_pooled_slots_in_opposite_orders_both_complete() {
    let Some(ctx) = setup("pools_order").await else {
        return;
    };
    let (engine, _clock) = engine(&ctx.store);
    let a = new_slot(&engine, 1000).await;
    let b = new_slot(&engine, 1000).await;
    let p = new_pool(&engine, 1000).await;
    let q = new_pool(&engine, 1000).await;
    engine.attach_slot(p, a).await.unwrap();
    engine.attach_slot(q, a).await.unwrap();
    engine.attach_slot(q, b).await.unwrap();
    engine.attach_slot(p, b).await.unwrap();
    let engine = Arc::new(engine);
    for round in 0..30 {
        let forward = {
            let engine = Arc::clone(&engine);
            tokio::spawn(async move {
                engine
                    .book(NewBooking::new(format!("f{round}")).line(a, 1).line(b, 1))
                    .await
            })
        };
        let backward = {
            let engine = Arc::clone(&engine);
            tokio::spawn(async move {
                let booked = engine
                    .book(NewBooking::new(format!("b{round}")).line(b, 1).line(a, 1))
                    .await?;
                engine
                    .cancel_booking(&Scope::Anonymous, booked.booking.booking_id)
                    .await
            })
        };
        forward.await.unwrap().unwrap();
        backward.await.unwrap().unwrap();
    }
    assert_eq!(
        assert_pools(&ctx.store).await,
        vec![(1000, 940, 60), (1000, 940, 60)]
    );
}
