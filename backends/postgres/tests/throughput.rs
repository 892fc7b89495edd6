//! A rough hold-throughput measurement, not a pass/fail test (the benches own the targets):
//! `cargo test --release -p slot_booking_postgres --test throughput -- --ignored --nocapture`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use slot_booking::{HoldOutcome, NewSlot, SlotId, Store};
use slot_booking_postgres::PostgresStore;
use sqlx::postgres::PgPoolOptions;

async fn run(
    store: Arc<PostgresStore>,
    slots: Arc<Vec<SlotId>>,
    tasks: usize,
    label: &'static str,
) -> f64 {
    let window = Duration::from_secs(3);
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (store, slots) = (Arc::clone(&store), Arc::clone(&slots));
            tokio::spawn(async move {
                let mut n = 0usize;
                while start.elapsed() < window {
                    let slot_id = slots[(t + n * tasks) % slots.len()];
                    let outcome = hold(&*store, slot_id, &format!("{label}-{t}-{n}"), at(0)).await;
                    assert!(matches!(outcome, HoldOutcome::Created(_)));
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for handle in handles {
        total += handle.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run it by hand in release mode"]
async fn hold_throughput() {
    let Some(ctx) = setup("hold_throughput").await else {
        return;
    };
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .test_before_acquire(false)
        .connect(&ctx.url)
        .await
        .unwrap();
    let store = Arc::new(PostgresStore::with_schema(pool, ctx.schema()).unwrap());
    let hot = store
        .create_slot(&NewSlot::new(at(3600), at(7200), i32::MAX))
        .await
        .unwrap()
        .slot_id;
    let mut spread = Vec::new();
    for _ in 0..1000 {
        spread.push(
            store
                .create_slot(&NewSlot::new(at(3600), at(7200), 1_000_000))
                .await
                .unwrap()
                .slot_id,
        );
    }
    let hot_rate = run(Arc::clone(&store), Arc::new(vec![hot]), 16, "hot").await;
    let spread_rate = run(Arc::clone(&store), Arc::new(spread), 16, "spread").await;
    println!(
        "PostgreSQL holds/s, 8 connections: hot slot {hot_rate:.0}, 1,000 slots {spread_rate:.0}"
    );
}
