//! PostgreSQL store for [`slot_booking`], built on [sqlx](https://docs.rs/sqlx).
//!
//! [`PostgresStore`] implements [`Store`] as a thin translation to SQL: every outcome is
//! decided by the rows a conditional write affected or by a unique constraint, never by a read
//! made before the write.
//!
//! ```no_run
//! # async fn demo() -> Result<(), slot_booking::StoreError> {
//! use slot_booking_postgres::PostgresStore;
//!
//! let store = PostgresStore::connect("postgres://postgres@localhost/app").await?;
//! store.migrate().await?;
//! # Ok(()) }
//! ```
//!
//! # Inside your own transaction
//!
//! [`PostgresStore::on`] runs the store's writes on a connection you own, usually inside your
//! own transaction, and [`BookingEngine::within`](slot_booking::BookingEngine::within) runs
//! the engine's on them: a hold confirmed and an order row written commit together, or roll
//! back together.
//!
//! ```no_run
//! # async fn demo(
//! #     engine: slot_booking::BookingEngine<slot_booking_postgres::PostgresStore>,
//! #     slot_id: slot_booking::SlotId,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! let store = engine.store();
//! let mut tx = store.pool().begin().await?; // READ COMMITTED, as usual
//! let mut within = engine.within(store.on(&mut tx));
//! let placed = within.hold(slot_id, "checkout-7f3a").await?;
//! let confirmed = within.confirm(placed.hold.hold_id).await?;
//! drop(within);
//! slot_booking_postgres::sqlx::query("INSERT INTO orders (hold_id) VALUES ($1)")
//!     .bind(confirmed.hold_id.get())
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?; // the hold, its confirmation and the order, or none of them
//! # Ok(()) }
//! ```
//!
//! A refused request (a reused key, a sold-out slot, an expired hold) leaves the transaction
//! usable and unchanged: a hold's statements run under a savepoint, and every other write
//! refuses by changing nothing. Locks the writes take (a slot's row, for a hold, a cancel or a
//! slot change) last until you commit, so keep the transaction short, and touch several slots
//! in one transaction in a consistent order (by ascending slot id, say).
//! [`PostgresStore::on`] says more. The store also implements
//! [`TransactionalStore`], whose transactions are sqlx transactions on its pool.
//!
//! # Events
//!
//! The store implements [`EventStore`](slot_booking::EventStore): every write appends its
//! [`Event`](slot_booking::Event)s in the same statement as its change (a data-modifying CTE
//! `INSERT INTO events ... SELECT ... FROM` the rows the change returned), so rows affected
//! decide whether there is an event, a refused or no-op write appends none, and the hold path
//! stays one round trip. Writes in a caller's transaction ([`PostgresStore::on`]) append in
//! that transaction: its events commit with it, or vanish with its rollback.
//!
//! * **Kept** in `events` until [`purge`](slot_booking::EventStore::purge)d; consumers'
//!   cursors in `event_consumers` (name → the last position acknowledged, only ever moved
//!   forward), so a consumer on a new pool, after a crash, resumes where it acknowledged.
//! * **Order without waiting.** Sequence numbers are drawn when rows are written, not when
//!   they commit: a transaction that appended first can commit after one that appended later,
//!   so a reader paging by `id` alone would acknowledge the later event and never see the
//!   earlier one. Readers therefore compare snapshots: a *horizon* is a snapshot a reader took
//!   (`pg_current_snapshot()`, one at a time, numbered in the order taken, table
//!   `event_horizons`), and an event belongs to the first horizon whose snapshot sees its
//!   transaction (each row carries its writer's `tx`, `pg_current_xact_id()`). Its
//!   [`EventPosition`] is `<horizon>_<id>`; a consumer reads the
//!   horizons after its cursor in order, each horizon's events by id. An event whose
//!   transaction is still running belongs to no horizon yet: it comes with the first horizon
//!   taken after it commits, above every position delivered so far, so a consumer
//!   acknowledging as it goes skips nothing — and nothing waits for it either: later events of
//!   other transactions are delivered meanwhile. A read takes a new horizon only when it came
//!   up short and events exist that the newest horizon does not see (one call of a function
//!   that locks the horizon table and then takes its snapshot; readers are not blocked), and
//!   not sooner than [`DEFAULT_HORIZON_INTERVAL`] (5 ms) after the newest one
//!   ([`PostgresStore::with_horizon_interval`]): readers polling without pause take at most
//!   about 200 horizons a second between them, each a small committed write.
//! * **Nothing else holds delivery back.** A transaction that wrote no event here — in another
//!   database of the server, on other tables of this one, a `pg_dump`, a session left idle in
//!   a transaction — delays no consumer. A caller's transaction that appended events and stays
//!   open delays only its own events, which come with the first read after it commits.
//!   (Events written before migration 8 keep the positions `<tx>_<id>` they had, below every
//!   later one.)
//! * **Leases and acknowledgements in the caller's transaction.** A consumer's lease
//!   ([`lease_consumer`](slot_booking::EventStore::lease_consumer)) lives on its cursor's row;
//!   an acknowledgement through [`PostgresStore::on`] locks that row until the caller's
//!   transaction ends, so a lease taken over meanwhile waits for the commit and the new holder
//!   reads after what it acknowledged, or the acknowledgement finds the new holder and moves
//!   nothing.
//! * **Expired holds** are reclaimed lazily, as before, by a hold on a full slot or a slot
//!   change (each with its `hold_expired` events), and in bounded batches by
//!   [`reclaim_expired`](slot_booking::EventStore::reclaim_expired), which several instances
//!   may run at once: each hold is reported, and has its event, exactly once.
//! * **Purge** deletes up to `limit` cancelled and expired holds that ended before the
//!   cut-off, with their idempotency keys: a request retried with a purged hold's key places a
//!   new hold instead of replaying the old one, so keep the cut-off longer than any client's
//!   retry window. It also deletes up to `limit` events older than the cut-off that every
//!   registered consumer has acknowledged (all of them when no consumer is registered).
//!   Events name slots and holds by id without a foreign key: an event outlives a purged
//!   hold.
//!
//! # Storage
//!
//! * Tables `slots`, `holds`, `hold_keys`, `events` and `event_consumers` live in a schema of
//!   their own,
//!   [`DEFAULT_SCHEMA`] unless [`PostgresStore::with_schema`] names another. Every statement
//!   names its tables with the schema, so the pool can be shared with the host application
//!   whatever its `search_path`.
//! * [`PostgresStore::migrate`] applies the embedded migrations (`migrations/*.sql`) and
//!   records them in `<schema>.slot_booking_migrations`, not in sqlx's `_sqlx_migrations`, so
//!   a host application's own sqlx migrations coexist in the same database.
//! * Timestamps are `TIMESTAMPTZ` (microsecond precision, the precision the core keeps); ids
//!   are `BIGINT` identity columns. CHECK constraints back the capacity invariant and a
//!   partial index over holds still stored as `held` keeps availability and reclaim away from
//!   confirmed and cancelled history. No index covers a column that holds and slot changes
//!   update on a slot (`capacity`, `remaining`, `closed`, `removed_at`), so those updates
//!   stay HOT.
//!
//! # sqlx and TLS
//!
//! Built on sqlx 0.9, re-exported as [`slot_booking_postgres::sqlx`](crate::sqlx): build the
//! pool you pass to [`PostgresStore::new`] with it. A pool from another sqlx major version is a
//! different type, and the compiler would say "expected `Pool`, found a different `Pool`".
//!
//! Without a feature the store connects without TLS. Managed databases usually require it:
//!
//! * `tls-rustls`: rustls (ring, no system OpenSSL), trusting the Mozilla root certificates
//!   compiled in from `webpki-roots`;
//! * `tls-rustls-native-roots`: the same, trusting the operating system's certificate store.
//!
//! Choose the mode in the URL: `sslmode=require` encrypts but accepts any server certificate
//! (a self-signed one included), `sslmode=verify-ca` checks the certificate against the
//! trusted roots (or `sslrootcert=<file>`), `sslmode=verify-full` also checks the host name.
//! The default, `prefer`, uses TLS when the server offers it and a TLS feature is compiled in.
//!
//! # Statements
//!
//! * A hold is **one statement** in the common case: a CTE decrements the slot's `remaining`
//!   (`... WHERE remaining >= quantity AND starts_at > now AND NOT closed AND removed_at IS
//!   NULL`), inserts the hold from the row it returns and, last, its key into `hold_keys`. A
//!   unique violation on the key aborts the whole statement, so the decrement is undone; the
//!   key's hold is then read to tell a replay from a reused key. Only when the decrement found
//!   no unit does a second statement lock the slot, reclaim its expired holds, decrement once
//!   more and insert, again atomically.
//! * A cancel is one statement too: it locks the slot row, flips the hold and gives the unit
//!   back. Confirm is a single conditional `UPDATE`.
//! * Availability reads the slots that have not started (skipping closed and removed ones)
//!   and, for each one with units taken, counts its held holds that have expired: holds of
//!   slots that have started, however many were abandoned there, are never read.
//! * A capacity change or a removal is one conditional `UPDATE` of the slot row in the common
//!   case (`remaining + (new - capacity) >= 0`; `remaining = capacity`, which is "no unit held
//!   or confirmed" by the capacity invariant). Only when that changed nothing does a second
//!   statement lock the slot, reclaim its expired holds if that makes the change fit, and give
//!   their units back and apply the change in one update. A refused change reads the slot's
//!   units once, after its writes, to say how many are taken. Closing and reopening sales is
//!   one conditional `UPDATE`. A removal keeps the slot and its holds: it sets `removed_at`.
//! * The operator's listing is a keyset page through `slots_starts_at_id` (or
//!   `slots_by_resource` for one resource), each listed slot's held units counted through
//!   the partial index of held holds.
//!
//! # Lock paths
//!
//! On the pool, every statement but the sweep runs in a transaction of its own and takes at
//! most one slot row, first;
//! hold rows only of that slot (a confirm: only its hold, and nothing else); and, last, the
//! key it inserts into `hold_keys`, a table that is only ever inserted into. A statement
//! waiting on a key therefore waits for one that has nothing left to wait for, and no two
//! statements can wait for each other: there is no deadlock to retry. The slot changes follow
//! the same order: a capacity change, closing or a removal locks its one slot row first, then
//! (when reclaiming) expired holds of that slot only, and inserts no key; so a change racing
//! a hold on the same slot waits for the hold's statement or makes it wait, and the second
//! decides on the slot row as the first left it. Inside a caller's transaction
//! ([`PostgresStore::on`]) the locks of its writes last until it ends, so a transaction that
//! touches several slots holds one while it waits for the next: transactions touching slots
//! in one order (by ascending slot id, say) cannot wait for each other in a cycle, and a
//! deadlock among others is detected by PostgreSQL and fails one write with
//! [`StoreError::unavailable`]. The sweep
//! ([`reclaim_expired`](slot_booking::EventStore::reclaim_expired)) locks several slot rows,
//! in ascending id order, and only then hold rows of those slots, skipping hold rows another
//! statement has locked: it waits for slot rows only, in one order, and holds no hold row
//! while it waits, so it cannot close a cycle with a hold, a cancel, a slot change or another
//! sweep. A purge locks only ended holds (which nothing else locks), skipping rows another
//! purge has locked, then their keys. Appending an event takes no lock anyone waits for
//! (the primary key `(tx, id)` is unique per transaction). (Keys used to be unique
//! on the holds themselves; a reclaim then rewrote the index entries of other requests' keys,
//! and two reclaims on two slots could deadlock. Migration 3 moved them.)
//!
//! Each decision is a condition on the locked slot row's own columns (and the rows the same
//! statement's writes affected), never on holds counted in a subquery: in READ COMMITTED a
//! row lock re-reads the locked row at its latest version, but a subquery on another table
//! sees the statement's snapshot, which can predate a hold that committed while the statement
//! waited for the lock.
//!
//! # Time
//!
//! By default statements compare expiries and slot starts with the `now` the engine passes
//! from its clock, so servers with skewed clocks decide by different instants.
//! [`PostgresStore::with_database_clock`] makes every statement use the database server's
//! clock instead; each answer carries that instant.
//!
//! # Errors
//!
//! Connection, pool and I/O failures (not TLS failures: a certificate that does not verify
//! will not on retry), and the SQLSTATEs of a lost connection (class `08`),
//! serialization failure (`40001`), deadlock (`40P01`), too many connections (`53300`) and
//! server shutdown (`57P01`–`57P03`) map to [`StoreError::unavailable`]; everything else to
//! [`StoreError::failed`].

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use slot_booking::{
    AvailabilityEntry, ConsumerId, Decided, EventPosition, Hold, HoldId, HoldOutcome, HoldRequest,
    HoldStatus, LeaseHolder, NewSlot, OwnerId, PageRequest, RenewRequest, ResourceId, Scope, Slot,
    SlotChange, SlotFilter, SlotId, SlotLimits, SlotPageRequest, SlotUsage, Store, StoreError,
    Timestamp, TransactionWrites, TransactionalStore, Transition,
};
use sqlx::pool::PoolConnection;
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Executor, Postgres, Row};

