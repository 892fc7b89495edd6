//! Waitlists (migrations 10 and 11): slots' and pools' lines of entries, served in strict
//! order in the unit of work that frees their units, on the one write path ([`Run`]).
//!
//! An entry is a row of `<prefix>waitlist_entries`; its slot's `waiting` counts the entries of
//! its line (kept by the triggers of migration 10 with each insert and delete of an entry). A
//! pool's line is the waiting entries of its slots that sell at the time, in line order.
//!
//! * **Nobody jumps the line.** The `holds_take_a_unit` trigger's conditional decrement requires
//!   `waiting = 0` on the slot and on every selling slot of its pools (migration 11; an offer,
//!   the hold of a waiting entry's own id, excepted), so a hold, a booking's line and a group
//!   commit's insert on a slot with a line, or in a pool with one, are refused as sold out by
//!   their own statement; availability lists such a slot with 0 units.
//! * **Keys.** An entry's key is free of holds when it is inserted (the join's insert checks
//!   in the same statement, under the write lock) and of other entries (the unique
//!   constraint); the trigger refuses a hold whose key a waiting entry has. The offer is stored
//!   under the entry's key; leaving deletes the row, and the key with it.
//! * **Ids.** An entry's id is [`next_hold_id`](crate::sql::next_hold_id), as a hold's is, and
//!   `waitlist_ids` keeps the highest ever drawn, so no hold ever takes the number of an
//!   entry: its offer is the hold of that number.
//! * **Serving** ([`serve_lines`]): a set of slots' and pools' lines, to a fixpoint: each
//!   line's head that is ready (its slot sells; it heads its slot's line and every line of its
//!   slot's pools; it fits its slot's `remaining` and every pool's, expired units counted free)
//!   is offered: the expired holds that make it fit reclaimed (its slot's, and for a short pool
//!   those of the pool's slots), then one `INSERT … SELECT` of the entry, which takes its units
//!   through the trigger and appends `hold_placed` through the other, its entry deleted and
//!   `waitlist_offered` appended. Every write that must serve lines does so in its own unit of
//!   work, after its own change: a cancel of a hold or booking (`lines.rs`), the sweeper's
//!   reclaim (`events.rs`, every line), a capacity change, reopened or closed sales and a
//!   removal (`admin.rs`), a pool's capacity change and a detach (`pools.rs`), a leave and a
//!   join (here).

use std::collections::BTreeSet;
use std::sync::Arc;

use slot_booking::{
    Decided, EntryId, EventKind, Hold, HoldOutcome, JoinOutcome, JoinRequest, OwnerId, PoolId,
    Scope, SlotId, SlotLimits, StoreError, Timestamp, WaitlistEntry,
};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Row};

use crate::lines::booking_by_key;
use crate::pools::reclaim_short_pools;
use crate::rows::{from_micros, hold_from_row, to_micros};
use crate::sql::{next_hold_id, Statements, TablePrefix, HOLD_COLUMNS};
use crate::units::{log_hold, reclaim};
use crate::writes::{Run, Step};
use crate::{is_unique_violation, map_err};

/// The columns [`entry_from_row`] reads.
const ENTRY_COLUMNS: &str = "id, slot_id, quantity, owner, priority, joined_at, offer_micros";

/// [`ENTRY_COLUMNS`] of the entries table aliased `e`.
const E_ENTRY_COLUMNS: &str =
    "e.id, e.slot_id, e.quantity, e.owner, e.priority, e.joined_at, e.offer_micros";

/// The waitlists' statements, with this store's table names.
#[derive(Debug)]
pub(crate) struct WaitlistStatements {
    join: String,
    join_refusal: String,
    entry_by_key: String,
    entry_in_scope: String,
    leave: String,
    pub(crate) slot_head: String,
    pub(crate) pool_head: String,
    pub(crate) pools_lined: String,
    pub(crate) offer_entry: String,
    drop_entry: String,
    pub(crate) entry_ready: String,
    pub(crate) slots_lined: String,
}

