//! SQLite store for [`slot_booking`], built on [sqlx](https://docs.rs/sqlx).
//!
//! [`SqliteStore`] implements [`Store`](slot_booking::Store) as a thin translation to SQL: every outcome is decided
//! by the rows a conditional write affected or by the unique constraint on the idempotency
//! key, never by an earlier read.
//!
//! ```no_run
//! # async fn demo() -> Result<(), slot_booking::StoreError> {
//! use slot_booking_sqlite::SqliteStore;
//!
//! let store = SqliteStore::connect("sqlite://slot_booking.db").await?;
//! store.migrate().await?;
//! # Ok(()) }
//! ```
//!
//! # Storage
//!
//! * Tables `slot_booking_slots`, `slot_booking_holds`, `slot_booking_events` and
//!   `slot_booking_event_consumers` (another prefix with
//!   [`SqliteStore::with_table_prefix`]), created by the embedded migrations in `migrations/`,
//!   applied by [`SqliteStore::migrate`]. Applied versions are recorded in a ledger table of
//!   their own, `slot_booking_migrations`, so the tables and a host application's sqlx
//!   migrations (`_sqlx_migrations`) and tables can live in the same database file.
//! * Built on sqlx 0.9, re-exported as [`slot_booking_sqlite::sqlx`](crate::sqlx): use it to
//!   build your own pool ([`SqliteStore::configure`] gives the connection settings).
//! * Timestamps are `INTEGER` microseconds since the Unix epoch (UTC): exact round trips at the
//!   precision the core crate keeps.
//! * CHECK constraints back the capacity invariant (`0 <= remaining <= capacity`), and a
//!   partial index over holds still stored as `held` keeps availability, reclaim and the
//!   operator's listing away from confirmed and cancelled history.
//! * Slot administration (migration 4) adds three columns to the slots: `resource` (`TEXT`,
//!   `NULL` for none), `closed` (`INTEGER` 0 or 1) and `removed_at` (`INTEGER` microseconds,
//!   `NULL` until removed). Slots made before it come out open, not removed and of no
//!   resource. A removed slot is archived, never deleted: its row and every hold on it stay.
//!   A partial index on `(resource, starts_at, id)` serves one resource's slots in
//!   `(starts_at, id)` order, as the index on `(starts_at, id)` serves every slot.
//!
//! # Concurrency
//!
//! A hold that finds a unit is one autocommit `INSERT`: the `holds_take_a_unit` trigger
//! (migration 2, last recreated by migration 6) performs the conditional decrement inside it —
//! `remaining >= quantity` on a slot that has not started, whose sales are open
//! (`closed = 0`) and that has not been removed (`removed_at IS NULL`) — and SQLite makes the
//! statement atomic on its own, so closing or removing a slot cannot race a hold past it. A
//! hold refused on a sold-out slot is that one statement too: when the decrement changes no
//! row, the trigger (as migration 6 recreated it) checks in the same statement that the key is
//! free, the slot is selling, the quantity fits its capacity and none of its held holds has
//! expired, and then aborts with a message of its own, which the store answers with
//! [`HoldOutcome::SoldOut`] at once; any other refusal aborts with the old message and takes
//! the reclaim path below. A statement that starts by writing takes the write lock up front
//! and waits for it under `busy_timeout`. Acknowledging events is one autocommit upsert the
//! same way. Every other write (the reclaim path of a hold, confirm, cancel, renew, create slot, the administrative
//! writes, reclaiming expired holds, purging, migrations) runs in a transaction begun with
//! `BEGIN IMMEDIATE`, so it too takes the write lock up front instead of failing with
//! `SQLITE_BUSY` when it upgrades a read. Within one [`SqliteStore`] (and its clones) writers
//! also queue on an in-process FIFO lock before asking SQLite, since SQLite admits one writer
//! at a time anyway: this keeps writers from polling the busy handler. Several stores or
//! processes on one file still work, relying on `busy_timeout`. Errors SQLite reports as busy
//! or locked, and pool or I/O failures, map to [`StoreError::unavailable`].
//!
//! **Group commit.** Concurrent holds through one store share transactions: a hold leaves its
//! request in the store's queue (the core's [`GroupCommit`](slot_booking::store::GroupCommit),
//! gated by the write queue) and waits for its answer or the write queue, and whoever gets
//! the write queue takes every request waiting. Alone, its `INSERT` runs as the autocommit
//! statement above; several run in one `BEGIN IMMEDIATE` transaction (their statements sent to
//! SQLite in one call), and each caller is answered with its own statement's outcome, only
//! once the commit succeeded. SQLite undoes a statement aborted by the unique key or the
//! trigger and nothing else, so a refused hold in a batch refuses only itself; an error that
//! may have ended the transaction, or a failed commit, fails every caller of the batch. A
//! caller that goes away before its request is taken places no hold.
//! [`SqliteStore::group_commits`] counts the batches. On a pool of several connections, the
//! holds' `INSERT`s run on a connection the store keeps for them, taken from the pool once and
//! detached from it: it skips the pool's checkout, whose return costs a ping of the
//! connection in a task of its own (a pool of one connection, such as an in-memory
//! database's, is used as it is).
//!
//! The administrative writes are conditional updates of the slot row, decided by whether a
//! row was changed: a capacity change moves `remaining` by the difference only where the
//! capacity is another one and the new `remaining` is not negative, a removal sets
//! `removed_at` only where `remaining = capacity` (no unit held or confirmed), and neither
//! touches a removed slot. When the update changes nothing, the slot is read in the same
//! transaction: not there (or removed), or already at that capacity (applied, nothing
//! written), it stops. Otherwise the slot's expired holds are reclaimed under a savepoint
//! and the update runs once more; if it still changes nothing the savepoint is rolled back,
//! so a refused change reclaims nothing, and the slot's units are read in the same
//! transaction to say why. Closing and reopening is one conditional update of a slot whose
//! sales are not already so; when it changes nothing the slot read next says whether they
//! already were (applied) or the slot is not there. The operator's listing is a
//! read: one keyset range of a slots index, each slot's held units summed at `now`.
//!
//! # Writes in the caller's transaction
//!
//! Every write runs as statements on one connection, inside a unit of work it is handed, and
//! says whether its writes stay; the store's own methods and the caller's connection share that
//! one implementation and differ only in the unit:
//!
//! * through the store (its [`Store`](slot_booking::Store) methods): a place in the in-process write queue, then a
//!   `BEGIN IMMEDIATE` transaction, committed or rolled back (a hold's `INSERT` runs alone
//!   as one autocommit statement, or in a group commit, as above);
//! * on the caller's connection ([`SqliteStore::on`], what an
//!   [`EngineTransaction`](slot_booking::EngineTransaction) runs its calls with): a savepoint inside the
//!   caller's transaction, released when the writes stay and rolled back when the request is
//!   refused or fails — a hold's reclaim that turns out not to fit, an administrative change
//!   that does not fit — so the caller's transaction stays usable and unchanged by a refusal.
//!   A hold's `INSERT` runs first without a savepoint: a statement aborted by the trigger or
//!   the unique key undoes only itself, so a hold created, replayed or sold out costs no
//!   savepoint, and only the reclaim path opens one. The
//!   caller begins its transaction with `BEGIN IMMEDIATE`
//!   (`pool.begin_with("BEGIN IMMEDIATE")`) and holds SQLite's write lock until it ends; the
//!   store's write queue is not taken;
//! * [`SqliteStore`]'s [`TransactionalStore`]: a
//!   [`SqliteTransaction`] that holds the write queue and a `BEGIN IMMEDIATE` transaction for
//!   its whole life, written through [`SqliteWrites`] as above.
//!
//! # Bookings
//!
//! [`SqliteStore`] is a [`BookingStore`](slot_booking::BookingStore) (migration 8): a booking
//! of several lines is one hold row per line, so availability, rosters, reclaiming, purging and
//! the event log see each line as a hold.
//!
//! * **Storage.** Migration 8 adds a nullable `booking_id` to the holds (and a partial index
//!   on it): `NULL` for a plain hold (every hold made before the upgrade is one), and on every
//!   line of a booking of several lines, the first included, the booking's id, which is the
//!   first line's hold id (lines are inserted by slot id, so it is the lowest). Only the first
//!   line carries the client's idempotency key. The key column is `NOT NULL` and unique, and
//!   SQLite cannot relax that without rebuilding the table, so each other line carries a key of
//!   the store's own, ` line <booking id>/<slot id>`: its leading space keeps it out of every
//!   client's reach (a client's key is visible ASCII, one scoped to its owner starts with the
//!   owner's id), and purging a line frees it with the row.
//! * **Placing** a booking is one write unit (the store's `BEGIN IMMEDIATE` transaction in its
//!   write queue, or a savepoint on the caller's connection): the key is read first, under the
//!   write lock (a key in use answers for its hold or booking), then each line is inserted in
//!   slot id order, each insert being its slot's conditional decrement (the
//!   `holds_take_a_unit` trigger) and appending its `hold_placed` event. A line that finds no
//!   unit for a reason its statement could not settle reclaims its slot's expired holds and is
//!   inserted once more. When every line is in, the first is marked as the booking's and the
//!   unit commits; otherwise each line's slot is read in the unit to say why, and the unit is
//!   rolled back, every line, reclaim and event with it.
//! * **Changing** a hold — confirm, cancel, renew, through the store or on the caller's
//!   connection, by the hold's id or (as the booking transitions) by the booking's — is one
//!   `UPDATE … RETURNING` of every line of the booking the hold belongs to, guarded by a
//!   `NOT EXISTS` over the lines so that it changes all of them or none; each line changed
//!   appends its own event, and a cancel gives each line's units back to its slot.
//!
//! # Pools
//!
//! [`SqliteStore`] is a [`PoolStore`](slot_booking::PoolStore) (migration 9): a pool is a row
//! of `<prefix>pools` (`capacity`, `remaining`, `CHECK (0 <= remaining <= capacity)`), and its
//! slots are rows of `<prefix>slot_pools` (`(slot_id, pool_id)`, with an index by pool).
//!
//! * **Taking.** Migration 9 recreates the `holds_take_a_unit` trigger with one more step:
//!   once the slot's conditional decrement changed its row, every pool of the slot is
//!   decremented where `remaining >= quantity`, and fewer rows changed than the slot has pools
//!   aborts the statement, the slot's decrement with it. So a hold, a booking's line and a
//!   group commit's insert still take their units in their one statement, from the slot and
//!   its pools or from none. A pool short with no expired hold on its slots is answered as
//!   sold out by the statement itself; otherwise it aborts with a message of its own, and the
//!   reclaim path, once the slot's own expired holds are reclaimed and a pool is still short,
//!   reclaims the expired holds of the short pools' slots and inserts once more. A booking
//!   refused by a pool marks every line on that pool's slots failed.
//! * **Giving back.** Every give-back of a slot's units (cancel, the lazy, administrative and
//!   reclaimer's reclaims) is one update of the slot that returns whether it belongs to a pool;
//!   only then a second statement gives the units back to its pools, so a store without pools
//!   runs the statements it ran before.
//! * **Administration.** Attaching takes the slot's held and confirmed units
//!   (`capacity - remaining` of the slot) from the pool by one conditional update, which also
//!   checks the slot is live, not attached and in fewer than
//!   [`MAX_POOLS_PER_SLOT`](slot_booking::MAX_POOLS_PER_SLOT) pools; detaching gives them back;
//!   a capacity change moves `remaining` by the difference where it stays `>= 0`. When the
//!   update changes nothing, reads in the same unit of work say why, and a pool short of units
//!   reclaims the expired holds of its slots and tries once more, rolled back if still refused.
//!
//! # Waitlists
//!
//! [`SqliteStore`] is a [`WaitlistStore`](slot_booking::WaitlistStore) (migration 10): an
//! entry waiting in a slot's line is a row of `<prefix>waitlist_entries` (indexed in serving
//! order, `(slot_id, priority DESC, id)`), and the slot's `waiting` column counts them, kept by
//! triggers on every insert and delete of an entry.
//!
//! A slot of a pool has a line like any other, and its entries also wait in the line of each
//! of its pools (migration 11): the waiting entries of the pool's slots that sell at the time
//! (not closed, not removed, not started), in the same order. Entries of a slot that stopped
//! selling are out of its pools' lines (they cannot be served, and do not block them) until it
//! sells again.
//!
//! * **Nobody jumps the line.** The `holds_take_a_unit` trigger (as migration 11 recreated it)
//!   decrements a slot only where `waiting = 0` and no slot of its pools that sells has
//!   `waiting > 0`, except for an offer (the hold of a waiting entry's own id), and settles
//!   the refusal as sold out in the same statement: a hold, a booking's line or a group
//!   commit's insert on a slot with a line, or in a pool with one, is refused by its own
//!   statement, never by a read before it. Availability lists such a slot with 0 units, and a
//!   refused booking line on it reads 0 units free.
//! * **Keys and ids.** A join's `INSERT … SELECT` stores the entry only if the slot sells, the
//!   quantity fits its capacity and every pool's, and no hold has the key (another entry's key
//!   is the unique constraint's); when it stores nothing, reads in the same unit of work say
//!   why (a replay of the entry or of its offer first; a quantity beyond a pool's capacity
//!   exceeds the smallest of the slot's and its pools' capacities). The trigger refuses a hold
//!   whose key a waiting entry has ([`HoldOutcome::KeyReused`] with no hold). An entry's id is
//!   drawn as a hold's is, one past the holds' highest and the highest entry id ever drawn
//!   (`<prefix>waitlist_ids`), and holds draw theirs the same way, so the offer can be the
//!   hold of the entry's number and no other hold ever has it.
//! * **Serving.** An entry is ready when its slot sells, it is the head of its slot's line and
//!   of each of its slot's pools' lines, and its whole quantity fits in its slot's `remaining`
//!   with the slot's expired holds counted free, and in each pool's with the expired holds of
//!   the pool's slots counted free. A set of lines is served to a fixpoint: each line's head
//!   that is ready is offered — the expired holds that make it fit reclaimed first (the slot's
//!   when the slot is short, those of a short pool's slots when a pool is: the pool refill),
//!   then one `INSERT … SELECT` of the entry under the stored conditions stores its offer (its
//!   units taken from the slot and its pools and `hold_placed` appended by the triggers), its
//!   entry is deleted and `waitlist_offered` appended — and the heads are looked at again until
//!   none is ready. SQLite has one writer, so every write serves in its own unit of work, after
//!   its own change and events: a cancel of a hold or booking serves each touched slot's line
//!   and its pools' (the give-back's update returns whether anyone waits or the slot is pooled,
//!   so a slot of no pool without a line pays nothing); the sweeper's
//!   [`reclaim_expired`](EventStore::reclaim_expired) serves every line that is not empty; a
//!   capacity change that gave the slot something, reopened or closed sales, a removal, a leave
//!   and a join serve the slot's line and its pools'; a pool's capacity change serves the
//!   pool's line, and a detach the pool's and the detached slot's (both answered as the change
//!   left the pool, before serving). The reclaims a write makes only to make room for itself
//!   (a newcomer's, the pool refill, an administrative change's) serve nothing.
//! * **Migration 10** also rebuilds the event log so that its kind check admits
//!   `waitlist_offered` (SQLite cannot alter a CHECK): every event is copied with its id and
//!   the AUTOINCREMENT counter carried over.
//!
//! # Events
//!
//! [`SqliteStore`] is an [`EventStore`]: the event log (migration 5) is kept in the same file.
//! Every write appends its events in its own unit of work — the store's transaction, the
//! hold's autocommit `INSERT` (through the `holds_placed_event` trigger, whose time is the
//! hold's `created_at`), or the savepoint in the caller's transaction — decided by the rows its
//! statements changed or returned, so a refused, replayed or rolled-back write appends none,
//! and one that changes nothing (closing a closed slot, setting the capacity a slot has, a
//! renewal already at the hold's maximum life) appends none either. Every event's time is the
//! engine's `now`, not SQLite's clock.
//!
//! * **Positions** are `0_<id>`, `id` an `INTEGER PRIMARY KEY AUTOINCREMENT`: SQLite admits
//!   one writer at a time, which holds the write lock from its first event to its commit, so
//!   ids are handed out in commit order and a reader never sees an id while a lower one may
//!   still commit. AUTOINCREMENT keeps an id that was committed from ever being handed out
//!   again, even after a purge emptied the log. Consumers' cursors are rows of
//!   `<prefix>event_consumers` (name → acknowledged id), moved only forward by an upsert.
//! * **Leases** (migration 7) live on the cursor's row (`holder`, `lease_until` in
//!   microseconds): taken, extended, released and checked by one statement each, queued with
//!   the store's writers. A fenced acknowledgement is one `UPDATE … WHERE holder = ?`, on the
//!   pool or in the caller's transaction ([`SqliteStore::on`]), where it commits with the
//!   caller's own rows.
//! * [`reclaim_expired`](EventStore::reclaim_expired) is one write transaction per batch:
//!   one `UPDATE … RETURNING` of up to `limit` held holds with `expires_at <= now`, their units
//!   given back and one `hold_expired` event each; a hold taken by a racing reclaimer is not
//!   returned twice.
//! * [`purge`](EventStore::purge) deletes up to `limit` cancelled and expired holds that
//!   ended before the cut-off (never confirmed or held ones) and up to `limit` events older
//!   than it that every consumer has acknowledged. A purged hold's idempotency key is a column
//!   of the deleted row, so **the key is free again**: a retry with it places a new hold.
//!
//! # Several processes on one file
//!
//! An engine's availability cache learns of commits made elsewhere — other processes, a
//! caller's transaction, plain SQL — through [`SqliteStore::follow_changes`], which polls
//! `PRAGMA data_version` on a connection of its own (a [`DataVersionFeed`]): one cheap pragma
//! per interval ([`DEFAULT_POLL_INTERVAL`]) per engine, a change seen within an interval.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use slot_booking::{
    AvailabilityEntry, AvailabilityQuery, ConsumerId, Decided, Event, EventKind, EventPosition,
    EventStore, Hold, HoldId, HoldOutcome, HoldRequest, LeaseHolder, OwnerId, PageRequest, Purged,
    Scope, Slot, SlotCursor, SlotId, SlotUsage, StoreError, Timestamp, TransactionalStore,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Row, Sqlite};
