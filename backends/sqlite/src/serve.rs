//! Serving lines in strict order, in the unit of work of the write that frees their units
//! (see `waitlists.rs` for which writes serve which lines): to a fixpoint, each line's head
//! that is ready is offered its units, the expired holds that make it fit reclaimed first.

use std::collections::BTreeSet;

use slot_booking::{EventKind, Hold, PoolId, SlotId, StoreError, Timestamp};
use sqlx::sqlite::SqliteConnection;
use sqlx::AssertSqlSafe;

use crate::map_err;
use crate::rows::{hold_from_row, to_micros};
use crate::sql::Statements;
use crate::units::{log_hold, reclaim, reclaim_short_pools};

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
