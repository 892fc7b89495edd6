//! Shared setup for the PostgreSQL store's tests: a fresh schema per test (dropped when the
//! test's guard goes away, pass or fail), timestamps, keys and an invariant check in SQL.
//!
//! Tests use the server `DATABASE_URL` names or, without it, PostgreSQL's default local
//! address. When none answers they print that they were SKIPPED, and the binary says at exit
//! how many were, unless `CI` is set: then they panic, so CI never skips them ([`gate`]).

#![allow(dead_code)]

pub mod gate;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration as StdDuration, SystemTime, UNIX_EPOCH};

use chrono::{Duration, TimeZone, Utc};
use slot_booking::conformance::kit::{Owned, SlotTally};
use slot_booking::{HoldOutcome, HoldRequest, IdempotencyKey, NewSlot, SlotId, Store, Timestamp};
use slot_booking_postgres::PostgresStore;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::AssertSqlSafe;

/// Connections per test pool.
pub const POOL_SIZE: u32 = 12;

/// The server's URL ([`gate::server_url`]), or `None` after printing that `test` is skipped.
/// Panics without a server on CI.
pub fn database_url(test: &str) -> Option<String> {
    gate::server_url(test)
}

pub async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(POOL_SIZE)
        .test_before_acquire(false)
        .acquire_timeout(StdDuration::from_secs(60))
        .connect(url)
        .await
        .unwrap()
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A schema name unique to this process, test and instant.
pub fn unique_schema(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{}_{n}_{}", std::process::id(), now_nanos())
}

/// Drops a schema when dropped, from a thread of its own (Drop cannot await).
pub struct SchemaGuard {
    pub url: String,
    pub schema: String,
}

impl SchemaGuard {
    pub fn new(url: &str, schema: &str) -> SchemaGuard {
        SchemaGuard {
            url: url.to_owned(),
            schema: schema.to_owned(),
        }
    }
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let url = self.url.clone();
        let schema = self.schema.clone();
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                if let Ok(pool) = PgPoolOptions::new()
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .max_connections(1)
                    .connect(&url)
                    .await
                {
                    let _ = sqlx::query(AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                    )))
                    .execute(&pool)
                    .await;
                    pool.close().await;
                }
            });
        });
        let _ = dropper.join();
    }
}

/// A migrated store on a fresh schema, plus what a test needs to make more stores on it.
pub struct Ctx {
    pub url: String,
    pub store: PostgresStore,
    pub guard: SchemaGuard,
}

impl Ctx {
    pub fn schema(&self) -> &str {
        &self.guard.schema
    }

    pub fn pool(&self) -> &PgPool {
        self.store.pool()
    }

    /// A pool of one connection on the database, for queries outside the store's schema.
    pub async fn url_pool(&self) -> PgPool {
        one_connection(&self.url).await
    }

    /// Another store on the same schema with a pool of its own: another process, in effect.
    pub async fn second_store(&self) -> PostgresStore {
        let store = PostgresStore::with_schema(pool(&self.url).await, self.schema()).unwrap();
        store.migrate().await.unwrap();
        store
    }
}

/// A fresh, migrated schema for `test`, or `None` (skipped) without a server.
pub async fn setup(test: &str) -> Option<Ctx> {
    let url = database_url(test)?;
    let schema = unique_schema("sbtest");
    let guard = SchemaGuard::new(&url, &schema);
    let store = PostgresStore::with_schema(pool(&url).await, &schema).unwrap();
    store.migrate().await.unwrap();
    send_pending_statistics(store.pool()).await;
    Some(Ctx { url, store, guard })
}

/// Makes every open connection of `pool` send its pending statistics now. The migration's
/// DDL scans the empty tables (an index build or a backfill counts as a sequential scan of 0
/// rows); a backend left idle sends them up to 10 s later, inside a test's count otherwise.
pub async fn send_pending_statistics(pool: &PgPool) {
    let mut held = Vec::new();
    for _ in 0..pool.size() {
        let mut connection = pool.acquire().await.unwrap();
        for statement in ["SELECT pg_stat_force_next_flush()", "SELECT 1"] {
            sqlx::query(statement)
                .execute(&mut *connection)
                .await
                .unwrap();
        }
        held.push(connection);
    }
}

/// A fixed instant with a non-zero microsecond part, so round trips are checked to the µs.
pub fn t0() -> Timestamp {
    Utc.timestamp_opt(1_900_000_000, 123_456_000)
        .single()
        .unwrap()
}

pub fn at(secs: i64) -> Timestamp {
    t0() + Duration::seconds(secs)
}

pub fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

/// A slot starting an hour after `t0()`.
pub async fn slot(store: &impl Store, capacity: i32) -> SlotId {
    store
        .create_slot(
            &NewSlot::new(at(3600), at(7200), capacity),
            chrono::Utc::now(),
        )
        .await
        .unwrap()
        .slot_id
}