mod changes;
mod events;
mod migrate;
mod sql;

pub use changes::{PostgresChangeFeed, CHANGE_CHANNEL_PREFIX};
/// The sqlx this crate is built on (0.9). Build pools and connection options through this
/// re-export: a pool from another sqlx major version is a different type.
pub use sqlx;

use sql::Statements;

/// The schema [`PostgresStore::new`] and [`PostgresStore::connect`] keep their tables in.
pub const DEFAULT_SCHEMA: &str = "slot_booking";

/// The shortest time between two horizons taken by one store's readers: see
/// [`PostgresStore::with_horizon_interval`].
pub const DEFAULT_HORIZON_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// What event reads waited for before migration 8; they no longer wait.
#[deprecated(since = "0.2.0", note = "event reads no longer wait")]
pub const DEFAULT_EVENT_READ_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Connections in the pool [`PostgresStore::connect`] opens.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// A schema name that is not a plain identifier.
///
/// Accepted: 1 to 63 characters, lowercase ASCII letters, digits and `_`, not starting with a
/// digit, and not starting with `pg_` (reserved by PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid schema name {0:?}: use 1-63 of [a-z0-9_], not starting with a digit or pg_")]
pub struct InvalidSchemaName(pub String);

/// A [`Store`] over a PostgreSQL database, keeping its tables in one schema.
///
/// Cheap to clone: clones share the pool and the prepared SQL text.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    inner: Arc<Inner>,
    /// Statements take their time from the database server, not from the engine.
    database_clock: bool,
    /// The shortest time between two horizons this store's readers take.
    horizon_interval: std::time::Duration,
}

