//! Waitlists in the SQLite store beyond the conformance suite: reopened sales and a capacity
//! raise serve the line in their own transaction; a cancel in the caller's transaction serves
//! it there (and a rollback undoes both); bookings and holds wait behind a line, and a waiting
//! entry's key is taken for them; no hold ever takes an entry's number; the offer's events.

mod common;

use chrono::Duration;
use common::*;
use slot_booking::{
    BookingEngine, BookingError, EventKind, EventStore, HoldId, HoldOutcome, HoldStatus, HoldStore,
    LineProblem, ManualClock, NewBooking, NewHold, Scope, SlotId,
};
use slot_booking_sqlite::SqliteStore;
use sqlx::SqlitePool;

use slot_booking::waitlists::Joined;
use slot_booking::WaitlistEntry;

const ANYONE: Scope = Scope::Anonymous;

/// An engine on `clock` that reads the store on every availability call.
fn engine(store: SqliteStore, clock: &ManualClock) -> BookingEngine<SqliteStore> {
    BookingEngine::builder(store)
        .clock(clock.clone())
        .cache_period(std::time::Duration::ZERO)
        .build()
}

/// A slot of `capacity` (starting an hour after `t0()`) whose units are all held.
async fn full_slot(engine: &BookingEngine<SqliteStore>, capacity: i32, key: &str) -> SlotId {
    let slot_id = engine
        .create_slot(slot_booking::NewSlot::new(at(3600), at(7200), capacity))
        .await
        .unwrap()
        .slot_id;
    engine
        .place_hold(NewHold::new(slot_id, key).quantity(capacity))
        .await
        .unwrap();
    slot_id
}

/// Joins with `key` for `quantity` units; the entry, which must wait.
async fn wait(
    engine: &BookingEngine<SqliteStore>,
    slot_id: SlotId,
    key: &str,
    quantity: i32,
) -> WaitlistEntry {
    match engine
        .join_waitlist(NewHold::new(slot_id, key).quantity(quantity), 0)
        .await
    {
        Ok(Joined::Waiting { entry, .. }) => entry,
        other => panic!("{key} should wait, got {other:?}"),
    }
}

/// The entry's offer as stored, if it was made.
async fn offer(store: &SqliteStore, entry: &WaitlistEntry) -> Option<slot_booking::Hold> {
    store
        .get_hold(entry.offer_id(), &Scope::BackOffice, t0())
        .await
        .unwrap()
        .outcome
}

