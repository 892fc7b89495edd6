//! MariaDB and MySQL store for [`slot_booking`], built on [sqlx](https://docs.rs/sqlx), and
//! tested on a three-node Galera cluster as on a single server (MariaDB 10.6 or later: the
//! store uses `SKIP LOCKED`, and its migrations `IF NOT EXISTS` forms MySQL 8 lacks).
//!
//! [`MySqlStore`] implements [`Store`](slot_booking::Store),
//! [`EventStore`](slot_booking::EventStore), [`BookingStore`](slot_booking::BookingStore),
//! [`PoolStore`](slot_booking::PoolStore), [`WaitlistStore`](slot_booking::WaitlistStore) and
//! [`TransactionalStore`](slot_booking::TransactionalStore) as a thin translation to SQL: every outcome is
//! decided by the rows a conditional write matched or by a unique constraint, never by a read
//! made before the write — and only once the transaction's commit has succeeded.
//!
//! ```no_run
//! # async fn demo() -> Result<(), slot_booking::StoreError> {
//! use slot_booking::BookingEngine;
//! use slot_booking_mysql::MySqlStore;
//!
//! let store = MySqlStore::connect("mysql://root@127.0.0.1:3306/app").await?;
//! store.migrate().await?;
//! let engine = BookingEngine::new(store);
//! # Ok(()) }
//! ```
//!
//! # Transactions, commits and conflicts
//!
//! Every write is one transaction on a connection of the pool, run by READ COMMITTED
//! connections ([`MySqlStore::connect`] sets it; on a pool of your own it is advised, not
//! required), and answered only after its `COMMIT` succeeded. On a Galera cluster a
//! transaction is certified when it commits, and one that wrote rows another node's committed
//! transaction wrote first fails there with error 1213, however many rows its statements
//! reported: a store that answered from rows affected before the commit would oversell. So
//! each write is a *step* that decides from the rows its statements matched, then commits or
//! rolls back; a step that lost a conflict (1213, 1205, a Galera node not ready, 1047 and
//! 1180, its savepoint gone with its aborted transaction, 1305, or its transaction found
//! ended under it) runs again whole in a new transaction, up to [`RetryPolicy::attempts`]
//! times with jittered exponential pauses, and answers [`StoreError::unavailable`] when they
//! run out. [`MySqlStore::conflicts_retried`] counts the retries.
//!
//! **No step commits in pieces.** On Galera a transaction aborted for another node's commit
//! is not always reported to the statement that follows (MariaDB 10.11, galera-4 26.4), and
//! every statement after it would run and commit on its own. While a step runs, its session's
//! default access mode is read-only (the step's own transaction is read-write), so such a
//! write fails (1792) instead of committing; before committing, the step checks that its
//! transaction is still open (`@@in_transaction`, which is why the store needs MariaDB) in
//! the round trip that restores the read-write default. Either finding is a conflict.
//!
//! **Lock order.** Slots' rows by ascending id, then pools' rows by ascending id, then holds
//! (a cancel reads the hold's slot id, which never changes, and locks the slot first), so no
//! two writes wait for each other in turn.
//!
//! **Causal reads on Galera.** [`MySqlStore::connect`] sets `wsrep_sync_wait = 15` on a
//! Galera node's connections ([`MySqlStore::pool_options`]), so a client whose next request
//! lands on another node finds its own writes there.
//!
//! * **A hold** is the conditional decrement `UPDATE slots SET remaining = remaining - q
//!   WHERE id = ? AND remaining >= q AND` the slot sells, then the hold's `INSERT` (the key's
//!   unique constraint refuses a second hold with it: everything rolls back and the key's
//!   hold, read after the rollback, answers) and its event. When the decrement matches
//!   nothing, a key in use answers first; then the slot's expired holds are reclaimed (its row
//!   locked) and the decrement runs once more; a refusal rolls everything back and the slot's
//!   limits say why ([`HoldOutcome::refused`](slot_booking::HoldOutcome::refused)).
//! * **Confirm, cancel and renew** are one conditional `UPDATE` of the hold (of every line of
//!   its booking, all or none) each; a cancel gives the units back to the slots and their
//!   pools in the same transaction, and serves their waitlists.
//! * **Rows affected are found rows.** sqlx's MySQL driver always connects with
//!   `CLIENT_FOUND_ROWS`, so an `UPDATE` reports the rows its `WHERE` matched, changed or not.
//!   Every conditional update states its whole condition, "the value moves" included (a
//!   renewal, a capacity, closing), so a matched row is a changed row; the store's tests pin
//!   this down.
//!
//! # Events
//!
//! Every write appends its events in its own transaction, unplaced; readers place committed
//! events in one order under a lock of the log's one row, so a consumer reading by position
//! never skips one, whichever node wrote it and whatever order transactions committed in.
//! Positions are `0_<n>`; see the `events` module's docs. There is no `NOTIFY`:
//! [`MySqlStore::follow_changes`] reads the log every [`DEFAULT_POLL_INTERVAL`].
//!
//! # Storage
//!
//! Tables `slot_booking_slots`, `slot_booking_holds`, `slot_booking_events`,
//! `slot_booking_event_log` and `slot_booking_event_consumers` (another prefix with
//! [`MySqlStore::with_table_prefix`]), InnoDB, made by the embedded migrations
//! (`migrations/*.sql`, recorded in `<prefix>migrations`). Timestamps are `BIGINT`
//! microseconds since the Unix epoch; keys and identifiers `ascii_bin`, compared byte for byte.
//! CHECK constraints back the capacity invariant (`0 <= remaining <= capacity`; MariaDB
//! 10.2+ and MySQL 8.0.16+ enforce them).
//!
//! # sqlx and TLS
//!
//! Built on sqlx 0.9, re-exported as [`slot_booking_mysql::sqlx`](crate::sqlx): build the
//! pool you pass to [`MySqlStore::new`] with it. Without a feature the store connects without
//! TLS; `tls-rustls` (Mozilla roots) and `tls-rustls-native-roots` (the system's) add it,
//! chosen in the URL with `ssl-mode=required`, `verify_ca` or `verify_identity`.
//!
//! # Writes inside the caller's transaction
//!
//! [`MySqlStore::on`] runs the store's writes on a connection the caller owns, usually inside
//! its own transaction (and [`TransactionalStore`](slot_booking::TransactionalStore) opens one
//! on the pool): the same steps as the store's own, each under a `SAVEPOINT` instead of a
//! transaction of its own, so a hold or booking commits or rolls back with the application's
//! rows. A conflict there is not retried: it ends the caller's whole transaction, and is
//! answered [`StoreError::unavailable`] for the caller to run its transaction again.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use slot_booking::StoreError;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::Executor;

