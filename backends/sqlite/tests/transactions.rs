//! Writes in a transaction shared with the caller's own rows (`BookingEngine::transaction`,
//! the caller's statements through `EngineTransaction::run`), and the store's writes on a
//! connection the caller supplies (`SqliteStore::on`).

mod common;

use slot_booking::HoldStore;
use std::sync::Arc;

use chrono::Duration;
use common::*;
use slot_booking::{
    BookingEngine, BookingError, EngineTransaction, Hold, HoldId, HoldOutcome, HoldStatus,
    ManualClock, NewHold, NewSlot, Scope, SlotId, TransactionWrites,
};
use slot_booking_sqlite::SqliteStore;
use sqlx::{Connection, SqliteConnection, SqlitePool};

/// An engine on `clock` that reads the store on every availability call.
fn engine(store: SqliteStore, clock: &ManualClock) -> BookingEngine<SqliteStore> {
    BookingEngine::builder(store)
        .clock(clock.clone())
        .cache_period(std::time::Duration::ZERO)
        .build()
}

/// A migrated store on `db` with the caller's own table, `orders`, in the same file.
async fn store_with_orders(db: &TempDb) -> SqliteStore {
    let store = db.store().await;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, hold_id INTEGER NOT NULL UNIQUE)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    store
}

async fn insert_order(conn: &mut SqliteConnection, hold_id: HoldId) {
    sqlx::query("INSERT INTO orders (hold_id) VALUES (?1)")
        .bind(hold_id.get())
        .execute(conn)
        .await
        .unwrap();
}

/// The caller's order row for `hold_id`, written in `tx` through `run`, on the connection of
/// the store's transaction (`SqliteTransaction::connection`).
async fn order_in(tx: &mut EngineTransaction<SqliteStore>, hold_id: HoldId) {
    tx.run(move |tx| Box::pin(async move { insert_order(tx.connection(), hold_id).await }))
        .await
        .unwrap();
}

async fn orders(pool: &SqlitePool) -> Vec<i64> {
    sqlx::query_scalar("SELECT hold_id FROM orders ORDER BY hold_id")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// The hold as stored (its stored status, not resolved at a time), read with SQL.
async fn stored_status(conn: &mut SqliteConnection, hold_id: HoldId) -> Option<String> {
    sqlx::query_scalar("SELECT status FROM slot_booking_holds WHERE id = ?1")
        .bind(hold_id.get())
        .fetch_optional(conn)
        .await
        .unwrap()
}

async fn stored_hold(store: &SqliteStore, hold_id: HoldId) -> Option<Hold> {
    store
        .get_hold(hold_id, &Scope::BackOffice, t0())
        .await
        .unwrap()
        .outcome
}

async fn slot_count(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM slot_booking_slots")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A confirm in a transaction shared with the caller (`BookingEngine::transaction`) and the
/// caller's order row (through `EngineTransaction::run`) commit together; rolled back, neither
/// stays.
#[tokio::test]
async fn a_confirm_and_the_callers_order_commit_together() {
    let db = TempDb::new("tx_orders");
    let store = store_with_orders(&db).await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 2))
        .await
        .unwrap()
        .slot_id;
    let a = engine.hold(slot_id, "a").await.unwrap().hold;
    let b = engine.hold(slot_id, "b").await.unwrap().hold;

    let mut tx = engine.transaction().await.unwrap();
    let booked = tx.confirm(&Scope::Anonymous, a.hold_id).await.unwrap();
    assert_eq!(booked.status, HoldStatus::Confirmed);
    order_in(&mut tx, booked.hold_id).await;
    // Outside the transaction, nothing yet.
    assert_eq!(
        stored_hold(&store, a.hold_id).await.map(|h| h.status),
        Some(HoldStatus::Held)
    );
    assert!(orders(store.pool()).await.is_empty());
    tx.commit().await.unwrap();
    assert_eq!(
        stored_hold(&store, a.hold_id).await.map(|h| h.status),
        Some(HoldStatus::Confirmed)
    );
    assert_eq!(orders(store.pool()).await, vec![a.hold_id.get()]);

    let mut tx = engine.transaction().await.unwrap();
    tx.confirm(&Scope::Anonymous, b.hold_id).await.unwrap();
    // The caller's row through the transaction `run` hands over.
    order_in(&mut tx, b.hold_id).await;
    tx.rollback().await.unwrap();
    assert_eq!(
        stored_hold(&store, b.hold_id).await.map(|h| h.status),
        Some(HoldStatus::Held)
    );
    assert_eq!(orders(store.pool()).await, vec![a.hold_id.get()]);
    assert_counts(store.pool(), slot_id, (2, 0, 1, 1)).await;
}

