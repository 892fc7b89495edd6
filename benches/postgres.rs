//! PostgreSQL, side by side with baselines in the same run (needs `DATABASE_URL`; without it
//! this bench prints that it was skipped):
//!
//! 1. Hold throughput with 8 connections, on one hot slot and spread over 1,000 slots: the
//!    engine over `PostgresStore` against `pgbench` running the same statement
//!    (`benches/pgbench/hold.sql`) with 8 clients for the same time.
//! 2. Availability recompute over 1,000 slots with 1,000,000 holds against a bare `SELECT` of
//!    the 1,000 slot rows (criterion).
//! 3. Availability over 9 future slots, with and without 300,000 abandoned holds (held, long
//!    expired, never reclaimed) on 1,000 slots that have started: two databases alike but for
//!    that history, timed in alternation, and the ratio of the medians.
//! 4. Refused holds on a full slot (sold out, nothing expired) with 8 connections: the engine
//!    against `pgbench` running the same statement on that slot (`refusals`).
//! 5. Holds on 1,000 slots with 8 connections, without and with a consumer reading and
//!    acknowledging the event log meanwhile, alternating rounds (`consumer`).
//! 6. What the change notification (migration 6's trigger) costs the cancel that sends it:
//!    hold-then-cancel with 8 tasks on two schemas alike but for the triggers (dropped on
//!    the baseline), each followed by 3 listening engines, in alternating 2 s rounds; cancels
//!    per second and the median cancel, and their ratios.
//! 7. What following changes costs the writers now that followers also read the event log's
//!    commits (every 20 ms) beside the notifications, so that holds and bookings show on other
//!    instances: holds on 1,000 slots with 8 connections, without and with 3 following engines
//!    (each with its own pool), and with 3 reading the log itself by position instead,
//!    alternating rounds (`followers`).
//! 8. What the fast paths save over the core's composed rules: holds and 5-line bookings on
//!    1,000 slots with 8 connections, through the store and through the same store
//!    `without_fast_paths()`, alternating rounds on one schema (`composed`).

// criterion_group!/criterion_main! generate undocumented items.
#![allow(missing_docs)]

use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use criterion::Criterion;
use slot_booking::{
    BookingEngine, BookingError, HoldPlaced, HoldStore, NewBooking, NewPool, Scope, SlotId,
};
use slot_booking_postgres::PostgresStore;
use sqlx::AssertSqlSafe;

const RUN: Duration = Duration::from_secs(10);
const PGBENCH_SCRIPT: &str = include_str!("pgbench/hold.sql");

#[path = "support/postgres.rs"]
mod support;
use support::{fresh_store, slots, CONNECTIONS};

/// Holds per second through the engine, 8 tasks for `RUN`.
async fn engine_holds(
    engine: &BookingEngine<Arc<PostgresStore>>,
    slots: &[SlotId],
    tag: &str,
) -> f64 {
    engine_requests(engine, slots, tag, |placed| {
        placed.unwrap();
    })
    .await
}

