//! Pools: capacities several slots draw from ([`PoolStore`](slot_booking::PoolStore)), a
//! `remaining` per pool beside each slot's, under the pool invariant `remaining + units held
//! and confirmed on its slots = capacity` (migration 4).
//!
//! Every take of a slot's units takes them from each of its pools in the same transaction, by
//! one conditional decrement per pool (a placement's, `place.rs`); every give-back gives them
//! back to each of them (`units::give_back`). Locks are taken in one order: slots' rows by ascending id, then pools'
//! by ascending id, then holds.
//!
//! A take whose pool is short even after its slot's expired holds were reclaimed must give back
//! the expired holds of the pool's other slots before it refuses; those slots may come before
//! the ones it locked, so that reclaim is a step of its own ([`reclaim_pools`]: the pools' slots
//! locked by ascending id, then their pools, then the holds), after which the take runs once
//! more. A take refused because anyone waits in a pool's line is refused outright: no reclaim
//! serves a newcomer before the line.
//!
//! Attaching, detaching and changing a pool's capacity follow the core's rule
//! ([`edit_pool`](slot_booking::store::edit_pool)) over this store's [`PoolKernel`]. Short
//! for units its slots' expired holds would free, a change runs once more in a step of its own
//! that reclaims them first (the slots, then the pools, locked by ascending id): the first step
//! locked the pool, and a slot locked after it would break the lock order.
//!
//! Attaching and detaching write the slot's row (its `pool_count`, which also caps a slot's
//! pools), as every take of its units does: on a Galera cluster a take and a change of the
//! slot's pools made on two nodes conflict at certification, and one of them is retried.

use std::collections::{BTreeMap, BTreeSet};

use slot_booking::store::{Kernel as _, Membership, PoolEdit, PoolKernel};
use slot_booking::{
    async_trait, CapacityChange, Decided, Hold, Pool, PoolId, PoolUsage, SlotId, StoreError,
    Timestamp, MAX_POOLS_PER_SLOT,
};
use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::{AssertSqlSafe, Row};

use crate::fragments::bind_capacity;
use crate::kernel::Kernel;
use crate::pooled::Pooled;
use crate::rows::{to_micros, Cols};
use crate::serve::{serve, Lines};
use crate::sql::Statements;
use crate::units::{id_of, lock_slot, pools_of_slot, reclaim_locked, Step};
use crate::writes::{slot_limits, take_pool};
use crate::{map_err, MySqlStore};

/// Gives back the expired holds of every slot of `pools` (and of `slot`), in a step of its own
/// ([`reclaim_slots`]), then serves those slots' lines and their pools'. How many holds it
/// reclaimed.
pub(crate) async fn reclaim_pools(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pools: &[i64],
    slot: Option<SlotId>,
    now: Timestamp,
) -> Result<Step<usize>, StoreError> {
    let mut slots: BTreeSet<i64> = slot.map(SlotId::get).into_iter().collect();
    for pool in pools {
        slots.extend(slots_of_pool(sql, conn, *pool).await?);
    }
    let reclaimed = reclaim_slots(sql, conn, &slots, None, now).await?;
    let mut lines = Lines::new();
    for slot in &slots {
        lines.slot_and_pools(sql, conn, SlotId(*slot)).await?;
    }
    serve(sql, conn, lines, now).await?;
    Ok(Step::keep(reclaimed.len()))
}

/// Gives back the expired holds of `slots`: their rows locked by ascending id, then their
/// pools' and `pool`'s by ascending id (the lock order), then each slot's expired holds
/// reclaimed (one `hold_expired` event each). The holds reclaimed.
async fn reclaim_slots(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slots: &BTreeSet<i64>,
    pool: Option<i64>,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    for slot in slots {
        lock_slot(sql, conn, SlotId(*slot)).await?;
    }
    let mut pools: BTreeSet<i64> = pool.into_iter().collect();
    for slot in slots {
        pools.extend(pools_of_slot(sql, conn, SlotId(*slot)).await?);
    }
    for pool in pools {
        sqlx::query(AssertSqlSafe(sql.pools.lock_pool.as_str()))
            .bind(pool)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    }
    let mut reclaimed = Vec::new();
    for slot in slots {
        reclaimed.extend(reclaim_locked(sql, conn, SlotId(*slot), now).await?);
    }
    Ok(reclaimed)
}

/// The ids of a pool's slots, ascending.
async fn slots_of_pool(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
) -> Result<Vec<i64>, StoreError> {
    sqlx::query_scalar(AssertSqlSafe(sql.pools.pool_slots.as_str()))
        .bind(pool)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)
}

/// A row of `pool_usage` or `all_pools`, with the pool's slots.
fn usage_from_row(row: &MySqlRow, slots: Vec<SlotId>) -> Result<PoolUsage, StoreError> {
    slot_booking::store::pool_usage_of(&Cols(row), slots)
}

