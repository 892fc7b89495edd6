//! Waitlist cases: requests wait in line when units are short and are offered them in the
//! step that frees them, by priority then arrival, in strict order; nobody jumps the line;
//! offers expire to the next; joins replay, leave, and refuse as holds do; races never give a
//! unit to a newcomer while the line waits.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;

use crate::conformance::support::{consumer, hours, owner};
use crate::conformance::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::events::EventKind;
use crate::model::{EntryId, HoldId, HoldStatus, NewPool, SlotId, WaitlistEntry};
use crate::scope::Scope;
use crate::store::{EventStore, PoolStore, SlotAdmin, WaitlistStore};
use crate::waitlists::Joined;

/// What every waitlist case needs of a store.
pub(super) trait Waitlists: WaitlistStore + SlotAdmin + EventStore + PoolStore {}
impl<S: WaitlistStore + SlotAdmin + EventStore + PoolStore> Waitlists for S {}

/// Joins `slot`'s line with `key` for `quantity` units at `priority`; the entry, which must
/// wait.
pub(super) async fn wait<S: Waitlists>(
    f: &Fixture<S>,
    slot: SlotId,
    key: &str,
    quantity: i32,
    priority: i32,
) -> (WaitlistEntry, u32) {
    let request = NewHold::new(slot, key).quantity(quantity);
    match f.engine.join_waitlist(request, priority).await {
        Ok(Joined::Waiting {
            entry,
            position,
            replayed: false,
        }) => (entry, position),
        other => panic!("{key} should wait in line, got {other:?}"),
    }
}

/// The entry's place in line now (anonymous entries).
pub(super) async fn position<S: Waitlists>(f: &Fixture<S>, entry: EntryId) -> Option<u32> {
    match f.engine.waitlist_entry(&Scope::Anonymous, entry).await {
        Ok((_, position)) => Some(position),
        Err(BookingError::EntryNotFound { .. }) => None,
        Err(other) => panic!("waitlist_entry: {other:?}"),
    }
}

/// The offer made to `entry`, as stored, if any.
pub(super) async fn offer<S: Waitlists>(
    f: &Fixture<S>,
    entry: &WaitlistEntry,
) -> Option<crate::Hold> {
    f.stored_hold(entry.offer_id()).await
}

/// Units freed by a cancel go to the head of the line in the same step, in strict order: the
/// head is served whole, the next waits until its whole quantity is free even when one
/// behind it would fit; meanwhile newcomers are refused and availability shows no unit.
pub(super) async fn waitlist_serves_freed_units_in_strict_order<S: Waitlists>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let full = f
        .engine
        .place_hold(NewHold::new(slot, "full").quantity(3))
        .await
        .unwrap()
        .hold;
    let (one, p1) = wait(&f, slot, "one", 1, 0).await;
    let (two, p2) = wait(&f, slot, "two", 3, 0).await;
    let (three, p3) = wait(&f, slot, "three", 1, 0).await;
    assert_eq!((p1, p2, p3), (1, 2, 3));
    f.engine
        .cancel(&Scope::Anonymous, full.hold_id)
        .await
        .unwrap();
    // 3 free: `one` takes 1; `two` wants 3 and waits; `three` waits behind it.
    let offered = offer(&f, &one)
        .await
        .expect("the head was offered its unit");
    assert_eq!(
        (offered.slot_id, offered.quantity, offered.status),
        (slot, 1, HoldStatus::Held)
    );
    assert_eq!(offered.expires_at, f.now() + Duration::minutes(5));
    assert_eq!(offer(&f, &three).await, None, "nobody passes the head");
    assert_eq!(
        (
            position(&f, one.entry_id).await,
            position(&f, two.entry_id).await,
            position(&f, three.entry_id).await
        ),
        (None, Some(1), Some(2))
    );
    assert_eq!(f.remaining(slot).await, 2);
    assert_eq!(
        f.available(slot).await,
        Some(0),
        "the line's demand is taken"
    );
    // The log says so, in the order of the step: the cancel, then the offer's placing and
    // why it was placed.
    let reader = consumer("offers");
    let mut events = Vec::new();
    loop {
        let batch = f.engine.read_events(&reader, 100).await.unwrap();
        let Some(last) = batch.last() else {
            break;
        };
        f.engine
            .acknowledge_events(&reader, last.position)
            .await
            .unwrap();
        events.extend(batch);
    }
    let tail: Vec<(EventKind, Option<HoldId>, i32)> = events
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(|e| (e.kind, e.hold_id, e.quantity))
        .collect();
    assert_eq!(
        tail,
        vec![
            (EventKind::HoldCancelled, Some(full.hold_id), 3),
            (EventKind::HoldPlaced, Some(offered.hold_id), 1),
            (EventKind::WaitlistOffered, Some(offered.hold_id), 1),
        ]
    );
    let newcomer = f.engine.hold(slot, "newcomer").await.unwrap_err();
    assert_eq!(newcomer.code(), "sold_out");
    // The offer confirms like any hold; cancelling it serves `two` (3 free now) and then
    // `three` has nothing left.
    f.engine
        .confirm(&Scope::Anonymous, offered.hold_id)
        .await
        .unwrap();
    f.engine
        .cancel(&Scope::Anonymous, offered.hold_id)
        .await
        .unwrap();
    let second = offer(&f, &two).await.expect("the new head");
    assert_eq!(second.quantity, 3);
    assert_eq!(position(&f, three.entry_id).await, Some(1));
    assert_eq!(f.remaining(slot).await, 0);
    f.assert_invariant(slot, &[full.hold_id, offered.hold_id, second.hold_id])
        .await;
}

