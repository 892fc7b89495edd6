//! Group commit: concurrent holds through one store are committed together, each caller
//! answered by its own statement. The holds are queued behind a transaction that holds the
//! store's write queue, so every one of them is waiting (`SqliteStore::holds_waiting`) when the
//! queue is let go: the batch is then certain, not a matter of timing.
//!
//! Commits are counted by a commit hook that the pool's `after_connect` sets on every
//! connection it makes, which SQLite calls once per committed write transaction. A pool of
//! several connections has the holds written on the store's writer connection (taken from the
//! pool, so it has the hook too, and detached); a pool of one, through the pool.

mod common;

use slot_booking::HoldStore;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use slot_booking::{
    ConsumerId, EventKind, EventStore, HoldOutcome, IdempotencyKey, SlotId, TransactionalStore,
};
use slot_booking_sqlite::SqliteStore;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use tokio::task::JoinHandle;

/// A migrated store on `db` with a pool of `connections`, each counting its commits in
/// `commits`.
async fn counting_store(db: &TempDb, connections: u32, commits: &Arc<AtomicU64>) -> SqliteStore {
    let options = SqliteStore::configure(SqliteConnectOptions::from_str(&db.url()).unwrap());
    let counter = Arc::clone(commits);
    let pool = SqlitePoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(connections)
        .after_connect(move |conn, _| {
            let counter = Arc::clone(&counter);
            Box::pin(async move {
                conn.lock_handle().await?.set_commit_hook(move || {
                    counter.fetch_add(1, Ordering::SeqCst);
                    true
                });
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .unwrap();
    let store = SqliteStore::new(pool);
    store.migrate().await.unwrap();
    store
}

/// A hold placed from a task of its own, at `at(1)`.
fn spawn_hold(store: &SqliteStore, slot_id: SlotId, k: &str) -> JoinHandle<HoldOutcome> {
    let (store, k) = (store.clone(), k.to_owned());
    tokio::spawn(async move {
        let k = IdempotencyKey::new(k).unwrap();
        store
            .create_hold(request(slot_id, &k, at(1)))
            .await
            .unwrap()
            .outcome
    })
}

/// Waits until `n` holds wait in the store's queue: each task has left its request and waits
/// for its answer or the write queue. Yields rather than sleeps: the count is the signal.
async fn until_waiting(store: &SqliteStore, n: usize) {
    while store.holds_waiting() < n {
        tokio::task::yield_now().await;
    }
}

/// Forty holds waiting together are committed by one transaction (more than one call's worth
/// of statements, so the batch also goes to SQLite in two calls): thirty-seven on fresh keys
/// are created, the same request twice is created once and replayed once (the second insert of
/// the key fails on the unique key inside the batch, undoing only itself), and a hold on a
/// sold-out slot is refused; every other caller still gets its hold. On the store's writer
/// connection (a pool of several): one commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holds_share_one_transaction() {
    let commits = forty_holds_waiting_together(4).await;
    assert_eq!(commits, 1, "one commit");
}

/// The same through a pool of one connection: one commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holds_share_one_commit_through_the_pool() {
    let commits = forty_holds_waiting_together(1).await;
    assert_eq!(commits, 1, "one commit");
}

/// The scenario of the two tests above on a pool of `connections`; the commits the pool's
/// connections made while the holds were written.
async fn forty_holds_waiting_together(connections: u32) -> u64 {
    let db = TempDb::new("group_commit");
    let commits = Arc::new(AtomicU64::new(0));
    let store = counting_store(&db, connections, &commits).await;
    let open = slot(&store, 100).await;
    let full = slot(&store, 1).await;
    created(hold(&store, full, "full-held", at(0)).await);

    // The write queue held: every hold below waits in the store's queue.
    let blocker = store.begin().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..37 {
        tasks.push((format!("k{i}"), spawn_hold(&store, open, &format!("k{i}"))));
    }
    tasks.push(("dup".to_owned(), spawn_hold(&store, open, "dup")));
    tasks.push(("dup".to_owned(), spawn_hold(&store, open, "dup")));
    tasks.push(("sold-out".to_owned(), spawn_hold(&store, full, "sold-out")));
    until_waiting(&store, tasks.len()).await;

    let (commits_before, groups_before) = (commits.load(Ordering::SeqCst), store.group_commits());
    // A rollback commits nothing: every commit counted from here is the holds'.
    store.rollback(blocker).await.unwrap();
    let mut outcomes = Vec::new();
    for (k, task) in tasks {
        outcomes.push((k, task.await.unwrap()));
    }
    let commits = commits.load(Ordering::SeqCst) - commits_before;

    let groups = store.group_commits();
    assert_eq!(groups.groups - groups_before.groups, 1);
    assert_eq!(groups.requests - groups_before.requests, 40);
    assert_eq!(groups.largest, 40);

    let mut created_keys = Vec::new();
    let (mut replayed, mut sold_out) = (0, 0);
    for (k, outcome) in &outcomes {
        match outcome {
            HoldOutcome::Created(h) => {
                assert_eq!(h.slot_id, open, "{k}");
                // Each caller is answered with its own hold: the row with its key.
                let stored: String = sqlx::query_scalar(
                    "SELECT idempotency_key FROM slot_booking_holds WHERE id = ?1",
                )
                .bind(h.hold_id.get())
                .fetch_one(store.pool())
                .await
                .unwrap();
                assert_eq!(&stored, k);
                created_keys.push(k.clone());
            }
            HoldOutcome::Replayed(h) if k == "dup" => {
                assert_eq!(h.slot_id, open);
                replayed += 1;
            }
            HoldOutcome::SoldOut if k == "sold-out" => sold_out += 1,
            other => panic!("{k}: {other:?}"),
        }
    }
    assert_eq!((created_keys.len(), replayed, sold_out), (38, 1, 1));
    created_keys.sort();
    created_keys.dedup();
    assert_eq!(
        created_keys.len(),
        38,
        "each fresh key and `dup`, once each"
    );
    assert_eq!(counts(store.pool(), open).await, (100, 62, 38, 0));
    assert_counts(store.pool(), full, (1, 0, 1, 0)).await;

    // One `hold_placed` each, in the batch's commit.
    let reader = ConsumerId::new("reader").unwrap();
    let placed = store
        .read_events(&reader, 1_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::HoldPlaced && e.slot_id == open)
        .count();
    assert_eq!(placed, 38);
    commits
}

/// A caller that goes away while its hold waits in the queue places no hold: the writer skips
/// a request nobody waits for. The others waiting with it are committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_gone_before_its_batch_places_no_hold() {
    let db = TempDb::new("group_gone");
    let commits = Arc::new(AtomicU64::new(0));
    let store = counting_store(&db, 4, &commits).await;
    let open = slot(&store, 10).await;

    let blocker = store.begin().await.unwrap();
    let gone = spawn_hold(&store, open, "gone");
    let stays = [spawn_hold(&store, open, "a"), spawn_hold(&store, open, "b")];
    until_waiting(&store, 3).await;
    gone.abort();
    // Awaiting an aborted task returns once it has been dropped, its request with nobody
    // waiting for it.
    assert!(gone.await.unwrap_err().is_cancelled());
    store.rollback(blocker).await.unwrap();
    for task in stays {
        created(task.await.unwrap());
    }
    assert_counts(store.pool(), open, (10, 8, 2, 0)).await;
    assert!(matches!(
        hold(&store, open, "gone", at(2)).await,
        HoldOutcome::Created(_)
    ));
}

/// One caller at a time: no group, the autocommit statement alone, one commit per hold.
#[tokio::test]
async fn a_lone_hold_commits_alone() {
    let db = TempDb::new("group_alone");
    let commits = Arc::new(AtomicU64::new(0));
    let store = counting_store(&db, 4, &commits).await;
    let open = slot(&store, 10).await;
    let before = commits.load(Ordering::SeqCst);
    for k in ["a", "b", "c"] {
        created(hold(&store, open, k, at(1)).await);
    }
    assert_eq!(commits.load(Ordering::SeqCst) - before, 3);
    assert_eq!(store.group_commits().groups, 0);
}

/// The writer's connection is detached from the pool: closing the pool does not wait for it,
/// and a hold after the close is refused as before (the pool's error), the writer's connection
/// dropped.
#[tokio::test]
async fn closing_the_pool_stops_the_writer() {
    let db = TempDb::new("group_close");
    let commits = Arc::new(AtomicU64::new(0));
    let store = counting_store(&db, 4, &commits).await;
    let open = slot(&store, 10).await;
    created(hold(&store, open, "before", at(1)).await);
    store.pool().close().await;
    let k = key("after");
    let refused = store
        .create_hold(request(open, &k, at(1)))
        .await
        .unwrap_err();
    assert!(refused.is_transient(), "{refused:?}");
}
