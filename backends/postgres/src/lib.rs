//! PostgreSQL store for [`slot_booking`], built on [sqlx](https://docs.rs/sqlx).
//!
//! [`PostgresStore`] implements [`Store`](slot_booking::Store) as a thin translation to SQL: every outcome is
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
//! [`BookingEngine::transaction`](slot_booking::BookingEngine::transaction) opens a sqlx
//! transaction on the store's pool ([`TransactionalStore`]) for the engine's writes and your
//! own statements: a hold confirmed and an order row written commit together, or roll back
//! together, and the engine's listing shows the change as soon as the commit succeeded.
//!
//! ```no_run
//! # async fn demo(
//! #     engine: slot_booking::BookingEngine<slot_booking_postgres::PostgresStore>,
//! #     slot_id: slot_booking::SlotId,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use slot_booking_postgres::sqlx;
//!
//! let mut tx = engine.transaction().await?; // READ COMMITTED, as usual
//! let placed = tx.hold(slot_id, "checkout-7f3a").await?;
//! let scope = slot_booking::Scope::Anonymous; // whose holds this call may touch
//! let confirmed = tx.confirm(&scope, placed.hold.hold_id).await?;
//! tx.run(move |tx| {
//!     Box::pin(async move {
//!         sqlx::query("INSERT INTO orders (hold_id) VALUES ($1)")
//!             .bind(confirmed.hold_id.get())
//!             .execute(&mut **tx)
//!             .await
//!     })
//! })
//! .await??;
//! tx.commit().await?; // the hold, its confirmation and the order, or none of them
//! # Ok(()) }
//! ```
//!
//! A refused request (a reused key, a sold-out slot, an expired hold) leaves the transaction
//! usable and unchanged: every write refuses by changing nothing (a hold's reclaiming
//! statements, the only ones that may change something before they refuse, run under a
//! savepoint). Locks the writes take (a slot's row, for a hold, a cancel or a
//! slot change) last until you commit, so keep the transaction short, and touch several slots
//! in one transaction in a consistent order (by ascending slot id, say).
//! [`PostgresStore::on`] says more.
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
//! # Bookings
//!
//! The store implements [`BookingStore`](slot_booking::BookingStore): a booking of several
//! lines is one hold per line, placed in **one statement** that locks the lines' slot rows by
//! id ascending, reclaims a short line's expired holds when that makes it fit, and, only when
//! every line fits on its locked row, takes every line's units and inserts the lines (in
//! slot-id order: the first line has the lowest id, the booking's) with one `hold_placed`
//! event each and, last, the first line's key. A refused booking takes nothing, and the same
//! statement's rows say what was read of each line's slot. Every line carries `booking_id`
//! (migration 9; NULL on a plain hold). Confirming, cancelling or renewing a booking, or any
//! line of one ([`HoldStore::confirm_hold`](slot_booking::HoldStore::confirm_hold) and the
//! others, on the pool or through [`PostgresStore::on`]), is one statement that locks the
//! lines' slots by id, then the lines, and changes every line or none, with one event per line
//! changed. A plain hold's statements are unchanged.
//!
//! # Pools
//!
//! The store implements [`PoolStore`](slot_booking::PoolStore): a pool is a capacity several
//! slots draw from (migration 10: `pools`, `slot_pools`, and each slot's pools on its own row).
//! Every statement that takes or gives back units of a slot takes or gives them back to each
//! of its pools in the same statement, locking slot rows first (by id) and then pool rows
//! (by id), deciding on the rows it locked. A slot drawing from no pool takes the same path
//! as before, one round trip; a hold on a slot drawing from pools takes two (the fast
//! statement takes only slots without pools, then the reclaiming one locks the slot and its
//! pools). A hold or booking short only in a pool whose other slots have expired holds gets
//! them given back in a step of its own, then is tried once more: `pools.rs` says more.
//!
//! # Waitlists
//!
//! The store implements [`WaitlistStore`](slot_booking::WaitlistStore): a request whose units
//! are short waits in its slot's line (migration 11: `waitlist_entries`, a `waiting` count on
//! the slot row, the entry's key in `hold_keys`) and is offered them, as a hold of the entry's
//! number, in the statement that frees them: a row trigger on `slots` serves the line at the
//! end of every statement that gives a slot units back, changes its capacity or reopens it, in
//! its transaction (a caller's included). Lines are served by priority, then arrival, in
//! strict order, and every statement that takes units for a newcomer requires an empty line on
//! the slot row it locked: a hold on a slot with no line is still one statement.
//! `waitlists.rs` says more.
//!
//! Slots in pools have lines too (migration 12): an entry on such a slot is also in the line
//! of each of its pools (the entries of the pool's selling slots, in line order; a `waiting`
//! count on the pool row, kept with them under its lock). A newcomer on a slot is refused
//! while the line of any of its pools waits, and an entry is offered only when it heads its
//! slot's line and every one of its pools' lines and its units are free in its slot and every
//! pool. The step that frees a pool's units serves the pool's line in its transaction (the
//! trigger, for every statement that gives a slot's units back to it and its pools; an
//! administrative change, after its event, with the trigger deferred: `kernel.rs`); rows that would be taken out of the lock order (the head's slot,
//! its other pools, a pool refill's slots) are taken with `SKIP LOCKED`, never waited for, and
//! the sweeper
//! ([`reclaim_expired`](slot_booking::EventStore::reclaim_expired)) serves every pool line
//! whose head is ready, taking the head's rows in order: see `waitlists.rs` and migration 12.
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
//! * These statements are the core's placement rules fused
//!   ([`place_hold`](slot_booking::store::place_hold),
//!   [`place_booking`](slot_booking::store::place_booking)), which the store also offers
//!   unfused, over its kernel (`place.rs`): [`PostgresStore::without_fast_paths`] places by
//!   them alone, and the conformance suite runs on both.
//! * **Holds of one slot arriving together are placed together** (a flash sale): through the
//!   pool, a hold that finds another hold of its slot being placed by this store waits, and
//!   the next waiting hold to get the slot's turn places every waiting one in one statement,
//!   which locks the slot's row and takes the requests, in arrival order, whose running total
//!   fits the units it locked; a request it does not take runs the fast statement alone, so
//!   every refusal and replay answers as above. `group.rs` says more;
//!   [`PostgresStore::group_commits`] counts the groups.
//! * A cancel is one statement too: it locks the slot row, flips the hold and gives the unit
//!   back. Confirm is a single conditional `UPDATE`.
//! * Availability reads the slots that have not started (skipping closed and removed ones)
//!   and, for each one with units taken, counts its held holds that have expired: holds of
//!   slots that have started, however many were abandoned there, are never read.
//! * The administrative changes (a slot's capacity, its sales, its removal; a pool's
//!   attachments and capacity) follow the core's rules
//!   ([`edit_slot`](slot_booking::store::edit_slot),
//!   [`edit_pool`](slot_booking::store::edit_pool)) over the store's kernel, in a transaction
//!   (a savepoint in the caller's) whose statements each decide nothing: a conditional
//!   `UPDATE` of the slot row (`remaining + (new - capacity) >= 0`; `remaining = capacity`,
//!   which is "no unit held or confirmed" by the capacity invariant), the reclaim and the
//!   update once more when expired holds stand in the way, the event, then the lines served.
//!   A removal keeps the slot and its holds: it sets `removed_at`. `admin.rs` and `kernel.rs`.
//! * The operator's listing is a keyset page through `slots_starts_at_id` (or
//!   `slots_by_resource` for one resource), each listed slot's held units counted through
//!   the partial index of held holds.
//!
//! # Lock paths
//!
//! (The booking statements, which lock several slot rows by id and then hold rows of those
//! slots as the reclaim does, are described in `bookings.rs`; the paragraph below is about the
//! plain hold's and the slot changes'.)
//!
//! On the pool, every statement but the reclaim runs in a transaction of its own and takes at
//! most one slot row, first;
//! hold rows only of that slot (a confirm: only its hold, and nothing else); and, last, the
//! key it inserts into `hold_keys`, a table that is only ever inserted into (but for the key
//! rows of waitlist entries, which only the slot's line serving and leaving update or delete,
//! under the slot row's lock). A statement
//! waiting on a key therefore waits for one that has nothing left to wait for, and no two
//! statements can wait for each other: there is no deadlock to retry. A statement that gives
//! a slot with a waiting line units back serves the line at its end (a trigger, `waitlists.rs`),
//! still on that slot row: then its pools, hold rows of that slot, and new rows only. The slot changes follow
//! the same order: a capacity change, closing or a removal locks its one slot row first, then
//! (when reclaiming) expired holds of that slot only, and inserts no key; so a change racing
//! a hold on the same slot waits for the hold's statement or makes it wait, and the second
//! decides on the slot row as the first left it. Inside a caller's transaction
//! ([`PostgresStore::on`]) the locks of its writes last until it ends, so a transaction that
//! touches several slots holds one while it waits for the next: transactions touching slots
//! in one order (by ascending slot id, say) cannot wait for each other in a cycle, and a
//! deadlock among others is detected by PostgreSQL and fails one write with
//! [`StoreError::unavailable`]. The reclaim
//! ([`reclaim_expired`](slot_booking::EventStore::reclaim_expired)) locks several slot rows,
//! in ascending id order, and only then hold rows of those slots, skipping hold rows another
//! statement has locked: it waits for slot rows only, in one order, and holds no hold row
//! while it waits, so it cannot close a cycle with a hold, a cancel, a slot change or another
//! reclaim. A purge locks only ended holds (which nothing else locks), skipping rows another
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

