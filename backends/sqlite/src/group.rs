//! Group commit of the holds' fast path: the `INSERT`s of concurrent holds committed together.
//!
//! A hold that finds a unit is one autocommit `INSERT`, and with one writer at a time most of
//! its cost is the commit (appending the pages it changed to the WAL). So a caller does not
//! queue for the write lock with its statement alone: it goes through the core's
//! [`GroupCommit`] with one lane, whose gate is the store's write queue (`write_gate`, which
//! the store's other writers take too). Whoever gets the write queue takes every request
//! waiting:
//!
//! * one (its own): its `INSERT` runs alone as an autocommit statement, exactly as without
//!   grouping, so a single writer pays nothing for it;
//! * several: one `BEGIN IMMEDIATE` transaction runs each request's `INSERT` in turn (sent to
//!   SQLite together, see [`run_batch`]) and commits, and only then is each caller answered,
//!   with its own statement's outcome. SQLite undoes a statement aborted by a constraint (the
//!   unique key) or by the trigger's `RAISE(ABORT)` and nothing else, so each `INSERT` is
//!   decided by its own rows-affected and key as it would be alone, and the others' stay. A
//!   failed `BEGIN`, `COMMIT` or any other error that may have ended the transaction fails
//!   every caller of the batch: no caller is answered `Created` before the commit succeeded.
//!   The batch runs in a task of its own that holds the write queue until every caller has
//!   its answer, so a caller that goes away (its future dropped) abandons no other caller.
//!
//! A caller whose answer is not `Created` (the key taken, no unit) goes on as without grouping:
//! it reads the key's hold, or reclaims in a write transaction of its own. A caller that went
//! away before its request was taken is skipped: its hold is not placed.

use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use slot_booking::store::GroupCommit;
use slot_booking::StoreError;
use sqlx::sqlite::SqlitePool;
use sqlx::{AssertSqlSafe, Connection, SqliteConnection};

use crate::rows::{hold_from_row, to_micros};
use crate::sql::{Statements, MAX_INSERTS_AT_ONCE};
use crate::{is_unique_violation, map_err};
use slot_booking::{Hold, HoldOutcome, HoldRequest};
use sqlx::sqlite::SqliteRow;
use sqlx::Sqlite;

/// Most requests one transaction takes; the rest wait for the next one. Bounds how long the
/// write lock is held at once (readers of the WAL are never blocked, other writers are).
const MAX_BATCH: usize = 256;

/// The holds' group commit: the core's [`GroupCommit`] with one lane, whose gate is the store's
/// write queue.
pub(crate) type HoldGroups = GroupCommit<(), HoldParams, Insert>;

/// The group commit of a store's holds, behind the store's write queue `gate`.
pub(crate) fn hold_groups(gate: &Arc<tokio::sync::Mutex<()>>) -> HoldGroups {
    GroupCommit::with_gate(MAX_BATCH, Arc::clone(gate))
}

/// The connection the holds' `INSERT`s run on, kept between them; used only by whoever holds
/// the store's write queue.
///
/// A call through the pool costs more than the statement's own round trip to the connection's
/// worker thread: sqlx hands the connection back to the pool in a task of its own, which pings
/// it first. Holds written one after another on one connection of their own skip both. The
/// connection is taken from the pool on first use and detached from it (so `SqlitePool::close`
/// does not wait for it, and the pool may open another for readers in its place). A writer
/// takes it out and puts it back once its statements succeeded: after any error that is not a
/// hold's own answer, or a writer that went away mid-statement, the next hold opens a new one.
/// A pool of a single connection (an in-memory database, whose data lives in that one
/// connection) is used as it is, and so is a closed pool (which then refuses, as before).
#[derive(Debug, Default)]
pub(crate) struct Held(Mutex<Option<SqliteConnection>>);

impl Held {
    /// The writer's own connection, taken out (opened if needed); `None` where the pool is to
    /// be used.
    async fn take(&self, pool: &SqlitePool) -> Result<Option<SqliteConnection>, StoreError> {
        if pool.is_closed() || pool.options().get_max_connections() <= 1 {
            self.slot().take();
            return Ok(None);
        }
        if let Some(conn) = self.slot().take() {
            return Ok(Some(conn));
        }
        // Taken from the pool, so that it is made as the pool makes every connection (its
        // options and its `after_connect`), then detached: the pool no longer counts it, may
        // open another in its place, and does not wait for it when it closes.
        let conn = pool.acquire().await.map_err(map_err)?;
        Ok(Some(conn.detach()))
    }

