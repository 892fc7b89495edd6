//! Waitlists ([`WaitlistStore`](slot_booking::WaitlistStore)): a slot's line of requests
//! waiting for its units, served by priority, then arrival, in strict order, in the step that
//! frees the units. Their statements, beside the code that runs them on the one write path
//! ([`Run`]).
//!
//! # Storage (migration 11)
//!
//! * `waitlist_entries`: one row per waiting entry, its id drawn from the holds' id sequence
//!   (the hold offered to it takes the same number), read in line order through
//!   `waitlist_entries_line` (`slot_id, priority DESC, id`).
//! * `slots.waiting`: how many entries wait in the slot's line, written with the line under
//!   the slot row's lock. Every statement that takes units for a newcomer requires
//!   `waiting = 0` on the row it locked, in its own conditional write (the hold's decrement,
//!   the reclaiming hold, a booking's lines, the "any one of these" pick): nobody jumps the
//!   line, and a hold on a slot with no line is still one statement. Availability lists a slot
//!   whose line waits with no unit.
//! * Keys: an entry's key is a row of `hold_keys` naming the entry (`entry_id`) while it waits,
//!   so a hold, a booking or another entry with that key is refused by the same unique key as
//!   between holds; serving the entry makes the row name the offer, leaving deletes it.
//!
//! # Serving
//!
//! `serve_waitlist(slot, now)` (a PL/pgSQL function of the migrations) serves a line: on the
//! slot row it locks (then its pools by id, then hold rows of the slot), while the slot sells
//! and the head's whole quantity fits (reclaiming the slot's expired holds when only that
//! makes it fit), the head becomes its offer (a hold logged `hold_placed` then
//! `waitlist_offered`). A row trigger on `slots` (`AFTER UPDATE`, when the line is not empty
//! or the slot has pools, and `remaining` went up, the capacity changed or sales reopened)
//! calls it at the end of the
//! statement that freed the units, whichever it is (a cancel of a hold or of a booking, every
//! reclaim of expired holds, a capacity change, reopening), in that statement's transaction
//! and at that statement's instant (the one its events carry): no write path of the store
//! needs to know about lines. A join and a leave call it themselves, in one transaction with
//! their own statement: they move no unit.
//!
//! # Pools (migration 12)
//!
//! An entry on a slot that draws from pools is also in the line of each of its pools: the
//! waiting entries of the pool's slots that are selling, in line order (`pool_line_head`
//! reads its head). `pools.waiting` counts the entries of the pool's slots (selling or not),
//! written under the pool row's lock by the join, the leave, the offer, attach and detach, so
//! a statement that holds a pool row reads the pool's line as it stands (a VOLATILE function
//! reads afresh, after the lock). Newcomers are refused while the line of any pool of their
//! slot waits (the reclaiming hold statement and a booking's, on the pool rows they locked;
//! the "any one of these" pick passes such a slot over; availability lists it with 0).
//!
//! Serving a set of lines (`serve_lines`) offers any head that is ready (`offer_if_ready`:
//! the slot sells, the entry heads its slot's line and every pool's line of the slot, the slot
//! has its units with its expired holds counted free, and every pool has them with its slots'
//! expired holds counted free; those that make it fit are given back first, the slot's, then
//! a short pool's slots': the pool refill) until none is. `serve_waitlist(slot)` serves the
//! slot's line and its pools' lines: the trigger runs it for every statement that gives a slot
//! (and so its pools) units back, changes its capacity, opens or closes its sales or removes
//! it, and a join and a leave run it themselves. A pool capacity change that changed the
//! capacity serves the pool's line, and a detach serves the pool's line and the slot's, each
//! in one transaction with its statement, after reading the change's answer (`pools.rs`). The
//! sweeper (`reclaim_expired`) then serves each pool with entries (`serve_pool_head`, a
//! transaction of its own per pool and round). Reclaims a write makes only for itself (pool
//! refills, an administrative change's) and serving's own writes serve nothing more: the
//! trigger stands aside while `slot_booking.defer_serving` is on in the transaction.
//!
//! # Lock paths
//!
//! A join and a leave lock the slot row first (the leave after reading which slot, at its
//! snapshot), then its pools' rows by id, then write the entry and the key, then serve. The
//! key's row is inserted (join) or deleted (leave) after the slot row is locked: a hold
//! inserting that key waits for the transaction, which waits for nothing the hold holds.
//!
//! Serving waits only in the global order (slots by id, then pools by id): `serve_waitlist`
//! locks its slot (held already by its caller, or the first lock of the sweeper's
//! transaction) and then that slot's pools, and `offer_if_ready` takes every other row (the
//! head's slot, that slot's pools) with `FOR NO KEY UPDATE SKIP LOCKED`, which never waits
//! and never skips a row this transaction holds. A head whose rows another transaction holds
//! is not offered by this step; newcomers stay refused behind it, and it is offered by the next
//! step that frees units of its slot or pools, or by the sweeper's pass, which takes the head's
//! slot row and then its pools, waiting, in a transaction that holds nothing else.

