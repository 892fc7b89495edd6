//! Lifecycle cases about owners' scopes: an owned hold answers only its owner, and a key
//! replays only the same request and reveals nothing of another owner's hold.

use crate::conformance::support::{hours, owner, place};
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::model::{HoldId, HoldStatus};
use crate::scope::Scope;
use crate::store::HoldStore;

/// An owned hold answers only its owner (and back-office code); anyone else gets
/// `hold_not_found` for every call, exactly like an id nobody uses, and changes nothing.
pub(super) async fn owned_holds_answer_only_in_their_owners_scope<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(4, hours(1)).await;
    let alice = Scope::Owner(owner("alice"));
    let bob = Scope::Owner(owner("bob"));
    let held = place(&f, slot, "a-1", 2, Some("alice")).await.unwrap().hold;
    assert_eq!(held.owner, Some(owner("alice")));
    let anonymous = f.engine.hold(slot, "anon-1").await.unwrap().hold;
    assert_eq!(anonymous.owner, None);
    let unused = HoldId(held.hold_id.0.max(anonymous.hold_id.0) + 1000);

    for (scope, id) in [
        (Scope::Anonymous, held.hold_id),
        (bob.clone(), held.hold_id),
        (alice.clone(), anonymous.hold_id),
        (bob.clone(), unused),
    ] {
        let e = |r: Result<_, BookingError>| r.map(|_: crate::Hold| ()).unwrap_err();
        for error in [
            e(f.engine.get_hold(&scope, id).await),
            e(f.engine.confirm(&scope, id).await),
            e(f.engine.cancel(&scope, id).await),
            e(f.engine.renew(&scope, id, None).await),
        ] {
            match error {
                BookingError::HoldNotFound { hold_id } => assert_eq!(hold_id, id),
                other => panic!("{scope:?} on {id}: expected hold_not_found, got {other:?}"),
            }
        }
    }
    assert_eq!(f.remaining(slot).await, 1, "nothing changed");
    assert_eq!(
        f.engine
            .get_hold(&Scope::Anonymous, held.hold_id)
            .await
            .map_err(|e| e.code()),
        Err("hold_not_found"),
        "the seed's calls are anonymous"
    );
    assert_eq!(f.engine.get_hold(&alice, held.hold_id).await.unwrap(), held);
    assert_eq!(
        f.engine
            .get_hold(&Scope::BackOffice, held.hold_id)
            .await
            .unwrap(),
        held
    );
    assert_eq!(
        f.engine
            .get_hold(&Scope::BackOffice, anonymous.hold_id)
            .await
            .unwrap(),
        anonymous
    );
    let confirmed = f.engine.confirm(&alice, held.hold_id).await.unwrap();
    assert_eq!(confirmed.status, HoldStatus::Confirmed);
    let cancelled = f
        .engine
        .cancel(&Scope::BackOffice, held.hold_id)
        .await
        .unwrap();
    assert_eq!(cancelled.status, HoldStatus::Cancelled);
    assert_eq!(f.remaining(slot).await, 3);
    f.assert_invariant(slot, &[held.hold_id, anonymous.hold_id])
        .await;
}

/// A key is a replay only for the same slot, quantity and owner; the owner's own other
/// request is told which hold has the key.
pub(super) async fn a_key_replays_only_the_same_request<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let a = f.slot(6, hours(1)).await;
    let b = f.slot(6, hours(1)).await;
    let first = place(&f, a, "cart-1", 2, Some("alice")).await.unwrap();
    assert!(!first.replayed);
    let again = place(&f, a, "cart-1", 2, Some("alice")).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.hold, first.hold);
    for (slot, quantity) in [(a, 3), (b, 2), (a, 1)] {
        match place(&f, slot, "cart-1", quantity, Some("alice")).await {
            Err(BookingError::IdempotencyKeyReused {
                slot_id,
                existing_hold_id,
                existing_slot_id,
            }) => assert_eq!(
                (slot_id, existing_hold_id, existing_slot_id),
                (slot, Some(first.hold.hold_id), Some(a))
            ),
            other => panic!("slot {slot}, quantity {quantity}: {other:?}"),
        }
    }
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (4, 6));
    f.assert_invariant(a, &[first.hold.hold_id]).await;
    f.assert_invariant(b, &[]).await;
}

/// A key already used by another owner (or by an anonymous client, or used anonymously by
/// an owner's request) is refused without a word about that hold: no id in the error, no
/// hold handed back, nothing changed.
pub(super) async fn a_key_of_another_owner_reveals_nothing<S: HoldStore>(store: S) {
    let f = Fixture::new(store);
    let slot = f.slot(5, hours(1)).await;
    let alices = place(&f, slot, "shared", 1, Some("alice"))
        .await
        .unwrap()
        .hold;
    let anons = place(&f, slot, "anon-key", 1, None).await.unwrap().hold;
    for (key, who) in [
        ("shared", Some("bob")),
        ("shared", None),
        ("anon-key", Some("alice")),
    ] {
        match place(&f, slot, key, 1, who).await {
            Err(
                error @ BookingError::IdempotencyKeyReused {
                    existing_hold_id: None,
                    existing_slot_id: None,
                    ..
                },
            ) => {
                let message = error.to_string();
                for id in [alices.hold_id, anons.hold_id] {
                    assert!(
                        !message.contains(&format!("hold {id}")),
                        "{message:?} names hold {id}"
                    );
                }
            }
            other => panic!("{key} by {who:?}: expected an anonymous refusal, got {other:?}"),
        }
    }
    assert_eq!(f.remaining(slot).await, 3);
    f.assert_invariant(slot, &[alices.hold_id, anons.hold_id])
        .await;
}

/// With keys scoped to their owner, two owners' holds under one key are two holds, each
/// replayed only by its owner; anonymous holds keep one shared key space, which no owner's key
/// meets.
pub(super) async fn keys_scoped_to_their_owner_let_owners_share_a_key<S: HoldStore>(store: S) {
    let clock = crate::clock::ManualClock::new(crate::conformance::fixture::epoch());
    let engine = crate::BookingEngine::builder(store)
        .cache_period(std::time::Duration::ZERO)
        .keys_per_owner(true)
        .clock(clock)
        .build();
    let start = crate::conformance::fixture::epoch() + hours(1);
    let slot = crate::model::NewSlot::new(start, start + hours(1), 5);
    let slot = engine.create_slot(slot).await.unwrap().slot_id;
    let place = |who: Option<&str>, key: &str| {
        let mut request = crate::NewHold::new(slot, key);
        request.owner = who.map(owner);
        engine.place_hold(request)
    };
    let alice = place(Some("alice"), "cart-1").await.unwrap();
    let bob = place(Some("bob"), "cart-1").await.unwrap();
    assert!(!alice.replayed && !bob.replayed);
    assert_ne!(alice.hold.hold_id, bob.hold.hold_id);
    let again = place(Some("alice"), "cart-1").await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.hold.hold_id, alice.hold.hold_id);
    let anonymous = place(None, "cart-1").await.unwrap();
    assert!(!anonymous.replayed, "an anonymous key meets no owner's key");
    assert!(place(None, "cart-1").await.unwrap().replayed);
    // The stored key is the owner's and the key: a client key with a space is still refused.
    assert!(matches!(
        place(Some("alice"), "alice cart-1").await,
        Err(BookingError::InvalidIdempotencyKey(_))
    ));
    let stored = engine
        .store()
        .get_slot(slot)
        .await
        .unwrap()
        .map(|s| s.stored_remaining);
    assert_eq!(stored, Some(2));
}
