//! Waitlists on PostgreSQL beyond the conformance cases: every statement that frees units
//! serves the line in that statement (a booking's cancel, a capacity raise, a lower capacity
//! that reclaims expired holds, reopening sales), also inside a caller's transaction (and
//! rolled back with it); bookings, "any one of these" holds and keys never pass a waiting
//! line; an administrative change in the caller's transaction leaves the trigger serving
//! after it; a slot attached to a pool after its line formed serves it from the pool too; the
//! database's clock; and a race of joins, leaves and cancels that leaves every line served as
//! far as it can be, with no deadlock in the server's log.

mod common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use common::*;
use slot_booking::candidates::NewAnyHold;
use slot_booking::waitlists::Joined;
use slot_booking::{
    BookingEngine, Clock, ConsumerId, EventKind, EventStore, HoldStatus, ManualClock, NewBooking,
    NewHold, NewPool, NewSlot, PoolStore, Scope, SlotId, WaitlistEntry,
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

/// Joins `slot`'s line with `key` for `quantity` units; the entry, which must wait.
async fn wait(
    engine: &BookingEngine<PostgresStore>,
    slot: SlotId,
    key: &str,
    quantity: i32,
) -> WaitlistEntry {
    match engine
        .join_waitlist(NewHold::new(slot, key).quantity(quantity), 0)
        .await
    {
        Ok(Joined::Waiting { entry, .. }) => entry,
        other => panic!("{key} should wait, got {other:?}"),
    }
}

/// The offer made to `entry`, as stored (BackOffice), if any.
async fn offer(store: &PostgresStore, entry: &WaitlistEntry) -> Option<slot_booking::Hold> {
    use slot_booking::HoldStore;
    store
        .get_hold(entry.offer_id(), &Scope::BackOffice, t0())
        .await
        .unwrap()
        .outcome
}

/// Every slot's line as the tables have it: `waiting` equals the entries of the slot, and no
/// selling slot has a line whose head fits in its free units (counting its expired holds
/// free: the head would have been served).
async fn assert_lines(store: &PostgresStore, now: slot_booking::Timestamp) {
    let s = store.schema();
    let rows: Vec<(i64, i32, i64, Option<i32>, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT sl.id, sl.waiting, \
                (SELECT count(*) FROM \"{s}\".waitlist_entries e WHERE e.slot_id = sl.id), \
                (SELECT e.quantity FROM \"{s}\".waitlist_entries e WHERE e.slot_id = sl.id \
                 ORDER BY e.priority DESC, e.id LIMIT 1), \
                sl.remaining + (SELECT coalesce(sum(h.quantity), 0) FROM \"{s}\".holds h \
                                WHERE h.slot_id = sl.id AND h.status = 'held' \
                                  AND h.expires_at <= $1) \
         FROM \"{s}\".slots sl WHERE NOT sl.closed AND sl.removed_at IS NULL ORDER BY sl.id"
    )))
    .bind(now)
    .fetch_all(store.pool())
    .await
    .unwrap();
    for (slot, waiting, entries, head, free) in rows {
        assert_eq!(
            i64::from(waiting),
            entries,
            "slot {slot}: waiting counts its line"
        );
        if let Some(head) = head {
            assert!(
                i64::from(head) > free,
                "slot {slot}: the head ({head}) fits in {free} free units but waits"
            );
        }
        assert_invariant(store, SlotId(slot)).await;
    }
}

