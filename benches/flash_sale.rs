//! A flash sale on PostgreSQL (needs `DATABASE_URL` and `pgbench`; without the URL this bench
//! prints that it was skipped): 64 concurrent clients hold one unit each, again and again, on
//! one slot of 10,000 units until it is sold out, through the engine over `PostgresStore`
//! (8 connections, the holds of the slot placed together, `group.rs`), against `pgbench`
//! running the single-row hold statement (`benches/pgbench/hold.sql`, one statement per hold)
//! with 64 clients on a slot of 10,000 units, the same number of holds. Rounds alternate; each
//! side's sale is on a fresh slot. Reported per round: holds per second while units last, the
//! latency of a hold (p50, p99), and the ratio; checked: exactly 10,000 units sold, none twice.

#![allow(missing_docs)]

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slot_booking::{BookingEngine, BookingError, SlotId};
use slot_booking_postgres::PostgresStore;
use sqlx::AssertSqlSafe;

#[path = "support/postgres.rs"]
mod support;
use support::{fresh_store, slots};

const CLIENTS: usize = 64;
const UNITS: i32 = 10_000;
const ROUNDS: usize = 3;
const PGBENCH_SCRIPT: &str = include_str!("pgbench/hold.sql");

/// One side's sale: holds per second while units lasted, p50 and p99 latency in ms.
struct Sale {
    per_second: f64,
    p50: f64,
    p99: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or(f64::NAN)
}

fn sale_of(mut latencies: Vec<f64>, elapsed: Duration) -> Sale {
    latencies.sort_by(f64::total_cmp);
    Sale {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
    }
}

/// 64 tasks hold one unit each, again and again, until the slot is sold out: the holds placed
/// (their latencies) over the time until the last unit went.
async fn engine_sale(engine: &BookingEngine<Arc<PostgresStore>>, slot: SlotId, tag: &str) -> Sale {
    let sold_out = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let (engine, sold_out, tag) = (engine.clone(), sold_out.clone(), tag.to_owned());
            tokio::spawn(async move {
                let (mut latencies, mut last) = (Vec::new(), started);
                for i in 0.. {
                    if sold_out.load(Ordering::Relaxed) {
                        break;
                    }
                    let began = Instant::now();
                    match engine.hold(slot, &format!("{tag}-{t}-{i}")).await {
                        Ok(_) => {
                            last = Instant::now();
                            latencies.push((last - began).as_secs_f64() * 1e3);
                        }
                        Err(BookingError::SoldOut { .. }) => {
                            sold_out.store(true, Ordering::Relaxed)
                        }
                        Err(other) => panic!("unexpected {other:?}"),
                    }
                }
                (latencies, last)
            })
        })
        .collect();
    let (mut latencies, mut last) = (Vec::new(), started);
    for task in tasks {
        let (mine, my_last) = task.await.unwrap();
        latencies.extend(mine);
        last = last.max(my_last);
    }
    assert_eq!(latencies.len(), UNITS as usize, "every unit sold once");
    sale_of(latencies, last - started)
}