/// An offer not confirmed within its offer window expires, and the reclaim that gives its
/// units back offers them to the next in line in the same step.
pub(super) async fn waitlist_offers_expire_to_the_next<S: Waitlists>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(1, hours(2)).await;
    let full = f.engine.hold(slot, "full").await.unwrap().hold;
    let request = |key| NewHold::new(slot, key).lifetime(StdDuration::from_secs(60));
    let Ok(Joined::Waiting { entry: first, .. }) = f.engine.join_waitlist(request("a"), 0).await
    else {
        panic!("a waits")
    };
    let Ok(Joined::Waiting { entry: second, .. }) = f.engine.join_waitlist(request("b"), 0).await
    else {
        panic!("b waits")
    };
    f.engine
        .cancel(&Scope::Anonymous, full.hold_id)
        .await
        .unwrap();
    let offered = offer(&f, &first).await.expect("offered");
    assert_eq!(offered.expires_at, f.now() + Duration::seconds(60));
    f.advance(Duration::seconds(61));
    let reclaimed = f.engine.reclaim_expired(100).await.unwrap();
    assert_eq!(
        reclaimed.iter().map(|h| h.hold_id).collect::<Vec<_>>(),
        vec![offered.hold_id]
    );
    let next = offer(&f, &second)
        .await
        .expect("the next was offered in the reclaim");
    assert_eq!(next.status, HoldStatus::Held);
    assert_eq!(
        f.stored_hold(offered.hold_id).await.map(|h| h.status),
        Some(HoldStatus::Expired)
    );
    f.assert_invariant(slot, &[full.hold_id, offered.hold_id, next.hold_id])
        .await;
}

/// Higher priority first, then arrival; an entry can be left (only in its owner's scope),
/// which moves those behind it up and serves the line.
pub(super) async fn waitlist_orders_by_priority_and_can_be_left<S: Waitlists>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let full = f
        .engine
        .place_hold(NewHold::new(slot, "full").quantity(2))
        .await
        .unwrap()
        .hold;
    let (low, _) = wait(&f, slot, "low", 1, 0).await;
    let vip = NewHold::new(slot, "vip").quantity(2).owner(owner("alice"));
    let Ok(Joined::Waiting {
        entry: vip,
        position: vip_at,
        ..
    }) = f.engine.join_waitlist(vip, 5).await
    else {
        panic!("vip waits")
    };
    assert_eq!(vip_at, 1, "higher priority goes first");
    let (late, late_at) = wait(&f, slot, "late", 1, 0).await;
    assert_eq!(late_at, 3);
    assert_eq!(position(&f, low.entry_id).await, Some(2));
    // Another scope cannot see or leave alice's entry.
    assert_eq!(
        f.engine
            .leave_waitlist(&Scope::Anonymous, vip.entry_id)
            .await
            .unwrap_err()
            .code(),
        "entry_not_found"
    );
    let alice = Scope::Owner(owner("alice"));
    assert_eq!(
        f.engine
            .waitlist_entry(&alice, vip.entry_id)
            .await
            .unwrap()
            .1,
        1
    );
    // One unit frees: the head (alice, 2) waits; nobody passes her.
    f.engine.change_capacity(slot, 3).await.unwrap();
    assert_eq!(offer(&f, &low).await, None);
    // Alice leaves: the line is served in that step, `low` then `late`? Only 1 free: `low`.
    let left = f.engine.leave_waitlist(&alice, vip.entry_id).await.unwrap();
    assert_eq!(left.entry_id, vip.entry_id);
    assert!(offer(&f, &low).await.is_some(), "served when the head left");
    assert_eq!(position(&f, late.entry_id).await, Some(1));
    assert_eq!(
        f.engine
            .leave_waitlist(&alice, vip.entry_id)
            .await
            .unwrap_err()
            .code(),
        "entry_not_found"
    );
    // Its key is free again: the same key makes a new entry.
    let (again, _) = wait(&f, slot, "vip", 1, 0).await;
    assert_ne!(again.entry_id, vip.entry_id);
    let _ = full;
}

