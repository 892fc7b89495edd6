//! The SQLite store's event log beyond the conformance suite: consumers resuming on a new store
//! after a crash, rolled-back transactions leaving no event, ids never reused after a purge,
//! and no event for a write that changes nothing.

mod common;

use chrono::Duration;
use common::*;
use slot_booking::{
    BookingEngine, Clock, ConsumerId, Event, EventKind, EventPosition, EventStore, Hold,
    HoldOutcome, HoldStatus, ManualClock, NewHold, NewSlot, RenewRequest, Scope, SlotChange,
    SlotId, Timestamp, Transition,
};
use slot_booking::{HoldStore, SlotAdmin};
use slot_booking_sqlite::SqliteStore;

/// An engine on `clock` that reads the store on every availability call.
fn engine(store: SqliteStore, clock: &ManualClock) -> BookingEngine<SqliteStore> {
    BookingEngine::builder(store)
        .clock(clock.clone())
        .cache_period(std::time::Duration::ZERO)
        .build()
}

fn consumer(name: &str) -> ConsumerId {
    ConsumerId::new(name).unwrap()
}

fn kinds(events: &[Event]) -> Vec<EventKind> {
    events.iter().map(|e| e.kind).collect()
}

/// Every event in the log, whoever acknowledged what (a consumer that never acknowledges).
async fn all_events(store: &SqliteStore) -> Vec<Event> {
    store
        .read_events(&consumer("all-events-probe"), 1000)
        .await
        .unwrap()
}

/// A consumer reads and acknowledges part of the log, "crashes" (its store and pool are
/// dropped and closed) and resumes on a new store opened on the same file: it continues right
/// after what it acknowledged, what it read but did not acknowledge comes again, and nothing
/// is lost, including what was written while it was down.
#[tokio::test]
async fn a_consumer_resumes_after_a_crash_on_a_new_store() {
    let db = TempDb::new("events_resume");
    let mailer = consumer("mailer");
    let clock = ManualClock::new(t0());
    let (read_before_crash, acknowledged) = {
        let store = db.store().await;
        let engine = engine(store.clone(), &clock);
        let slot_id = engine
            .create_slot(NewSlot::new(at(3600), at(7200), 10))
            .await
            .unwrap()
            .slot_id;
        for key in ["a", "b", "c", "d"] {
            engine.hold(slot_id, key).await.unwrap();
        }
        let read = engine.read_events(&mailer, 3).await.unwrap();
        assert_eq!(
            kinds(&read),
            [
                EventKind::SlotCreated,
                EventKind::HoldPlaced,
                EventKind::HoldPlaced
            ]
        );
        // Handled the first two, then crashed while handling the third.
        engine
            .acknowledge_events(&mailer, read[1].position)
            .await
            .unwrap();
        let acknowledged = read[1].position;
        drop(engine);
        store.pool().close().await;
        (read, acknowledged)
    };
    // Written by another process while the consumer is down.
    {
        let other = db.store().await;
        let slot_id = slot(&other, 1).await;
        created(hold(&other, slot_id, "while-down", at(0)).await);
        other.pool().close().await;
    }

    let store = db.store().await;
    assert_eq!(
        store.consumer_position(&mailer).await.unwrap(),
        Some(acknowledged)
    );
    let engine = engine(store.clone(), &clock);
    let resumed = engine.read_events(&mailer, 1000).await.unwrap();
    assert_eq!(
        resumed[0], read_before_crash[2],
        "the unacknowledged event comes again, first"
    );
    assert!(resumed.iter().all(|e| e.position > acknowledged));
    assert_eq!(
        kinds(&resumed),
        [
            EventKind::HoldPlaced,
            EventKind::HoldPlaced,
            EventKind::HoldPlaced,
            EventKind::SlotCreated,
            EventKind::HoldPlaced
        ]
    );
    let everything = all_events(&store).await;
    assert_eq!(everything.len(), 2 + resumed.len(), "nothing lost");
    assert_eq!(&everything[2..], &resumed[..]);
    engine
        .acknowledge_events(&mailer, resumed[4].position)
        .await
        .unwrap();
    assert!(engine.read_events(&mailer, 1000).await.unwrap().is_empty());
}