#[derive(Debug)]
struct Inner {
    schema: String,
    sql: Statements,
}

fn validate_schema(schema: &str) -> Result<(), InvalidSchemaName> {
    let bytes = schema.as_bytes();
    let valid = (1..=63).contains(&bytes.len())
        && !bytes[0].is_ascii_digit()
        && !schema.starts_with("pg_")
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
    if valid {
        Ok(())
    } else {
        Err(InvalidSchemaName(schema.to_owned()))
    }
}

impl PostgresStore {
    /// A store over an existing pool, with its tables in [`DEFAULT_SCHEMA`]. Run
    /// [`PostgresStore::migrate`] before use. With sqlx's default `test_before_acquire(true)`
    /// every call costs an extra round trip for the ping.
    pub fn new(pool: PgPool) -> Self {
        PostgresStore::build(pool, DEFAULT_SCHEMA.to_owned())
    }

    /// A store over an existing pool, with its tables in `schema` (created by
    /// [`PostgresStore::migrate`] if missing). See [`InvalidSchemaName`] for the names
    /// accepted.
    pub fn with_schema(pool: PgPool, schema: &str) -> Result<Self, InvalidSchemaName> {
        validate_schema(schema)?;
        Ok(PostgresStore::build(pool, schema.to_owned()))
    }

    fn build(pool: PgPool, schema: String) -> Self {
        let sql = Statements::new(&schema);
        PostgresStore {
            pool,
            inner: Arc::new(Inner { schema, sql }),
            database_clock: false,
            horizon_interval: DEFAULT_HORIZON_INTERVAL,
        }
    }

    /// This store, deciding by the database server's clock instead of the engine's.
    ///
    /// By default every statement compares expiries and slot starts with the `now` the engine
    /// read from its [`Clock`](slot_booking::Clock), so application servers whose clocks
    /// disagree disagree about time: one whose clock runs 4 s fast takes an active hold back
    /// up to 4 s before the `expires_at` its owner was given, and one 4 s slow confirms a hold
    /// up to 4 s after it expired and sells a slot up to 4 s after it started. With the
    /// database clock, every statement uses the server's `statement_timestamp()`: a hold
    /// expires at its creation on that clock plus the engine's hold lifetime, every instance
    /// decides by the same clock, and each answer carries the instant it was decided at, which
    /// the engine resolves statuses against. The engine's clock then only ages the
    /// availability cache and places a listing's window.
    ///
    /// A manual clock in tests has no effect on a store with the database clock: leave it off
    /// where a test drives time.
    pub fn with_database_clock(mut self) -> Self {
        self.database_clock = true;
        self
    }

    /// Whether statements decide by the database server's clock
    /// ([`PostgresStore::with_database_clock`]).
    pub fn uses_database_clock(&self) -> bool {
        self.database_clock
    }

    /// The `now` to bind: the engine's, or NULL for the database's own clock.
    fn now_param(&self, now: Timestamp) -> Option<Timestamp> {
        (!self.database_clock).then_some(now)
    }