/// A join that finds nobody waiting and its units free is held at once; the same key again
/// replays the hold or the entry; the key is taken for holds too; a join is refused as a
/// hold would be, and for more than a pool of the slot holds.
pub(super) async fn waitlist_joins_replay_and_refuse_like_holds<S: Waitlists>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(1, hours(1)).await;
    let request = || NewHold::new(slot, "first").owner(owner("bob"));
    let joined = f.engine.join_waitlist(request(), 0).await;
    let Ok(Joined::Held {
        hold,
        replayed: false,
    }) = joined
    else {
        panic!("held at once: {joined:?}")
    };
    let Ok(Joined::Held {
        hold: again,
        replayed: true,
    }) = f.engine.join_waitlist(request(), 0).await
    else {
        panic!("the same hold")
    };
    assert_eq!(again.hold_id, hold.hold_id);
    let (entry, _) = wait(&f, slot, "second", 1, 0).await;
    let Ok(Joined::Waiting {
        entry: same,
        position: 1,
        replayed: true,
    }) = f
        .engine
        .join_waitlist(NewHold::new(slot, "second"), 0)
        .await
    else {
        panic!("the same entry")
    };
    assert_eq!(same, entry);
    for (request, priority) in [
        (NewHold::new(slot, "second").quantity(1), 3),
        (NewHold::new(slot, "first"), 0),
    ] {
        assert_eq!(
            f.engine
                .join_waitlist(request, priority)
                .await
                .unwrap_err()
                .code(),
            "idempotency_key_reused"
        );
    }
    assert_eq!(
        f.engine.hold(slot, "second").await.unwrap_err().code(),
        "idempotency_key_reused",
        "a waiting entry's key is taken"
    );
    let refused = |slot, quantity| {
        f.engine
            .join_waitlist(NewHold::new(slot, "x").quantity(quantity), 0)
    };
    assert_eq!(
        refused(slot, 2).await.unwrap_err().code(),
        "quantity_exceeds_capacity"
    );
    assert_eq!(
        refused(SlotId(987_654_321), 1).await.unwrap_err().code(),
        "slot_not_found"
    );
    let closed = f.slot(1, hours(1)).await;
    f.engine.close_sales(closed).await.unwrap();
    assert_eq!(refused(closed, 1).await.unwrap_err().code(), "slot_closed");
    // A slot in a pool of 1 refuses a join for 2, more than the pool could ever give.
    let pooled = f.slot(5, hours(1)).await;
    let pool = f.engine.create_pool(NewPool::new(1)).await.unwrap();
    f.engine.attach_slot(pool.pool_id, pooled).await.unwrap();
    assert_eq!(
        refused(pooled, 2).await.unwrap_err().code(),
        "quantity_exceeds_capacity"
    );
    assert_eq!(f.remaining(slot).await, 0);
}

/// Holds are cancelled while newcomers race for the units and the line waits, its head for
/// 3 units while only 1 is free: units sit free until the head fits, and still no newcomer
/// gets one; every freed unit goes to the line in order; no entry is offered twice.
pub(super) async fn race_waitlists_never_give_a_unit_to_a_newcomer<S: Waitlists>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let slot = f.slot(6, hours(1)).await;
    let mut held = Vec::new();
    for i in 0..5 {
        held.push(
            f.engine
                .hold(slot, &format!("held-{i}"))
                .await
                .unwrap()
                .hold,
        );
    }
    let mut line = vec![wait(&f, slot, "head", 3, 0).await.0];
    for i in 0..7 {
        line.push(wait(&f, slot, &format!("line-{i}"), 1, 0).await.0);
    }
    // Newcomers keep trying, each attempt a new key, from before the first cancel to after
    // the last.
    let mut newcomers = Vec::new();
    for n in 0..8 {
        let f = Arc::clone(&f);
        newcomers.push(tokio::spawn(async move {
            let mut placed = 0;
            for i in 0..60 {
                match f.engine.hold(slot, &format!("newcomer-{n}-{i}")).await {
                    Ok(_) => placed += 1,
                    Err(BookingError::SoldOut { .. }) => {}
                    Err(other) => panic!("unexpected {other:?}"),
                }
                tokio::task::yield_now().await;
            }
            placed
        }));
    }
    let mut cancels = Vec::new();
    for hold in &held {
        let (f, id) = (Arc::clone(&f), hold.hold_id);
        cancels.push(tokio::spawn(async move {
            tokio::task::yield_now().await;
            f.engine.cancel(&Scope::Anonymous, id).await.map(drop)
        }));
    }
    for cancel in cancels {
        cancel.await.expect("task").expect("cancelled");
    }
    let mut newcomers_placed = 0;
    for newcomer in newcomers {
        newcomers_placed += newcomer.await.expect("task");
    }
    let newcomers = newcomers_placed;
    assert_eq!(
        newcomers, 0,
        "no newcomer took a unit while the line waited"
    );
    let mut offers = Vec::new();
    for entry in &line {
        if let Some(hold) = offer(&f, entry).await {
            offers.push(hold);
        }
    }
    // 6 free in the end: the head's 3, then three of 1, in line order.
    let served: Vec<HoldId> = offers.iter().map(|h| h.hold_id).collect();
    let first_four: Vec<HoldId> = line[..4].iter().map(WaitlistEntry::offer_id).collect();
    assert_eq!(served, first_four);
    for (i, entry) in line[4..].iter().enumerate() {
        assert_eq!(position(&f, entry.entry_id).await, Some(i as u32 + 1));
    }
    assert_eq!(f.remaining(slot).await, 0);
    let mut all: Vec<HoldId> = held.iter().map(|h| h.hold_id).collect();
    all.extend(served);
    f.assert_invariant(slot, &all).await;
}
