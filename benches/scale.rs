//! Scale: how the availability load, the cold filtered read, hold latency and the cache's memory
//! grow with the number of future slots and connections, each figure next to a baseline doing
//! the same work measured in the same run. Prints a markdown table at the end.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench --bench scale
//! cargo bench --bench scale -- load    # one part only: load, cold, holds or bytes
//! ```
//!
//! Without `DATABASE_URL` the PostgreSQL figures are skipped (the memory store and SQLite still
//! run). PostgreSQL fixtures live in schemas `sb_bench_scale_*`, SQLite's in a temporary
//! directory; both are dropped and recreated by every run (and dropped at its end).
//!
//! 1. **load**: `Store::availability(now)` (what the engine's cache load runs) over 1,000,
//!    10,000 and 100,000 future slots on the memory store, SQLite and PostgreSQL, median of
//!    runs alternating with the baseline: a bare `SELECT` of the same future slot rows and
//!    columns on the same database (for the memory store, a clone of a `Vec` of the same
//!    entries). The fixture's mix, by slot id modulo 10 (capacity 10 each): 0–2 two active
//!    held units, 3 one confirmed unit, 4 one cancelled hold (history), 5 two held units expired
//!    a minute ago and not reclaimed, 6 sold out (one active hold of 10 units), 7–9 untouched.
//! 2. **cold**: with 200,000 future slots, a one-slot filtered `BookingEngine::availability`
//!    (`from`/`to` around one slot) right after `invalidate_availability` (the cache loads every
//!    future slot) against a bare `SELECT` of that one row; and the size of the unfiltered
//!    listing serialized as JSON.
//! 3. **holds**: hold latency p50/p99 on PostgreSQL with 1, 8 and 32 connections: N tasks, a
//!    pool of N, `BookingEngine::hold` with unique keys round-robin over 1,000 slots of ample
//!    capacity, against `pgbench -c N -M prepared` running `benches/pgbench/hold.sql` (the
//!    store's hold statement) with `--log`, in four alternating rounds each: 1 s of warm-up,
//!    then 2 s timed (the pgbench log's transactions that started in its first second are
//!    dropped); p50/p99 of the pooled per-hold latencies of each side.
//! 4. **bytes**: live heap bytes the engine's availability cache holds per 1,000 slots after
//!    one load of 1,000, 10,000 and 100,000 slots (the bytes freed when the loaded engine is
//!    dropped), counted by the bench binary's global allocator (`cap::Cap` over the system
//!    allocator, which counts live bytes), against `size_of::<AvailabilityEntry>()` per entry
//!    (a `Vec` of exactly the entries).

// No `main` docs needed for a bench binary.
#![allow(missing_docs)]

use std::alloc::System;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cap::Cap;
use chrono::{DateTime, Utc};
use slot_booking::{
    AvailabilityEntry, AvailabilityQuery, BookingEngine, HoldOutcome, HoldRequest, HoldStore,
    IdempotencyKey, MemoryStore, NewSlot, Scope, SlotId, Store, Transition,
};
use slot_booking_postgres::PostgresStore;
use slot_booking_sqlite::sqlx::sqlite::SqlitePool;
use slot_booking_sqlite::SqliteStore;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::AssertSqlSafe;

/// Counts live heap bytes for part 4 (one atomic add per allocation and per free: a small,
/// equal tax on everything this binary measures, baselines included).
#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

const SIZES: [i64; 3] = [1_000, 10_000, 100_000];
const COLD_SLOTS: i64 = 200_000;
const CONNECTIONS: [u32; 3] = [1, 8, 32];
const HOLD_SLOTS: i64 = 1_000;
const WARM_UP: Duration = Duration::from_secs(1);
const HOLD_RUN: Duration = Duration::from_secs(2);
const HOLD_ROUNDS: usize = 4;
const PGBENCH_SCRIPT: &str = include_str!("pgbench/hold.sql");
const SQLITE_SLOTS: &str = "slot_booking_slots";
const SQLITE_HOLDS: &str = "slot_booking_holds";

/// One line of the final table.
struct Line {
    what: String,
    ours: String,
    baseline: String,
    ratio: String,
}

#[derive(Default)]
struct Table(Vec<Line>);