/// How many `deadlock detected` lines the server's log has (0 when it cannot be read).
fn deadlocks() -> usize {
    std::fs::read_to_string("/var/log/postgresql/postgresql-15-main.log")
        .map(|log| log.matches("deadlock detected").count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_that_frees_units_serves_the_line() {
    let Some(ctx) = setup("every_statement_that_frees_units_serves_the_line").await else {
        return;
    };
    let store = &ctx.store;
    let (engine, clock) = engine(store);
    let log = ConsumerId::new("log").unwrap();

    // A booking's cancel: its line on the slot goes to the head, logged after the cancel.
    let (a, b) = (new_slot(&engine, 2).await, new_slot(&engine, 1).await);
    let booked = engine
        .book(NewBooking::new("bk").line(a, 2).line(b, 1))
        .await
        .unwrap()
        .booking;
    let head = wait(&engine, a, "after-booking", 2).await;
    let read = store.read_events(&log, 100).await.unwrap();
    store
        .acknowledge(&log, read.last().unwrap().position)
        .await
        .unwrap();
    engine
        .cancel_booking(&Scope::Anonymous, booked.booking_id)
        .await
        .unwrap();
    let offered = offer(store, &head).await.expect("offered by the cancel");
    assert_eq!((offered.quantity, offered.status), (2, HoldStatus::Held));
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
            EventKind::HoldCancelled,
            EventKind::HoldPlaced,
            EventKind::WaitlistOffered
        ]
    );

    // A capacity raise.
    let raised = new_slot(&engine, 1).await;
    engine.hold(raised, "r").await.unwrap();
    let head = wait(&engine, raised, "after-raise", 1).await;
    engine.change_capacity(raised, 2).await.unwrap();
    assert!(offer(store, &head).await.is_some(), "offered by the raise");

    // Units freed while sales are closed wait for the reopening.
    let closed = new_slot(&engine, 1).await;
    let held = engine.hold(closed, "c").await.unwrap().hold;
    let head = wait(&engine, closed, "after-reopen", 1).await;
    engine.close_sales(closed).await.unwrap();
    engine
        .cancel(&Scope::Anonymous, held.hold_id)
        .await
        .unwrap();
    assert_eq!(
        offer(store, &head).await,
        None,
        "not selling: nothing offered"
    );
    engine.reopen_sales(closed).await.unwrap();
    assert!(
        offer(store, &head).await.is_some(),
        "offered by the reopening"
    );

    // A lower capacity that only fits by reclaiming expired holds gives the rest to the line,
    // at the engine's instant (its events', not the server's clock).
    let lowered = new_slot(&engine, 3).await;
    for key in ["x", "y", "z"] {
        minute_hold(&engine, lowered, key).await;
    }
    let head = wait(&engine, lowered, "after-lowering", 2).await;
    clock.advance(Duration::seconds(61));
    engine.change_capacity(lowered, 2).await.unwrap();
    let offered = offer(store, &head).await.expect("offered by the change");
    assert_eq!(offered.created_at, clock.now());
    assert_eq!(counts(store, lowered).await, (2, 0, 2, 0));

    assert_lines(store, clock.now()).await;
}