impl WaitlistStatements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let slots = format!("{prefix}slots");
        let holds = format!("{prefix}holds");
        let entries = format!("{prefix}waitlist_entries");
        let slot_pools = format!("{prefix}slot_pools");
        let pools = format!("{prefix}pools");
        let next_id = next_hold_id(prefix.as_str());
        // The place in line of the entry `e`: the entries of its slot served before it, and
        // itself (one range of `waitlist_line`).
        let position = format!(
            "(SELECT count(*) FROM {entries} o WHERE o.slot_id = e.slot_id \
              AND (o.priority > e.priority OR (o.priority = e.priority AND o.id <= e.id))) \
             AS position"
        );
        // The slot `s` sells at `now` (a parameter).
        let selling = |s: &str, now: &str| {
            format!("{s}.starts_at > {now} AND {s}.closed = 0 AND {s}.removed_at IS NULL")
        };
        let selling_s = selling("s", "?2");
        let selling_t = selling("t", "?2");
        // The entry `x` comes before the entry `e` in a line.
        let before = "(x.priority > e.priority OR (x.priority = e.priority AND x.id < e.id))";
        // The entry `e` is the head of its slot's line and of the line of every pool of its
        // slot (the waiting entries of the pool's slots selling at ?2): nobody is before it in
        // any of them. One range of `waitlist_line`, then per pool of the slot one range of
        // `slot_pools_by_pool` and, for each of its slots with a line, a range of
        // `waitlist_line`.
        let head_everywhere = format!(
            "NOT EXISTS (SELECT 1 FROM {entries} x WHERE x.slot_id = e.slot_id AND {before}) \
             AND NOT EXISTS (SELECT 1 FROM {slot_pools} m \
                             JOIN {slot_pools} o ON o.pool_id = m.pool_id \
                             JOIN {slots} t ON t.id = o.slot_id \
                             JOIN {entries} x ON x.slot_id = o.slot_id \
                             WHERE m.slot_id = e.slot_id AND t.waiting > 0 AND {selling_t} \
                               AND {before})"
        );
        // Every pool of the entry `e`'s slot has its quantity in its stored `remaining`.
        let pools_fit = format!(
            "NOT EXISTS (SELECT 1 FROM {slot_pools} m JOIN {pools} p ON p.id = m.pool_id \
                         WHERE m.slot_id = e.slot_id AND p.remaining < e.quantity)"
        );
        WaitlistStatements {
            // ?1 slot id, ?2 key, ?3 quantity, ?4 owner, ?5 priority, ?6 now, ?7 offer window
            // (µs). Stores the entry only where the slot sells and has the capacity, so has
            // every pool of it, and no hold has the key; another entry with the key is the
            // unique constraint's. No row: the reads of `join_refusal` say why.
            join: format!(
                "INSERT INTO {entries} \
                     (id, slot_id, idempotency_key, quantity, owner, priority, joined_at, \
                      offer_micros) \
                 SELECT {next_id}, ?1, ?2, ?3, ?4, ?5, ?6, ?7 \
                 WHERE EXISTS (SELECT 1 FROM {slots} WHERE id = ?1 AND starts_at > ?6 \
                                 AND closed = 0 AND removed_at IS NULL AND capacity >= ?3) \
                   AND NOT EXISTS (SELECT 1 FROM {slot_pools} m \
                                   JOIN {pools} p ON p.id = m.pool_id \
                                   WHERE m.slot_id = ?1 AND p.capacity < ?3) \
                   AND NOT EXISTS (SELECT 1 FROM {holds} WHERE idempotency_key = ?2) \
                 RETURNING {ENTRY_COLUMNS}"
            ),
            // ?1 slot id: its limits, and the smallest capacity of its pools (NULL: none).
            join_refusal: format!(
                "SELECT starts_at, capacity, closed, removed_at, \
                        (SELECT min(p.capacity) FROM {slot_pools} m \
                         JOIN {pools} p ON p.id = m.pool_id WHERE m.slot_id = ?1) \
                            AS pool_capacity \
                 FROM {slots} WHERE id = ?1"
            ),
            // ?1 key: the waiting entry that has it, with its place in line.
            entry_by_key: format!(
                "SELECT {E_ENTRY_COLUMNS}, {position} FROM {entries} e \
                 WHERE e.idempotency_key = ?1"
            ),
            // ?1 entry id, ?2 and ?3 the scope: the waiting entry, with its place in line.
            entry_in_scope: format!(
                "SELECT {E_ENTRY_COLUMNS}, {position} FROM {entries} e \
                 WHERE e.id = ?1 AND (?2 OR e.owner IS ?3)"
            ),
            // ?1 entry id, ?2 and ?3 the scope.
            leave: format!(
                "DELETE FROM {entries} WHERE id = ?1 AND (?2 OR owner IS ?3) \
                 RETURNING {ENTRY_COLUMNS}"
            ),
            // ?1 slot id: the head of its line, by (priority DESC, id), through
            // `waitlist_line`.
            slot_head: format!(
                "SELECT id FROM {entries} WHERE slot_id = ?1 ORDER BY priority DESC, id LIMIT 1"
            ),
            // ?1 pool id, ?2 now: the head of the pool's line, the first of the entries of its
            // slots that sell at ?2.
            pool_head: format!(
                "SELECT x.id FROM {slot_pools} o JOIN {slots} t ON t.id = o.slot_id \
                 JOIN {entries} x ON x.slot_id = o.slot_id \
                 WHERE o.pool_id = ?1 AND t.waiting > 0 AND {selling_t} \
                 ORDER BY x.priority DESC, x.id LIMIT 1"
            ),
            // ?1 now: every pool whose line is not empty, by id (the sweeper's pass): the
            // slots with a line through the partial index `slots_lined` (migration 11), then
            // their pools through `slot_pools`' key. The unary `+` keeps the planner off the
            // slots' `starts_at` index, whose range is nearly every slot.
            pools_lined: format!(
                "SELECT DISTINCT o.pool_id FROM {slots} t JOIN {slot_pools} o ON o.slot_id = t.id \
                 WHERE t.waiting > 0 AND +t.starts_at > ?1 AND t.closed = 0 \
                   AND t.removed_at IS NULL \
                 ORDER BY o.pool_id"
            ),
            // ?1 entry id, ?2 now: the entry's offer, if it is ready without a reclaim: its
            // slot sells, it is the head of its slot's line and of each of its pools' lines,
            // and its whole quantity fits in the slot's `remaining` and in each pool's: a hold
            // of the entry's id, key, owner and quantity, created now, expiring after the
            // entry's offer window. The `holds_take_a_unit` trigger takes its units from the
            // slot and its pools (the entry's own offer passes the lines' conditions), and
            // `holds_placed_event` appends its `hold_placed`.
            offer_entry: format!(
                "INSERT INTO {holds} \
                     (id, slot_id, idempotency_key, status, expires_at, created_at, quantity, \
                      owner) \
                 SELECT e.id, e.slot_id, e.idempotency_key, 'held', ?2 + e.offer_micros, ?2, \
                        e.quantity, e.owner \
                 FROM {entries} e JOIN {slots} s ON s.id = e.slot_id \
                 WHERE e.id = ?1 AND {selling_s} AND s.remaining >= e.quantity \
                   AND {head_everywhere} AND {pools_fit} \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 entry id: an offered entry leaves the lines.
            drop_entry: format!("DELETE FROM {entries} WHERE id = ?1"),
            // ?1 entry id, ?2 now: the entry's slot id and quantity if it is ready, its
            // expired units counted free: its slot sells, it is the head of its slot's line and of every line of its
            // slot's pools, its quantity fits in its slot's `remaining` with the slot's held
            // holds expired by ?2, and in each pool's with the expired held holds of the pool's
            // slots. The row says whether the slot is short of its stored `remaining` (its
            // expired holds are then reclaimed before the offer) and whether a pool is (the
            // expired holds of such pools' slots are then reclaimed: the pool refill).
            entry_ready: format!(
                "SELECT e.slot_id, e.quantity, s.remaining < e.quantity AS slot_short, \
                        EXISTS (SELECT 1 FROM {slot_pools} m JOIN {pools} p ON p.id = m.pool_id \
                                WHERE m.slot_id = e.slot_id AND p.remaining < e.quantity) \
                            AS pool_short \
                 FROM {entries} e JOIN {slots} s ON s.id = e.slot_id \
                 WHERE e.id = ?1 AND {selling_s} AND {head_everywhere} \
                   AND s.remaining + (SELECT coalesce(SUM(h.quantity), 0) FROM {holds} h \
                                      WHERE h.slot_id = s.id AND h.status = 'held' \
                                        AND h.expires_at <= ?2) >= e.quantity \
                   AND NOT EXISTS ( \
                       SELECT 1 FROM {slot_pools} m JOIN {pools} p ON p.id = m.pool_id \
                       WHERE m.slot_id = e.slot_id \
                         AND p.remaining + (SELECT coalesce(SUM(h.quantity), 0) \
                                            FROM {slot_pools} o \
                                            JOIN {holds} h ON h.slot_id = o.slot_id \
                                            WHERE o.pool_id = p.id AND h.status = 'held' \
                                              AND h.expires_at <= ?2) < e.quantity)"
            ),
            // ?1 now: every slot that sells with a line, by id (the sweeper's pass), through
            // the partial index `slots_lined` (migration 11).
            slots_lined: format!(
                "SELECT id FROM {slots} WHERE waiting > 0 AND +starts_at > ?1 AND closed = 0 \
                   AND removed_at IS NULL ORDER BY id"
            ),
        }
    }
}

