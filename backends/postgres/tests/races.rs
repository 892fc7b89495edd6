//! Concurrent holds, replays, reclaims, confirms and cancels on one slot.

mod common;

use std::sync::Arc;

use chrono::Duration;
use common::*;
use slot_booking::{HoldOutcome, Store};

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
    assert_eq!(store.get_slot(slot_id).await.unwrap().unwrap().remaining, 0);
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
        store.get_slot(slot_id).await.unwrap().unwrap().remaining,
        99
    );
    assert_invariant(&store, slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_with_two_pools_race_like_two_processes() {
    let Some(ctx) = setup("two_stores_with_two_pools_race_like_two_processes").await else {
        return;
    };
    let a = Arc::new(ctx.store.clone());
    let b = Arc::new(ctx.second_store().await);
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
    assert_eq!(b.get_slot(slot_id).await.unwrap().unwrap().remaining, 0);
    assert_invariant(&a, slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reclaims_never_return_a_unit_twice() {
    let Some(ctx) = setup("racing_reclaims_never_return_a_unit_twice").await else {
        return;
    };
    let a = Arc::new(ctx.store.clone());
    let b = Arc::new(ctx.second_store().await);
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
    let expired: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{}\".holds WHERE slot_id = $1 AND status = 'expired'",
        ctx.schema()
    ))
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
    let a = Arc::new(ctx.store.clone());
    let b = Arc::new(ctx.second_store().await);
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
        let ids: Vec<i64> = sqlx::query_scalar(&format!(
            "SELECT id FROM \"{}\".holds WHERE slot_id = $1 AND status IN ('held', 'confirmed')",
            ctx.schema()
        ))
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
