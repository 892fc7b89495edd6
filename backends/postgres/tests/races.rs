//! Concurrent holds, replays, reclaims, confirms and cancels on one slot.

mod common;

use slot_booking::{HoldStore, SlotAdmin};
use std::sync::Arc;

use chrono::Duration;
use common::*;
use slot_booking::HoldOutcome;
use slot_booking_postgres::PostgresStore;
use sqlx::AssertSqlSafe;

/// `N` stores on `ctx`'s schema, each with a pool of its own (`N` processes, in effect): the
/// first is `ctx`'s.
async fn stores<const N: usize>(ctx: &Ctx) -> [Arc<PostgresStore>; N] {
    let mut stores = vec![Arc::new(ctx.store.clone())];
    while stores.len() < N {
        stores.push(Arc::new(ctx.second_store().await));
    }
    stores.try_into().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_racing_holds_take_exactly_the_capacity() {
    let Some(ctx) = setup("thousand_racing_holds_take_exactly_the_capacity").await else {
        return;
    };
    let store = Arc::new(ctx.store.clone());
    let slot_id = slot(&*store, 10).await;

    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { hold(&*store, slot_id, &format!("k-{i}"), at(0)).await })
        })
        .collect();
    let (mut created, mut sold_out) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            HoldOutcome::Created(_) => created += 1,
            HoldOutcome::SoldOut => sold_out += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!((created, sold_out), (10, 990));
    assert_eq!(
        store
            .get_slot(slot_id)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining,
        0
    );
    assert_eq!(counts(&store, slot_id).await, (10, 0, 10, 0));
    assert_invariant(&store, slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_racing_holds_with_one_key_make_one_hold() {
    let Some(ctx) = setup("fifty_racing_holds_with_one_key_make_one_hold").await else {
        return;
    };
    let store = Arc::new(ctx.store.clone());
    let slot_id = slot(&*store, 100).await;

    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { hold(&*store, slot_id, "the-key", at(0)).await })
        })
        .collect();
    let mut created = Vec::new();
    let mut replayed = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            HoldOutcome::Created(h) => created.push(h.hold_id),
            HoldOutcome::Replayed(h) => replayed.push(h.hold_id),
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(created.len(), 1);
    assert_eq!(replayed.len(), 49);
    assert!(replayed.iter().all(|id| *id == created[0]));
    assert_eq!(
        store
            .get_slot(slot_id)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining,
        99
    );
    assert_invariant(&store, slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_with_two_pools_race_like_two_processes() {
    let Some(ctx) = setup("two_stores_with_two_pools_race_like_two_processes").await else {
        return;
    };
    let [a, b] = stores(&ctx).await;
    let slot_id = slot(&*a, 7).await;

    let tasks: Vec<_> = (0..400)
        .map(|i| {
            let store = if i % 2 == 0 {
                Arc::clone(&a)
            } else {
                Arc::clone(&b)
            };
            tokio::spawn(async move { hold(&*store, slot_id, &format!("k-{i}"), at(0)).await })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        match task.await.unwrap() {
            HoldOutcome::Created(_) => created += 1,
            HoldOutcome::SoldOut => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(created, 7);
    assert_eq!(
        b.get_slot(slot_id).await.unwrap().unwrap().stored_remaining,
        0
    );
    assert_invariant(&a, slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reclaims_never_return_a_unit_twice() {
    let Some(ctx) = setup("racing_reclaims_never_return_a_unit_twice").await else {
        return;
    };
    let [a, b] = stores(&ctx).await;
    let slot_id = slot(&*a, 5).await;
    for i in 0..5 {
        assert!(matches!(
            hold(&*a, slot_id, &format!("old-{i}"), at(0)).await,
            HoldOutcome::Created(_)
        ));
    }
    // Ten minutes later all five holds have expired: 40 racing holds from two pools may take
    // exactly the five reclaimed units.
    let later = at(0) + Duration::minutes(10);
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let store = if i % 2 == 0 {
                Arc::clone(&a)
            } else {
                Arc::clone(&b)
            };
            tokio::spawn(async move { hold(&*store, slot_id, &format!("new-{i}"), later).await })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        match task.await.unwrap() {
            HoldOutcome::Created(_) => created += 1,
            HoldOutcome::SoldOut => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(created, 5);
    assert_eq!(counts(&a, slot_id).await, (5, 0, 5, 0));
    let expired: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{}\".holds WHERE slot_id = $1 AND status = 'expired'",
        ctx.schema()
    )))
    .bind(slot_id.get())
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!(expired, 5);
    assert_invariant(&a, slot_id).await;
}

/// Holds, confirms, cancels and reclaims all at once on one slot, from two pools, in several
/// rounds: no deadlock (it would surface as an error) and the invariant holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_holds_confirms_cancels_and_reclaims_never_deadlock() {
    let Some(ctx) = setup("racing_holds_confirms_cancels_and_reclaims_never_deadlock").await else {
        return;
    };
    let [a, b] = stores(&ctx).await;
    let slot_id = slot(&*a, 6).await;
    for round in 0..10i64 {
        let now = at(0) + Duration::minutes(3 * round);
        let mut ids = Vec::new();
        for i in 0..6 {
            if let HoldOutcome::Created(h) =
                hold(&*a, slot_id, &format!("r{round}-h{i}"), now).await
            {
                ids.push(h.hold_id);
            }
        }
        let mut tasks = Vec::new();
        for (i, id) in ids.iter().copied().enumerate() {
            let s = if i % 2 == 0 {
                Arc::clone(&a)
            } else {
                Arc::clone(&b)
            };
            tasks.push(tokio::spawn(async move {
                s.confirm_hold(
                    id,
                    &slot_booking::Scope::BackOffice,
                    now + Duration::seconds(1),
                )
                .await
                .unwrap();
            }));
            let s = if i % 2 == 0 {
                Arc::clone(&b)
            } else {
                Arc::clone(&a)
            };
            tasks.push(tokio::spawn(async move {
                s.cancel_hold(
                    id,
                    &slot_booking::Scope::BackOffice,
                    now + Duration::seconds(2),
                )
                .await
                .unwrap();
            }));
            // A hold far enough ahead to reclaim whatever is still held.
            let s = Arc::clone(&a);
            tasks.push(tokio::spawn(async move {
                hold(
                    &*s,
                    slot_id,
                    &format!("r{round}-n{i}"),
                    now + Duration::minutes(6),
                )
                .await;
            }));
            let s = Arc::clone(&b);
            tasks.push(tokio::spawn(async move {
                hold(
                    &*s,
                    slot_id,
                    &format!("r{round}-m{i}"),
                    now + Duration::minutes(6),
                )
                .await;
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_invariant(&a, slot_id).await;
        // Free the slot for the next round: cancel everything still active or confirmed.
        let ids: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT id FROM \"{}\".holds WHERE slot_id = $1 AND status IN ('held', 'confirmed')",
            ctx.schema()
        )))
        .bind(slot_id.get())
        .fetch_all(a.pool())
        .await
        .unwrap();
        for id in ids {
            a.cancel_hold(
                slot_booking::HoldId(id),
                &slot_booking::Scope::BackOffice,
                now + Duration::minutes(6),
            )
            .await
            .unwrap();
        }
        assert_invariant(&a, slot_id).await;
    }
}

/// Units of holds on `slot_id` that are active at `now` or confirmed, counted with SQL.
async fn active_or_confirmed(
    store: &PostgresStore,
    slot_id: slot_booking::SlotId,
    now: slot_booking::Timestamp,
) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{}\".holds WHERE slot_id = $1 \
           AND (status = 'confirmed' OR (status = 'held' AND expires_at > $2))",
        store.schema()
    )))
    .bind(slot_id.get())
    .bind(now)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Fills `slot_id` (of `units`) with one hold made at(0), expired by at(600), keyed for
/// `round`.
async fn full_of_an_expired_hold(
    store: &PostgresStore,
    slot_id: slot_booking::SlotId,
    round: usize,
    units: i32,
) {
    let old = hold_units(store, slot_id, &format!("r{round}-old"), units, at(0)).await;
    assert!(matches!(old, HoldOutcome::Created(_)), "{old:?}");
}

/// A removal decided while holds on the same slot commit, each from a pool of its own (three
/// processes, in effect), released together, over many rounds; every other round the slot is
/// full of an expired hold, so the holds and the removal go through their reclaiming
/// statements. Whichever wins, a removed slot never has an active or confirmed hold: the
/// removal decides on the slot row's `remaining = capacity`, which a hold in flight has
/// already lowered (or, removed first, the hold's re-checked `removed_at IS NULL` refuses it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removals_racing_holds_never_leave_a_hold_on_a_removed_slot() {
    use slot_booking::{Scope, SlotChange};
    let Some(ctx) = setup("removals_racing_holds").await else {
        return;
    };
    let stores: [_; 3] = stores(&ctx).await;
    const ROUNDS: usize = 120;
    let (mut removed, mut refused) = (0, 0);
    for round in 0..ROUNDS {
        let slot_id = slot(&*stores[0], 2).await;
        let now = if round % 2 == 1 {
            // Both units taken by a hold that has expired by at(600).
            full_of_an_expired_hold(&stores[0], slot_id, round, 2).await;
            at(600)
        } else {
            at(0)
        };
        let barrier = Arc::new(tokio::sync::Barrier::new(3));
        let holds: Vec<_> = (0..2)
            .map(|i| {
                let (store, barrier) = (Arc::clone(&stores[i]), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    let outcome = hold(&*store, slot_id, &format!("r{round}-h{i}"), now).await;
                    if let HoldOutcome::Created(h) = &outcome {
                        store
                            .confirm_hold(h.hold_id, &Scope::BackOffice, now + Duration::seconds(1))
                            .await
                            .unwrap();
                    }
                    outcome
                })
            })
            .collect();
        let removal = {
            let (store, barrier) = (Arc::clone(&stores[2]), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                store.remove_slot(slot_id, now).await.unwrap().outcome
            })
        };
        let mut created = 0;
        for task in holds {
            match task.await.unwrap() {
                HoldOutcome::Created(_) => created += 1,
                HoldOutcome::SlotNotFound => {}
                other => panic!("round {round}: unexpected hold outcome {other:?}"),
            }
        }
        let removal = removal.await.unwrap();
        let stored = stores[0].get_slot(slot_id).await.unwrap().unwrap();
        let taken = active_or_confirmed(&stores[0], slot_id, now + Duration::seconds(2)).await;
        match removal {
            SlotChange::Applied(slot) => {
                removed += 1;
                assert_eq!(stored, slot, "round {round}");
                assert!(stored.removed_at.is_some(), "round {round}");
                assert_eq!(
                    (created, taken),
                    (0, 0),
                    "round {round}: a hold on a removed slot"
                );
                assert_eq!(stored.stored_remaining, stored.capacity, "round {round}");
            }
            SlotChange::InUse(usage) => {
                refused += 1;
                assert!(stored.removed_at.is_none(), "round {round}");
                assert!(
                    created >= 1,
                    "round {round}: refused with nothing held: {usage:?}"
                );
                assert_eq!(taken, created, "round {round}");
            }
            SlotChange::NotFound => panic!("round {round}: the slot went missing"),
        }
        assert_invariant(&stores[0], slot_id).await;
    }
    // Both orders happen: the race is real.
    eprintln!("removals racing holds: {removed} removed, {refused} refused in {ROUNDS} rounds");
    assert!(
        removed > 0 && refused > 0,
        "{removed} removed, {refused} refused"
    );
}