/// The pool `pool` with its slots and units at `now`, if it exists.
pub(crate) async fn pool_usage(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    now: Timestamp,
) -> Result<Option<PoolUsage>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(sql.pools.pool_usage.as_str()))
        .bind(to_micros(now))
        .bind(to_micros(now))
        .bind(pool)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let slots = slots_of_pool(sql, conn, pool).await?;
    usage_from_row(&row, slots.into_iter().map(SlotId).collect()).map(Some)
}

/// The units of a slot's holds stored as held or confirmed: what it takes from a pool.
async fn slot_taken_units(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<i64, StoreError> {
    sqlx::query_scalar(AssertSqlSafe(sql.pools.slot_taken_units.as_str()))
        .bind(slot_id.get())
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)
}

/// The count of a slot's waiting entries.
async fn slot_waiting(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<i64, StoreError> {
    let waiting: Option<i32> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT waiting FROM {} WHERE id = ?",
        sql.slots
    )))
    .bind(slot_id.get())
    .fetch_optional(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(i64::from(waiting.unwrap_or(0)))
}

/// Moves a pool's count of waiting entries by `change`.
async fn count_pool(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    change: i64,
) -> Result<(), StoreError> {
    sqlx::query(AssertSqlSafe(sql.waitlists.count_pool.as_str()))
        .bind(change)
        .bind(pool)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// Inserts a pool of `capacity` with no slot, in a step like every write (never in
/// autocommit: a connection a cancelled step left read-only by default refuses that).
pub(crate) async fn create(
    sql: &Statements,
    conn: &mut MySqlConnection,
    capacity: i32,
) -> Result<Step<Pool>, StoreError> {
    let inserted = sqlx::query(AssertSqlSafe(sql.pools.create_pool.as_str()))
        .bind(capacity)
        .bind(capacity)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(Step::keep(Pool {
        pool_id: PoolId(id_of(inserted)?),
        capacity,
        stored_remaining: capacity,
        slots: Vec::new(),
    }))
}

/// Locks a slot's row, then its pools' and the pool's, by ascending id: `false` when the slot
/// is missing (or, to attach, removed) or the pool is. Detaching a removed slot is fine.
async fn lock_slot_and_pool(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    slot_id: SlotId,
    attach: bool,
) -> Result<bool, StoreError> {
    lock_slot(sql, conn, slot_id).await?;
    let Some(limits) = slot_limits(sql, conn, slot_id).await? else {
        return Ok(false);
    };
    // The pool among the slot's pools, all by ascending id. (The slot's pools are stable once
    // its row is locked: attaching and detaching lock it first.)
    let mut pools = BTreeSet::from([pool]);
    pools.extend(pools_of_slot(sql, conn, slot_id).await?);
    let mut found = false;
    for locked in pools {
        let capacity: Option<i32> = sqlx::query_scalar(AssertSqlSafe(sql.pools.lock_pool.as_str()))
            .bind(locked)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        found |= locked == pool && capacity.is_some();
    }
    Ok(found && !(attach && limits.removed))
}

/// Attaches a live slot to a pool, its row locked, then the pool's (with the slot's other
/// pools): the membership inserted, the slot's count of pools moved up (at most
/// [`MAX_POOLS_PER_SLOT`]), the units of its holds held or confirmed taken from the pool and
/// its waiting entries counted in the pool's line. `false`, with nothing written, when any of
/// it is refused.
async fn attach(kernel: &mut Kernel<'_>, pool: i64, slot_id: SlotId) -> Result<bool, StoreError> {
    let sql = kernel.sql;
    if !lock_slot_and_pool(sql, kernel.conn, pool, slot_id, true).await? {
        return Ok(false);
    }
    kernel.begin_nested().await?;
    let attached = try_attach(sql, kernel.conn, pool, slot_id).await?;
    kernel.end_nested(attached).await?;
    Ok(attached)
}

/// [`attach`]'s writes, in its nested unit: whether they all applied.
async fn try_attach(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    slot_id: SlotId,
) -> Result<bool, StoreError> {
    let inserted = sqlx::query(AssertSqlSafe(sql.pools.attach.as_str()))
        .bind(pool)
        .bind(slot_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if inserted.rows_affected() == 0 {
        return Ok(false);
    }
    let most = i64::try_from(MAX_POOLS_PER_SLOT).map_err(StoreError::failed)?;
    let counted = sqlx::query(AssertSqlSafe(sql.pools.count_pool.as_str()))
        .bind(slot_id.get())
        .bind(most)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if counted.rows_affected() != 1 {
        return Ok(false);
    }
    let units = slot_taken_units(sql, conn, slot_id).await?;
    if units > 0 && !take_pool(sql, conn, pool, units).await? {
        return Ok(false);
    }
    // The slot's waiting entries join the pool's line.
    let waiting = slot_waiting(sql, conn, slot_id).await?;
    count_pool(sql, conn, pool, waiting).await?;
    Ok(true)
}

/// Detaches a slot from a pool, its row locked, then the pool's: the membership deleted, the
/// slot's count of pools moved down, the units of its holds held or confirmed given back to
/// the pool and its waiting entries out of the pool's line. `false` when it was not attached.
async fn detach(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    slot_id: SlotId,
) -> Result<bool, StoreError> {
    if !lock_slot_and_pool(sql, conn, pool, slot_id, false).await? {
        return Ok(false);
    }
    let deleted = sqlx::query(AssertSqlSafe(sql.pools.detach.as_str()))
        .bind(pool)
        .bind(slot_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if deleted.rows_affected() == 0 {
        return Ok(false);
    }
    let uncounted = sqlx::query(AssertSqlSafe(sql.pools.uncount_pool.as_str()))
        .bind(slot_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if uncounted.rows_affected() != 1 {
        return Err(StoreError::failed(format!(
            "slot {slot_id} was attached to pool {pool} but counts no pool"
        )));
    }
    let units = slot_taken_units(sql, conn, slot_id).await?;
    let given = sqlx::query(AssertSqlSafe(sql.pools.give_pool.as_str()))
        .bind(units)
        .bind(pool)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if given.rows_affected() != 1 {
        return Err(StoreError::failed(format!("pool {pool} is gone")));
    }
    let waiting = slot_waiting(sql, conn, slot_id).await?;
    count_pool(sql, conn, pool, -waiting).await?;
    Ok(true)
}

/// The conditional update of a pool's capacity, which takes free units only, after the pool's
/// row is locked: `true` when it set a capacity the pool did not have already.
async fn change_capacity(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    change: CapacityChange,
) -> Result<bool, StoreError> {
    let before: Option<i32> = sqlx::query_scalar(AssertSqlSafe(sql.pools.lock_pool.as_str()))
        .bind(pool)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    match before {
        Some(before) if !change.leaves(before) => {}
        _ => return Ok(false),
    }
    let set = bind_capacity(
        sqlx::query(AssertSqlSafe(sql.pools.change_pool_capacity.as_str())),
        change,
        pool,
        2,
    )
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(set.rows_affected() == 1)
}

/// The pool's primitives of a unit of work, on which the core's rule
/// ([`edit_pool`](slot_booking::store::edit_pool)) changes a pool.
#[async_trait]
impl PoolKernel for Kernel<'_> {
    async fn pool_usage(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Option<PoolUsage>, StoreError> {
        pool_usage(self.sql, self.conn, pool_id.get(), now).await
    }

    async fn membership(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
    ) -> Result<Membership, StoreError> {
        let (slot, pool) = (slot_id.get(), pool_id.get());
        let (slot_stored, pool_stored, slot_live, attached, pools_of_slot): (
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = sqlx::query_as(AssertSqlSafe(self.sql.pools.membership.as_str()))
            .bind(slot)
            .bind(pool)
            .bind(slot)
            .bind(slot)
            .bind(pool)
            .bind(slot)
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        Ok(Membership {
            slot_stored: slot_stored != 0,
            slot_live: slot_live != 0,
            pool: pool_stored != 0,
            attached: attached != 0,
            pools_of_slot: usize::try_from(pools_of_slot).map_err(StoreError::failed)?,
        })
    }

    async fn update_pool(
        &mut self,
        pool_id: PoolId,
        edit: PoolEdit,
        _now: Timestamp,
    ) -> Result<bool, StoreError> {
        let pool = pool_id.get();
        match edit {
            PoolEdit::Attach(slot_id) => attach(self, pool, slot_id).await,
            PoolEdit::Detach(slot_id) => detach(self.sql, self.conn, pool, slot_id).await,
            PoolEdit::Capacity(change) => change_capacity(self.sql, self.conn, pool, change).await,
        }
    }

    async fn reclaim_pool(
        &mut self,
        pool_id: PoolId,
        also: Option<SlotId>,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError> {
        let (sql, pool) = (self.sql, pool_id.get());
        let mut slots: BTreeSet<i64> = also.map(SlotId::get).into_iter().collect();
        slots.extend(slots_of_pool(sql, self.conn, pool).await?);
        reclaim_slots(sql, self.conn, &slots, Some(pool), now).await
    }
}

/// Every pool with its slots and units at `now`, by id.
pub(crate) async fn all_pools(
    store: &MySqlStore,
    now: Timestamp,
) -> Result<Decided<Vec<PoolUsage>>, StoreError> {
    let sql = &store.sql;
    let mut conn = Pooled::acquire(store).await?;
    let memberships: Vec<(i64, i64)> =
        sqlx::query_as(AssertSqlSafe(sql.pools.all_pool_slots.as_str()))
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
    let mut slots: BTreeMap<i64, Vec<SlotId>> = BTreeMap::new();
    for (pool, slot) in memberships {
        slots.entry(pool).or_default().push(SlotId(slot));
    }
    let rows = sqlx::query(AssertSqlSafe(sql.pools.all_pools.as_str()))
        .bind(to_micros(now))
        .bind(to_micros(now))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    conn.done();
    let mut pools = Vec::with_capacity(rows.len());
    for row in &rows {
        let id: i64 = row.try_get("id").map_err(map_err)?;
        pools.push(usage_from_row(row, slots.remove(&id).unwrap_or_default())?);
    }
    Ok(Decided::new(now, pools))
}