/// `pgbench` with 64 clients running the single-row hold statement on `slot` until it has made
/// as many attempts as there are units (rounded up to whole clients): holds per second and the
/// latency of each transaction, from its per-transaction log.
fn pgbench_sale(url: &str, schema: &str, slot: SlotId) -> Option<Sale> {
    let dir = std::env::temp_dir().join(format!("sb_flash_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    let script = dir.join("hold.sql");
    std::fs::write(&script, PGBENCH_SCRIPT.replace("{schema}", schema)).ok()?;
    let per_client = (UNITS as usize).div_ceil(CLIENTS);
    let output = Command::new("pgbench")
        .current_dir(&dir)
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &CLIENTS.to_string(),
            "-j",
            "2",
        ])
        .args(["-t", &per_client.to_string(), "-l", "--log-prefix", "tx"])
        .args([
            "-D",
            &format!("first={}", slot.0),
            "-D",
            &format!("last={}", slot.0),
        ])
        .arg("-f")
        .arg(&script)
        .arg(url)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let tps: f64 = text
        .lines()
        .find(|l| l.starts_with("tps ="))?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()?;
    // Each log line: client, transaction, latency (µs), script, epoch s, µs.
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(&dir).ok()?.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("tx.") {
            continue;
        }
        let log = std::fs::read_to_string(entry.path()).ok()?;
        latencies.extend(
            log.lines()
                .filter_map(|l| l.split_whitespace().nth(2)?.parse::<f64>().ok())
                .map(|us| us / 1e3),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    latencies.sort_by(f64::total_cmp);
    Some(Sale {
        per_second: tps,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
    })
}

/// Units sold on `slot` as the tables say, and whether its row agrees: held units, remaining.
async fn sold(store: &PostgresStore, schema: &str, slot: SlotId) -> (i64, i32) {
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT (SELECT coalesce(sum(quantity), 0)::int8 FROM {schema}.holds \
                 WHERE slot_id = $1 AND status = 'held'), \
                (SELECT remaining FROM {schema}.slots WHERE id = $1)"
    )))
    .bind(slot.0)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Vacuums the slots, so each side starts its sale on a table alike: a sale leaves thousands
/// of dead versions of its slot's row behind, which the next sale would wade through. (The
/// other tables are left to autovacuum: statistics taken while they are empty would plan the
/// first sale's key lookups as scans.)
async fn vacuum(store: &PostgresStore, schema: &str) {
    sqlx::query(AssertSqlSafe(format!("VACUUM {schema}.slots")))
        .execute(store.pool())
        .await
        .unwrap();
}

async fn flash_sale(url: &str) {
    let schema = "sb_bench_flash";
    let store = Arc::new(fresh_store(url, schema).await);
    let engine = BookingEngine::new(Arc::clone(&store));
    let mut ratios = Vec::new();
    for round in 0..ROUNDS {
        let ours_slot = slots(&engine, 1, UNITS).await[0];
        vacuum(&store, schema).await;
        let before = store.group_commits();
        let ours = engine_sale(&engine, ours_slot, &format!("r{round}")).await;
        let groups = store.group_commits();
        assert_eq!(
            sold(&store, schema, ours_slot).await,
            (i64::from(UNITS), 0),
            "0 oversold"
        );
        let theirs_slot = slots(&engine, 1, UNITS).await[0];
        vacuum(&store, schema).await;
        let Some(theirs) = pgbench_sale(url, schema, theirs_slot) else {
            println!(
                "flash sale round {round}: engine {:.0} holds/s, p50 {:.2} ms, p99 {:.2} ms \
                 (pgbench unavailable)",
                ours.per_second, ours.p50, ours.p99
            );
            continue;
        };
        assert_eq!(
            sold(&store, schema, theirs_slot).await,
            (i64::from(UNITS), 0)
        );
        let ratio = ours.per_second / theirs.per_second;
        ratios.push(ratio);
        println!(
            "flash sale round {round}, 64 clients, one slot of {UNITS}: engine {:.0} holds/s \
             (p50 {:.2} ms, p99 {:.2} ms; {} groups of {:.1} holds on average, largest {}), \
             pgbench {:.0} holds/s (p50 {:.2} ms, p99 {:.2} ms): {ratio:.2}x",
            ours.per_second,
            ours.p50,
            ours.p99,
            groups.groups - before.groups,
            (groups.requests - before.requests) as f64
                / (groups.groups - before.groups).max(1) as f64,
            groups.largest,
            theirs.per_second,
            theirs.p50,
            theirs.p99,
        );
    }
    if !ratios.is_empty() {
        ratios.sort_by(f64::total_cmp);
        println!(
            "flash sale: median ratio {:.2}x over {} rounds",
            ratios[ratios.len() / 2],
            ratios.len()
        );
    }
}

fn main() {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        println!("SKIPPED: the flash sale benchmark needs DATABASE_URL");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(flash_sale(&url));
}
