//! Waitlist cases with pools: a slot in pools has a line, its entries wait in line for each
//! pool too; units a pool gets back (a cancel on another of its slots, a capacity raise, a
//! detach) go to the pool's line in that step; nobody takes a pool's units past its line;
//! entries of a slot that stopped selling never block the pool; and a race of cancels, joins
//! and newcomers over a pool.

use std::sync::Arc;

use crate::conformance::support::hours;
use crate::conformance::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{HoldId, HoldStatus, NewPool, PoolId, SlotId, WaitlistEntry};
use crate::scope::Scope;

use super::waitlists::{offer, position, wait, Waitlists};

/// A pool of `capacity` over fresh slots of `slot_capacity` each, starting in an hour.
async fn pooled<S: Waitlists>(
    f: &Fixture<S>,
    capacity: i32,
    slot_capacity: i32,
    slots: usize,
) -> (PoolId, Vec<SlotId>) {
    let pool = f.engine.create_pool(NewPool::new(capacity)).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..slots {
        let slot = f.slot(slot_capacity, hours(1)).await;
        f.engine.attach_slot(pool.pool_id, slot).await.unwrap();
        ids.push(slot);
    }
    (pool.pool_id, ids)
}

/// The pool's free units as the engine reads them.
async fn pool_free<S: Waitlists>(f: &Fixture<S>, pool: PoolId) -> i32 {
    f.engine.get_pool(pool).await.unwrap().remaining
}

/// A slot of a full pool has a line, though the slot has room; a cancel on another slot of
/// the pool offers its unit to the pool's head in the same step; meanwhile newcomers on any
/// slot of the pool are refused and availability shows them with no unit.
pub(super) async fn pool_waitlist_serves_units_freed_on_another_slot<S: Waitlists>(store: S) {
    let f = Fixture::new(store);
    let (pool, slots) = pooled(&f, 2, 5, 3).await;
    let (a, b, c) = (slots[0], slots[1], slots[2]);
    let full = f
        .engine
        .place_hold(NewHold::new(a, "full").quantity(2))
        .await
        .unwrap()
        .hold;
    let (on_b, place) = wait(&f, b, "on-b", 1, 0).await;
    assert_eq!(place, 1);
    for slot in [a, b, c] {
        assert_eq!(f.available(slot).await, Some(0), "slot {slot}");
    }
    // The line is the pool's: a newcomer on a slot with no line of its own is refused too.
    assert_eq!(
        f.engine.hold(c, "newcomer").await.unwrap_err().code(),
        "sold_out"
    );
    f.engine
        .cancel(&Scope::Anonymous, full.hold_id)
        .await
        .unwrap();
    let offered = offer(&f, &on_b).await.expect("the pool's head was offered");
    assert_eq!(
        (offered.slot_id, offered.quantity, offered.status),
        (b, 1, HoldStatus::Held)
    );
    assert_eq!(position(&f, on_b.entry_id).await, None);
    // One unit left and nobody waits: newcomers are welcome again.
    assert_eq!(pool_free(&f, pool).await, 1);
    assert_eq!(f.available(c).await, Some(1));
    let newcomer = f.engine.hold(c, "newcomer-2").await.unwrap().hold;
    assert_eq!(pool_free(&f, pool).await, 0);
    f.assert_invariant(a, &[full.hold_id]).await;
    f.assert_invariant(b, &[offered.hold_id]).await;
    f.assert_invariant(c, &[newcomer.hold_id]).await;
}

/// The pool's line is served in strict order across its slots (priority, then arrival): a
/// raise of the pool's capacity offers its head, the next waits for its whole quantity even
/// when one behind it would fit; a detach gives the slot's units back to the pool and takes
/// its entries out of the pool's line, serving both.
pub(super) async fn pool_capacity_changes_and_detaches_serve_the_pool_line<S: Waitlists>(store: S) {
    let f = Fixture::new(store);
    let (pool, slots) = pooled(&f, 2, 5, 3).await;
    let (a, b, c) = (slots[0], slots[1], slots[2]);
    let first = f
        .engine
        .place_hold(NewHold::new(a, "first").quantity(2))
        .await
        .unwrap()
        .hold;
    let (two_on_b, _) = wait(&f, b, "two-on-b", 2, 0).await;
    let (one_on_c, _) = wait(&f, c, "one-on-c", 1, 0).await;
    let (vip_on_c, vip_place) = wait(&f, c, "vip-on-c", 1, 5).await;
    assert_eq!(vip_place, 1, "priority first, in its slot's line");
    // Capacity 3: one unit free; the vip (first in the pool's line) takes it; `two-on-b`
    // needs 2 and waits; `one-on-c` waits behind it in the pool's line.
    let raised = f.engine.change_pool_capacity(pool, 3).await.unwrap();
    assert_eq!(
        raised.remaining, 1,
        "the answer is the change, before serving"
    );
    let vip = offer(&f, &vip_on_c).await.expect("the vip was offered");
    assert_eq!(vip.slot_id, c);
    assert_eq!(offer(&f, &two_on_b).await, None);
    assert_eq!(offer(&f, &one_on_c).await, None, "nobody passes the head");
    // Capacity 5: 2 free; `two-on-b` takes both; `one-on-c` waits.
    f.engine.change_pool_capacity(pool, 5).await.unwrap();
    let two = offer(&f, &two_on_b).await.expect("the new head");
    assert_eq!((two.slot_id, two.quantity), (b, 2));
    assert_eq!(position(&f, one_on_c.entry_id).await, Some(1));
    // Detaching `c` leaves its entry with only its slot to wait for: offered at once.
    f.engine.detach_slot(pool, c).await.unwrap();
    let one = offer(&f, &one_on_c)
        .await
        .expect("detached, the slot has room");
    assert_eq!(one.slot_id, c);
    // Pool: `first` and `two` on its slots; `c`'s units left with it.
    assert_eq!(pool_free(&f, pool).await, 1);
    f.assert_invariant(a, &[first.hold_id]).await;
    f.assert_invariant(b, &[two.hold_id]).await;
    f.assert_invariant(c, &[vip.hold_id, one.hold_id]).await;
}

