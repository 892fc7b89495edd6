//! Pools in the SQLite store beyond the conformance suite, through the engine: every move of
//! units moves the pools' too (checked by SQL straight from the tables), expired holds in
//! another slot of a pool are reclaimed so that a new hold fits, a race of holds and bookings
//! never takes more than a pool has, reads in the caller's transaction, and the upgrade of a
//! database of migration 8.

mod common;

use std::path::Path;
use std::sync::Arc;

use chrono::Duration;
use common::*;
use slot_booking::{
    BookingEngine, BookingLine, BookingOutcome, BookingRequest, BookingStore, EventStore,
    HoldStatus, HoldStore, LineProblem, ManualClock, NewBooking, NewHold, NewPool, PoolId,
    PoolStore, Scope, SlotAdmin, SlotId, TransactionPools, MAX_POOLS_PER_SLOT,
};
use slot_booking_sqlite::SqliteStore;
use sqlx::SqlitePool;

const ANYONE: Scope = Scope::Anonymous;

/// An engine on `clock` that reads the store on every availability call.
fn engine(store: SqliteStore, clock: &ManualClock) -> BookingEngine<SqliteStore> {
    BookingEngine::builder(store)
        .clock(clock.clone())
        .cache_period(std::time::Duration::ZERO)
        .build()
}

/// Every pool's invariant, from the tables: `remaining` plus the units of its slots' holds
/// stored as held or confirmed is its capacity, and `remaining >= 0`; and every slot's own.
async fn assert_pools(pool: &SqlitePool) {
    let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT p.id, p.capacity, p.remaining, \
                (SELECT coalesce(SUM(h.quantity), 0) FROM slot_booking_slot_pools sp \
                 JOIN slot_booking_holds h ON h.slot_id = sp.slot_id \
                 WHERE sp.pool_id = p.id AND h.status IN ('held', 'confirmed')) \
         FROM slot_booking_pools p ORDER BY p.id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (id, capacity, remaining, taken) in rows {
        assert!(remaining >= 0, "pool {id}: remaining {remaining}");
        assert_eq!(
            remaining + taken,
            capacity,
            "pool {id}: {remaining} + {taken}"
        );
    }
    let slots: Vec<i64> = sqlx::query_scalar("SELECT id FROM slot_booking_slots")
        .fetch_all(pool)
        .await
        .unwrap();
    for slot_id in slots {
        assert_invariant(pool, SlotId(slot_id)).await;
    }
}

/// A pool's stored `remaining`.
async fn stored(pool: &SqlitePool, pool_id: PoolId) -> i64 {
    sqlx::query_scalar("SELECT remaining FROM slot_booking_pools WHERE id = ?1")
        .bind(pool_id.get())
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Holds, bookings, cancels, detaching and capacity changes move the pool's units with the
/// slots', the invariant checked from the tables after each step.
#[tokio::test]
async fn every_move_of_units_moves_the_pool() {
    let db = TempDb::new("pools_moves");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b, c) = (
        slot(&store, 5).await,
        slot(&store, 5).await,
        slot(&store, 5).await,
    );
    let day = engine.create_pool(NewPool::new(6)).await.unwrap();
    let p = day.pool_id;
    engine.attach_slot(p, a).await.unwrap();
    let summary = engine.attach_slot(p, b).await.unwrap();
    assert_eq!(summary.slots, vec![a, b]);
    assert_eq!((summary.capacity, summary.remaining), (6, 6));

    let first = engine
        .place_hold(NewHold::new(a, "a4").quantity(4))
        .await
        .unwrap()
        .hold;
    assert_eq!(stored(store.pool(), p).await, 2);
    let refused = engine
        .place_hold(NewHold::new(b, "b3").quantity(3))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "sold_out");
    assert_pools(store.pool()).await;
    // The slot outside the pool sells on its own.
    engine
        .place_hold(NewHold::new(c, "c5").quantity(5))
        .await
        .unwrap();
    let listing = engine.availability(Default::default()).await.unwrap();
    assert_eq!(listing.entry(b).map(|e| e.remaining), Some(2));
    assert_eq!(listing.entry(a).map(|e| e.remaining), Some(1));

    // A booking over both slots of the pool takes from it once per line.
    let booked = engine
        .book(NewBooking::new("cart").line(a, 1).line(b, 1))
        .await
        .unwrap()
        .booking;
    assert_eq!(stored(store.pool(), p).await, 0);
    assert_pools(store.pool()).await;
    let short = engine
        .book(NewBooking::new("cart2").line(b, 1).line(c, 1))
        .await
        .unwrap_err();
    assert_eq!(short.code(), "lines_unavailable");

    // Confirming moves nothing; cancelling gives back to the slot and the pool.
    engine.confirm(&ANYONE, first.hold_id).await.unwrap();
    assert_eq!(stored(store.pool(), p).await, 0);
    engine
        .cancel_booking(&ANYONE, booked.booking_id)
        .await
        .unwrap();
    assert_eq!(stored(store.pool(), p).await, 2);
    assert_pools(store.pool()).await;

    // The capacity moves only free units; 4 are confirmed on slot a.
    let in_use = engine.change_pool_capacity(p, 3).await.unwrap_err();
    assert_eq!(in_use.code(), "pool_in_use");
    let lowered = engine.change_pool_capacity(p, 4).await.unwrap();
    assert_eq!(
        (lowered.capacity, lowered.remaining, lowered.confirmed),
        (4, 0, 4)
    );
    assert_pools(store.pool()).await;

    // Detaching gives the slot's taken units back; attaching it again takes them again.
    let detached = engine.detach_slot(p, a).await.unwrap();
    assert_eq!((detached.remaining, detached.slots.clone()), (4, vec![b]));
    let unchanged = engine.detach_slot(p, a).await.unwrap();
    assert_eq!(unchanged, detached);
    let again = engine.attach_slot(p, a).await.unwrap();
    assert_eq!(again.remaining, 0);
    assert_eq!(engine.attach_slot(p, a).await.unwrap(), again);
    engine.cancel(&ANYONE, first.hold_id).await.unwrap();
    assert_eq!(stored(store.pool(), p).await, 4);
    assert_pools(store.pool()).await;
}