use slot_booking::store::{join_key_answer, join_line, leave_line, Enqueued, Joining, WaitKernel};
use slot_booking::{EntryId, JoinOutcome, JoinRequest, WaitlistEntry};
use sqlx::Connection;

use super::*;
use crate::fragments::{now, H_COLUMNS};
use crate::kernel::Kernel;
use crate::rows::Cols;
use crate::writes::slot_limits;

/// The columns [`entry_from_row`] reads, of the entries aliased `e`.
const ENTRY_COLUMNS: &str = "e.id AS entry_id, e.slot_id AS entry_slot_id, \
                             e.quantity AS entry_quantity, e.owner AS entry_owner, \
                             e.priority AS entry_priority, e.joined_at AS entry_joined_at, \
                             e.offer_micros AS entry_offer_micros";

/// The waitlist statements, with table names qualified by the schema.
///
/// Parameters of `join`: `$1` slot id, `$2` key, `$3` now (nullable), `$4` the offer window in
/// microseconds, `$5` quantity, `$6` owner, `$7` priority. Of `serve`: `$1` slot id, `$2` the
/// instant. Of `entry`: `$1` entry id, `$2` now. Of `by_key`: `$1` key, `$2` now. Of
/// `leave`: `$1` entry id, `$2` now, `$3` "any" and `$4` owner (the caller's scope). Of
/// `key_waits`: `$1` key.
#[derive(Debug)]
pub(crate) struct WaitlistStatements {
    join: String,
    serve: String,
    entry: String,
    entry_in_scope: String,
    pub(crate) by_key: String,
    leave: String,
    join_limits: String,
    key_waits: String,
}