/// A slot full of one expired multi-unit hold, then as many one-unit holds as it has units,
/// racing from two pools: every one is created. The first to lock the slot reclaims all the
/// units; the others were already past their fast path (no unit in their snapshot) and lock
/// the slot after it, finding no expired hold left to reclaim but units free on the locked
/// row. Each decides on the `remaining` its lock returned: a condition on the row as of its
/// snapshot (where the units were still taken) refused them as sold out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reclaiming_holds_racing_each_other_sell_every_reclaimed_unit() {
    let Some(ctx) = setup("reclaiming_holds_sell_every_unit").await else {
        return;
    };
    let stores: [_; 2] = stores(&ctx).await;
    const UNITS: usize = 4;
    for round in 0..30 {
        let slot_id = slot(&*stores[0], UNITS as i32).await;
        full_of_an_expired_hold(&stores[0], slot_id, round, UNITS as i32).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(UNITS));
        let tasks: Vec<_> = (0..UNITS)
            .map(|i| {
                let (store, barrier) = (Arc::clone(&stores[i % 2]), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    hold(&*store, slot_id, &format!("r{round}-n{i}"), at(600)).await
                })
            })
            .collect();
        for task in tasks {
            let outcome = task.await.unwrap();
            assert!(
                matches!(outcome, HoldOutcome::Created(_)),
                "round {round}: {outcome:?}"
            );
        }
        assert_eq!(
            counts(&stores[0], slot_id).await,
            (UNITS as i64, 0, UNITS as i64, 0)
        );
    }
}
