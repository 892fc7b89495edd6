//! Waitlists on slots that draw from pools, on PostgreSQL (migration 12), beyond the
//! conformance cases: each step that frees a pool's units serves the pool's line (a cancel on
//! another slot of the pool, a pool capacity raise, a detach); a pool capacity change that
//! needs its slots' expired holds is decided before the line takes them; entries of a closed
//! or started slot do not block the pool; a head whose slot row (or other pool's row) another
//! transaction holds is not waited for, and the sweeper's pass serves it once that transaction
//! ends; joins refused over a pool's capacity; bookings and "any one of these" holds pass no
//! pool's line; a caller's transaction serves and rolls back with it; notifications; and a
//! race of cancels, expiries, joins, leaves, newcomer holds and pool capacity raises on the
//! slots of one pool, checked afterwards with SQL (nobody oversold with offers counted, no
//! entry offered twice, no newcomer placed while the pool's line waited) and in the server's
//! log (no deadlock).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::Duration;
use common::*;
use slot_booking::waitlists::Joined;
use slot_booking::{
    BookingEngine, Clock, ConsumerId, EventKind, EventStore, HoldStatus, HoldStore, ManualClock,
    NewHold, NewPool, NewSlot, PoolId, Scope, SlotId, Timestamp, WaitlistEntry,
};
use slot_booking_postgres::PostgresStore;
use sqlx::postgres::PgPoolOptions;
use sqlx::AssertSqlSafe;

type Engine = BookingEngine<PostgresStore>;

/// An engine on `store` whose clock reads `t0()` until a test moves it, with no cache.
fn engine(store: &PostgresStore) -> (Engine, ManualClock) {
    let clock = ManualClock::new(t0());
    let engine = BookingEngine::builder(store.clone())
        .clock(clock.clone())
        .cache_period(StdDuration::ZERO)
        .build();
    (engine, clock)
}

async fn new_slot(engine: &Engine, capacity: i32) -> SlotId {
    engine
        .create_slot(NewSlot::new(at(3600), at(7200), capacity))
        .await
        .unwrap()
        .slot_id
}

/// A pool of `capacity` with `slots` attached.
async fn new_pool(engine: &Engine, capacity: i32, slots: &[SlotId]) -> PoolId {
    let pool = engine
        .create_pool(NewPool::new(capacity))
        .await
        .unwrap()
        .pool_id;
    for slot in slots {
        engine.attach_slot(pool, *slot).await.unwrap();
    }
    pool
}

/// Joins `slot`'s line with `key` for `quantity` units; the entry, which must wait.
async fn wait(engine: &Engine, slot: SlotId, key: &str, quantity: i32) -> WaitlistEntry {
    match engine
        .join_waitlist(NewHold::new(slot, key).quantity(quantity), 0)
        .await
    {
        Ok(Joined::Waiting { entry, .. }) => entry,
        other => panic!("{key} should wait, got {other:?}"),
    }
}

/// The offer made to `entry`, as stored, if any.
async fn offer(store: &PostgresStore, entry: &WaitlistEntry) -> Option<slot_booking::Hold> {
    store
        .get_hold(entry.offer_id(), &Scope::BackOffice, t0())
        .await
        .unwrap()
        .outcome
}

/// The code of a hold's refusal (it must be refused).
async fn refused(engine: &Engine, slot: SlotId, key: &str) -> String {
    match engine.hold(slot, key).await {
        Ok(placed) => panic!("{key}: a newcomer was placed: {placed:?}"),
        Err(error) => error.code().to_owned(),
    }
}

/// The pool's stored remaining units and its `waiting` count, by SQL.
async fn pool_row(store: &PostgresStore, pool: PoolId) -> (i32, i32) {
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT remaining, waiting FROM \"{}\".pools WHERE id = $1",
        store.schema()
    )))
    .bind(pool.get())
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Availability's units for `slot` at `now`, through the store.
async fn listed(store: &PostgresStore, slot: SlotId, now: Timestamp) -> Option<i32> {
    store
        .availability(now)
        .await
        .unwrap()
        .outcome
        .into_iter()
        .find(|entry| entry.slot_id == slot)
        .map(|entry| entry.remaining)
}