use std::sync::Arc;

use async_trait::async_trait;
use slot_booking::{
    AvailabilityEntry, AvailabilityQuery, ConsumerId, Decided, EventPosition, Hold, HoldId,
    HoldOutcome, HoldRequest, LeaseHolder, NewSlot, OwnerId, PageRequest, RenewRequest, ResourceId,
    Scope, Slot, SlotCursor, SlotId, SlotLimits, SlotUsage, StoreError, Timestamp,
    TransactionalStore, Transition,
};
use sqlx::pool::PoolConnection;
use sqlx::postgres::types::PgInterval;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Executor, Postgres, Row};

mod admin;
mod bookings;
mod candidates;
mod changes;
mod events;
mod fragments;
mod group;
mod kernel;
mod migrate;
mod place;
mod pool_sql;
mod pools;
mod reads;
mod rows;
mod sql;
mod transaction;
mod waitlists;
mod writes;

pub use changes::{EventCommitFeed, PostgresChangeFeed, CHANGE_CHANNEL_PREFIX};
pub use slot_booking::changes::Following;
/// The sqlx this crate is built on (0.9). Build pools and connection options through this
/// re-export: a pool from another sqlx major version is a different type.
pub use sqlx;

use rows::*;
use sql::Statements;
pub use transaction::PostgresWrites;
use writes::{Conn, Run};