    /// Puts the connection back for the next writer.
    fn put_back(&self, conn: SqliteConnection) {
        *self.slot() = Some(conn);
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<SqliteConnection>> {
        // Poisoned only by a panic between a take and a put: the option is whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the store needs to write its holds.
pub(crate) struct Writer<'a> {
    pub(crate) pool: &'a SqlitePool,
    pub(crate) sql: &'a Arc<Statements>,
    pub(crate) held: &'a Arc<Held>,
    pub(crate) groups: &'a HoldGroups,
}

/// A hold's `INSERT`, committed alone or together with the holds waiting with it (see the
/// module's docs); its outcome, once committed.
pub(crate) async fn insert(writer: Writer<'_>, params: HoldParams) -> Result<Insert, StoreError> {
    let Writer {
        pool,
        sql,
        held,
        groups,
    } = writer;
    groups
        .submit(
            (),
            params,
            |params| alone(pool, sql, held, params),
            |batch| commit_batch(pool.clone(), Arc::clone(sql), Arc::clone(held), batch),
        )
        .await
}

/// A hold's `INSERT` alone, as an autocommit statement on this caller's own future, exactly as
/// without grouping: a single writer pays nothing for the queue.
async fn alone(
    pool: &SqlitePool,
    sql: &Statements,
    held: &Held,
    params: HoldParams,
) -> Result<Insert, StoreError> {
    let outcome = match held.take(pool).await? {
        Some(mut conn) => {
            let outcome = insert_outcome(run_insert(sql, &mut conn, &params).await);
            // Not one of the hold's answers: the connection may be what failed.
            if outcome.is_ok() {
                held.put_back(conn);
            }
            outcome
        }
        None => insert_outcome(run_insert(sql, pool, &params).await),
    };
    outcome.map_err(map_err)
}

/// Runs `batch` in one `BEGIN IMMEDIATE` transaction: each request's outcome, once committed,
/// or the error that failed them all.
async fn commit_batch(
    pool: SqlitePool,
    sql: Arc<Statements>,
    held: Arc<Held>,
    batch: Vec<HoldParams>,
) -> Result<Vec<Result<Insert, StoreError>>, StoreError> {
    match held.take(&pool).await? {
        Some(mut conn) => {
            let tx = conn.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
            let outcomes = run_batch(tx, &sql, &batch).await?;
            held.put_back(conn);
            Ok(outcomes)
        }
        None => {
            let tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
            run_batch(tx, &sql, &batch).await
        }
    }
}

/// Each request's `INSERT` in `tx` (begun `BEGIN IMMEDIATE`), then the commit: every
/// request's outcome, or the error that failed them all (the transaction rolled back).
///
/// The `INSERT`s go to SQLite in one call, as one text of several statements
/// ([`Statements::insert_holds`]), which sqlx runs in order on the connection's worker thread:
/// one round trip between threads for the batch instead of one per hold. Each statement that
/// stores its hold returns exactly one row, and the first statement that fails ends the call
/// with its error, so the rows are the outcomes of the first statements in order, and the
/// error is the next one's. The statements after it are sent again in another call.
///
/// sqlx runs several statements in one query text for SQLite only, and calls that behaviour
/// deprecated (launchbadge/sqlx#3108, "use `raw_sql`", which takes no arguments). Should a
/// later sqlx refuse it, send each `INSERT` as its own call in the same transaction
/// (`run_insert` on `&mut *tx`): the outcomes are the same, at one round trip to the worker
/// thread per hold instead of one per batch. The tests in `tests/group_commit.rs` check every
/// caller gets the outcome of its own statement (its own key's row) either way.
async fn run_batch(
    mut tx: sqlx::Transaction<'_, sqlx::Sqlite>,
    sql: &Statements,
    batch: &[HoldParams],
) -> Result<Vec<Result<Insert, StoreError>>, StoreError> {
    let mut outcomes: Vec<Result<Insert, StoreError>> = Vec::with_capacity(batch.len());
    while outcomes.len() < batch.len() {
        let rest = &batch[outcomes.len()..];
        let rest = &rest[..rest.len().min(MAX_INSERTS_AT_ONCE)];
        let Some(text) = sql.insert_holds(rest.len()) else {
            return Err(StoreError::failed("no statement text for a batch of holds"));
        };
        let done = outcomes.len();
        let mut query = sqlx::query(AssertSqlSafe(text));
        for p in rest {
            // In the order of the text's anonymous parameters (see `insert_holds`).
            query = query
                .bind(p.slot_id)
                .bind(p.key.as_str())
                .bind(p.expires_at)
                .bind(p.now)
                .bind(p.quantity)
                .bind(p.owner.as_deref());
        }
        let mut rows = query.fetch(&mut *tx);
        let mut failed = None;
        // Stepped to the end of the last statement, as a single insert is (see `run_insert`).
        while let Some(row) = rows.next().await {
            match row {
                Ok(row) => outcomes.push(insert_outcome(Ok(vec![row])).map_err(map_err)),
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        drop(rows);
        if outcomes.len() > done + rest.len()
            || (failed.is_none() && outcomes.len() < done + rest.len())
        {
            // Every statement returns its one row or fails: anything else is a driver this
            // code does not understand, and no outcome of this transaction is trusted.
            return Err(StoreError::failed(
                "a batch of hold inserts returned another number of rows than statements",
            ));
        }
        let Some(error) = failed else {
            continue;
        };
        match insert_outcome(Err(error)) {
            Ok(insert) => outcomes.push(Ok(insert)),
            // Undone by itself, the transaction intact: this caller's answer alone.
            Err(error) if undoes_only_itself(&error) => outcomes.push(Err(map_err(error))),
            // Anything else may have ended the transaction (SQLite rolls back on I/O errors,
            // a full disk, ...): dropping it rolls back what is left, and every caller fails.
            Err(error) => return Err(map_err(error)),
        }
    }
    tx.commit().await.map_err(map_err)?;
    Ok(outcomes)
}

/// Whether `error` leaves the transaction as it was before the statement: a constraint
/// violation (`SQLITE_CONSTRAINT` and its extended codes), which aborts only the statement, or
/// a row the store could not read back after a statement that succeeded.
fn undoes_only_itself(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| code & 0xff == 19),
        sqlx::Error::Decode(_) | sqlx::Error::Protocol(_) => true,
        _ => false,
    }
}

/// What [`insert_hold`] did.
#[derive(Debug)]
pub(crate) enum Insert {
    /// Took a unit and stored the hold.
    Created(Hold),
    /// No unit to take (sold out, started, closed, removed, or no such slot), for a reason the
    /// statement could not settle on its own (see [`Insert::SoldOut`]); nothing changed.
    NoUnit,
    /// No unit to take, and the trigger (migration 6) found inside the same statement that the
    /// key is free, the slot is selling at the request's `now`, the request fits the slot's
    /// capacity and no held hold of the slot has expired: nothing changed, and reclaiming and
    /// retrying would change nothing either.
    SoldOut,
    /// The key is taken; nothing changed.
    KeyTaken,
    /// The key is a waiting entry's (migration 10): nothing changed; the hold is refused as
    /// [`HoldOutcome::KeyReused`] with no hold to show, as the key's holder is no hold.
    KeyWaits,
    /// The slot had the units, but a pool of the slot is short of them, for a reason the
    /// statement could not settle (a held hold expired on one of its slots; migration 9):
    /// nothing changed.
    PoolShort,
}

/// Stores a held hold: one statement, atomic on its own. The `holds_take_a_unit` trigger
/// (migration 6) runs the conditional decrement (`remaining >= quantity` on a slot that is
/// selling) inside it and aborts it when that changes no row, with a message of its own when
/// the refusal is settled as sold out; a unique violation aborts it too, decrement included.
pub(crate) async fn insert_hold<'e, E>(
    sql: &Statements,
    executor: E,
    request: &HoldRequest<'_>,
) -> Result<Insert, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let params = HoldParams::of(request);
    insert_outcome(run_insert(sql, executor, &params).await).map_err(map_err)
}

