//! SQLite hold throughput: `SqliteStore` against SQLite driven directly with `rusqlite`, doing
//! the same work.
//!
//! Every contender runs on its own database file, migrated by the store itself (the current
//! schema, triggers and event log included), with the store's pragmas (WAL journal,
//! `synchronous = NORMAL`, foreign keys, `busy_timeout`) on the same file system. The baselines
//! run the store's own hold statement text ([`SqliteStore::hold_statement`]) with the same
//! parameters, stepped to its end, every returned column read: one autocommit statement per
//! hold, so one transaction per hold, as the store's single writer does.
//!
//! Groups:
//!
//! * `sqlite_holds_one_writer`: one caller. The rusqlite loop (baseline); rusqlite on a
//!   dedicated thread reached over a channel (what an async store driving SQLite directly would
//!   pay); the store, with and without the engine.
//! * `sqlite_round_trip`: a bare `SELECT 1` each way: the floor under any call.
//! * `sqlite_holds_8_callers`: eight concurrent tasks placing holds through the store (which
//!   commits the holds waiting together) against the rusqlite loop, one transaction per hold.
//! * `sqlite_sold_out`: a refusal on a full slot, with migration 6's trigger (the insert alone)
//!   and with migration 5's (the slow path: reclaim, retry, explain).
//!
//! Under `cargo bench`, a summary with holds per second and the ratios is printed first:
//! `cargo bench --bench sqlite -- holds`.

// criterion_group!/criterion_main! generate undocumented items.
#![allow(missing_docs)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use chrono::Utc;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use slot_booking::{
    BookingEngine, HoldOutcome, HoldRequest, HoldStore, IdempotencyKey, NewSlot, SlotId,
};
use slot_booking_sqlite::SqliteStore;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

const SLOTS: i64 = 1_000;

/// Concurrent callers in `sqlite_holds_8_callers`.
const CALLERS: u64 = 8;

/// Keys are never reused across contenders, rounds or iterations.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

fn fresh_key(tag: &str) -> String {
    format!("{tag}-{}", NEXT_KEY.fetch_add(1, Ordering::Relaxed))
}

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sb_bench_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("bench.db")
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A database file migrated by the store, with `SLOTS` slots of (practically) unlimited
/// capacity starting tomorrow, made through the store's own writes.
fn store_db(rt: &Runtime, name: &str) -> (SqliteStore, Arc<Vec<SlotId>>, PathBuf) {
    let path = temp_db(name);
    let url = format!("sqlite://{}", path.display());
    rt.block_on(async {
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let start = Utc::now() + chrono::Duration::days(1);
        let mut slots = Vec::new();
        for i in 0..SLOTS {
            let starts_at = start + chrono::Duration::minutes(i);
            let slot = store
                .create_slot(
                    &NewSlot::new(starts_at, starts_at + chrono::Duration::hours(1), i32::MAX),
                    Utc::now(),
                )
                .await
                .unwrap();
            slots.push(slot.slot_id);
        }
        (store, Arc::new(slots), path)
    })
}