use tokio::sync::Mutex;

mod admin;
mod bookings;
mod changes;
mod events;
mod fragments;
mod group;
mod kernel;
mod lines;
mod migrate;
mod place;
mod pool_sql;
mod pools;
mod reads;
mod rows;
mod run;
mod serve;
mod sql;
mod transaction;
mod units;
mod waitlist_sql;
mod waitlists;
mod writes;

pub use changes::{DataVersionFeed, DEFAULT_POLL_INTERVAL};
pub use run::SqliteTransaction;
pub use slot_booking::changes::Following;
pub use slot_booking::store::{InvalidTablePrefix, DEFAULT_TABLE_PREFIX};
/// The sqlx this crate is built on (0.9). Build pools and connection options through this
/// re-export: a pool from another sqlx major version is a different type.
pub use sqlx;
pub use transaction::SqliteWrites;

use fragments::RESERVED_PREFIX;
use group::{sold_out, HoldParams, Insert};
use rows::*;
use slot_booking::store::TablePrefix;
use sql::Statements;

/// How long a connection waits for SQLite's write lock before giving up (`busy_timeout`), as
/// set by [`SqliteStore::connect`].
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections in the pool [`SqliteStore::connect`] opens for a database file.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 8;

/// A [`Store`](slot_booking::Store) over a SQLite database.
///
/// Cheap to clone: clones share the pool and the write queue.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// The store's write queue: one writer at a time, in arrival order.
    write_gate: Arc<Mutex<()>>,
    /// The connection the holds' `INSERT`s run on (see `group.rs`).
    held: Arc<group::Held>,
    /// Holds waiting for the next group commit (see `group.rs`).
    holds: Arc<group::HoldGroups>,
    prefix: TablePrefix,
    sql: Arc<Statements>,
    /// A hold tries the one-statement insert (and the group commit) first.
    fast_paths: bool,
}

