//! Lifecycle cases: placing a hold (replays, refusals, keys), confirming, cancelling, unknown
//! holds, and how a hold expires and is reclaimed.

use chrono::Duration;

use crate::conformance::support::{hours, ttl};
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::model::{HoldId, HoldStatus, SlotId};
use crate::scope::Scope;
use crate::store::HoldStore;

/// A hold on a free unit is `held`, expires after the hold lifetime and takes one unit.
pub(super) async fn hold_creates_a_held_hold_reserving_one_unit<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let placed = f.engine.hold(slot, "k1").await.unwrap();
    assert!(!placed.replayed);
    let hold = placed.hold;
    assert_eq!(hold.slot_id, slot);
    assert_eq!(hold.status, HoldStatus::Held);
    assert_eq!(hold.expires_at, f.now() + ttl());
    assert_eq!((hold.confirmed_at, hold.cancelled_at), (None, None));
    assert_eq!(f.remaining(slot).await, 2);
    assert_eq!(f.available(slot).await, Some(2));
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap(),
        hold
    );
    f.assert_invariant(slot, &[hold.hold_id]).await;
}

/// The same key on the same slot returns the existing hold as it is now.
pub(super) async fn hold_replay_returns_the_current_state_and_reserves_nothing<S: HoldStore>(
    store: S,
) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let first = f.engine.hold(slot, "same").await.unwrap().hold;
    let again = f.engine.hold(slot, "same").await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.hold, first);
    f.advance(Duration::seconds(1));
    let confirmed = f
        .engine
        .confirm(&Scope::Anonymous, first.hold_id)
        .await
        .unwrap();
    let replay = f.engine.hold(slot, "same").await.unwrap();
    assert!(replay.replayed);
    assert_eq!(replay.hold, confirmed, "a replay shows the current state");
    assert_eq!(f.remaining(slot).await, 2);
    f.assert_invariant(slot, &[first.hold_id]).await;
}

/// A replay is a replay even when the slot is now sold out or has started.
pub(super) async fn hold_replay_wins_over_sold_out_and_closed<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(1, hours(1)).await;
    let first = f.engine.hold(slot, "only").await.unwrap().hold;
    let replay = f.engine.hold(slot, "only").await.unwrap();
    assert!(replay.replayed, "sold out, but the key's hold exists");
    assert_eq!(replay.hold.hold_id, first.hold_id);
    f.advance(hours(2));
    let late = f.engine.hold(slot, "only").await.unwrap();
    assert!(late.replayed, "started, but the key's hold exists");
    assert_eq!(late.hold.status, HoldStatus::Expired);
    f.assert_invariant(slot, &[first.hold_id]).await;
}

/// The same key on another slot is refused and changes nothing.
pub(super) async fn hold_key_reused_on_another_slot_changes_nothing<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let a = f.slot(2, hours(1)).await;
    let b = f.slot(2, hours(1)).await;
    let hold = f.engine.hold(a, "shared").await.unwrap().hold;
    let error = assert_err!(
        f.engine.hold(b, "shared").await,
        BookingError::IdempotencyKeyReused { .. }
    );
    assert_eq!(error.code(), "idempotency_key_reused");
    match error {
        BookingError::IdempotencyKeyReused {
            slot_id,
            existing_hold_id,
            existing_slot_id,
        } => assert_eq!(
            (slot_id, existing_hold_id, existing_slot_id),
            (b, Some(hold.hold_id), Some(a)),
            "both anonymous: the caller's own kind of hold may be named"
        ),
        _ => unreachable!(),
    }
    assert_eq!(f.remaining(a).await, 1);
    assert_eq!(f.remaining(b).await, 2);
    f.assert_invariant(a, &[hold.hold_id]).await;
    f.assert_invariant(b, &[]).await;
}

/// A slot id nobody created.
pub(super) async fn hold_on_unknown_slot_is_slot_not_found<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let real = f.slot(1, hours(1)).await;
    let missing = SlotId(real.0 + 1000);
    let error = assert_err!(
        f.engine.hold(missing, "k").await,
        BookingError::SlotNotFound { .. }
    );
    assert_eq!(error.code(), "slot_not_found");
    // The key was not consumed by the failure.
    assert!(!f.engine.hold(real, "k").await.unwrap().replayed);
}

