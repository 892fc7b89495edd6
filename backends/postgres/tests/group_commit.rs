//! Group commit of a slot's holds (`src/group.rs`): concurrent holds of one slot decided in one
//! statement, each answered as it would be alone.

mod common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use common::*;
use slot_booking::{HoldOutcome, HoldStore, TransactionWrites};
use slot_booking_postgres::PostgresStore;
use sqlx::{AssertSqlSafe, Connection};

/// Waits until some backend of the database waits for a lock of `kind` (`pg_locks.locktype`, a
/// `LIKE` pattern)
/// while running a statement that contains `text`: the signal that a statement reached the
/// lock it is meant to wait for.
async fn wait_for_lock(ctx: &Ctx, kind: &str, text: &str) {
    wait_for_locks(ctx, kind, text, 1).await;
}

/// Waits until `n` backends wait so (see [`wait_for_lock`]).
async fn wait_for_locks(ctx: &Ctx, kind: &str, text: &str, n: i64) {
    let watcher = ctx.url_pool().await;
    for _ in 0..2_000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE NOT l.granted AND l.locktype LIKE $1 AND a.query LIKE '%' || $2 || '%'",
        )
        .bind(kind)
        .bind(text)
        .fetch_one(&watcher)
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(5)).await;
    }
    panic!("not {n} statements containing {text:?} waited for a {kind} lock within 10 s");
}

/// Hold requests queued behind one that waits for the slot's row are placed in groups; the
/// units sold are exactly the capacity, each hold has its key and its `hold_placed` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_waiting_for_a_slot_are_placed_together() {
    let Some(ctx) = setup("holds_waiting_for_a_slot_are_placed_together").await else {
        return;
    };
    let store = Arc::new(ctx.store.clone());
    let slot_id = slot(&*store, 150).await;
    // Another session holds the slot's row, so the first hold waits and the rest queue.
    let mut blocker = sqlx::PgConnection::connect(&ctx.url).await.unwrap();
    let mut tx = blocker.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM \"{}\".slots WHERE id = $1 FOR NO KEY UPDATE",
        ctx.schema()
    )))
    .bind(slot_id.get())
    .execute(&mut *tx)
    .await
    .unwrap();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { hold(&*store, slot_id, &format!("g-{i}"), at(0)).await })
        })
        .collect();
    let s = ctx.schema();
    wait_for_lock(
        &ctx,
        "transactionid",
        &format!("\"{s}\".slots SET remaining"),
    )
    .await;
    tx.rollback().await.unwrap();
    let (mut created, mut sold_out) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            HoldOutcome::Created(_) => created += 1,
            HoldOutcome::SoldOut => sold_out += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!((created, sold_out), (150, 50));
    let groups = store.group_commits();
    assert!(groups.groups >= 1 && groups.largest > 1, "{groups:?}");
    assert_eq!(counts(&store, slot_id).await, (150, 0, 150, 0));
    assert_invariant(&store, slot_id).await;
    let (keys, placed): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM \"{s}\".hold_keys k JOIN \"{s}\".holds h \
                 ON h.id = k.hold_id AND h.idempotency_key = k.idempotency_key \
                 WHERE h.slot_id = $1), \
                (SELECT count(*) FROM \"{s}\".events e JOIN \"{s}\".holds h ON h.id = e.hold_id \
                 WHERE e.kind = 'hold_placed' AND h.slot_id = $1)"
    )))
    .bind(slot_id.get())
    .fetch_one(ctx.pool())
    .await
    .unwrap();
    assert_eq!(
        (keys, placed),
        (150, 150),
        "each hold has its key and its event"
    );
}