/// Writes in a transaction shared with the caller (`BookingEngine::transaction`) append their
/// events in it: rolled back, the transaction leaves no event (nor the writes); committed, each
/// change has its one event, at the engine's time, after the events committed before it.
#[tokio::test]
async fn a_rolled_back_transaction_leaves_no_event() {
    let db = TempDb::new("events_rollback");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 3))
        .await
        .unwrap()
        .slot_id;
    let booked = engine.hold(slot_id, "booked").await.unwrap().hold;
    let short = engine
        .place_hold(NewHold::new(slot_id, "short").lifetime(std::time::Duration::from_secs(60)))
        .await
        .unwrap()
        .hold;
    let before = all_events(&store).await;
    assert_eq!(before.len(), 3);
    clock.advance(Duration::seconds(120));

    for commit in [false, true] {
        let mut tx = engine.transaction().await.unwrap();
        tx.confirm(&Scope::Anonymous, booked.hold_id).await.unwrap();
        // Two units are free, one of them only once `short` (expired) is reclaimed.
        tx.place_hold(NewHold::new(slot_id, "pair").quantity(2))
            .await
            .unwrap();
        tx.close_sales(slot_id).await.unwrap();
        tx.create_slot(NewSlot::new(at(3600), at(7200), 1))
            .await
            .unwrap();
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
            assert_eq!(all_events(&store).await, before, "no event stays");
            assert_counts(store.pool(), slot_id, (3, 1, 2, 0)).await;
        }
    }
    let after = all_events(&store).await;
    assert_eq!(&after[..3], &before[..]);
    let new = &after[3..];
    assert_eq!(
        kinds(new),
        [
            EventKind::HoldConfirmed,
            EventKind::HoldExpired,
            EventKind::HoldPlaced,
            EventKind::SlotClosed,
            EventKind::SlotCreated
        ]
    );
    assert!(new
        .iter()
        .all(|e| e.at == clock.now() && e.position > before[2].position));
    assert_eq!(new[1].hold_id, Some(short.hold_id));
    assert_eq!(new[2].quantity, 2);
    assert_counts(store.pool(), slot_id, (3, 0, 2, 1)).await;

    // A cancel rolled back leaves none either.
    let mut tx = engine.transaction().await.unwrap();
    tx.cancel(&Scope::Anonymous, booked.hold_id).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(all_events(&store).await, after);
    // A refusal in the transaction (its savepoint rolled back) leaves none either, and the
    // transaction goes on.
    let mut tx = engine.transaction().await.unwrap();
    assert!(tx.reopen_sales(slot_id).await.is_ok());
    assert!(tx.change_capacity(slot_id, 1).await.is_err(), "in use");
    assert!(tx.cancel(&Scope::Anonymous, booked.hold_id).await.is_ok());
    tx.commit().await.unwrap();
    assert_eq!(
        kinds(&all_events(&store).await[after.len()..]),
        [EventKind::SlotReopened, EventKind::HoldCancelled]
    );
}

/// Purged events leave no id to hand out again: with every event purged, the next one still
/// comes after every position a consumer has read (AUTOINCREMENT), so it is not skipped.
#[tokio::test]
async fn purged_event_ids_are_never_handed_out_again() {
    let db = TempDb::new("events_ids");
    let store = db.store().await;
    let slot_id = slot(&store, 5).await;
    created(hold(&store, slot_id, "a", at(0)).await);
    let reader = consumer("reader");
    let read = store.read_events(&reader, 10).await.unwrap();
    let last = read[read.len() - 1].position;
    store.acknowledge(&reader, last).await.unwrap();
    let purged = store
        .purge(chrono::Utc::now() + Duration::days(365 * 100), 1000)
        .await
        .unwrap();
    assert_eq!(purged.events, 2);
    assert!(all_events(&store).await.is_empty());
    // Reopened, so nothing is cached in the connection.
    store.pool().close().await;
    let store = db.store().await;
    created(hold(&store, slot_id, "b", at(0)).await);
    let next = store.read_events(&reader, 10).await.unwrap();
    assert_eq!(next.len(), 1, "the new event is not skipped");
    assert!(next[0].position > last);
    assert_eq!(next[0].position.epoch(), 0);
}

