//! What the PostgreSQL benchmarks share (`benches/postgres.rs`, `benches/flash_sale.rs`): a
//! pool of 8 connections, a fresh schema, slots through the engine.

use std::sync::Arc;

use chrono::Utc;
use slot_booking::{BookingEngine, NewSlot, SlotId};
use slot_booking_postgres::PostgresStore;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::AssertSqlSafe;

/// The store's connections in every PostgreSQL benchmark.
pub const CONNECTIONS: u32 = 8;

pub async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(CONNECTIONS)
        .min_connections(CONNECTIONS)
        .test_before_acquire(false)
        .connect(url)
        .await
        .expect("connect to DATABASE_URL")
}

/// A store on `schema`, dropped and migrated afresh.
pub async fn fresh_store(url: &str, schema: &str) -> PostgresStore {
    let pool = pool(url).await;
    sqlx::query(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let store = PostgresStore::with_schema(pool, schema).unwrap();
    store.migrate().await.unwrap();
    store
}

/// `n` slots of `capacity` starting a minute apart tomorrow.
pub async fn slots(
    engine: &BookingEngine<Arc<PostgresStore>>,
    n: i64,
    capacity: i32,
) -> Vec<SlotId> {
    let start = Utc::now() + chrono::Duration::days(1);
    let mut ids = Vec::new();
    for i in 0..n {
        let starts_at = start + chrono::Duration::minutes(i);
        let slot = engine
            .create_slot(NewSlot::new(
                starts_at,
                starts_at + chrono::Duration::hours(1),
                capacity,
            ))
            .await
            .unwrap();
        ids.push(slot.slot_id);
    }
    ids
}