/// Every pool's count and invariant as the tables have them: `waiting` counts the entries of
/// its slots; remaining + units held or confirmed on its slots = capacity, remaining >= 0.
async fn assert_pools(store: &PostgresStore) {
    let s = store.schema();
    let rows: Vec<(i64, i32, i32, i32, i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT p.id, p.capacity, p.remaining, p.waiting, \
                (SELECT count(*) FROM \"{s}\".waitlist_entries e \
                 JOIN \"{s}\".slot_pools sp ON sp.slot_id = e.slot_id WHERE sp.pool_id = p.id), \
                (SELECT coalesce(sum(h.quantity), 0) FROM \"{s}\".holds h \
                 JOIN \"{s}\".slot_pools sp ON sp.slot_id = h.slot_id \
                 WHERE sp.pool_id = p.id AND h.status IN ('held', 'confirmed'))::int8 \
         FROM \"{s}\".pools p ORDER BY p.id"
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    for (pool, capacity, remaining, waiting, entries, taken) in rows {
        assert_eq!(i64::from(waiting), entries, "pool {pool}: waiting counts");
        assert!(remaining >= 0, "pool {pool}: remaining {remaining}");
        assert_eq!(
            i64::from(remaining) + taken,
            i64::from(capacity),
            "pool {pool}: remaining {remaining} + taken {taken} != capacity {capacity}"
        );
    }
}

/// How many `deadlock detected` lines the server's log has (0 when it cannot be read).
fn deadlocks() -> usize {
    std::fs::read_to_string("/var/log/postgresql/postgresql-15-main.log")
        .map(|log| log.matches("deadlock detected").count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_another_slot_of_the_pool_offers_to_the_pools_head() {
    let Some(ctx) = setup("a_cancel_on_another_slot_of_the_pool_offers_to_the_pools_head").await
    else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let (a, b) = (new_slot(&engine, 2).await, new_slot(&engine, 2).await);
    let pool = new_pool(&engine, 2, &[a, b]).await;
    let held = engine
        .place_hold(NewHold::new(a, "two").quantity(2))
        .await
        .unwrap()
        .hold;
    // B has its units, the pool has none: the entry waits in B's line and the pool's.
    let head = wait(&engine, b, "head", 1).await;
    assert_eq!(pool_row(store, pool).await, (0, 1));
    // Newcomers on either slot of the pool are refused while the pool's line waits, and
    // availability lists both with no unit.
    assert_eq!(refused(&engine, b, "newcomer-b").await, "sold_out");
    assert_eq!(refused(&engine, a, "newcomer-a").await, "sold_out");
    assert_eq!(listed(store, a, t0()).await, Some(0));
    assert_eq!(listed(store, b, t0()).await, Some(0));

    let log = ConsumerId::new("log").unwrap();
    let read = store.read_events(&log, 100).await.unwrap();
    store
        .acknowledge(&log, read.last().unwrap().position)
        .await
        .unwrap();
    engine
        .cancel(&Scope::Anonymous, held.hold_id)
        .await
        .unwrap();
    let offered = offer(store, &head)
        .await
        .expect("offered by the cancel on A");
    assert_eq!(
        (offered.slot_id, offered.quantity, offered.status),
        (b, 1, HoldStatus::Held)
    );
    let kinds: Vec<EventKind> = store
        .read_events(&log, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            EventKind::HoldCancelled,
            EventKind::HoldPlaced,
            EventKind::WaitlistOffered
        ]
    );
    assert_eq!(pool_row(store, pool).await, (1, 0));
    // The line is empty: A lists its own units again (the engine caps them by the pool's).
    assert_eq!(listed(store, a, t0()).await, Some(2));
    engine.hold(a, "after").await.unwrap();
    assert_pools(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_capacity_raise_offers_to_the_pools_line() {
    let Some(ctx) = setup("a_pool_capacity_raise_offers_to_the_pools_line").await else {
        return;
    };
    let store = &ctx.store;
    let (engine, clock) = engine(store);
    let (a, b) = (new_slot(&engine, 2).await, new_slot(&engine, 2).await);
    let pool = new_pool(&engine, 1, &[a, b]).await;
    engine.hold(a, "a").await.unwrap();
    let first = wait(&engine, b, "first", 1).await;
    let second = wait(&engine, a, "second", 1).await;
    assert_eq!(pool_row(store, pool).await, (0, 2));
    clock.advance(Duration::seconds(5));
    engine.change_pool_capacity(pool, 2).await.unwrap();
    let offered = offer(store, &first).await.expect("offered by the raise");
    assert_eq!(offered.created_at, clock.now(), "at the engine's instant");
    assert_eq!(offer(store, &second).await, None, "one unit came");
    // Setting the same capacity changes nothing and serves nothing.
    engine.change_pool_capacity(pool, 2).await.unwrap();
    assert_eq!(offer(store, &second).await, None);
    engine.change_pool_capacity(pool, 3).await.unwrap();
    assert!(offer(store, &second).await.is_some(), "the next raise");
    assert_eq!(pool_row(store, pool).await, (0, 0));
    assert_pools(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detach_offers_to_the_pools_line_and_the_detached_slots() {
    let Some(ctx) = setup("a_detach_offers_to_the_pools_line_and_the_detached_slots").await else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let (a, b, c) = (
        new_slot(&engine, 2).await,
        new_slot(&engine, 2).await,
        new_slot(&engine, 2).await,
    );
    let pool = new_pool(&engine, 1, &[a, b, c]).await;
    engine.hold(a, "a").await.unwrap();
    let on_b = wait(&engine, b, "on-b", 1).await;
    let on_c = wait(&engine, c, "on-c", 1).await;
    // Detaching A gives its unit back to the pool: the pool's head (B's entry) is offered.
    engine.detach_slot(pool, a).await.unwrap();
    assert!(offer(store, &on_b).await.is_some(), "the pool's head");
    assert_eq!(offer(store, &on_c).await, None);
    assert_eq!(pool_row(store, pool).await, (0, 1));
    // Detaching C itself: its entry left the pool's line and C has its own units.
    engine.detach_slot(pool, c).await.unwrap();
    assert!(
        offer(store, &on_c).await.is_some(),
        "the detached slot's line"
    );
    assert_eq!(pool_row(store, pool).await, (0, 0));
    assert_pools(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_of_a_closed_or_started_slot_do_not_block_the_pool() {
    let Some(ctx) = setup("entries_of_a_closed_or_started_slot_do_not_block_the_pool").await else {
        return;
    };
    let store = &ctx.store;
    let (engine, clock) = engine(store);
    let (a, b, c) = (
        new_slot(&engine, 2).await,
        new_slot(&engine, 2).await,
        new_slot(&engine, 2).await,
    );
    // D starts ten minutes after t0.
    let d = engine
        .create_slot(NewSlot::new(at(600), at(7200), 2))
        .await
        .unwrap()
        .slot_id;
    let pool = new_pool(&engine, 1, &[a, b, c, d]).await;
    let held = engine
        .place_hold(NewHold::new(a, "a").lifetime(StdDuration::from_secs(3000)))
        .await
        .unwrap()
        .hold;
    let on_b = wait(&engine, b, "on-b", 1).await;
    assert_eq!(refused(&engine, c, "c-1").await, "sold_out");

    // B stops selling: its entry leaves the pool's line, and the pool's units are anyone's.
    engine.close_sales(b).await.unwrap();
    engine.change_pool_capacity(pool, 2).await.unwrap();
    assert_eq!(offer(store, &on_b).await, None, "B does not sell");
    assert_eq!(listed(store, c, t0()).await, Some(2));
    let on_c = engine.hold(c, "c-2").await.unwrap().hold;
    assert_eq!(pool_row(store, pool).await, (0, 1));

    // Reopened, B's entry is back in the pool's line and the next freed unit is its own.
    engine.reopen_sales(b).await.unwrap();
    assert_eq!(refused(&engine, c, "c-3").await, "sold_out");
    engine
        .cancel(&Scope::Anonymous, on_c.hold_id)
        .await
        .unwrap();
    assert!(offer(store, &on_b).await.is_some(), "served by C's cancel");

    // An entry on D, which then starts: it blocks the pool no longer.
    let on_d = wait(&engine, d, "on-d", 1).await;
    assert_eq!(refused(&engine, c, "c-4").await, "sold_out");
    clock.advance(Duration::seconds(601));
    engine
        .cancel(&Scope::Anonymous, held.hold_id)
        .await
        .unwrap();
    assert_eq!(offer(store, &on_d).await, None, "D has started");
    engine.hold(c, "c-5").await.unwrap();
    assert_eq!(pool_row(store, pool).await, (0, 1));
    assert_pools(store).await;
}

/// A head whose slot row another transaction holds: the cancel that frees the pool's unit does
/// not wait for that row (it finishes at once and leaves the head waiting, newcomers still
/// refused); the sweeper's pass serves it once the other transaction has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_row_is_locked_is_skipped_then_served_by_the_sweeper() {
    let Some(ctx) = setup("a_head_whose_row_is_locked_is_skipped_then_served_by_the_sweeper").await
    else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let (a, b) = (new_slot(&engine, 2).await, new_slot(&engine, 2).await);
    let pool = new_pool(&engine, 1, &[a, b]).await;
    let held = engine.hold(a, "a").await.unwrap().hold;
    let head = wait(&engine, b, "head", 1).await;

    // Another transaction holds B's row.
    let other = one_connection(&ctx.url).await;
    let mut tx = other.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT id FROM \"{}\".slots WHERE id = $1 FOR NO KEY UPDATE",
        store.schema()
    )))
    .bind(b.get())
    .fetch_one(&mut *tx)
    .await
    .unwrap();

    let started = Instant::now();
    let cancelled = tokio::time::timeout(
        StdDuration::from_secs(10),
        engine.cancel(&Scope::Anonymous, held.hold_id),
    )
    .await
    .expect("the cancel does not wait for B's row");
    cancelled.unwrap();
    assert!(started.elapsed() < StdDuration::from_secs(10));
    assert_eq!(offer(store, &head).await, None, "B's row was busy");
    assert_eq!(pool_row(store, pool).await, (1, 1));
    // Nobody jumps the waiting head meanwhile.
    assert_eq!(refused(&engine, a, "newcomer").await, "sold_out");
    tx.commit().await.unwrap();

    let swept = store.reclaim_expired(t0(), 10).await.unwrap();
    assert!(swept.is_empty(), "nothing expired");
    let offered = offer(store, &head)
        .await
        .expect("served by the sweeper's pass");
    assert_eq!((offered.slot_id, offered.created_at), (b, t0()));
    assert_eq!(pool_row(store, pool).await, (0, 0));

    // The same with the head's other pool's row held: C draws from the pool and from Q.
    let c = new_slot(&engine, 2).await;
    let q = new_pool(&engine, 5, &[c]).await;
    engine.attach_slot(pool, c).await.unwrap();
    let next = wait(&engine, c, "next", 1).await;
    let mut tx = other.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT id FROM \"{}\".pools WHERE id = $1 FOR NO KEY UPDATE",
        store.schema()
    )))
    .bind(q.get())
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tokio::time::timeout(
        StdDuration::from_secs(10),
        engine.cancel(&Scope::Anonymous, offered.hold_id),
    )
    .await
    .expect("the cancel does not wait for Q's row")
    .unwrap();
    assert_eq!(offer(store, &next).await, None, "Q's row was busy");
    tx.rollback().await.unwrap();
    store.reclaim_expired(t0(), 10).await.unwrap();
    assert!(
        offer(store, &next).await.is_some(),
        "served by the sweeper's pass"
    );
    assert_eq!(pool_row(store, q).await, (4, 0));
    assert_pools(store).await;
}

/// A pool's capacity lowered so far that only its slots' expired holds make room: the change
/// is decided on the units those give back before the pool's line may take them (as a slot's
/// capacity change is), and then the line is served with what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_capacity_change_is_decided_before_its_line_takes_the_units_reclaimed() {
    let Some(ctx) =
        setup("a_pool_capacity_change_is_decided_before_its_line_takes_the_units_reclaimed").await
    else {
        return;
    };
    let store = &ctx.store;
    let (engine, clock) = engine(store);
    let (a, b) = (new_slot(&engine, 4).await, new_slot(&engine, 4).await);
    let pool = new_pool(&engine, 4, &[a, b]).await;
    engine
        .place_hold(NewHold::new(a, "stays").quantity(2))
        .await
        .unwrap();
    engine
        .place_hold(
            NewHold::new(a, "expires")
                .quantity(2)
                .lifetime(StdDuration::from_secs(60)),
        )
        .await
        .unwrap();
    let head = wait(&engine, b, "head", 2).await;
    let small = wait(&engine, b, "small", 1).await;
    clock.advance(Duration::seconds(61));
    // 2 units come back, and the pool keeps 3 of its 4: 1 left, which the head (2) does not
    // fit in, and the entry behind it may not pass it.
    let changed = engine.change_pool_capacity(pool, 3).await.unwrap();
    assert_eq!((changed.capacity, changed.remaining), (3, 1));
    assert_eq!(offer(store, &head).await, None);
    assert_eq!(offer(store, &small).await, None);
    // Lowered to 2 the change takes the last unit; raised to 4 the head is served.
    engine.change_pool_capacity(pool, 2).await.unwrap();
    engine.change_pool_capacity(pool, 4).await.unwrap();
    assert!(offer(store, &head).await.is_some(), "served by the raise");
    assert_eq!(pool_row(store, pool).await, (0, 1));
    assert_pools(store).await;
}

/// A join on a pooled slot is refused when its quantity is more than a pool's capacity, and
/// held at once when every line is empty and the units are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_on_pooled_slots_are_refused_or_held_as_holds_are() {
    let Some(ctx) = setup("joins_on_pooled_slots_are_refused_or_held_as_holds_are").await else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let a = new_slot(&engine, 4).await;
    let pool = new_pool(&engine, 2, &[a]).await;
    let error = engine
        .join_waitlist(NewHold::new(a, "big").quantity(3), 0)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "quantity_exceeds_capacity");
    match engine
        .join_waitlist(NewHold::new(a, "now").quantity(2), 0)
        .await
        .unwrap()
    {
        Joined::Held { hold, .. } => assert_eq!(hold.quantity, 2),
        other => panic!("held at once, got {other:?}"),
    }
    assert_eq!(pool_row(store, pool).await, (0, 0));
    assert_pools(store).await;
}