/// A hold request's parameters, owned: what a group commit carries from the caller that asked
/// to the caller that writes.
#[derive(Debug)]
pub(crate) struct HoldParams {
    slot_id: i64,
    key: String,
    now: i64,
    expires_at: i64,
    quantity: i32,
    owner: Option<String>,
}

impl HoldParams {
    pub(crate) fn of(request: &HoldRequest<'_>) -> Self {
        HoldParams {
            slot_id: request.slot_id.get(),
            key: request.key.as_str().to_owned(),
            now: to_micros(request.now),
            expires_at: to_micros(request.expires_at),
            quantity: request.quantity,
            owner: request.owner.map(|o| o.as_str().to_owned()),
        }
    }
}

/// Runs a hold's `INSERT` (see [`insert_hold`]) and returns the rows it returned (the hold,
/// when it was stored) or its error as sqlx reported it.
pub(crate) async fn run_insert<'e, E>(
    sql: &Statements,
    executor: E,
    params: &HoldParams,
) -> Result<Vec<SqliteRow>, sqlx::Error>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    sqlx::query(AssertSqlSafe(sql.insert_hold.as_str()))
        .bind(params.slot_id)
        .bind(params.key.as_str())
        .bind(params.now)
        .bind(params.expires_at)
        .bind(params.quantity)
        .bind(params.owner.as_deref())
        // `fetch_all`, not `fetch_one`: the statement must be stepped to its end. Reset after its
        // first row, an autocommit write still commits, but SQLite then skips its WAL hook, so the
        // automatic checkpoint never runs and the WAL grows without bound.
        .fetch_all(executor)
        .await
}

