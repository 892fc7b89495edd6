//! Pools: capacities several slots draw from ([`PoolStore`]), a `remaining` per pool beside
//! each slot's, under the pool invariant `remaining + units held and confirmed on its slots =
//! capacity` (migration 4).
//!
//! Every take of a slot's units takes them from each of its pools in the same transaction, by
//! one conditional decrement per pool (`writes::take_with_pools`, and a booking's per pool for
//! all its lines on that pool's slots); every give-back gives them back to each of them
//! (`units::give_back`). Locks are taken in one order: slots' rows by ascending id, then pools'
//! by ascending id, then holds.
//!
//! A take whose pool is short even after its slot's expired holds were reclaimed must give back
//! the expired holds of the pool's other slots before it refuses; those slots may come before
//! the ones it locked, so that reclaim is a step of its own ([`reclaim_pools`]: the pools' slots
//! locked by ascending id, then their pools, then the holds), after which the take runs once
//! more. A take refused because anyone waits in a pool's line is refused outright: no reclaim
//! serves a newcomer before the line. Attaching a slot and lowering a pool's capacity, short,
//! run once more with the reclaim in their own step (the slots, then the pools, locked by
//! ascending id), so that no line is served between the reclaim and the change.
//!
//! Attaching and detaching write the slot's row (its `pool_count`, which also caps a slot's
//! pools), as every take of its units does: on a Galera cluster a take and a change of the
//! slot's pools made on two nodes conflict at certification, and one of them is retried.

use std::collections::{BTreeMap, BTreeSet};

use slot_booking::{
    async_trait, CapacityChange, Decided, NewPool, Pool, PoolChange, PoolId, PoolStore, PoolUsage,
    SlotId, StoreError, Timestamp, MAX_POOLS_PER_SLOT,
};
use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::{AssertSqlSafe, Row};

use crate::fragments::bind_capacity;
use crate::pooled::Pooled;
use crate::retry::in_transaction;
use crate::rows::to_micros;
use crate::serve::{serve, Lines};
use crate::sql::Statements;
use crate::units::{id_of, lock_pools_of, lock_slot, pools_of_slot, reclaim_locked, Step};
use crate::writes::{reclaim_slot, slot_limits, take_pool};
use crate::{map_err, MySqlStore};

/// Gives back the expired holds of every slot of `pools` (and of `slot`): those slots' rows
/// locked by ascending id, then their pools', then each slot's expired holds reclaimed (one
/// `hold_expired` event each). How many holds it reclaimed.
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
    for slot in &slots {
        lock_slot(sql, conn, SlotId(*slot)).await?;
    }
    let locked: Vec<SlotId> = slots.iter().map(|slot| SlotId(*slot)).collect();
    lock_pools_of(sql, conn, &locked).await?;
    let mut reclaimed = 0;
    let mut lines = Lines::new();
    for slot in &slots {
        reclaimed += reclaim_slot(sql, conn, SlotId(*slot), now).await?.len();
        lines.slot_and_pools(sql, conn, SlotId(*slot)).await?;
    }
    serve(sql, conn, lines, now).await?;
    Ok(Step::keep(reclaimed))
}

/// The ids of a pool's slots, ascending.
async fn slots_of_pool(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
) -> Result<Vec<i64>, StoreError> {
    sqlx::query_scalar(AssertSqlSafe(sql.pool_slots.as_str()))
        .bind(pool)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)
}

/// A row of `pool_usage` or `all_pools`, with the pool's slots.
fn usage_from_row(row: &MySqlRow, slots: Vec<SlotId>) -> Result<PoolUsage, StoreError> {
    let units = |column: &str| -> Result<i32, StoreError> {
        let sum: i64 = row.try_get(column).map_err(map_err)?;
        i32::try_from(sum).map_err(StoreError::failed)
    };
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

/// The pool `pool` with its slots and units at `now`, if it exists.
pub(crate) async fn pool_usage(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    now: Timestamp,
) -> Result<Option<PoolUsage>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(sql.pool_usage.as_str()))
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
    sqlx::query_scalar(AssertSqlSafe(sql.slot_taken_units.as_str()))
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

/// What an administrative step on a pool came to.
enum Administered {
    Done(PoolChange),
    /// The pool is short of free units: nothing changed. After the pools' reclaim it is tried
    /// once more; short again, the pool in use answers.
    Short,
}