impl Table {
    fn add(&mut self, what: String, ours: String, baseline: String, ratio: String) {
        eprintln!("  {what}: {ours} | {baseline} | {ratio}");
        self.0.push(Line {
            what,
            ours,
            baseline,
            ratio,
        });
    }

    fn print(&self) {
        println!();
        println!("| what | slot_booking | baseline | ratio |");
        println!("|---|---|---|---|");
        for l in &self.0 {
            println!("| {} | {} | {} | {} |", l.what, l.ours, l.baseline, l.ratio);
        }
    }
}

fn ms(seconds: f64) -> String {
    if seconds < 1e-3 {
        format!("{:.1} µs", seconds * 1e6)
    } else {
        format!("{:.2} ms", seconds * 1e3)
    }
}

fn ratio(ours: f64, baseline: f64) -> String {
    format!("{:.2}x", ours / baseline)
}

fn thousands(n: i64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// The `q`-quantile (0..=1) of sorted `times`, nearest rank.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((sorted.len() as f64) * q).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------------------------
// The fixture's mix, by slot id modulo 10.

const CAPACITY: i32 = 10;

/// `(id % 10, key suffix, status, expires in seconds from now, quantity)` of every fixture hold.
const PLAN: [(i64, i64, &str, i64, i32); 11] = [
    (0, 1, "held", 3600, 1),
    (0, 2, "held", 3600, 1),
    (1, 1, "held", 3600, 1),
    (1, 2, "held", 3600, 1),
    (2, 1, "held", 3600, 1),
    (2, 2, "held", 3600, 1),
    (3, 1, "confirmed", 3600, 1),
    (4, 1, "cancelled", 3600, 1),
    (5, 1, "held", -60, 1),
    (5, 2, "held", -60, 1),
    (6, 1, "held", 3600, 10),
];

/// The units a new hold could take on fixture slot `id`.
fn expected_remaining(id: i64) -> i32 {
    match id % 10 {
        0..=2 => 8,
        3 => 9,
        6 => 0,
        _ => 10,
    }
}

/// Checks a listing against the fixture; a mismatch is reported, not fatal (the SQL being
/// measured may be mid-change).
fn check(what: &str, entries: &[AvailabilityEntry], n: i64) {
    let wrong = entries
        .iter()
        .filter(|e| e.remaining != expected_remaining(e.slot_id.0))
        .count();
    if entries.len() as i64 != n || wrong > 0 {
        eprintln!(
            "WARNING {what}: {} entries listed (expected {n}), {wrong} with an unexpected remaining",
            entries.len()
        );
    }
}

fn plan_values_sql(expiry: impl Fn(i64) -> String) -> String {
    PLAN.iter()
        .map(|(m, k, status, expires, quantity)| {
            format!("({m}, {k}, '{status}', {}, {quantity})", expiry(*expires))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------------
// Memory store.

async fn memory_fixture(n: i64) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let now = Utc::now();
    let start = now + chrono::Duration::days(1);
    for i in 0..n {
        let starts_at = start + chrono::Duration::minutes(i);
        let slot = store
            .create_slot(
                &NewSlot::new(starts_at, starts_at + chrono::Duration::hours(1), CAPACITY),
                now,
            )
            .await
            .unwrap();
        let id = slot.slot_id.0;
        for (m, k, status, expires, quantity) in PLAN {
            if id % 10 != m {
                continue;
            }
            let key = IdempotencyKey::new(format!("fx-{id}-{k}")).unwrap();
            let placed = store
                .create_hold(HoldRequest {
                    slot_id: slot.slot_id,
                    key: &key,
                    owner: None,
                    quantity,
                    now,
                    expires_at: now + chrono::Duration::seconds(expires),
                })
                .await
                .unwrap()
                .outcome;
            let HoldOutcome::Created(hold) = placed else {
                panic!("fixture hold refused: {placed:?}")
            };
            let done = match status {
                "confirmed" => store.confirm_hold(hold.hold_id, &Scope::Anonymous, now),
                "cancelled" => store.cancel_hold(hold.hold_id, &Scope::Anonymous, now),
                _ => continue,
            };
            assert!(matches!(
                done.await.unwrap().outcome,
                Transition::Applied(_)
            ));
        }
    }
    store
}

// ---------------------------------------------------------------------------------------------
// SQLite.

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sb_bench_scale_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn sqlite_fixture(dir: &Path, n: i64) -> SqliteStore {
    let url = format!("sqlite://{}", dir.join("bench.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let now = Utc::now().timestamp_micros();
    let start = now + 86_400_000_000;
    let (s, h) = (SQLITE_SLOTS, SQLITE_HOLDS);
    let plan = plan_values_sql(|seconds| format!("{}", now + seconds * 1_000_000));
    let statements = [
        format!(
            "WITH RECURSIVE g(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM g WHERE x < {n} - 1) \
             INSERT INTO {s} (starts_at, ends_at, capacity, remaining) \
             SELECT {start} + x * 60000000, {start} + x * 60000000 + 3600000000, {CAPACITY}, \
                    {CAPACITY} FROM g"
        ),
        format!(
            "WITH p(m, k, status, expires_at, quantity) AS (VALUES {plan}) \
             INSERT INTO {h} (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                              cancelled_at, created_at, quantity) \
             SELECT sl.id, 'fx-' || sl.id || '-' || p.k, p.status, p.expires_at, \
                    CASE WHEN p.status = 'confirmed' THEN {now} END, \
                    CASE WHEN p.status = 'cancelled' THEN {now} END, {now} - 600000000, \
                    p.quantity \
             FROM {s} sl, p WHERE p.m = sl.id % 10"
        ),
        // The insert trigger took the held units; confirmed ones are taken here.
        format!(
            "UPDATE {s} SET remaining = capacity - \
                 (SELECT coalesce(sum(quantity), 0) FROM {h} \
                  WHERE slot_id = {s}.id AND status IN ('held', 'confirmed'))"
        ),
    ];
    for statement in statements {
        sqlx::query(AssertSqlSafe(statement))
            .execute(store.pool())
            .await
            .unwrap();
    }
    store
}

/// A slot row as the bare SQLite scan reads it (timestamps as stored: microseconds).
type SqliteRow = (i64, i64, i64, i32, i32, Option<String>);

async fn sqlite_bare(pool: &SqlitePool, now: DateTime<Utc>) -> usize {
    let rows: Vec<SqliteRow> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, starts_at, ends_at, capacity, remaining, resource FROM {SQLITE_SLOTS} \
         WHERE starts_at > ?1 AND closed = 0 AND removed_at IS NULL ORDER BY starts_at, id"
    )))
    .bind(now.timestamp_micros())
    .fetch_all(pool)
    .await
    .unwrap();
    rows.len()
}

async fn sqlite_bare_one(pool: &SqlitePool, from: DateTime<Utc>, to: DateTime<Utc>) -> usize {
    let rows: Vec<SqliteRow> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, starts_at, ends_at, capacity, remaining, resource FROM {SQLITE_SLOTS} \
         WHERE starts_at >= ?1 AND starts_at < ?2 AND closed = 0 AND removed_at IS NULL \
         ORDER BY starts_at, id"
    )))
    .bind(from.timestamp_micros())
    .bind(to.timestamp_micros())
    .fetch_all(pool)
    .await
    .unwrap();
    rows.len()
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL.

