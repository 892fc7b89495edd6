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
    CapacityChange, Decided, Hold, NewPool, Pool, PoolChange, PoolId, PoolUsage, SlotId, SlotUsage,
    StoreError, Timestamp, TransactionPools, MAX_POOLS_PER_SLOT,
};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Row};

use crate::map_err;
use crate::rows::{to_micros, usage_from_row};
use crate::sql::{Statements, TablePrefix, CAPACITY_AFTER, HOLD_COLUMNS};
use crate::transaction::SqliteWrites;
use crate::units::{reclaim, reclaim_by};
use crate::waitlists::{serve_lines, Lines};
use crate::writes::{Run, Step};

/// The pools' statements, with this store's table names.
#[derive(Debug)]
pub(crate) struct PoolStatements {
    create_pool: String,
    pool_usage: String,
    every_pool: String,
    give_back: String,
    pub(crate) pools_of_slot: String,
    reclaim_pool: String,
    reclaim_short_pools: String,
    attach: String,
    add_member: String,
    attach_refusal: String,
    detach: String,
    detach_give_back: String,
    change_capacity: String,
}

impl PoolStatements {
    pub(crate) fn new(prefix: &TablePrefix) -> Self {
        let slots = format!("{prefix}slots");
        let holds = format!("{prefix}holds");
        let pools = format!("{prefix}pools");
        let slot_pools = format!("{prefix}slot_pools");
        // A pool's units stored as held over its slots, split at ?1 (now) into active and
        // expired (each sum one range of `slot_pools_by_pool`, then of the partial index over
        // held holds per slot), and its slots (sorted when decoded).
        let held = |cmp: &str| {
            format!(
                "(SELECT coalesce(SUM(h.quantity), 0) FROM {slot_pools} sp \
                  JOIN {holds} h ON h.slot_id = sp.slot_id \
                  WHERE sp.pool_id = p.id AND h.status = 'held' AND h.expires_at {cmp} ?1)"
            )
        };
        let usage = format!(
            "SELECT p.id, p.capacity, p.remaining, {} AS held, {} AS expired, \
                    (SELECT group_concat(sp.slot_id) FROM {slot_pools} sp \
                     WHERE sp.pool_id = p.id) AS slots \
             FROM {pools} p",
            held(">"),
            held("<=")
        );
        // The taken units of the slot ?1 (held, expired not reclaimed, confirmed): its
        // capacity less its `remaining`, by the slot's own invariant; NULL for a removed slot
        // or none.
        let taken = format!(
            "(SELECT capacity - remaining FROM {slots} WHERE id = ?1 AND removed_at IS NULL)"
        );
        PoolStatements {
            // ?1 capacity, ?2 now.
            create_pool: format!(
                "INSERT INTO {pools} (capacity, remaining, created_at) VALUES (?1, ?1, ?2) \
                 RETURNING id, capacity, remaining"
            ),
            // ?1 now, ?2 pool id.
            pool_usage: format!("{usage} WHERE p.id = ?2"),
            // ?1 now: every pool, by id. No pool, no row: one look at an empty table.
            every_pool: format!("{usage} ORDER BY p.id"),
            // ?1 units, ?2 slot id: the units a slot got back, given back to its pools.
            give_back: format!(
                "UPDATE {pools} SET remaining = remaining + ?1 \
                 WHERE id IN (SELECT pool_id FROM {slot_pools} WHERE slot_id = ?2)"
            ),
            // ?1 slot id.
            pools_of_slot: format!(
                "SELECT pool_id FROM {slot_pools} WHERE slot_id = ?1 ORDER BY pool_id"
            ),
            // ?1 slot id, ?2 now, ?3 units: the expired held holds of the slots of the slot's
            // pools that have fewer than ?3 units (a hold's or line's insert aborted by one of
            // them), if the slot is selling.
            reclaim_short_pools: format!(
                "UPDATE {holds} SET status = 'expired' \
                 WHERE slot_id IN (SELECT o.slot_id FROM {slot_pools} m \
                                   JOIN {pools} p ON p.id = m.pool_id AND p.remaining < ?3 \
                                   JOIN {slot_pools} o ON o.pool_id = m.pool_id \
                                   WHERE m.slot_id = ?1) \
                   AND status = 'held' AND expires_at <= ?2 \
                   AND EXISTS (SELECT 1 FROM {slots} WHERE id = ?1 AND starts_at > ?2 \
                                 AND closed = 0 AND removed_at IS NULL) \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 pool id, ?2 now: the expired held holds of the pool's slots.
            reclaim_pool: format!(
                "UPDATE {holds} SET status = 'expired' \
                 WHERE status = 'held' AND expires_at <= ?2 \
                   AND slot_id IN (SELECT slot_id FROM {slot_pools} WHERE pool_id = ?1) \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // ?1 slot id, ?2 pool id, ?3 most pools per slot: the slot's taken units taken
            // from the pool, only for a live slot not yet attached and in fewer than ?3
            // pools, where the pool has them free.
            attach: format!(
                "UPDATE {pools} SET remaining = remaining - {taken} \
                 WHERE id = ?2 AND remaining >= {taken} \
                   AND NOT EXISTS (SELECT 1 FROM {slot_pools} \
                                   WHERE slot_id = ?1 AND pool_id = ?2) \
                   AND (SELECT count(*) FROM {slot_pools} WHERE slot_id = ?1) < ?3"
            ),
            add_member: format!("INSERT INTO {slot_pools} (slot_id, pool_id) VALUES (?1, ?2)"),
            // ?1 slot id, ?2 pool id: why `attach` changed no row (or `detach` deleted none).
            attach_refusal: format!(
                "SELECT EXISTS (SELECT 1 FROM {slots} WHERE id = ?1), \
                        EXISTS (SELECT 1 FROM {pools} WHERE id = ?2), \
                        EXISTS (SELECT 1 FROM {slots} WHERE id = ?1 AND removed_at IS NULL), \
                        EXISTS (SELECT 1 FROM {slot_pools} WHERE slot_id = ?1 AND pool_id = ?2), \
                        (SELECT count(*) FROM {slot_pools} WHERE slot_id = ?1)"
            ),
            // ?1 slot id, ?2 pool id.
            detach: format!("DELETE FROM {slot_pools} WHERE slot_id = ?1 AND pool_id = ?2"),
            detach_give_back: format!(
                "UPDATE {pools} SET remaining = remaining + \
                     (SELECT capacity - remaining FROM {slots} WHERE id = ?1) \
                 WHERE id = ?2"
            ),
            // ?1 pool id, ?2 keep, ?3 add, ?4 expected: as a slot's (`change_capacity` in
            // sql.rs), the capacity after it in 0..=i32::MAX.
            change_capacity: format!(
                "UPDATE {pools} SET capacity = {CAPACITY_AFTER}, \
                     remaining = remaining + ({CAPACITY_AFTER} - capacity) \
                 WHERE id = ?1 AND (?4 IS NULL OR capacity = ?4) \
                   AND {CAPACITY_AFTER} <> capacity \
                   AND {CAPACITY_AFTER} BETWEEN 0 AND 2147483647 \
                   AND remaining + ({CAPACITY_AFTER} - capacity) >= 0 \
                 RETURNING id"
            ),
        }
    }
}

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

/// Gives `units` a slot got back to each of its pools (see
/// [`units::give_back`](crate::units::give_back), which calls it for a slot of some pool).
pub(crate) async fn give_back(
    sql: &Statements,
    conn: &mut SqliteConnection,
    units: i64,
    slot_id: i64,
) -> Result<(), StoreError> {
    sqlx::query(AssertSqlSafe(sql.pools.give_back.as_str()))
        .bind(units)
        .bind(slot_id)
        .execute(conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// For a hold (or a booking's line) of `quantity` units on `slot_id` that a pool refused after
/// the slot's own expired holds were reclaimed: reclaims the expired holds of every slot of
/// the slot's pools short of `quantity`, giving them back to their slots and all their pools.
/// The caller's unit of work is rolled back, and this with it, if it is refused all the same.
/// Returns the holds reclaimed.
pub(crate) async fn reclaim_short_pools(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: i64,
    quantity: i32,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let update = sqlx::query(AssertSqlSafe(sql.pools.reclaim_short_pools.as_str()))
        .bind(slot_id)
        .bind(to_micros(now))
        .bind(quantity);
    reclaim_by(sql, conn, update, now).await
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
        sqlx::query(AssertSqlSafe(sql.slot_usage.as_str()))
            .bind(to_micros(now))
            .bind(slot_id.get())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?
            .as_ref()
            .map(usage_from_row)
            .transpose()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pool_statement_names_only_prefixed_tables() {
        let sql = PoolStatements::new(&TablePrefix::new("zz_").unwrap());
        let PoolStatements {
            create_pool,
            pool_usage,
            every_pool,
            give_back,
            pools_of_slot,
            reclaim_pool,
            reclaim_short_pools,
            attach,
            add_member,
            attach_refusal,
            detach,
            detach_give_back,
            change_capacity,
        } = &sql;
        for statement in [
            create_pool,
            pool_usage,
            every_pool,
            give_back,
            pools_of_slot,
            reclaim_pool,
            reclaim_short_pools,
            attach,
            add_member,
            attach_refusal,
            detach,
            detach_give_back,
            change_capacity,
        ] {
            assert!(statement.contains("zz_"), "{statement}");
            for table in ["slots", "holds", "pools", "slot_pools"] {
                for verb in ["FROM", "JOIN", "INTO", "UPDATE"] {
                    let bare = format!("{verb} {table} ");
                    assert!(!statement.contains(&bare), "{statement}");
                }
            }
        }
    }
}