impl WaitlistStatements {
    pub(crate) fn new(s: &str) -> Self {
        let (now2, now3) = (now(2), now(3));
        // The entry `e`'s place in line: 1 + the entries of its slot served before it.
        let position = format!(
            "(SELECT count(*) FROM {s}.waitlist_entries o \
              WHERE o.slot_id = e.slot_id \
                AND (o.priority > e.priority OR (o.priority = e.priority AND o.id < e.id))) \
             + 1 AS position"
        );
        WaitlistStatements {
            // One statement: lock the slot row (`sl`), then its pools' rows by id (`pl`); only
            // if the slot is selling and the quantity within its capacity and every pool's
            // (decided on the locked rows), insert the entry with an id of the holds'
            // sequence, count it on the slot row and on each pool row (from the locked values)
            // and, last, its key: a key in use fails the whole statement. One row: the entry's
            // id if joined, else what the refusal needs (the slot's limits, its pools' least
            // capacity, whether the key is taken, read at the snapshot).
            join: format!(
                "WITH sl AS ( \
                     SELECT id, starts_at, capacity, closed, removed_at, pools, waiting \
                     FROM {s}.slots WHERE id = $1 FOR NO KEY UPDATE), \
                 pl AS ( \
                     SELECT p.id, p.capacity, p.waiting FROM {s}.pools p \
                     WHERE p.id = ANY(coalesce((SELECT pools FROM sl), '{{}}'::int8[])) \
                     ORDER BY p.id FOR NO KEY UPDATE), \
                 pc AS (SELECT min(capacity) AS least FROM pl), \
                 ok AS ( \
                     SELECT id, waiting FROM sl, pc \
                     WHERE starts_at > {now3} AND NOT closed AND removed_at IS NULL \
                       AND $5 <= capacity AND $5 <= coalesce(pc.least, $5)), \
                 ins AS ( \
                     INSERT INTO {s}.waitlist_entries \
                         (id, slot_id, idempotency_key, quantity, owner, priority, joined_at, \
                          offer_micros) \
                     SELECT nextval(pg_get_serial_sequence('{s}.holds', 'id')), ok.id, $2, $5, \
                            $6, $7, {now3}, $4 \
                     FROM ok \
                     RETURNING id), \
                 up AS ( \
                     UPDATE {s}.slots x SET waiting = ok.waiting + 1 FROM ok, ins \
                     WHERE x.id = ok.id RETURNING x.id), \
                 pup AS ( \
                     UPDATE {s}.pools x SET waiting = pl.waiting + 1 FROM pl, ins \
                     WHERE x.id = pl.id RETURNING x.id), \
                 k AS ( \
                     INSERT INTO {s}.hold_keys (idempotency_key, entry_id) \
                     SELECT $2, id FROM ins) \
                 SELECT {now3} AS decided_at, (SELECT id FROM ins) AS joined, \
                        sl.starts_at AS slot_starts_at, sl.capacity AS slot_capacity, \
                        sl.closed AS slot_closed, sl.removed_at AS slot_removed_at, \
                        (SELECT least FROM pc) AS pool_capacity, \
                        EXISTS (SELECT 1 FROM {s}.hold_keys hk WHERE hk.idempotency_key = $2) \
                            AS key_taken \
                 FROM (SELECT 1) AS one LEFT JOIN sl ON true"
            ),
            serve: format!("SELECT {s}.serve_waitlist($1, $2) AS offered"),
            // The entry, if it waits, with its place in line, and the hold of the same number,
            // if it was offered. Always one row.
            entry: format!(
                "SELECT {now2} AS decided_at, {ENTRY_COLUMNS}, {position}, {H_COLUMNS} \
                 FROM (SELECT 1) AS one \
                 LEFT JOIN {s}.waitlist_entries e ON e.id = $1 \
                 LEFT JOIN {s}.holds h ON h.id = $1"
            ),
            // The entry if it waits in the caller's scope (`$3` any, `$4` owner), with its place
            // in line: the scope is part of the join, so an entry of another owner costs what
            // an unknown id costs (no place counted, no row sent).
            entry_in_scope: format!(
                "SELECT {now2} AS decided_at, {ENTRY_COLUMNS}, {position} \
                 FROM (SELECT 1) AS one \
                 LEFT JOIN {s}.waitlist_entries e ON e.id = $1 \
                      AND ($3 OR e.owner IS NOT DISTINCT FROM $4)"
            ),
            // Whom the key belongs to: a waiting entry (with its place), or a hold (its id).
            by_key: format!(
                "WITH k AS ( \
                     SELECT hold_id, entry_id FROM {s}.hold_keys WHERE idempotency_key = $1) \
                 SELECT {now2} AS decided_at, EXISTS (SELECT 1 FROM k) AS key_found, \
                        (SELECT hold_id FROM k) AS key_hold_id, {ENTRY_COLUMNS}, {position} \
                 FROM (SELECT 1) AS one \
                 LEFT JOIN {s}.waitlist_entries e ON e.id = (SELECT entry_id FROM k)"
            ),
            // The slot of the entry in scope (at the snapshot: only which row to lock), locked,
            // then its pools by id; the entry deleted if it still waits (its latest version:
            // an entry offered since is gone), its key with it, and the counts of the slot's
            // line and of its pools' lines moved on the locked values.
            leave: format!(
                "WITH f AS ( \
                     SELECT slot_id FROM {s}.waitlist_entries \
                     WHERE id = $1 AND ($3 OR owner IS NOT DISTINCT FROM $4)), \
                 sl AS ( \
                     SELECT id, waiting, pools FROM {s}.slots \
                     WHERE id IN (SELECT slot_id FROM f) FOR NO KEY UPDATE), \
                 pl AS ( \
                     SELECT p.id, p.waiting FROM {s}.pools p \
                     WHERE p.id = ANY(coalesce((SELECT pools FROM sl), '{{}}'::int8[])) \
                     ORDER BY p.id FOR NO KEY UPDATE), \
                 d AS ( \
                     DELETE FROM {s}.waitlist_entries w USING sl \
                     WHERE w.id = $1 AND w.slot_id = sl.id \
                       AND ($3 OR w.owner IS NOT DISTINCT FROM $4) \
                     RETURNING w.*), \
                 dk AS ( \
                     DELETE FROM {s}.hold_keys k USING d \
                     WHERE k.idempotency_key = d.idempotency_key AND k.entry_id = d.id), \
                 up AS ( \
                     UPDATE {s}.slots x SET waiting = sl.waiting - 1 FROM sl, d \
                     WHERE x.id = sl.id RETURNING x.id), \
                 pup AS ( \
                     UPDATE {s}.pools x SET waiting = pl.waiting - 1 FROM pl, d \
                     WHERE x.id = pl.id RETURNING x.id) \
                 SELECT {now2} AS decided_at, {ENTRY_COLUMNS} \
                 FROM (SELECT 1) AS one LEFT JOIN d e ON true"
            ),
            // Slot `$1`'s limits, with the least capacity of its pools (`pool_capacity`).
            join_limits: format!(
                "SELECT sl.starts_at, sl.capacity, sl.closed, sl.removed_at, \
                        (SELECT min(p.capacity) FROM {s}.pools p WHERE p.id = ANY(sl.pools))::int8 \
                            AS pool_capacity \
                 FROM {s}.slots sl WHERE sl.id = $1"
            ),
            key_waits: format!(
                "SELECT EXISTS (SELECT 1 FROM {s}.hold_keys \
                                WHERE idempotency_key = $1 AND entry_id IS NOT NULL) AS waits"
            ),
        }
    }
}

