//! A rough hold-throughput measurement, not a pass/fail test (the benches own the targets):
//! `cargo test --release -p slot_booking_sqlite --test throughput -- --ignored --nocapture`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use slot_booking::{HoldOutcome, NewSlot, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run it by hand in release mode"]
async fn hold_throughput() {
    let db = TempDb::new("throughput");
    let store = Arc::new(db.store().await);
    let slot_id = store
        .create_slot(&NewSlot::new(at(3600), at(7200), i32::MAX))
        .await
        .unwrap()
        .slot_id;
    for tasks in [1usize, 8] {
        let window = Duration::from_secs(3);
        let start = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let mut n = 0usize;
                    while start.elapsed() < window {
                        let k = format!("{tasks}-{t}-{n}");
                        assert!(matches!(
                            hold(&*store, slot_id, &k, at(0)).await,
                            HoldOutcome::Created(_)
                        ));
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
        let rate = total as f64 / start.elapsed().as_secs_f64();
        println!("SQLite holds/s, {tasks} task(s): {rate:.0}");
    }
}