    /// Opens a pool of [`DEFAULT_MAX_CONNECTIONS`] on `url` and returns a store over it, with
    /// its tables in [`DEFAULT_SCHEMA`]. Does not migrate: call [`PostgresStore::migrate`].
    ///
    /// The pool does not ping a connection before handing it out
    /// (`test_before_acquire(false)`), so a hold is one round trip; a connection that died
    /// while idle fails its next call with [`StoreError::unavailable`]. Build your own pool
    /// and use [`PostgresStore::new`] for other settings.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(DEFAULT_MAX_CONNECTIONS)
            // sqlx pings every connection it hands out by default: a second round trip on
            // every call. A connection that died is reported as unavailable instead.
            .test_before_acquire(false)
            .connect(url)
            .await
            .map_err(map_err)?;
        Ok(PostgresStore::new(pool))
    }

    /// The store's writes on `conn`, a connection the caller owns, usually inside a transaction
    /// the caller began (pass `&mut tx` for a sqlx [`Transaction`](sqlx::Transaction)): hand
    /// them to [`BookingEngine::within`](slot_booking::BookingEngine::within), and everything
    /// they write commits or rolls back with the caller's own rows.
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     engine: slot_booking::BookingEngine<slot_booking_postgres::PostgresStore>,
    /// #     hold_id: slot_booking::HoldId,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// let store = engine.store();
    /// let mut tx = store.pool().begin().await?;
    /// let confirmed = engine.within(store.on(&mut tx)).confirm(hold_id).await?;
    /// slot_booking_postgres::sqlx::query("INSERT INTO orders (hold_id) VALUES ($1)")
    ///     .bind(confirmed.hold_id.get())
    ///     .execute(&mut *tx)
    ///     .await?;
    /// tx.commit().await?; // the confirmation and the order, or neither
    /// # Ok(()) }
    /// ```
    ///
    /// * **Begin the transaction as usual**, in READ COMMITTED (PostgreSQL's default). Every
    ///   decision is a condition on a row the statement locks, re-read at its latest version
    ///   once the lock is granted, which READ COMMITTED does; under REPEATABLE READ or
    ///   SERIALIZABLE a write that meets a row changed by a concurrent transaction fails with
    ///   [`StoreError::unavailable`] (a serialization failure) instead, and the whole
    ///   transaction has to be retried.
    /// * **A refused request leaves the transaction usable and unchanged.** A failing statement
    ///   aborts the whole transaction in PostgreSQL, so a hold's statements, whose key may be
    ///   taken by design, run under a savepoint that a refused hold rolls back (replay, reused
    ///   key, sold out, closed, started or missing slot), releasing what they locked. That
    ///   makes a hold three round trips here (`SAVEPOINT`, the statement, `RELEASE`) where the
    ///   pool's is one. Every other write is a conditional statement that refuses by changing
    ///   nothing. On a connection outside a transaction block each statement commits by
    ///   itself, as on the pool. An error
    ///   ([`StoreError`]: a lost connection, a deadlock, a timeout) from any write but a hold
    ///   may leave the transaction aborted: roll it back.
    /// * **Locks last until the caller commits or rolls back.** A hold, a cancel and every slot
    ///   change lock their slot's row (a confirm or a renewal only its hold's row), and a
    ///   hold's key is reserved: every other hold, cancel or change of that slot, and every
    ///   request with that key, waits until then, so keep such transactions short. A transaction that touches several slots should touch
    ///   them in a consistent order (by ascending slot id, say), as with any rows: two
    ///   transactions taking the same two slots in opposite orders deadlock, and PostgreSQL
    ///   then fails one of them with [`StoreError::unavailable`].
    /// * **The caller commits.** The engine does not invalidate its availability cache for
    ///   these writes: see [`slot_booking::Within`].
    pub fn on<'c>(&self, conn: &'c mut PgConnection) -> PostgresWrites<'c> {
        PostgresWrites {
            store: self.clone(),
            conn,
        }
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema holding this store's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Creates the schema if needed and applies the embedded migrations it has not recorded
    /// yet, each in one transaction with its row in `<schema>.slot_booking_migrations`, under a
    /// transaction-scoped advisory lock so concurrent migrators (other processes included)
    /// take turns. Idempotent.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        migrate::run(&self.pool, &self.inner.schema).await
    }
}

/// Maps a sqlx error to a [`StoreError`]: what may go away on retry is
/// [`StoreError::unavailable`], everything else [`StoreError::failed`].
pub(crate) fn map_err(error: sqlx::Error) -> StoreError {
    let transient = match &error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => true,
        // A certificate that does not verify stays so on retry: rustls reports it as invalid
        // data on the stream. A connection dropped mid-handshake is another kind of I/O error.
        sqlx::Error::Io(io) => io.kind() != std::io::ErrorKind::InvalidData,
        sqlx::Error::Tls(_) => false,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") // connection exception
                || matches!(
                    &*code,
                    "40001" // serialization_failure
                        | "40P01" // deadlock_detected
                        | "53300" // too_many_connections
                        | "57P01" // admin_shutdown
                        | "57P02" // crash_shutdown
                        | "57P03" // cannot_connect_now
                )
        }),
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

fn hold_from_row(row: &PgRow) -> Result<Hold, StoreError> {
    let status: String = row.try_get("status").map_err(map_err)?;
    let owner: Option<String> = row.try_get("owner").map_err(map_err)?;
    Ok(Hold {
        quantity: row.try_get("quantity").map_err(map_err)?,
        owner: owner
            .map(OwnerId::new)
            .transpose()
            .map_err(StoreError::failed)?,
        created_at: row.try_get("created_at").map_err(map_err)?,
        hold_id: HoldId(row.try_get("id").map_err(map_err)?),
        slot_id: SlotId(row.try_get("slot_id").map_err(map_err)?),
        status: HoldStatus::from_str(&status).map_err(StoreError::failed)?,
        expires_at: row.try_get("expires_at").map_err(map_err)?,
        confirmed_at: row.try_get("confirmed_at").map_err(map_err)?,
        cancelled_at: row.try_get("cancelled_at").map_err(map_err)?,
    })
}

/// `outcome`, decided at the row's `decided_at`.
fn decided<T>(row: &PgRow, outcome: T) -> Result<Decided<T>, StoreError> {
    Ok(Decided::new(
        row.try_get("decided_at").map_err(map_err)?,
        outcome,
    ))
}

fn slot_from_row(row: &PgRow) -> Result<Slot, StoreError> {
    Ok(Slot {
        slot_id: SlotId(row.try_get("id").map_err(map_err)?),
        starts_at: row.try_get("starts_at").map_err(map_err)?,
        ends_at: row.try_get("ends_at").map_err(map_err)?,
        capacity: row.try_get("capacity").map_err(map_err)?,
        remaining: row.try_get("remaining").map_err(map_err)?,
        resource: resource_from_row(row)?,
        closed: row.try_get("closed").map_err(map_err)?,
        removed_at: row.try_get("removed_at").map_err(map_err)?,
    })
}

/// The row's `resource`, checked as a [`ResourceId`] (a row written behind the store's back
/// may hold anything).
fn resource_from_row(row: &PgRow) -> Result<Option<ResourceId>, StoreError> {
    let resource: Option<String> = row.try_get("resource").map_err(map_err)?;
    resource
        .map(ResourceId::new)
        .transpose()
        .map_err(StoreError::failed)
}