/// Entries of a slot that stopped selling (closed, here) are not in the pool's line: they
/// neither block the pool's next entries nor keep newcomers away; reopened, they are back in
/// line. A join for more than a pool's whole capacity is refused.
pub(super) async fn pool_line_skips_slots_that_stopped_selling<S: Waitlists>(store: S) {
    let f = Fixture::new(store);
    let (pool, slots) = pooled(&f, 1, 5, 3).await;
    let (a, b, c) = (slots[0], slots[1], slots[2]);
    let first = f.engine.hold(a, "first").await.unwrap().hold;
    let (on_b, _) = wait(&f, b, "on-b", 1, 0).await;
    let (on_c, _) = wait(&f, c, "on-c", 1, 0).await;
    f.engine.close_sales(b).await.unwrap();
    f.engine
        .cancel(&Scope::Anonymous, first.hold_id)
        .await
        .unwrap();
    let taken = offer(&f, &on_c)
        .await
        .expect("the closed slot's entry did not block");
    assert_eq!(offer(&f, &on_b).await, None);
    assert_eq!(position(&f, on_b.entry_id).await, Some(1));
    // Reopened: `on-b` waits in the pool's line again, and newcomers are refused.
    f.engine.reopen_sales(b).await.unwrap();
    assert_eq!(
        f.engine.hold(a, "newcomer").await.unwrap_err().code(),
        "sold_out"
    );
    f.engine
        .cancel(&Scope::Anonymous, taken.hold_id)
        .await
        .unwrap();
    let later = offer(&f, &on_b).await.expect("back in line, then served");
    assert_eq!(later.slot_id, b);
    let too_many = NewHold::new(a, "too-many").quantity(2);
    match f.engine.join_waitlist(too_many, 0).await {
        Err(BookingError::QuantityExceedsCapacity { .. }) => {}
        other => panic!("a join for more than the pool holds: {other:?}"),
    }
    assert_eq!(pool_free(&f, pool).await, 0);
    f.assert_invariant(b, &[later.hold_id]).await;
    f.assert_invariant(c, &[taken.hold_id]).await;
}

/// Holds on three slots of a pool of 6 are cancelled while entries wait on all three (the
/// pool's head wants 3) and newcomers race on every slot: no newcomer gets a unit while the
/// pool's line waits, the pool's line is served in its order, no entry is offered twice, and
/// neither the slots nor the pool are oversold.
pub(super) async fn race_pool_waitlists_never_give_a_unit_to_a_newcomer<S: Waitlists>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let (pool, slots) = pooled(&f, 6, 4, 3).await;
    let mut held = Vec::new();
    for (i, &slot) in slots.iter().cycle().take(6).enumerate() {
        held.push(
            f.engine
                .hold(slot, &format!("held-{i}"))
                .await
                .unwrap()
                .hold,
        );
    }
    let mut line = vec![wait(&f, slots[1], "head", 3, 0).await.0];
    for i in 0..6 {
        let slot = slots[i % 3];
        line.push(wait(&f, slot, &format!("line-{i}"), 1, 0).await.0);
    }
    let mut newcomers = Vec::new();
    for n in 0..6 {
        let (f, slot) = (Arc::clone(&f), slots[n % 3]);
        newcomers.push(tokio::spawn(async move {
            let mut placed = 0;
            for i in 0..40 {
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
    assert_eq!(
        newcomers_placed, 0,
        "no newcomer took a unit while the pool's line waited"
    );
    // A sweep serves any head a concurrent step could not (its slot's row was busy).
    f.engine.reclaim_expired(100).await.unwrap();
    let mut offers = Vec::new();
    for entry in &line {
        if let Some(hold) = offer(&f, entry).await {
            offers.push(hold);
        }
    }
    // 6 free in the end: the head's 3, then three of 1, in the pool's line order.
    let served: Vec<HoldId> = offers.iter().map(|h| h.hold_id).collect();
    let first_four: Vec<HoldId> = line[..4].iter().map(WaitlistEntry::offer_id).collect();
    assert_eq!(served, first_four);
    for (i, entry) in line[4..].iter().enumerate() {
        assert_eq!(position(&f, entry.entry_id).await, Some(1), "entry {i}");
    }
    assert_eq!(pool_free(&f, pool).await, 0);
    for &slot in &slots {
        let mut on_slot: Vec<HoldId> = held
            .iter()
            .chain(&offers)
            .filter(|h| h.slot_id == slot)
            .map(|h| h.hold_id)
            .collect();
        on_slot.sort_unstable();
        f.assert_invariant(slot, &on_slot).await;
    }
}