/// What the race's audit trigger records: each hold and entry inserted and each entry gone, in
/// the order of a sequence drawn while the statement holds the pool's row (every one of these
/// writes holds it), so the order of the records is the order in which the pool saw them.
const AUDIT: &str = "\
    CREATE TABLE audit (seq BIGSERIAL PRIMARY KEY, kind TEXT NOT NULL, id BIGINT NOT NULL, \
                        slot_id BIGINT NOT NULL, quantity INT NOT NULL); \
    CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql \
    SET search_path FROM CURRENT AS $$ \
    BEGIN \
        IF TG_TABLE_NAME = 'holds' THEN \
            INSERT INTO audit (kind, id, slot_id, quantity) \
            VALUES ('hold', NEW.id, NEW.slot_id, NEW.quantity); \
        ELSIF TG_OP = 'INSERT' THEN \
            INSERT INTO audit (kind, id, slot_id, quantity) \
            VALUES ('join', NEW.id, NEW.slot_id, NEW.quantity); \
        ELSE \
            INSERT INTO audit (kind, id, slot_id, quantity) \
            VALUES ('gone', OLD.id, OLD.slot_id, OLD.quantity); \
        END IF; \
        RETURN NULL; \
    END $$; \
    CREATE TRIGGER audit_holds AFTER INSERT ON holds \
        FOR EACH ROW EXECUTE FUNCTION audit_row(); \
    CREATE TRIGGER audit_entries AFTER INSERT OR DELETE ON waitlist_entries \
        FOR EACH ROW EXECUTE FUNCTION audit_row();";