/// Inserts a pool of `capacity` with no slot, in a step like every write (never in
/// autocommit: a connection a cancelled step left read-only by default refuses that).
async fn create(
    sql: &Statements,
    conn: &mut MySqlConnection,
    capacity: i32,
) -> Result<Step<Pool>, StoreError> {
    let inserted = sqlx::query(AssertSqlSafe(sql.create_pool.as_str()))
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

/// Locks a slot's row, then the pool's: `Some` refusal when the slot is missing (or, to
/// attach, removed) or the pool is. Detaching a removed slot is fine.
///
/// With `reclaim` (an attach the pool was short for), the rows of the pool's slots are locked
/// with the slot's, by ascending id, then every pool of those slots and the pool by ascending
/// id, and those slots' expired holds are given back: the lock order of every step, and the
/// units the pool counts free, given back before the attach takes its units.
async fn lock_slot_and_pool(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    slot_id: SlotId,
    attach: bool,
    reclaim: Option<Timestamp>,
) -> Result<Option<PoolChange>, StoreError> {
    let mut slots = BTreeSet::from([slot_id.get()]);
    if reclaim.is_some() {
        slots.extend(slots_of_pool(sql, conn, pool).await?);
    }
    let slots: Vec<SlotId> = slots.into_iter().map(SlotId).collect();
    for slot in &slots {
        lock_slot(sql, conn, *slot).await?;
    }
    let Some(limits) = slot_limits(sql, conn, slot_id).await? else {
        return Ok(Some(PoolChange::SlotNotFound));
    };
    // The pool among its slots' pools, all by ascending id. (The slots' pools are stable
    // once their rows are locked: attaching and detaching lock them first.)
    let mut pools = BTreeSet::from([pool]);
    for slot in &slots {
        pools.extend(pools_of_slot(sql, conn, *slot).await?);
    }
    let mut found = false;
    for locked in pools {
        let capacity: Option<i32> = sqlx::query_scalar(AssertSqlSafe(sql.lock_pool.as_str()))
            .bind(locked)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        found |= locked == pool && capacity.is_some();
    }
    if !found {
        return Ok(Some(PoolChange::PoolNotFound));
    }
    if attach && limits.removed {
        return Ok(Some(PoolChange::SlotNotFound));
    }
    if let Some(now) = reclaim {
        for slot in &slots {
            reclaim_locked(sql, conn, *slot, now).await?;
        }
    }
    Ok(None)
}

/// The pool as it is now in this transaction, as an applied change.
async fn applied(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    now: Timestamp,
) -> Result<Step<Administered>, StoreError> {
    let usage = pool_usage(sql, conn, pool, now)
        .await?
        .ok_or_else(|| StoreError::failed(format!("pool {pool} changed, then not found")))?;
    Ok(Step::keep(Administered::Done(PoolChange::Applied(usage))))
}

/// Attaches a live slot to a pool: its row locked, then the pool's; with `reclaim`, the
/// expired holds of the slot and of the pool's slots given back first (to their pools before
/// the new membership, see [`lock_slot_and_pool`]); the membership inserted (nothing more when it was there), the slot's count of pools moved
/// up (at most [`MAX_POOLS_PER_SLOT`]), and the units of its holds held or confirmed taken
/// from the pool. Attaching frees no units, so it serves no line; units a reclaim gave back
/// wait for the next step that serves the slot's line (or the sweeper's pass), as they would
/// have without it.
async fn attach(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    slot_id: SlotId,
    reclaim: bool,
    now: Timestamp,
) -> Result<Step<Administered>, StoreError> {
    let reclaim = reclaim.then_some(now);
    if let Some(refused) = lock_slot_and_pool(sql, conn, pool, slot_id, true, reclaim).await? {
        return Ok(Step::undo(Administered::Done(refused)));
    }
    let inserted = sqlx::query(AssertSqlSafe(sql.attach.as_str()))
        .bind(pool)
        .bind(slot_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if inserted.rows_affected() == 0 {
        return applied(sql, conn, pool, now).await;
    }
    let most = i64::try_from(MAX_POOLS_PER_SLOT).map_err(StoreError::failed)?;
    let counted = sqlx::query(AssertSqlSafe(sql.count_pool.as_str()))
        .bind(slot_id.get())
        .bind(most)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if counted.rows_affected() != 1 {
        return Ok(Step::undo(Administered::Done(PoolChange::TooManyPools)));
    }
    let units = slot_taken_units(sql, conn, slot_id).await?;
    if units > 0 && !take_pool(sql, conn, pool, units).await? {
        return Ok(Step::undo(Administered::Short));
    }
    // The slot's waiting entries join the pool's line.
    let waiting = slot_waiting(sql, conn, slot_id).await?;
    count_pool(sql, conn, pool, waiting).await?;
    applied(sql, conn, pool, now).await
}

/// Detaches a slot from a pool: its row locked, then the pool's; the membership deleted
/// (nothing more when it was not there), the slot's count of pools moved down and the units of
/// its holds held or confirmed given back to the pool.
async fn detach(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Step<Administered>, StoreError> {
    if let Some(refused) = lock_slot_and_pool(sql, conn, pool, slot_id, false, None).await? {
        return Ok(Step::undo(Administered::Done(refused)));
    }
    let deleted = sqlx::query(AssertSqlSafe(sql.detach.as_str()))
        .bind(pool)
        .bind(slot_id.get())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if deleted.rows_affected() == 0 {
        return applied(sql, conn, pool, now).await;
    }
    let uncounted = sqlx::query(AssertSqlSafe(sql.uncount_pool.as_str()))
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
    let given = sqlx::query(AssertSqlSafe(sql.give_pool.as_str()))
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
    // The answer is the change, before the serving of the slot's line and the pool's.
    let answer = applied(sql, conn, pool, now).await?;
    let mut lines = Lines::new();
    lines.slot_and_pools(sql, conn, slot_id).await?;
    lines.pool(pool);
    serve(sql, conn, lines, now).await?;
    Ok(answer)
}

/// What the conditional update of a pool's capacity came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Capacity {
    /// Set: `changed` when it differs from the one before.
    Set { changed: bool },
    /// Refused (the free units would not cover a lower capacity), or no such pool.
    Refused,
}

/// The conditional update of a pool's capacity, which takes free units only, after the pool's
/// row is locked (its capacity read then says whether the update changes it: an unchanged
/// capacity frees nothing and serves no line).
async fn set_capacity(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    change: CapacityChange,
) -> Result<Capacity, StoreError> {
    let before: Option<i32> = sqlx::query_scalar(AssertSqlSafe(sql.lock_pool.as_str()))
        .bind(pool)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let Some(before) = before else {
        return Ok(Capacity::Refused);
    };
    let set = bind_capacity(
        sqlx::query(AssertSqlSafe(sql.change_pool_capacity.as_str())),
        change,
        pool,
        2,
    )
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(match set.rows_affected() {
        1 => Capacity::Set {
            changed: !change.leaves(before),
        },
        _ => Capacity::Refused,
    })
}

/// Sets a pool's capacity, taking free units only, by one conditional update; a changed
/// capacity serves the pool's line after the answer is read.
async fn change_capacity(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    change: CapacityChange,
    now: Timestamp,
) -> Result<Step<Administered>, StoreError> {
    if let Capacity::Set { changed } = set_capacity(sql, conn, pool, change).await? {
        let answer = applied(sql, conn, pool, now).await?;
        if changed {
            let mut lines = Lines::new();
            lines.pool(pool);
            serve(sql, conn, lines, now).await?;
        }
        return Ok(answer);
    }
    // Only when the expired holds of its slots would make it fit are they given back.
    Ok(Step::undo(match pool_usage(sql, conn, pool, now).await? {
        None => Administered::Done(PoolChange::PoolNotFound),
        Some(usage)
            if change
                .applied_to(usage.pool.capacity)
                .filter(|capacity| (0..=i64::from(i32::MAX)).contains(capacity))
                .is_some_and(|capacity| {
                    i64::from(usage.available()) + capacity - i64::from(usage.pool.capacity) >= 0
                }) =>
        {
            Administered::Short
        }
        Some(usage) => Administered::Done(PoolChange::InUse(usage)),
    }))
}

/// A capacity change that the expired holds of the pool's slots would make fit: the slots'
/// rows locked by ascending id, then their pools' (lock order), their expired holds given
/// back, then the conditional update once more, and only then the lines of those slots and of
/// the pool served, so that a waiting entry served first takes none of the units the change
/// was counting on. Refused even so, nothing of it stays (the reclaim included).
async fn reclaim_then_change(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    change: CapacityChange,
    now: Timestamp,
) -> Result<Step<Administered>, StoreError> {
    let slots: Vec<SlotId> = slots_of_pool(sql, conn, pool)
        .await?
        .into_iter()
        .map(SlotId)
        .collect();
    for slot in &slots {
        lock_slot(sql, conn, *slot).await?;
    }
    lock_pools_of(sql, conn, &slots).await?;
    for slot in &slots {
        reclaim_locked(sql, conn, *slot, now).await?;
    }
    // Refused before, it changes the capacity if it is set now.
    if set_capacity(sql, conn, pool, change).await? == Capacity::Refused {
        return Ok(Step::undo(Administered::Short));
    }
    let answer = applied(sql, conn, pool, now).await?;
    let mut lines = Lines::new();
    for slot in &slots {
        lines.slot_and_pools(sql, conn, *slot).await?;
    }
    lines.pool(pool);
    serve(sql, conn, lines, now).await?;
    Ok(answer)
}

/// The pool in use, read after a refused change.
async fn in_use(store: &MySqlStore, pool: i64, now: Timestamp) -> Result<PoolChange, StoreError> {
    let mut conn = Pooled::acquire(store).await?;
    let usage = pool_usage(&store.sql, &mut conn, pool, now).await?;
    conn.done();
    Ok(match usage {
        Some(usage) => PoolChange::InUse(usage),
        None => PoolChange::PoolNotFound,
    })
}

/// Every pool with its slots and units at `now`, by id.
pub(crate) async fn all_pools(
    store: &MySqlStore,
    now: Timestamp,
) -> Result<Decided<Vec<PoolUsage>>, StoreError> {
    let sql = &store.sql;
    let mut conn = Pooled::acquire(store).await?;
    let memberships: Vec<(i64, i64)> = sqlx::query_as(AssertSqlSafe(sql.all_pool_slots.as_str()))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let mut slots: BTreeMap<i64, Vec<SlotId>> = BTreeMap::new();
    for (pool, slot) in memberships {
        slots.entry(pool).or_default().push(SlotId(slot));
    }
    let rows = sqlx::query(AssertSqlSafe(sql.all_pools.as_str()))
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

#[async_trait]
impl PoolStore for MySqlStore {
    async fn create_pool(&self, pool: &NewPool, _now: Timestamp) -> Result<Pool, StoreError> {
        in_transaction!(self, |conn| create(&self.sql, conn, pool.capacity))
    }

    async fn get_pool(
        &self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Decided<Option<PoolUsage>>, StoreError> {
        let usage = self.run().get_pool(pool_id, now).await?;
        Ok(Decided::new(now, usage))
    }

    async fn attach_slot(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let (sql, pool) = (&self.sql, pool_id.get());
        // Short, it is tried once more giving back the slot's expired holds in the same step
        // (their units are the slot's, which the pool takes).
        for reclaim in [false, true] {
            match in_transaction!(self, |conn| attach(sql, conn, pool, slot_id, reclaim, now))? {
                Administered::Done(change) => return Ok(Decided::new(now, change)),
                Administered::Short => {}
            }
        }
        Ok(Decided::new(now, in_use(self, pool, now).await?))
    }

    async fn detach_slot(
        &self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let (sql, pool) = (&self.sql, pool_id.get());
        match in_transaction!(self, |conn| detach(sql, conn, pool, slot_id, now))? {
            Administered::Done(change) => Ok(Decided::new(now, change)),
            Administered::Short => Err(StoreError::failed("detaching never takes units")),
        }
    }

    async fn change_pool_capacity(
        &self,
        pool_id: PoolId,
        capacity: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let (sql, pool) = (&self.sql, pool_id.get());
        let change =
            match in_transaction!(self, |conn| change_capacity(sql, conn, pool, capacity, now))? {
                Administered::Done(change) => change,
                Administered::Short => {
                    match in_transaction!(self, |conn| reclaim_then_change(
                        sql, conn, pool, capacity, now
                    ))? {
                        Administered::Done(change) => change,
                        Administered::Short => in_use(self, pool, now).await?,
                    }
                }
            };
        Ok(Decided::new(now, change))
    }
}