/// No holds once `starts_at <= now`, including exactly at `starts_at`.
pub(super) async fn hold_on_started_slot_is_slot_closed<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(5, hours(1)).await;
    f.advance(hours(1) - Duration::microseconds(1));
    assert!(f.engine.hold(slot, "just-in-time").await.is_ok());
    f.advance(Duration::microseconds(1));
    let error = assert_err!(
        f.engine.hold(slot, "on-the-dot").await,
        BookingError::SlotClosed { .. }
    );
    assert_eq!(error.code(), "slot_closed");
    f.advance(hours(1));
    assert_err!(
        f.engine.hold(slot, "late").await,
        BookingError::SlotClosed { .. }
    );
    assert_eq!(f.remaining(slot).await, 4);
}

/// A full slot refuses holds and nothing is reserved.
pub(super) async fn hold_on_full_slot_is_sold_out_and_reserves_nothing<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let a = f.engine.hold(slot, "a").await.unwrap().hold.hold_id;
    let b = f.engine.hold(slot, "b").await.unwrap().hold.hold_id;
    let error = assert_err!(f.engine.hold(slot, "c").await, BookingError::SoldOut { .. });
    assert_eq!(error.code(), "sold_out");
    assert_eq!(f.remaining(slot).await, 0);
    assert_eq!(
        f.available(slot).await,
        Some(0),
        "sold-out slots stay listed"
    );
    // The refused key did not create anything: after a cancel it books normally.
    f.engine.cancel(&Scope::Anonymous, a).await.unwrap();
    let c = f.engine.hold(slot, "c").await.unwrap();
    assert!(!c.replayed);
    f.assert_invariant(slot, &[a, b, c.hold.hold_id]).await;
}

/// Malformed keys never reach the store.
pub(super) async fn hold_with_invalid_key_is_refused<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let long = "x".repeat(256);
    for bad in ["", " ", "with space", "tab\t", "é", long.as_str()] {
        let error = assert_err!(
            f.engine.hold(slot, bad).await,
            BookingError::InvalidIdempotencyKey(_)
        );
        assert_eq!(error.code(), "invalid_idempotency_key");
    }
    assert_eq!(f.remaining(slot).await, 2);
}

/// Confirm sets `confirmed` and `confirmed_at`; capacity is unchanged.
pub(super) async fn confirm_an_active_hold<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    f.advance(ttl() - Duration::microseconds(1));
    let confirmed = f
        .engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    assert_eq!(confirmed.status, HoldStatus::Confirmed);
    assert_eq!(confirmed.confirmed_at, Some(f.now()));
    assert_eq!(confirmed.cancelled_at, None);
    assert_eq!(confirmed.expires_at, hold.expires_at);
    assert_eq!(f.remaining(slot).await, 1);
    f.assert_invariant(slot, &[hold.hold_id]).await;
}

/// Confirming twice returns the hold unchanged.
pub(super) async fn confirm_is_idempotent<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    let first = f
        .engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    f.advance(Duration::seconds(5));
    let second = f
        .engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    assert_eq!(first, second);
    f.assert_invariant(slot, &[hold.hold_id]).await;
}

/// A cancelled hold cannot be confirmed.
pub(super) async fn confirm_a_cancelled_hold_fails<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    f.engine
        .cancel(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    let error = assert_err!(
        f.engine.confirm(&Scope::Anonymous, hold.hold_id).await,
        BookingError::HoldCancelled { .. }
    );
    assert_eq!(error.code(), "hold_cancelled");
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Cancelled
    );
    assert_eq!(f.remaining(slot).await, 2);
}

/// A hold is expired from `expires_at` on (inclusive).
pub(super) async fn confirm_fails_exactly_at_expires_at<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    f.clock.set(hold.expires_at);
    let error = assert_err!(
        f.engine.confirm(&Scope::Anonymous, hold.hold_id).await,
        BookingError::HoldExpired { .. }
    );
    assert_eq!(error.code(), "hold_expired");
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Expired
    );
    f.assert_invariant(slot, &[hold.hold_id]).await;
}