/// The slot's `waiting` counter, as stored.
async fn waiting(pool: &SqlitePool, slot_id: SlotId) -> i64 {
    sqlx::query_scalar("SELECT waiting FROM slot_booking_slots WHERE id = ?1")
        .bind(slot_id.get())
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Units freed while sales are closed stay with the slot; reopening serves the line in the
/// same transaction, and answers the slot as it is after the offer.
#[tokio::test]
async fn reopening_sales_serves_the_line() {
    let db = TempDb::new("wl_reopen");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = full_slot(&engine, 2, "full").await;
    let entry = wait(&engine, slot_id, "w", 2).await;
    engine.close_sales(slot_id).await.unwrap();
    engine.cancel(&ANYONE, HoldId(1)).await.unwrap();
    assert_eq!(
        offer(&store, &entry).await,
        None,
        "closed: nobody is served"
    );
    assert_eq!(waiting(store.pool(), slot_id).await, 1);
    let reopened = engine.reopen_sales(slot_id).await.unwrap();
    assert_eq!(
        reopened.stored_remaining, 2,
        "answered as the change left it, before the line took its units"
    );
    let offered = offer(&store, &entry).await.expect("served on reopening");
    assert_eq!((offered.quantity, offered.status), (2, HoldStatus::Held));
    assert_eq!(waiting(store.pool(), slot_id).await, 0);
    assert_counts(store.pool(), slot_id, (2, 0, 2, 0)).await;
}

/// A capacity raise serves the line in its transaction: the head whole, then the next while
/// it fits; the one behind that waits.
#[tokio::test]
async fn a_capacity_raise_serves_the_line() {
    let db = TempDb::new("wl_raise");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = full_slot(&engine, 2, "full").await;
    let (a, b, c) = (
        wait(&engine, slot_id, "a", 2).await,
        wait(&engine, slot_id, "b", 1).await,
        wait(&engine, slot_id, "c", 2).await,
    );
    let raised = engine.change_capacity(slot_id, 6).await.unwrap();
    assert_eq!(
        (raised.capacity, raised.stored_remaining),
        (6, 4),
        "answered as the change left it, before the line took its units"
    );
    assert!(offer(&store, &a).await.is_some());
    assert!(offer(&store, &b).await.is_some());
    assert_eq!(offer(&store, &c).await, None, "2 wanted, 1 free");
    assert_eq!(
        engine.waitlist_entry(&ANYONE, c.entry_id).await.unwrap().1,
        1
    );
    assert_eq!(waiting(store.pool(), slot_id).await, 1);
    assert_counts(store.pool(), slot_id, (6, 1, 5, 0)).await;
}

/// A cancel in a transaction shared with the caller (`BookingEngine::transaction`) serves the
/// line in that transaction: rolled back, the cancel, the offer and its events go; committed,
/// they stay.
#[tokio::test]
async fn a_cancel_in_the_callers_transaction_serves_the_line_there() {
    let db = TempDb::new("wl_within");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = full_slot(&engine, 1, "full").await;
    let entry = wait(&engine, slot_id, "w", 1).await;
    let events_of = |pool: SqlitePool| async move {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM slot_booking_events")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let events_before = events_of(store.pool().clone()).await;
    for commit in [false, true] {
        let mut tx = engine.transaction().await.unwrap();
        tx.cancel(&ANYONE, HoldId(1)).await.unwrap();
        let offer_id = entry.offer_id().get();
        let inside: Option<String> = tx
            .run(move |tx| {
                Box::pin(async move {
                    sqlx::query_scalar("SELECT status FROM slot_booking_holds WHERE id = ?1")
                        .bind(offer_id)
                        .fetch_optional(tx.connection())
                        .await
                })
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            inside.as_deref(),
            Some("held"),
            "offered in the transaction"
        );
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
            assert_eq!(offer(&store, &entry).await, None);
            assert_eq!(waiting(store.pool(), slot_id).await, 1);
            assert_eq!(events_of(store.pool().clone()).await, events_before);
        }
    }
    assert!(offer(&store, &entry).await.is_some());
    assert_eq!(waiting(store.pool(), slot_id).await, 0);
    assert_counts(store.pool(), slot_id, (1, 0, 1, 0)).await;
}

/// While a line waits, a booking line on the slot is short with no unit free (even with units
/// stored free), a hold is sold out, through the group commit too; the entry's key is taken
/// for holds and bookings alike, and free again once the entry leaves.
#[tokio::test]
async fn holds_and_bookings_wait_behind_a_line() {
    let db = TempDb::new("wl_behind");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = full_slot(&engine, 3, "full").await;
    let other = engine
        .create_slot(slot_booking::NewSlot::new(at(3600), at(7200), 5))
        .await
        .unwrap()
        .slot_id;
    let entry = wait(&engine, slot_id, "big", 3).await;
    engine.change_capacity(slot_id, 4).await.unwrap();
    assert_eq!(
        store
            .get_slot(slot_id)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining,
        1
    );
    let refused = engine
        .book(NewBooking::new("cart").line(slot_id, 1).line(other, 1))
        .await
        .unwrap_err();
    match refused {
        BookingError::LinesUnavailable { lines } => {
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert_eq!(lines[0].slot_id, slot_id);
            assert_eq!(lines[0].problem, LineProblem::SoldOut { free: 0 });
        }
        other => panic!("expected the booking refused, got {other:?}"),
    }
    // Concurrent holds, committed together or alone: each sold out.
    let holds: Vec<_> = (0..6)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let k = key(&format!("newcomer-{i}"));
                store
                    .create_hold(request(slot_id, &k, at(1)))
                    .await
                    .unwrap()
                    .outcome
            })
        })
        .collect();
    for hold in holds {
        assert_eq!(hold.await.unwrap(), HoldOutcome::SoldOut);
    }
    // The entry's key, on another slot with units free.
    assert_eq!(
        hold(&store, other, "big", at(1)).await,
        HoldOutcome::KeyReused(None)
    );
    assert_eq!(
        engine
            .book(NewBooking::new("big").line(other, 1))
            .await
            .unwrap_err()
            .code(),
        "idempotency_key_reused"
    );
    engine
        .leave_waitlist(&ANYONE, entry.entry_id)
        .await
        .unwrap();
    assert_eq!(waiting(store.pool(), slot_id).await, 0);
    created(hold(&store, other, "big", at(1)).await);
    created(hold(&store, slot_id, "now-free", at(1)).await);
    assert_counts(store.pool(), slot_id, (4, 0, 4, 0)).await;
    assert_counts(store.pool(), other, (5, 4, 1, 0)).await;
}