/// The slot of a row whose slot columns come from a LEFT JOIN: `None` when they are NULL.
fn optional_slot(row: &PgRow) -> Result<Option<Slot>, StoreError> {
    row_id(row)?.map(|_| slot_from_row(row)).transpose()
}

/// The slot and its held units of a row of the listing or of the usage read.
fn usage_from_row(row: &PgRow) -> Result<Option<SlotUsage>, StoreError> {
    let Some(slot) = optional_slot(row)? else {
        return Ok(None);
    };
    Ok(Some(SlotUsage {
        slot,
        held: row.try_get("held").map_err(map_err)?,
        expired: row.try_get("expired").map_err(map_err)?,
    }))
}

/// The earliest instant a PostgreSQL `timestamptz` holds (4714-11-24 BC, Julian day 0), in
/// microseconds since the Unix epoch. Every slot starts at or after it; the latest instant
/// chrono holds is earlier than PostgreSQL's latest.
const EARLIEST_MICROS: i64 = -210_866_803_200_000_000;

/// Whether PostgreSQL can hold `at`.
fn representable(at: Timestamp) -> bool {
    at.timestamp_micros() >= EARLIEST_MICROS
}

/// What a hold-inserting statement did.
enum Insert {
    /// Took a unit and stored the hold.
    Created(Decided<Hold>),
    /// Found no unit, and the statement's own read says why, for good: nothing changed.
    Refused(Decided<HoldOutcome>),
    /// Found no unit; nothing changed.
    NoUnit,
    /// The key is taken; the statement was rolled back as a whole.
    KeyTaken,
}

/// How a write's statements stand to the transaction they run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A connection of the pool, outside any transaction: each statement commits by itself, and
    /// one that fails undoes itself and nothing else. No savepoint is needed, nor its round
    /// trips.
    Pooled,
    /// The caller's connection, usually inside the caller's transaction, where a failing
    /// statement would abort the whole transaction: the hold's statements, whose key may be
    /// taken by design, run under a savepoint.
    Caller,
}

/// The store's statements on one connection: the one implementation of every operation, run
/// by the pool path ([`Store`], on a connection acquired for the call) and by [`PostgresWrites`] (on
/// the caller's connection).
struct Run<'a> {
    store: &'a PostgresStore,
    conn: &'a mut PgConnection,
    mode: Mode,
}

impl PostgresStore {
    fn sql(&self) -> &Statements {
        &self.inner.sql
    }

    /// A connection of the pool for one call. Not a round trip: with
    /// `test_before_acquire(false)` (as [`PostgresStore::connect`] builds its pool) the pool
    /// hands out an idle connection as it is, exactly as running a statement on the pool did.
    async fn acquire(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        self.pool.acquire().await.map_err(map_err)
    }

    /// The operations on a connection of the pool.
    fn pooled<'a>(&'a self, conn: &'a mut PgConnection) -> Run<'a> {
        Run {
            store: self,
            conn,
            mode: Mode::Pooled,
        }
    }
}