/// Hold requests per second through the engine, 8 tasks for `RUN`, each answer checked by
/// `check`.
async fn engine_requests(
    engine: &BookingEngine<Arc<PostgresStore>>,
    slots: &[SlotId],
    tag: &str,
    check: fn(Result<HoldPlaced, BookingError>),
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let slots = Arc::new(slots.to_vec());
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|t| {
            let (engine, done, stop, slots) =
                (engine.clone(), done.clone(), stop.clone(), slots.clone());
            let tag = tag.to_owned();
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let slot =
                        slots[(i as usize * CONNECTIONS as usize + t as usize) % slots.len()];
                    check(engine.hold(slot, &format!("{tag}-{t}-{i}")).await);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Transactions per second `pgbench` reports for the same statement, 8 clients for `RUN`.
fn pgbench_holds(url: &str, schema: &str, first: SlotId, last: SlotId) -> Option<f64> {
    pgbench(
        url,
        schema,
        &PGBENCH_SCRIPT.replace("{schema}", schema),
        first,
        last,
    )
}

/// Transactions per second `pgbench` reports for `script`, 8 clients for `RUN`, with
/// `first` and `last` defined.
fn pgbench(url: &str, schema: &str, script: &str, first: SlotId, last: SlotId) -> Option<f64> {
    let path = std::env::temp_dir().join(format!("sb_pgbench_{}_{schema}.sql", std::process::id()));
    std::fs::write(&path, script).ok()?;
    let output = Command::new("pgbench")
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &CONNECTIONS.to_string(),
            "-j",
            "2",
        ])
        .args(["-T", &RUN.as_secs().to_string()])
        .args([
            "-D",
            &format!("first={}", first.0),
            "-D",
            &format!("last={}", last.0),
        ])
        .arg("-f")
        .arg(&path)
        .arg(url)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let tps = text
        .lines()
        .find(|l| l.starts_with("tps ="))?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok();
    if tps.is_none() {
        eprintln!(
            "pgbench said: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    tps
}

/// Refused holds per second on a full slot with no expired holds (a sale's usual answer): the
/// engine against `pgbench` running the same statement, which on that slot returns the
/// refusal's reasons, 8 connections each.
async fn refusals(url: &str) {
    let schema = "sb_bench_sold_out";
    let store = Arc::new(fresh_store(url, schema).await);
    let engine = BookingEngine::new(Arc::clone(&store));
    let full = slots(&engine, 1, 1).await;
    engine.hold(full[0], "the-only-unit").await.unwrap();
    let ours = engine_requests(&engine, &full, schema, |refused| {
        assert!(
            matches!(refused, Err(BookingError::SoldOut { .. })),
            "{refused:?}"
        );
    })
    .await;
    match pgbench_holds(url, schema, full[0], full[0]) {
        Some(baseline) => println!(
            "postgres refused holds (sold out), 8 connections: engine {ours:.0}/s, pgbench {baseline:.0}/s, ratio {:.2}x",
            ours / baseline
        ),
        None => println!("postgres refused holds, 8 connections: engine {ours:.0}/s (pgbench unavailable)"),
    }
    let held: (i64,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT count(*) FROM {schema}.holds"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(held.0, 1, "every request after the first was refused");
}

/// Requests per second: 8 tasks for `RUN`, task `t`'s `i`-th request made by `request(t, i)`.
async fn per_second<F, Fut>(request: F) -> f64
where
    F: Fn(u32, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|t| {
            let (done, stop, request) = (done.clone(), stop.clone(), request.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    request(t, i).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// The block of 5 consecutive slots (of 200 blocks) task `t` books on its `i`-th request: a
/// fixed pseudo-random spread, the same for every configuration.
fn block(t: u32, i: u64) -> usize {
    let mut x = (u64::from(t) << 32 | i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    (x % 200) as usize
}

/// The `pgbench` script that runs the store's own placing statement for a booking of one
/// unit of each of 5 consecutive slots from `:first`, with a key of its own per transaction.
fn booking_script(statement: &str) -> String {
    let slots = (0..5)
        .map(|n| format!(":first + :b * 5 + {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let statement = statement
        .replace("$6", "NULL::text")
        .replace("$5", "interval '5 minutes'")
        .replace("$4", "NULL::timestamptz")
        .replace("$3", "('pgb-' || :client_id || '-' || :k)")
        .replace("$2", "ARRAY[1, 1, 1, 1, 1]::int4[]")
        .replace("$1", &format!("ARRAY[{slots}]::int8[]"));
    format!("\\set b random(0, 199)\n\\set k random(1, 9000000000000000)\n{statement};\n")
}

/// Bookings of 5 lines (one unit of each of 5 slots) over 1,000 slots with 8 connections:
/// the engine against `pgbench` running the store's own placing statement, and against the
/// same 5 units taken by 5 single holds one after another.
async fn bookings(url: &str) {
    let schema = "sb_bench_bookings";
    let store = Arc::new(fresh_store(url, schema).await);
    let engine = BookingEngine::new(Arc::clone(&store));
    let ids = Arc::new(slots(&engine, 1_000, i32::MAX).await);
    assert!(
        ids.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "consecutive slot ids"
    );
    let (e, s) = (engine.clone(), Arc::clone(&ids));
    let booked = per_second(move |t, i| {
        let (engine, ids) = (e.clone(), Arc::clone(&s));
        async move {
            let first = block(t, i) * 5;
            let request = (first..first + 5).fold(NewBooking::new(format!("b-{t}-{i}")), |r, n| {
                r.line(ids[n], 1)
            });
            let placed = engine.book(request).await.unwrap();
            assert_eq!(placed.booking.lines.len(), 5);
        }
    })
    .await;
    let (e, s) = (engine.clone(), Arc::clone(&ids));
    let held = per_second(move |t, i| {
        let (engine, ids) = (e.clone(), Arc::clone(&s));
        async move {
            let first = block(t, i) * 5;
            for n in first..first + 5 {
                engine
                    .hold(ids[n], &format!("h-{t}-{i}-{n}"))
                    .await
                    .unwrap();
            }
        }
    })
    .await;
    let script = booking_script(store.booking_statement());
    let baseline = pgbench(url, schema, &script, ids[0], ids[ids.len() - 1]);
    match baseline {
        Some(baseline) => println!(
            "postgres 5-line bookings, 8 connections, 1,000 slots: engine {booked:.0}/s, pgbench \
             {baseline:.0}/s, ratio {:.2}x",
            booked / baseline
        ),
        None => println!("postgres 5-line bookings: engine {booked:.0}/s (pgbench unavailable)"),
    }
    println!(
        "  the same 5 units as 5 single holds: {held:.0} groups/s; a booking costs {:.2}x the \
         time of 5 holds",
        held / booked
    );
    // The same bookings once every 5 consecutive slots share a pool (a day's total over its
    // windows): each booking also takes 5 units of one pool.
    for block in ids.chunks(5) {
        let pool = engine.create_pool(NewPool::new(i32::MAX)).await.unwrap();
        for &slot in block {
            engine.attach_slot(pool.pool_id, slot).await.unwrap();
        }
    }
    let (e, s) = (engine.clone(), Arc::clone(&ids));
    let pooled = per_second(move |t, i| {
        let (engine, ids) = (e.clone(), Arc::clone(&s));
        async move {
            let first = block(t, i) * 5;
            let request = (first..first + 5).fold(NewBooking::new(format!("p-{t}-{i}")), |r, n| {
                r.line(ids[n], 1)
            });
            let placed = engine.book(request).await.unwrap();
            assert_eq!(placed.booking.lines.len(), 5);
        }
    })
    .await;
    println!(
        "  the same bookings with every 5 slots in a pool: {pooled:.0}/s, {:.2}x the rate without",
        pooled / booked
    );
    let broken: (i64,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT count(*) FROM {schema}.slots s WHERE s.remaining + \
         (SELECT coalesce(sum(quantity), 0) FROM {schema}.holds h \
          WHERE h.slot_id = s.id AND h.status IN ('held', 'confirmed')) <> s.capacity"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(broken.0, 0, "the invariant held under load");
    let broken: (i64,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT count(*) FROM {schema}.pools p WHERE p.remaining + \
         (SELECT coalesce(sum(h.quantity), 0) FROM {schema}.holds h \
          JOIN {schema}.slot_pools sp ON sp.slot_id = h.slot_id \
          WHERE sp.pool_id = p.id AND h.status IN ('held', 'confirmed')) <> p.capacity"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(broken.0, 0, "every pool's invariant held under load");
}

async fn throughput(url: &str) {
    for (name, count) in [("hot slot", 1), ("1,000 spread slots", 1_000)] {
        let schema = if count == 1 {
            "sb_bench_hot"
        } else {
            "sb_bench_spread"
        };
        let store = Arc::new(fresh_store(url, schema).await);
        let engine = BookingEngine::new(Arc::clone(&store));
        let ids = slots(&engine, count, i32::MAX).await;
        let ours = engine_holds(&engine, &ids, schema).await;
        let baseline = pgbench_holds(url, schema, ids[0], ids[ids.len() - 1]);
        match baseline {
            Some(baseline) => println!(
                "postgres holds, 8 connections, {name}: engine {ours:.0}/s, pgbench {baseline:.0}/s, ratio {:.2}x",
                ours / baseline
            ),
            None => println!("postgres holds, 8 connections, {name}: engine {ours:.0}/s (pgbench unavailable)"),
        }
        let invariant: (i64,) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT count(*) FROM {schema}.slots s WHERE s.remaining + \
             (SELECT count(*) FROM {schema}.holds h WHERE h.slot_id = s.id AND h.status IN ('held', 'confirmed')) \
             <> s.capacity"
        )))
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert_eq!(invariant.0, 0, "the invariant held under load");
    }
}

/// Holds per second on 1,000 slots, 8 connections, without and with a consumer reading and
/// acknowledging the event log as fast as it can (each read taking a new horizon when events
/// committed since the last one), alternating rounds of `RUN` on one schema: what readers
/// cost the writers. Also how many events the consumer delivered per second.
async fn consumer_cost(url: &str) {
    use slot_booking::ConsumerId;
    let schema = "sb_bench_consumer";
    let store = Arc::new(fresh_store(url, schema).await);
    let engine = BookingEngine::new(Arc::clone(&store));
    let ids = slots(&engine, 1_000, i32::MAX).await;
    let consumer = ConsumerId::new("bench").unwrap();
    let (mut without, mut with, mut delivered) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..3 {
        without.push(engine_holds(&engine, &ids, &format!("plain{round}")).await);
        // Start the consumer at the log's end.
        loop {
            let batch = engine.read_events(&consumer, 1000).await.unwrap();
            let Some(last) = batch.last() else { break };
            engine
                .acknowledge_events(&consumer, last.position)
                .await
                .unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (engine, stop, consumer) = (engine.clone(), stop.clone(), consumer.clone());
            tokio::spawn(async move {
                let (started, mut events) = (Instant::now(), 0_usize);
                while !stop.load(Ordering::Relaxed) {
                    let batch = engine.read_events(&consumer, 1000).await.unwrap();
                    if let Some(last) = batch.last() {
                        engine
                            .acknowledge_events(&consumer, last.position)
                            .await
                            .unwrap();
                    }
                    events += batch.len();
                }
                events as f64 / started.elapsed().as_secs_f64()
            })
        };
        with.push(engine_holds(&engine, &ids, &format!("read{round}")).await);
        stop.store(true, Ordering::Relaxed);
        delivered.push(reader.await.unwrap());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b, d) = (
        median(&mut without),
        median(&mut with),
        median(&mut delivered),
    );
    println!(
        "postgres holds, 8 connections, 1,000 slots: {a:.0}/s without a consumer, {b:.0}/s with \
         one reading and acknowledging ({d:.0} events/s delivered), ratio {:.2}x",
        b / a
    );
}

/// Holds per second on 1,000 slots, 8 connections, without and with 3 engines following the
/// schema's changes (`follow_changes`: notifications and the event log read every 20 ms, each
/// engine on a pool of its own), alternating rounds of `RUN` on one schema: what following
/// costs the writers.
async fn follower_cost(url: &str) {
    let schema = "sb_bench_followers";
    let store = Arc::new(fresh_store(url, schema).await);
    let engine = BookingEngine::new(Arc::clone(&store));
    let ids = slots(&engine, 1_000, i32::MAX).await;
    let (mut without, mut with, mut reading) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..3 {
        without.push(engine_holds(&engine, &ids, &format!("plain{round}")).await);
        // `follow_changes` (notifications and the log's commits), then, to compare, followers
        // that read the log itself by position (the core's `EventLogFeed`).
        for by_position in [false, true] {
            let mut followers = Vec::new();
            for _ in 0..3 {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(2)
                    .connect(url)
                    .await
                    .unwrap();
                let other = PostgresStore::with_schema(pool, schema).unwrap();
                let follower = BookingEngine::new(other.clone());
                let following = if by_position {
                    let feed = slot_booking::changes::EventLogFeed::new(
                        other.clone(),
                        slot_booking::changes::DEFAULT_POLL_INTERVAL,
                    )
                    .await
                    .unwrap();
                    slot_booking::changes::follow_changes(
                        feed,
                        follower.invalidator(),
                        slot_booking::changes::DEFAULT_COALESCING_WINDOW,
                    )
                } else {
                    other.follow_changes(follower.invalidator()).await.unwrap()
                };
                followers.push((follower, following));
            }
            let tag = format!("followed{round}{by_position}");
            let rate = engine_holds(&engine, &ids, &tag).await;
            if by_position {
                reading.push(rate);
            } else {
                with.push(rate);
            }
            for (_, following) in followers {
                following.stop().await;
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b, c) = (
        median(&mut without),
        median(&mut with),
        median(&mut reading),
    );
    println!(
        "postgres holds, 8 connections, 1,000 slots: {a:.0}/s with no follower, {b:.0}/s with 3 \
         engines following (notifications and the log's commits every 20 ms), ratio {:.2}x; \
         {c:.0}/s with 3 reading the log by position every 20 ms instead, ratio {:.2}x",
        b / a,
        c / a
    );
}

/// 1,000 future slots and 1,000,000 holds spread evenly over them: 90% history (confirmed,
/// cancelled, expired), 9% held and active, 1% (10 per slot) held but expired and not yet
/// reclaimed.
async fn availability_fixture(url: &str) -> PostgresStore {
    let store = fresh_store(url, "sb_bench_availability").await;
    let s = "sb_bench_availability";
    let statements = [
        format!(
            "INSERT INTO {s}.slots (starts_at, ends_at, capacity, remaining) \
             SELECT now() + interval '1 day' + g * interval '1 minute', \
                    now() + interval '1 day' + g * interval '1 minute' + interval '1 hour', 2000, 2000 \
             FROM generate_series(1, 1000) g"
        ),
        format!(
            "INSERT INTO {s}.holds (slot_id, idempotency_key, status, expires_at, confirmed_at, cancelled_at, created_at) \
             SELECT (SELECT min(id) FROM {s}.slots) + g % 1000, 'fixture-' || g, \
                    CASE WHEN g / 1000 % 100 < 40 THEN 'confirmed' WHEN g / 1000 % 100 < 70 THEN 'cancelled' \
                         WHEN g / 1000 % 100 < 90 THEN 'expired' ELSE 'held' END, \
                    CASE WHEN g / 1000 % 100 = 99 THEN now() - interval '1 minute' ELSE now() + interval '1 hour' END, \
                    NULL, NULL, now() - interval '1 hour' \
             FROM generate_series(1, 1000000) g"
        ),
        format!(
            "UPDATE {s}.slots sl SET remaining = sl.capacity - taken.n \
             FROM (SELECT slot_id, count(*)::int4 AS n FROM {s}.holds \
                   WHERE status IN ('held', 'confirmed') GROUP BY slot_id) taken \
             WHERE taken.slot_id = sl.id"
        ),
        format!("VACUUM ANALYZE {s}.slots"),
        format!("VACUUM ANALYZE {s}.holds"),
    ];
    for statement in statements {
        sqlx::query(AssertSqlSafe(statement))
            .execute(store.pool())
            .await
            .unwrap();
    }
    store
}

/// A slot row as the bare scan reads it.
type SlotRow = (i64, chrono::DateTime<Utc>, chrono::DateTime<Utc>, i32, i32);

fn availability(c: &mut Criterion, rt: &tokio::runtime::Runtime, url: &str) {
    let store = rt.block_on(availability_fixture(url));
    let bare = "SELECT id, starts_at, ends_at, capacity, remaining \
                FROM sb_bench_availability.slots WHERE starts_at > $1 ORDER BY starts_at, id";
    let mut group = c.benchmark_group("postgres_availability_1000_slots_1m_holds");
    group.bench_function("bare SELECT of the slot rows (baseline)", |b| {
        b.to_async(rt).iter(|| async {
            let rows: Vec<SlotRow> = sqlx::query_as(bare)
                .bind(Utc::now())
                .fetch_all(store.pool())
                .await
                .unwrap();
            black_box(rows.len())
        })
    });
    group.bench_function(
        "PostgresStore::availability (10,000 expired unreclaimed)",
        |b| {
            b.to_async(rt).iter(|| async {
                let entries = store.availability(Utc::now()).await.unwrap().outcome;
                assert_eq!(entries.len(), 1_000);
                black_box(entries.len())
            })
        },
    );
    // The cost follows the expired holds still stored as held, not the history: reclaim nine
    // in ten of them (as holds on full slots would) and measure again.
    let s = "sb_bench_availability";
    rt.block_on(async {
        for statement in [
            format!(
                "WITH r AS (UPDATE {s}.holds SET status = 'expired' \
                            WHERE status = 'held' AND expires_at <= now() AND id % 10 <> 0 \
                            RETURNING slot_id), \
                      c AS (SELECT slot_id, count(*)::int4 AS n FROM r GROUP BY slot_id) \
                 UPDATE {s}.slots sl SET remaining = sl.remaining + c.n FROM c WHERE sl.id = c.slot_id"
            ),
            format!("VACUUM ANALYZE {s}.holds"),
        ] {
            sqlx::query(AssertSqlSafe(statement)).execute(store.pool()).await.unwrap();
        }
    });
    group.bench_function(
        "PostgresStore::availability (1,000 expired unreclaimed)",
        |b| {
            b.to_async(rt).iter(|| async {
                let entries = store.availability(Utc::now()).await.unwrap().outcome;
                black_box(entries.len())
            })
        },
    );
    group.finish();
}

/// 9 future slots of 10 units, each with 4 active holds and 3 expired unreclaimed ones; with
/// `abandoned`, also 1,000 started slots holding 300 expired held holds each, 300,000 in all.
async fn history_fixture(url: &str, schema: &str, abandoned: bool) -> PostgresStore {
    let store = fresh_store(url, schema).await;
    let s = schema;
    let mut statements = vec![
        format!(
            "INSERT INTO {s}.slots (starts_at, ends_at, capacity, remaining) \
             SELECT now() + g * interval '1 day', now() + g * interval '1 day' + interval '1 hour', \
                    10, 3 \
             FROM generate_series(1, 9) g"
        ),
        format!(
            "INSERT INTO {s}.holds (slot_id, idempotency_key, status, expires_at, created_at) \
             SELECT sl.id, 'future-' || sl.id || '-' || g, 'held', \
                    CASE WHEN g <= 4 THEN now() + interval '1 hour' \
                         ELSE now() - interval '1 hour' END, now() - interval '2 hours' \
             FROM {s}.slots sl, generate_series(1, 7) g"
        ),
    ];
    if abandoned {
        statements.extend([
            format!(
                "INSERT INTO {s}.slots (starts_at, ends_at, capacity, remaining) \
                 SELECT now() - interval '60 days' + g * interval '1 hour', \
                        now() - interval '60 days' + g * interval '1 hour' + interval '1 hour', \
                        300, 0 \
                 FROM generate_series(1, 1000) g"
            ),
            format!(
                "INSERT INTO {s}.holds (slot_id, idempotency_key, status, expires_at, created_at) \
                 SELECT sl.id, 'abandoned-' || sl.id || '-' || g, 'held', \
                        sl.starts_at - interval '1 day', sl.starts_at - interval '2 days' \
                 FROM {s}.slots sl, generate_series(1, 300) g WHERE sl.starts_at < now()"
            ),
        ]);
    }
    statements.extend([
        format!(
            "INSERT INTO {s}.hold_keys (idempotency_key, hold_id) \
             SELECT idempotency_key, id FROM {s}.holds"
        ),
        format!("VACUUM ANALYZE {s}.slots"),
        format!("VACUUM ANALYZE {s}.holds"),
    ]);
    for statement in statements {
        sqlx::query(AssertSqlSafe(statement))
            .execute(store.pool())
            .await
            .unwrap();
    }
    store
}

/// Median time of one availability read on each database, reads alternating between them.
async fn alternating_medians(a: &PostgresStore, b: &PostgresStore, rounds: usize) -> (f64, f64) {
    let (mut ta, mut tb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        for (store, times) in [(a, &mut ta), (b, &mut tb)] {
            let started = Instant::now();
            let entries = store.availability(Utc::now()).await.unwrap().outcome;
            times.push(started.elapsed().as_secs_f64());
            assert_eq!(entries.len(), 9);
            assert!(entries.iter().all(|e| e.remaining == 6));
        }
    }
    let median = |times: &mut Vec<f64>| {
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    (median(&mut ta), median(&mut tb))
}

async fn abandoned_history(url: &str) {
    let clean = history_fixture(url, "sb_bench_history_clean", false).await;
    let history = history_fixture(url, "sb_bench_history_abandoned", true).await;
    // Warm both caches, then measure.
    alternating_medians(&clean, &history, 200).await;
    let (clean_s, history_s) = alternating_medians(&clean, &history, 2_000).await;
    println!(
        "postgres availability, 9 future slots: without history {:.3} ms, with 300,000 \
         abandoned holds on started slots {:.3} ms, ratio {:.2}x",
        clean_s * 1e3,
        history_s * 1e3,
        history_s / clean_s
    );
}

/// What one configuration measured: hold-then-cancel pairs done, hold and cancel latencies.
#[derive(Default)]
struct Pairs {
    done: u64,
    holds: Vec<f64>,
    cancels: Vec<f64>,
}

impl Pairs {
    fn add(&mut self, other: Pairs) {
        self.done += other.done;
        self.holds.extend(other.holds);
        self.cancels.extend(other.cancels);
    }

    fn median(times: &mut [f64]) -> f64 {
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    }
}

/// Hold-then-cancel pairs on `engine` with 8 tasks for `run`, each step timed.
async fn pairs(
    engine: &Arc<BookingEngine<Arc<PostgresStore>>>,
    slots: &Arc<Vec<SlotId>>,
    run: Duration,
    tag: &str,
) -> Pairs {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|t| {
            let (engine, slots, stop) = (Arc::clone(engine), Arc::clone(slots), Arc::clone(&stop));
            let tag = format!(
                "{tag}-{t}-{}",
                Utc::now().timestamp_nanos_opt().unwrap_or(0)
            );
            tokio::spawn(async move {
                let mut done = Pairs::default();
                let mut i = 0_usize;
                while !stop.load(Ordering::Relaxed) {
                    let slot = slots[(i * CONNECTIONS as usize + t as usize) % slots.len()];
                    let started = Instant::now();
                    let placed = engine.hold(slot, &format!("{tag}-{i}")).await.unwrap();
                    let held = Instant::now();
                    engine
                        .cancel(&Scope::Anonymous, placed.hold.hold_id)
                        .await
                        .unwrap();
                    done.holds.push((held - started).as_secs_f64());
                    done.cancels.push(held.elapsed().as_secs_f64());
                    done.done += 1;
                    i += 1;
                }
                done
            })
        })
        .collect();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Pairs::default();
    for task in tasks {
        all.add(task.await.unwrap());
    }
    all
}

/// What migration 6's notifications cost the writes: the same hold-then-cancel pairs on three
/// schemas, alternating rounds: without the triggers (the baseline), with them and nobody
/// listening, and with them and three listening engines.
async fn notify_cost(url: &str) {
    const ROUNDS: usize = 4;
    const ROUND: Duration = Duration::from_secs(2);
    let configurations = [
        ("sb_bench_notify_off", false, 0),
        ("sb_bench_notify_unheard", true, 0),
        ("sb_bench_notify_on", true, 3),
    ];
    let mut setups = Vec::new();
    for (schema, notify, listeners) in configurations {
        let store = fresh_store(url, schema).await;
        let engine = Arc::new(BookingEngine::new(Arc::new(store.clone())));
        let slot_ids = Arc::new(slots(&engine, 100, 1_000_000).await);
        let mut followers = Vec::new();
        for _ in 0..listeners {
            let listener = BookingEngine::new(store.clone());
            followers.push((
                store.follow_changes(listener.invalidator()).await.unwrap(),
                listener,
            ));
        }
        if !notify {
            for trigger in [
                "slots_notify_insert_delete",
                "slots_notify_update",
                "slots_notify_truncate",
            ] {
                sqlx::query(AssertSqlSafe(format!(
                    "DROP TRIGGER {trigger} ON {schema}.slots"
                )))
                .execute(store.pool())
                .await
                .unwrap();
            }
        }
        setups.push((engine, slot_ids, followers));
    }
    for (engine, slot_ids, _) in &setups {
        pairs(engine, slot_ids, Duration::from_millis(500), "warm").await;
    }
    let mut totals: Vec<Pairs> = setups.iter().map(|_| Pairs::default()).collect();
    for round in 0..ROUNDS {
        for (i, (engine, slot_ids, _)) in setups.iter().enumerate() {
            totals[i].add(pairs(engine, slot_ids, ROUND, &format!("r{round}")).await);
        }
    }
    let seconds = (ROUNDS as f64) * ROUND.as_secs_f64();
    let figures: Vec<(f64, f64, f64)> = totals
        .iter_mut()
        .map(|p| {
            (
                p.done as f64 / seconds,
                Pairs::median(&mut p.holds),
                Pairs::median(&mut p.cancels),
            )
        })
        .collect();
    let notices: u64 = setups[2].2.iter().map(|(f, _)| f.stats().notices).sum();
    let (base_rate, base_hold, base_cancel) = figures[0];
    println!(
        "postgres hold-then-cancel pairs, 8 tasks, 100 slots; without the triggers: {base_rate:.0} \
         pairs/s, median hold {:.3} ms, median cancel {:.3} ms",
        base_hold * 1e3,
        base_cancel * 1e3
    );
    for ((schema, _, listeners), (rate, hold, cancel)) in
        configurations.iter().zip(&figures).skip(1)
    {
        println!(
            "  {schema} (triggers, {listeners} listeners): {rate:.0} pairs/s ({:.3}x), median hold \
             {:.3} ms ({:.3}x), median cancel {:.3} ms ({:.3}x)",
            rate / base_rate,
            hold * 1e3,
            hold / base_hold,
            cancel * 1e3,
            cancel / base_cancel
        );
    }
    println!("  ({notices} notices received by the three listeners)");
}

/// Holds and 5-line bookings per second on 1,000 slots, 8 connections, with the store's fast
/// paths and without them (the core's rules over its kernel alone), alternating rounds of
/// `RUN` on one schema: the ratio of each pair, fast over composed.
async fn composed_cost(url: &str) {
    const ROUNDS: usize = 2;
    let schema = "sb_bench_composed";
    let store = fresh_store(url, schema).await;
    let fast = BookingEngine::new(Arc::new(store.clone()));
    let composed = BookingEngine::new(Arc::new(store.without_fast_paths()));
    let ids = Arc::new(slots(&fast, 1_000, i32::MAX).await);
    for round in 0..ROUNDS {
        let mut rates = Vec::new();
        for (name, engine) in [("fast", &fast), ("composed", &composed)] {
            let tag = format!("{name}-{round}");
            let holds = engine_holds(engine, &ids, &tag).await;
            let (e, s) = (engine.clone(), Arc::clone(&ids));
            let booked = per_second(move |t, i| {
                let (engine, ids, tag) = (e.clone(), Arc::clone(&s), tag.clone());
                async move {
                    let first = block(t, i) * 5;
                    let request = (first..first + 5)
                        .fold(NewBooking::new(format!("b-{tag}-{t}-{i}")), |r, n| {
                            r.line(ids[n], 1)
                        });
                    let placed = engine.book(request).await.unwrap();
                    assert_eq!(placed.booking.lines.len(), 5);
                }
            })
            .await;
            rates.push((holds, booked));
        }
        let ((fast_holds, fast_booked), (holds, booked)) = (rates[0], rates[1]);
        println!(
            "postgres fast paths vs composed, 8 connections, 1,000 slots, round {round}: holds \
             {fast_holds:.0}/s vs {holds:.0}/s ({:.2}x), 5-line bookings {fast_booked:.0}/s vs \
             {booked:.0}/s ({:.2}x)",
            fast_holds / holds,
            fast_booked / booked
        );
    }
}

fn main() {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        println!("SKIPPED: the PostgreSQL benchmarks need DATABASE_URL");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut criterion = Criterion::default().configure_from_args();
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter
        .as_deref()
        .is_none_or(|f| "holds".contains(f) || f.contains("hold"))
    {
        rt.block_on(throughput(&url));
    }
    if filter.as_deref().is_none_or(|f| "bookings".contains(f)) {
        rt.block_on(bookings(&url));
    }
    if filter.as_deref().is_none_or(|f| "refusals".contains(f)) {
        rt.block_on(refusals(&url));
    }
    if filter.as_deref().is_none_or(|f| "history".contains(f)) {
        rt.block_on(abandoned_history(&url));
    }
    if filter.as_deref().is_none_or(|f| "consumer".contains(f)) {
        rt.block_on(consumer_cost(&url));
    }
    if filter.as_deref().is_none_or(|f| "notify".contains(f)) {
        rt.block_on(notify_cost(&url));
    }
    if filter.as_deref().is_none_or(|f| "followers".contains(f)) {
        rt.block_on(follower_cost(&url));
    }
    if filter.as_deref().is_none_or(|f| "composed".contains(f)) {
        rt.block_on(composed_cost(&url));
    }
    // Not by the criterion group's name, which contains "holds".
    if filter
        .as_deref()
        .is_none_or(|f| "availability".contains(f) || f.contains("availability"))
    {
        availability(&mut criterion, &rt, &url);
    }
    criterion.final_summary();
}
