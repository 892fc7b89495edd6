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

use crate::events::{EventTasks, Purging};
use slot_booking_mysql::MySqlStore;
use slot_booking_postgres::PostgresStore;
use slot_booking_sqlite::SqliteStore;
use sqlx::{AssertSqlSafe, MySqlConnection, PgConnection, SqliteConnection, Transaction};

/// An open, migrated database.
#[derive(Debug, Clone)]
pub enum Database {
    /// `sqlite:…`
    Sqlite(SqliteStore),
    /// `postgres:…` or `postgresql:…`.
    Postgres(PostgresStore),
    /// `mysql:…` or `mariadb:…`: MariaDB 10.6 or later (a Galera node included), or MySQL.
    MySql(MySqlStore),
}

/// The kinds of database a `DATABASE_URL` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MariaDB or MySQL.
    MySql,
}

/// Every scheme the server opens, with its kind of database: the schemes sqlx's drivers take
/// (its MySQL driver takes `mariadb:` as well as `mysql:`).
pub const SCHEMES: [(&str, Kind); 5] = [
    ("sqlite:", Kind::Sqlite),
    ("postgres:", Kind::Postgres),
    ("postgresql:", Kind::Postgres),
    ("mysql:", Kind::MySql),
    ("mariadb:", Kind::MySql),
];

impl Kind {
    /// The kind of database `url` names by its scheme, or `None` for a scheme the server does
    /// not open.
    pub fn of(url: &str) -> Option<Kind> {
        SCHEMES
            .iter()
            .find(|(scheme, _)| url.starts_with(scheme))
            .map(|&(_, kind)| kind)
    }

    /// What a `DATABASE_URL` the server cannot open is told: `must start with sqlite:, …`.
    pub fn expected() -> String {
        let schemes: Vec<&str> = SCHEMES.iter().map(|&(scheme, _)| scheme).collect();
        match schemes.split_last() {
            Some((last, rest)) => format!("must start with {} or {last}", rest.join(", ")),
            None => "names no database the server opens".to_owned(),
        }
    }
}

/// `$body` with `$store` bound to the store of whichever database `$database` is: what every
/// kind of database does alike, written once.
macro_rules! each_store {
    ($database:expr, $store:ident => $body:expr) => {
        match $database {
            Database::Sqlite($store) => $body,
            Database::Postgres($store) => $body,
            Database::MySql($store) => $body,
        }
    };
}

/// The advisory lock that serializes demo seeding across processes on one PostgreSQL database.
const SEED_LOCK: i64 = 0x736c_6f74_7365_6564; // "slotseed"

impl Database {
    /// Opens the database `url` names (see [`SCHEMES`]) with its store's own pool settings
    /// (on MariaDB/MySQL [`MySqlStore::pool_options`]: READ COMMITTED, causal reads on a Galera
    /// node) and applies its migrations.
    pub async fn open(url: &str) -> Result<Database, StoreError> {
        let database = match Kind::of(url) {
            Some(Kind::Sqlite) => Database::Sqlite(SqliteStore::connect(url).await?),
            Some(Kind::Postgres) => Database::Postgres(PostgresStore::connect(url).await?),
            Some(Kind::MySql) => Database::MySql(MySqlStore::connect(url).await?),
            None => {
                return Err(StoreError::failed(format!(
                    "DATABASE_URL {}",
                    Kind::expected()
                )))
            }
        };
        each_store!(&database, store => store.migrate().await)?;
        Ok(database)
    }

    /// This database, deciding by the database server's clock where it has one (PostgreSQL),
    /// so several servers agree about expiry and slot starts whatever their own clocks say.
    /// An engine's manual clock no longer drives time on such a store. SQLite and MariaDB/MySQL
    /// keep the engine's clock.
    pub fn on_database_clock(self) -> Database {
        match self {
            Database::Postgres(store) => Database::Postgres(store.with_database_clock()),
            other => other,
        }
    }

    /// The store, for an engine.
    pub fn store(&self) -> Arc<dyn ServerStore> {
        each_store!(self, store => Arc::new(store.clone()))
    }

    /// Starts logging every event committed to this database (with `handle`), reclaiming its
    /// expired holds and, with `purging`, deleting its history older than the retention; see
    /// [`crate::events`]. Stops when the [`EventTasks`] is dropped.
    pub fn log_events(
        &self,
        purging: Option<Purging>,
        handle: impl FnMut(&Event) + Send + 'static,
    ) -> Result<EventTasks, BookingError> {
        each_store!(self, store => {
            EventTasks::start(BookingEngine::new(store.clone()), purging, handle)
        })
    }

    /// Invalidates `invalidator`'s engine after every commit that changes this database's
    /// availability, whoever made it (another server process, an operator's SQL), each store
    /// its own way ([`Database::following`]), on a connection of its own. Following stops when
    /// the [`Follower`] or the engine is dropped. Fails when the connection cannot be opened
    /// (or, on PostgreSQL, when the schema lacks the notifying triggers).
    pub async fn follow_changes(&self, invalidator: Invalidator) -> Result<Follower, StoreError> {
        each_store!(self, store => store.follow_changes(invalidator).await)
    }

    /// How [`Database::follow_changes`] learns of other processes' commits, for the log:
    /// PostgreSQL by `LISTEN`/`NOTIFY`, SQLite by polling `PRAGMA data_version`,
    /// MariaDB/MySQL by reading its event log every 20 ms.
    pub fn following(&self) -> &'static str {
        match self {
            Database::Sqlite(_) => "data_version polling",
            Database::Postgres(_) => "LISTEN/NOTIFY",
            Database::MySql(_) => "event log polling",
        }
    }

    /// Adds `slots` unless a slot starts after `now`, and says how many it added. The check
    /// and the inserts are one transaction under a lock every seeding process takes (an
    /// advisory lock on PostgreSQL, SQLite's write lock, a row lock on MariaDB/MySQL), so
    /// servers starting together on an empty database add the slots once.
    pub async fn seed(&self, slots: &[NewSlot], now: Timestamp) -> Result<usize, StoreError> {
        each_store!(self, store => seed(store, slots, now).await)
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

impl Seeding for MySqlStore {
    type Db = sqlx::MySql;

    /// The row of the first migration in the store's migrations ledger, locked `FOR UPDATE`
    /// until the transaction ends: a row nothing else locks once the store is migrated (MariaDB
    /// has no transaction-scoped advisory lock, and a Galera node refuses `GET_LOCK`). The
    /// store's connections are READ COMMITTED, so a second seeder, once it has the row, sees
    /// the first one's slots. On a Galera cluster the lock holds on its node only: servers
    /// starting together on an empty database through different nodes may each add the slots.
    async fn begin_locked(&self) -> Result<Transaction<'static, Self::Db>, StoreError> {
        let mut tx = self.pool().begin().await.map_err(StoreError::unavailable)?;
        let ledger = format!("{}migrations", self.table_prefix());
        sqlx::query(AssertSqlSafe(format!(
            "SELECT version FROM {ledger} WHERE version = 1 FOR UPDATE"
        )))
        .fetch_one(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
        Ok(tx)
    }

    async fn upcoming(
        &self,
        conn: &mut MySqlConnection,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let table = format!("{}slots", self.table_prefix());
        sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM {table} WHERE starts_at > ?)"
        )))
        .bind(now.timestamp_micros())
        .fetch_one(conn)
        .await
        .map_err(StoreError::failed)
    }

    fn writes<'c>(&self, conn: &'c mut MySqlConnection) -> impl TransactionWrites + 'c {
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
