//! The database a `DATABASE_URL` names, opened and migrated, and the demo slots added to it
//! once however many servers start on it together.

use crate::state::ServerStore;
use std::sync::Arc;

use chrono::{Duration, DurationRound};
use slot_booking::changes::{Follower, Invalidator};
use slot_booking::events::Event;
use slot_booking::{
    BookingEngine, BookingError, NewSlot, StoreError, Timestamp, TransactionWrites,
};

use crate::events::EventTasks;
use slot_booking_postgres::PostgresStore;
use slot_booking_sqlite::SqliteStore;
use sqlx::{AssertSqlSafe, PgConnection, SqliteConnection, Transaction};

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
    pub fn store(&self) -> Arc<dyn ServerStore> {
        match self {
            Database::Sqlite(store) => Arc::new(store.clone()),
            Database::Postgres(store) => Arc::new(store.clone()),
        }
    }

    /// Starts logging every event committed to this database (with `handle`) and reclaiming its
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
            Database::Postgres(store) => seed(store, slots, now).await,
            Database::Sqlite(store) => seed(store, slots, now).await,
        }
    }
}

/// What seeding needs of a store: its lock, its look for upcoming slots and its writes. The
/// rest is [`seed`], the same on every database.
trait Seeding {
    /// The store's kind of database.
    type Db: sqlx::Database;

    /// A transaction holding the lock every seeding process takes.
    async fn begin_locked(&self) -> Result<Transaction<'static, Self::Db>, StoreError>;

    /// Whether a slot starts after `now`.
    async fn upcoming(
        &self,
        conn: &mut Connection<Self>,
        now: Timestamp,
    ) -> Result<bool, StoreError>;

    /// The store's own writes on `conn`, so each slot gets its `slot_created` event.
    fn writes<'c>(&self, conn: &'c mut Connection<Self>) -> impl TransactionWrites + 'c;
}

/// The connection of a [`Seeding`] store's database.
type Connection<S> = <<S as Seeding>::Db as sqlx::Database>::Connection;

/// [`Database::seed`] on `store`: under its lock, the slots unless one is upcoming.
async fn seed<S: Seeding>(
    store: &S,
    slots: &[NewSlot],
    now: Timestamp,
) -> Result<usize, StoreError> {
    let mut tx = store.begin_locked().await?;
    if store.upcoming(&mut tx, now).await? {
        return Ok(0);
    }
    for slot in slots {
        store.writes(&mut tx).create_slot(slot, now).await?;
    }
    tx.commit().await.map_err(StoreError::unavailable)?;
    Ok(slots.len())
}

impl Seeding for PostgresStore {
    type Db = sqlx::Postgres;

    /// The seeding advisory lock ([`SEED_LOCK`]), held until the transaction ends.
    async fn begin_locked(&self) -> Result<Transaction<'static, Self::Db>, StoreError> {
        let mut tx = self.pool().begin().await.map_err(StoreError::failed)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SEED_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::unavailable)?;
        Ok(tx)
    }

    async fn upcoming(&self, conn: &mut PgConnection, now: Timestamp) -> Result<bool, StoreError> {
        let s = format!("\"{}\"", self.schema());
        sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM {s}.slots WHERE starts_at > $1)"
        )))
        .bind(now)
        .fetch_one(conn)
        .await
        .map_err(StoreError::failed)
    }

    fn writes<'c>(&self, conn: &'c mut PgConnection) -> impl TransactionWrites + 'c {
        self.on(conn)
    }
}

impl Seeding for SqliteStore {
    type Db = sqlx::Sqlite;

    /// BEGIN IMMEDIATE takes the write lock before the look, so a second seeder waits (up
    /// to the pool's busy_timeout) and then sees the first one's slots.
    async fn begin_locked(&self) -> Result<Transaction<'static, Self::Db>, StoreError> {
        self.pool()
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(StoreError::unavailable)
    }

    async fn upcoming(
        &self,
        conn: &mut SqliteConnection,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let table = format!("{}slots", self.table_prefix());
        sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM {table} WHERE starts_at > ?1)"
        )))
        .bind(now.timestamp_micros())
        .fetch_one(conn)
        .await
        .map_err(StoreError::failed)
    }

    fn writes<'c>(&self, conn: &'c mut SqliteConnection) -> impl TransactionWrites + 'c {
        self.on(conn)
    }
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
