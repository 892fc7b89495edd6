//! Lifecycle cases about a hold's lifetime: renewal up to the maximum life, what cannot be
//! renewed, and the bounds of a requested lifetime.

use chrono::Duration;

use crate::conformance::support::{hours, owner, place, ttl};
use crate::conformance::Fixture;
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::HoldStatus;
use crate::scope::Scope;
use crate::store::HoldStore;

/// Renewal moves an active hold's expiry to now plus its lifetime, never past its creation
/// plus the maximum life, and takes no capacity.
pub(super) async fn renew_extends_an_active_hold_up_to_its_maximum_life<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(2, hours(3)).await;
    let alice = Scope::Owner(owner("alice"));
    let hold = place(&f, slot, "k", 1, Some("alice")).await.unwrap().hold;
    assert_eq!(hold.created_at, f.now());
    // Alice renews her hold for a lifetime of its own.
    let renew_for = |seconds| {
        let lifetime = Some(std::time::Duration::from_secs(seconds));
        f.engine.renew(&alice, hold.hold_id, lifetime)
    };
    f.advance(Duration::seconds(200));
    let renewed = f.engine.renew(&alice, hold.hold_id, None).await.unwrap();
    assert_eq!(renewed.expires_at, f.now() + ttl());
    assert_eq!(renewed.status, HoldStatus::Held);
    f.advance(Duration::seconds(100));
    let longer = renew_for(600).await.unwrap();
    assert_eq!(longer.expires_at, f.now() + Duration::seconds(600));
    let shorter = renew_for(1).await.unwrap();
    assert_eq!(
        shorter.expires_at, longer.expires_at,
        "a renewal never shortens"
    );
    f.advance(Duration::seconds(500));
    let capped = renew_for(600).await.unwrap();
    let max_life = Duration::from_std(crate::conformance::MAX_HOLD_LIFE).expect("fits");
    assert_eq!(capped.expires_at, hold.created_at + max_life);
    assert_eq!(
        f.engine.get_hold(&alice, hold.hold_id).await.unwrap(),
        capped
    );
    assert_eq!(f.remaining(slot).await, 1, "renewal takes no capacity");
    f.advance(max_life);
    assert_err!(
        f.engine.renew(&alice, hold.hold_id, None).await,
        BookingError::HoldExpired { .. }
    );
    f.assert_invariant(slot, &[hold.hold_id]).await;
}

/// Expired and cancelled holds cannot be renewed; a confirmed one is returned unchanged.
pub(super) async fn renew_refuses_expired_and_cancelled_holds<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let confirmed = f.engine.hold(slot, "c").await.unwrap().hold.hold_id;
    let cancelled = f.engine.hold(slot, "x").await.unwrap().hold.hold_id;
    let expired = f.engine.hold(slot, "e").await.unwrap().hold.hold_id;
    let confirmed = f
        .engine
        .confirm(&Scope::Anonymous, confirmed)
        .await
        .unwrap();
    f.engine.cancel(&Scope::Anonymous, cancelled).await.unwrap();
    f.advance(Duration::seconds(10));
    assert_eq!(
        f.engine
            .renew(&Scope::Anonymous, confirmed.hold_id, None)
            .await
            .unwrap(),
        confirmed
    );
    assert_err!(
        f.engine.renew(&Scope::Anonymous, cancelled, None).await,
        BookingError::HoldCancelled { .. }
    );
    f.advance(ttl());
    assert_err!(
        f.engine.renew(&Scope::Anonymous, expired, None).await,
        BookingError::HoldExpired { .. }
    );
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, confirmed.hold_id)
            .await
            .unwrap(),
        confirmed
    );
    assert_eq!(f.remaining(slot).await, 1);
    f.assert_invariant(slot, &[confirmed.hold_id, cancelled, expired])
        .await;
}

/// A request may ask for its own lifetime within the engine's bounds; outside them it is
/// refused before the store is called.
pub(super) async fn requested_lifetimes_are_bounded<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(3, hours(1)).await;
    let secs = std::time::Duration::from_secs;
    let hold = f
        .engine
        .place_hold(NewHold::new(slot, "ten-minutes").lifetime(secs(600)))
        .await
        .unwrap()
        .hold;
    assert_eq!(hold.expires_at, f.now() + Duration::seconds(600));
    for bad in [std::time::Duration::ZERO, secs(601), secs(86_400)] {
        let error = assert_err!(
            f.engine
                .place_hold(NewHold::new(slot, "bad").lifetime(bad))
                .await,
            BookingError::InvalidLifetime { .. }
        );
        assert_eq!(error.code(), "invalid_lifetime");
        assert_err!(
            f.engine
                .renew(&Scope::Anonymous, hold.hold_id, Some(bad))
                .await,
            BookingError::InvalidLifetime { .. }
        );
    }
    assert_eq!(f.remaining(slot).await, 2);
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, hold.hold_id)
            .await
            .unwrap(),
        hold
    );
}