/// The join statement for `request` at `now` (NULL: the database's clock).
fn join_query<'q>(
    statement: &'q str,
    request: &'q JoinRequest<'_>,
    now: Option<Timestamp>,
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    let hold = &request.hold;
    let offer_micros = (hold.expires_at - hold.now)
        .num_microseconds()
        .unwrap_or(i64::MAX);
    sqlx::query(AssertSqlSafe(statement))
        .bind(hold.slot_id.get())
        .bind(hold.key.as_str())
        .bind(now)
        .bind(offer_micros)
        .bind(hold.quantity)
        .bind(hold.owner.map(OwnerId::as_str))
        .bind(request.priority)
}

/// The entry of a row with [`ENTRY_COLUMNS`] (`None` when they are NULL).
fn entry_from_row(row: &PgRow) -> Result<Option<WaitlistEntry>, StoreError> {
    if row
        .try_get::<Option<i64>, _>("entry_id")
        .map_err(map_err)?
        .is_none()
    {
        return Ok(None);
    }
    let columns = Cols {
        row,
        prefix: "entry_",
    };
    slot_booking::store::entry_of(&columns).map(Some)
}

/// The waiting entry of a row with [`ENTRY_COLUMNS`] and `position`, with its place in line.
pub(crate) fn placed_entry(row: &PgRow) -> Result<Option<(WaitlistEntry, u32)>, StoreError> {
    let Some(entry) = entry_from_row(row)? else {
        return Ok(None);
    };
    let position: i64 = row.try_get("position").map_err(map_err)?;
    Ok(Some((entry, u32::try_from(position).unwrap_or(u32::MAX))))
}