/// The schema [`PostgresStore::new`] and [`PostgresStore::connect`] keep their tables in.
pub const DEFAULT_SCHEMA: &str = "slot_booking";

/// The shortest time between two horizons taken by one store's readers: see
/// [`PostgresStore::with_horizon_interval`].
pub const DEFAULT_HORIZON_INTERVAL: std::time::Duration = std::time::Duration::from_millis(5);

/// Connections in the pool [`PostgresStore::connect`] opens.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// A schema name that is not a plain identifier.
///
/// Accepted: 1 to 63 characters, lowercase ASCII letters, digits and `_`, not starting with a
/// digit, and not starting with `pg_` (reserved by PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid schema name {0:?}: use 1-63 of [a-z0-9_], not starting with a digit or pg_")]
pub struct InvalidSchemaName(pub String);

/// A [`Store`](slot_booking::Store) over a PostgreSQL database, keeping its tables in one schema.
///
/// Cheap to clone: clones share the pool and the prepared SQL text.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    inner: Arc<Inner>,
    /// Statements take their time from the database server, not from the engine.
    database_clock: bool,
    /// Holds and bookings take the store's one-statement paths where they apply.
    fast_paths: bool,
    /// The shortest time between two horizons this store's readers take.
    horizon_interval: std::time::Duration,
}

