//! A node of the Galera cluster killed with `kill -9` under a mixed load from three engines'
//! stores, one per node, then brought back (it rejoins by IST): nothing oversold, no
//! acknowledged hold lost or changed, and the invariant holds on every node afterwards.
//! Alone in its binary, since it stops a node the other cluster tests use.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{at, key, t0};
use slot_booking::{HoldId, HoldOutcome, HoldRequest, HoldStatus, HoldStore, Scope, Transition};
use slot_booking_mysql::{sqlx, MySqlStore};

const SLOTS: usize = 8;
const CAPACITY: i32 = 40;

fn galera(command: &str, node: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/galera");
    let status = std::process::Command::new("bash")
        .args([script, command, node])
        .status()
        .unwrap();
    assert!(status.success(), "galera {command} {node}: {status}");
}

/// What the load was told, by hold: its last acknowledged status.
type Acknowledged = Arc<Mutex<HashMap<HoldId, HoldStatus>>>;

async fn load(
    store: MySqlStore,
    worker: usize,
    slots: Vec<slot_booking::SlotId>,
    acked: Acknowledged,
    stop: Arc<AtomicBool>,
) -> (u64, u64) {
    let (mut calls, mut errors) = (0, 0);
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        calls += 1;
        let slot_id = slots[(worker * 7 + n) % slots.len()];
        let k = key(&format!("fault-{worker}-{n}"));
        let request = HoldRequest {
            slot_id,
            key: &k,
            owner: None,
            quantity: 1 + (n % 2) as i32,
            now: t0(),
            expires_at: at(3000),
        };
        let hold = match store.create_hold(request).await {
            Ok(d) => match d.outcome {
                HoldOutcome::Created(hold) => hold,
                _ => continue,
            },
            Err(_) => {
                errors += 1;
                continue;
            }
        };
        acked.lock().unwrap().insert(hold.hold_id, HoldStatus::Held);
        let change = match n % 4 {
            0 => {
                store
                    .confirm_hold(hold.hold_id, &Scope::Anonymous, at(1))
                    .await
            }
            1 => {
                store
                    .cancel_hold(hold.hold_id, &Scope::Anonymous, at(1))
                    .await
            }
            _ => continue,
        };
        calls += 1;
        match change {
            Ok(d) => {
                if let Transition::Applied(changed) = d.outcome {
                    acked
                        .lock()
                        .unwrap()
                        .insert(changed.hold_id, changed.status);
                }
            }
            Err(_) => errors += 1,
        }
    }
    (calls, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_under_load_loses_no_acknowledged_hold() {
    let (guard, stores) = common::cluster_database("fault").await;
    let mut slots = Vec::new();
    for _ in 0..SLOTS {
        slots.push(common::slot(&stores[0], CAPACITY).await);
    }
    let acked: Acknowledged = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for worker in 0..9 {
        let store = stores[worker % 3].clone();
        workers.push(tokio::spawn(load(
            store,
            worker,
            slots.clone(),
            Arc::clone(&acked),
            Arc::clone(&stop),
        )));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::spawn_blocking(|| galera("kill", "2"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    tokio::task::spawn_blocking(|| galera("restart", "2"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut calls, mut errors) = (0, 0);
    for worker in workers {
        let (c, e) = worker.await.unwrap();
        calls += c;
        errors += e;
    }
    let retried: u64 = stores.iter().map(MySqlStore::conflicts_retried).sum();
    let acked = acked.lock().unwrap().clone();
    // Every node, through fresh connections (causal reads: each has applied everything).
    for node in common::cluster() {
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .idle_timeout(None)
            .max_lifetime(None)
            .max_connections(1)
            .connect(&guard.url_on(&node))
            .await
            .unwrap();
        sqlx::query("SET SESSION wsrep_sync_wait = 15")
            .execute(&pool)
            .await
            .unwrap();
        let broken: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM slot_booking_slots s WHERE s.remaining < 0 \
             OR s.remaining + (SELECT COALESCE(SUM(h.quantity), 0) FROM slot_booking_holds h \
                               WHERE h.slot_id = s.id AND h.status IN ('held', 'confirmed')) \
                <> s.capacity",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(broken, 0, "{node}: a slot's units do not add up");
        let stored: Vec<(i64, String)> =
            sqlx::query_as("SELECT id, status FROM slot_booking_holds")
                .fetch_all(&pool)
                .await
                .unwrap();
        let stored: HashMap<i64, String> = stored.into_iter().collect();
        for (hold_id, status) in &acked {
            assert_eq!(
                stored.get(&hold_id.get()).map(String::as_str),
                Some(status.as_str()),
                "{node}: acknowledged hold {hold_id} lost or changed"
            );
        }
        pool.close().await;
    }
    eprintln!(
        "kill -9 of node 2 under load: {calls} calls, {} holds acknowledged, {errors} errors \
         (node 2 down), {retried} conflicts retried; every node: 0 oversold, 0 acknowledged \
         holds lost",
        acked.len()
    );
}