/// A hold request at `now`, expiring five minutes later.
pub fn request(slot_id: SlotId, key: &IdempotencyKey, now: Timestamp) -> HoldRequest<'_> {
    HoldRequest {
        slot_id,
        owner: None,
        quantity: 1,
        key,
        now,
        expires_at: now + Duration::minutes(5),
    }
}

pub async fn hold(store: &impl Store, slot_id: SlotId, k: &str, now: Timestamp) -> HoldOutcome {
    hold_units(store, slot_id, k, 1, now).await
}

/// A hold request for `quantity` units at `now`, expiring five minutes later.
pub async fn hold_units(
    store: &impl Store,
    slot_id: SlotId,
    k: &str,
    quantity: i32,
    now: Timestamp,
) -> HoldOutcome {
    let k = key(k);
    let mut request = request(slot_id, &k, now);
    request.quantity = quantity;
    store
        .create_hold(request)
        .await
        .unwrap_or_else(|error| panic!("hold {k:?} failed: {error}"))
        .outcome
}

/// The names of the tables in `schema`, in order.
pub async fn tables(pool: &PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = $1 ORDER BY table_name",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Counts with SQL: (capacity, remaining, units stored held, units confirmed) of a slot.
pub async fn counts(store: &PostgresStore, slot_id: SlotId) -> (i64, i64, i64, i64) {
    let s = store.schema();
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT capacity::int8, remaining::int8, \
           (SELECT coalesce(sum(quantity), 0) FROM \"{s}\".holds \
            WHERE slot_id = sl.id AND status = 'held'), \
           (SELECT coalesce(sum(quantity), 0) FROM \"{s}\".holds \
            WHERE slot_id = sl.id AND status = 'confirmed') \
         FROM \"{s}\".slots sl WHERE id = $1"
    )))
    .bind(slot_id.get())
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Asserts the capacity invariant on counts made with SQL, not through the store.
pub async fn assert_invariant(store: &PostgresStore, slot_id: SlotId) {
    let (capacity, remaining, held, confirmed) = counts(store, slot_id).await;
    SlotTally {
        capacity,
        remaining,
        held,
        confirmed,
        active: None,
    }
    .assert();
}

/// A store that owns its fresh schema: the schema is dropped when the store is (after its
/// pool), so a conformance case cleans up after itself.
pub type OwnedStore = Owned<PostgresStore, SchemaGuard>;

/// A migrated store on a fresh schema, or `None` without a server (after the SKIPPED notice;
/// a panic on CI).
pub async fn owned_store(test: &str) -> Option<OwnedStore> {
    let ctx = setup(test).await?;
    Some(Owned {
        store: ctx.store,
        guard: ctx.guard,
    })
}

/// A pool of one connection, whose statistics [`flush_statistics`] can send.
pub async fn one_connection(url: &str) -> PgPool {
    PgPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(1)
        .connect(url)
        .await
        .unwrap()
}

/// Runs `statements` on a connection of its own, whose statistics [`flush_statistics`] can
/// send once the caller is done with it.
pub async fn fixture(url: &str, statements: impl IntoIterator<Item = String>) -> PgPool {
    let writer = one_connection(url).await;
    for statement in statements {
        sqlx::query(AssertSqlSafe(statement))
            .execute(&writer)
            .await
            .unwrap();
    }
    writer
}

/// A store on `ctx`'s schema with a connection of its own, whose statistics
/// [`flush_statistics`] can send.
pub async fn one_connection_store(ctx: &Ctx) -> PostgresStore {
    PostgresStore::with_schema(one_connection(&ctx.url).await, ctx.schema()).unwrap()
}

/// Sends the connection's pending statistics: a backend sends them when it goes idle after
/// `pg_stat_force_next_flush()`, so before it answers the next query.
pub async fn flush_statistics(connection: PgPool) {
    for statement in ["SELECT pg_stat_force_next_flush()", "SELECT 1"] {
        sqlx::query(statement).execute(&connection).await.unwrap();
    }
    connection.close().await;
}

/// Index scans, index entries returned and rows read sequentially, over every index and the
/// table of holds in `schema`, as counted so far.
pub async fn hold_reads(ctx: &Ctx, schema: &str) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT coalesce(sum(i.idx_scan), 0)::int8, coalesce(sum(i.idx_tup_read), 0)::int8, \
                (SELECT coalesce(seq_tup_read, 0) FROM pg_stat_user_tables \
                 WHERE schemaname = $1 AND relname = 'holds') \
         FROM pg_stat_user_indexes i WHERE i.schemaname = $1 AND i.relname = 'holds'",
    )
    .bind(schema)
    .fetch_one(ctx.pool())
    .await
    .unwrap()
}

/// [`owned_store`], placing by the core's rules alone
/// ([`PostgresStore::without_fast_paths`]): the suite holds each fast path to the rule it
/// stands for by running on both.
pub async fn composed_store(test: &str) -> Option<OwnedStore> {
    let ctx = setup(test).await?;
    Some(Owned {
        store: ctx.store.without_fast_paths(),
        guard: ctx.guard,
    })
}