#[derive(Debug)]
struct Inner {
    schema: String,
    sql: Statements,
    /// The event log's statements, beside the code that runs them (`events.rs`).
    events: events::EventStatements,
    /// The booking statements, beside the code that runs them (`bookings.rs`).
    bookings: bookings::BookingStatements,
    /// The pool statements (`pool_sql.rs`).
    pools: pool_sql::PoolStatements,
    /// The placement's statements, beside the code that runs them (`place.rs`).
    place: place::PlaceStatements,
    /// The waitlist statements, beside the code that runs them (`waitlists.rs`).
    waitlists: waitlists::WaitlistStatements,
    /// The statement of a group of holds of one slot, beside the code that runs it
    /// (`group.rs`).
    groups_sql: group::GroupStatements,
    /// The holds of each slot waiting for a group commit (`group.rs`).
    groups: group::HoldGroups,
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
        let events = events::EventStatements::new(&fragments::quote(&schema));
        let bookings = bookings::BookingStatements::new(&fragments::quote(&schema));
        let pools = pool_sql::PoolStatements::new(&fragments::quote(&schema));
        let place = place::PlaceStatements::new(&fragments::quote(&schema));
        let waitlists = waitlists::WaitlistStatements::new(&fragments::quote(&schema));
        let groups_sql = group::GroupStatements::new(&fragments::quote(&schema));
        PostgresStore {
            pool,
            inner: Arc::new(Inner {
                schema,
                sql,
                events,
                bookings,
                pools,
                place,
                waitlists,
                groups_sql,
                groups: group::HoldGroups::new(group::MAX_GROUP),
            }),
            database_clock: false,
            fast_paths: true,
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

    /// This store, placing every hold and booking and joining and leaving every line by the
    /// core's rules over its kernel alone ([`place_hold`](slot_booking::store::place_hold),
    /// [`place_booking`](slot_booking::store::place_booking),
    /// [`join_line`](slot_booking::store::join_line),
    /// [`leave_line`](slot_booking::store::leave_line)): none of its one-statement holds,
    /// bookings, joins and leaves, its group commit or its locked pick of "any one of these".
    ///
    /// The answers are the same, at more round trips each: the fast paths are the rules fused
    /// into single statements, and the conformance suite runs on a store built this way too,
    /// holding each fast path to the rule it stands for. Useful to compare the two, or to
    /// rule a fast path out when a result surprises.
    pub fn without_fast_paths(mut self) -> Self {
        self.fast_paths = false;
        self
    }

    /// Whether statements decide by the database server's clock
    /// ([`PostgresStore::with_database_clock`]).
    pub fn uses_database_clock(&self) -> bool {
        self.database_clock
    }

    /// How many holds this store (and its clones) has placed together so far: the statements
    /// that decided several concurrent holds of one slot at once (`group.rs`), and how many.
    pub fn group_commits(&self) -> slot_booking::store::GroupStats {
        self.inner.groups.stats()
    }

    /// How many holds of `slot_id` wait in this store (and its clones) for the group commit
    /// of that slot's holds now: they are placed together once the hold being placed ends.
    pub fn holds_waiting(&self, slot_id: slot_booking::SlotId) -> usize {
        self.inner.groups.waiting(&slot_id.get())
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
    /// while idle fails its next call with [`StoreError::unavailable`]. It keeps its
    /// connections open (no idle timeout, no maximum lifetime): with either set, sqlx 0.9.0
    /// runs a reaper task that can spin on one core for good and never let its runtime shut
    /// down (launchbadge/sqlx#3645; it hung a CI run of this crate). Build your own pool and use
    /// [`PostgresStore::new`] for other settings.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(DEFAULT_MAX_CONNECTIONS)
            .idle_timeout(None)
            .max_lifetime(None)
            // sqlx pings every connection it hands out by default: a second round trip on
            // every call. A connection that died is reported as unavailable instead.
            .test_before_acquire(false)
            .connect(url)
            .await
            .map_err(map_err)?;
        Ok(PostgresStore::new(pool))
    }

    /// The store's writes on `conn`, a connection the caller owns, usually inside a transaction
    /// (pass `&mut tx` for a sqlx [`Transaction`](sqlx::Transaction)): the
    /// [`TransactionWrites`](slot_booking::TransactionWrites) that
    /// [`TransactionalStore::writes`] hands an
    /// [`EngineTransaction`](slot_booking::EngineTransaction), whose calls are the way an
    /// application writes inside its transaction. Called directly, they are the store-level
    /// operations, each with the store's contract; sqlx's connections are not safe to stop
    /// midway, so do not drop one of these calls before it answers (an `EngineTransaction`
    /// finishes a dropped call on a task of its own).
    ///
    /// * **Begin the transaction as usual**, in READ COMMITTED (PostgreSQL's default). Every
    ///   decision is a condition on a row the statement locks, re-read at its latest version
    ///   once the lock is granted, which READ COMMITTED does; under REPEATABLE READ or
    ///   SERIALIZABLE a write that meets a row changed by a concurrent transaction fails with
    ///   [`StoreError::unavailable`] (a serialization failure) instead, and the whole
    ///   transaction has to be retried.
    /// * **A refused request leaves the transaction usable and unchanged**, and a hold costs
    ///   one round trip, as on the pool. A failing statement aborts the whole transaction in
    ///   PostgreSQL, so no write fails by design: a hold's statement checks its key before it
    ///   takes anything and refuses (replay, reused key, sold out, closed, started or missing
    ///   slot) by changing and locking nothing, and every other write is a conditional
    ///   statement that refuses by changing nothing. Only a hold on a slot whose expired holds
    ///   might make room runs its reclaiming statements under a savepoint (`SAVEPOINT`, the
    ///   statements, `RELEASE` or `ROLLBACK TO`), undone when they refuse. Two concurrent
    ///   transactions placing holds with the same key are the exception: the one whose insert
    ///   of the key waited for the other fails when the other commits, which aborts its
    ///   transaction, and it gets [`StoreError::unavailable`]; run it again, and the key
    ///   replays or is refused as reused. On a connection outside a transaction block each
    ///   statement commits by itself, as on the pool. An error ([`StoreError`]: a lost
    ///   connection, a deadlock, a timeout) from any write may leave the transaction aborted:
    ///   roll it back.
    /// * **Locks last until the caller commits or rolls back.** A hold, a cancel and every slot
    ///   change lock their slot's row (a confirm or a renewal only its hold's row), and a
    ///   hold's key is reserved: every other hold, cancel or change of that slot, and every
    ///   request with that key, waits until then, so keep such transactions short. A transaction that touches several slots should touch
    ///   them in a consistent order (by ascending slot id, say), as with any rows: two
    ///   transactions taking the same two slots in opposite orders deadlock, and PostgreSQL
    ///   then fails one of them with [`StoreError::unavailable`].
    pub fn on<'c>(&self, conn: &'c mut PgConnection) -> PostgresWrites<'c> {
        PostgresWrites {
            store: self.clone(),
            conn,
        }
    }

    /// The text of the statement that places a booking of several lines, with its parameters
    /// (`$1` slot ids, `$2` quantities, `$3` key, `$4` now or NULL for the database's clock,
    /// `$5` lifetime, `$6` owner): for a benchmark that runs the very same statement through
    /// another client (`pgbench`). Not part of the API.
    #[doc(hidden)]
    pub fn booking_statement(&self) -> &str {
        &self.inner.bookings.create
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

/// A bad name is a permanent failure of the store's set-up, never "unavailable".
impl From<InvalidSchemaName> for slot_booking::StoreError {
    fn from(error: InvalidSchemaName) -> Self {
        slot_booking::StoreError::failed(error)
    }
}