/// A key inserted by another transaction after a group's statement began fails the whole
/// statement, which leaves nothing behind; every request of the group is then placed alone:
/// the others are created, and the key's request is answered as its key says.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_taken_under_a_group_sends_its_requests_alone() {
    let Some(ctx) = setup("a_key_taken_under_a_group_sends_its_requests_alone").await else {
        return;
    };
    let store = Arc::new(ctx.store.clone());
    let (hot, other) = (slot(&*store, 10).await, slot(&*store, 10).await);
    let s = ctx.schema();
    // The key's owner: a caller's transaction that places a hold with key "taken" on the other
    // slot and has not committed.
    let mut owner = sqlx::PgConnection::connect(&ctx.url).await.unwrap();
    let mut owner_tx = owner.begin().await.unwrap();
    let taken = key("taken");
    let placed = store
        .on(&mut owner_tx)
        .create_hold(request(other, &taken, at(0)))
        .await
        .unwrap();
    assert!(matches!(placed.outcome, HoldOutcome::Created(_)));
    // A blocker on the hot slot's row, so that the first hold waits and the next two form a
    // group.
    let mut blocker = sqlx::PgConnection::connect(&ctx.url).await.unwrap();
    let mut tx = blocker.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM \"{s}\".slots WHERE id = $1 FOR NO KEY UPDATE"
    )))
    .bind(hot.get())
    .execute(&mut *tx)
    .await
    .unwrap();
    let spawn = |k: &'static str| {
        let store = Arc::clone(&store);
        tokio::spawn(async move { hold(&*store, hot, k, at(0)).await })
    };
    let first = spawn("first");
    wait_for_lock(
        &ctx,
        "transactionid",
        &format!("\"{s}\".slots SET remaining"),
    )
    .await;
    let (grouped, keyed) = (spawn("grouped"), spawn("taken"));
    // Both queued behind the first, which holds the slot's lane while it waits for the row.
    while store.holds_waiting(hot) < 2 {
        tokio::task::yield_now().await;
    }
    tx.rollback().await.unwrap();
    assert!(matches!(first.await.unwrap(), HoldOutcome::Created(_)));
    // The group's statement inserts "taken" into the key table and waits for the owner's
    // transaction, which holds that key.
    wait_for_lock(
        &ctx,
        "transactionid",
        &format!("\"{s}\".hold_keys k WHERE k.idempotency_key = r.key"),
    )
    .await;
    assert_eq!(store.group_commits().groups, 1);
    owner_tx.commit().await.unwrap();
    let (grouped, keyed) = (grouped.await.unwrap(), keyed.await.unwrap());
    assert!(matches!(grouped, HoldOutcome::Created(_)), "{grouped:?}");
    assert!(matches!(keyed, HoldOutcome::KeyReused(_)), "{keyed:?}");
    assert_eq!(counts(&store, hot).await, (10, 8, 2, 0));
    assert_eq!(counts(&store, other).await, (10, 9, 1, 0));
    assert_invariant(&store, hot).await;
}

/// A group never mixes in holds of another slot, and a full slot's group sells nothing while
/// another slot's sells on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn groups_are_per_slot() {
    let Some(ctx) = setup("groups_are_per_slot").await else {
        return;
    };
    let store: Arc<PostgresStore> = Arc::new(ctx.store.clone());
    let (small, large) = (slot(&*store, 3).await, slot(&*store, 100).await);
    let tasks: Vec<_> = (0..120)
        .map(|i| {
            let store = Arc::clone(&store);
            let slot_id = if i % 2 == 0 { small } else { large };
            tokio::spawn(async move {
                (
                    slot_id,
                    hold(&*store, slot_id, &format!("p-{i}"), at(0)).await,
                )
            })
        })
        .collect();
    let mut created = std::collections::HashMap::new();
    for task in tasks {
        let (slot_id, outcome) = task.await.unwrap();
        match outcome {
            HoldOutcome::Created(hold) => {
                assert_eq!(hold.slot_id, slot_id);
                *created.entry(slot_id).or_insert(0) += 1;
            }
            HoldOutcome::SoldOut => assert_eq!(slot_id, small),
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(created[&small], 3);
    assert_eq!(created[&large], 60);
    assert_invariant(&store, small).await;
    assert_invariant(&store, large).await;
    assert_eq!(
        store
            .get_slot(large)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining,
        40
    );
}

/// Two groups on two slots whose keys overlap, arriving in opposite orders, never deadlock:
/// each statement takes its keys in key order (the lock order is the slot's row, then the keys
/// by key). The one that commits first keeps the shared keys; the other's requests go alone
/// and find them in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn groups_sharing_keys_take_them_in_one_order() {
    let Some(ctx) = setup("groups_sharing_keys_take_them_in_one_order").await else {
        return;
    };
    let store = Arc::new(ctx.store.clone());
    let (a, b) = (slot(&*store, 10).await, slot(&*store, 10).await);
    let s = ctx.schema();
    // Two callers' transactions, each holding an uncommitted key ("g-a", "g-b") that one group
    // will wait for in the middle of its keys (each on a slot of its own: a caller's hold keeps
    // its slot's row locked until the caller commits).
    let mut gates = Vec::new();
    for _ in 0..2 {
        gates.push(sqlx::PgConnection::connect(&ctx.url).await.unwrap());
    }
    let mut gate_txs = Vec::new();
    for (conn, gate) in gates.iter_mut().zip(["g-a", "g-b"]) {
        let other = slot(&*store, 10).await;
        let mut tx = conn.begin().await.unwrap();
        let placed = store
            .on(&mut tx)
            .create_hold(request(other, &key(gate), at(0)))
            .await
            .unwrap();
        assert!(matches!(placed.outcome, HoldOutcome::Created(_)));
        gate_txs.push(tx);
    }
    // Blockers on both slots' rows: each slot's first hold waits, and its group queues.
    let mut blockers = Vec::new();
    for slot_id in [a, b] {
        let mut conn = sqlx::PgConnection::connect(&ctx.url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "SELECT 1 FROM \"{s}\".slots WHERE id = $1 FOR NO KEY UPDATE"
        )))
        .bind(slot_id.get())
        .execute(&mut conn)
        .await
        .unwrap();
        blockers.push(conn);
    }
    let mut tasks = Vec::new();
    // Slot a's group arrives as d-1, g-a, d-2; slot b's as d-2, g-b, d-1.
    for (n, (slot_id, keys)) in [(a, ["d-1", "g-a", "d-2"]), (b, ["d-2", "g-b", "d-1"])]
        .into_iter()
        .enumerate()
    {
        let spawn = |k: &'static str| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { (slot_id, k, hold(&*store, slot_id, k, at(0)).await) })
        };
        tasks.push(spawn(if n == 0 { "a-first" } else { "b-first" }));
        wait_for_locks(
            &ctx,
            "transactionid",
            &format!("\"{s}\".slots SET remaining"),
            n as i64 + 1,
        )
        .await;
        for (queued, k) in keys.into_iter().enumerate() {
            tasks.push(spawn(k));
            while store.holds_waiting(slot_id) < queued + 1 {
                tokio::task::yield_now().await;
            }
        }
    }
    for mut blocker in blockers {
        sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    }
    // Both groups run, each stopped at its gate's key.
    wait_for_locks(
        &ctx,
        "transactionid",
        &format!("\"{s}\".hold_keys k WHERE k.idempotency_key = r.key"),
        2,
    )
    .await;
    for tx in gate_txs {
        tx.rollback().await.unwrap();
    }
    let mut outcomes = std::collections::BTreeMap::new();
    for task in tasks {
        let (slot_id, k, outcome) = task.await.unwrap();
        let kind = match outcome {
            HoldOutcome::Created(hold) => {
                assert_eq!(hold.slot_id, slot_id);
                "created"
            }
            HoldOutcome::KeyReused(_) => "key reused",
            other => panic!("unexpected outcome {other:?}"),
        };
        outcomes.insert((slot_id == a, k), kind);
    }
    // Whichever group committed first kept d-1 and d-2; the other slot's requests for them
    // found them in use.
    let winner_is_a = outcomes[&(true, "d-1")] == "created";
    for k in ["d-1", "d-2"] {
        assert_eq!(
            outcomes[&(true, k)] == "created",
            winner_is_a,
            "{outcomes:?}"
        );
        assert_eq!(
            outcomes[&(false, k)] == "created",
            !winner_is_a,
            "{outcomes:?}"
        );
    }
    for k in [
        (true, "a-first"),
        (true, "g-a"),
        (false, "b-first"),
        (false, "g-b"),
    ] {
        assert_eq!(outcomes[&k], "created", "{outcomes:?}");
    }
    assert!(store.group_commits().groups >= 2);
    assert_invariant(&store, a).await;
    assert_invariant(&store, b).await;
}