/// The same, one transaction after the other in a loop, through the store's own transactions
/// (`TransactionalStore`, which `BookingEngine::transaction` begins): the caller's row goes
/// through `SqliteTransaction::connection`, and the store's write queue is free after each.
#[tokio::test]
async fn a_store_transaction_carries_the_callers_order_too() {
    let db = TempDb::new("tx_store_orders");
    let store = store_with_orders(&db).await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 2))
        .await
        .unwrap()
        .slot_id;
    let a = engine.hold(slot_id, "a").await.unwrap().hold;
    let b = engine.hold(slot_id, "b").await.unwrap().hold;

    for (hold_id, commit) in [(a.hold_id, true), (b.hold_id, false)] {
        let mut tx = engine.transaction().await.unwrap();
        tx.confirm(&Scope::Anonymous, hold_id).await.unwrap();
        order_in(&mut tx, hold_id).await;
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
    }
    assert_eq!(
        stored_hold(&store, a.hold_id).await.map(|h| h.status),
        Some(HoldStatus::Confirmed)
    );
    assert_eq!(
        stored_hold(&store, b.hold_id).await.map(|h| h.status),
        Some(HoldStatus::Held)
    );
    assert_eq!(orders(store.pool()).await, vec![a.hold_id.get()]);
    assert_counts(store.pool(), slot_id, (2, 0, 1, 1)).await;
    // The store's queue is free again: a write through the pool goes through.
    engine.confirm(&Scope::Anonymous, b.hold_id).await.unwrap();
}

/// A hold, a cancel, a capacity change, a close, a new slot and a removal, rolled back (or
/// dropped uncommitted), leave nothing; the hold's key is free again and makes a new hold.
#[tokio::test]
async fn a_rollback_leaves_nothing_and_frees_the_key() {
    let db = TempDb::new("tx_rollback");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 3))
        .await
        .unwrap()
        .slot_id;
    let spare = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 1))
        .await
        .unwrap()
        .slot_id;
    let booked = engine.hold(slot_id, "booked").await.unwrap().hold;
    engine
        .confirm(&Scope::Anonymous, booked.hold_id)
        .await
        .unwrap();
    let before = (
        store.get_slot(slot_id).await.unwrap(),
        store.get_slot(spare).await.unwrap(),
        stored_hold(&store, booked.hold_id).await,
    );

    for roll_back in [true, false] {
        let mut tx = engine.transaction().await.unwrap();
        let placed = tx
            .place_hold(NewHold::new(slot_id, "again").quantity(2))
            .await
            .unwrap();
        assert!(!placed.replayed);
        tx.cancel(&Scope::Anonymous, booked.hold_id).await.unwrap();
        assert_eq!(
            tx.change_capacity(slot_id, 10)
                .await
                .unwrap()
                .stored_remaining,
            8
        );
        assert!(tx.close_sales(slot_id).await.unwrap().closed);
        tx.create_slot(NewSlot::new(at(9000), at(9600), 4))
            .await
            .unwrap();
        assert!(tx.remove_slot(spare).await.unwrap().removed_at.is_some());
        if roll_back {
            tx.rollback().await.unwrap();
        } else {
            // Dropped uncommitted, the transaction rolls back (sqlx rolls a dropped
            // transaction back before the connection's next use).
            drop(tx);
        }
        let after = (
            store.get_slot(slot_id).await.unwrap(),
            store.get_slot(spare).await.unwrap(),
            stored_hold(&store, booked.hold_id).await,
        );
        assert_eq!(after, before, "roll back: {roll_back}");
        assert_eq!(slot_count(store.pool()).await, 2, "the new slot is gone");
        assert_counts(store.pool(), slot_id, (3, 2, 0, 1)).await;
        assert_counts(store.pool(), spare, (1, 1, 0, 0)).await;
    }

    let again = engine
        .place_hold(NewHold::new(slot_id, "again").quantity(2))
        .await
        .unwrap();
    assert!(!again.replayed, "the key is free: a new hold");
    assert_eq!(again.hold.status, HoldStatus::Held);
    let keyed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM slot_booking_holds WHERE idempotency_key = ?1")
            .bind("again")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(keyed, 1);
    assert_counts(store.pool(), slot_id, (3, 0, 2, 1)).await;
}