/// Cancelling a held hold gives the unit back.
pub(super) async fn cancel_a_held_hold_returns_its_unit<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(1, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    f.advance(Duration::seconds(3));
    let cancelled = f
        .engine
        .cancel(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    assert_eq!(cancelled.status, HoldStatus::Cancelled);
    assert_eq!(cancelled.cancelled_at, Some(f.now()));
    assert_eq!(cancelled.confirmed_at, None);
    assert_eq!(f.remaining(slot).await, 1);
    assert!(f.engine.hold(slot, "next").await.is_ok());
}

/// Cancelling a confirmed hold gives the unit back, even after its `expires_at`.
pub(super) async fn cancel_a_confirmed_hold_returns_its_unit<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(1, hours(2)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    let confirmed = f
        .engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    f.advance(ttl() * 3);
    let cancelled = f
        .engine
        .cancel(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    assert_eq!(cancelled.status, HoldStatus::Cancelled);
    assert_eq!(cancelled.confirmed_at, confirmed.confirmed_at);
    assert_eq!(cancelled.cancelled_at, Some(f.now()));
    assert_eq!(f.remaining(slot).await, 1);
    f.assert_invariant(slot, &[hold.hold_id]).await;
}

/// Cancelling twice returns the hold unchanged and the unit only once.
pub(super) async fn cancel_is_idempotent<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    let first = f
        .engine
        .cancel(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    f.advance(Duration::seconds(1));
    let second = f
        .engine
        .cancel(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(f.remaining(slot).await, 2);
    f.assert_invariant(slot, &[hold.hold_id]).await;
}

/// An expired hold cannot be cancelled (its unit is already free).
pub(super) async fn cancel_an_expired_hold_fails<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(1, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    f.clock.set(hold.expires_at);
    assert_err!(
        f.engine.cancel(&Scope::Anonymous, hold.hold_id).await,
        BookingError::HoldExpired { .. }
    );
    assert_eq!(f.available(slot).await, Some(1));
    f.assert_invariant(slot, &[hold.hold_id]).await;
}

/// Confirm, cancel and get of an id nobody created.
pub(super) async fn unknown_holds_are_not_found<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(1, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    let missing = HoldId(hold.hold_id.0 + 1000);
    let error = assert_err!(
        f.engine.confirm(&Scope::Anonymous, missing).await,
        BookingError::HoldNotFound { .. }
    );
    assert_eq!(error.code(), "hold_not_found");
    assert_err!(
        f.engine.cancel(&Scope::Anonymous, missing).await,
        BookingError::HoldNotFound { .. }
    );
    assert_err!(
        f.engine.get_hold(&Scope::Anonymous, missing).await,
        BookingError::HoldNotFound { .. }
    );
    assert_err!(
        f.engine.get_hold(&Scope::Anonymous, HoldId(-1)).await,
        BookingError::HoldNotFound { .. }
    );
}

/// A hold reads as expired by its `expires_at` alone (R6): no cleanup job needed.
pub(super) async fn expired_status_needs_no_cleanup<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    f.clock.set(hold.expires_at - Duration::microseconds(1));
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Held
    );
    f.clock.set(hold.expires_at);
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Expired
    );
    let stored = f.stored_hold(hold.hold_id).await.unwrap();
    assert_eq!(stored.status, HoldStatus::Held, "nothing rewrote the row");
    assert_eq!(f.available(slot).await, Some(3));
}

/// When a slot is full of expired holds, a new hold reclaims them and succeeds.
pub(super) async fn expired_holds_are_reclaimed_when_the_slot_is_full<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(2)).await;
    let a = f.engine.hold(slot, "a").await.unwrap().hold;
    let b = f.engine.hold(slot, "b").await.unwrap().hold;
    assert_err!(f.engine.hold(slot, "c").await, BookingError::SoldOut { .. });
    f.clock.set(a.expires_at);
    let c = f.engine.hold(slot, "c").await.unwrap().hold;
    let d = f.engine.hold(slot, "d").await.unwrap().hold;
    assert_err!(f.engine.hold(slot, "e").await, BookingError::SoldOut { .. });
    for old in [&a, &b] {
        let stored = f.stored_hold(old.hold_id).await.unwrap();
        assert_eq!(stored.status, HoldStatus::Expired, "reclaimed");
        assert_err!(
            f.engine.confirm(&Scope::Anonymous, old.hold_id).await,
            BookingError::HoldExpired { .. }
        );
    }
    assert_eq!(f.remaining(slot).await, 0);
    f.assert_invariant(slot, &[a.hold_id, b.hold_id, c.hold_id, d.hold_id])
        .await;
}

/// Confirmed holds keep their unit past `expires_at`; reclaim never touches them.
pub(super) async fn confirmed_holds_never_expire<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(1, hours(3)).await;
    let hold = f.engine.hold(slot, "k").await.unwrap().hold;
    f.engine
        .confirm(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap();
    f.advance(ttl() * 2);
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Confirmed
    );
    assert_err!(
        f.engine.hold(slot, "other").await,
        BookingError::SoldOut { .. }
    );
    assert_eq!(f.available(slot).await, Some(0));
    f.assert_invariant(slot, &[hold.hold_id]).await;
}