/// A one-unit hold on `slot` that lives one minute.
async fn minute_hold(engine: &BookingEngine<PostgresStore>, slot: SlotId, key: &str) {
    engine
        .place_hold(NewHold::new(slot, key).lifetime(StdDuration::from_secs(60)))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_in_the_callers_transaction_serves_the_line_with_it() {
    let Some(ctx) = setup("a_cancel_in_the_callers_transaction_serves_the_line_with_it").await
    else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let slot = new_slot(&engine, 1).await;
    let held = engine.hold(slot, "held").await.unwrap().hold;
    let head = wait(&engine, slot, "head", 1).await;

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
    assert_eq!(
        inside,
        Some(("held".to_owned(),)),
        "offered in the transaction"
    );
    tx.rollback().await.unwrap();
    assert_eq!(offer(store, &head).await, None, "rolled back with it");
    let (_, position) = engine
        .waitlist_entry(&Scope::Anonymous, head.entry_id)
        .await
        .unwrap();
    assert_eq!(position, 1);

    let mut tx = engine.transaction().await.unwrap();
    tx.cancel(&Scope::Anonymous, held.hold_id).await.unwrap();
    tx.commit().await.unwrap();
    assert!(offer(store, &head).await.is_some(), "committed with it");
    assert_lines(store, t0()).await;
}

/// An administrative change in the caller's transaction defers the serving trigger only for its
/// own unit of work (it serves its lines itself, after its event): a cancel after it in the
/// same transaction still serves its slot's line in its statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_change_in_the_callers_transaction_a_cancel_still_serves_the_line() {
    let Some(ctx) =
        setup("after_a_change_in_the_callers_transaction_a_cancel_still_serves_the_line").await
    else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let (changed, lined) = (new_slot(&engine, 1).await, new_slot(&engine, 1).await);
    let held = engine.hold(lined, "held").await.unwrap().hold;
    let head = wait(&engine, lined, "head", 1).await;

    let mut tx = engine.transaction().await.unwrap();
    assert_eq!(tx.change_capacity(changed, 2).await.unwrap().capacity, 2);
    tx.cancel(&Scope::Anonymous, held.hold_id).await.unwrap();
    let select = format!(
        "SELECT status, current_setting('slot_booking.defer_serving', true) \
         FROM \"{}\".holds WHERE id = $1",
        store.schema()
    );
    let offer_id = head.offer_id().get();
    let inside: Option<(String, Option<String>)> = tx
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
    let (status, deferred) = inside.expect("offered by the cancel, in the transaction");
    assert_eq!(status, "held");
    assert_ne!(
        deferred.as_deref(),
        Some("on"),
        "the deferral ended with the change's unit"
    );
    tx.commit().await.unwrap();
    assert!(offer(store, &head).await.is_some());
    assert_lines(store, t0()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookings_any_one_holds_and_keys_never_pass_a_waiting_line() {
    let Some(ctx) = setup("bookings_any_one_holds_and_keys_never_pass_a_waiting_line").await else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let (busy, free) = (new_slot(&engine, 3).await, new_slot(&engine, 3).await);
    engine
        .place_hold(NewHold::new(busy, "two").quantity(2))
        .await
        .unwrap();
    // One unit is free, but the head wants two: it waits, and so does the unit.
    let entry = wait(&engine, busy, "head", 2).await;

    let error = engine
        .book(NewBooking::new("bk").line(busy, 1).line(free, 1))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "lines_unavailable");
    let placed = engine
        .hold_any(NewAnyHold::new(vec![busy, free], "any"))
        .await
        .unwrap()
        .hold;
    assert_eq!(placed.slot_id, free, "the slot with a line is passed over");
    assert_eq!(
        engine
            .hold_any(NewAnyHold::new(vec![busy], "any-busy"))
            .await
            .unwrap_err()
            .code(),
        "no_candidate_available"
    );
    // The entry's key is taken for holds, bookings and other entries, on any slot.
    assert_eq!(
        engine.hold(free, "head").await.unwrap_err().code(),
        "idempotency_key_reused"
    );
    assert_eq!(
        engine
            .book(NewBooking::new("head").line(free, 1))
            .await
            .unwrap_err()
            .code(),
        "idempotency_key_reused"
    );
    assert_eq!(
        engine
            .join_waitlist(NewHold::new(free, "head"), 0)
            .await
            .unwrap_err()
            .code(),
        "idempotency_key_reused"
    );
    assert_eq!(counts(store, busy).await, (3, 1, 2, 0));
    assert_eq!(offer(store, &entry).await, None);
    // Leaving frees the unit for newcomers and the key for anyone.
    engine
        .leave_waitlist(&Scope::Anonymous, entry.entry_id)
        .await
        .unwrap();
    engine.hold(busy, "head").await.unwrap();
    assert_lines(store, t0()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_attached_to_a_pool_after_its_line_formed_serves_it_from_the_pool() {
    let Some(ctx) =
        setup("a_slot_attached_to_a_pool_after_its_line_formed_serves_it_from_the_pool").await
    else {
        return;
    };
    let store = &ctx.store;
    let (engine, _clock) = engine(store);
    let slot = new_slot(&engine, 2).await;
    let held = engine
        .place_hold(NewHold::new(slot, "two").quantity(2))
        .await
        .unwrap()
        .hold;
    let head = wait(&engine, slot, "head", 2).await;
    let pool = engine.create_pool(NewPool::new(3)).await.unwrap().pool_id;
    engine.attach_slot(pool, slot).await.unwrap();
    engine
        .cancel(&Scope::Anonymous, held.hold_id)
        .await
        .unwrap();
    let offered = offer(store, &head).await.expect("offered");
    assert_eq!(offered.quantity, 2);
    let usage = store.get_pool(pool, t0()).await.unwrap().outcome.unwrap();
    assert_eq!((usage.pool.stored_remaining, usage.held), (1, 2));
    assert_lines(store, t0()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_database_clock_offers_are_made_at_the_freeing_statements_instant() {
    let Some(ctx) =
        setup("with_the_database_clock_offers_are_made_at_the_freeing_statements_instant").await
    else {
        return;
    };
    let store = ctx.store.clone().with_database_clock();
    let engine = BookingEngine::builder(store.clone())
        .cache_period(StdDuration::ZERO)
        .build();
    let start = chrono::Utc::now() + Duration::days(1);
    let slot = engine
        .create_slot(NewSlot::new(start, start + Duration::hours(1), 1))
        .await
        .unwrap()
        .slot_id;
    let held = engine.hold(slot, "held").await.unwrap().hold;
    let request = NewHold::new(slot, "head").lifetime(StdDuration::from_secs(90));
    let Ok(Joined::Waiting { entry, .. }) = engine.join_waitlist(request, 0).await else {
        panic!("waits")
    };
    let cancelled = engine
        .cancel(&Scope::Anonymous, held.hold_id)
        .await
        .unwrap();
    let offered = offer(&store, &entry).await.expect("offered");
    assert_eq!(Some(offered.created_at), cancelled.cancelled_at);
    assert_eq!(
        offered.expires_at - offered.created_at,
        Duration::seconds(90)
    );
}

/// Joins, leaves and cancels race on two slots: every line ends served as far as it can be,
/// `waiting` counts each line, every slot's invariant holds, and the server logged no deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_race_of_joins_leaves_and_cancels_leaves_every_line_served() {
    let Some(ctx) = setup("a_race_of_joins_leaves_and_cancels_leaves_every_line_served").await
    else {
        return;
    };
    let before = deadlocks();
    let store = ctx.store.clone();
    let (engine, _clock) = engine(&store);
    let engine = Arc::new(engine);
    let slots = [new_slot(&engine, 4).await, new_slot(&engine, 4).await];
    let mut held = Vec::new();
    for (n, slot) in slots.iter().enumerate() {
        for i in 0..4 {
            held.push(
                engine
                    .hold(*slot, &format!("h-{n}-{i}"))
                    .await
                    .unwrap()
                    .hold,
            );
        }
    }
    let mut tasks = Vec::new();
    for task in 0..6 {
        let engine = Arc::clone(&engine);
        tasks.push(tokio::spawn(async move {
            for i in 0..8 {
                let slot = slots[(task + i) % 2];
                let quantity = 1 + ((task * 3 + i) % 2) as i32;
                let request = NewHold::new(slot, format!("j-{task}-{i}")).quantity(quantity);
                match engine.join_waitlist(request, (i % 3) as i32).await {
                    Ok(Joined::Waiting { entry, .. }) if i % 3 == 0 => {
                        match engine
                            .leave_waitlist(&Scope::Anonymous, entry.entry_id)
                            .await
                        {
                            Ok(_) => {}
                            Err(e) => assert_eq!(e.code(), "entry_not_found"),
                        }
                    }
                    Ok(Joined::Held { hold, .. }) if i % 2 == 0 => {
                        engine
                            .cancel(&Scope::Anonymous, hold.hold_id)
                            .await
                            .unwrap();
                    }
                    Ok(_) => {}
                    Err(e) => panic!("join: {e:?}"),
                }
            }
        }));
    }
    for hold in held {
        let engine = Arc::clone(&engine);
        tasks.push(tokio::spawn(async move {
            tokio::task::yield_now().await;
            engine
                .cancel(&Scope::Anonymous, hold.hold_id)
                .await
                .unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_lines(&store, t0()).await;
    assert_eq!(deadlocks(), before, "the server logged a deadlock");
}