/// What a hold's `INSERT` did, from its rows or its error. An error that is none of the
/// answers is handed back as sqlx reported it, for the caller to tell (a group commit keeps its
/// transaction after a constraint error, which undoes only its statement, and not otherwise).
pub(crate) fn insert_outcome(
    inserted: Result<Vec<SqliteRow>, sqlx::Error>,
) -> Result<Insert, sqlx::Error> {
    match inserted {
        Ok(rows) => match rows.first() {
            Some(row) => hold_from_row(row)
                .map(Insert::Created)
                .map_err(|e| sqlx::Error::Decode(e.into())),
            None => Err(sqlx::Error::Protocol(
                "INSERT ... RETURNING returned no row".to_owned(),
            )),
        },
        Err(error) if is_unique_violation(&error) => Ok(Insert::KeyTaken),
        Err(error) if is_key_waiting(&error) => Ok(Insert::KeyWaits),
        Err(error) if is_sold_out(&error) => Ok(Insert::SoldOut),
        Err(error) if is_pool_short(&error) => Ok(Insert::PoolShort),
        Err(error) if is_no_unit(&error) => Ok(Insert::NoUnit),
        Err(error) => Err(error),
    }
}

/// `SQLITE_CONSTRAINT_TRIGGER`: a trigger's `RAISE(ABORT, ...)`, which only
/// `holds_take_a_unit` raises in this schema.
pub(crate) const SQLITE_CONSTRAINT_TRIGGER: &str = "1811";

/// The message of `holds_take_a_unit`'s abort when the refusal is settled inside the statement
/// (migration 6). Both of its aborts carry the same code, so the message tells them apart.
pub(crate) const SOLD_OUT_MESSAGE: &str = "slot_booking: sold out";

/// The message of `holds_take_a_unit`'s abort when a pool of the slot is short and a held hold
/// expired on one of its slots (migration 9): reclaiming them may make it fit.
pub(crate) const POOL_SHORT_MESSAGE: &str = "slot_booking: no unit in a pool";

/// The message of `holds_take_a_unit`'s abort when a waiting entry has the hold's key
/// (migration 10).
pub(crate) const KEY_WAITS_MESSAGE: &str = "slot_booking: key of a waiting entry";

/// The `holds_take_a_unit` trigger's abort for a key a waiting entry has (migration 10).
pub(crate) fn is_key_waiting(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db)
        if db.code().as_deref() == Some(SQLITE_CONSTRAINT_TRIGGER)
            && db.message() == KEY_WAITS_MESSAGE)
}

/// The `holds_take_a_unit` trigger's abort for a short pool (migration 9).
pub(crate) fn is_pool_short(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db)
        if db.code().as_deref() == Some(SQLITE_CONSTRAINT_TRIGGER)
            && db.message() == POOL_SHORT_MESSAGE)
}

/// The `holds_take_a_unit` trigger's abort, any message.
pub(crate) fn is_no_unit(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(SQLITE_CONSTRAINT_TRIGGER))
}

/// The `holds_take_a_unit` trigger's abort for a refusal it settled: sold out (migration 6).
pub(crate) fn is_sold_out(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db)
        if db.code().as_deref() == Some(SQLITE_CONSTRAINT_TRIGGER)
            && db.message() == SOLD_OUT_MESSAGE)
}

/// The answer to an insert the trigger aborted as sold out ([`Insert::SoldOut`]). The facts it
/// checked inside the statement — no hold has the key, the slot exists, is not removed, not
/// closed and not started at `now`, the quantity fits the capacity — are those for which
/// [`HoldOutcome::refused`] answers [`HoldOutcome::SoldOut`] (with no key holder and those slot
/// limits), and with no expired held hold the reclaim-and-retry of the slow path would change
/// nothing: so this is the answer the slow path would give, without its statements.
pub(crate) fn sold_out() -> HoldOutcome {
    HoldOutcome::SoldOut
}
