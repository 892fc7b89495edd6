//! Bookings of several lines in the SQLite store beyond the conformance suite: how lines are
//! stored, their events, whole-booking changes in the caller's transaction, and purging.

mod common;

use common::*;
use slot_booking::{
    Booking, BookingLine, BookingOutcome, BookingRequest, BookingStore, ConsumerId, EventKind,
    EventStore, HoldId, HoldOutcome, HoldStatus, HoldStore, IdempotencyKey, Scope, SlotId,
    TransactionWrites, Transition,
};
use slot_booking_sqlite::SqliteStore;
use sqlx::SqlitePool;

const ANYONE: Scope = Scope::Anonymous;

/// A request for `lines` under `key`, anonymous, placed at `at(1)` until `at(301)`.
fn request<'a>(key: &'a IdempotencyKey, lines: &'a [BookingLine]) -> BookingRequest<'a> {
    BookingRequest {
        key,
        owner: None,
        lines,
        now: at(1),
        expires_at: at(301),
    }
}

async fn book(store: &SqliteStore, key: &IdempotencyKey, lines: &[BookingLine]) -> Booking {
    match store
        .create_booking(request(key, lines))
        .await
        .unwrap()
        .outcome
    {
        BookingOutcome::Created(booking) => booking,
        other => panic!("expected a booking, got {other:?}"),
    }
}

/// Every event in the log: (kind, hold id).
async fn events(store: &SqliteStore) -> Vec<(EventKind, Option<HoldId>)> {
    let probe = ConsumerId::new("probe").unwrap();
    let events = store.read_events(&probe, 1000).await.unwrap();
    events.iter().map(|e| (e.kind, e.hold_id)).collect()
}