async fn pg_pool(url: &str, connections: u32) -> PgPool {
    PgPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(connections)
        .min_connections(connections)
        .test_before_acquire(false)
        .connect(url)
        .await
        .expect("connect to DATABASE_URL")
}

async fn pg_store(url: &str, schema: &str, connections: u32) -> PostgresStore {
    let pool = pg_pool(url, connections).await;
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

async fn pg_drop(store: &PostgresStore) {
    let schema = store.schema().to_owned();
    sqlx::query(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    store.pool().close().await;
}

async fn pg_fixture(url: &str, schema: &str, n: i64) -> PostgresStore {
    let store = pg_store(url, schema, 2).await;
    let s = schema;
    let plan = plan_values_sql(|seconds| format!("{seconds}"));
    let statements = [
        format!(
            "INSERT INTO {s}.slots (starts_at, ends_at, capacity, remaining) \
             SELECT now() + interval '1 day' + g * interval '1 minute', \
                    now() + interval '1 day' + g * interval '1 minute' + interval '1 hour', \
                    {CAPACITY}, {CAPACITY} \
             FROM generate_series(0, {n} - 1) g"
        ),
        format!(
            "WITH p(m, k, status, expires, quantity) AS (VALUES {plan}) \
             INSERT INTO {s}.holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                                    cancelled_at, created_at, quantity) \
             SELECT sl.id, 'fx-' || sl.id || '-' || p.k, p.status, \
                    now() + p.expires * interval '1 second', \
                    CASE WHEN p.status = 'confirmed' THEN now() END, \
                    CASE WHEN p.status = 'cancelled' THEN now() END, \
                    now() - interval '10 minutes', p.quantity \
             FROM {s}.slots sl JOIN p ON p.m = sl.id % 10"
        ),
        format!(
            "INSERT INTO {s}.hold_keys (idempotency_key, hold_id) \
             SELECT idempotency_key, id FROM {s}.holds"
        ),
        format!(
            "UPDATE {s}.slots sl SET remaining = sl.capacity - t.n \
             FROM (SELECT slot_id, sum(quantity)::int4 AS n FROM {s}.holds \
                   WHERE status IN ('held', 'confirmed') GROUP BY slot_id) t \
             WHERE t.slot_id = sl.id"
        ),
        format!("VACUUM ANALYZE {s}.slots"),
        format!("VACUUM ANALYZE {s}.holds"),
        format!("VACUUM ANALYZE {s}.hold_keys"),
    ];
    for statement in statements {
        sqlx::query(AssertSqlSafe(statement))
            .execute(store.pool())
            .await
            .unwrap();
    }
    store
}

/// A slot row as the bare PostgreSQL scan reads it.
type PgRow = (i64, DateTime<Utc>, DateTime<Utc>, i32, i32, Option<String>);

async fn pg_bare(store: &PostgresStore, now: DateTime<Utc>) -> usize {
    let rows: Vec<PgRow> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, starts_at, ends_at, capacity, remaining, resource FROM {}.slots \
         WHERE starts_at > $1 AND NOT closed AND removed_at IS NULL ORDER BY starts_at, id",
        store.schema()
    )))
    .bind(now)
    .fetch_all(store.pool())
    .await
    .unwrap();
    rows.len()
}