mod admin;
mod bookings;
mod changes;
mod conflict;
mod events;
mod fragments;
mod guard;
mod kernel;
mod lines;
mod migrate;
mod place;
mod pool_sql;
mod pooled;
mod pools;
mod reads;
mod retry;
mod rows;
mod run;
mod serve;
mod sql;
mod transaction;
mod units;
mod waitlist_sql;
mod waitlists;
mod writes;

pub use changes::EventLogFeed;
pub use conflict::Conflict;
pub use retry::{RetryPolicy, DEFAULT_RETRY_POLICY};
pub use slot_booking::changes::{Following, DEFAULT_POLL_INTERVAL};
pub use slot_booking::store::{InvalidTablePrefix, DEFAULT_TABLE_PREFIX};
/// The sqlx this crate is built on (0.9). Build pools and connection options through this
/// re-export: a pool from another sqlx major version is a different type.
pub use sqlx;
pub use transaction::MySqlWrites;

use fragments::RESERVED_PREFIX;
// The administrative writes of `Run` (forwarded below) follow from its `edit_slot`.
use slot_booking::store::TablePrefix;
use slot_booking::store::{EditPools as _, EditSlots as _};
use sql::Statements;

/// Connections in the pool [`MySqlStore::connect`] opens.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16;

/// A [`Store`](slot_booking::Store) over a MariaDB or MySQL database (a Galera cluster's node
/// included).
///
/// Cheap to clone: clones share the pool.
#[derive(Debug, Clone)]
pub struct MySqlStore {
    pool: MySqlPool,
    prefix: TablePrefix,
    sql: Arc<Statements>,
    retry: RetryPolicy,
    /// Conflicts retried by this store and its clones.
    retried: Arc<AtomicU64>,
}

impl MySqlStore {
    /// A store over an existing pool, with its tables named with [`DEFAULT_TABLE_PREFIX`].
    /// Run [`MySqlStore::migrate`] before use. READ COMMITTED connections are advised (the
    /// pool of [`MySqlStore::connect`] has them): under REPEATABLE READ every decision is the
    /// same, but InnoDB's gap locks make more deadlocks to retry.
    pub fn new(pool: MySqlPool) -> Self {
        let prefix = TablePrefix::default();
        MySqlStore {
            pool,
            sql: Arc::new(Statements::new(&prefix)),
            prefix,
            retry: RetryPolicy::default(),
            retried: Arc::default(),
        }
    }

