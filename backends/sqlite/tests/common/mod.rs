//! Shared setup for the SQLite store's tests: temporary database files, timestamps, keys and
//! an invariant check made with SQL.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{Duration, TimeZone, Utc};
use slot_booking::conformance::kit::{Owned, SlotTally};
use slot_booking::{HoldOutcome, HoldRequest, IdempotencyKey, NewSlot, SlotId, Store, Timestamp};
use slot_booking_sqlite::SqliteStore;
use sqlx::SqlitePool;

/// A database file in the temp directory, removed (with its WAL and SHM files) on drop.
pub struct TempDb {
    pub path: PathBuf,
}

impl TempDb {
    pub fn new(name: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "slot_booking_sqlite_{name}_{}_{n}_{nanos}.db",
            std::process::id()
        ));
        TempDb { path }
    }

    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    /// A migrated store with its own pool on this file.
    pub async fn store(&self) -> SqliteStore {
        let store = SqliteStore::connect(&self.url()).await.unwrap();
        store.migrate().await.unwrap();
        store
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(Path::new(&p));
        }
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
        .create_slot(
            &NewSlot::new(at(3600), at(7200), capacity),
            chrono::Utc::now(),
        )
        .await
        .unwrap()
        .slot_id
}

/// A hold request at `now`, expiring five minutes later.
pub fn request(slot_id: SlotId, key: &IdempotencyKey, now: Timestamp) -> HoldRequest<'_> {
    HoldRequest {
        slot_id,
        owner: None,
        quantity: 1,
        key,
        now,
        expires_at: now + Duration::minutes(5),
    }
}

pub async fn hold(store: &impl Store, slot_id: SlotId, k: &str, now: Timestamp) -> HoldOutcome {
    let k = key(k);
    store
        .create_hold(request(slot_id, &k, now))
        .await
        .unwrap()
        .outcome
}

/// The hold of a `Created` outcome; any other outcome fails the test.
pub fn created(outcome: HoldOutcome) -> slot_booking::Hold {
    match outcome {
        HoldOutcome::Created(h) => h,
        other => panic!("expected Created, got {other:?}"),
    }
}

/// Counts with SQL: (capacity, remaining, units stored held, units confirmed) of a slot.
pub async fn counts(pool: &SqlitePool, slot_id: SlotId) -> (i64, i64, i64, i64) {
    sqlx::query_as(
        "SELECT capacity, remaining, \
           (SELECT coalesce(SUM(quantity), 0) FROM slot_booking_holds \
            WHERE slot_id = s.id AND status = 'held'), \
           (SELECT coalesce(SUM(quantity), 0) FROM slot_booking_holds \
            WHERE slot_id = s.id AND status = 'confirmed') \
         FROM slot_booking_slots s WHERE id = ?1",
    )
    .bind(slot_id.get())
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Asserts the capacity invariant on counts made with SQL, not through the store.
pub async fn assert_invariant(pool: &SqlitePool, slot_id: SlotId) {
    let (capacity, remaining, held, confirmed) = counts(pool, slot_id).await;
    SlotTally {
        capacity,
        remaining,
        held,
        confirmed,
        active: None,
    }
    .assert();
}

/// Asserts the slot's counts made with SQL (see `counts`) and the capacity invariant on them.
pub async fn assert_counts(pool: &SqlitePool, slot_id: SlotId, expected: (i64, i64, i64, i64)) {
    assert_eq!(counts(pool, slot_id).await, expected);
    assert_invariant(pool, slot_id).await;
}

/// A store that owns its temporary database file: the file is removed when the store is
/// dropped (after its pool), so a conformance case cleans up after itself.
pub type OwnedStore = Owned<SqliteStore, TempDb>;

/// A migrated store on a fresh temporary file.
pub async fn owned_store(name: &str) -> OwnedStore {
    let db = TempDb::new(name);
    Owned {
        store: db.store().await,
        guard: db,
    }
}

/// [`owned_store`], placing every hold by the core's rule alone
/// ([`SqliteStore::without_fast_paths`]): the suite holds the one-statement insert to the rule
/// it stands for by running on both.
pub async fn composed_store(name: &str) -> OwnedStore {
    let db = TempDb::new(name);
    Owned {
        store: db.store().await.without_fast_paths(),
        guard: db,
    }
}
