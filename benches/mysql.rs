//! MariaDB/MySQL, on one server and on a three-node Galera cluster, side by side with a bare
//! sqlx loop of the same statements in the same run.
//!
//! Servers: the single MariaDB `MYSQL_URL` names (by default `mysql://root@127.0.0.1:3306`),
//! and the three Galera nodes `GALERA_URLS` names (space-separated; by default ports
//! 13306-13308 on loopback, where `.ci/galera start` runs them). A part whose server does not
//! answer (or whose cluster is not three synced nodes) prints that it was skipped; nothing here
//! starts or stops a server. Each part works in a database of its own
//! (`bench_mysql_<pid>_<part>`, made on node 1 and awaited on every node before use), dropped at
//! the end. `benches/mysql.sh` runs it; an argument picks parts (`holds`, `single`, `galera`,
//! `conflicts`, `statements`).
//!
//! 1. **Hold throughput** (`holds`), 8 tasks over 1,000 slots (of a capacity no run reaches,
//!    so every hold takes its unit; each task draws its slots from a fixed pseudo-random
//!    sequence, the same for every side), each side in turn for 5 s, 5 rounds, after a 1 s
//!    warm-up each; holds per second are the medians of the rounds, and the ratios are
//!    against the bare loop of the same configuration. The sides:
//!    - `engine`: `BookingEngine::hold` over `MySqlStore`;
//!    - `store`: `HoldStore::create_hold` on the store itself;
//!    - `bare`: a bare sqlx loop of exactly the statements the store's hold runs when the slot
//!      has the unit, in the same transaction shape: the unit's `BEGIN`, `SAVEPOINT`, the
//!      conditional decrement, the read of the slot's pools, the hold's `INSERT`, its
//!      `hold_placed` event's `INSERT`, `RELEASE SAVEPOINT` (each write behind the store's guard,
//!      `SET STATEMENT tx_read_only = 1 FOR`), the unit's check (`SELECT @@in_transaction`),
//!      `COMMIT` (the statement text copied from the store's `sql.rs`, `guard.rs` and
//!      `units.rs`, which are private). A conflict (1213, 1205, 1047, 1180, 1305,
//!      1792, as the store's) runs the transaction again at once, counted;
//!    - on Galera also `bare, no causal wait`: the same loop on connections with
//!      `wsrep_sync_wait = 0`, which shows what the store's causal reads cost.
//!
//!    Every pool of every side is built by `MySqlStore::pool_options()` (READ COMMITTED, and on
//!    a Galera node `wsrep_sync_wait = 15`) with 8 connections in all per side, opened before
//!    the first round. Configurations: the single MariaDB; Galera node 1 alone; the three
//!    nodes, task `t` bound to node `t mod 3` (3, 3 and 2 tasks), each side with one pool (and
//!    one store, one engine) per node.
//! 2. **The cost of a conflict retry** (`conflicts`): one hot slot, 8 tasks, each with a store
//!    of its own (one connection), so a call's retries are the `conflicts_retried()` delta
//!    across it: spread over the three nodes (tasks `t mod 3`), where certification makes
//!    holds on different nodes conflict, and on node 1 alone, where the slot's row lock queues
//!    them instead. 10 s each: holds per second, retries per hold, and the median and p99
//!    latency of the holds that needed no retry and of those that needed at least one. Then
//!    the bare loop (immediate retries) on the spread hot slot, 8 tasks, for comparison with
//!    the store's jittered back-off.
//! 3. **Statements per hold** (`statements`), single MariaDB: the server's session counters
//!    (`SHOW SESSION STATUS`, `Com_*`) across 200 holds on a pool of one connection, through
//!    the store and through the bare loop: the check that the loop runs the store's
//!    statements.

