//! SQLite hold throughput: the engine over `SqliteStore` against a plain `rusqlite` loop running
//! the same two statements in one `BEGIN IMMEDIATE` transaction per hold, with the same schema,
//! the same pragmas (WAL, `synchronous = NORMAL`, `busy_timeout`) on the same file system.

// criterion_group!/criterion_main! generate undocumented items.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use slot_booking::{BookingEngine, HoldRequest, IdempotencyKey, NewSlot, SlotId, Store};
use slot_booking_sqlite::SqliteStore;

const SLOTS: i64 = 1_000;
const SCHEMA: &str = include_str!("../backends/sqlite/migrations/0001_create_slots_and_holds.sql");

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sb_bench_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("bench.db")
}

fn rusqlite_db(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    // The migration's `{p}` is the store's table prefix; the baseline's tables have none.
    conn.execute_batch(&SCHEMA.replace("{p}", "")).unwrap();
    let start = (Utc::now() + chrono::Duration::days(1)).timestamp_micros();
    for i in 0..SLOTS {
        let starts_at = start + i * 60_000_000;
        conn.execute(
            "INSERT INTO slots (starts_at, ends_at, capacity, remaining) VALUES (?1, ?2, ?3, ?3)",
            (starts_at, starts_at + 3_600_000_000, i32::MAX),
        )
        .unwrap();
    }
    conn
}

fn holds(c: &mut Criterion) {
    let mut group = c.benchmark_group("sqlite_holds_one_writer");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(5));

    let path = temp_db("rusqlite");
    let mut conn = rusqlite_db(&path);
    let mut round = 0u64;
    group.bench_function("rusqlite loop (baseline)", |b| {
        b.iter_custom(|iters| {
            round += 1;
            let now = Utc::now().timestamp_micros();
            let started = Instant::now();
            for i in 0..iters {
                let key = format!("r{round}-{i}");
                let slot = (i as i64 % SLOTS) + 1;
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .unwrap();
                tx.prepare_cached(
                    "UPDATE slots SET remaining = remaining - 1 \
                     WHERE id = ?1 AND remaining > 0 AND starts_at > ?2",
                )
                .unwrap()
                .execute((slot, now))
                .unwrap();
                let id: i64 = tx
                    .prepare_cached(
                        "INSERT INTO holds (slot_id, idempotency_key, status, expires_at, created_at) \
                         SELECT ?1, ?2, 'held', ?3, ?4 WHERE changes() = 1 \
                         RETURNING id, slot_id, status, expires_at, confirmed_at, cancelled_at",
                    )
                    .unwrap()
                    .query_row((slot, &key, now + 300_000_000, now), |row| row.get(0))
                    .unwrap();
                tx.commit().unwrap();
                black_box(id);
            }
            started.elapsed()
        })
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let path = temp_db("engine");
    let url = format!("sqlite://{}", path.display());
    let (engine, slots) = rt.block_on(async {
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let engine = BookingEngine::new(store);
        let start = Utc::now() + chrono::Duration::days(1);
        let mut slots: Vec<SlotId> = Vec::new();
        for i in 0..SLOTS {
            let starts_at = start + chrono::Duration::minutes(i);
            let slot = engine
                .create_slot(NewSlot::new(
                    starts_at,
                    starts_at + chrono::Duration::hours(1),
                    i32::MAX,
                ))
                .await
                .unwrap();
            slots.push(slot.slot_id);
        }
        (engine, Arc::new(slots))
    });
    group.bench_function("BookingEngine::hold over SqliteStore", |b| {
        b.iter_custom(|iters| {
            round += 1;
            let engine = engine.clone();
            let slots = Arc::clone(&slots);
            rt.block_on(async move {
                let started = Instant::now();
                for i in 0..iters {
                    let key = format!("e{round}-{i}");
                    black_box(
                        engine
                            .hold(slots[i as usize % slots.len()], &key)
                            .await
                            .unwrap(),
                    );
                }
                started.elapsed()
            })
        })
    });
    group.bench_function("SqliteStore::create_hold (no engine)", |b| {
        b.iter_custom(|iters| {
            round += 1;
            let engine = engine.clone();
            let slots = Arc::clone(&slots);
            rt.block_on(async move {
                let now = Utc::now();
                let expires_at = now + chrono::Duration::minutes(5);
                let started = Instant::now();
                for i in 0..iters {
                    let key = IdempotencyKey::new(format!("s{round}-{i}")).unwrap();
                    let request = HoldRequest {
                        slot_id: slots[i as usize % slots.len()],
                        owner: None,
                        quantity: 1,
                        key: &key,
                        now,
                        expires_at,
                    };
                    black_box(engine.store().create_hold(request).await.unwrap());
                }
                started.elapsed()
            })
        })
    });
    group.finish();

    // What one statement costs through sqlx-sqlite on its own (a worker thread per
    // connection: every call is a round trip between threads): the floor under any hold.
    let mut floor = c.benchmark_group("sqlite_round_trip");
    let pool = engine.store().pool().clone();
    floor.bench_function("sqlx SELECT 1", |b| {
        b.to_async(&rt).iter(|| async {
            let one: i64 = sqlx::query_scalar("SELECT 1")
                .fetch_one(&pool)
                .await
                .unwrap();
            black_box(one)
        })
    });
    floor.bench_function("rusqlite SELECT 1", |b| {
        b.iter(|| {
            let one: i64 = conn
                .prepare_cached("SELECT 1")
                .unwrap()
                .query_row([], |row| row.get(0))
                .unwrap();
            black_box(one)
        })
    });
    floor.finish();
}

criterion_group!(benches, holds);
criterion_main!(benches);
