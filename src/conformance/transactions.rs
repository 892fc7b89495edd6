//! Conformance cases for writes inside a caller's transaction, for any
//! [`TransactionalStore`]: they commit together, roll back without a trace, leave the
//! transaction usable after a refusal, and never oversell under concurrency.
//! [`transaction_conformance_tests!`](crate::transaction_conformance_tests) runs them.

use std::sync::Arc;

use chrono::Duration;

use super::support::hours;
use super::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{HoldId, HoldStatus, NewSlot, SlotId};
use crate::scope::Scope;
use crate::transaction::TransactionalStore;
use crate::{AvailabilityQuery, PageRequest};

/// Holds, replays, confirms, cancels, renewals, slot creation and slot changes made in one
/// transaction are invisible outside it until it commits, and then all there.
pub async fn transactional_writes_commit_together<S: crate::Store + TransactionalStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let mut w = f.engine.transaction().await.expect("begin");
    let start = f.now() + hours(2);
    let second = w
        .create_slot(NewSlot::new(start, start + hours(1), 2))
        .await
        .unwrap()
        .slot_id;
    let a = w.hold(slot, "a").await.unwrap().hold;
    assert!(w.hold(slot, "a").await.unwrap().replayed, "a replay inside");
    assert_eq!(
        w.confirm(&Scope::Anonymous, a.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Confirmed
    );
    let b = w
        .place_hold(NewHold::new(second, "b").quantity(2))
        .await
        .unwrap()
        .hold;
    assert_eq!(
        w.cancel(&Scope::Anonymous, b.hold_id).await.unwrap().status,
        HoldStatus::Cancelled
    );
    let c = w.hold(second, "c").await.unwrap().hold;
    let renewed = w
        .renew(&Scope::Anonymous, c.hold_id, Some(super::MAX_REQUESTED_TTL))
        .await
        .unwrap();
    assert!(renewed.expires_at > c.expires_at);
    let resized = w.change_capacity(slot, 5).await.unwrap();
    assert_eq!((resized.capacity, resized.stored_remaining), (5, 4));
    assert!(w.close_sales(second).await.unwrap().closed);
    let seen = w.get_hold(&Scope::BackOffice, c.hold_id).await.unwrap();
    assert_eq!(seen, renewed, "the transaction sees its own writes");
    // Outside the transaction nothing has happened yet.
    assert_eq!(f.stored_hold(a.hold_id).await, None);
    assert_eq!(f.stored_slot(slot).await.capacity, 3);
    w.commit().await.expect("commit");
    assert_eq!(
        f.stored_status(a.hold_id).await,
        Some(HoldStatus::Confirmed)
    );
    assert_eq!(
        f.stored_status(b.hold_id).await,
        Some(HoldStatus::Cancelled)
    );
    assert_eq!(f.stored_hold(c.hold_id).await, Some(renewed.clone()));
    let stored = f.stored_slot(slot).await;
    assert_eq!((stored.capacity, stored.stored_remaining), (5, 4));
    let stored_second = f.stored_slot(second).await;
    assert!(stored_second.closed);
    assert_eq!(stored_second.stored_remaining, 1);
    f.assert_invariant(slot, &[a.hold_id]).await;
    f.assert_invariant(second, &[b.hold_id, c.hold_id]).await;
}

/// Everything a rolled-back transaction wrote is gone: holds, cancels, capacity changes,
/// closes, new slots, removals; its keys are free again.
pub async fn a_rolled_back_transaction_leaves_nothing<S: crate::Store + TransactionalStore>(
    store: S,
) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let spare = f.slot(1, hours(1)).await;
    let booked = f.engine.hold(slot, "booked").await.unwrap().hold;
    f.engine
        .confirm(&Scope::Anonymous, booked.hold_id)
        .await
        .unwrap();
    let before = (
        f.stored_slot(slot).await,
        f.stored_slot(spare).await,
        f.stored_hold(booked.hold_id).await,
    );
    let mut w = f.engine.transaction().await.expect("begin");
    let placed = w
        .place_hold(NewHold::new(slot, "rolled-back").quantity(2))
        .await
        .unwrap()
        .hold;
    w.cancel(&Scope::Anonymous, booked.hold_id).await.unwrap();
    w.change_capacity(slot, 10).await.unwrap();
    w.close_sales(slot).await.unwrap();
    let start = f.now() + hours(3);
    w.create_slot(NewSlot::new(start, start + hours(1), 4))
        .await
        .unwrap();
    w.remove_slot(spare).await.unwrap();
    w.rollback().await.expect("rollback");
    let after = (
        f.stored_slot(slot).await,
        f.stored_slot(spare).await,
        f.stored_hold(booked.hold_id).await,
    );
    assert_eq!(after, before);
    assert_eq!(f.stored_hold(placed.hold_id).await, None);
    let listed = f
        .engine
        .list_slots(&AvailabilityQuery::all(), PageRequest::first(10))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2, "the slot made inside is gone");
    let again = f
        .engine
        .place_hold(NewHold::new(slot, "rolled-back").quantity(2))
        .await
        .unwrap();
    assert!(!again.replayed, "the key is free: a new hold");
    f.assert_invariant(slot, &[booked.hold_id, again.hold.hold_id])
        .await;
}