#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use slot_booking::{
    BookingEngine, HoldOutcome, HoldRequest, HoldStore, IdempotencyKey, NewSlot, SlotId,
};
use slot_booking_mysql::sqlx::mysql::{MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use slot_booking_mysql::sqlx::{self, AssertSqlSafe, Connection, Executor};
use slot_booking_mysql::MySqlStore;

/// Concurrent tasks (and connections per side).
const TASKS: usize = 8;
const SLOTS: i64 = 1_000;
/// More units than any run takes: every hold is taken.
const CAPACITY: i32 = 100_000_000;
const ROUND: Duration = Duration::from_secs(5);
const ROUNDS: usize = 5;
const WARM_UP: Duration = Duration::from_secs(1);
const HOT_RUN: Duration = Duration::from_secs(10);

// The statements of the store's hold when the slot has the unit, copied from
// `backends/mysql/src/sql.rs` (`Statements::take_units`, `pools_of_slot`, `insert_line`,
// `append_event`) with the default table prefix `slot_booking_`, character for character,
// each write behind the guard of `backends/mysql/src/guard.rs` (`WRITE_GUARD`).
// Their order and parameters are those of a placement (`place.rs`, `PlaceKernel::place`:
// the takes, then `insert_row` and `units::log_hold`, under one savepoint).

/// (quantity, slot id, quantity, now)
const TAKE_UNITS: &str = "SET STATEMENT tx_read_only = 1 FOR \
     UPDATE slot_booking_slots SET remaining = remaining - ? \
                 WHERE id = ? AND remaining >= ? AND starts_at > ? AND NOT closed \
                   AND removed_at IS NULL AND waiting = 0";
/// (slot id)
const POOLS_OF_SLOT: &str =
    "SELECT pool_id FROM slot_booking_pool_slots WHERE slot_id = ? ORDER BY pool_id";
/// (slot id, key, expires_at, now, quantity, owner, booking id)
const INSERT_HOLD: &str = "SET STATEMENT tx_read_only = 1 FOR \
     INSERT INTO slot_booking_holds (slot_id, idempotency_key, status, expires_at, created_at, \
                     quantity, owner, booking_id) \
                 VALUES (?, ?, 'held', ?, ?, ?, ?, ?)";
/// (kind, slot id, hold id, owner, quantity, at)
const APPEND_EVENT: &str = "SET STATEMENT tx_read_only = 1 FOR \
     INSERT INTO slot_booking_events (kind, slot_id, hold_id, owner, quantity, occurred_at) \
                 VALUES (?, ?, ?, ?, ?, ?)";

/// The unit of work's check, copied from `backends/mysql/src/units.rs` (`UNIT_CHECK`); its
/// begin is sqlx's plain `BEGIN`.
const UNIT_CHECK: &str = "SELECT CAST(@@in_transaction AS SIGNED)";

/// The MySQL error numbers the store retries (`retry.rs`, `CONFLICTS`).
const CONFLICTS: [u16; 6] = [1213, 1205, 1047, 1180, 1305, 1792];

fn conflict_code(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number)
            .filter(|code| CONFLICTS.contains(code)),
        _ => None,
    }
}

