//! Shared setup for the MariaDB/MySQL store's tests: a fresh database per test (dropped when
//! the test's guard goes away, pass or fail), on the server `MYSQL_URL` names (by default the
//! local MariaDB, `mysql://root@127.0.0.1:3306`), or on the three-node Galera cluster that
//! `.ci/galera` starts ([`cluster`]). These tests are never skipped: without a server they
//! fail, naming it.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{Duration, TimeZone, Utc};
use slot_booking::conformance::kit::Owned;
use slot_booking::{IdempotencyKey, NewSlot, SlotId, Store, Timestamp};
use slot_booking_mysql::sqlx::mysql::MySqlPoolOptions;
use slot_booking_mysql::sqlx::{AssertSqlSafe, Executor};
use slot_booking_mysql::MySqlStore;

/// The single server's URL, without a database.
pub fn server_url() -> String {
    std::env::var("MYSQL_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| "mysql://root@127.0.0.1:3306".to_owned())
        .trim_end_matches('/')
        .to_owned()
}

/// The three nodes' URLs of the Galera cluster: `GALERA_URLS` (space-separated) when set,
/// else the cluster `.ci/galera start` runs (started by the first test that asks, and left
/// running for the next binaries; `.ci/galera stop` stops it).
pub fn cluster() -> Vec<String> {
    static URLS: OnceLock<Vec<String>> = OnceLock::new();
    URLS.get_or_init(|| {
        if let Ok(urls) = std::env::var("GALERA_URLS") {
            let urls: Vec<String> = urls.split_whitespace().map(str::to_owned).collect();
            if urls.len() == 3 {
                return urls;
            }
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/galera");
        let status = std::process::Command::new("bash")
            .arg(script)
            .arg("start")
            .status()
            .unwrap_or_else(|e| panic!("running {script}: {e}"));
        assert!(status.success(), "{script} start failed: {status}");
        let ports = std::env::var("GALERA_PORTS").unwrap_or_else(|_| "13306 13307 13308".into());
        ports
            .split_whitespace()
            .map(|port| format!("mysql://root@127.0.0.1:{port}"))
            .collect()
    })
    .clone()
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A database name unique to this process, test and instant.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}_{}_{n}_{}",
        std::process::id(),
        now_nanos() % 1_000_000_000
    )
}

/// Drops a database when dropped, from a thread of its own (Drop cannot await).
#[derive(Debug)]
pub struct DatabaseGuard {
    pub server: String,
    pub name: String,
}

impl Drop for DatabaseGuard {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let url = format!("{server}/mysql");
                if let Ok(pool) = MySqlPoolOptions::new()
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .max_connections(1)
                    .connect(&url)
                    .await
                {
                    let _ = pool
                        .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
                        .await;
                    pool.close().await;
                }
            });
        });
        let _ = dropper.join();
    }
}

/// A fresh database on `server` (a server URL without a database), dropped with the guard.
pub async fn database(server: &str, prefix: &str) -> DatabaseGuard {
    let name = unique_name(prefix);
    let url = format!("{server}/mysql");
    let pool = MySqlPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("no MariaDB/MySQL server at {server} ({e}): start it"));
    pool.execute(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
        .await
        .unwrap();
    pool.close().await;
    DatabaseGuard {
        server: server.to_owned(),
        name,
    }
}

impl DatabaseGuard {
    pub fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }

    /// The URL of the same database on another server (another node of the cluster).
    pub fn url_on(&self, server: &str) -> String {
        format!("{server}/{}", self.name)
    }

    /// A migrated store with a pool of its own on this database.
    pub async fn store(&self) -> MySqlStore {
        let store = MySqlStore::connect(&self.url()).await.unwrap();
        store.migrate().await.unwrap();
        store
    }
}

pub type OwnedStore = Owned<MySqlStore, DatabaseGuard>;

