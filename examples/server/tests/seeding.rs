//! Demo seeding is idempotent across processes: servers starting together on an empty
//! database (each with a pool of its own, as separate processes have) add the demo slots once.

mod common;

use chrono::Utc;
use slot_booking::{AvailabilityQuery, BookingEngine};
use slot_booking_server::{demo_slots, Database};

const SEEDERS: usize = 6;

/// Seeds from `SEEDERS` databases opened on `url` at once; returns (slots added in all, slots
/// listed afterwards).
async fn seed_together(url: &str) -> (usize, usize) {
    let mut databases = Vec::new();
    for _ in 0..SEEDERS {
        databases.push(Database::open(url).await.unwrap());
    }
    let now = Utc::now();
    let slots = demo_slots(now);
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(SEEDERS));
    let tasks: Vec<_> = databases
        .iter()
        .cloned()
        .map(|database| {
            let (slots, start) = (slots.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                database.seed(&slots, now).await.unwrap()
            })
        })
        .collect();
    let mut added = 0;
    for task in tasks {
        added += task.await.unwrap();
    }
    let engine = BookingEngine::new(databases[0].store());
    let listed = engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap()
        .len();
    (added, listed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_servers_starting_together_seed_once() {
    let (url, dir) = common::sqlite_url().await;
    // Create and migrate first, as the first server to start would.
    Database::open(&url).await.unwrap();
    assert_eq!(seed_together(&url).await, (8, 8));
    // A later start adds nothing.
    assert_eq!(seed_together(&url).await, (0, 8));
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_servers_starting_together_seed_once() {
    let Some(url) = common::postgres_url().await else {
        return;
    };
    assert_eq!(seed_together(&url).await, (8, 8));
    assert_eq!(seed_together(&url).await, (0, 8));
    common::drop_postgres(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_servers_starting_together_seed_once() {
    let Some(url) = common::mysql_url().await else {
        return;
    };
    assert_eq!(seed_together(&url).await, (8, 8));
    assert_eq!(seed_together(&url).await, (0, 8));
    common::drop_mysql(&url).await;
}