async fn pg_bare_one(store: &PostgresStore, from: DateTime<Utc>, to: DateTime<Utc>) -> usize {
    let rows: Vec<PgRow> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, starts_at, ends_at, capacity, remaining, resource FROM {}.slots \
         WHERE starts_at >= $1 AND starts_at < $2 AND NOT closed AND removed_at IS NULL \
         ORDER BY starts_at, id",
        store.schema()
    )))
    .bind(from)
    .bind(to)
    .fetch_all(store.pool())
    .await
    .unwrap();
    rows.len()
}

// ---------------------------------------------------------------------------------------------
// Part 1: the availability load against a bare scan.

/// Medians of `ours` and `baseline`, run alternately (2 untimed rounds first) until `budget`
/// has passed and at least 9 rounds were timed, at most 301.
async fn alternating<A, B, FA, FB>(
    budget: Duration,
    mut ours: A,
    mut baseline: B,
) -> (f64, f64, usize)
where
    A: FnMut() -> FA,
    B: FnMut() -> FB,
    FA: Future<Output = usize>,
    FB: Future<Output = usize>,
{
    for _ in 0..2 {
        ours().await;
        baseline().await;
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let started = Instant::now();
    while a.len() < 301 && (a.len() < 9 || started.elapsed() < budget) {
        let t = Instant::now();
        std::hint::black_box(ours().await);
        a.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        std::hint::black_box(baseline().await);
        b.push(t.elapsed().as_secs_f64());
    }
    let rounds = a.len();
    (median(&mut a), median(&mut b), rounds)
}

fn load_line(
    table: &mut Table,
    store: &str,
    n: i64,
    base: &str,
    (ours, baseline, rounds): (f64, f64, usize),
) {
    table.add(
        format!(
            "{store} `availability(now)`, {} future slots ({rounds} runs)",
            thousands(n)
        ),
        ms(ours),
        format!("{base}: {}", ms(baseline)),
        ratio(ours, baseline),
    );
}

async fn load(table: &mut Table, url: Option<&str>) {
    const BUDGET: Duration = Duration::from_millis(2500);
    for n in SIZES {
        eprintln!("load: {n} slots");
        let store = memory_fixture(n).await;
        let copy = store.availability(Utc::now()).await.unwrap().outcome;
        check("memory", &copy, n);
        let (st, c) = (&store, &copy);
        let figures = alternating(
            BUDGET,
            move || async move { st.availability(Utc::now()).await.unwrap().outcome.len() },
            move || async move { std::hint::black_box(c).clone().len() },
        )
        .await;
        load_line(
            table,
            "memory",
            n,
            "clone of a `Vec` of the same entries",
            figures,
        );
        drop(store);

        let dir = temp_dir(&format!("load_{n}"));
        let store = sqlite_fixture(&dir, n).await;
        check(
            "sqlite",
            &store.availability(Utc::now()).await.unwrap().outcome,
            n,
        );
        let st = &store;
        let figures = alternating(
            BUDGET,
            move || async move { st.availability(Utc::now()).await.unwrap().outcome.len() },
            move || sqlite_bare(st.pool(), Utc::now()),
        )
        .await;
        load_line(
            table,
            "SQLite",
            n,
            "bare `SELECT` of the slot rows",
            figures,
        );
        store.pool().close().await;
        let _ = std::fs::remove_dir_all(&dir);

        let Some(url) = url else { continue };
        let store = pg_fixture(url, &format!("sb_bench_scale_load_{n}"), n).await;
        check(
            "postgres",
            &store.availability(Utc::now()).await.unwrap().outcome,
            n,
        );
        let st = &store;
        let figures = alternating(
            BUDGET,
            move || async move { st.availability(Utc::now()).await.unwrap().outcome.len() },
            move || pg_bare(st, Utc::now()),
        )
        .await;
        load_line(
            table,
            "PostgreSQL",
            n,
            "bare `SELECT` of the slot rows",
            figures,
        );
        pg_drop(&store).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Part 2: a one-slot read on a cold cache over 200,000 slots, and the listing's JSON size.

async fn cold<S: Store, F, FB>(table: &mut Table, name: &str, store: S, bare_one: F)
where
    F: Fn(DateTime<Utc>, DateTime<Utc>) -> FB,
    FB: Future<Output = usize>,
{
    const RUNS: usize = 7;
    let engine = BookingEngine::new(store);
    let all = engine.availability(AvailabilityQuery::all()).await.unwrap();
    check(name, &all, COLD_SLOTS);
    let json = serde_json::to_vec(&all).unwrap().len();
    let target = all[all.len() / 2].clone();
    drop(all);
    let (from, to) = (
        target.starts_at,
        target.starts_at + chrono::Duration::seconds(1),
    );
    let query = AvailabilityQuery::all().from(from).to(to);

    let (mut cold, mut warm, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        engine.invalidate_availability();
        let t = Instant::now();
        let listing = engine.availability(query.clone()).await.unwrap();
        cold.push(t.elapsed().as_secs_f64());
        assert_eq!(listing.len(), 1);
        assert_eq!(listing[0].slot_id, target.slot_id);
    }
    // The cheap reads, many times over (a busy 2-core machine makes single reads noisy).
    for _ in 0..RUNS * 10 {
        let t = Instant::now();
        let listing = engine.availability(query.clone()).await.unwrap();
        warm.push(t.elapsed().as_secs_f64());
        std::hint::black_box(listing);
        let t = Instant::now();
        assert_eq!(bare_one(from, to).await, 1);
        bare.push(t.elapsed().as_secs_f64());
    }
    let (cold, warm, bare) = (median(&mut cold), median(&mut warm), median(&mut bare));
    let slots = thousands(COLD_SLOTS);
    if name == "memory" {
        table.add(
            format!("{name}: one-slot filtered `engine.availability` right after an invalidation, {slots} future slots ({RUNS} runs)"),
            ms(cold),
            format!("the same read from the warm cache ({} runs): {}", RUNS * 10, ms(warm)),
            ratio(cold, warm),
        );
    } else {
        table.add(
            format!("{name}: one-slot filtered `engine.availability` right after an invalidation, {slots} future slots ({RUNS} runs)"),
            ms(cold),
            format!("bare `SELECT` of that one slot row: {}", ms(bare)),
            ratio(cold, bare),
        );
        table.add(
            format!(
                "{name}: the same read from the warm cache ({} runs)",
                RUNS * 10
            ),
            ms(warm),
            format!("bare `SELECT` of that one slot row: {}", ms(bare)),
            ratio(warm, bare),
        );
    }
    table.add(
        format!("{name}: unfiltered listing of {slots} slots as JSON (`serde_json::to_vec`)"),
        format!(
            "{:.1} MB ({:.0} bytes a slot)",
            json as f64 / 1e6,
            json as f64 / COLD_SLOTS as f64
        ),
        String::new(),
        String::new(),
    );
}

async fn cold_reads(table: &mut Table, url: Option<&str>) {
    eprintln!("cold: {COLD_SLOTS} slots");
    let store = memory_fixture(COLD_SLOTS).await;
    cold(table, "memory", store, |_, _| async { 1 }).await;

    let dir = temp_dir("cold");
    let store = sqlite_fixture(&dir, COLD_SLOTS).await;
    let pool = store.pool().clone();
    cold(table, "SQLite", store, |from, to| {
        let pool = pool.clone();
        async move { sqlite_bare_one(&pool, from, to).await }
    })
    .await;
    pool.close().await;
    let _ = std::fs::remove_dir_all(&dir);

    let Some(url) = url else { return };
    let store = pg_fixture(url, "sb_bench_scale_cold", COLD_SLOTS).await;
    let bare = store.clone();
    cold(table, "PostgreSQL", store.clone(), |from, to| {
        let bare = bare.clone();
        async move { pg_bare_one(&bare, from, to).await }
    })
    .await;
    pg_drop(&store).await;
}

// ---------------------------------------------------------------------------------------------
// Part 3: hold latency on PostgreSQL against pgbench.

/// Latencies (seconds) of holds through the engine by `tasks` tasks, timed after `WARM_UP`
/// for `HOLD_RUN`.
async fn engine_latencies(
    engine: &BookingEngine<PostgresStore>,
    slots: &Arc<Vec<SlotId>>,
    tasks: u32,
) -> Result<Vec<f64>, String> {
    let measure_from = Instant::now() + WARM_UP;
    let deadline = measure_from + HOLD_RUN;
    let tag = Utc::now().timestamp_micros();
    let handles: Vec<_> = (0..tasks as usize)
        .map(|t| {
            let (engine, slots) = (engine.clone(), Arc::clone(slots));
            tokio::spawn(async move {
                let mut times = Vec::new();
                let mut i = 0_usize;
                loop {
                    let started = Instant::now();
                    if started >= deadline {
                        break;
                    }
                    let slot = slots[(i * tasks as usize + t) % slots.len()];
                    if let Err(error) = engine.hold(slot, &format!("scale-{tag}-{t}-{i}")).await {
                        return Err(error.to_string());
                    }
                    if started >= measure_from {
                        times.push(started.elapsed().as_secs_f64());
                    }
                    i += 1;
                }
                Ok(times)
            })
        })
        .collect();
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.unwrap()?);
    }
    Ok(all)
}

/// Per-transaction latencies (seconds) of `pgbench` running the hold statement with `clients`
/// clients, read from its `--log` after the first `WARM_UP`.
fn pgbench_latencies(
    url: &str,
    schema: &str,
    clients: u32,
    first: SlotId,
    last: SlotId,
) -> Option<Vec<f64>> {
    let dir = temp_dir(&format!("pgbench_{clients}"));
    let script = dir.join("hold.sql");
    std::fs::write(&script, PGBENCH_SCRIPT.replace("{schema}", schema)).ok()?;
    let threads = clients.min(2);
    let output = Command::new("pgbench")
        .args(["-n", "-M", "prepared", "-l"])
        .arg(format!("--log-prefix={}", dir.join("log").display()))
        .args(["-c", &clients.to_string(), "-j", &threads.to_string()])
        .args(["-T", &(WARM_UP + HOLD_RUN).as_secs().to_string()])
        .args([
            "-D",
            &format!("first={}", first.0),
            "-D",
            &format!("last={}", last.0),
        ])
        .arg("-f")
        .arg(&script)
        .arg(url)
        .output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            eprintln!(
                "pgbench failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            return None;
        }
        Err(error) => {
            eprintln!("pgbench unavailable: {error}");
            return None;
        }
    };
    drop(output);
    // Each line: client_id transaction_no latency_us script_no epoch_s epoch_us.
    let mut entries: Vec<(f64, f64)> = Vec::new();
    for file in std::fs::read_dir(&dir).ok()? {
        let path = file.ok()?.path();
        if !path.file_name()?.to_str()?.starts_with("log.") {
            continue;
        }
        for line in std::fs::read_to_string(&path).ok()?.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 6 {
                continue;
            }
            let latency: f64 = fields[2].parse().ok()?;
            let end = fields[4].parse::<f64>().ok()? + fields[5].parse::<f64>().ok()? / 1e6;
            entries.push((end - latency / 1e6, latency / 1e6));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let start = entries.iter().map(|e| e.0).fold(f64::INFINITY, f64::min);
    let cut = start + WARM_UP.as_secs_f64();
    Some(
        entries
            .into_iter()
            .filter(|e| e.0 >= cut)
            .map(|e| e.1)
            .collect(),
    )
}

async fn holds(table: &mut Table, url: &str) {
    for connections in CONNECTIONS {
        eprintln!("holds: {connections} connections");
        let schema = format!("sb_bench_scale_holds_{connections}");
        let store = pg_store(url, &schema, 1).await;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {schema}.slots (starts_at, ends_at, capacity, remaining) \
             SELECT now() + interval '1 day' + g * interval '1 minute', \
                    now() + interval '1 day' + g * interval '1 minute' + interval '1 hour', \
                    1000000000, 1000000000 \
             FROM generate_series(0, {HOLD_SLOTS} - 1) g"
        )))
        .execute(store.pool())
        .await
        .unwrap();
        let ids: Vec<(i64,)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT id FROM {schema}.slots ORDER BY id"
        )))
        .fetch_all(store.pool())
        .await
        .unwrap();
        let slots: Arc<Vec<SlotId>> = Arc::new(ids.into_iter().map(|(id,)| SlotId(id)).collect());
        let (first, last) = (slots[0], slots[slots.len() - 1]);
        // Alternating rounds, each side on its own connections: the engine's pool is closed
        // before pgbench opens its clients (max_connections), and a fresh one opened after.
        let (mut ours, mut base, mut failure, mut pgbench_ok) =
            (Vec::new(), Vec::new(), None, true);
        for _ in 0..HOLD_ROUNDS {
            let pool = pg_pool(url, connections).await;
            let engine =
                BookingEngine::new(PostgresStore::with_schema(pool.clone(), &schema).unwrap());
            match engine_latencies(&engine, &slots, connections).await {
                Ok(times) => ours.extend(times),
                Err(error) => failure = Some(error),
            }
            drop(engine);
            pool.close().await;
            if failure.is_some() {
                break;
            }
            match pgbench_latencies(url, &schema, connections, first, last) {
                Some(times) if pgbench_ok => base.extend(times),
                _ => pgbench_ok = false,
            }
        }
        pg_drop(&store).await;
        let what = format!(
            "PostgreSQL hold latency p50 / p99, {connections} connections, {} slots",
            thousands(HOLD_SLOTS)
        );
        if let Some(error) = failure {
            table.add(
                what,
                format!("FAILED: {error}"),
                String::new(),
                String::new(),
            );
            continue;
        }
        let seconds = HOLD_RUN.as_secs_f64() * HOLD_ROUNDS as f64;
        ours.sort_by(f64::total_cmp);
        let (p50, p99) = (quantile(&ours, 0.5), quantile(&ours, 0.99));
        let ours_text = format!(
            "{} / {} ({:.0} holds/s)",
            ms(p50),
            ms(p99),
            ours.len() as f64 / seconds
        );
        if !pgbench_ok || base.is_empty() {
            table.add(what, ours_text, "pgbench unavailable".into(), String::new());
            continue;
        }
        base.sort_by(f64::total_cmp);
        let (b50, b99) = (quantile(&base, 0.5), quantile(&base, 0.99));
        table.add(
            what,
            ours_text,
            format!(
                "`pgbench -c {connections}`, same statement: {} / {} ({:.0}/s)",
                ms(b50),
                ms(b99),
                base.len() as f64 / seconds
            ),
            format!("{} / {}", ratio(p50, b50), ratio(p99, b99)),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Part 4: the cache's live bytes per 1,000 slots.

/// Live bytes the engine keeps after one availability load of `n` slots from `store`: the
/// bytes freed when the loaded engine (its cache holding the snapshot) is dropped, so buffers
/// the store's connections keep are not counted. The median of three engines; allocations
/// freed late by tasks (the load runs on a task of its own) are given time to settle.
async fn cache_bytes<S: Store + Clone>(store: S, n: i64) -> f64 {
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut samples = Vec::new();
    for _ in 0..3 {
        let engine = BookingEngine::new(store.clone());
        let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
        assert_eq!(listing.len() as i64, n);
        drop(listing);
        settle().await;
        let loaded = ALLOC.allocated();
        drop(engine);
        settle().await;
        samples.push(loaded as f64 - ALLOC.allocated() as f64);
    }
    median(&mut samples)
}

fn bytes_line(table: &mut Table, store: &str, n: i64, bytes: f64) {
    let per_thousand = bytes * 1000.0 / n as f64;
    let minimum = (std::mem::size_of::<AvailabilityEntry>() * 1000) as f64;
    table.add(
        format!(
            "{store}: cache bytes per 1,000 slots, after loading {}",
            thousands(n)
        ),
        format!(
            "{:.1} KB ({:.2} MB in all)",
            per_thousand / 1e3,
            bytes / 1e6
        ),
        format!(
            "1,000 × `size_of::<AvailabilityEntry>()` = {:.1} KB",
            minimum / 1e3
        ),
        ratio(per_thousand, minimum),
    );
}

async fn bytes(table: &mut Table, url: Option<&str>) {
    // One load on a throw-away engine first: one-time allocations (tracing callsites, the
    // runtime's first task slots) are not the cache's.
    let warm = BookingEngine::new(memory_fixture(10).await);
    warm.availability(AvailabilityQuery::all()).await.unwrap();
    drop(warm);
    for n in SIZES {
        eprintln!("bytes: {n} slots");
        let store = memory_fixture(n).await;
        let b = cache_bytes(Arc::clone(&store), n).await;
        bytes_line(table, "memory", n, b);
        drop(store);

        let dir = temp_dir(&format!("bytes_{n}"));
        let store = sqlite_fixture(&dir, n).await;
        store.availability(Utc::now()).await.unwrap();
        let b = cache_bytes(store.clone(), n).await;
        bytes_line(table, "SQLite", n, b);
        store.pool().close().await;
        let _ = std::fs::remove_dir_all(&dir);

        let Some(url) = url else { continue };
        let store = pg_fixture(url, &format!("sb_bench_scale_bytes_{n}"), n).await;
        store.availability(Utc::now()).await.unwrap();
        let b = cache_bytes(store.clone(), n).await;
        bytes_line(table, "PostgreSQL", n, b);
        pg_drop(&store).await;
    }
}

/// The machine's 1, 5 and 15 minute load averages (Linux), for the notes under the table.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let url = std::env::var("DATABASE_URL").ok();
    if url.is_none() {
        eprintln!("DATABASE_URL is not set: the PostgreSQL figures are skipped");
    }
    let url = url.as_deref();
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |part: &str| filter.as_deref().is_none_or(|f| part.contains(f));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let load_before = load_average();
    let mut table = Table::default();
    rt.block_on(async {
        if wanted("load") {
            load(&mut table, url).await;
        }
        if wanted("cold") {
            cold_reads(&mut table, url).await;
        }
        if wanted("holds") {
            match url {
                Some(url) => holds(&mut table, url).await,
                None => eprintln!("holds: skipped (no DATABASE_URL)"),
            }
        }
        if wanted("bytes") {
            bytes(&mut table, url).await;
        }
    });
    let max_connections: Option<String> = url.and_then(|url| {
        rt.block_on(async {
            let pool = pg_pool(url, 1).await;
            let max = sqlx::query_scalar("SHOW max_connections")
                .fetch_one(&pool)
                .await
                .ok();
            pool.close().await;
            max
        })
    });
    table.print();
    println!();
    println!(
        "{} cores; load average {load_before} before, {} after; PostgreSQL max_connections {}; \
         {:.0} s",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        max_connections.as_deref().unwrap_or("n/a"),
        started.elapsed().as_secs_f64()
    );
}