/// Refusals inside a transaction (a key of another request, sold out, no such slot, an
/// expired hold, a slot in use) change nothing and leave the transaction usable: a later
/// write in it succeeds and commits.
pub async fn a_refusal_inside_a_transaction_leaves_it_usable<
    S: crate::Store + TransactionalStore,
>(
    store: S,
) {
    let f = Fixture::new(store);
    let full = f.slot(1, hours(1)).await;
    let other = f.slot(1, hours(1)).await;
    let taken = f.engine.hold(full, "taken").await.unwrap().hold;
    let short = f.minute_hold(other, "short").await;
    f.advance(Duration::seconds(61));
    let mut w = f.engine.transaction().await.expect("begin");
    assert!(matches!(
        w.hold(other, "taken").await,
        Err(BookingError::IdempotencyKeyReused { .. })
    ));
    assert!(matches!(
        w.hold(full, "x").await,
        Err(BookingError::SoldOut { .. })
    ));
    assert!(matches!(
        w.hold(SlotId(full.0 + 1000), "y").await,
        Err(BookingError::SlotNotFound { .. })
    ));
    assert!(matches!(
        w.confirm(&Scope::Anonymous, short.hold_id).await,
        Err(BookingError::HoldExpired { .. })
    ));
    assert!(matches!(
        w.remove_slot(full).await,
        Err(BookingError::SlotInUse { held: 1, .. })
    ));
    assert!(matches!(
        w.change_capacity(full, 0).await,
        Err(BookingError::InvalidSlot(_))
    ));
    let fine = w.hold(other, "fine").await.unwrap().hold;
    w.commit().await.expect("commit after refusals");
    assert_eq!(f.stored_status(fine.hold_id).await, Some(HoldStatus::Held));
    assert_eq!(
        f.stored_status(short.hold_id).await,
        Some(HoldStatus::Expired),
        "reclaimed to make room for the later hold"
    );
    f.assert_invariant(full, &[taken.hold_id]).await;
    f.assert_invariant(other, &[short.hold_id, fine.hold_id])
        .await;
}

/// Forty transactions race for one slot of five units, each placing and confirming a hold;
/// every third rolls back. Never more than five units are sold, a rolled-back hold leaves
/// nothing, and the invariant holds.
pub async fn race_transactions_never_oversell<S: crate::Store + TransactionalStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(5, hours(1)).await;
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let f = Arc::clone(&f);
            tokio::spawn(async move {
                let mut w = f.engine.transaction().await.expect("begin");
                let placed = match w.hold(slot, &format!("tx-{i}")).await {
                    Ok(placed) => placed.hold,
                    Err(BookingError::SoldOut { .. }) => {
                        w.rollback().await.expect("rollback");
                        return None;
                    }
                    Err(other) => panic!("unexpected {other:?}"),
                };
                w.confirm(&Scope::Anonymous, placed.hold_id)
                    .await
                    .expect("confirm inside");
                if i % 3 == 0 {
                    w.rollback().await.expect("rollback");
                    Some((placed.hold_id, false))
                } else {
                    w.commit().await.expect("commit");
                    Some((placed.hold_id, true))
                }
            })
        })
        .collect();
    let mut committed = Vec::new();
    for task in tasks {
        if let Some((id, true)) = task.await.expect("task") {
            committed.push(id);
        }
    }
    // The slot's holds are exactly the committed ones: a rolled-back hold left nothing. (Its
    // id may have been given again to a later hold: SQLite reuses a rolled-back row id.)
    let roster = f
        .engine
        .slot_holds(slot, crate::PageRequest::first(100))
        .await
        .expect("roster");
    let mut stored: Vec<HoldId> = roster.items.iter().map(|h| h.hold_id).collect();
    stored.sort();
    committed.sort();
    assert_eq!(stored, committed, "only committed holds are stored");
    assert!(
        (1..=5).contains(&committed.len()),
        "{} committed",
        committed.len()
    );
    for &id in &committed {
        assert_eq!(f.stored_status(id).await, Some(HoldStatus::Confirmed));
    }
    f.assert_invariant(slot, &committed).await;
}