/// An entry's id is drawn past every hold's, and no hold or entry takes it after, even once
/// the entry has left and no row has it.
#[tokio::test]
async fn no_hold_takes_an_entrys_number() {
    let db = TempDb::new("wl_ids");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = full_slot(&engine, 1, "full").await;
    let free = engine
        .create_slot(slot_booking::NewSlot::new(at(3600), at(7200), 10))
        .await
        .unwrap()
        .slot_id;
    let first = wait(&engine, slot_id, "first", 1).await;
    assert_eq!(first.entry_id.0, 2);
    let second = wait(&engine, slot_id, "second", 1).await;
    assert_eq!(second.entry_id.0, 3);
    let next = engine.hold(free, "next").await.unwrap().hold;
    assert_eq!(next.hold_id, HoldId(4), "past both entries");
    engine
        .leave_waitlist(&ANYONE, second.entry_id)
        .await
        .unwrap();
    let after = engine.hold(free, "after").await.unwrap().hold;
    assert_eq!(after.hold_id, HoldId(5));
    engine
        .leave_waitlist(&ANYONE, first.entry_id)
        .await
        .unwrap();
    let third = match engine
        .join_waitlist(NewHold::new(free, "third"), 0)
        .await
        .unwrap()
    {
        Joined::Held { hold, .. } => hold,
        other => panic!("held at once, got {other:?}"),
    };
    assert_eq!(third.hold_id, HoldId(6));
    let booked = engine
        .book(NewBooking::new("cart").line(free, 1))
        .await
        .unwrap()
        .booking;
    assert_eq!(booked.booking_id, HoldId(7));
}