/// Each hold row: (id, key, booking_id, status).
async fn hold_rows(pool: &SqlitePool) -> Vec<(i64, String, Option<i64>, String)> {
    sqlx::query_as(
        "SELECT id, idempotency_key, booking_id, status FROM slot_booking_holds ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A booking is one hold row per line, by slot id; the first carries the client's key and
/// every line the booking's id. Each line's insert appends its own `hold_placed`; a refused
/// booking leaves no row and no event, its reclaim and its other lines' units undone.
#[tokio::test]
async fn lines_are_hold_rows_with_their_own_events() {
    let db = TempDb::new("bookings_rows");
    let store = db.store().await;
    let (a, b, c) = (
        slot(&store, 2).await,
        slot(&store, 2).await,
        slot(&store, 1).await,
    );
    let cart = key("cart");
    let lines = [BookingLine::new(a, 2), BookingLine::new(b, 1)];
    let booking = book(&store, &cart, &lines).await;
    let id = booking.booking_id.get();
    assert_eq!(
        hold_rows(store.pool()).await,
        vec![
            (id, "cart".to_owned(), Some(id), "held".to_owned()),
            (
                id + 1,
                format!(" line {id}/{}", b.get()),
                Some(id),
                "held".to_owned()
            ),
        ]
    );
    let placed = [
        (EventKind::HoldPlaced, Some(HoldId(id))),
        (EventKind::HoldPlaced, Some(HoldId(id + 1))),
    ];
    let created = events(&store).await;
    assert_eq!(created[created.len() - 2..], placed[..]);

    // Slot `c` holds one unit that has expired by `at(100)`: the next booking reclaims it for
    // its line on `c`, but its line on `a` is short, so everything is undone.
    let short = key("short");
    let brief = HoldStore::create_hold(
        &store,
        slot_booking::HoldRequest {
            expires_at: at(2),
            ..hold_request(c, &short, 1, at(1))
        },
    )
    .await
    .unwrap()
    .outcome;
    assert!(matches!(brief, HoldOutcome::Created(_)));
    let rows_before = hold_rows(store.pool()).await;
    let events_before = events(&store).await;
    let refused = key("refused");
    let lines = [
        BookingLine::new(a, 1),
        BookingLine::new(b, 1),
        BookingLine::new(c, 1),
    ];
    let later = BookingRequest {
        now: at(100),
        expires_at: at(400),
        ..request(&refused, &lines)
    };
    let outcome = store.create_booking(later).await.unwrap().outcome;
    assert!(
        matches!(outcome, BookingOutcome::Refused(ref short) if short.len() == 1 && short[0].slot_id == a)
    );
    assert_eq!(hold_rows(store.pool()).await, rows_before);
    assert_eq!(events(&store).await, events_before);
    assert_counts(store.pool(), a, (2, 0, 2, 0)).await;
    assert_counts(store.pool(), b, (2, 1, 1, 0)).await;
    assert_counts(store.pool(), c, (1, 0, 1, 0)).await;
}

/// A hold whose key is a booking's first line's is refused without revealing a stranger's
/// booking; the key of any other line is no client's key (it has a space), so no request can
/// ever name one.
#[tokio::test]
async fn a_bookings_key_is_taken_for_holds() {
    let db = TempDb::new("bookings_key");
    let store = db.store().await;
    let (a, b) = (slot(&store, 2).await, slot(&store, 2).await);
    let cart = key("cart");
    let booking = book(
        &store,
        &cart,
        &[BookingLine::new(a, 1), BookingLine::new(b, 1)],
    )
    .await;
    let hold = hold_request(a, &cart, 1, at(2));
    match HoldStore::create_hold(&store, hold).await.unwrap().outcome {
        HoldOutcome::KeyReused(Some(lead)) => assert_eq!(lead, booking.lines[0]),
        other => panic!("expected key_reused, got {other:?}"),
    }
    assert!(
        IdempotencyKey::new(format!(" line {}/{}", booking.booking_id.get(), b.get())).is_err()
    );
    assert_counts(store.pool(), a, (2, 1, 1, 0)).await;
}

/// On the caller's connection, a change of any line changes the whole booking, with one event
/// per line, and rolls back with the caller's transaction.
#[tokio::test]
async fn a_line_changes_its_whole_booking_in_the_callers_transaction() {
    let db = TempDb::new("bookings_tx");
    let store = db.store().await;
    let (a, b) = (slot(&store, 3).await, slot(&store, 3).await);
    let booking = book(
        &store,
        &key("cart"),
        &[BookingLine::new(a, 1), BookingLine::new(b, 2)],
    )
    .await;
    let second = booking.lines[1].hold_id;
    let events_before = events(&store).await;

    // Cancelled in a transaction that is rolled back: nothing changed.
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    let cancelled = store
        .on(&mut tx)
        .cancel_hold(second, &ANYONE, at(2))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(cancelled, Transition::Applied(ref h) if h.status == HoldStatus::Cancelled));
    tx.rollback().await.unwrap();
    let read = store
        .get_booking(booking.booking_id, &ANYONE, at(2))
        .await
        .unwrap()
        .outcome;
    assert_eq!(read, Some(booking.clone()));
    assert_eq!(events(&store).await, events_before);

    // Confirmed by its second line, committed: every line, one event each.
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    let confirmed = store
        .on(&mut tx)
        .confirm_hold(second, &ANYONE, at(2))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(confirmed, Transition::Applied(ref h) if h.hold_id == second));
    tx.commit().await.unwrap();
    let read = store
        .get_booking(booking.booking_id, &ANYONE, at(2))
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert!(read.lines.iter().all(|h| h.status == HoldStatus::Confirmed));
    let after = events(&store).await;
    assert_eq!(
        after[events_before.len()..],
        [
            (EventKind::HoldConfirmed, Some(booking.booking_id)),
            (EventKind::HoldConfirmed, Some(second)),
        ]
    );

    // Cancelled by its first line on the caller's connection: every unit back.
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    let cancelled = store
        .on(&mut tx)
        .cancel_hold(booking.booking_id, &ANYONE, at(3))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(cancelled, Transition::Applied(_)));
    tx.commit().await.unwrap();
    assert_counts(store.pool(), a, (3, 3, 0, 0)).await;
    assert_counts(store.pool(), b, (3, 3, 0, 0)).await;
    // The id of a line that is not the first names no booking.
    assert_eq!(
        store
            .cancel_booking(second, &ANYONE, at(3))
            .await
            .unwrap()
            .outcome,
        Transition::NotFound
    );
}

