//! Pools (migration 9): capacities several slots draw from, on the one write path ([`Run`])
//! that serves the store and the caller's transaction alike.
//!
//! A pool is a row of `<prefix>pools` (`capacity`, `remaining`) and its slots are rows of
//! `<prefix>slot_pools`. Every unit moves with its slot's:
//!
//! * **Taking**: the `holds_take_a_unit` trigger (recreated by migration 9), after the slot's
//!   conditional decrement, decrements every pool of the slot conditionally in the same
//!   statement and aborts it when fewer rows changed than the slot has pools, so a hold, a
//!   booking's line and a group commit's insert take from the slot and its pools or from
//!   none. A pool short with expired holds on its slots aborts with a message of its own
//!   ([`Insert::PoolShort`](crate::group::Insert)): the store then reclaims the slot's expired
//!   holds and inserts once more, and if a pool is still short, the expired holds of the short
//!   pools' slots ([`reclaim_short_pools`]) and once more, in the unit of work that is rolled
//!   back if it is still refused.
//! * **Giving back**: every give-back of a slot's units (cancel, the lazy and administrative
//!   reclaims, [`reclaim_expired`](slot_booking::EventStore::reclaim_expired)) goes through
//!   [`units::give_back`](crate::units::give_back), whose update returns whether the slot
//!   belongs to a pool; [`give_back`] then gives the units back to each of its pools.
//! * **Administration**: attaching, detaching and changing a pool's capacity are conditional
//!   updates decided by the rows they changed; a refusal is explained by reads in the same
//!   unit of work, then rolled back with every reclaim it tried.
//!
//! SQLite admits one writer at a time, so no two of these interleave; give-backs still run by
//! slot id ascending, as the PostgreSQL store locks.

use std::sync::Arc;

use async_trait::async_trait;
use slot_booking::{
    CapacityChange, Decided, NewPool, Pool, PoolChange, PoolId, PoolUsage, SlotId, SlotUsage,
    StoreError, Timestamp, TransactionPools, MAX_POOLS_PER_SLOT,
};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Row};

use crate::map_err;
use crate::rows::to_micros;
use crate::run::{Run, Step};
use crate::serve::{serve_lines, Lines};
use crate::sql::Statements;
use crate::transaction::SqliteWrites;
use crate::units::reclaim;

/// A row of `pool_usage` or `every_pool`.
fn pool_usage_from_row(row: &SqliteRow) -> Result<PoolUsage, StoreError> {
    let units = |column: &str| -> Result<i32, StoreError> {
        let sum: i64 = row.try_get(column).map_err(map_err)?;
        i32::try_from(sum).map_err(StoreError::failed)
    };
    let listed: Option<String> = row.try_get("slots").map_err(map_err)?;
    let mut slots = listed
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|id| !id.is_empty())
        .map(|id| id.parse::<i64>().map(SlotId).map_err(StoreError::failed))
        .collect::<Result<Vec<_>, _>>()?;
    slots.sort_unstable();
    Ok(PoolUsage {
        pool: Pool {
            pool_id: PoolId(row.try_get("id").map_err(map_err)?),
            capacity: row.try_get("capacity").map_err(map_err)?,
            stored_remaining: row.try_get("remaining").map_err(map_err)?,
            slots,
        },
        held: units("held")?,
        expired: units("expired")?,
    })
}