    /// Opens a pool of [`DEFAULT_MAX_CONNECTIONS`] READ COMMITTED connections on `url` (for
    /// example `mysql://root@127.0.0.1:3306/app`) and returns a store over it. Does not
    /// migrate: call [`MySqlStore::migrate`].
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = MySqlConnectOptions::from_str(url).map_err(map_err)?;
        let pool = Self::pool_options()
            .connect_with(options)
            .await
            .map_err(map_err)?;
        Ok(MySqlStore::new(pool))
    }

    /// The pool settings [`MySqlStore::connect`] uses: [`DEFAULT_MAX_CONNECTIONS`]
    /// connections, each set when it opens to READ COMMITTED and, on a Galera node
    /// (`wsrep_on`), to causal reads and writes (`wsrep_sync_wait = 15`): a statement first
    /// waits until the node has applied every transaction the cluster committed before it, so
    /// a client whose next request lands on another node (a confirm after its hold, a read
    /// after its cancel) finds its own writes there. The connections stay open (no idle
    /// timeout, no maximum lifetime): with either set, sqlx 0.9.0 runs a reaper task that can
    /// spin on one core for good and never let its runtime shut down (launchbadge/sqlx#3645;
    /// it hung a CI run of this crate).
    pub fn pool_options() -> MySqlPoolOptions {
        MySqlPoolOptions::new()
            .max_connections(DEFAULT_MAX_CONNECTIONS)
            .idle_timeout(None)
            .max_lifetime(None)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    // MySQL has no such variable: not a Galera node.
                    let galera: Result<Option<i64>, _> =
                        sqlx::query_scalar("SELECT CAST(@@GLOBAL.wsrep_on AS SIGNED)")
                            .fetch_optional(&mut *conn)
                            .await;
                    if matches!(galera, Ok(Some(1))) {
                        conn.execute("SET SESSION wsrep_sync_wait = 15").await?;
                    }
                    Ok(())
                })
            })
    }

    /// This store with its tables named `<prefix>slots`, `<prefix>holds`, … and
    /// `<prefix>migrations`. See [`InvalidTablePrefix`] for the prefixes accepted. Stores with
    /// different prefixes in one database are independent.
    pub fn with_table_prefix(mut self, prefix: &str) -> Result<Self, InvalidTablePrefix> {
        self.prefix = TablePrefix::new(prefix, RESERVED_PREFIX)?;
        self.sql = Arc::new(Statements::new(&self.prefix));
        Ok(self)
    }

    /// This store retrying commit-time conflicts as `policy` says (at least one attempt).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = RetryPolicy {
            attempts: policy.attempts.max(1),
            ..policy
        };
        self
    }

    /// How this store retries commit-time conflicts.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// How many commit-time conflicts this store (and its clones) has retried so far: for
    /// monitoring, and for tests of a cluster's load.
    pub fn conflicts_retried(&self) -> u64 {
        self.retried.load(Ordering::Relaxed)
    }

    pub(crate) fn retried(&self) -> &AtomicU64 {
        &self.retried
    }

    /// The prefix of this store's table names.
    pub fn table_prefix(&self) -> &str {
        self.prefix.as_str()
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Applies the embedded migrations that this database has not recorded yet. Idempotent;
    /// safe to run from several processes, and on several nodes of a cluster, at once.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        migrate::run(&self.pool, &self.prefix).await
    }
}

/// Maps a sqlx error to a [`StoreError`]: a commit-time conflict ([`Conflict`]) and anything
/// that may go away on retry (pool exhausted or closed, I/O, TLS, a crashed worker) is
/// [`StoreError::unavailable`]; everything else — a constraint, a syntax error, a missing
/// table — is [`StoreError::failed`].
pub(crate) fn map_err(error: sqlx::Error) -> StoreError {
    let error = match conflict::conflict(error) {
        Ok(conflict) => return StoreError::unavailable(conflict),
        Err(error) => error,
    };
    match error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => StoreError::unavailable(error),
        _ => StoreError::failed(error),
    }
}

// Every operation of the store's own, through the one write path (`run.rs`).
slot_booking::forward_store!(
    impl[] HoldStore, BookingStore, PoolStore, WaitlistStore, SlotAdmin, HoldQueries for MySqlStore,
    |this| this.run()
);
