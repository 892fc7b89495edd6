//! Concurrent holds, replays and reclaims on one slot.

mod common;

use slot_booking::{HoldStore, SlotAdmin};
use std::future::Future;
use std::sync::Arc;

use chrono::Duration;
use common::*;
use slot_booking::{HoldOutcome, SlotChange, SlotId, Timestamp};
use slot_booking_sqlite::SqliteStore;
use tokio::task::JoinSet;

/// Two stores on one file, each with its own pool: two processes, as far as SQLite can tell.
struct TwoStores {
    a: Arc<SqliteStore>,
    b: Arc<SqliteStore>,
}

impl TwoStores {
    async fn open(db: &TempDb) -> Self {
        TwoStores {
            a: Arc::new(db.store().await),
            b: Arc::new(db.store().await),
        }
    }

    /// The store task `i` uses: `a` for even tasks, `b` for odd ones.
    fn take_turns(&self, i: i32) -> Arc<SqliteStore> {
        Arc::clone(if i % 2 == 0 { &self.a } else { &self.b })
    }
}

/// Runs `n` tasks at once, task `i` being `task(i)`, and collects what they return (in the
/// order they finish); a task that panics fails the test.
async fn race<T, F>(n: i32, mut task: impl FnMut(i32) -> F) -> Vec<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut tasks = JoinSet::new();
    for i in 0..n {
        tasks.spawn(task(i));
    }
    let mut done = Vec::new();
    while let Some(task) = tasks.join_next().await {
        done.push(task.unwrap());
    }
    done
}

/// `n` holds racing for the slot at `now`, hold `i` placed through `store(i)` with key `key(i)`.
async fn racing_holds(
    n: i32,
    store: impl Fn(i32) -> Arc<SqliteStore>,
    slot_id: SlotId,
    key: impl Fn(i32) -> String,
    now: Timestamp,
) -> Vec<HoldOutcome> {
    race(n, |i| {
        let (store, key) = (store(i), key(i));
        async move { hold(&*store, slot_id, &key, now).await }
    })
    .await
}

/// (created, sold out) of racing holds that may each be created or find the slot sold out.
fn created_or_sold_out(outcomes: Vec<HoldOutcome>) -> (i32, i32) {
    let (mut created, mut sold_out) = (0, 0);
    for outcome in outcomes {
        match outcome {
            HoldOutcome::Created(_) => created += 1,
            HoldOutcome::SoldOut => sold_out += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    (created, sold_out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousand_racing_holds_take_exactly_the_capacity() {
    let db = TempDb::new("race1000");
    let store = Arc::new(db.store().await);
    let slot_id = slot(&*store, 10).await;

    let by_one = |_| Arc::clone(&store);
    let outcomes = racing_holds(1000, by_one, slot_id, |i| format!("k-{i}"), at(0)).await;
    assert_eq!(created_or_sold_out(outcomes), (10, 990));
    assert_eq!(
        store
            .get_slot(slot_id)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining,
        0
    );
    assert_counts(store.pool(), slot_id, (10, 0, 10, 0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_racing_holds_with_one_key_make_one_hold() {
    let db = TempDb::new("onekey");
    let store = Arc::new(db.store().await);
    let slot_id = slot(&*store, 100).await;

    let by_one = |_| Arc::clone(&store);
    let outcomes = racing_holds(50, by_one, slot_id, |_| "the-key".to_owned(), at(0)).await;
    let mut created = Vec::new();
    let mut replayed = Vec::new();
    for outcome in outcomes {
        match outcome {
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
    assert_invariant(store.pool(), slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_race_like_two_processes() {
    let db = TempDb::new("twostores");
    let stores = TwoStores::open(&db).await;
    let slot_id = slot(&*stores.a, 7).await;

    let by_turns = |i| stores.take_turns(i);
    let outcomes = racing_holds(400, by_turns, slot_id, |i| format!("k-{i}"), at(0)).await;
    let (created, _) = created_or_sold_out(outcomes);
    assert_eq!(created, 7);
    assert_eq!(
        stores
            .b
            .get_slot(slot_id)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining,
        0
    );
    assert_invariant(stores.a.pool(), slot_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reclaims_never_return_a_unit_twice() {
    let db = TempDb::new("reclaimrace");
    let stores = TwoStores::open(&db).await;
    let a = &*stores.a;
    let slot_id = slot(a, 5).await;
    for i in 0..5 {
        created(hold(a, slot_id, &format!("old-{i}"), at(0)).await);
    }
    // Ten minutes later all five holds have expired: 40 racing holds from two stores may take
    // exactly the five reclaimed units.
    let later = at(0) + Duration::minutes(10);
    let by_turns = |i| stores.take_turns(i);
    let outcomes = racing_holds(40, by_turns, slot_id, |i| format!("new-{i}"), later).await;
    let (created, _) = created_or_sold_out(outcomes);
    assert_eq!(created, 5);
    assert_eq!(counts(a.pool(), slot_id).await, (5, 0, 5, 0));
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
    // For each hold, a confirm, a cancel and a new hold race.
    race(3 * ids.len() as i32, |j| {
        let (s, i) = (Arc::clone(&store), j / 3);
        let id = ids[i as usize];
        async move {
            match j % 3 {
                0 => {
                    s.confirm_hold(id, &slot_booking::Scope::BackOffice, at(1))
                        .await
                        .unwrap();
                }
                1 => {
                    s.cancel_hold(id, &slot_booking::Scope::BackOffice, at(2))
                        .await
                        .unwrap();
                }
                _ => {
                    hold(&*s, slot_id, &format!("n-{i}"), at(3)).await;
                }
            }
        }
    })
    .await;
    assert_invariant(store.pool(), slot_id).await;
}

/// Holds from two stores (two processes, as far as SQLite can tell) race capacity changes,
/// closing and reopening on one slot: every change is decided by the slot row under the write
/// lock, so the invariant holds and lowering never takes a unit that is held (a refusal
/// reports more units taken than the capacity asked for).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_race_capacity_changes_and_closing() {
    let db = TempDb::new("adminrace");
    let stores = TwoStores::open(&db).await;
    let a = &*stores.a;
    let slot_id = slot(a, 10).await;
    race(300, |i| {
        let store = stores.take_turns(i);
        async move {
            match i % 10 {
                0 => {
                    let capacity = 1 + (i / 10) % 15;
                    match store
                        .change_capacity(slot_id, capacity.into(), at(0))
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
        }
    })
    .await;
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
        let stores = TwoStores::open(&db).await;
        let a = &*stores.a;
        let slot_id = slot(a, 3).await;
        let removals = race(40, |i| {
            let store = stores.take_turns(i);
            async move {
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
            }
        })
        .await;
        let removed: i32 = removals.into_iter().map(i32::from).sum();
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