/// Counts of what the race did.
#[derive(Default)]
struct Tally {
    placed: AtomicUsize,
    refused: AtomicUsize,
    joined_held: AtomicUsize,
    joined_waiting: AtomicUsize,
    left: AtomicUsize,
    cancelled: AtomicUsize,
    raised: AtomicUsize,
    swept: AtomicUsize,
}

/// Cancels, expiries, joins, leaves, newcomer holds and pool capacity raises race on the four
/// slots of one pool, from 19 tasks on a pool of 24 connections of their own. Afterwards, by
/// SQL: no slot and no pool oversold (offers are holds, counted), `waiting` counts every line,
/// no entry offered twice, no newcomer hold placed while the pool's line had an entry (replayed
/// from the audit records in the pool's order), and after the sweeper's pass no line's head is
/// ready; the server logged no deadlock. The slots are large and the pool (raised from 6 to 60
/// in steps of 3) is what runs short, so its line forms and empties again during the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_race_on_the_slots_of_one_pool_oversells_nothing_and_jumps_no_line() {
    let Some(ctx) =
        setup("a_race_on_the_slots_of_one_pool_oversells_nothing_and_jumps_no_line").await
    else {
        return;
    };
    let before = deadlocks();
    let s = ctx.schema().to_owned();
    let admin = one_connection(&ctx.url).await;
    let mut conn = admin.acquire().await.unwrap();
    sqlx::query(AssertSqlSafe(format!("SET search_path TO \"{s}\"")))
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql(AssertSqlSafe(AUDIT))
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);

    let connections = PgPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(24)
        .acquire_timeout(StdDuration::from_secs(60))
        .connect(&ctx.url)
        .await
        .unwrap();
    let store = PostgresStore::with_schema(connections, &s).unwrap();
    let (engine, clock) = engine(&store);
    let slots = [
        new_slot(&engine, 30).await,
        new_slot(&engine, 30).await,
        new_slot(&engine, 30).await,
        new_slot(&engine, 30).await,
    ];
    let pool = new_pool(&engine, 6, &slots).await;
    // The pool full: three holds that stay and three that expire, on the first two slots.
    let mut stay = Vec::new();
    for (i, slot) in [slots[0], slots[0], slots[1]].iter().enumerate() {
        stay.push(engine.hold(*slot, &format!("stay-{i}")).await.unwrap().hold);
    }
    for (i, slot) in [slots[0], slots[1], slots[1]].iter().enumerate() {
        engine
            .place_hold(
                NewHold::new(*slot, format!("expire-{i}")).lifetime(StdDuration::from_secs(60)),
            )
            .await
            .unwrap();
    }
    clock.advance(Duration::seconds(120));
    let now = clock.now();
    let (start, _): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT coalesce(max(seq), 0), 0::int8 FROM \"{s}\".audit"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();

    let engine = Arc::new(engine);
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    // Joiners on the last two slots (and one on each of the first two), some leaving again,
    // some cancelling the offer they got.
    for task in 0..8usize {
        let (engine, tally) = (Arc::clone(&engine), Arc::clone(&tally));
        tasks.push(tokio::spawn(async move {
            for i in 0..6usize {
                tokio::time::sleep(StdDuration::from_millis(3)).await;
                let slot = slots[if task < 6 {
                    2 + (task + i) % 2
                } else {
                    task - 6
                }];
                let quantity = 1 + ((task + i) % 2) as i32;
                let request = NewHold::new(slot, format!("j-{task}-{i}")).quantity(quantity);
                match engine.join_waitlist(request, (i % 3) as i32).await {
                    Ok(Joined::Waiting { entry, .. }) => {
                        tally.joined_waiting.fetch_add(1, Ordering::Relaxed);
                        if i % 3 != 0 {
                            match engine
                                .leave_waitlist(&Scope::Anonymous, entry.entry_id)
                                .await
                            {
                                Ok(_) => {
                                    tally.left.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => assert_eq!(e.code(), "entry_not_found"),
                            }
                        }
                    }
                    Ok(Joined::Held { hold, .. }) => {
                        tally.joined_held.fetch_add(1, Ordering::Relaxed);
                        if i % 2 == 0 {
                            engine
                                .cancel(&Scope::Anonymous, hold.hold_id)
                                .await
                                .unwrap();
                            tally.cancelled.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => panic!("join: {e:?}"),
                }
            }
        }));
    }
    // Newcomers on every slot of the pool.
    for task in 0..6usize {
        let (engine, tally) = (Arc::clone(&engine), Arc::clone(&tally));
        tasks.push(tokio::spawn(async move {
            for i in 0..12usize {
                tokio::time::sleep(StdDuration::from_millis(4)).await;
                let slot = slots[(task + i) % 4];
                match engine.hold(slot, &format!("n-{task}-{i}")).await {
                    Ok(placed) => {
                        tally.placed.fetch_add(1, Ordering::Relaxed);
                        if i % 3 == 0 {
                            engine
                                .cancel(&Scope::Anonymous, placed.hold.hold_id)
                                .await
                                .unwrap();
                            tally.cancelled.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        assert_eq!(e.code(), "sold_out", "newcomer {task}-{i}");
                        tally.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    // Cancels of the holds that stay.
    for hold in stay {
        let (engine, tally) = (Arc::clone(&engine), Arc::clone(&tally));
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(StdDuration::from_millis(20)).await;
            engine
                .cancel(&Scope::Anonymous, hold.hold_id)
                .await
                .unwrap();
            tally.cancelled.fetch_add(1, Ordering::Relaxed);
        }));
    }
    // Pool capacity raises, one unit at a time.
    {
        let (engine, tally) = (Arc::clone(&engine), Arc::clone(&tally));
        tasks.push(tokio::spawn(async move {
            for capacity in (9..=60).step_by(3) {
                tokio::time::sleep(StdDuration::from_millis(8)).await;
                engine.change_pool_capacity(pool, capacity).await.unwrap();
                tally.raised.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // The sweeper: expiries reclaimed, and the pool's lines served.
    {
        let (store, tally) = (store.clone(), Arc::clone(&tally));
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(StdDuration::from_millis(10)).await;
                let swept = store.reclaim_expired(now, 2).await.unwrap();
                tally.swept.fetch_add(swept.len(), Ordering::Relaxed);
            }
        }));
    }
    let task_count = tasks.len();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(task_count >= 16, "{task_count} tasks");
    // The sweeper's last pass: every line served as far as it can be.
    store.reclaim_expired(now, 100).await.unwrap();

    // Nobody oversold, offers counted: every slot's and the pool's invariant.
    for slot in slots {
        assert_invariant(&store, slot).await;
    }
    assert_pools(&store).await;
    let q = |sql: String| sqlx::query_as::<_, (i64, i64)>(AssertSqlSafe(sql));
    // No entry offered twice: each offer's hold id is an entry id seen once.
    let (offers, distinct) = q(format!(
        "SELECT count(*), count(DISTINCT hold_id) FROM \"{s}\".events \
         WHERE kind = 'waitlist_offered'"
    ))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(offers, distinct, "an entry offered twice");
    let (not_entries, _) = q(format!(
        "SELECT count(*), 0::int8 FROM \"{s}\".events ev \
         WHERE ev.kind = 'waitlist_offered' \
           AND NOT EXISTS (SELECT 1 FROM \"{s}\".audit a WHERE a.kind = 'join' AND a.id = ev.hold_id)"
    ))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(not_entries, 0, "an offer's hold id that is no entry's");

    // No newcomer placed while the pool's line had an entry: the audit records replayed in
    // the pool's order (every slot sells throughout, so every entry is in the pool's line).
    let records: Vec<(i64, String, i64, i64, i32)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT seq, kind, id, slot_id, quantity FROM \"{s}\".audit ORDER BY seq"
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    let entries: BTreeSet<i64> = records
        .iter()
        .filter(|r| r.1 == "join")
        .map(|r| r.2)
        .collect();
    let mut line: HashMap<i64, i32> = HashMap::new();
    let (mut newcomers, mut offered) = (0, 0);
    for (seq, kind, id, _slot, quantity) in &records {
        match kind.as_str() {
            "join" => {
                line.insert(*id, *quantity);
            }
            "gone" => {
                line.remove(id);
            }
            _ if entries.contains(id) => offered += 1,
            _ => {
                newcomers += 1;
                assert!(
                    line.is_empty() || *seq <= start,
                    "newcomer hold {id} placed while {line:?} waited (record {seq})"
                );
            }
        }
    }
    // After the sweeper's pass no head is ready: the pool's head does not fit in its slot
    // (expired holds counted free) or in the pool (none expired is left after the pass).
    let heads: Vec<(i64, i32, i32, i32)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT e.id, e.quantity, \
                sl.remaining + (SELECT coalesce(sum(h.quantity), 0) FROM \"{s}\".holds h \
                                WHERE h.slot_id = sl.id AND h.status = 'held' \
                                  AND h.expires_at <= $1)::int4, \
                p.remaining \
         FROM \"{s}\".waitlist_entries e JOIN \"{s}\".slots sl ON sl.id = e.slot_id \
         CROSS JOIN \"{s}\".pools p \
         WHERE p.id = $2 \
         ORDER BY e.priority DESC, e.id LIMIT 1"
    )))
    .bind(now)
    .bind(pool.get())
    .fetch_all(store.pool())
    .await
    .unwrap();
    for (entry, quantity, slot_free, pool_free) in &heads {
        assert!(
            quantity > slot_free || quantity > pool_free,
            "head {entry} ({quantity}) fits: slot {slot_free}, pool {pool_free}"
        );
    }
    let new_deadlocks = deadlocks() - before;
    println!(
        "race: {task_count} tasks; newcomers placed {} refused {}; joins held at once {} \
         waiting {} left {}; offers {offers} ({offered} audited); newcomer records {newcomers}; \
         cancels {}; pool raises {}; swept {}; head left {:?}; deadlock lines {new_deadlocks}",
        tally.placed.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed),
        tally.joined_held.load(Ordering::Relaxed),
        tally.joined_waiting.load(Ordering::Relaxed),
        tally.left.load(Ordering::Relaxed),
        tally.cancelled.load(Ordering::Relaxed),
        tally.raised.load(Ordering::Relaxed),
        tally.swept.load(Ordering::Relaxed),
        heads.first(),
    );
    assert_eq!(new_deadlocks, 0, "the server logged a deadlock");
}

/// A pool's line forming and emptying notifies the schema's channel with an empty payload
/// (every cached listing goes: the pool's other slots now list no unit, then theirs again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_line_forming_and_emptying_notifies_every_listing() {
    let Some(ctx) = setup("a_pools_line_forming_and_emptying_notifies_every_listing").await else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let (a, b) = (new_slot(&engine, 2).await, new_slot(&engine, 2).await);
    new_pool(&engine, 1, &[a, b]).await;
    let held = engine.hold(a, "a").await.unwrap().hold;
    let channel: String = format!("slot_booking:{}", ctx.schema())
        .chars()
        .take(63)
        .collect();
    let mut listener = sqlx::postgres::PgListener::connect(&ctx.url).await.unwrap();
    listener.listen(&channel).await.unwrap();
    // Every notification until none comes for a while: their payloads.
    async fn payloads(listener: &mut sqlx::postgres::PgListener) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(notice) =
            tokio::time::timeout(StdDuration::from_millis(500), listener.recv()).await
        {
            seen.push(notice.unwrap().payload().to_owned());
        }
        seen
    }
    let head = wait(&engine, b, "head", 1).await;
    let formed = payloads(&mut listener).await;
    assert!(formed.contains(&String::new()), "formed: {formed:?}");
    engine
        .cancel(&Scope::Anonymous, held.hold_id)
        .await
        .unwrap();
    assert!(offer(store, &head).await.is_some());
    let emptied = payloads(&mut listener).await;
    assert!(emptied.contains(&String::new()), "emptied: {emptied:?}");
}

/// Bookings and "any one of these" holds never pass a pool's waiting line either; a cancel in
/// a caller's transaction serves the pool's line in it, and a rollback undoes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookings_any_one_holds_and_callers_transactions_respect_the_pools_line() {
    let Some(ctx) =
        setup("bookings_any_one_holds_and_callers_transactions_respect_the_pools_line").await
    else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let (a, b, free) = (
        new_slot(&engine, 2).await,
        new_slot(&engine, 2).await,
        new_slot(&engine, 2).await,
    );
    new_pool(&engine, 2, &[a, b]).await;
    let held = engine.hold(a, "a").await.unwrap().hold;
    // One unit of the pool is free, the head wants two: it waits, and so does the unit.
    let head = wait(&engine, b, "head", 2).await;
    let error = engine
        .book(slot_booking::NewBooking::new("bk").line(a, 1).line(free, 1))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "lines_unavailable");
    let placed = engine
        .hold_any(slot_booking::candidates::NewAnyHold::new(
            vec![a, b, free],
            "any",
        ))
        .await
        .unwrap()
        .hold;
    assert_eq!(placed.slot_id, free, "the pool's slots are passed over");

    let mut tx = engine.transaction().await.unwrap();
    tx.cancel(&Scope::Anonymous, held.hold_id).await.unwrap();
    let select = format!(
        "SELECT status FROM \"{}\".holds WHERE id = $1",
        store.schema()
    );
    let offer_id = head.offer_id().get();
    let inside: Option<(String,)> = tx
        .run(move |tx| {
            Box::pin(async move {
                sqlx::query_as(AssertSqlSafe(select))
                    .bind(offer_id)
                    .fetch_optional(&mut **tx)
                    .await
            })
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(inside, Some(("held".to_owned(),)), "offered in it");
    tx.rollback().await.unwrap();
    assert_eq!(offer(store, &head).await, None, "rolled back with it");
    engine
        .cancel(&Scope::Anonymous, held.hold_id)
        .await
        .unwrap();
    assert!(offer(store, &head).await.is_some());
    assert_pools(store).await;
}

/// A head fits in its pool with the expired holds of the pool's other slots counted free: the
/// step serving it gives those back first (the pool refill), taking their slots' rows without
/// waiting; a slot whose row another transaction holds keeps its holds, and the head waits
/// for the sweeper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_short_only_by_expired_holds_is_refilled_for_its_head() {
    let Some(ctx) = setup("a_pool_short_only_by_expired_holds_is_refilled_for_its_head").await
    else {
        return;
    };
    let store = &ctx.store;
    let (engine, clock) = engine(store);
    let minute = |slot: SlotId, key: &str| {
        NewHold::new(slot, key.to_owned()).lifetime(StdDuration::from_secs(60))
    };
    let (a, b) = (new_slot(&engine, 2).await, new_slot(&engine, 2).await);
    let pool = new_pool(&engine, 2, &[a, b]).await;
    let expiring = engine.place_hold(minute(a, "expiring")).await.unwrap().hold;
    engine.hold(a, "stays").await.unwrap();
    clock.advance(Duration::seconds(61));
    // The pool's stored units are gone, but one of them only to an expired hold on A.
    assert_eq!(pool_row(store, pool).await, (0, 0));
    let held = match engine.join_waitlist(NewHold::new(b, "join"), 0).await {
        Ok(Joined::Held { hold, .. }) => hold,
        other => panic!("held at once, got {other:?}"),
    };
    assert_eq!(held.slot_id, b);
    let reclaimed = store
        .get_hold(expiring.hold_id, &Scope::BackOffice, clock.now())
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!(
        reclaimed.status,
        HoldStatus::Expired,
        "given back by the refill"
    );
    assert_eq!(pool_row(store, pool).await, (0, 0));

    // The same with C's row held by another transaction: its expired hold stays where it is.
    let (c, d) = (new_slot(&engine, 2).await, new_slot(&engine, 2).await);
    let other_pool = new_pool(&engine, 1, &[c, d]).await;
    engine.place_hold(minute(c, "c-expiring")).await.unwrap();
    clock.advance(Duration::seconds(61));
    let other = one_connection(&ctx.url).await;
    let mut tx = other.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT id FROM \"{}\".slots WHERE id = $1 FOR NO KEY UPDATE",
        store.schema()
    )))
    .bind(c.get())
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let entry = tokio::time::timeout(StdDuration::from_secs(10), wait(&engine, d, "d", 1))
        .await
        .expect("the join does not wait for C's row");
    tx.commit().await.unwrap();
    assert_eq!(pool_row(store, other_pool).await, (0, 1));
    store.reclaim_expired(clock.now(), 10).await.unwrap();
    assert!(
        offer(store, &entry).await.is_some(),
        "served by the sweeper"
    );
    assert_eq!(pool_row(store, other_pool).await, (0, 0));
    assert_pools(store).await;
}

/// An entry of a slot in two pools, offered by one pool's line, leaves the other's too: the
/// next in that other line, which waited only behind it, is offered in the same step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offer_serves_the_other_lines_its_entry_left() {
    let Some(ctx) = setup("an_offer_serves_the_other_lines_its_entry_left").await else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let (r, s, t) = (
        new_slot(&engine, 2).await,
        new_slot(&engine, 2).await,
        new_slot(&engine, 2).await,
    );
    let p = new_pool(&engine, 1, &[r, s]).await;
    let q = new_pool(&engine, 2, &[s, t]).await;
    engine.hold(r, "r").await.unwrap();
    // S's entry waits for P; T's waits behind it in Q's line, though Q has room for both.
    let first = wait(&engine, s, "first", 1).await;
    let second = wait(&engine, t, "second", 1).await;
    engine.change_pool_capacity(p, 2).await.unwrap();
    assert!(offer(store, &first).await.is_some(), "P's head");
    assert!(
        offer(store, &second).await.is_some(),
        "Q's next head, in the same step"
    );
    assert_eq!(pool_row(store, q).await, (0, 0));
    assert_pools(store).await;
}