impl Run<'_> {
    fn now_param(&self, now: Timestamp) -> Option<Timestamp> {
        self.store.now_param(now)
    }

    async fn create_slot(&mut self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().create_slot.as_str()))
            .bind(slot.starts_at)
            .bind(slot.ends_at)
            .bind(slot.capacity)
            .bind(slot.resource.as_ref().map(ResourceId::as_str))
            .bind(self.now_param(now))
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        slot_from_row(&row)
    }

    async fn availability(
        &mut self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(self.store.sql().availability.as_str()))
            .bind(self.now_param(now))
            .fetch_all(&mut *self.conn)
            .await
            .map_err(map_err)?;
        listed(&rows, "availability", |row| {
            // The one row of an empty listing has no slot.
            let Some(slot_id) = row_id(row)? else {
                return Ok(None);
            };
            Ok(Some(AvailabilityEntry {
                slot_id: SlotId(slot_id),
                starts_at: row.try_get("starts_at").map_err(map_err)?,
                ends_at: row.try_get("ends_at").map_err(map_err)?,
                capacity: row.try_get("capacity").map_err(map_err)?,
                remaining: row.try_get("available").map_err(map_err)?,
                resource: resource_from_row(row)?,
            }))
        })
    }

    /// Places a hold: the hold's statements (under a savepoint on the caller's connection),
    /// then, when they stored nothing, one read to say why.
    async fn create_hold(
        &mut self,
        request: &HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        // On the pool path each statement is its own transaction: a unique violation undoes
        // that statement alone, and the fast path stays one round trip.
        let savepoint = self.mode == Mode::Caller && self.open_savepoint().await?;
        let inserted = self.insert_hold(request).await;
        let inserted = if savepoint {
            // Keep a stored hold. Undo anything else: a refused attempt (a unique violation
            // that aborted the savepoint, or a reclaim that gave expired units back without
            // taking one, whose slot row lock goes with it) or a failure, which would leave the
            // caller's transaction aborted.
            let end = match inserted {
                Ok(Insert::Created(_)) => sql::RELEASE_HOLD_SAVEPOINT,
                _ => sql::UNDO_HOLD_SAVEPOINT,
            };
            let ended = self.conn.execute(end).await.map_err(map_err);
            // A failed statement's own error says more than its undo's.
            let inserted = inserted?;
            ended?;
            inserted
        } else {
            inserted?
        };
        match inserted {
            Insert::Created(hold) => Ok(created(hold)),
            Insert::Refused(outcome) => Ok(outcome),
            Insert::NoUnit | Insert::KeyTaken => self.explain(request).await,
        }
    }

    /// Opens the savepoint of a hold's statements on the caller's connection: `true` when
    /// opened, `false` when the connection is not in a transaction block (PostgreSQL refuses a
    /// savepoint there with SQLSTATE `25P01`). Outside a transaction block every statement
    /// commits by itself and one that fails undoes only itself, as on the pool path, so there
    /// is nothing for a savepoint to protect.
    async fn open_savepoint(&mut self) -> Result<bool, StoreError> {
        match self.conn.execute(sql::HOLD_SAVEPOINT).await {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("25P01") => Ok(false),
            Err(error) => Err(map_err(error)),
        }
    }

    /// The hold's statements: the fast one, then, only when it found no unit and its refusal
    /// is not final (expired holds might make room), the one that reclaims expired holds.
    /// `NoUnit` and `KeyTaken` are left for [`Run::explain`].
    async fn insert_hold(&mut self, request: &HoldRequest<'_>) -> Result<Insert, StoreError> {
        let sql = self.store.sql();
        // Fast path, one round trip: decrement and insert in one statement, or say why not.
        match self.try_insert_hold(&sql.hold_fast, request).await? {
            Insert::NoUnit => {}
            done => return Ok(done),
        }
        // No unit: lock the slot, reclaim its expired holds, decrement once more and insert,
        // all in one statement (atomic; a unique violation undoes the reclaim as well).
        self.try_insert_hold(&sql.hold_reclaim, request).await
    }

    /// Runs one of the two hold-inserting statements.
    async fn try_insert_hold(
        &mut self,
        sql: &str,
        request: &HoldRequest<'_>,
    ) -> Result<Insert, StoreError> {
        let lifetime = request.expires_at - request.now;
        let inserted = sqlx::query(AssertSqlSafe(sql))
            .bind(request.slot_id.get())
            .bind(request.key.as_str())
            .bind(self.now_param(request.now))
            .bind(interval(lifetime)?)
            .bind(request.quantity)
            .bind(request.owner.map(OwnerId::as_str))
            .fetch_optional(&mut *self.conn)
            .await;
        match inserted {
            // The fast statement's refusal row (the reclaiming one returns no row instead).
            Ok(Some(row)) if !took(&row)? => {
                Ok(final_refusal(&row, request)?.map_or(Insert::NoUnit, Insert::Refused))
            }
            Ok(Some(row)) => Ok(Insert::Created(decided(&row, hold_from_row(&row)?)?)),
            Ok(None) => Ok(Insert::NoUnit),
            Err(error) if is_unique_violation(&error) => Ok(Insert::KeyTaken),
            Err(error) => Err(map_err(error)),
        }
    }

    /// Says why no hold was created: the key's hold if there is one (it takes precedence),
    /// else whether the slot is missing, started or full. One read, after the write.
    async fn explain(
        &mut self,
        request: &HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().explain_hold.as_str()))
            .bind(request.slot_id.get())
            .bind(request.key.as_str())
            .bind(self.now_param(request.now))
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        let (at, key_holder, limits) = refusal_facts(&row)?;
        Ok(refused(request, at, key_holder, limits))
    }

    async fn hold_by_id(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        let (any, owner) = scope.as_filter();
        let row = sqlx::query(AssertSqlSafe(self.store.sql().hold_by_id.as_str()))
            .bind(hold_id.get())
            .bind(self.now_param(now))
            .bind(any)
            .bind(owner)
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        decided(&row, optional_hold(&row)?)
    }

    /// Runs a conditional update of one hold (confirm, cancel, renew) whose first four
    /// parameters are the hold id, now and the scope, then `extra` intervals; when it changes
    /// nothing, reads the hold in the same scope to say why.
    async fn transition(
        &mut self,
        sql: &str,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        extra: &[chrono::Duration],
    ) -> Result<Decided<Transition>, StoreError> {
        let (any, owner) = scope.as_filter();
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(hold_id.get())
            .bind(self.now_param(now))
            .bind(any)
            .bind(owner);
        for &duration in extra {
            query = query.bind(interval(duration)?);
        }
        let updated = query
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?;
        if let Some(row) = updated {
            return decided(&row, Transition::Applied(hold_from_row(&row)?));
        }
        // Nothing changed: the hold as it is now, at the instant of that read.
        let read = self.hold_by_id(hold_id, scope, now).await?;
        Ok(Decided::new(
            read.at,
            match read.outcome {
                Some(hold) => Transition::NotApplied(hold),
                None => Transition::NotFound,
            },
        ))
    }

    async fn confirm_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = self.store.sql();
        self.transition(&sql.confirm, hold_id, scope, now, &[])
            .await
    }

    async fn cancel_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = self.store.sql();
        self.transition(&sql.cancel, hold_id, scope, now, &[]).await
    }

    async fn renew_hold(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = self.store.sql();
        self.transition(
            &sql.renew,
            request.hold_id,
            request.scope,
            request.now,
            &[request.lifetime, request.max_life],
        )
        .await
    }

    /// Runs a slot change's conditional update (`fast`, returning the slot and `decided_at` if
    /// it changed it), then, if it changed nothing and there is one, the statement that
    /// reclaims expired holds first (`reclaim`, returning the slot, `applied` and
    /// `decided_at`), each with `$1` the slot, `$2` now and `$3` the `value` when given; when
    /// neither applied, reads the slot's usage to say why.
    async fn change_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
        value: Option<i32>,
        fast: &str,
        reclaim: &str,
    ) -> Result<Decided<SlotChange>, StoreError> {
        for (sql, reclaiming) in [(fast, false), (reclaim, true)] {
            let mut query = sqlx::query(AssertSqlSafe(sql))
                .bind(slot_id.get())
                .bind(self.now_param(now));
            if let Some(value) = value {
                query = query.bind(value);
            }
            let Some(row) = query
                .fetch_optional(&mut *self.conn)
                .await
                .map_err(map_err)?
            else {
                continue;
            };
            // The fast statement returns a row only when it applied the change; the reclaiming
            // one also when it gave back reclaimed units without applying it.
            let applied = !reclaiming || row.try_get::<bool, _>("applied").map_err(map_err)?;
            if applied {
                return decided(&row, SlotChange::Applied(slot_from_row(&row)?));
            }
        }
        self.refused_change(slot_id, now).await
    }

    /// Says why a capacity change or a removal changed nothing: the slot is missing or removed,
    /// or units are in use (the slot and its held units as read now). One read, after the
    /// writes.
    async fn refused_change(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().slot_usage.as_str()))
            .bind(slot_id.get())
            .bind(self.now_param(now))
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        let change = match usage_from_row(&row)? {
            Some(usage) if usage.slot.removed_at.is_none() => SlotChange::InUse(usage),
            _ => SlotChange::NotFound,
        };
        decided(&row, change)
    }

    async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        capacity: i32,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let sql = self.store.sql();
        self.change_slot(
            slot_id,
            now,
            Some(capacity),
            &sql.capacity_fast,
            &sql.capacity_reclaim,
        )
        .await
    }

    async fn set_closed(
        &mut self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().set_closed.as_str()))
            .bind(slot_id.get())
            .bind(self.now_param(now))
            .bind(closed)
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        let change = match optional_slot(&row)? {
            Some(slot) => SlotChange::Applied(slot),
            None => SlotChange::NotFound,
        };
        decided(&row, change)
    }

    async fn remove_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let sql = self.store.sql();
        self.change_slot(slot_id, now, None, &sql.remove_fast, &sql.remove_reclaim)
            .await
    }

    /// One keyset page of holds (`sql` is the owner's or the slot's query).
    async fn page<'q>(
        &mut self,
        sql: &'q str,
        bind: impl FnOnce(
            sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
        ) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let rows = bind(sqlx::query(AssertSqlSafe(sql)))
            .bind(page.after.map_or(i64::MIN, HoldId::get))
            .bind(i64::from(page.limit))
            .bind(self.now_param(now))
            .fetch_all(&mut *self.conn)
            .await
            .map_err(map_err)?;
        listed(&rows, "a page query", optional_hold)
    }

    async fn get_slot(&mut self, slot_id: SlotId) -> Result<Option<Slot>, StoreError> {
        sqlx::query(AssertSqlSafe(self.store.sql().slot_by_id.as_str()))
            .bind(slot_id.get())
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?
            .as_ref()
            .map(slot_from_row)
            .transpose()
    }

    async fn list_slots(
        &mut self,
        filter: &SlotFilter,
        page: SlotPageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<SlotUsage>>, StoreError> {
        // One exclusive lower bound on `(starts_at, id)`: the cursor or `from` (as
        // `(from, i64::MIN)`: ids are positive), whichever is later. NULL: from the start.
        let lower = match (page.after, filter.from) {
            (Some(after), Some(from)) if from > after.starts_at => (Some(from), i64::MIN),
            (Some(after), _) => (Some(after.starts_at), after.slot_id.get()),
            (None, from) => (from, i64::MIN),
        };
        // A cursor or bound from before PostgreSQL's earliest instant (a cursor is the
        // caller's text) would fail the statement: no slot starts that early, so it means
        // "from the start", and as an upper bound "nothing".
        let lower = match lower {
            (Some(start), _) if !representable(start) => (None, i64::MIN),
            other => other,
        };
        let to = match filter.to {
            Some(to) if !representable(to) => Some(
                chrono::DateTime::from_timestamp_micros(EARLIEST_MICROS)
                    .ok_or_else(|| StoreError::failed("PostgreSQL's earliest instant"))?,
            ),
            to => to,
        };
        let sql = match filter.resource {
            Some(_) => &self.store.sql().list_resource_slots,
            None => &self.store.sql().list_slots,
        };
        let mut query = sqlx::query(AssertSqlSafe(sql.as_str()))
            .bind(lower.0)
            .bind(lower.1)
            .bind(to)
            .bind(i64::from(page.limit))
            .bind(self.now_param(now));
        if let Some(resource) = &filter.resource {
            query = query.bind(resource.as_str());
        }
        let rows = query.fetch_all(&mut *self.conn).await.map_err(map_err)?;
        listed(&rows, "the slot listing", usage_from_row)
    }
}

