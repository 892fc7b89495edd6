//! The database a `DATABASE_URL` names, opened and migrated, and the demo slots added to it
//! once however many servers start on it together.

use std::sync::Arc;

use chrono::{Duration, DurationRound};
use slot_booking::changes::{Follower, Invalidator};
use slot_booking::events::Event;
use slot_booking::{
    BookingEngine, BookingError, NewSlot, Store, StoreError, Timestamp, TransactionWrites,
};

use crate::events::EventTasks;
use slot_booking_postgres::PostgresStore;
use slot_booking_sqlite::SqliteStore;
use sqlx::AssertSqlSafe;

/// An open, migrated database.
#[derive(Debug, Clone)]
pub enum Database {
    /// `sqlite:…`
    Sqlite(SqliteStore),
    /// `postgres:…` or `postgresql:…`.
    Postgres(PostgresStore),
}

/// The advisory lock that serializes demo seeding across processes on one PostgreSQL database.
const SEED_LOCK: i64 = 0x736c_6f74_7365_6564; // "slotseed"

impl Database {
    /// Opens the database `url` names (`sqlite:`, `postgres:` or `postgresql:`) and applies
    /// its migrations.
    pub async fn open(url: &str) -> Result<Database, StoreError> {
        if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let store = PostgresStore::connect(url).await?;
            store.migrate().await?;
            Ok(Database::Postgres(store))
        } else if url.starts_with("sqlite:") {
            let store = SqliteStore::connect(url).await?;
            store.migrate().await?;
            Ok(Database::Sqlite(store))
        } else {
            Err(StoreError::failed(
                "DATABASE_URL must start with sqlite:, postgres: or postgresql:",
            ))
        }
    }

    /// This database, deciding by the database server's clock where it has one (PostgreSQL),
    /// so several servers agree about expiry and slot starts whatever their own clocks say.
    /// An engine's manual clock no longer drives time on such a store.
    pub fn on_database_clock(self) -> Database {
        match self {
            Database::Postgres(store) => Database::Postgres(store.with_database_clock()),
            sqlite => sqlite,
        }
    }

    /// The store, for an engine.
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Database::Sqlite(store) => Arc::new(store.clone()),
            Database::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// Starts logging every event committed to this database (with `handle`) and sweeping its
    /// expired holds; see [`crate::events`]. Stops when the [`EventTasks`] is dropped.
    pub fn log_events(
        &self,
        handle: impl FnMut(&Event) + Send + 'static,
    ) -> Result<EventTasks, BookingError> {
        match self {
            Database::Sqlite(store) => EventTasks::start(BookingEngine::new(store.clone()), handle),
            Database::Postgres(store) => {
                EventTasks::start(BookingEngine::new(store.clone()), handle)
            }
        }
    }

    /// Invalidates `invalidator`'s engine after every commit that changes this database's
    /// availability, whoever made it (another server process, an operator's SQL): PostgreSQL
    /// by `LISTEN`/`NOTIFY` on a connection of its own, SQLite by polling `PRAGMA
    /// data_version` on a connection of its own. Following stops when the [`Follower`] or the
    /// engine is dropped. Fails when the connection cannot be opened (or, on PostgreSQL, when
    /// the schema lacks the notifying triggers).
    pub async fn follow_changes(&self, invalidator: Invalidator) -> Result<Follower, StoreError> {
        match self {
            Database::Postgres(store) => store.follow_changes(invalidator).await,
            Database::Sqlite(store) => store.follow_changes(invalidator).await,
        }
    }

    /// Adds `slots` unless a slot starts after `now`, and says how many it added. The check
    /// and the inserts are one transaction under a lock every seeding process takes (an
    /// advisory lock on PostgreSQL, SQLite's write lock), so servers starting together on an
    /// empty database add the slots once.
    pub async fn seed(&self, slots: &[NewSlot], now: Timestamp) -> Result<usize, StoreError> {
        match self {
            Database::Postgres(store) => seed_postgres(store, slots, now).await,
            Database::Sqlite(store) => seed_sqlite(store, slots, now).await,
        }
    }
}

async fn seed_postgres(
    store: &PostgresStore,
    slots: &[NewSlot],
    now: Timestamp,
) -> Result<usize, StoreError> {
    let s = format!("\"{}\"", store.schema());
    let mut tx = store.pool().begin().await.map_err(StoreError::failed)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(SEED_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    let upcoming: bool = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM {s}.slots WHERE starts_at > $1)"
    )))
    .bind(now)
    .fetch_one(&mut *tx)
    .await
    .map_err(StoreError::failed)?;
    if upcoming {
        return Ok(0);
    }
    // Through the store's own write, so each slot gets its `slot_created` event.
    for slot in slots {
        store.on(&mut tx).create_slot(slot, now).await?;
    }
    tx.commit().await.map_err(StoreError::unavailable)?;
    Ok(slots.len())
}

async fn seed_sqlite(
    store: &SqliteStore,
    slots: &[NewSlot],
    now: Timestamp,
) -> Result<usize, StoreError> {
    let table = format!("{}slots", store.table_prefix());
    // BEGIN IMMEDIATE takes the write lock before the check, so a second seeder waits (up to
    // the pool's busy_timeout) and then sees the first one's slots.
    let mut tx = store
        .pool()
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(StoreError::unavailable)?;
    let upcoming: bool = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM {table} WHERE starts_at > ?1)"
    )))
    .bind(now.timestamp_micros())
    .fetch_one(&mut *tx)
    .await
    .map_err(StoreError::failed)?;
    if upcoming {
        return Ok(0);
    }
    // Through the store's own write, so each slot gets its `slot_created` event.
    for slot in slots {
        store.on(&mut tx).create_slot(slot, now).await?;
    }
    tx.commit().await.map_err(StoreError::unavailable)?;
    Ok(slots.len())
}

/// Eight one-hour demo slots from 09:00 UTC on the day after `now`, capacities 1 to 20.
pub fn demo_slots(now: Timestamp) -> Vec<NewSlot> {
    let midnight = now.duration_trunc(Duration::days(1)).unwrap_or(now);
    let first = midnight + Duration::days(1) + Duration::hours(9);
    [1, 2, 3, 5, 8, 10, 15, 20]
        .into_iter()
        .zip(0..)
        .map(|(capacity, hour)| {
            let starts_at = first + Duration::hours(hour);
            NewSlot::new(starts_at, starts_at + Duration::hours(1), capacity)
        })
        .collect()
}