impl Run<'_> {
    fn waitlist_sql(&self) -> Arc<Inner> {
        Arc::clone(&self.store.inner)
    }

    /// Joins the line: the join statement and, when it inserted the entry, the line served and
    /// the answer read, in one transaction (a savepoint inside the caller's). A key in use
    /// answers its replay or `KeyReused`; a key freed between the failed statement and the read
    /// (left, purged) lets the join be tried again.
    pub(crate) async fn join_waitlist(
        &mut self,
        request: JoinRequest<'_>,
    ) -> Result<Decided<JoinOutcome>, StoreError> {
        if !self.store.fast_paths {
            return self.join_composed(&request).await;
        }
        let inner = self.waitlist_sql();
        let sql = &inner.waitlists;
        let hold = &request.hold;
        let now = self.now_param(hold.now);
        for _ in 0..3 {
            let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
            let joined = join_query(&sql.join, &request, now)
                .fetch_one(&mut *tx)
                .await;
            let row = match joined {
                Ok(row) => row,
                Err(error) if is_unique_violation(&error) => {
                    tx.rollback().await.map_err(map_err)?;
                    match self.key_answer(&request).await? {
                        Some(answer) => return Ok(answer),
                        None => continue,
                    }
                }
                Err(error) => return Err(map_err(error)),
            };
            let at: Timestamp = row.try_get("decided_at").map_err(map_err)?;
            let Some(entry_id) = row.try_get::<Option<i64>, _>("joined").map_err(map_err)? else {
                // Nothing was written.
                tx.rollback().await.map_err(map_err)?;
                if row.try_get::<bool, _>("key_taken").map_err(map_err)? {
                    match self.key_answer(&request).await? {
                        Some(answer) => return Ok(answer),
                        None => continue,
                    }
                }
                let request_at = HoldRequest { now: at, ..*hold };
                let refused = HoldOutcome::refused(&request_at, None, slot_limits(&row)?);
                let pool_capacity: Option<i32> = row.try_get("pool_capacity").map_err(map_err)?;
                let outcome = match (refused, pool_capacity) {
                    // The slot would take it, one of its pools is too small.
                    (HoldOutcome::SoldOut, Some(capacity)) if hold.quantity > capacity => {
                        HoldOutcome::ExceedsCapacity { capacity }
                    }
                    (other, _) => other,
                };
                return Ok(Decided::new(at, JoinOutcome::Refused(outcome)));
            };
            sqlx::query(AssertSqlSafe(sql.serve.as_str()))
                .bind(hold.slot_id.get())
                .bind(at)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            let read = sqlx::query(AssertSqlSafe(sql.entry.as_str()))
                .bind(entry_id)
                .bind(at)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
            let outcome = match (optional_hold(&read)?, placed_entry(&read)?) {
                (Some(hold), _) => JoinOutcome::Held {
                    hold,
                    replayed: false,
                },
                (None, Some((entry, position))) => JoinOutcome::Waiting {
                    entry,
                    position,
                    replayed: false,
                },
                (None, None) => {
                    return Err(StoreError::failed(
                        "a joined entry neither waits nor was offered",
                    ))
                }
            };
            tx.commit().await.map_err(map_err)?;
            return Ok(Decided::new(at, outcome));
        }
        Err(StoreError::unavailable(
            "the waitlist entry's key was taken and freed again, three times",
        ))
    }

    /// The answer to a join whose key is taken, as read now: the entry of this same request
    /// (a replay, with its place now) or another request's (`KeyReused`), or the hold or
    /// booking the key belongs to, as a hold request meeting it would be answered (a replay
    /// only of the offer or hold of the same request). `None` when the key is free again.
    async fn key_answer(
        &mut self,
        request: &JoinRequest<'_>,
    ) -> Result<Option<Decided<JoinOutcome>>, StoreError> {
        let inner = self.waitlist_sql();
        let hold = &request.hold;
        let row = sqlx::query(AssertSqlSafe(inner.waitlists.by_key.as_str()))
            .bind(hold.key.as_str())
            .bind(self.now_param(hold.now))
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let at: Timestamp = row.try_get("decided_at").map_err(map_err)?;
        if let Some((entry, position)) = placed_entry(&row)? {
            let outcome = JoinOutcome::key_waits(request, entry, position, at);
            return Ok(Some(Decided::new(at, outcome)));
        }
        if !row.try_get::<bool, _>("key_found").map_err(map_err)? {
            return Ok(None);
        }
        if row
            .try_get::<Option<i64>, _>("key_hold_id")
            .map_err(map_err)?
            .is_none()
        {
            // The key names an entry that this snapshot no longer has: never this request.
            return Ok(Some(Decided::new(
                at,
                JoinOutcome::Refused(HoldOutcome::KeyReused(None)),
            )));
        }
        let read = self.key_holder_of(hold.key.as_str(), hold.now).await?;
        let Some(holder) = read.outcome else {
            return Ok(None);
        };
        let request_at = HoldRequest {
            now: read.at,
            ..*hold
        };
        let outcome = JoinOutcome::key_taken(&request_at, holder);
        Ok(Some(Decided::new(read.at, outcome)))
    }

    /// Leaves the line: the leave statement and, when it removed the entry, the line served,
    /// in one transaction.
    pub(crate) async fn leave_waitlist(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<WaitlistEntry>>, StoreError> {
        if !self.store.fast_paths {
            return self.leave_composed(entry_id, scope, now).await;
        }
        let inner = self.waitlist_sql();
        let sql = &inner.waitlists;
        let (any, owner) = scope.as_filter();
        let now = self.now_param(now);
        let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
        let row = sqlx::query(AssertSqlSafe(sql.leave.as_str()))
            .bind(entry_id.0)
            .bind(now)
            .bind(any)
            .bind(owner)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
        let at: Timestamp = row.try_get("decided_at").map_err(map_err)?;
        let Some(entry) = entry_from_row(&row)? else {
            tx.rollback().await.map_err(map_err)?;
            return Ok(Decided::new(at, None));
        };
        sqlx::query(AssertSqlSafe(sql.serve.as_str()))
            .bind(entry.slot_id.get())
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(Decided::new(at, Some(entry)))
    }

    /// The entry in `scope` that still waits, with its place in line: one read.
    pub(crate) async fn waitlist_entry(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<(WaitlistEntry, u32)>>, StoreError> {
        let inner = self.waitlist_sql();
        let (any, owner) = scope.as_filter();
        let row = sqlx::query(AssertSqlSafe(inner.waitlists.entry_in_scope.as_str()))
            .bind(entry_id.0)
            .bind(self.now_param(now))
            .bind(any)
            .bind(owner)
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let at: Timestamp = row.try_get("decided_at").map_err(map_err)?;
        Ok(Decided::new(at, placed_entry(&row)?))
    }

    /// Whether `key` is a waiting entry's (after a statement failed on it as taken).
    pub(crate) async fn key_waits(&mut self, key: &str) -> Result<bool, StoreError> {
        let inner = self.waitlist_sql();
        let row = sqlx::query(AssertSqlSafe(inner.waitlists.key_waits.as_str()))
            .bind(key)
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        row.try_get("waits").map_err(map_err)
    }
}

/// The waiting lines' primitives of a unit of work, on which the core's rules
/// ([`join_line`](slot_booking::store::join_line),
/// [`leave_line`](slot_booking::store::leave_line)) join and leave a line.
#[async_trait]
impl WaitKernel for Kernel<'_> {
    /// The join statement under a savepoint (a key in use fails it).
    async fn insert_entry(&mut self, request: &JoinRequest<'_>) -> Result<Enqueued, StoreError> {
        let statement = self.inner.waitlists.join.as_str();
        let mut savepoint = Connection::begin(&mut *self.conn).await.map_err(map_err)?;
        let joined = join_query(statement, request, Some(request.hold.now))
            .fetch_one(&mut *savepoint)
            .await;
        let row = match joined {
            Ok(row) => row,
            Err(error) if is_unique_violation(&error) => {
                savepoint.rollback().await.map_err(map_err)?;
                return Ok(Enqueued::KeyTaken);
            }
            Err(error) => return Err(map_err(error)),
        };
        savepoint.commit().await.map_err(map_err)?;
        Ok(
            match row.try_get::<Option<i64>, _>("joined").map_err(map_err)? {
                Some(id) => Enqueued::Stored(EntryId(id)),
                None => Enqueued::NotStored,
            },
        )
    }

    async fn join_limits(&mut self, slot_id: SlotId) -> Result<Option<SlotLimits>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.inner.waitlists.join_limits.as_str()))
            .bind(slot_id.get())
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?;
        row.map(|row| slot_booking::store::join_limits_of(&Cols::of(&row)))
            .transpose()
    }

    async fn entry_in_scope(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
    ) -> Result<Option<(WaitlistEntry, u32)>, StoreError> {
        let (any, owner) = scope.as_filter();
        let row = sqlx::query(AssertSqlSafe(self.inner.waitlists.entry_in_scope.as_str()))
            .bind(entry_id.0)
            .bind(None::<Timestamp>)
            .bind(any)
            .bind(owner)
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        placed_entry(&row)
    }

    /// The leave statement: the entry deleted if it still waits, its key with it, counted out
    /// of its lines.
    async fn delete_entry(
        &mut self,
        entry: &WaitlistEntry,
        scope: &Scope,
    ) -> Result<bool, StoreError> {
        let (any, owner) = scope.as_filter();
        let row = sqlx::query(AssertSqlSafe(self.inner.waitlists.leave.as_str()))
            .bind(entry.entry_id.0)
            .bind(None::<Timestamp>)
            .bind(any)
            .bind(owner)
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        Ok(entry_from_row(&row)?.is_some())
    }
}