/// The listing of a statement that always returns at least one row: its `decided_at`, and
/// what `item` makes of each row (the one row of an empty listing, with NULL columns but the
/// instant, makes nothing).
fn listed<T>(
    rows: &[PgRow],
    statement: &str,
    item: impl Fn(&PgRow) -> Result<Option<T>, StoreError>,
) -> Result<Decided<Vec<T>>, StoreError> {
    let at = match rows.first() {
        Some(row) => row.try_get("decided_at").map_err(map_err)?,
        None => return Err(StoreError::failed(format!("{statement} returned no row"))),
    };
    // Sized up front: a listing is kept as long as the engine caches it, and a vector grown
    // by doubling would carry up to twice its entries (1.64x measured at 10,000 slots).
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        if let Some(listed) = item(row)? {
            items.push(listed);
        }
    }
    Ok(Decided::new(at, items))
}

/// The row's `id`, NULL in the one row of an empty answer.
fn row_id(row: &PgRow) -> Result<Option<i64>, StoreError> {
    row.try_get("id").map_err(map_err)
}

/// The hold of a row whose hold columns come from a LEFT JOIN: `None` when they are NULL.
fn optional_hold(row: &PgRow) -> Result<Option<Hold>, StoreError> {
    row_id(row)?.map(|_| hold_from_row(row)).transpose()
}

/// A duration as a PostgreSQL interval of microseconds.
fn interval(duration: chrono::Duration) -> Result<PgInterval, StoreError> {
    let microseconds = duration
        .num_microseconds()
        .ok_or_else(|| StoreError::failed("a hold lifetime overflows an interval"))?;
    Ok(PgInterval {
        months: 0,
        days: 0,
        microseconds,
    })
}

#[async_trait]
impl Store for PostgresStore {
    async fn create_slot(&self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn).create_slot(slot, now).await
    }

    async fn availability(
        &self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn).availability(now).await
    }

    async fn create_hold(
        &self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn).create_hold(&request).await
    }

    async fn confirm_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn)
            .confirm_hold(hold_id, scope, now)
            .await
    }

    async fn cancel_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn)
            .cancel_hold(hold_id, scope, now)
            .await
    }

    async fn renew_hold(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn).renew_hold(request).await
    }

    async fn get_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn).hold_by_id(hold_id, scope, now).await
    }

    async fn owner_holds(
        &self,
        owner: &OwnerId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let owner = owner.as_str().to_owned();
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn)
            .page(&self.sql().owner_holds, |q| q.bind(owner), page, now)
            .await
    }

    async fn slot_holds(
        &self,
        slot_id: SlotId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn)
            .page(&self.sql().slot_holds, |q| q.bind(slot_id.get()), page, now)
            .await
    }

    async fn get_slot(&self, slot_id: SlotId) -> Result<Option<Slot>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn).get_slot(slot_id).await
    }

    async fn change_capacity(
        &self,
        slot_id: SlotId,
        capacity: i32,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn)
            .change_capacity(slot_id, capacity, now)
            .await
    }

    async fn set_closed(
        &self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn)
            .set_closed(slot_id, closed, now)
            .await
    }

    async fn remove_slot(
        &self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn).remove_slot(slot_id, now).await
    }

    async fn list_slots(
        &self,
        filter: &SlotFilter,
        page: SlotPageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<SlotUsage>>, StoreError> {
        let mut conn = self.acquire().await?;
        self.pooled(&mut conn).list_slots(filter, page, now).await
    }
}