/// A row of [`ENTRY_COLUMNS`].
fn entry_from_row(row: &SqliteRow) -> Result<WaitlistEntry, StoreError> {
    let owner: Option<String> = row.try_get("owner").map_err(map_err)?;
    Ok(WaitlistEntry {
        entry_id: EntryId(row.try_get("id").map_err(map_err)?),
        slot_id: SlotId(row.try_get("slot_id").map_err(map_err)?),
        quantity: row.try_get("quantity").map_err(map_err)?,
        owner: owner
            .map(OwnerId::new)
            .transpose()
            .map_err(StoreError::failed)?,
        priority: row.try_get("priority").map_err(map_err)?,
        joined_at: from_micros(row.try_get("joined_at").map_err(map_err)?)?,
        offer_micros: row.try_get("offer_micros").map_err(map_err)?,
    })
}

/// A row of [`ENTRY_COLUMNS`] and its `position`.
fn placed_entry_from_row(row: &SqliteRow) -> Result<(WaitlistEntry, u32), StoreError> {
    let position: i64 = row.try_get("position").map_err(map_err)?;
    Ok((
        entry_from_row(row)?,
        u32::try_from(position).unwrap_or(u32::MAX),
    ))
}

/// A set of lines to serve: slots' lines and pools' lines.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    slots: BTreeSet<i64>,
    pools: BTreeSet<i64>,
}