/// A rusqlite connection on `path` with the store's settings (`SqliteStore::configure`).
fn rusqlite_conn(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

/// The file's journal mode and `synchronous` level as a connection sees them.
fn durability(conn: &rusqlite::Connection) -> (String, i64) {
    let journal: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    let synchronous: i64 = conn
        .query_row("PRAGMA synchronous", [], |row| row.get(0))
        .unwrap();
    (journal, synchronous)
}

/// A row of the store's hold statement: every column it returns.
type HoldRow = (
    i64,
    i64,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    i32,
    Option<String>,
    i64,
);

/// One hold through rusqlite: the store's statement with the store's parameters, stepped to its
/// end, every returned column read. Returns the new hold's id.
fn rusqlite_hold(
    conn: &rusqlite::Connection,
    sql: &str,
    slot: i64,
    key: &str,
    now: i64,
) -> rusqlite::Result<i64> {
    let mut statement = conn.prepare_cached(sql)?;
    let mut rows = statement.query(rusqlite::params![
        slot,
        key,
        now,
        now + 300_000_000,
        1,
        Option::<&str>::None
    ])?;
    let mut id = None;
    while let Some(row) = rows.next()? {
        let hold: HoldRow = (
            row.get(0)?,
            row.get(1)?,
            row.get(2)?,
            row.get(3)?,
            row.get(4)?,
            row.get(5)?,
            row.get(6)?,
            row.get(7)?,
            row.get(8)?,
        );
        id = Some(hold.0);
    }
    id.ok_or(rusqlite::Error::QueryReturnedNoRows)
}

/// The rusqlite loop: `n` holds, one autocommit statement (one transaction) each.
fn rusqlite_loop(conn: &rusqlite::Connection, sql: &str, n: u64) -> Duration {
    let now = Utc::now().timestamp_micros();
    let started = Instant::now();
    for i in 0..n {
        let key = fresh_key("r");
        let slot = (i as i64 % SLOTS) + 1;
        black_box(rusqlite_hold(conn, sql, slot, &key, now).unwrap());
    }
    started.elapsed()
}

/// The ceiling of a group commit: `n` holds through rusqlite, `per` of them in each
/// `BEGIN IMMEDIATE` transaction (the store's statement each, as in the loop).
fn rusqlite_grouped(conn: &rusqlite::Connection, sql: &str, n: u64, per: u64) -> Duration {
    let now = Utc::now().timestamp_micros();
    let started = Instant::now();
    let mut i = 0;
    while i < n {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        for _ in 0..per.min(n - i) {
            let key = fresh_key("g");
            let slot = (i as i64 % SLOTS) + 1;
            black_box(rusqlite_hold(conn, sql, slot, &key, now).unwrap());
            i += 1;
        }
        conn.execute_batch("COMMIT").unwrap();
    }
    started.elapsed()
}

/// What a job on the dedicated rusqlite thread does.
enum Job {
    Hold { slot: i64, key: String, now: i64 },
    SelectOne,
}

/// A rusqlite connection on a thread of its own, reached over a channel and answering through
/// a oneshot: the shape of sqlx's SQLite driver, without the driver.
struct Direct {
    jobs: mpsc::Sender<(Job, oneshot::Sender<i64>)>,
}

impl Direct {
    fn spawn(path: &Path, sql: &str) -> Self {
        let (jobs, inbox) = mpsc::channel::<(Job, oneshot::Sender<i64>)>();
        let (path, sql) = (path.to_owned(), sql.to_owned());
        std::thread::spawn(move || {
            let conn = rusqlite_conn(&path);
            for (job, reply) in inbox {
                let answer = match job {
                    Job::Hold { slot, key, now } => rusqlite_hold(&conn, &sql, slot, &key, now),
                    Job::SelectOne => conn
                        .prepare_cached("SELECT 1")
                        .and_then(|mut s| s.query_row([], |row| row.get(0))),
                };
                let _ = reply.send(answer.unwrap());
            }
        });
        Direct { jobs }
    }

    async fn run(&self, job: Job) -> i64 {
        let (reply, answer) = oneshot::channel();
        self.jobs.send((job, reply)).unwrap();
        answer.await.unwrap()
    }
}

/// `n` holds through `store`, from `callers` concurrent tasks; every one must be created.
/// One caller placing `n` holds through the engine over `store`.
async fn engine_holds(
    engine: &BookingEngine<SqliteStore>,
    slots: &Arc<Vec<SlotId>>,
    n: u64,
) -> Duration {
    let started = Instant::now();
    for i in 0..n {
        let placed = engine
            .hold(slots[i as usize % slots.len()], &fresh_key("e"))
            .await
            .unwrap();
        black_box(placed);
    }
    started.elapsed()
}

async fn store_holds(
    store: &SqliteStore,
    slots: &Arc<Vec<SlotId>>,
    callers: u64,
    n: u64,
) -> Duration {
    let now = Utc::now();
    let expires_at = now + chrono::Duration::minutes(5);
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let (store, slots) = (store.clone(), Arc::clone(slots));
            tokio::spawn(async move {
                for i in (caller..n).step_by(callers as usize) {
                    let key = IdempotencyKey::new(fresh_key("s")).unwrap();
                    let request = HoldRequest {
                        slot_id: slots[i as usize % slots.len()],
                        owner: None,
                        quantity: 1,
                        key: &key,
                        now,
                        expires_at,
                    };
                    let outcome = store.create_hold(request).await.unwrap().outcome;
                    assert!(matches!(outcome, HoldOutcome::Created(_)), "{outcome:?}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    started.elapsed()
}

/// `n` holds through sqlx on one connection held throughout: the store's statement with its
/// parameters, as the store's writer runs it, without the store around it.
async fn sqlx_holds(conn: &mut sqlx::SqliteConnection, sql: &str, n: u64) -> Duration {
    let now = Utc::now().timestamp_micros();
    let started = Instant::now();
    for i in 0..n {
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind((i as i64 % SLOTS) + 1)
            .bind(fresh_key("x"))
            .bind(now)
            .bind(now + 300_000_000)
            .bind(1)
            .bind(Option::<String>::None)
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        black_box(rows);
    }
    started.elapsed()
}

/// `n` holds through the dedicated rusqlite thread, one caller.
async fn direct_holds(direct: &Direct, n: u64) -> Duration {
    let now = Utc::now().timestamp_micros();
    let started = Instant::now();
    for i in 0..n {
        let job = Job::Hold {
            slot: (i as i64 % SLOTS) + 1,
            key: fresh_key("d"),
            now,
        };
        black_box(direct.run(job).await);
    }
    started.elapsed()
}

/// A full slot (capacity 1, its unit held for an hour) on `store`, and a request on it.
async fn full_slot(store: &SqliteStore) -> SlotId {
    let now = Utc::now();
    let start = now + chrono::Duration::days(2);
    let slot = store
        .create_slot(
            &NewSlot::new(start, start + chrono::Duration::hours(1), 1),
            now,
        )
        .await
        .unwrap()
        .slot_id;
    let key = IdempotencyKey::new(fresh_key("full")).unwrap();
    let request = HoldRequest {
        slot_id: slot,
        owner: None,
        quantity: 1,
        key: &key,
        now,
        expires_at: now + chrono::Duration::hours(1),
    };
    store.create_hold(request).await.unwrap();
    slot
}

/// Migration 5's `holds_take_a_unit` (as migration 4 made it): one abort message for every
/// refusal, so the store takes the slow path to explain it.
const SINGLE_MESSAGE_TRIGGER: &str = "DROP TRIGGER slot_booking_holds_take_a_unit; \
    CREATE TRIGGER slot_booking_holds_take_a_unit BEFORE INSERT ON slot_booking_holds \
    WHEN NEW.status = 'held' \
    BEGIN \
        UPDATE slot_booking_slots SET remaining = remaining - NEW.quantity \
        WHERE id = NEW.slot_id AND remaining >= NEW.quantity AND starts_at > NEW.created_at \
          AND closed = 0 AND removed_at IS NULL; \
        SELECT RAISE(ABORT, 'slot_booking: no unit to hold') WHERE changes() = 0; \
    END;";

/// `n` refusals on `slot` (full) through `store`.
async fn refusals(store: &SqliteStore, slot: SlotId, n: u64) -> Duration {
    let now = Utc::now();
    let started = Instant::now();
    for _ in 0..n {
        let key = IdempotencyKey::new(fresh_key("no")).unwrap();
        let request = HoldRequest {
            slot_id: slot,
            owner: None,
            quantity: 1,
            key: &key,
            now,
            expires_at: now + chrono::Duration::minutes(5),
        };
        let outcome = store.create_hold(request).await.unwrap().outcome;
        assert!(matches!(outcome, HoldOutcome::SoldOut), "{outcome:?}");
    }
    started.elapsed()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

fn per_second(n: u64, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

/// The best of three runs of `run`, in operations per second.
fn best_of_3(n: u64, mut run: impl FnMut() -> Duration) -> f64 {
    (0..3).map(|_| per_second(n, run())).fold(0.0, f64::max)
}

/// Holds per second each way and the ratios, printed before criterion's own measurements.
fn summary(_: &mut Criterion) {
    // Only under `cargo bench` (criterion's test mode runs each benchmark once and quickly).
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    const N: u64 = 2_000;
    const ROUNDS: usize = 9;
    let rt = runtime();

    let (store, _, path) = store_db(&rt, "sum_rusqlite");
    let sql = store.hold_statement().to_owned();
    rt.block_on(store.pool().close());
    let conn = rusqlite_conn(&path);
    let (journal, synchronous) = durability(&conn);
    let (direct_store, _, direct_path) = store_db(&rt, "sum_direct");
    rt.block_on(direct_store.pool().close());
    let direct_holder = Direct::spawn(&direct_path, &sql);
    let (store, slots, store_path) = store_db(&rt, "sum_store");
    let (store_journal, store_synchronous) = durability(&rusqlite_conn(&store_path));
    let (eight_store, eight_slots, _) = store_db(&rt, "sum_store_8");
    let (sqlx_store, _, _) = store_db(&rt, "sum_sqlx");
    let mut sqlx_conn = rt.block_on(sqlx_store.pool().acquire()).unwrap().detach();

    // Rounds of every contender in turn: the machine's load drifts, so each round's ratios are
    // taken between runs made back to back, and the medians reported.
    let (engine_store, engine_slots, _) = store_db(&rt, "sum_engine");
    let engine = BookingEngine::new(engine_store);
    let mut runs: [Vec<f64>; 7] = Default::default();
    let before = eight_store.group_commits();
    for _ in 0..ROUNDS {
        runs[0].push(per_second(N, rusqlite_loop(&conn, &sql, N)));
        runs[1].push(per_second(N, rt.block_on(direct_holds(&direct_holder, N))));
        runs[2].push(per_second(
            N,
            rt.block_on(store_holds(&store, &slots, 1, N)),
        ));
        runs[3].push(per_second(
            N,
            rt.block_on(store_holds(&eight_store, &eight_slots, CALLERS, N)),
        ));
        runs[4].push(per_second(N, rusqlite_grouped(&conn, &sql, N, CALLERS)));
        runs[5].push(per_second(
            N,
            rt.block_on(sqlx_holds(&mut sqlx_conn, &sql, N)),
        ));
        runs[6].push(per_second(
            N,
            rt.block_on(engine_holds(&engine, &engine_slots, N)),
        ));
    }
    let ratio = |i: usize| median(runs[i].iter().zip(&runs[0]).map(|(x, b)| x / b).collect());
    let engine_to_store = median(runs[6].iter().zip(&runs[2]).map(|(e, s)| e / s).collect());
    let [rusqlite, direct, one, eight, ceiling, bare_sqlx, through_engine] =
        runs.clone().map(median);
    let bare_sqlx_ratio = ratio(5);
    let (direct_ratio, one_ratio, eight_ratio, ceiling_ratio) =
        (ratio(1), ratio(2), ratio(3), ratio(4));
    let grouped = eight_store.group_commits();
    let (batches, batched) = (
        grouped.groups - before.groups,
        grouped.requests - before.requests,
    );

    let one_trip = |run: &dyn Fn() -> Duration| {
        let per = (0..3).map(|_| run()).min().unwrap_or_default();
        per.as_secs_f64() * 1e6 / 2_000.0
    };
    let pool = store.pool().clone();
    let sqlx_one = one_trip(&|| {
        rt.block_on(async {
            let started = Instant::now();
            for _ in 0..2_000 {
                let one: i64 = sqlx::query_scalar("SELECT 1")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                black_box(one);
            }
            started.elapsed()
        })
    });
    let sqlx_held = one_trip(&|| {
        rt.block_on(async {
            let mut conn = pool.acquire().await.unwrap();
            let started = Instant::now();
            for _ in 0..2_000 {
                let one: i64 = sqlx::query_scalar("SELECT 1")
                    .fetch_one(&mut *conn)
                    .await
                    .unwrap();
                black_box(one);
            }
            started.elapsed()
        })
    });
    let direct_thread = &direct_holder;
    let direct_one = one_trip(&|| {
        rt.block_on(async {
            let started = Instant::now();
            for _ in 0..2_000 {
                black_box(direct_thread.run(Job::SelectOne).await);
            }
            started.elapsed()
        })
    });
    let rusqlite_one = one_trip(&|| {
        let started = Instant::now();
        for _ in 0..2_000 {
            let one: i64 = conn
                .prepare_cached("SELECT 1")
                .unwrap()
                .query_row([], |row| row.get(0))
                .unwrap();
            black_box(one);
        }
        started.elapsed()
    });

    let (sold_out_store, _, _) = store_db(&rt, "sum_sold_out");
    let (slow_store, _, _) = store_db(&rt, "sum_slow_path");
    let (fast_slot, slow_slot) = rt.block_on(async {
        sqlx::raw_sql(SINGLE_MESSAGE_TRIGGER)
            .execute(slow_store.pool())
            .await
            .unwrap();
        (
            full_slot(&sold_out_store).await,
            full_slot(&slow_store).await,
        )
    });
    let fast = best_of_3(2_000, || {
        rt.block_on(refusals(&sold_out_store, fast_slot, 2_000))
    });
    let slow = best_of_3(2_000, || {
        rt.block_on(refusals(&slow_store, slow_slot, 2_000))
    });

    eprintln!(
        "\n== SQLite holds, {N} per run, medians of {ROUNDS} interleaved rounds \
         (ratios: median of each round's ratio to the baseline) =="
    );
    eprintln!(
        "durability: baseline journal_mode={journal} synchronous={synchronous}; \
         store journal_mode={store_journal} synchronous={store_synchronous} (1 = NORMAL)"
    );
    eprintln!("rusqlite loop, the store's statement (baseline): {rusqlite:>9.0} holds/s");
    eprintln!(
        "rusqlite on its own thread over a channel:       {direct:>9.0} holds/s  {:.2}x",
        direct_ratio
    );
    eprintln!(
        "sqlx on one held connection, the same statement: {bare_sqlx:>9.0} holds/s  {bare_sqlx_ratio:.2}x"
    );
    eprintln!(
        "SqliteStore::create_hold, one caller:            {one:>9.0} holds/s  {:.2}x",
        one_ratio
    );
    eprintln!(
        "BookingEngine::hold over the store, one caller:  {through_engine:>9.0} holds/s  {:.2}x \
         ({engine_to_store:.2}x the store alone)",
        ratio(6)
    );
    eprintln!(
        "SqliteStore::create_hold, {CALLERS} callers:              {eight:>9.0} holds/s  {:.2}x",
        eight_ratio
    );
    eprintln!(
        "rusqlite, {CALLERS} holds per transaction (ceiling):   {ceiling:>9.0} holds/s  {:.2}x",
        ceiling_ratio
    );
    eprintln!(
        "  ({batched} of {} holds in {batches} group commits, {:.1} per commit, largest {})",
        ROUNDS as u64 * N,
        batched as f64 / batches.max(1) as f64,
        grouped.largest
    );
    eprintln!(
        "SELECT 1: sqlx {sqlx_one:.1} µs (on a connection held: {sqlx_held:.1} µs), rusqlite thread over a channel {direct_one:.1} µs, \
         rusqlite {rusqlite_one:.2} µs"
    );
    eprintln!(
        "sold-out refusal: migration 6 trigger {fast:.0}/s, migration 5 trigger (slow path) \
         {slow:.0}/s  {:.2}x\n",
        fast / slow
    );
}

fn holds(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("sqlite_holds_one_writer");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(5));

    let (store, _, path) = store_db(&rt, "rusqlite");
    let sql = store.hold_statement().to_owned();
    rt.block_on(store.pool().close());
    let conn = rusqlite_conn(&path);
    group.bench_function("rusqlite loop, the store's statement (baseline)", |b| {
        b.iter_custom(|iters| rusqlite_loop(&conn, &sql, iters))
    });

    let (direct_store, _, direct_path) = store_db(&rt, "direct");
    rt.block_on(direct_store.pool().close());
    let direct = Direct::spawn(&direct_path, &sql);
    group.bench_function("rusqlite on its own thread over a channel", |b| {
        b.iter_custom(|iters| rt.block_on(direct_holds(&direct, iters)))
    });

    let (store, slots, _) = store_db(&rt, "store");
    group.bench_function("SqliteStore::create_hold (no engine)", |b| {
        b.iter_custom(|iters| rt.block_on(store_holds(&store, &slots, 1, iters)))
    });
    let engine = BookingEngine::new(store.clone());
    group.bench_function("BookingEngine::hold over SqliteStore", |b| {
        b.iter_custom(|iters| {
            let engine = engine.clone();
            let slots = Arc::clone(&slots);
            rt.block_on(async move {
                let started = Instant::now();
                for i in 0..iters {
                    let key = fresh_key("e");
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
    group.finish();

    let mut group = c.benchmark_group("sqlite_holds_8_callers");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("rusqlite loop, one transaction per hold (baseline)", |b| {
        b.iter_custom(|iters| rusqlite_loop(&conn, &sql, iters))
    });
    group.bench_function("SqliteStore::create_hold, 8 tasks", |b| {
        b.iter_custom(|iters| rt.block_on(store_holds(&store, &slots, CALLERS, iters)))
    });
    group.finish();

    // What one statement costs through sqlx-sqlite on its own (a worker thread per
    // connection: every call is a round trip between threads): the floor under any hold.
    let mut floor = c.benchmark_group("sqlite_round_trip");
    let pool = store.pool().clone();
    floor.bench_function("sqlx SELECT 1", |b| {
        b.to_async(&rt).iter(|| async {
            let one: i64 = sqlx::query_scalar("SELECT 1")
                .fetch_one(&pool)
                .await
                .unwrap();
            black_box(one)
        })
    });
    floor.bench_function("rusqlite thread over a channel SELECT 1", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(direct.run(Job::SelectOne).await) })
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

    let mut group = c.benchmark_group("sqlite_sold_out");
    let (slow_store, _, _) = store_db(&rt, "slow_path");
    let (fast_slot, slow_slot) = rt.block_on(async {
        sqlx::raw_sql(SINGLE_MESSAGE_TRIGGER)
            .execute(slow_store.pool())
            .await
            .unwrap();
        (full_slot(&store).await, full_slot(&slow_store).await)
    });
    group.bench_function("refusal, migration 6 trigger (the insert alone)", |b| {
        b.iter_custom(|iters| rt.block_on(refusals(&store, fast_slot, iters)))
    });
    group.bench_function("refusal, migration 5 trigger (slow path)", |b| {
        b.iter_custom(|iters| rt.block_on(refusals(&slow_store, slow_slot, iters)))
    });
    group.finish();
}

criterion_group!(benches, summary, holds);
criterion_main!(benches);