/// Purge deletes a booking's ended lines, the lines without a client's key included, and the
/// booking's key is free again.
#[tokio::test]
async fn purge_deletes_every_ended_line() {
    let db = TempDb::new("bookings_purge");
    let store = db.store().await;
    let (a, b, c) = (
        slot(&store, 3).await,
        slot(&store, 3).await,
        slot(&store, 3).await,
    );
    let cart = key("cart");
    let lines = [
        BookingLine::new(a, 1),
        BookingLine::new(b, 1),
        BookingLine::new(c, 1),
    ];
    let booking = book(&store, &cart, &lines).await;
    let cancelled = store
        .cancel_booking(booking.booking_id, &ANYONE, at(2))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(cancelled, Transition::Applied(ref b) if b.lines.len() == 3));
    let purged = store.purge(at(3), 100).await.unwrap();
    assert_eq!(purged.holds, 3);
    assert!(hold_rows(store.pool()).await.is_empty());
    assert_eq!(
        store
            .get_booking(booking.booking_id, &ANYONE, at(3))
            .await
            .unwrap()
            .outcome,
        None
    );
    let again = book(&store, &cart, &lines).await;
    assert_eq!(again.lines.len(), 3);
}

fn hold_request<'a>(
    slot_id: SlotId,
    key: &'a IdempotencyKey,
    quantity: i32,
    now: slot_booking::Timestamp,
) -> slot_booking::HoldRequest<'a> {
    slot_booking::HoldRequest {
        slot_id,
        key,
        owner: None,
        quantity,
        now,
        expires_at: now + chrono::Duration::minutes(5),
    }
}

/// A renewal of a booking already at its maximum life moves nothing: applied, unchanged, with
/// no event; one that moves it moves every line, one event each.
#[tokio::test]
async fn a_booking_at_its_maximum_life_renews_unchanged() {
    let db = TempDb::new("bookings_renew");
    let store = db.store().await;
    let (a, b) = (slot(&store, 3).await, slot(&store, 3).await);
    let booking = book(
        &store,
        &key("cart"),
        &[BookingLine::new(a, 1), BookingLine::new(b, 1)],
    )
    .await;
    let events_before = events(&store).await;
    let renewal = |max_life| slot_booking::RenewRequest {
        hold_id: booking.booking_id,
        scope: &ANYONE,
        now: at(100),
        lifetime: chrono::Duration::seconds(600),
        max_life,
    };
    let unmoved = store
        .renew_booking(renewal(chrono::Duration::seconds(300)))
        .await
        .unwrap()
        .outcome;
    assert_eq!(unmoved, Transition::Applied(booking.clone()));
    assert_eq!(events(&store).await, events_before);

    let moved = store
        .renew_booking(renewal(chrono::Duration::seconds(1000)))
        .await
        .unwrap()
        .outcome;
    let Transition::Applied(moved) = moved else {
        panic!("expected a renewal, got {moved:?}");
    };
    assert!(moved.lines.iter().all(|h| h.expires_at == at(700)));
    let after = events(&store).await;
    assert_eq!(
        after[events_before.len()..],
        [
            (EventKind::HoldRenewed, Some(booking.booking_id)),
            (EventKind::HoldRenewed, Some(booking.lines[1].hold_id)),
        ]
    );
    // A renewal by the second line's id, at its maximum life: the line, unchanged.
    let second = booking.lines[1].hold_id;
    let by_line = store
        .renew_hold(slot_booking::RenewRequest {
            hold_id: second,
            max_life: chrono::Duration::seconds(699),
            ..renewal(chrono::Duration::seconds(699))
        })
        .await
        .unwrap()
        .outcome;
    assert!(
        matches!(by_line, Transition::Applied(ref h) if h.hold_id == second && h.expires_at == at(700))
    );
}