impl SqliteStore {
    /// A store over an existing pool, with its tables named with [`DEFAULT_TABLE_PREFIX`].
    ///
    /// Configure the pool's connections with [`SqliteStore::configure`] (WAL journal,
    /// `synchronous = NORMAL`, foreign keys, a `busy_timeout`), and for an in-memory database
    /// use a single connection that is never closed. Run [`SqliteStore::migrate`] before use.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::str::FromStr;
    /// use slot_booking_sqlite::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
    /// use slot_booking_sqlite::SqliteStore;
    ///
    /// let options = SqliteStore::configure(SqliteConnectOptions::from_str("sqlite://app.db")?);
    /// let pool = SqlitePoolOptions::new().max_connections(8).connect_with(options).await?;
    /// let store = SqliteStore::new(pool).with_table_prefix("booking_")?;
    /// store.migrate().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(pool: SqlitePool) -> Self {
        let prefix = TablePrefix::default();
        let write_gate = Arc::default();
        SqliteStore {
            pool,
            holds: Arc::new(group::hold_groups(&write_gate)),
            held: Arc::default(),
            write_gate,
            sql: Arc::new(Statements::new(&prefix)),
            prefix,
            fast_paths: true,
        }
    }

    /// This store, placing every hold by the core's rule over its kernel alone
    /// ([`place_hold`](slot_booking::store::place_hold)): none of its one-statement insert,
    /// nor the group commit of holds arriving together.
    ///
    /// The answers are the same, at a write transaction each: the insert is the rule fused
    /// into a single statement (its trigger takes the units), and the conformance suite runs
    /// on a store built this way too, holding the insert to the rule it stands for.
    /// Bookings, joins and leaves take the rule's path either way.
    pub fn without_fast_paths(mut self) -> Self {
        self.fast_paths = false;
        self
    }

    /// This store with its tables named `<prefix>slots`, `<prefix>holds`, `<prefix>events`,
    /// `<prefix>event_consumers` and `<prefix>migrations` (indexes and triggers carry the
    /// prefix too), so they sit beside a host application's own tables whatever those are
    /// called. See [`InvalidTablePrefix`] for the prefixes accepted. Stores with different
    /// prefixes in one database are independent.
    pub fn with_table_prefix(mut self, prefix: &str) -> Result<Self, InvalidTablePrefix> {
        self.prefix = TablePrefix::new(prefix, RESERVED_PREFIX)?;
        self.sql = Arc::new(Statements::new(&self.prefix));
        // A queue of its own: whoever takes the waiting holds runs them with its own statements,
        // so clones with another prefix must not share one.
        self.holds = Arc::new(group::hold_groups(&self.write_gate));
        Ok(self)
    }

    /// The prefix of this store's table names.
    pub fn table_prefix(&self) -> &str {
        self.prefix.as_str()
    }

    /// `options` with the settings this store relies on: the WAL journal (readers never block
    /// the writer), `synchronous = NORMAL` (no fsync per commit in WAL mode; a power loss can
    /// drop the last commits but never corrupts), foreign keys on, a `busy_timeout` of
    /// [`DEFAULT_BUSY_TIMEOUT`] (writers from other connections or processes wait instead of
    /// failing), and creating the file if it is missing. [`SqliteStore::connect`] uses exactly
    /// this; use it when you build the pool yourself.
    pub fn configure(options: SqliteConnectOptions) -> SqliteConnectOptions {
        options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(DEFAULT_BUSY_TIMEOUT)
    }

    /// Opens a pool on `url` (for example `sqlite://slot_booking.db` or `sqlite::memory:`) and
    /// returns a store over it. Does not migrate: call [`SqliteStore::migrate`].
    ///
    /// The database file is created if missing. Connections use the WAL journal,
    /// `synchronous = NORMAL`, foreign keys and a `busy_timeout` of
    /// [`DEFAULT_BUSY_TIMEOUT`]. A database file gets a pool of [`DEFAULT_MAX_CONNECTIONS`]; an
    /// in-memory database (`:memory:` or `mode=memory`) gets a single connection that is kept
    /// open for the life of the pool, since the data lives only as long as a connection does
    /// (and shared-cache table locks are not covered by `busy_timeout`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = Self::configure(SqliteConnectOptions::from_str(url).map_err(map_err)?);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let pool_options = if in_memory {
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            // Connections stay open: with an idle timeout or a maximum lifetime, sqlx 0.9.0
            // runs a reaper task that can spin on one core for good (launchbadge/sqlx#3645).
            SqlitePoolOptions::new()
                .max_connections(DEFAULT_MAX_CONNECTIONS)
                .idle_timeout(None)
                .max_lifetime(None)
        }
        // sqlx pings every connection it hands out by default; a local file does not hang up.
        .test_before_acquire(false);
        // Opening a fresh file switches it to WAL, which needs an exclusive lock that SQLite
        // refuses at once (SQLITE_BUSY, without its busy handler) while another connection —
        // another process starting up at the same moment — does the same. Retry that for as
        // long as `busy_timeout` would have waited.
        let deadline = tokio::time::Instant::now() + DEFAULT_BUSY_TIMEOUT;
        loop {
            match pool_options.clone().connect_with(options.clone()).await {
                Ok(pool) => return Ok(SqliteStore::new(pool)),
                Err(error) => {
                    let error = map_err(error);
                    if !error.is_transient() || tokio::time::Instant::now() >= deadline {
                        return Err(error);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// The SQL text of a hold's `INSERT`, with this store's table names: the statement a hold
    /// runs first, and the only one when it takes its units or is refused as sold out.
    /// Parameters: `?1` slot id, `?2` idempotency key, `?3` now and `?4` expiry (microseconds
    /// since the Unix epoch), `?5` quantity, `?6` owner (or `NULL`); it returns the stored
    /// hold. For benchmarks that drive SQLite directly with the same work as the store: writes
    /// belong to the store's methods, which answer from the statement's outcome.
    pub fn hold_statement(&self) -> &str {
        &self.sql.insert_hold
    }

    /// Holds waiting now in this store's queue for the next writer, which commits them
    /// together (see the crate's docs on group commit). For monitoring, and for tests that
    /// need several holds waiting at once. (PostgreSQL's store counts them per slot, its
    /// group commit's key: `PostgresStore::holds_waiting(slot)`.)
    pub fn holds_waiting(&self) -> usize {
        self.holds.waiting(&())
    }

    /// How many holds this store (and its clones) has committed together so far, as every
    /// store with a group commit counts them: the transactions that ran the `INSERT`s of
    /// several concurrent holds (`groups`), the holds they ran (`requests`), the most at once.
    pub fn group_commits(&self) -> slot_booking::store::GroupStats {
        self.holds.stats()
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Applies the embedded migrations that this database has not recorded yet, each in its own
    /// `BEGIN IMMEDIATE` transaction together with its row in `<prefix>migrations`.
    /// Idempotent; safe to run from several processes at once.
    ///
    /// A database made by version 0.1 of this crate (tables `slots` and `holds` without a
    /// prefix, ledger `slot_booking_migrations`) is upgraded in place: its tables are renamed to
    /// this store's prefix with every row kept. A host application's own `slots` or `holds`
    /// table is never touched.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let _gate = self.write_gate.lock().await;
        migrate::run(&self.pool, &self.prefix).await
    }

    /// A write transaction: a place in this store's write queue, then `BEGIN IMMEDIATE`.
    async fn begin_write(&self) -> Result<SqliteTransaction, StoreError> {
        let gate = Arc::clone(&self.write_gate).lock_owned().await;
        let tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_err)?;
        Ok(SqliteTransaction::new(tx, gate))
    }
}

/// Maps a sqlx error to a [`StoreError`]: anything that may go away on retry (pool exhausted
/// or closed, I/O, TLS, a crashed worker, `SQLITE_BUSY`/`SQLITE_LOCKED` and their extended
/// codes) is [`StoreError::unavailable`]; everything else is [`StoreError::failed`].
pub(crate) fn map_err(error: sqlx::Error) -> StoreError {
    let transient = match &error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            // The primary result code is the low byte of an extended one:
            // SQLITE_BUSY = 5 (BUSY_SNAPSHOT 517, ...), SQLITE_LOCKED = 6 (LOCKED_SHAREDCACHE 262, ...).
            .is_some_and(|code| matches!(code & 0xff, 5 | 6)),
        _ => false,
    };
    if transient {
        StoreError::unavailable(error)
    } else {
        StoreError::failed(error)
    }
}

fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.is_unique_violation())
}