/// Attaching takes the slot's held and confirmed units; what it refuses changes nothing.
#[tokio::test]
async fn attaching_is_refused_for_what_it_cannot_do() {
    let db = TempDb::new("pools_attach");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let a = slot(&store, 5).await;
    engine
        .place_hold(NewHold::new(a, "a3").quantity(3))
        .await
        .unwrap();
    let small = engine.create_pool(NewPool::new(2)).await.unwrap().pool_id;
    assert_eq!(
        engine.attach_slot(small, a).await.unwrap_err().code(),
        "pool_in_use"
    );
    assert_eq!(stored(store.pool(), small).await, 2);
    let missing = PoolId(999);
    assert_eq!(
        engine.attach_slot(missing, a).await.unwrap_err().code(),
        "pool_not_found"
    );
    assert_eq!(
        engine
            .attach_slot(small, SlotId(999))
            .await
            .unwrap_err()
            .code(),
        "slot_not_found"
    );
    let mut pools = Vec::new();
    for _ in 0..MAX_POOLS_PER_SLOT {
        let pool = engine.create_pool(NewPool::new(10)).await.unwrap().pool_id;
        engine.attach_slot(pool, a).await.unwrap();
        pools.push(pool);
    }
    let one_more = engine.create_pool(NewPool::new(10)).await.unwrap().pool_id;
    assert_eq!(
        engine.attach_slot(one_more, a).await.unwrap_err().code(),
        "too_many_pools"
    );
    for pool in &pools {
        assert_eq!(stored(store.pool(), *pool).await, 7);
    }
    // A removed slot is not found.
    let gone = slot(&store, 1).await;
    engine.remove_slot(gone).await.unwrap();
    assert_eq!(
        engine.attach_slot(one_more, gone).await.unwrap_err().code(),
        "slot_not_found"
    );
    // Detaching: no slot at all is not found, before the pool is looked at; a removed slot
    // or one not attached changes nothing.
    assert_eq!(
        engine
            .detach_slot(missing, SlotId(999))
            .await
            .unwrap_err()
            .code(),
        "slot_not_found"
    );
    assert_eq!(
        engine.detach_slot(missing, a).await.unwrap_err().code(),
        "pool_not_found"
    );
    let unchanged = engine.detach_slot(one_more, gone).await.unwrap();
    assert_eq!((unchanged.remaining, unchanged.slots.len()), (10, 0));
    assert_pools(store.pool()).await;
}