/// Writes that change nothing append nothing: a renewal at the hold's maximum life (applied,
/// the hold unchanged), closing a closed slot, setting the capacity it has, replays.
#[tokio::test]
async fn writes_that_change_nothing_append_nothing() {
    let db = TempDb::new("events_noop");
    let store = db.store().await;
    let slot_id = slot(&store, 2).await;
    let held = created(hold(&store, slot_id, "a", at(0)).await);
    let count = |store: SqliteStore| async move { all_events(&store).await.len() };
    let start = count(store.clone()).await;

    let renew = |now, max_life| RenewRequest {
        hold_id: held.hold_id,
        scope: &Scope::Anonymous,
        now,
        lifetime: Duration::minutes(5),
        max_life,
    };
    // Moves the expiry from at(300) to at(360): one event.
    let moved = store
        .renew_hold(renew(at(60), Duration::minutes(6)))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(moved, Transition::Applied(ref h) if h.expires_at == at(360)));
    assert_eq!(count(store.clone()).await, start + 1);
    // Already at its maximum life: applied, unchanged, no event.
    let capped = store
        .renew_hold(renew(at(120), Duration::minutes(6)))
        .await
        .unwrap()
        .outcome;
    assert_eq!(capped, Transition::Applied(held_until(&held, at(360))));
    assert_eq!(count(store.clone()).await, start + 1);
    // An expired hold: not applied, no event.
    let expired = store
        .renew_hold(renew(at(400), Duration::minutes(60)))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(expired, Transition::NotApplied(_)));

    for _ in 0..2 {
        let closed = store
            .set_closed(slot_id, true, at(1))
            .await
            .unwrap()
            .outcome;
        assert!(matches!(closed, SlotChange::Applied(ref s) if s.closed));
        let same = store
            .change_capacity(slot_id, 2.into(), at(1))
            .await
            .unwrap()
            .outcome;
        assert!(matches!(same, SlotChange::Applied(ref s) if s.capacity == 2));
    }
    assert!(matches!(
        hold(&store, slot_id, "a", at(1)).await,
        HoldOutcome::Replayed(_)
    ));
    let events = all_events(&store).await;
    assert_eq!(
        kinds(&events[start..]),
        [EventKind::HoldRenewed, EventKind::SlotClosed]
    );
    assert_eq!(events[start + 1].at, at(1));
    // A removed slot is not found, changing nothing.
    store.set_closed(slot_id, false, at(2)).await.unwrap();
    let gone = store
        .set_closed(SlotId(999), true, at(2))
        .await
        .unwrap()
        .outcome;
    assert_eq!(gone, SlotChange::NotFound);
    assert_eq!(all_events(&store).await.len(), start + 3);
}

/// `held` as stored once its expiry moved to `expires_at`.
fn held_until(held: &Hold, expires_at: Timestamp) -> Hold {
    Hold {
        expires_at,
        status: HoldStatus::Held,
        ..held.clone()
    }
}

/// A position from another kind of store (a non-zero epoch) is refused, not stored.
#[tokio::test]
async fn a_foreign_position_is_refused() {
    let db = TempDb::new("events_foreign");
    let store = db.store().await;
    let reader = consumer("reader");
    assert!(store
        .acknowledge(&reader, EventPosition::new(7, 1))
        .await
        .is_err());
    assert_eq!(store.consumer_position(&reader).await.unwrap(), None);
    store
        .acknowledge(&reader, EventPosition::START)
        .await
        .unwrap();
    assert_eq!(
        store.consumer_position(&reader).await.unwrap(),
        Some(EventPosition::START)
    );
}