/// The pool with its units at `now`, if it exists.
pub(crate) async fn pool_usage(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    now: Timestamp,
) -> Result<Option<PoolUsage>, StoreError> {
    sqlx::query(AssertSqlSafe(sql.pools.pool_usage.as_str()))
        .bind(to_micros(now))
        .bind(pool_id.get())
        .fetch_optional(conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(pool_usage_from_row)
        .transpose()
}

/// What `attach_refusal` read: why `attach` changed no row (or `detach` deleted none).
struct AttachRefusal {
    /// A slot has the id, removed or not.
    slot_stored: bool,
    pool: bool,
    /// The slot exists and is not removed.
    slot: bool,
    attached: bool,
    pools_of_slot: i64,
}

async fn attach_refusal(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    slot_id: SlotId,
) -> Result<AttachRefusal, StoreError> {
    let (slot_stored, pool, slot, attached, pools_of_slot): (bool, bool, bool, bool, i64) =
        sqlx::query_as(AssertSqlSafe(sql.pools.attach_refusal.as_str()))
            .bind(slot_id.get())
            .bind(pool_id.get())
            .fetch_one(conn)
            .await
            .map_err(map_err)?;
    Ok(AttachRefusal {
        slot_stored,
        pool,
        slot,
        attached,
        pools_of_slot,
    })
}

/// The pool as it is now in this unit, for an answer: it exists (the caller has seen it).
async fn usage_now(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    now: Timestamp,
) -> Result<PoolUsage, StoreError> {
    pool_usage(sql, conn, pool_id, now)
        .await?
        .ok_or_else(|| StoreError::failed(format!("pool {} is gone", pool_id.get())))
}

/// Takes the slot's taken units from the pool and records the slot as the pool's: `true`
/// when the conditional update changed the pool.
async fn try_attach(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    slot_id: SlotId,
) -> Result<bool, StoreError> {
    let most = i64::try_from(MAX_POOLS_PER_SLOT).unwrap_or(i64::MAX);
    let taken = sqlx::query(AssertSqlSafe(sql.pools.attach.as_str()))
        .bind(slot_id.get())
        .bind(pool_id.get())
        .bind(most)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if taken.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query(AssertSqlSafe(sql.pools.add_member.as_str()))
        .bind(slot_id.get())
        .bind(pool_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(true)
}

/// [`PoolStore::attach_slot`](slot_booking::PoolStore::attach_slot) in the unit of work `conn`
/// is in: the conditional update; when it changes nothing, the reads say why, and only a pool
/// short of units reclaims the expired holds of the slot and of the pool's slots and tries
/// once more (rolled back if it is still short).
async fn attach_slot(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Step<PoolChange>, StoreError> {
    if try_attach(sql, conn, pool_id, slot_id).await? {
        return Ok(Step::keep(PoolChange::Applied(
            usage_now(sql, conn, pool_id, now).await?,
        )));
    }
    // Checked in the order every store answers: no such slot, no such pool, a removed slot,
    // attached already, too many pools, then units.
    let refusal = attach_refusal(sql, conn, pool_id, slot_id).await?;
    if !refusal.slot_stored {
        return Ok(Step::undo(PoolChange::SlotNotFound));
    }
    if !refusal.pool {
        return Ok(Step::undo(PoolChange::PoolNotFound));
    }
    if !refusal.slot {
        return Ok(Step::undo(PoolChange::SlotNotFound));
    }
    if refusal.attached {
        return Ok(Step::keep(PoolChange::Applied(
            usage_now(sql, conn, pool_id, now).await?,
        )));
    }
    if refusal.pools_of_slot >= i64::try_from(MAX_POOLS_PER_SLOT).unwrap_or(i64::MAX) {
        return Ok(Step::undo(PoolChange::TooManyPools));
    }
    let reclaimed = reclaim(sql, &sql.reclaim_expired, conn, slot_id.get(), now)
        .await?
        .len()
        + reclaim(sql, &sql.pools.reclaim_pool, conn, pool_id.get(), now)
            .await?
            .len();
    if reclaimed > 0 && try_attach(sql, conn, pool_id, slot_id).await? {
        return Ok(Step::keep(PoolChange::Applied(
            usage_now(sql, conn, pool_id, now).await?,
        )));
    }
    Ok(Step::undo(PoolChange::InUse(
        usage_now(sql, conn, pool_id, now).await?,
    )))
}

/// [`PoolStore::detach_slot`](slot_booking::PoolStore::detach_slot) in the unit of work `conn`
/// is in: the membership deleted, then the slot's taken units given back to the pool; answered
/// as that left the pool, and then the pool's line and the slot's served.
async fn detach_slot(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Step<PoolChange>, StoreError> {
    let deleted = sqlx::query(AssertSqlSafe(sql.pools.detach.as_str()))
        .bind(slot_id.get())
        .bind(pool_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if deleted.rows_affected() == 0 {
        // Nothing deleted: no such slot (a removed one is detached as any other), no such
        // pool, or not attached (applied, unchanged).
        let refusal = attach_refusal(sql, conn, pool_id, slot_id).await?;
        if !refusal.slot_stored {
            return Ok(Step::undo(PoolChange::SlotNotFound));
        }
    } else {
        let given = sqlx::query(AssertSqlSafe(sql.pools.detach_give_back.as_str()))
            .bind(slot_id.get())
            .bind(pool_id.get())
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        if given.rows_affected() != 1 {
            return Err(StoreError::failed(format!(
                "a slot of pool {} was detached, but the pool is gone",
                pool_id.get()
            )));
        }
        // Answered as the detach left the pool; then, the slot's taken units back in the pool
        // and its entries out of the pool's line, both lines may have a head ready.
        let usage = usage_now(sql, conn, pool_id, now).await?;
        let mut lines = Lines::new();
        lines.pool(pool_id).slot(slot_id);
        serve_lines(sql, conn, &lines, now).await?;
        return Ok(Step::keep(PoolChange::Applied(usage)));
    }
    Ok(match pool_usage(sql, conn, pool_id, now).await? {
        Some(usage) => Step::keep(PoolChange::Applied(usage)),
        None => Step::undo(PoolChange::PoolNotFound),
    })
}

async fn try_change_capacity(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    change: CapacityChange,
) -> Result<bool, StoreError> {
    let terms = change.terms();
    let changed = sqlx::query(AssertSqlSafe(sql.pools.change_capacity.as_str()))
        .bind(pool_id.get())
        .bind(terms.keep)
        .bind(terms.add)
        .bind(terms.expected)
        .fetch_optional(conn)
        .await
        .map_err(map_err)?;
    Ok(changed.is_some())
}

/// [`PoolStore::change_pool_capacity`](slot_booking::PoolStore::change_pool_capacity) in the
/// unit of work `conn` is in: the conditional update; when it changes nothing, the pool read
/// says whether it is not there or already at that capacity; otherwise the expired holds of
/// its slots are reclaimed and the update tried once more (rolled back if still refused).
/// Changed, it is answered as the change left the pool, and the pool's line is then served in
/// the same unit of work.
async fn change_pool_capacity(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    change: CapacityChange,
    now: Timestamp,
) -> Result<Step<PoolChange>, StoreError> {
    if !try_change_capacity(sql, conn, pool_id, change).await? {
        match pool_usage(sql, conn, pool_id, now).await? {
            None => return Ok(Step::undo(PoolChange::PoolNotFound)),
            Some(usage) if change.leaves(usage.pool.capacity) => {
                return Ok(Step::keep(PoolChange::Applied(usage)))
            }
            Some(_) => {}
        }
        let reclaimed = reclaim(sql, &sql.pools.reclaim_pool, conn, pool_id.get(), now)
            .await?
            .len();
        if reclaimed == 0 || !try_change_capacity(sql, conn, pool_id, change).await? {
            return Ok(Step::undo(PoolChange::InUse(
                usage_now(sql, conn, pool_id, now).await?,
            )));
        }
    }
    // Answered as the change left the pool; then, the capacity changed, the pool's line is
    // served.
    let usage = usage_now(sql, conn, pool_id, now).await?;
    let mut lines = Lines::new();
    lines.pool(pool_id);
    serve_lines(sql, conn, &lines, now).await?;
    Ok(Step::keep(PoolChange::Applied(usage)))
}

impl Run<'_> {
    pub(crate) async fn create_pool(
        &mut self,
        pool: &NewPool,
        now: Timestamp,
    ) -> Result<Pool, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let created = sqlx::query(AssertSqlSafe(sql.pools.create_pool.as_str()))
            .bind(pool.capacity)
            .bind(to_micros(now))
            .fetch_one(unit.connection())
            .await
            .map_err(map_err)
            .and_then(|row| {
                Ok(Step::keep(Pool {
                    pool_id: PoolId(row.try_get("id").map_err(map_err)?),
                    capacity: row.try_get("capacity").map_err(map_err)?,
                    stored_remaining: row.try_get("remaining").map_err(map_err)?,
                    slots: Vec::new(),
                }))
            });
        unit.finish(created).await
    }

    pub(crate) async fn get_pool(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Decided<Option<PoolUsage>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        let usage = pool_usage(&sql, &mut conn, pool_id, now).await?;
        Ok(Decided::new(now, usage))
    }

    /// Every pool with its units at `now`, by id: one statement, no row without pools.
    pub(crate) async fn pools(
        &mut self,
        now: Timestamp,
    ) -> Result<Decided<Vec<PoolUsage>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        let rows = sqlx::query(AssertSqlSafe(sql.pools.every_pool.as_str()))
            .bind(to_micros(now))
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        let pools = rows
            .iter()
            .map(pool_usage_from_row)
            .collect::<Result<_, _>>()?;
        Ok(Decided::new(now, pools))
    }

    pub(crate) async fn attach_slot(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = attach_slot(&sql, unit.connection(), pool_id, slot_id, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn detach_slot(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = detach_slot(&sql, unit.connection(), pool_id, slot_id, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn change_pool_capacity(
        &mut self,
        pool_id: PoolId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = change_pool_capacity(&sql, unit.connection(), pool_id, change, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    /// The slot with its units at `now`, removed slots included.
    pub(crate) async fn slot_usage(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        crate::reads::slot_usage(&sql, &mut conn, slot_id, now).await
    }
}

/// Reads of pools and slots on the caller's connection, inside its transaction: what it reads
/// is what its transaction will commit against.
#[async_trait]
impl TransactionPools for SqliteWrites<'_> {
    async fn get_pool(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Option<PoolUsage>, StoreError> {
        Ok(self.run.get_pool(pool_id, now).await?.outcome)
    }

    async fn slot_usage(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError> {
        self.run.slot_usage(slot_id, now).await
    }
}