impl Run<'_> {
    /// A join by the core's rule ([`join_line`](slot_booking::store::join_line)) over the
    /// kernel, in a unit of work deciding at one instant.
    async fn join_composed(
        &mut self,
        request: &JoinRequest<'_>,
    ) -> Result<Decided<JoinOutcome>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let mut unit = self.unit(request.hold.now).await?;
        let at = unit.now;
        let request = JoinRequest {
            hold: HoldRequest {
                now: at,
                expires_at: at + (request.hold.expires_at - request.hold.now),
                ..request.hold
            },
            ..*request
        };
        let step = join_line(&mut unit.kernel(&inner), &request).await;
        let outcome = match unit.finish(step).await? {
            Joining::Done(outcome) => outcome,
            Joining::KeyTaken => {
                let holder = self.read_key_holder(request.hold.key.as_str()).await?;
                join_key_answer(&request, holder)
            }
        };
        Ok(Decided::new(at, outcome))
    }

    /// A leave by the core's rule ([`leave_line`](slot_booking::store::leave_line)).
    async fn leave_composed(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<WaitlistEntry>>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let mut unit = self.unit(now).await?;
        let at = unit.now;
        let step = leave_line(&mut unit.kernel(&inner), entry_id, scope, at).await;
        Ok(Decided::new(at, unit.finish(step).await?))
    }
}

// Every waitlist operation on a connection of the pool, through the same statements.
slot_booking::forward_store!(
    impl[] WaitlistStore for PostgresStore,
    |this| this.pooled()
);