/// Bookings of several lines inside the caller's transaction: placed, read, confirmed and
/// refused there (a refusal leaves the transaction usable), invisible outside until it
/// commits; rolled back, nothing of them stays.
pub async fn bookings_commit_with_the_callers_transaction<S>(store: S)
where
    S: crate::Store + crate::BookingStore + TransactionalStore,
    for<'t> S::Writes<'t>: crate::TransactionBookings,
{
    let f = Fixture::new(store);
    let (a, b) = (f.slot(3, hours(1)).await, f.slot(3, hours(1)).await);
    let any = Scope::Anonymous;
    let request = |key: &str, qa: i32, qb: i32| crate::NewBooking::new(key).line(a, qa).line(b, qb);
    for commit in [false, true] {
        let mut w = f.engine.transaction().await.expect("begin");
        let key = if commit { "kept" } else { "rolled-back" };
        let placed = w.book(request(key, 2, 1)).await.unwrap().booking;
        assert!(
            w.book(request(key, 2, 1)).await.unwrap().replayed,
            "a replay inside"
        );
        let id = placed.booking_id;
        assert_err!(
            w.book(request("too-many", 2, 1)).await,
            BookingError::LinesUnavailable { .. }
        );
        let confirmed = w.confirm_booking(&any, id).await.unwrap();
        assert!(confirmed
            .lines
            .iter()
            .all(|h| h.status == HoldStatus::Confirmed));
        let read = w.get_booking(&any, id).await.unwrap();
        assert_eq!(read, confirmed, "the transaction sees its own booking");
        let renewed = w.renew_booking(&any, id, None).await.unwrap();
        assert_eq!(renewed, confirmed, "a confirmed booking renews unchanged");
        if commit {
            w.commit().await.expect("commit");
        } else {
            w.rollback().await.expect("rollback");
        }
        let outside = f.engine.get_booking(&any, id).await;
        if commit {
            assert_eq!(outside.unwrap().lines.len(), 2);
            assert_eq!((f.remaining(a).await, f.remaining(b).await), (1, 2));
        } else {
            assert_err!(outside, BookingError::HoldNotFound { .. });
            assert_eq!((f.remaining(a).await, f.remaining(b).await), (3, 3));
        }
    }
    // A booking cancelled in the transaction that placed it gives every unit back at commit.
    let mut w = f.engine.transaction().await.expect("begin");
    let later = w.book(request("later", 1, 1)).await.unwrap().booking;
    let cancelled = w.cancel_booking(&any, later.booking_id).await.unwrap();
    assert!(cancelled
        .lines
        .iter()
        .all(|h| h.status == HoldStatus::Cancelled));
    w.commit().await.expect("commit");
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (1, 2));
}

/// Units of slots and pools read inside the caller's transaction: the transaction sees its
/// own holds in its pool's and slot's units, nothing shows outside until it commits, and a
/// rollback leaves the pool as it was.
pub async fn pools_read_in_the_callers_transaction<S>(store: S)
where
    S: crate::Store + crate::BookingStore + crate::PoolStore + TransactionalStore,
    for<'t> S::Writes<'t>: crate::TransactionPools,
{
    let f = Fixture::new(store);
    let (a, b) = (f.slot(4, hours(1)).await, f.slot(4, hours(2)).await);
    let pool = f.pool(5, &[a, b]).await;
    for commit in [false, true] {
        let mut w = f.engine.transaction().await.expect("begin");
        let key = if commit { "kept" } else { "rolled-back" };
        w.place_hold(crate::NewHold::new(a, key).quantity(3))
            .await
            .unwrap();
        let inside = w.get_pool(pool).await.unwrap();
        assert_eq!(
            (inside.remaining, inside.held),
            (2, 3),
            "the transaction sees its hold"
        );
        let slot = w.slot_usage(a).await.unwrap();
        assert_eq!((slot.capacity, slot.remaining, slot.held), (4, 1, 3));
        assert_err!(
            w.get_pool(crate::PoolId(i64::MAX)).await,
            BookingError::PoolNotFound { .. }
        );
        assert_err!(
            w.slot_usage(SlotId(i64::MAX)).await,
            BookingError::SlotNotFound { .. }
        );
        if commit {
            w.commit().await.expect("commit");
        } else {
            w.rollback().await.expect("rollback");
        }
        let outside = f.read_pool(pool).await;
        assert_eq!(outside.remaining, if commit { 2 } else { 5 });
    }
}