/// The store's writes on a connection the caller owns, usually inside the caller's own
/// transaction: made by [`PostgresStore::on`], and run through
/// [`BookingEngine::within`](slot_booking::BookingEngine::within), which validates each
/// request and answers as the engine does. Each write runs the same statements as the
/// [`Store`] method of the same name; see [`PostgresStore::on`] for what changes inside a
/// transaction.
#[derive(Debug)]
pub struct PostgresWrites<'c> {
    store: PostgresStore,
    conn: &'c mut PgConnection,
}

impl PostgresWrites<'_> {
    /// The caller's connection, to run statements of its own between the store's writes
    /// (reach it through [`Within::writes`](slot_booking::Within::writes) once the writes are
    /// handed to the engine).
    pub fn connection(&mut self) -> &mut PgConnection {
        self.conn
    }

    /// The operations on the caller's connection.
    fn run(&mut self) -> Run<'_> {
        Run {
            store: &self.store,
            conn: self.conn,
            mode: Mode::Caller,
        }
    }
}

#[async_trait]
impl TransactionWrites for PostgresWrites<'_> {
    async fn create_hold(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        self.run().create_hold(&request).await
    }

    async fn confirm_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        self.run().confirm_hold(hold_id, scope, now).await
    }

    async fn cancel_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        self.run().cancel_hold(hold_id, scope, now).await
    }

    async fn renew_hold(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        self.run().renew_hold(request).await
    }

    async fn get_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        self.run().hold_by_id(hold_id, scope, now).await
    }

    async fn create_slot(&mut self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError> {
        self.run().create_slot(slot, now).await
    }

    async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        capacity: i32,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        self.run().change_capacity(slot_id, capacity, now).await
    }

    async fn set_closed(
        &mut self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        self.run().set_closed(slot_id, closed, now).await
    }

    async fn remove_slot(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        self.run().remove_slot(slot_id, now).await
    }

    async fn acknowledge(
        &mut self,
        consumer: &ConsumerId,
        holder: Option<&LeaseHolder>,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        events::acknowledge_on(self.conn, self.store.sql(), consumer, holder, through).await
    }
}

/// Transactions on the store's pool, for the conformance suite or an application that lets the
/// store open them: [`begin`](TransactionalStore::begin) is the pool's `begin` (READ
/// COMMITTED, the server's default), and [`writes`](TransactionalStore::writes) is
/// [`PostgresStore::on`] on the transaction's connection.
#[async_trait]
impl TransactionalStore for PostgresStore {
    type Transaction = sqlx::Transaction<'static, Postgres>;

    type Writes<'t> = PostgresWrites<'t>;

    async fn begin(&self) -> Result<Self::Transaction, StoreError> {
        self.pool.begin().await.map_err(map_err)
    }

    fn writes<'t>(&'t self, transaction: &'t mut Self::Transaction) -> PostgresWrites<'t> {
        self.on(transaction)
    }

    async fn commit(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        transaction.commit().await.map_err(map_err)
    }

    async fn rollback(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        transaction.rollback().await.map_err(map_err)
    }
}

/// Whether a row of the fast hold statement is the created hold (`took`) or its refusal.
fn took(row: &PgRow) -> Result<bool, StoreError> {
    row.try_get("took").map_err(map_err)
}

/// What a refusal row (the fast hold statement's, or the explaining read's) says: the instant
/// it was read at, the hold the key belongs to, and the slot's limits. The slot's columns are
/// all NULL exactly when there is no such slot (`closed` is NOT NULL in the table).
fn refusal_facts(row: &PgRow) -> Result<(Timestamp, Option<Hold>, Option<SlotLimits>), StoreError> {
    let key_holder = optional_hold(row)?;
    let starts_at: Option<Timestamp> = row.try_get("slot_starts_at").map_err(map_err)?;
    let capacity: Option<i32> = row.try_get("slot_capacity").map_err(map_err)?;
    let closed: Option<bool> = row.try_get("slot_closed").map_err(map_err)?;
    let removed_at: Option<Timestamp> = row.try_get("slot_removed_at").map_err(map_err)?;
    let limits = match (starts_at, capacity, closed) {
        (Some(starts_at), Some(capacity), Some(closed)) => Some(SlotLimits {
            starts_at,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        _ => None,
    };
    let at: Timestamp = row.try_get("decided_at").map_err(map_err)?;
    Ok((at, key_holder, limits))
}

/// The refusal's answer, with started or full judged at the instant `at` it was read at.
fn refused(
    request: &HoldRequest<'_>,
    at: Timestamp,
    key_holder: Option<Hold>,
    limits: Option<SlotLimits>,
) -> Decided<HoldOutcome> {
    let request = HoldRequest {
        now: at,
        ..*request
    };
    Decided::new(at, HoldOutcome::refused(&request, key_holder, limits))
}

/// The answer to a hold the fast statement refused, when its own read settles it. Every
/// answer but `SoldOut` is final (a key in use, a slot missing, not selling or too small: a
/// reclaim would change none of them). `SoldOut` is final when the slot is full at the
/// statement's snapshot with no held hold expired by now: a reclaim would find nothing to
/// give back. `None` when reclaiming might make room, or when the snapshot shows room that the
/// decrement, deciding on the row's latest version, did not find (the row changed under the
/// statement): the reclaiming statement and a fresh read decide those.
///
/// The decision itself is still the decrement's: it affected no row, so nothing was reserved.
/// The read only explains it, at the snapshot the statement ran in.
fn final_refusal(
    row: &PgRow,
    request: &HoldRequest<'_>,
) -> Result<Option<Decided<HoldOutcome>>, StoreError> {
    let (at, key_holder, limits) = refusal_facts(row)?;
    let answer = refused(request, at, key_holder, limits);
    if answer.outcome != HoldOutcome::SoldOut {
        return Ok(Some(answer));
    }
    let remaining: Option<i32> = row.try_get("slot_remaining").map_err(map_err)?;
    let has_expired: Option<bool> = row.try_get("slot_has_expired").map_err(map_err)?;
    let full = remaining.is_some_and(|units| units < request.quantity);
    Ok((full && has_expired == Some(false)).then_some(answer))
}

fn created(hold: Decided<Hold>) -> Decided<HoldOutcome> {
    Decided::new(hold.at, HoldOutcome::Created(hold.outcome))
}