impl Lines {
    /// No line.
    pub(crate) fn new() -> Self {
        Lines::default()
    }

    /// Adds the slot's line.
    pub(crate) fn slot(&mut self, slot_id: SlotId) -> &mut Self {
        self.slots.insert(slot_id.get());
        self
    }

    /// Adds the pool's line.
    pub(crate) fn pool(&mut self, pool_id: PoolId) -> &mut Self {
        self.pools.insert(pool_id.get());
        self
    }

    /// Adds the slot's line and the lines of its pools, read in the unit of work `conn` is in.
    pub(crate) async fn slot_and_pools(
        &mut self,
        sql: &Statements,
        conn: &mut SqliteConnection,
        slot_id: SlotId,
    ) -> Result<&mut Self, StoreError> {
        self.slots.insert(slot_id.get());
        let pools: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.pools.pools_of_slot.as_str()))
            .bind(slot_id.get())
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        self.pools.extend(pools);
        Ok(self)
    }

    /// Adds every line that is not empty at `now`: the line of each slot that sells with
    /// entries waiting, and of each pool with such a slot.
    pub(crate) async fn every_line(
        &mut self,
        sql: &Statements,
        conn: &mut SqliteConnection,
        now: Timestamp,
    ) -> Result<&mut Self, StoreError> {
        let slots: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.waitlists.slots_lined.as_str()))
            .bind(to_micros(now))
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        self.slots.extend(slots);
        let pools: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.waitlists.pools_lined.as_str()))
            .bind(to_micros(now))
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        self.pools.extend(pools);
        Ok(self)
    }

    /// Whether there is no line in the set.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.pools.is_empty()
    }
}

/// Serves the line of `slot_id` and the lines of its pools in the unit of work `conn` is in
/// (see [`serve_lines`]). Returns the offers made.
pub(crate) async fn serve(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let mut lines = Lines::new();
    lines.slot_and_pools(sql, conn, slot_id).await?;
    serve_lines(sql, conn, &lines, now).await
}

