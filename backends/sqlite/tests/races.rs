//! Concurrent holds, replays and reclaims on one slot.

mod common;

use std::sync::Arc;

use chrono::Duration;
use common::*;
use slot_booking::{HoldOutcome, SlotChange, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_racing_holds_take_exactly_the_capacity() {
    let db = TempDb::new("race1000");
    let store = Arc::new(db.store().await);
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
    assert_eq!(counts(store.pool(), slot_id).await, (10, 0, 10, 0));
    assert_invariant(store.pool(), slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_racing_holds_with_one_key_make_one_hold() {
    let db = TempDb::new("onekey");
    let store = Arc::new(db.store().await);
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
    assert_invariant(store.pool(), slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_race_like_two_processes() {
    let db = TempDb::new("twostores");
    let a = Arc::new(db.store().await);
    let b = Arc::new(db.store().await);
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
    assert_invariant(a.pool(), slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reclaims_never_return_a_unit_twice() {
    let db = TempDb::new("reclaimrace");
    let a = Arc::new(db.store().await);
    let b = Arc::new(db.store().await);
    let slot_id = slot(&*a, 5).await;
    for i in 0..5 {
        assert!(matches!(
            hold(&*a, slot_id, &format!("old-{i}"), at(0)).await,
            HoldOutcome::Created(_)
        ));
    }
    // Ten minutes later all five holds have expired: 40 racing holds from two stores may take
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
    let (capacity, remaining, held, confirmed) = counts(a.pool(), slot_id).await;
    assert_eq!((capacity, remaining, held, confirmed), (5, 0, 5, 0));
    let expired: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM slot_booking_holds WHERE slot_id = ?1 AND status = 'expired'",
    )
    .bind(slot_id.get())
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!(expired, 5);
    assert_invariant(a.pool(), slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_confirms_cancels_and_holds_keep_the_invariant() {
    let db = TempDb::new("mixed");
    let store = Arc::new(db.store().await);
    let slot_id = slot(&*store, 8).await;
    let mut ids = Vec::new();
    for i in 0..8 {
        if let HoldOutcome::Created(h) = hold(&*store, slot_id, &format!("h-{i}"), at(0)).await {
            ids.push(h.hold_id);
        }
    }
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().copied().enumerate() {
        let s = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            s.confirm_hold(id, &slot_booking::Scope::BackOffice, at(1))
                .await
                .unwrap();
        }));
        let s = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            s.cancel_hold(id, &slot_booking::Scope::BackOffice, at(2))
                .await
                .unwrap();
        }));
        let s = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            hold(&*s, slot_id, &format!("n-{i}"), at(3)).await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_invariant(store.pool(), slot_id).await;
}

/// Holds from two stores (two processes, as far as SQLite can tell) race capacity changes,
/// closing and reopening on one slot: every change is decided by the slot row under the write
/// lock, so the invariant holds and lowering never takes a unit that is held (a refusal
/// reports more units taken than the capacity asked for).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_race_capacity_changes_and_closing() {
    let db = TempDb::new("adminrace");
    let a = Arc::new(db.store().await);
    let b = Arc::new(db.store().await);
    let slot_id = slot(&*a, 10).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..300 {
        let store = Arc::clone(if i % 2 == 0 { &a } else { &b });
        tasks.spawn(async move {
            match i % 10 {
                0 => {
                    let capacity = 1 + (i / 10) % 15;
                    match store
                        .change_capacity(slot_id, capacity, at(0))
                        .await
                        .unwrap()
                        .outcome
                    {
                        SlotChange::Applied(slot) => assert_eq!(slot.capacity, capacity),
                        SlotChange::InUse(usage) => assert!(usage.taken() > capacity),
                        SlotChange::NotFound => panic!("slot {slot_id} not found"),
                    }
                }
                3 => {
                    let closed = (i / 10) % 2 == 0;
                    let change = store.set_closed(slot_id, closed, at(0)).await.unwrap();
                    assert!(matches!(change.outcome, SlotChange::Applied(_)));
                }
                _ => match hold(&*store, slot_id, &format!("k-{i}"), at(0)).await {
                    HoldOutcome::Created(_) | HoldOutcome::SoldOut | HoldOutcome::SlotClosed => {}
                    other => panic!("unexpected outcome {other:?}"),
                },
            }
        });
    }
    while let Some(task) = tasks.join_next().await {
        task.unwrap();
    }
    // Each change was decided on the slot row under the write lock: the units still add up,
    // and what is held fits the capacity the last change left.
    assert_invariant(a.pool(), slot_id).await;
    let (capacity, _, held, confirmed) = counts(a.pool(), slot_id).await;
    assert!(held + confirmed <= capacity);
}

/// Removals race holds from two stores: a removal applies only to a slot with no unit held,
/// and no hold is ever stored on a removed slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removals_race_holds() {
    for round in 0..5 {
        let db = TempDb::new("removalrace");
        let a = Arc::new(db.store().await);
        let b = Arc::new(db.store().await);
        let slot_id = slot(&*a, 3).await;
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..40 {
            let store = Arc::clone(if i % 2 == 0 { &a } else { &b });
            tasks.spawn(async move {
                if i % 8 == round % 8 {
                    matches!(
                        store.remove_slot(slot_id, at(0)).await.unwrap().outcome,
                        SlotChange::Applied(_)
                    )
                } else {
                    match hold(&*store, slot_id, &format!("k-{i}"), at(0)).await {
                        HoldOutcome::Created(_) | HoldOutcome::SoldOut => {}
                        HoldOutcome::SlotNotFound => {}
                        other => panic!("unexpected outcome {other:?}"),
                    }
                    false
                }
            });
        }
        let mut removed = 0;
        while let Some(task) = tasks.join_next().await {
            removed += i32::from(task.unwrap());
        }
        let slot = a.get_slot(slot_id).await.unwrap().unwrap();
        let (_, _, held, confirmed) = counts(a.pool(), slot_id).await;
        assert!(removed <= 1, "a slot is removed once");
        assert_eq!(slot.removed_at.is_some(), removed == 1);
        if removed == 1 {
            assert_eq!((held, confirmed), (0, 0), "no hold on a removed slot");
        }
        assert_invariant(a.pool(), slot_id).await;
    }
}