/// Refusals inside the caller's transaction — a taken key, sold out after a reclaim that does
/// not fit, a capacity change and a removal that do not fit after reclaiming, an expired
/// hold — change nothing (the reclaims they tried included), and the transaction goes on: a
/// later hold in it commits.
#[tokio::test]
async fn a_refused_request_leaves_the_transaction_usable() {
    let db = TempDb::new("tx_refusals");
    let store = store_with_orders(&db).await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let full = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 3))
        .await
        .unwrap()
        .slot_id;
    let other = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 1))
        .await
        .unwrap()
        .slot_id;
    let taken = engine
        .place_hold(NewHold::new(full, "taken").quantity(2))
        .await
        .unwrap()
        .hold;
    let short = engine
        .place_hold(NewHold::new(full, "short").lifetime(std::time::Duration::from_secs(60)))
        .await
        .unwrap()
        .hold;
    clock.advance(Duration::seconds(61));

    let mut tx = engine.transaction().await.unwrap();
    assert!(matches!(
        tx.hold(other, "taken").await,
        Err(BookingError::IdempotencyKeyReused { .. })
    ));
    // Reclaiming `short` frees one unit: not the two asked for.
    assert!(matches!(
        tx.place_hold(NewHold::new(full, "big").quantity(2)).await,
        Err(BookingError::SoldOut { .. })
    ));
    assert!(matches!(
        tx.change_capacity(full, 1).await,
        Err(BookingError::CapacityTaken { taken: 2, .. })
    ));
    assert!(matches!(
        tx.remove_slot(full).await,
        Err(BookingError::SlotInUse {
            held: 2,
            confirmed: 0,
            ..
        })
    ));
    assert!(matches!(
        tx.confirm(&Scope::Anonymous, short.hold_id).await,
        Err(BookingError::HoldExpired { .. })
    ));
    assert!(matches!(
        tx.hold(SlotId(full.get() + 1000), "nowhere").await,
        Err(BookingError::SlotNotFound { .. })
    ));
    // Inside the transaction, nothing moved: the reclaims were undone.
    let (short_id, full_id) = (short.hold_id, full.get());
    let (status, remaining) = tx
        .run(move |tx| {
            Box::pin(async move {
                let conn = tx.connection();
                let status = stored_status(conn, short_id).await;
                let remaining: i64 =
                    sqlx::query_scalar("SELECT remaining FROM slot_booking_slots WHERE id = ?1")
                        .bind(full_id)
                        .fetch_one(&mut *conn)
                        .await
                        .unwrap();
                (status, remaining)
            })
        })
        .await
        .unwrap();
    assert_eq!(status.as_deref(), Some("held"));
    assert_eq!(remaining, 0);
    let fine = tx.hold(other, "fine").await.unwrap().hold;
    order_in(&mut tx, fine.hold_id).await;
    tx.commit().await.unwrap();

    assert_eq!(
        stored_hold(&store, fine.hold_id).await.map(|h| h.status),
        Some(HoldStatus::Held)
    );
    assert_eq!(orders(store.pool()).await, vec![fine.hold_id.get()]);
    let mut conn = store.pool().acquire().await.unwrap();
    assert_eq!(
        stored_status(&mut conn, short.hold_id).await.as_deref(),
        Some("held"),
        "no refused reclaim committed"
    );
    drop(conn);
    assert_counts(store.pool(), full, (3, 0, 3, 0)).await;
    assert_counts(store.pool(), other, (1, 0, 1, 0)).await;
    assert!(stored_hold(&store, taken.hold_id).await.is_some());
}

/// On a connection outside any transaction, each call is a transaction of its own: committed
/// when it returns, nothing left open after a refusal.
#[tokio::test]
async fn writes_on_a_bare_connection_commit_each_call() {
    let db = TempDb::new("tx_bare");
    let store = db.store().await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot_id = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 1))
        .await
        .unwrap()
        .slot_id;
    let mut conn = store.pool().acquire().await.unwrap();
    let (bare, more) = (key("bare"), key("more"));
    let mut w = store.on(&mut conn);
    let placed = created(
        w.create_hold(request(slot_id, &bare, at(0)))
            .await
            .unwrap()
            .outcome,
    );
    let refused = w.create_hold(request(slot_id, &more, at(0))).await.unwrap();
    assert!(
        matches!(refused.outcome, HoldOutcome::SoldOut),
        "{refused:?}"
    );
    assert!(!w.connection().is_in_transaction());
    drop(w);
    // Seen from another connection at once.
    assert_eq!(
        stored_hold(&store, placed.hold_id).await.map(|h| h.status),
        Some(HoldStatus::Held)
    );
    assert_counts(store.pool(), slot_id, (1, 0, 1, 0)).await;
}