/// Serves `lines` in the unit of work `conn` is in, to a fixpoint: the head of each line (a
/// pool's head may wait on another slot of the pool) is offered its units if it is ready, and
/// the heads are looked at again after any offer, until no head is ready; an offered entry's
/// slot and pools join the set, since the next in each of its lines may have waited only
/// behind it. An entry is ready when its slot sells, it is the head of its slot's line and of
/// the line of each pool of its slot, and its whole quantity fits in its slot and every pool,
/// their expired holds counted free ([`offer`]). SQLite's one writer holds the write lock:
/// nothing else moves meanwhile. Returns the offers made, in the order made.
pub(crate) async fn serve_lines(
    sql: &Statements,
    conn: &mut SqliteConnection,
    lines: &Lines,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let statements = &sql.waitlists;
    let mut offers = Vec::new();
    let mut lines = Lines {
        slots: lines.slots.clone(),
        pools: lines.pools.clone(),
    };
    loop {
        let mut heads = BTreeSet::new();
        for &slot_id in &lines.slots {
            let head: Option<i64> =
                sqlx::query_scalar(AssertSqlSafe(statements.slot_head.as_str()))
                    .bind(slot_id)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(map_err)?;
            heads.extend(head);
        }
        for &pool_id in &lines.pools {
            let head: Option<i64> =
                sqlx::query_scalar(AssertSqlSafe(statements.pool_head.as_str()))
                    .bind(pool_id)
                    .bind(to_micros(now))
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(map_err)?;
            heads.extend(head);
        }
        let mut offered = false;
        for entry_id in heads {
            if let Some(hold) = offer(sql, conn, entry_id, now).await? {
                // The entry left every line it was in: the next in each may have waited
                // only behind it.
                lines.slot_and_pools(sql, conn, hold.slot_id).await?;
                offers.push(hold);
                offered = true;
            }
        }
        if !offered {
            break;
        }
    }
    Ok(offers)
}

/// Offers the entry `entry_id` its units if it is ready at `now` (see [`serve_lines`]): the
/// offer's conditional insert, which takes them from the slot's and the pools' stored
/// `remaining`; when that inserts nothing, the entry's readiness with expired units counted
/// free, and if it is ready, the expired holds that make it fit reclaimed (`hold_expired`,
/// units back to their slots and pools): its slot's when the slot is short, then, when a pool
/// is short, those of every short pool's slots (the pool refill); then the insert once more.
/// Nothing is reclaimed for an entry that is not ready. An offered entry leaves its lines and
/// `waitlist_offered` is appended after the trigger's `hold_placed`.
async fn offer(
    sql: &Statements,
    conn: &mut SqliteConnection,
    entry_id: i64,
    now: Timestamp,
) -> Result<Option<Hold>, StoreError> {
    if let Some(offer) = insert_offer(sql, conn, entry_id, now).await? {
        return Ok(Some(offer));
    }
    let ready: Option<(i64, i32, bool, bool)> =
        sqlx::query_as(AssertSqlSafe(sql.waitlists.entry_ready.as_str()))
            .bind(entry_id)
            .bind(to_micros(now))
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    let Some((slot_id, quantity, slot_short, pool_short)) = ready else {
        return Ok(None);
    };
    if slot_short {
        reclaim(sql, &sql.reclaim, conn, slot_id, now).await?;
    }
    if pool_short {
        reclaim_short_pools(sql, conn, slot_id, quantity, now).await?;
    }
    match insert_offer(sql, conn, entry_id, now).await? {
        Some(offer) => Ok(Some(offer)),
        None => Err(StoreError::failed(format!(
            "waitlist entry {entry_id} was ready, but its offer found no units after the reclaim"
        ))),
    }
}