/// A pool short of units because of holds expired on another of its slots: they are
/// reclaimed (given back to their slot and the pool) and the new hold fits; attaching and
/// lowering the capacity reclaim the same way.
#[tokio::test]
async fn expired_holds_on_another_slot_of_the_pool_make_room() {
    let db = TempDb::new("pools_expired");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b) = (slot(&store, 3).await, slot(&store, 3).await);
    let p = engine.create_pool(NewPool::new(3)).await.unwrap().pool_id;
    engine.attach_slot(p, a).await.unwrap();
    engine.attach_slot(p, b).await.unwrap();
    let old = engine
        .place_hold(NewHold::new(a, "old").quantity(3))
        .await
        .unwrap()
        .hold;
    assert_eq!(
        engine
            .place_hold(NewHold::new(b, "early"))
            .await
            .unwrap_err()
            .code(),
        "sold_out"
    );
    clock.advance(Duration::minutes(6));
    let listing = engine.availability(Default::default()).await.unwrap();
    assert_eq!(listing.entry(b).map(|e| e.remaining), Some(3));
    let pool = engine.get_pool(p).await.unwrap();
    assert_eq!((pool.remaining, pool.held, pool.confirmed), (3, 0, 0));
    engine
        .place_hold(NewHold::new(b, "new").quantity(2))
        .await
        .unwrap();
    let stored_old = store
        .get_hold(old.hold_id, &ANYONE, clock_now(&clock))
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!(stored_old.status, HoldStatus::Expired);
    assert_eq!(stored(store.pool(), p).await, 1);
    assert_pools(store.pool()).await;

    // A booking refused by the pool marks each of its lines on the pool's slots.
    let lines = [BookingLine::new(a, 1), BookingLine::new(b, 1)];
    let cart = key("cart");
    let request = BookingRequest {
        key: &cart,
        owner: None,
        lines: &lines,
        now: clock_now(&clock),
        expires_at: clock_now(&clock) + Duration::minutes(5),
    };
    match store.create_booking(request).await.unwrap().outcome {
        BookingOutcome::Refused(short) => {
            assert_eq!(short.len(), 2, "{short:?}");
            for line in short {
                assert_eq!(line.problem, LineProblem::SoldOut { free: 0 });
            }
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(stored(store.pool(), p).await, 1);

    // Lowering the capacity below what is free reclaims the expired hold on b first.
    clock.advance(Duration::minutes(6));
    let lowered = engine.change_pool_capacity(p, 0).await.unwrap();
    assert_eq!((lowered.capacity, lowered.remaining), (0, 0));
    assert_pools(store.pool()).await;
}

fn clock_now(clock: &ManualClock) -> slot_booking::Timestamp {
    slot_booking::Clock::now(clock)
}

/// The reclaimer gives a batch of expired holds back to their slots and their pools.
#[tokio::test]
async fn the_reclaimer_gives_units_back_to_pools() {
    let db = TempDb::new("pools_reclaimer");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b) = (slot(&store, 4).await, slot(&store, 4).await);
    let p = engine.create_pool(NewPool::new(5)).await.unwrap().pool_id;
    let q = engine.create_pool(NewPool::new(9)).await.unwrap().pool_id;
    for (pool, slot_id) in [(p, a), (p, b), (q, b)] {
        engine.attach_slot(pool, slot_id).await.unwrap();
    }
    engine
        .place_hold(NewHold::new(a, "a").quantity(2))
        .await
        .unwrap();
    engine
        .place_hold(NewHold::new(b, "b").quantity(3))
        .await
        .unwrap();
    assert_eq!(
        (stored(store.pool(), p).await, stored(store.pool(), q).await),
        (0, 6)
    );
    let reclaimed = store.reclaim_expired(at(3000), 10).await.unwrap();
    assert_eq!(reclaimed.len(), 2);
    assert_eq!(
        (stored(store.pool(), p).await, stored(store.pool(), q).await),
        (5, 9)
    );
    // A slot's capacity change reclaims its expired holds for its pools too.
    engine
        .place_hold(NewHold::new(b, "b2").quantity(4))
        .await
        .unwrap();
    clock.advance(Duration::minutes(6));
    let at_now = clock_now(&clock);
    store.change_capacity(b, 1.into(), at_now).await.unwrap();
    assert_eq!(
        (stored(store.pool(), p).await, stored(store.pool(), q).await),
        (5, 9)
    );
    assert_pools(store.pool()).await;
}