/// An engine whose listing is cached for an hour sees what its own transactions committed at
/// the first read after the commit, and nothing of what they rolled back: ten rounds each of a
/// booking placed, a hold cancelled and a slot's capacity changed in a transaction, every read
/// made at once after the commit (0 stale); a transaction rolled back or dropped uncommitted
/// leaves the listing as it was.
pub async fn an_engine_sees_its_own_commit_at_once<S>(store: S)
where
    S: crate::Store + crate::BookingStore + TransactionalStore,
    for<'t> S::Writes<'t>: crate::TransactionBookings,
{
    let clock = crate::ManualClock::new(super::epoch());
    let engine = crate::BookingEngine::builder(store)
        .cache_period(std::time::Duration::from_secs(3600))
        .clock(clock.clone())
        .build();
    let start = super::epoch() + hours(1);
    let mut slots = Vec::new();
    for n in 0..2 {
        let at = start + hours(n);
        let slot = engine
            .create_slot(NewSlot::new(at, at + hours(1), 40))
            .await
            .expect("create_slot");
        slots.push(slot.slot_id);
    }
    let (a, b) = (slots[0], slots[1]);
    let shown = |engine: &crate::BookingEngine<S>| {
        let engine = engine.clone();
        async move {
            let listing = engine
                .availability(AvailabilityQuery::all())
                .await
                .expect("availability");
            let units = |slot| listing.entry(slot).map(|entry| entry.remaining);
            (units(a), units(b))
        }
    };
    let mut expected = (Some(40), Some(40));
    assert_eq!(shown(&engine).await, expected, "the first load");
    let mut stale = Vec::new();
    for round in 0..10 {
        // A booking of two lines, committed: both slots show it.
        let mut tx = engine.transaction().await.expect("transaction");
        tx.book(
            crate::NewBooking::new(format!("stay-{round}"))
                .line(a, 2)
                .line(b, 1),
        )
        .await
        .expect("book");
        tx.commit().await.expect("commit");
        expected = (expected.0.map(|n| n - 2), expected.1.map(|n| n - 1));
        let seen = shown(&engine).await;
        if seen != expected {
            stale.push(format!(
                "round {round}, after a booking: {seen:?}, not {expected:?}"
            ));
        }
        // A hold cancelled in the transaction that placed it: nothing changes.
        let mut tx = engine.transaction().await.expect("transaction");
        let hold = tx
            .hold(a, &format!("brief-{round}"))
            .await
            .expect("hold")
            .hold;
        tx.cancel(&Scope::Anonymous, hold.hold_id)
            .await
            .expect("cancel");
        tx.commit().await.expect("commit");
        let seen = shown(&engine).await;
        if seen != expected {
            stale.push(format!(
                "round {round}, after a cancel: {seen:?}, not {expected:?}"
            ));
        }
        // Rolled back and dropped: nothing shows.
        let mut tx = engine.transaction().await.expect("transaction");
        tx.hold(a, &format!("rolled-{round}")).await.expect("hold");
        tx.rollback().await.expect("rollback");
        let mut tx = engine.transaction().await.expect("transaction");
        tx.hold(b, &format!("dropped-{round}")).await.expect("hold");
        drop(tx);
        let seen = shown(&engine).await;
        if seen != expected {
            stale.push(format!(
                "round {round}, after a rollback: {seen:?}, not {expected:?}"
            ));
        }
        // A capacity raised in a transaction.
        let mut tx = engine.transaction().await.expect("transaction");
        tx.change_capacity(b, crate::CapacityChange::By(1))
            .await
            .expect("change_capacity");
        tx.commit().await.expect("commit");
        expected.1 = expected.1.map(|n| n + 1);
        let seen = shown(&engine).await;
        if seen != expected {
            stale.push(format!(
                "round {round}, after a capacity change: {seen:?}, not {expected:?}"
            ));
        }
    }
    assert!(stale.is_empty(), "stale reads after a commit: {stale:#?}");
}
