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
//! * **Administration**: attaching, detaching and changing a pool's capacity follow the
//!   core's rule ([`edit_pool`](slot_booking::store::edit_pool)) over this store's
//!   [`PoolKernel`]: conditional updates decided by the rows they changed, a refusal explained
//!   by reads in the same unit of work, and a pool short for units its slots' expired holds
//!   would free tried once more, reclaiming them first.
//!
//! SQLite admits one writer at a time, so no two of these interleave; give-backs still run by
//! slot id ascending, as the PostgreSQL store locks.

use std::sync::Arc;

use async_trait::async_trait;
use slot_booking::store::{self, Membership, PoolEdit, PoolKernel};
use slot_booking::{
    CapacityChange, Decided, Hold, NewPool, Pool, PoolId, PoolUsage, SlotId, SlotUsage, StoreError,
    Timestamp, TransactionPools, MAX_POOLS_PER_SLOT,
};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Row};

use crate::kernel::Kernel;
use crate::map_err;
use crate::rows::{to_micros, Cols};
use crate::run::{Run, Step};
use crate::sql::Statements;
use crate::transaction::SqliteWrites;
use crate::units::reclaim;

/// A row of `pool_usage` or `every_pool`: its slots listed in one column, by commas.
fn pool_usage_from_row(row: &SqliteRow) -> Result<PoolUsage, StoreError> {
    let listed: Option<String> = row.try_get("slots").map_err(map_err)?;
    let slots = listed
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|id| !id.is_empty())
        .map(|id| id.parse::<i64>().map(SlotId).map_err(StoreError::failed))
        .collect::<Result<Vec<_>, _>>()?;
    store::pool_usage_of(&Cols(row), slots)
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

/// Takes the slot's taken units from the pool and records the slot as the pool's: `true`
/// when the conditional update changed the pool.
async fn attach(
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

/// Deletes the membership, then gives the slot's taken units back to the pool: `true` when
/// the slot was the pool's.
async fn detach(
    sql: &Statements,
    conn: &mut SqliteConnection,
    pool_id: PoolId,
    slot_id: SlotId,
) -> Result<bool, StoreError> {
    let deleted = sqlx::query(AssertSqlSafe(sql.pools.detach.as_str()))
        .bind(slot_id.get())
        .bind(pool_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if deleted.rows_affected() == 0 {
        return Ok(false);
    }
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
    Ok(true)
}

/// The conditional update of a pool's capacity: `true` when it changed it.
async fn change_capacity(
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

/// The pool's primitives of a unit of work, on which the core's rule
/// ([`edit_pool`](slot_booking::store::edit_pool)) changes a pool. SQLite's one writer holds
/// the write lock: no lock order to keep.
#[async_trait]
impl PoolKernel for Kernel<'_> {
    async fn pool_usage(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Option<PoolUsage>, StoreError> {
        pool_usage(self.sql, self.conn, pool_id, now).await
    }

    async fn membership(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
    ) -> Result<Membership, StoreError> {
        let (slot_stored, pool, slot_live, attached, pools_of_slot): (bool, bool, bool, bool, i64) =
            sqlx::query_as(AssertSqlSafe(self.sql.pools.membership.as_str()))
                .bind(slot_id.get())
                .bind(pool_id.get())
                .fetch_one(&mut *self.conn)
                .await
                .map_err(map_err)?;
        Ok(Membership {
            slot_stored,
            slot_live,
            pool,
            attached,
            pools_of_slot: usize::try_from(pools_of_slot).map_err(StoreError::failed)?,
        })
    }

    async fn update_pool(
        &mut self,
        pool_id: PoolId,
        edit: PoolEdit,
        _now: Timestamp,
    ) -> Result<bool, StoreError> {
        let (sql, conn) = (self.sql, &mut *self.conn);
        match edit {
            PoolEdit::Attach(slot_id) => attach(sql, conn, pool_id, slot_id).await,
            PoolEdit::Detach(slot_id) => detach(sql, conn, pool_id, slot_id).await,
            PoolEdit::Capacity(change) => change_capacity(sql, conn, pool_id, change).await,
        }
    }

    async fn reclaim_pool(
        &mut self,
        pool_id: PoolId,
        also: Option<SlotId>,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError> {
        let (sql, conn) = (self.sql, &mut *self.conn);
        let mut reclaimed = match also {
            Some(slot_id) => reclaim(sql, &sql.reclaim_expired, conn, slot_id.get(), now).await?,
            None => Vec::new(),
        };
        reclaimed.extend(reclaim(sql, &sql.pools.reclaim_pool, conn, pool_id.get(), now).await?);
        Ok(reclaimed)
    }
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