/// Many tasks race holds and bookings over slots sharing a pool: never more than its
/// capacity is taken, and the invariants hold at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_race_never_takes_more_than_the_pool() {
    let db = TempDb::new("pools_race");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = Arc::new(engine(store.clone(), &clock));
    let slots = [
        slot(&store, 10).await,
        slot(&store, 10).await,
        slot(&store, 10).await,
    ];
    let p = engine.create_pool(NewPool::new(12)).await.unwrap().pool_id;
    for slot_id in slots {
        engine.attach_slot(p, slot_id).await.unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..48usize {
        let engine = Arc::clone(&engine);
        tasks.push(tokio::spawn(async move {
            let (x, y) = (slots[i % 3], slots[(i + 1) % 3]);
            if i % 4 == 0 {
                let (first, second) = if x < y { (x, y) } else { (y, x) };
                let booking = NewBooking::new(format!("b{i}"))
                    .line(first, 1)
                    .line(second, 1);
                match engine.book(booking).await {
                    Ok(_) => 2,
                    Err(e) => {
                        assert_eq!(e.code(), "lines_unavailable", "{e:?}");
                        0
                    }
                }
            } else {
                let hold = NewHold::new(x, format!("h{i}")).quantity(1 + (i % 2) as i32);
                match engine.place_hold(hold).await {
                    Ok(placed) => placed.hold.quantity,
                    Err(e) => {
                        assert_eq!(e.code(), "sold_out", "{e:?}");
                        0
                    }
                }
            }
        }));
    }
    let mut taken = 0;
    for task in tasks {
        taken += task.await.unwrap();
    }
    assert!(taken <= 12, "{taken} units taken from a pool of 12");
    assert_eq!(stored(store.pool(), p).await, i64::from(12 - taken));
    assert_pools(store.pool()).await;
    // What is left is exactly what the pool has free: one unit at a time, then sold out.
    let mut more = 0;
    while engine
        .place_hold(NewHold::new(slots[more % 3], format!("more{more}")))
        .await
        .is_ok()
    {
        more += 1;
    }
    assert_eq!(taken + more as i32, 12);
    assert_pools(store.pool()).await;
}

/// Reads in the caller's transaction see its own uncommitted holds; a hold there is refused
/// by the pool as anywhere.
#[tokio::test]
async fn reads_in_the_callers_transaction() {
    let db = TempDb::new("pools_tx");
    let store = db.store().await;
    let (a, b) = (slot(&store, 5).await, slot(&store, 5).await);
    let p = store.create_pool(&NewPool::new(4), at(0)).await.unwrap();
    store.attach_slot(p.pool_id, a, at(0)).await.unwrap();
    store.attach_slot(p.pool_id, b, at(0)).await.unwrap();
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    {
        let mut writes = store.on(&mut tx);
        let k = key("in-tx");
        let mut req = request(a, &k, at(1));
        req.quantity = 3;
        let held = slot_booking::TransactionWrites::create_hold(&mut writes, req)
            .await
            .unwrap()
            .outcome;
        created(held);
        let k2 = key("too-many");
        let mut req = request(b, &k2, at(1));
        req.quantity = 2;
        let refused = slot_booking::TransactionWrites::create_hold(&mut writes, req)
            .await
            .unwrap()
            .outcome;
        assert!(
            matches!(refused, slot_booking::HoldOutcome::SoldOut),
            "{refused:?}"
        );
        let usage = writes.get_pool(p.pool_id, at(1)).await.unwrap().unwrap();
        assert_eq!((usage.pool.stored_remaining, usage.held), (1, 3));
        let slot_a = writes.slot_usage(a, at(1)).await.unwrap().unwrap();
        assert_eq!(slot_a.held, 3);
        assert!(writes.get_pool(PoolId(77), at(1)).await.unwrap().is_none());
    }
    tx.rollback().await.unwrap();
    let usage = store
        .get_pool(p.pool_id, at(1))
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!((usage.pool.stored_remaining, usage.held), (4, 0));
    assert_eq!(store.pools(at(1)).await.unwrap().outcome, vec![usage]);
    assert_pools(store.pool()).await;
}