/// A migrated store on a fresh database of the single server.
pub async fn owned_store(prefix: &str) -> OwnedStore {
    let guard = database(&server_url(), prefix).await;
    Owned {
        store: guard.store().await,
        guard,
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
        .create_slot(&NewSlot::new(at(3600), at(7200), capacity), t0())
        .await
        .unwrap()
        .slot_id
}

/// A store spread over the three nodes of the cluster: each call goes to the next node in
/// turn, so the conformance suites run their writes, reads and races across nodes (with the
/// causal reads `MySqlStore::connect` sets up on Galera, a call sees every earlier call's
/// writes whichever node served it).
#[derive(Debug)]
pub struct Spread {
    pub stores: Vec<MySqlStore>,
    next: AtomicU64,
}

impl Spread {
    /// The store of the next node in turn.
    pub fn next(&self) -> &MySqlStore {
        let n = self.next.fetch_add(1, Ordering::Relaxed) as usize;
        &self.stores[n % self.stores.len()]
    }

    /// Conflicts retried so far by the three nodes' stores.
    pub fn conflicts_retried(&self) -> u64 {
        self.stores.iter().map(MySqlStore::conflicts_retried).sum()
    }
}

slot_booking::forward_store!(impl[] HoldStore, SlotAdmin, HoldQueries, EventStore, BookingStore, PoolStore, WaitlistStore for Spread, |this| this.next());

/// How many times the harness waits again for a node whose causal read timed out.
const CAUSAL_WAITS: u32 = 20;

/// Whether `error` is a causal read that timed out (error 1205 under `wsrep_sync_wait`).
fn causal_read_timed_out(error: &slot_booking_mysql::sqlx::Error) -> bool {
    match error {
        slot_booking_mysql::sqlx::Error::Database(db) => db
            .try_downcast_ref::<slot_booking_mysql::sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|db| db.number() == 1205),
        _ => false,
    }
}

/// A fresh database on the cluster (made through node 1, replicated to all) and a migrated
/// store on it through each node.
pub async fn cluster_database(prefix: &str) -> (DatabaseGuard, Vec<MySqlStore>) {
    let nodes = cluster();
    let guard = database(&nodes[0], prefix).await;
    // A connection names its database before any statement can wait for the cluster: wait
    // on each node (causal read) until it has applied the `CREATE DATABASE`.
    for node in &nodes {
        let pool = MySqlPoolOptions::new()
            .idle_timeout(None)
            .max_lifetime(None)
            .max_connections(1)
            .connect(&format!("{node}/mysql"))
            .await
            .unwrap();
        pool.execute("SET SESSION wsrep_sync_wait = 15")
            .await
            .unwrap();
        // A node far behind (a loaded machine) lets the causal read time out (error 1205,
        // after `repl.causal_read_timeout`) before it has applied the statement: wait again.
        let mut waits = 0;
        let found: Option<String> = loop {
            let read = slot_booking_mysql::sqlx::query_scalar(
                "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
            )
            .bind(&guard.name)
            .fetch_optional(&pool)
            .await;
            match read {
                Ok(found) => break found,
                Err(error) if causal_read_timed_out(&error) && waits < CAUSAL_WAITS => waits += 1,
                Err(error) => panic!(
                    "{node}: waiting for CREATE DATABASE {}: {error}",
                    guard.name
                ),
            }
        };
        assert!(
            found.is_some(),
            "{node} has not applied CREATE DATABASE {}",
            guard.name
        );
        pool.close().await;
    }
    let mut stores = Vec::new();
    for node in &nodes {
        let store = MySqlStore::connect(&guard.url_on(node)).await.unwrap();
        store.migrate().await.unwrap();
        stores.push(store);
    }
    (guard, stores)
}

pub type SpreadStore = Owned<Spread, DatabaseGuard>;

/// A store spread over the cluster's three nodes, on a fresh database.
pub async fn spread_store(prefix: &str) -> SpreadStore {
    let (guard, stores) = cluster_database(prefix).await;
    Owned {
        store: Spread {
            stores,
            next: AtomicU64::new(0),
        },
        guard,
    }
}

/// A store on one node of the cluster (node 2), on a fresh database the cluster replicates: the
/// caller's transaction lives on one connection, so on one node, while the other nodes commit
/// what it conflicts with.
pub async fn node_store(prefix: &str) -> OwnedStore {
    let (guard, mut stores) = cluster_database(prefix).await;
    Owned {
        store: stores.swap_remove(1),
        guard,
    }
}