/// An offer appends `hold_placed` then `waitlist_offered`, after the events of the write that
/// freed its units; an offer that expires is reclaimed by the sweeper, which serves the next
/// in that same transaction.
#[tokio::test]
async fn offers_are_logged_after_the_write_that_freed_their_units() {
    let db = TempDb::new("wl_events");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = full_slot(&engine, 2, "full").await;
    let alice = slot_booking::OwnerId::new("alice").unwrap();
    let request = NewHold::new(slot_id, "a")
        .quantity(2)
        .owner(alice.clone())
        .lifetime(std::time::Duration::from_secs(60));
    let Joined::Waiting { entry: a, .. } = engine.join_waitlist(request, 0).await.unwrap() else {
        panic!("a waits")
    };
    let b = wait(&engine, slot_id, "b", 2).await;
    let consumer = slot_booking::ConsumerId::new("audit").unwrap();
    let seen = store.read_events(&consumer, 100).await.unwrap();
    store
        .acknowledge(&consumer, seen.last().unwrap().position)
        .await
        .unwrap();
    engine.cancel(&ANYONE, HoldId(1)).await.unwrap();
    let events = store.read_events(&consumer, 100).await.unwrap();
    let kinds: Vec<(EventKind, Option<HoldId>)> =
        events.iter().map(|e| (e.kind, e.hold_id)).collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::HoldCancelled, Some(HoldId(1))),
            (EventKind::HoldPlaced, Some(a.offer_id())),
            (EventKind::WaitlistOffered, Some(a.offer_id())),
        ]
    );
    assert_eq!(events[2].owner.as_ref(), Some(&alice));
    assert_eq!(events[2].quantity, 2);
    store
        .acknowledge(&consumer, events.last().unwrap().position)
        .await
        .unwrap();
    clock.advance(Duration::seconds(61));
    let reclaimed = engine.reclaim_expired(1).await.unwrap();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].hold_id, a.offer_id());
    let offered = offer(&store, &b).await.expect("served by the sweeper");
    assert_eq!(offered.created_at, t0() + Duration::seconds(61));
    let kinds: Vec<EventKind> = store
        .read_events(&consumer, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![
            EventKind::HoldExpired,
            EventKind::HoldPlaced,
            EventKind::WaitlistOffered
        ]
    );
    assert_counts(store.pool(), slot_id, (2, 0, 2, 0)).await;
}

/// The status of a hold as stored (not resolved against any clock).
async fn stored_status(pool: &SqlitePool, hold_id: HoldId) -> String {
    sqlx::query_scalar("SELECT status FROM slot_booking_holds WHERE id = ?1")
        .bind(hold_id.get())
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Serving reclaims the slot's expired holds only when their units are what makes the head
/// fit: a cancel that leaves the head short even with them reclaims nothing; one after which
/// they make it fit reclaims them (`hold_expired` before the offer's events).
#[tokio::test]
async fn a_head_reclaims_expired_holds_only_when_that_makes_it_fit() {
    let db = TempDb::new("wl_reclaim_head");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = engine
        .create_slot(slot_booking::NewSlot::new(at(3600), at(7200), 5))
        .await
        .unwrap()
        .slot_id;
    let short_lived = |key: &str, quantity| {
        NewHold::new(slot_id, key)
            .quantity(quantity)
            .lifetime(std::time::Duration::from_secs(60))
    };
    let x = engine.place_hold(short_lived("x", 1)).await.unwrap().hold;
    let y = engine
        .place_hold(NewHold::new(slot_id, "y"))
        .await
        .unwrap()
        .hold;
    let z = engine
        .place_hold(NewHold::new(slot_id, "z").quantity(3))
        .await
        .unwrap()
        .hold;
    let head = wait(&engine, slot_id, "head", 5).await;
    clock.advance(Duration::seconds(61));
    // 1 free and x's expired unit: 2 of 5.
    engine.cancel(&ANYONE, y.hold_id).await.unwrap();
    assert_eq!(stored_status(store.pool(), x.hold_id).await, "held");
    assert_eq!(offer(&store, &head).await, None);
    // 4 free and x's unit: the head's 5.
    let consumer = slot_booking::ConsumerId::new("audit").unwrap();
    let seen = store.read_events(&consumer, 100).await.unwrap();
    store
        .acknowledge(&consumer, seen.last().unwrap().position)
        .await
        .unwrap();
    engine.cancel(&ANYONE, z.hold_id).await.unwrap();
    assert_eq!(stored_status(store.pool(), x.hold_id).await, "expired");
    assert_eq!(offer(&store, &head).await.map(|h| h.quantity), Some(5));
    let kinds: Vec<(EventKind, Option<HoldId>)> = store
        .read_events(&consumer, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.hold_id))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::HoldCancelled, Some(z.hold_id)),
            (EventKind::HoldExpired, Some(x.hold_id)),
            (EventKind::HoldPlaced, Some(head.offer_id())),
            (EventKind::WaitlistOffered, Some(head.offer_id())),
        ]
    );
    assert_counts(store.pool(), slot_id, (5, 0, 5, 0)).await;
}