impl SqliteStore {
    /// A hold through the store. The fast path is the hold's `INSERT`: one autocommit
    /// statement when it runs alone, or one statement of a group commit shared with the holds
    /// waiting with it (`group.rs`); its outcome is its own either way. A key in use is then
    /// read to answer; only a hold that found no unit for a reason the statement could not
    /// settle opens a write transaction to reclaim expired holds and try again.
    async fn place_hold(&self, request: &HoldRequest<'_>) -> Result<HoldOutcome, StoreError> {
        if self.fast_paths {
            if let Some(settled) = self.insert_hold(request).await? {
                return Ok(settled);
            }
        }
        let mut w = self.begin_write().await?;
        let step = writes::hold_after_reclaim(&self.sql, w.connection(), request).await;
        let placing = w.finish(step).await?;
        writes::placed(&self.sql, &self.pool, request, placing).await
    }

    /// The fast path: the hold's insert, alone or in a group commit. The answer when the
    /// statement settled it; `None` when it found no unit for a reason it could not settle.
    async fn insert_hold(
        &self,
        request: &HoldRequest<'_>,
    ) -> Result<Option<HoldOutcome>, StoreError> {
        let writer = group::Writer {
            pool: &self.pool,
            sql: &self.sql,
            held: &self.held,
            groups: &self.holds,
        };
        Ok(
            match group::insert(writer, HoldParams::of(request)).await? {
                Insert::Created(hold) => Some(HoldOutcome::Created(hold)),
                Insert::KeyTaken => Some(writes::key_taken(&self.sql, &self.pool, request).await?),
                // Settled by the statement itself: no further statement, no transaction.
                Insert::SoldOut => Some(sold_out()),
                Insert::KeyWaits => Some(HoldOutcome::KeyReused(None)),
                Insert::NoUnit | Insert::PoolShort => None,
            },
        )
    }
}

#[cfg(test)]
mod plans;
