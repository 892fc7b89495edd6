//! Writes inside the caller's transaction: `MySqlStore::on` on a sqlx transaction of the
//! store's pool, next to an application's own table.

mod common;

use chrono::{Duration, Utc};
use common::*;
use slot_booking::{
    BookingEngine, BookingError, EngineTransaction, HoldId, HoldOutcome, HoldRequest, HoldStore,
    NewSlot, Scope, SlotId, TransactionWrites,
};
use slot_booking_mysql::sqlx::mysql::MySqlConnection;
use slot_booking_mysql::sqlx::Connection;
use slot_booking_mysql::MySqlStore;

/// A store on a fresh database with the application's own table, `orders`, beside its tables.
async fn store_with_orders(guard: &DatabaseGuard) -> MySqlStore {
    let store = guard.store().await;
    slot_booking_mysql::sqlx::query(
        "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, hold_id BIGINT NOT NULL UNIQUE) ENGINE = InnoDB",
    )
    .execute(store.pool())
    .await
    .unwrap();
    store
}

/// The application's order row for `hold_id`, written in `tx`.
async fn order_in(tx: &mut EngineTransaction<MySqlStore>, hold_id: HoldId) {
    tx.run(move |tx| Box::pin(async move { insert_order(tx, hold_id).await }))
        .await
        .unwrap();
}

async fn insert_order(conn: &mut MySqlConnection, hold_id: HoldId) {
    slot_booking_mysql::sqlx::query("INSERT INTO orders (hold_id) VALUES (?)")
        .bind(hold_id.get())
        .execute(conn)
        .await
        .unwrap();
}

async fn orders(store: &MySqlStore) -> Vec<i64> {
    slot_booking_mysql::sqlx::query_scalar("SELECT hold_id FROM orders ORDER BY hold_id")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

async fn new_slot(engine: &BookingEngine<MySqlStore>, capacity: i32) -> SlotId {
    let start = Utc::now() + Duration::days(1);
    engine
        .create_slot(NewSlot::new(start, start + Duration::hours(1), capacity))
        .await
        .unwrap()
        .slot_id
}

async fn remaining(store: &MySqlStore, slot_id: SlotId) -> i32 {
    store
        .get_slot(slot_id)
        .await
        .unwrap()
        .unwrap()
        .stored_remaining
}

async fn stored(store: &MySqlStore, hold_id: HoldId) -> bool {
    store
        .get_hold(hold_id, &Scope::BackOffice, Utc::now())
        .await
        .unwrap()
        .outcome
        .is_some()
}

#[tokio::test]
async fn a_hold_and_the_callers_row_commit_together_and_roll_back_together() {
    let guard = database(&server_url(), "txhold").await;
    let store = store_with_orders(&guard).await;
    let engine = BookingEngine::new(store.clone());
    let slot = new_slot(&engine, 2).await;

    // Committed: both stay.
    let mut tx = engine.transaction().await.unwrap();
    let placed = tx.hold(slot, "kept").await.unwrap();
    order_in(&mut tx, placed.hold.hold_id).await;
    // Not committed yet: another connection sees neither.
    assert!(!stored(&store, placed.hold.hold_id).await);
    assert!(orders(&store).await.is_empty());
    tx.commit().await.unwrap();
    assert!(stored(&store, placed.hold.hold_id).await);
    assert_eq!(orders(&store).await, vec![placed.hold.hold_id.get()]);
    assert_eq!(remaining(&store, slot).await, 1);

    // Rolled back: neither stays, the unit is back, the key is free again.
    let mut tx = engine.transaction().await.unwrap();
    let gone = tx.hold(slot, "gone").await.unwrap();
    order_in(&mut tx, gone.hold.hold_id).await;
    tx.rollback().await.unwrap();
    assert!(!stored(&store, gone.hold.hold_id).await);
    assert_eq!(orders(&store).await, vec![placed.hold.hold_id.get()]);
    assert_eq!(remaining(&store, slot).await, 1);
    let again = engine.hold(slot, "gone").await.unwrap();
    assert!(!again.replayed);
}

#[tokio::test]
async fn a_refused_hold_leaves_the_callers_transaction_usable() {
    let guard = database(&server_url(), "txrefused").await;
    let store = store_with_orders(&guard).await;
    let engine = BookingEngine::new(store.clone());
    let full = new_slot(&engine, 1).await;
    let open = new_slot(&engine, 1).await;
    let taken = engine.hold(full, "first").await.unwrap();

    let mut tx = engine.transaction().await.unwrap();
    order_in(&mut tx, taken.hold.hold_id).await;
    let refused = tx.hold(full, "second").await;
    assert!(
        matches!(refused, Err(BookingError::SoldOut { .. })),
        "{refused:?}"
    );
    // The transaction goes on: the caller's row is still in it, another hold and another row
    // join it, and all commit together.
    let placed = tx.hold(open, "third").await.unwrap();
    order_in(&mut tx, placed.hold.hold_id).await;
    let in_tx: i64 = tx
        .run(|tx| {
            Box::pin(
                slot_booking_mysql::sqlx::query_scalar("SELECT count(*) FROM orders")
                    .fetch_one(&mut **tx),
            )
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(in_tx, 2);
    tx.commit().await.unwrap();

    let mut expected = vec![taken.hold.hold_id.get(), placed.hold.hold_id.get()];
    expected.sort_unstable();
    assert_eq!(orders(&store).await, expected);
    assert_eq!(remaining(&store, full).await, 0);
    assert_eq!(remaining(&store, open).await, 0);
}

#[tokio::test]
async fn writes_on_a_connection_outside_a_transaction_commit_on_their_own() {
    let guard = database(&server_url(), "txown").await;
    let store = store_with_orders(&guard).await;
    let engine = BookingEngine::new(store.clone());
    let slot = new_slot(&engine, 1).await;

    let mut conn = MySqlConnection::connect(&guard.url()).await.unwrap();
    let (own, late) = (key("own"), key("late"));
    let hold = |key| HoldRequest {
        slot_id: slot,
        key,
        owner: None,
        quantity: 1,
        now: Utc::now(),
        expires_at: Utc::now() + Duration::minutes(5),
    };
    let placed = store.on(&mut conn).create_hold(hold(&own)).await.unwrap();
    let HoldOutcome::Created(placed) = placed.outcome else {
        panic!("{placed:?}")
    };
    assert!(stored(&store, placed.hold_id).await);
    let refused = store.on(&mut conn).create_hold(hold(&late)).await.unwrap();
    assert!(
        matches!(refused.outcome, HoldOutcome::SoldOut),
        "{refused:?}"
    );
    assert_eq!(remaining(&store, slot).await, 0);
    conn.close().await.unwrap();
}