/// The offer's conditional insert ([`offer`]), and when it stored the hold, the entry deleted
/// and `waitlist_offered` appended.
async fn insert_offer(
    sql: &Statements,
    conn: &mut SqliteConnection,
    entry_id: i64,
    now: Timestamp,
) -> Result<Option<Hold>, StoreError> {
    let statements = &sql.waitlists;
    let rows = sqlx::query(AssertSqlSafe(statements.offer_entry.as_str()))
        .bind(entry_id)
        .bind(to_micros(now))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let offer = hold_from_row(row)?;
    let dropped = sqlx::query(AssertSqlSafe(statements.drop_entry.as_str()))
        .bind(offer.hold_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if dropped.rows_affected() != 1 {
        return Err(StoreError::failed("an entry offered its units is gone"));
    }
    log_hold(sql, conn, EventKind::WaitlistOffered, &offer, now).await?;
    Ok(Some(offer))
}

/// [`WaitlistStore::join_waitlist`](slot_booking::WaitlistStore::join_waitlist) in the unit
/// of work `conn` is in: the entry's conditional insert, then the line served; the new entry
/// served is answered with its offer. No row inserted: [`join_refusal`] says why.
async fn join(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &JoinRequest<'_>,
) -> Result<Step<JoinOutcome>, StoreError> {
    let hold = &request.hold;
    let offer_micros = (hold.expires_at - hold.now)
        .num_microseconds()
        .ok_or_else(|| StoreError::failed("an offer window overflows microseconds"))?;
    let inserted = sqlx::query(AssertSqlSafe(sql.waitlists.join.as_str()))
        .bind(hold.slot_id.get())
        .bind(hold.key.as_str())
        .bind(hold.quantity)
        .bind(hold.owner.map(OwnerId::as_str))
        .bind(request.priority)
        .bind(to_micros(hold.now))
        .bind(offer_micros)
        .fetch_all(&mut *conn)
        .await;
    let entry = match inserted {
        Ok(rows) => match rows.first() {
            Some(row) => entry_from_row(row)?,
            None => return join_refusal(sql, conn, request).await,
        },
        // Another entry has the key.
        Err(error) if is_unique_violation(&error) => return join_refusal(sql, conn, request).await,
        Err(error) => return Err(map_err(error)),
    };
    let offers = serve(sql, conn, entry.slot_id, hold.now).await?;
    if let Some(offer) = offers
        .into_iter()
        .find(|offer| offer.hold_id == entry.offer_id())
    {
        return Ok(Step::keep(JoinOutcome::Held {
            hold: offer,
            replayed: false,
        }));
    }
    let (entry, position) = entry_in_scope(sql, conn, entry.entry_id, &Scope::BackOffice)
        .await?
        .ok_or_else(|| StoreError::failed("a new waitlist entry is gone"))?;
    Ok(Step::keep(JoinOutcome::Waiting {
        entry,
        position,
        replayed: false,
    }))
}

/// What `join_refusal` reads: the slot's `starts_at`, `capacity`, `closed` and `removed_at`,
/// and the smallest capacity of its pools (none: no pool).
type JoinLimits = (i64, i32, bool, Option<i64>, Option<i32>);

/// Why a join stored no entry, read in its unit of work, in the order every store answers: the
/// key's entry (a replay, or the key reused), the key's hold or booking (a replay of the
/// offer, or the key reused), then the slot's limits, then its pools.
async fn join_refusal(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &JoinRequest<'_>,
) -> Result<Step<JoinOutcome>, StoreError> {
    let hold = &request.hold;
    let keyed = sqlx::query(AssertSqlSafe(sql.waitlists.entry_by_key.as_str()))
        .bind(hold.key.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    if let Some(row) = keyed {
        let (entry, position) = placed_entry_from_row(&row)?;
        let outcome = if request.is_replay_of_entry(&entry) {
            JoinOutcome::Waiting {
                entry,
                position,
                replayed: true,
            }
        } else if entry.owner.as_ref() == hold.owner {
            JoinOutcome::Refused(HoldOutcome::KeyReused(Some(entry.offer(hold.now))))
        } else {
            JoinOutcome::Refused(HoldOutcome::KeyReused(None))
        };
        return Ok(Step::undo(outcome));
    }
    if let Some(holder) = booking_by_key(sql, &mut *conn, hold.key.as_str()).await? {
        let outcome = match HoldOutcome::key_taken(hold, holder) {
            HoldOutcome::Replayed(offer) => JoinOutcome::Held {
                hold: offer,
                replayed: true,
            },
            other => JoinOutcome::Refused(other),
        };
        return Ok(Step::undo(outcome));
    }
    let slot: Option<JoinLimits> =
        sqlx::query_as(AssertSqlSafe(sql.waitlists.join_refusal.as_str()))
            .bind(hold.slot_id.get())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    let Some((starts_at, capacity, closed, removed_at, pool_capacity)) = slot else {
        return Ok(Step::undo(JoinOutcome::Refused(HoldOutcome::refused(
            hold, None, None,
        ))));
    };
    // A quantity more than the capacity of a pool of the slot exceeds it as the slot's own
    // would: the smallest of them is the most a request can ever be given.
    let limits = SlotLimits {
        starts_at: from_micros(starts_at)?,
        capacity: pool_capacity.map_or(capacity, |pool| pool.min(capacity)),
        closed,
        removed: removed_at.is_some(),
    };
    match HoldOutcome::refused(hold, None, Some(limits)) {
        HoldOutcome::SoldOut => Err(StoreError::failed(
            "a waitlist entry that its slot admits was not stored",
        )),
        refused => Ok(Step::undo(JoinOutcome::Refused(refused))),
    }
}

/// The entry `entry_id` still waiting, if `scope` admits it, with its place in line.
async fn entry_in_scope(
    sql: &Statements,
    conn: &mut SqliteConnection,
    entry_id: EntryId,
    scope: &Scope,
) -> Result<Option<(WaitlistEntry, u32)>, StoreError> {
    let (any, owner) = scope.as_filter();
    sqlx::query(AssertSqlSafe(sql.waitlists.entry_in_scope.as_str()))
        .bind(entry_id.0)
        .bind(any)
        .bind(owner)
        .fetch_optional(conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(placed_entry_from_row)
        .transpose()
}

/// [`WaitlistStore::leave_waitlist`](slot_booking::WaitlistStore::leave_waitlist) in the unit
/// of work `conn` is in: the entry's row deleted (its key with it) if it waits in `scope`, then
/// its line served.
async fn leave(
    sql: &Statements,
    conn: &mut SqliteConnection,
    entry_id: EntryId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Option<WaitlistEntry>>, StoreError> {
    let (any, owner) = scope.as_filter();
    let rows = sqlx::query(AssertSqlSafe(sql.waitlists.leave.as_str()))
        .bind(entry_id.0)
        .bind(any)
        .bind(owner)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let Some(row) = rows.first() else {
        return Ok(Step::keep(None));
    };
    let entry = entry_from_row(row)?;
    serve(sql, conn, entry.slot_id, now).await?;
    Ok(Step::keep(Some(entry)))
}

impl Run<'_> {
    pub(crate) async fn join_waitlist(
        &mut self,
        request: JoinRequest<'_>,
    ) -> Result<Decided<JoinOutcome>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = join(&sql, unit.connection(), &request).await;
        Ok(Decided::new(request.hold.now, unit.finish(step).await?))
    }

    pub(crate) async fn leave_waitlist(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<WaitlistEntry>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = leave(&sql, unit.connection(), entry_id, scope, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn waitlist_entry(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<(WaitlistEntry, u32)>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        let found = entry_in_scope(&sql, &mut conn, entry_id, scope).await?;
        Ok(Decided::new(now, found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_waitlist_statement_names_only_prefixed_tables() {
        let sql = WaitlistStatements::new(&TablePrefix::new("zz_").unwrap());
        let WaitlistStatements {
            join,
            join_refusal,
            entry_by_key,
            entry_in_scope,
            leave,
            slot_head,
            pool_head,
            pools_lined,
            offer_entry,
            drop_entry,
            entry_ready,
            slots_lined,
        } = &sql;
        for statement in [
            join,
            join_refusal,
            entry_by_key,
            entry_in_scope,
            leave,
            slot_head,
            pool_head,
            pools_lined,
            offer_entry,
            drop_entry,
            entry_ready,
            slots_lined,
        ] {
            assert!(statement.contains("zz_"), "{statement}");
            for table in [
                "slots",
                "holds",
                "waitlist_entries",
                "waitlist_ids",
                "slot_pools",
                "pools",
            ] {
                for verb in ["FROM", "JOIN", "INTO", "UPDATE"] {
                    let bare = format!("{verb} {table} ");
                    assert!(!statement.contains(&bare), "{statement}");
                }
            }
        }
    }
}
