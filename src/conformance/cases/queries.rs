//! Query cases: an owner's holds and a slot's roster, read in keyset pages.

use std::collections::HashSet;

use crate::conformance::support::{hours, owner, place, ttl};
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::model::{HoldStatus, PageRequest};
use crate::scope::Scope;
use crate::store::{HoldQueries, HoldStore};

/// An owner's holds and a slot's roster come in keyset pages by id, every status resolved
/// at now, with quantity and owner.
pub(super) async fn owner_holds_and_rosters_page_by_id<S: HoldStore + HoldQueries>(store: S) {
    let f = Fixture::new(store);
    let a = f.slot(10, hours(1)).await;
    let b = f.slot(10, hours(1)).await;
    let mut alices = Vec::new();
    for (i, slot) in [a, b, a, b, a].into_iter().enumerate() {
        let quantity = i as i32 % 2 + 1;
        let key = format!("alice-{i}");
        alices.push(
            place(&f, slot, &key, quantity, Some("alice"))
                .await
                .unwrap()
                .hold,
        );
        place(&f, slot, &format!("bob-{i}"), 1, Some("bob"))
            .await
            .unwrap();
        f.engine.hold(slot, &format!("anon-{i}")).await.unwrap();
    }
    alices[1] = f
        .engine
        .confirm(&Scope::Owner(owner("alice")), alices[1].hold_id)
        .await
        .unwrap();
    f.advance(ttl());
    let alice = owner("alice");
    let mut seen = Vec::new();
    let mut page = PageRequest::first(2);
    loop {
        let got = f.engine.owner_holds(&alice, page).await.unwrap();
        assert!(got.items.len() <= 2);
        seen.extend(got.items);
        match got.next_after {
            Some(after) => page = PageRequest::after(after, 2),
            None => break,
        }
    }
    let expected: Vec<_> = alices.iter().map(|h| h.clone().at(f.now())).collect();
    assert_eq!(
        seen, expected,
        "alice's holds, by id, statuses resolved at now"
    );
    assert_eq!(seen[1].status, HoldStatus::Confirmed);
    assert_eq!(seen[0].status, HoldStatus::Expired);

    let roster = f
        .engine
        .slot_holds(a, PageRequest::first(1000))
        .await
        .unwrap();
    assert_eq!(roster.next_after, None);
    assert_eq!(roster.items.len(), 9, "three of each kind on slot a");
    assert!(roster.items.windows(2).all(|w| w[0].hold_id < w[1].hold_id));
    assert!(roster.items.iter().all(|h| h.slot_id == a));
    let owners: HashSet<_> = roster.items.iter().map(|h| h.owner.clone()).collect();
    assert_eq!(owners.len(), 3, "alice, bob and anonymous");
    let after = roster.items[3].hold_id;
    let rest = f
        .engine
        .slot_holds(a, PageRequest::after(after, 1000))
        .await
        .unwrap();
    assert_eq!(rest.items, roster.items[4..].to_vec());
    let nobody = f
        .engine
        .owner_holds(&owner("carol"), PageRequest::first(5))
        .await
        .unwrap();
    assert_eq!((nobody.items.len(), nobody.next_after), (0, None));
    for limit in [0, 1001] {
        assert_err!(
            f.engine
                .owner_holds(&alice, PageRequest::first(limit))
                .await,
            BookingError::InvalidPage { .. }
        );
        assert_err!(
            f.engine.slot_holds(a, PageRequest::first(limit)).await,
            BookingError::InvalidPage { .. }
        );
    }
}