/// 48 tasks race for one slot of five units, each in its own transaction placing and
/// confirming a hold; every third hold placed (the first included) rolls back. Half use the
/// transactions of an engine on one store, half those of an engine on a second store with a
/// pool of its own (another process, as far as SQLite can tell). Exactly five units are sold,
/// rolled-back holds leave nothing, every call succeeds or is refused as sold out (no
/// `SQLITE_BUSY`), and the invariant holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_transactions_never_oversell() {
    let db = TempDb::new("tx_race");
    let a = db.store().await;
    let b = db.store().await;
    let clock = ManualClock::new(t0());
    let engine_a = Arc::new(engine(a.clone(), &clock));
    let engine_b = Arc::new(engine(b.clone(), &clock));
    let slot_id = engine_a
        .create_slot(NewSlot::new(at(3600), at(7200), 5))
        .await
        .unwrap()
        .slot_id;

    // Counted in the order holds are placed (under SQLite's write lock, one transaction at a
    // time), not the order tasks are spawned: which tasks get the lock first is up to the
    // scheduler, and the first hold placed must roll back for the test to see a rollback.
    let placed_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..48 {
        let (engine_a, engine_b) = (Arc::clone(&engine_a), Arc::clone(&engine_b));
        let placed_count = Arc::clone(&placed_count);
        let commit = move || {
            !placed_count
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                .is_multiple_of(3)
        };
        tasks.spawn(async move {
            let key = format!("tx-{i}");
            // Each engine's own transactions, on its own store.
            let engine = if i % 2 == 0 { engine_a } else { engine_b };
            let mut tx = engine.transaction().await.unwrap();
            let placed = match tx.hold(slot_id, &key).await {
                Ok(placed) => placed.hold,
                // Dropped uncommitted: rolled back.
                Err(BookingError::SoldOut { .. }) => return None,
                Err(other) => panic!("task {i}: {other:?}"),
            };
            let commit = commit();
            tx.confirm(&Scope::Anonymous, placed.hold_id).await.unwrap();
            if commit {
                tx.commit().await.unwrap();
            } else {
                tx.rollback().await.unwrap();
            }
            Some((placed.hold_id, commit))
        });
    }
    let mut committed = Vec::new();
    let mut rolled_back = 0;
    while let Some(result) = tasks.join_next().await {
        match result.unwrap() {
            Some((hold_id, true)) => committed.push(hold_id),
            Some((_, false)) => rolled_back += 1,
            None => {}
        }
    }
    // Transactions are serial under SQLite's write lock: each saw every earlier commit, so
    // the slot sold out only once five holds had committed.
    assert_eq!(committed.len(), 5, "committed {committed:?}");
    assert!(rolled_back > 0);
    for hold_id in &committed {
        assert_eq!(
            stored_hold(&a, *hold_id).await.map(|h| h.status),
            Some(HoldStatus::Confirmed)
        );
    }
    let holds: i64 = sqlx::query_scalar("SELECT count(*) FROM slot_booking_holds")
        .fetch_one(a.pool())
        .await
        .unwrap();
    assert_eq!(holds, 5, "rolled-back holds left no row");
    assert_counts(a.pool(), slot_id, (5, 0, 0, 5)).await;
}

/// `EngineTransaction` renews and reads like the engine: renewing and reading an anonymous
/// hold in the transaction, the renewal committing with it.
#[tokio::test]
async fn within_renews_and_reads_anonymous_holds() {
    let db = TempDb::new("tx_short_forms");
    let store = store_with_orders(&db).await;
    let clock = ManualClock::new(t0());
    let engine = engine(store.clone(), &clock);
    let slot = engine
        .create_slot(NewSlot::new(at(3600), at(7200), 1))
        .await
        .unwrap();
    let placed = engine.hold(slot.slot_id, "renew-me").await.unwrap().hold;
    clock.advance(Duration::minutes(4));

    let mut tx = engine.transaction().await.unwrap();
    let renewed = tx
        .renew(&Scope::Anonymous, placed.hold_id, None)
        .await
        .unwrap();
    assert!(renewed.expires_at > placed.expires_at);
    assert_eq!(
        tx.get_hold(&Scope::Anonymous, placed.hold_id)
            .await
            .unwrap(),
        renewed
    );
    tx.commit().await.unwrap();
    assert_eq!(
        engine
            .get_hold(&Scope::Anonymous, placed.hold_id)
            .await
            .unwrap(),
        renewed
    );
}

/// A bad table prefix is a permanent failure when it reaches a store error.
#[tokio::test]
async fn a_bad_table_prefix_is_a_failed_store_error() {
    let error = SqliteStore::new(SqlitePool::connect_lazy("sqlite::memory:").unwrap())
        .with_table_prefix("no spaces")
        .unwrap_err();
    let error: slot_booking::StoreError = error.into();
    assert_eq!(error.kind(), slot_booking::StoreErrorKind::Failed);
    // SQLite keeps `sqlite_` for its own tables.
    let reserved = SqliteStore::new(SqlitePool::connect_lazy("sqlite::memory:").unwrap())
        .with_table_prefix("sqlite_x")
        .unwrap_err();
    assert_eq!(reserved.reserved, Some("sqlite_"));
}