/// A group whose statement began before a capacity raise committed, and locked the slot's row
/// after it, places its holds on the raised row: it writes `remaining` and `capacity` both from
/// the row it locked (with `capacity` from its snapshot beside the locked `remaining`, the
/// update's first constraint check failed `remaining <= capacity`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_behind_a_capacity_raise_places_its_holds() {
    let Some(ctx) = setup("a_group_behind_a_capacity_raise_places_its_holds").await else {
        return;
    };
    let store = Arc::new(ctx.store.clone());
    let slot_id = slot(&*store, 3).await;
    let s = ctx.schema();
    // The raise, from 3 to 10 units, left uncommitted: it holds the slot's row.
    let mut raiser = sqlx::PgConnection::connect(&ctx.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut raiser).await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{s}\".slots SET capacity = 10, remaining = remaining + 7 WHERE id = $1"
    )))
    .bind(slot_id.get())
    .execute(&mut raiser)
    .await
    .unwrap();
    // A first hold takes the slot's lane and waits for the row; two more queue behind it.
    let first = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { hold(&*store, slot_id, "first", at(0)).await })
    };
    wait_for_lock(
        &ctx,
        "transactionid",
        &format!("\"{s}\".slots SET remaining"),
    )
    .await;
    let grouped: Vec<_> = ["g-1", "g-2"]
        .into_iter()
        .map(|k| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { hold(&*store, slot_id, k, at(0)).await })
        })
        .collect();
    while store.holds_waiting(slot_id) < 2 {
        tokio::task::yield_now().await;
    }
    // The first caller goes away: the lane passes to the two queued, whose statement starts
    // (its snapshot before the raise) and waits for the row too (for the row's tuple lock, when
    // the first caller's statement still waits for the raise).
    first.abort();
    wait_for_lock(&ctx, "%", "WITH ORDINALITY").await;
    sqlx::query("COMMIT").execute(&mut raiser).await.unwrap();
    for task in grouped {
        let outcome = task.await.unwrap();
        assert!(matches!(outcome, HoldOutcome::Created(_)), "{outcome:?}");
    }
    assert!(store.group_commits().groups >= 1);
    let (capacity, remaining, held, _) = counts(&store, slot_id).await;
    assert_eq!(capacity, 10);
    // The first caller's statement may still have run after it went away.
    assert!(held == 2 || held == 3, "{held}");
    assert_eq!(remaining, 10 - held);
    assert_invariant(&store, slot_id).await;
}