/// One hold by the bare loop: the store's statements in the store's transaction shape. The
/// unit is always there (see [`CAPACITY`]), so the decrement must match.
async fn bare_hold_once(pool: &MySqlPool, slot: i64, key: &str) -> Result<(), sqlx::Error> {
    let now = Utc::now();
    let now_us = now.timestamp_micros();
    let expires_us = (now + chrono::Duration::minutes(5)).timestamp_micros();
    let mut tx = pool.begin().await?;
    let steps = async {
        let mut savepoint = Connection::begin(&mut *tx).await?;
        let taken = sqlx::query(TAKE_UNITS)
            .bind(1_i32)
            .bind(slot)
            .bind(1_i32)
            .bind(now_us)
            .execute(&mut *savepoint)
            .await?;
        assert_eq!(taken.rows_affected(), 1, "slot {slot} had no unit");
        let pools: Vec<i64> = sqlx::query_scalar(POOLS_OF_SLOT)
            .bind(slot)
            .fetch_all(&mut *savepoint)
            .await?;
        assert!(pools.is_empty());
        let inserted = sqlx::query(INSERT_HOLD)
            .bind(slot)
            .bind(key)
            .bind(expires_us)
            .bind(now_us)
            .bind(1_i32)
            .bind(None::<&str>)
            .bind(None::<i64>)
            .execute(&mut *savepoint)
            .await?;
        let hold_id = i64::try_from(inserted.last_insert_id()).unwrap();
        sqlx::query(APPEND_EVENT)
            .bind("hold_placed")
            .bind(slot)
            .bind(Some(hold_id))
            .bind(None::<&str>)
            .bind(1_i32)
            .bind(now_us)
            .execute(&mut *savepoint)
            .await?;
        savepoint.commit().await?;
        let open = sqlx::raw_sql(UNIT_CHECK).fetch_all(&mut *tx).await?;
        assert_eq!(open.len(), 1, "the unit's check reads one row");
        Ok(())
    }
    .await;
    match steps {
        Ok(()) => tx.commit().await,
        Err(error) => {
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

/// A hold by the bare loop, run again at once after each conflict: how many conflicts.
async fn bare_hold(pool: &MySqlPool, slot: i64, key: &str) -> Result<u64, sqlx::Error> {
    let mut conflicts = 0;
    loop {
        match bare_hold_once(pool, slot, key).await {
            Ok(()) => return Ok(conflicts),
            Err(error) if conflict_code(&error).is_some() => conflicts += 1,
            Err(error) => return Err(error),
        }
    }
}

/// A hold through the store itself.
async fn store_hold(store: &MySqlStore, slot: i64, key: &str) -> Result<(), String> {
    let now = Utc::now();
    let key = IdempotencyKey::new(key).unwrap();
    let request = HoldRequest {
        slot_id: SlotId(slot),
        key: &key,
        owner: None,
        quantity: 1,
        now,
        expires_at: now + chrono::Duration::minutes(5),
    };
    match store.create_hold(request).await {
        Ok(decided) => match decided.outcome {
            HoldOutcome::Created(_) => Ok(()),
            other => panic!("hold on slot {slot} not created: {other:?}"),
        },
        Err(error) => Err(error.to_string()),
    }
}

/// Task `t`'s `i`-th slot index: a fixed pseudo-random sequence, the same for every side.
fn pick(t: usize, i: u64, n: usize) -> usize {
    let mut x = ((t as u64) << 40 | i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    (x % n as u64) as usize
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `q` quantile (0 to 1) of sorted `values`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64) * q) as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A database of the bench's own on a server (or cluster, through its first node); dropped
/// with the guard, pass or fail, from a thread of its own (Drop cannot await).
struct Database {
    server: String,
    name: String,
}

impl Database {
    /// Creates it on `nodes[0]` and waits until every node has applied the `CREATE DATABASE`
    /// (a connection names its database before any statement can wait for the cluster).
    async fn create(nodes: &[String], part: &str) -> Database {
        let name = format!("bench_mysql_{}_{part}", std::process::id());
        let admin = admin_pool(&nodes[0]).await.unwrap();
        admin
            .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
            .await
            .unwrap();
        admin
            .execute(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .await
            .unwrap();
        admin.close().await;
        let database = Database {
            server: nodes[0].clone(),
            name,
        };
        for node in &nodes[1..] {
            let pool = admin_pool(node).await.unwrap();
            pool.execute("SET SESSION wsrep_sync_wait = 15")
                .await
                .unwrap();
            let found: Option<String> = sqlx::query_scalar(
                "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
            )
            .bind(&database.name)
            .fetch_optional(&pool)
            .await
            .unwrap();
            assert!(found.is_some(), "{node} has not applied CREATE DATABASE");
            pool.close().await;
        }
        database
    }

    fn url_on(&self, node: &str) -> String {
        format!("{node}/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                if let Ok(pool) = admin_pool(&server).await {
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

async fn admin_pool(server: &str) -> Result<MySqlPool, sqlx::Error> {
    MySqlPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&format!("{server}/mysql"))
        .await
}

/// A pool of `connections` as the store opens them (`MySqlStore::pool_options`), all opened
/// now.
async fn store_pool(url: &str, connections: u32) -> MySqlPool {
    MySqlStore::pool_options()
        .max_connections(connections)
        .min_connections(connections)
        .test_before_acquire(false)
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// The same, with the causal wait off (`wsrep_sync_wait = 0`).
async fn no_wait_pool(url: &str, connections: u32) -> MySqlPool {
    MySqlPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(connections)
        .min_connections(connections)
        .test_before_acquire(false)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await?;
                conn.execute("SET SESSION wsrep_sync_wait = 0").await?;
                Ok(())
            })
        })
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Tasks of the 8 bound to node `node` of `nodes` (task `t` to node `t mod nodes`).
fn tasks_on(node: usize, nodes: usize) -> u32 {
    (0..TASKS).filter(|t| t % nodes == node).count() as u32
}

/// Migrated stores, one per node, on a fresh database; 1,000 slots made on node 1.
async fn fixture(nodes: &[String], part: &str, slots: i64) -> (Database, Vec<i64>) {
    let database = Database::create(nodes, part).await;
    for node in nodes {
        let store = MySqlStore::new(store_pool(&database.url_on(node), 1).await);
        store.migrate().await.unwrap();
        store.pool().close().await;
    }
    let store = MySqlStore::new(store_pool(&database.url_on(&nodes[0]), 1).await);
    let start = Utc::now() + chrono::Duration::days(1);
    let mut ids = Vec::new();
    for i in 0..slots {
        let starts_at = start + chrono::Duration::minutes(i);
        let slot = store
            .create_slot(
                &NewSlot::new(starts_at, starts_at + chrono::Duration::hours(1), CAPACITY),
                Utc::now(),
            )
            .await
            .unwrap();
        ids.push(slot.slot_id.get());
    }
    store.pool().close().await;
    (database, ids)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Engine,
    Store,
    Bare,
    BareNoWait,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Engine => "engine",
            Side::Store => "store",
            Side::Bare => "bare",
            Side::BareNoWait => "bare, no causal wait",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Side::Engine => "e",
            Side::Store => "s",
            Side::Bare => "b",
            Side::BareNoWait => "w",
        }
    }
}

/// One configuration of part 1: per node, a store (and an engine over it) and the bare loop's
/// pools, each with the node's share of the 8 connections.
struct Setup {
    stores: Vec<MySqlStore>,
    engines: Vec<BookingEngine<MySqlStore>>,
    bare: Vec<MySqlPool>,
    bare_no_wait: Vec<MySqlPool>,
    slots: Vec<i64>,
    /// Conflicts the bare loop ran again.
    bare_conflicts: AtomicU64,
    /// Holds made, every side.
    made: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Setup {
    async fn new(nodes: &[String], database: &Database, slots: Vec<i64>, galera: bool) -> Self {
        let mut setup = Setup {
            stores: Vec::new(),
            engines: Vec::new(),
            bare: Vec::new(),
            bare_no_wait: Vec::new(),
            slots,
            bare_conflicts: AtomicU64::new(0),
            made: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
        };
        for (n, node) in nodes.iter().enumerate() {
            let (url, connections) = (database.url_on(node), tasks_on(n, nodes.len()));
            let store = MySqlStore::new(store_pool(&url, connections).await);
            setup.engines.push(BookingEngine::new(store.clone()));
            setup.stores.push(store);
            setup.bare.push(store_pool(&url, connections).await);
            if galera {
                setup
                    .bare_no_wait
                    .push(no_wait_pool(&url, connections).await);
            }
        }
        setup
    }

    fn sides(&self) -> Vec<Side> {
        let mut sides = vec![Side::Engine, Side::Store, Side::Bare];
        if !self.bare_no_wait.is_empty() {
            sides.push(Side::BareNoWait);
        }
        sides
    }

    fn store_conflicts(&self) -> u64 {
        self.stores.iter().map(MySqlStore::conflicts_retried).sum()
    }

    fn failed(&self, error: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.first_error.lock().unwrap().get_or_insert(error);
    }

    /// Task `t`'s `i`-th hold on `side`.
    async fn hold(&self, side: Side, round: &str, t: usize, i: u64) {
        let node = t % self.stores.len();
        let slot = self.slots[pick(t, i, self.slots.len())];
        let key = format!("{}-{round}-{t}-{i}", side.tag());
        let failed = match side {
            Side::Engine => self.engines[node]
                .hold(SlotId(slot), &key)
                .await
                .map(|placed| assert!(!placed.replayed))
                .err()
                .map(|e| e.to_string()),
            Side::Store => store_hold(&self.stores[node], slot, &key).await.err(),
            Side::Bare | Side::BareNoWait => {
                let pool = if side == Side::Bare {
                    &self.bare[node]
                } else {
                    &self.bare_no_wait[node]
                };
                match bare_hold(pool, slot, &key).await {
                    Ok(conflicts) => {
                        self.bare_conflicts.fetch_add(conflicts, Ordering::Relaxed);
                        None
                    }
                    Err(e) => Some(e.to_string()),
                }
            }
        };
        match failed {
            Some(error) => self.failed(error),
            None => {
                self.made.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn close(self) {
        for pool in self
            .stores
            .iter()
            .map(MySqlStore::pool)
            .chain(&self.bare)
            .chain(&self.bare_no_wait)
        {
            pool.close().await;
        }
    }
}

/// Calls per second: 8 tasks for `run`, task `t`'s `i`-th call made by `call(t, i)`.
async fn per_second<F, Fut>(run: Duration, call: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (done, stop, call) = (done.clone(), stop.clone(), call.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    call(t, i).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Holds per second on `side`, 8 tasks for `run`.
async fn side_round(setup: &Arc<Setup>, side: Side, round: &str, run: Duration) -> f64 {
    let (setup, round) = (Arc::clone(setup), round.to_owned());
    per_second(run, move |t, i| {
        let (setup, round) = (Arc::clone(&setup), round.clone());
        async move { setup.hold(side, &round, t, i).await }
    })
    .await
}

/// On every node, every hold made is stored with its `hold_placed` event, and every slot's
/// units left plus units held make its capacity.
async fn check_balances(nodes: &[String], database: &Database, holds_made: u64) {
    for node in nodes {
        let pool = store_pool(&database.url_on(node), 1).await;
        let (off, holds, events): (i64, i64, i64) = sqlx::query_as(
            "SELECT \
               CAST((SELECT COUNT(*) FROM slot_booking_slots s WHERE s.remaining + \
                  (SELECT COALESCE(SUM(h.quantity), 0) FROM slot_booking_holds h \
                   WHERE h.slot_id = s.id AND h.status = 'held') <> s.capacity) AS SIGNED), \
               CAST((SELECT COUNT(*) FROM slot_booking_holds) AS SIGNED), \
               CAST((SELECT COUNT(*) FROM slot_booking_events WHERE kind = 'hold_placed') \
                    AS SIGNED)",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(off, 0, "{node}: slots off balance");
        assert_eq!(holds, events, "{node}: one event per hold");
        assert_eq!(
            holds as u64, holds_made,
            "{node}: every hold counted is stored"
        );
        pool.close().await;
    }
}

/// Part 1 on one configuration: the sides in alternating rounds, the medians and ratios.
async fn throughput(name: &str, nodes: &[String], part: &str, galera: bool) {
    let (database, slots) = fixture(nodes, part, SLOTS).await;
    let setup = Arc::new(Setup::new(nodes, &database, slots, galera).await);
    let sides = setup.sides();
    for &side in &sides {
        side_round(&setup, side, "warm", WARM_UP).await;
    }
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let (mut store_conflicts, mut bare_conflicts) = (BTreeMap::new(), BTreeMap::new());
    for round in 0..ROUNDS {
        // Alternate the order too: no side always runs right after the same one.
        let mut order = sides.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for side in order {
            let (s0, b0) = (
                setup.store_conflicts(),
                setup.bare_conflicts.load(Ordering::Relaxed),
            );
            let rate = side_round(&setup, side, &format!("r{round}"), ROUND).await;
            rates.entry(side.name()).or_default().push(rate);
            *store_conflicts.entry(side.name()).or_insert(0) += setup.store_conflicts() - s0;
            *bare_conflicts.entry(side.name()).or_insert(0) +=
                setup.bare_conflicts.load(Ordering::Relaxed) - b0;
        }
    }
    let medians: BTreeMap<&str, f64> = rates
        .iter_mut()
        .map(|(side, rates)| (*side, median(rates)))
        .collect();
    let bare = medians["bare"];
    println!(
        "mysql holds, {name}, 8 connections, 1,000 slots ({ROUNDS} rounds of {} s, medians):",
        ROUND.as_secs()
    );
    for side in &sides {
        let side = side.name();
        let rounds: Vec<String> = rates[side].iter().map(|r| format!("{r:.0}")).collect();
        let conflicts = match side {
            "engine" | "store" => format!("{} conflicts retried", store_conflicts[side]),
            _ => format!("{} conflicts run again", bare_conflicts[side]),
        };
        println!(
            "  {side:<21} {:>6.0}/s  ratio to bare {:.2}x  (rounds, sorted: {}; {conflicts})",
            medians[side],
            medians[side] / bare,
            rounds.join(", ")
        );
    }
    let errors = setup.errors.load(Ordering::Relaxed);
    if errors > 0 {
        println!(
            "  {errors} holds failed (first: {})",
            setup.first_error.lock().unwrap().as_deref().unwrap_or("")
        );
    }
    check_balances(nodes, &database, setup.made.load(Ordering::Relaxed)).await;
    match Arc::try_unwrap(setup) {
        Ok(setup) => setup.close().await,
        Err(_) => unreachable!("every task has ended"),
    }
    drop(database);
}

/// Holds on one hot slot, 8 tasks each with a store of its own (one connection) on node
/// `t mod nodes`, for `run`: per hold, its latency and its retries.
async fn hot_store_holds(
    nodes: &[String],
    database: &Database,
    slot: i64,
    tag: &str,
    run: Duration,
) -> (Vec<(f64, u64)>, u64, f64) {
    let mut stores = Vec::new();
    for t in 0..TASKS {
        let url = database.url_on(&nodes[t % nodes.len()]);
        stores.push(MySqlStore::new(store_pool(&url, 1).await));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(t, store)| {
            let (store, stop, tag) = (store.clone(), stop.clone(), tag.to_owned());
            tokio::spawn(async move {
                let (mut calls, mut failed, mut i) = (Vec::new(), 0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let before = store.conflicts_retried();
                    let at = Instant::now();
                    let held = store_hold(&store, slot, &format!("{tag}-{t}-{i}")).await;
                    let took = at.elapsed().as_secs_f64();
                    let retries = store.conflicts_retried() - before;
                    match held {
                        Ok(()) => calls.push((took, retries)),
                        Err(_) => failed += 1,
                    }
                }
                (calls, failed)
            })
        })
        .collect();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let (mut calls, mut failed) = (Vec::new(), 0);
    for task in tasks {
        let (c, f) = task.await.unwrap();
        calls.extend(c);
        failed += f;
    }
    let seconds = started.elapsed().as_secs_f64();
    for store in &stores {
        store.pool().close().await;
    }
    (calls, failed, seconds)
}

fn describe_hot(name: &str, calls: &[(f64, u64)], failed: u64, seconds: f64) {
    let retries: u64 = calls.iter().map(|c| c.1).sum();
    // The latencies in ms of the holds whose retries are in `retries`, sorted.
    let latencies = |retries: std::ops::RangeInclusive<u64>| {
        let mut l: Vec<f64> = calls
            .iter()
            .filter(|c| retries.contains(&c.1))
            .map(|c| c.0 * 1e3)
            .collect();
        l.sort_by(f64::total_cmp);
        l
    };
    let clean = latencies(0..=0);
    let retried = latencies(1..=u64::MAX);
    println!(
        "  {name}: {:.0} holds/s, {} holds, {retries} retries ({:.3} per hold), {} holds \
         ({:.1}%) needed at least one{}",
        calls.len() as f64 / seconds,
        calls.len(),
        retries as f64 / calls.len().max(1) as f64,
        retried.len(),
        100.0 * retried.len() as f64 / calls.len().max(1) as f64,
        if failed > 0 {
            format!(", {failed} failed (retries ran out)")
        } else {
            String::new()
        }
    );
    let line = |what: &str, l: &[f64]| {
        if !l.is_empty() {
            println!(
                "    {what:<22} median {:.2} ms, p99 {:.2} ms ({} holds)",
                quantile(l, 0.5),
                quantile(l, 0.99),
                l.len()
            );
        }
    };
    line("no retry:", &clean);
    line(">= 1 retry:", &retried);
    for (what, retries) in [
        ("1 retry:", 1..=1),
        ("2 retries:", 2..=2),
        (">= 3 retries:", 3..=u64::MAX),
    ] {
        line(what, &latencies(retries));
    }
    if !clean.is_empty() && !retried.is_empty() {
        let per_retry = calls.iter().filter(|c| c.1 > 0).map(|c| c.1).sum::<u64>() as f64
            / retried.len() as f64;
        println!(
            "    a retried hold took {:.2} ms more at the median ({:.2} retries each on average)",
            quantile(&retried, 0.5) - quantile(&clean, 0.5),
            per_retry
        );
    }
}

/// Part 2: the cost of a conflict retry on a hot slot.
async fn conflicts(nodes: &[String]) {
    let (database, slots) = fixture(nodes, "hot", 1).await;
    let slot = slots[0];
    // Warm the nodes' caches and the statement caches.
    let (warm, _, _) = hot_store_holds(nodes, &database, slot, "warm", WARM_UP).await;
    let mut made = warm.len() as u64;
    println!(
        "mysql conflict retries, one hot slot, 8 tasks each with a store of one connection, {} s each:",
        HOT_RUN.as_secs()
    );
    let (calls, failed, seconds) = hot_store_holds(nodes, &database, slot, "spread", HOT_RUN).await;
    made += calls.len() as u64;
    describe_hot(
        "spread over the 3 nodes (certification conflicts)",
        &calls,
        failed,
        seconds,
    );
    let (calls, failed, seconds) =
        hot_store_holds(&nodes[..1], &database, slot, "one", HOT_RUN).await;
    made += calls.len() as u64;
    describe_hot(
        "all on node 1 (the row lock queues them)",
        &calls,
        failed,
        seconds,
    );
    // The bare loop on the spread hot slot: immediate retries, no back-off.
    let mut pools = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        pools.push(store_pool(&database.url_on(node), tasks_on(n, nodes.len())).await);
    }
    let pools = Arc::new(pools);
    // Conflicts run again, holds made, holds failed.
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let (p, c) = (Arc::clone(&pools), Arc::clone(&counts));
    let rate = per_second(HOT_RUN, move |t, i| {
        let (pools, counts) = (Arc::clone(&p), Arc::clone(&c));
        async move {
            match bare_hold(&pools[t % pools.len()], slot, &format!("bare-{t}-{i}")).await {
                Ok(conflicts) => {
                    counts[0].fetch_add(conflicts, Ordering::Relaxed);
                    counts[1].fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    counts[2].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    })
    .await;
    let [again, held, failed] = [0, 1, 2].map(|n| counts[n].load(Ordering::Relaxed));
    made += held;
    println!(
        "  bare loop spread over the 3 nodes, immediate retries: {rate:.0} holds/s, {held} holds, \
         {again} conflicts run again ({:.3} per hold){}",
        again as f64 / held.max(1) as f64,
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        }
    );
    for pool in pools.iter() {
        pool.close().await;
    }
    check_balances(nodes, &database, made).await;
    drop(database);
}

/// The session's `Com_*` counters that are not zero.
async fn session_counters(pool: &MySqlPool) -> BTreeMap<String, i64> {
    let rows: Vec<(String, String)> = sqlx::query_as("SHOW SESSION STATUS LIKE 'Com\\_%'")
        .fetch_all(pool)
        .await
        .unwrap();
    rows.into_iter()
        .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
        .collect()
}

/// Part 3: statements per hold, through the store and through the bare loop, on one
/// connection each.
async fn statements(server: &str) {
    const HOLDS: i64 = 200;
    let nodes = [server.to_owned()];
    let (database, slots) = fixture(&nodes, "statements", 10).await;
    let store = MySqlStore::new(store_pool(&database.url_on(server), 1).await);
    let bare = store_pool(&database.url_on(server), 1).await;
    // The counters' own SHOW is counted too: measure it with no hold between.
    let idle = {
        let a = session_counters(&bare).await;
        let b = session_counters(&bare).await;
        b.into_iter()
            .map(|(k, v)| (k.clone(), v - a.get(&k).copied().unwrap_or(0)))
            .filter(|(_, v)| *v != 0)
            .collect::<BTreeMap<_, _>>()
    };
    let mut per_hold = Vec::new();
    for (name, pool) in [("store", store.pool()), ("bare", &bare)] {
        let before = session_counters(pool).await;
        for i in 0..HOLDS {
            let (slot, key) = (slots[(i % 10) as usize], format!("{name}-{i}"));
            if name == "store" {
                store_hold(&store, slot, &key).await.unwrap();
            } else {
                assert_eq!(bare_hold(pool, slot, &key).await.unwrap(), 0);
            }
        }
        let after = session_counters(pool).await;
        let counts: BTreeMap<String, f64> = after
            .into_iter()
            .map(|(k, v)| {
                let delta = v - before.get(&k).copied().unwrap_or(0) - idle.get(&k).unwrap_or(&0);
                (k, delta as f64 / HOLDS as f64)
            })
            .filter(|(_, v)| *v != 0.0)
            .collect();
        per_hold.push((name, counts));
    }
    println!("mysql statements per hold (server session counters, {HOLDS} holds, one connection):");
    for (name, counts) in &per_hold {
        let shown: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        println!("  {name:<6} {}", shown.join(", "));
    }
    println!(
        "  the same statements: {}",
        if per_hold[0].1 == per_hold[1].1 {
            "yes"
        } else {
            "NO"
        }
    );
    store.pool().close().await;
    bare.close().await;
    drop(database);
}

/// The single server's URL, without a database.
fn single_server() -> String {
    std::env::var("MYSQL_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| "mysql://root@127.0.0.1:3306".to_owned())
        .trim_end_matches('/')
        .to_owned()
}

/// The Galera nodes' URLs, without a database.
fn galera_nodes() -> Vec<String> {
    match std::env::var("GALERA_URLS") {
        Ok(urls) if !urls.trim().is_empty() => urls
            .split_whitespace()
            .map(|url| url.trim_end_matches('/').to_owned())
            .collect(),
        _ => ["13306", "13307", "13308"]
            .iter()
            .map(|port| format!("mysql://root@127.0.0.1:{port}"))
            .collect(),
    }
}

/// Why `server` cannot be used, if it cannot.
async fn unusable(server: &str) -> Option<String> {
    match admin_pool(server).await {
        Ok(pool) => {
            pool.close().await;
            None
        }
        Err(e) => Some(format!("no server at {server} ({e})")),
    }
}

/// Why the cluster cannot be used, if it cannot: three nodes, each ready and synced.
async fn cluster_unusable(nodes: &[String]) -> Option<String> {
    if nodes.len() != 3 {
        return Some(format!("GALERA_URLS names {} nodes, not 3", nodes.len()));
    }
    for node in nodes {
        let pool = match admin_pool(node).await {
            Ok(pool) => pool,
            Err(e) => return Some(format!("no node at {node} ({e})")),
        };
        let state: Vec<(String, String)> = sqlx::query_as(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('wsrep_ready', 'wsrep_cluster_size', 'wsrep_local_state_comment')",
        )
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
        pool.close().await;
        let state: BTreeMap<String, String> = state.into_iter().collect();
        let synced = state.get("wsrep_ready").map(String::as_str) == Some("ON")
            && state.get("wsrep_cluster_size").map(String::as_str) == Some("3")
            && state.get("wsrep_local_state_comment").map(String::as_str) == Some("Synced");
        if !synced {
            return Some(format!("{node} is not a synced node of 3: {state:?}"));
        }
    }
    None
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wants = |part: &str| filter.as_deref().is_none_or(|f| part.contains(f));
    let single = single_server();
    let nodes = galera_nodes();
    rt.block_on(async {
        if wants("holds single statements") {
            match unusable(&single).await {
                Some(why) => println!("SKIPPED: the single-server MySQL benchmarks: {why}"),
                None => {
                    if wants("holds single") {
                        throughput(
                            "single MariaDB",
                            std::slice::from_ref(&single),
                            "single",
                            false,
                        )
                        .await;
                    }
                    if wants("statements") {
                        statements(&single).await;
                    }
                }
            }
        }
        if wants("holds galera conflicts") {
            match cluster_unusable(&nodes).await {
                Some(why) => println!("SKIPPED: the Galera benchmarks: {why}"),
                None => {
                    if wants("holds galera") {
                        throughput("Galera node 1 alone", &nodes[..1], "node1", true).await;
                        throughput(
                            "Galera, 3 nodes (task t on node t mod 3)",
                            &nodes,
                            "spread",
                            true,
                        )
                        .await;
                    }
                    if wants("conflicts galera") {
                        conflicts(&nodes).await;
                    }
                }
            }
        }
    });
}