/// A database made by migrations 1 to 8 upgrades in place: every slot and hold kept, and its
/// old slot, with units already taken, attaches to a new pool and sells within it.
#[tokio::test]
async fn a_database_made_by_migrations_1_to_8_upgrades_in_place() {
    let db = TempDb::new("pools_upgrade");
    let pool = SqliteStore::connect(&db.url())
        .await
        .unwrap()
        .pool()
        .clone();
    sqlx::query(
        "CREATE TABLE slot_booking_migrations (version INTEGER PRIMARY KEY, \
         description TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.as_str() < "0009")
        .collect();
    files.sort();
    assert_eq!(files.len(), 8);
    let descriptions = [
        "create slots and holds",
        "holds take a unit",
        "owners and quantities",
        "slot administration",
        "events",
        "sold out in one statement",
        "consumer leases",
        "bookings",
    ];
    for (i, file) in files.iter().enumerate() {
        let sql = std::fs::read_to_string(dir.join(file))
            .unwrap()
            .replace("{p}", "slot_booking_");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.as_str()))
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO slot_booking_migrations VALUES (?1, ?2, 0)")
            .bind(i as i64 + 1)
            .bind(descriptions[i])
            .execute(&pool)
            .await
            .unwrap();
    }
    // The release's rows, written as it wrote them (its trigger takes the hold's units and
    // appends its event): this crate's statements are for a migrated database.
    let a = SlotId(1);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO slot_booking_slots (id, starts_at, ends_at, capacity, remaining) \
             VALUES (1, {}, {}, 5, 5); \
         INSERT INTO slot_booking_holds \
             (slot_id, idempotency_key, status, expires_at, created_at, quantity) \
             VALUES (1, 'old', 'held', {}, {}, 2);",
        at(3600).timestamp_micros(),
        at(7200).timestamp_micros(),
        at(301).timestamp_micros(),
        at(1).timestamp_micros(),
    )))
    .execute(&pool)
    .await
    .unwrap();
    let slot_rows = "SELECT id, capacity, remaining FROM slot_booking_slots ORDER BY id";
    let hold_rows = "SELECT id, slot_id, status, quantity FROM slot_booking_holds ORDER BY id";
    let slots_before: Vec<(i64, i64, i64)> =
        sqlx::query_as(slot_rows).fetch_all(&pool).await.unwrap();
    let holds_before: Vec<(i64, i64, String, i64)> =
        sqlx::query_as(hold_rows).fetch_all(&pool).await.unwrap();

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM slot_booking_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(versions, (1..=12).collect::<Vec<_>>());
    let slots_after: Vec<(i64, i64, i64)> =
        sqlx::query_as(slot_rows).fetch_all(&pool).await.unwrap();
    let holds_after: Vec<(i64, i64, String, i64)> =
        sqlx::query_as(hold_rows).fetch_all(&pool).await.unwrap();
    assert_eq!((slots_after, holds_after), (slots_before, holds_before));

    let p = store.create_pool(&NewPool::new(3), at(1)).await.unwrap();
    store.attach_slot(p.pool_id, a, at(1)).await.unwrap();
    assert_eq!(stored(&pool, p.pool_id).await, 1);
    created(hold_quantity(&store, a, "new", 1).await);
    let refused = hold_quantity(&store, a, "one-more", 1).await;
    assert!(
        matches!(refused, slot_booking::HoldOutcome::SoldOut),
        "{refused:?}"
    );
    assert_pools(&pool).await;
}

async fn hold_quantity(
    store: &SqliteStore,
    slot_id: SlotId,
    k: &str,
    quantity: i32,
) -> slot_booking::HoldOutcome {
    let k = key(k);
    let mut req = request(slot_id, &k, at(1));
    req.quantity = quantity;
    slot_booking::HoldStore::create_hold(store, req)
        .await
        .unwrap()
        .outcome
}

/// A hold short only on its own slot reclaims that slot's expired holds and no other's; one
/// refused by a pool reclaims the short pool's slots, and a refusal reclaims nothing.
#[tokio::test]
async fn only_what_makes_the_hold_fit_is_reclaimed() {
    let db = TempDb::new("pools_reclaim_scope");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let (a, b) = (slot(&store, 2).await, slot(&store, 5).await);
    let p = engine.create_pool(NewPool::new(4)).await.unwrap().pool_id;
    engine.attach_slot(p, a).await.unwrap();
    engine.attach_slot(p, b).await.unwrap();
    let on_a = engine
        .place_hold(NewHold::new(a, "a").quantity(2))
        .await
        .unwrap()
        .hold;
    let on_b = engine.place_hold(NewHold::new(b, "b")).await.unwrap().hold;
    clock.advance(Duration::minutes(6));
    let status = |hold_id| {
        let store = store.clone();
        let now = clock_now(&clock);
        async move {
            store
                .get_hold(hold_id, &ANYONE, now)
                .await
                .unwrap()
                .outcome
                .unwrap()
                .status
        }
    };
    // Slot a is short by its own expired hold; the pool has 1 free and 3 after that.
    engine
        .place_hold(NewHold::new(a, "a2").quantity(2))
        .await
        .unwrap();
    assert_eq!(status(on_a.hold_id).await, HoldStatus::Expired);
    assert_eq!(status(on_b.hold_id).await, HoldStatus::Held);
    // Refused even with b's expired unit: nothing reclaimed.
    let refused = engine
        .place_hold(NewHold::new(b, "b4").quantity(4))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "sold_out");
    assert_eq!(status(on_b.hold_id).await, HoldStatus::Held);
    // The pool has 1 stored free and b's expired unit: 2 fit once it is reclaimed.
    engine
        .place_hold(NewHold::new(b, "b2").quantity(2))
        .await
        .unwrap();
    assert_eq!(status(on_b.hold_id).await, HoldStatus::Expired);
    assert_eq!(stored(store.pool(), p).await, 0);
    assert_pools(store.pool()).await;
}
