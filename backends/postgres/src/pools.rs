//! Pools ([`PoolStore`](slot_booking::PoolStore)): capacities several slots draw from. Their
//! statements and the pieces of SQL every unit-moving statement of the store uses for them,
//! beside the code that runs them on the one write path ([`Run`]).
//!
//! # Storage
//!
//! `pools` keeps each pool's `capacity` and `remaining` (migration 10), under the invariant
//! `remaining + units held (expired included until reclaimed) + units confirmed = capacity`
//! over the holds of its slots. Which slots draw from a pool is in `slot_pools` (read by
//! pool) and, the same list, on each slot's own row (`slots.pools`), both written by attach
//! and detach under the slot row's lock. Every statement that moves units of a slot moves
//! them for the pools named on the slot row *as it locked it* (its latest version), never for
//! `slot_pools` read at the statement's snapshot: in READ COMMITTED that snapshot can predate
//! an attach that committed while the statement waited for the slot's lock, and the pool
//! would miss the units.
//!
//! # Lock order
//!
//! Slot rows first, by id ascending, then pool rows by id ascending (`SELECT ... FROM pools
//! WHERE id ... ORDER BY id FOR NO KEY UPDATE`, the sort below the row locks, reading ids
//! only from slot rows already locked), in every statement: a hold, a booking, a cancel, the
//! reclaims, attach and detach. Hold rows are locked only under their slot's row lock (or by
//! a confirm or renewal, which holds nothing else), so where they come relative to pools does
//! not matter. A capacity change of a pool locks that pool row alone; its reclaiming step
//! locks the pool's slots first. No statement holds a pool row while it waits for a slot row,
//! so there is no cycle: a deadlock is a bug here, not a retry. Serving a pool's line after a
//! statement that holds the pool row (a pool capacity change, a detach, the serving trigger)
//! needs the head's slot row and its other pools: those it takes with `SKIP LOCKED`, never
//! waiting (migration 12, `waitlists.rs`).
//!
//! # Short in a pool
//!
//! A hold or booking refused only because a pool is short, when expired holds of *other*
//! slots of that pool would make room, cannot reclaim them in its own statement without
//! locking those slots after its own (out of order). It is refused; then one statement of
//! its own ([`PoolStatements::reclaim`], a transaction by itself on the pool) locks the
//! slots with expired holds of the short pools by id, then their pools, marks those holds
//! expired, gives their units back to slots and pools with one `hold_expired` event each,
//! and commits; and the hold or booking is tried once more. Those units were free already,
//! so availability is the same either way (as with the reclaim a booking keeps when a clock
//! skewed the estimate). Inside a caller's transaction the refused statement is rolled back
//! to its savepoint first, so the reclaim's locks are taken in order there too (after
//! whatever the caller's transaction already holds).

use slot_booking::{
    CapacityChange, NewPool, Pool, PoolChange, PoolId, PoolUsage, MAX_POOLS_PER_SLOT,
};
use sqlx::Connection;

use super::*;
use crate::writes::Insert;

/// A pool and its units of a row of `get` or `all` (`None`: the one row of no pool).
pub(crate) fn usage_from(row: &PgRow) -> Result<Option<PoolUsage>, StoreError> {
    let Some(id) = row_id(row)? else {
        return Ok(None);
    };
    let slots: Vec<i64> = row.try_get("slots").map_err(map_err)?;
    Ok(Some(PoolUsage {
        pool: Pool {
            pool_id: PoolId(id),
            capacity: row.try_get("capacity").map_err(map_err)?,
            stored_remaining: row.try_get("remaining").map_err(map_err)?,
            slots: slots.into_iter().map(SlotId).collect(),
        },
        held: row.try_get("held").map_err(map_err)?,
        expired: row.try_get("expired").map_err(map_err)?,
    }))
}

/// Serves the lines of `slots` and `pools` at `now` (NULL: the database's clock) on `conn`,
/// in its transaction: the entries offered.
async fn serve_lines(
    conn: &mut PgConnection,
    statement: &str,
    slots: &[i64],
    pools: &[i64],
    now: Option<Timestamp>,
) -> Result<Vec<i64>, StoreError> {
    sqlx::query_scalar(AssertSqlSafe(statement))
        .bind(slots)
        .bind(pools)
        .bind(now)
        .fetch_one(conn)
        .await
        .map_err(map_err)
}

/// On `conn`, in its transaction (which must be one: the deferral is the transaction's): the
/// step that gives back the expired holds of the slots of
/// `pools` and of `slots` (locks in the global order), with the serving trigger deferred
/// (`slot_booking.defer_serving`, migration 12). The reclaims a write makes only to make room
/// for itself (a hold's or a booking's pool refill, a pool capacity change's, an attach's)
/// serve no line, as in the model; the change that follows is decided on the units they gave
/// back. The units given back.
async fn reclaim_deferred(
    conn: &mut PgConnection,
    inner: &Inner,
    pools: &[i64],
    slots: &[i64],
    now: Option<Timestamp>,
) -> Result<i64, StoreError> {
    (&mut *conn).execute(DEFER_SERVING).await.map_err(map_err)?;
    let row = sqlx::query(AssertSqlSafe(inner.pools.reclaim.as_str()))
        .bind(pools)
        .bind(now)
        .bind(slots)
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    (&mut *conn).execute(SERVE_AGAIN).await.map_err(map_err)?;
    row.try_get("reclaimed").map_err(map_err)
}

/// Pool `pool_id` and its units, read on `conn` at `now` (NULL: the database's clock).
async fn read_pool(
    conn: &mut PgConnection,
    inner: &Inner,
    pool_id: PoolId,
    now: Option<Timestamp>,
) -> Result<Decided<Option<PoolUsage>>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(inner.pools.get.as_str()))
        .bind(pool_id.get())
        .bind(now)
        .fetch_one(conn)
        .await
        .map_err(map_err)?;
    decided(&row, usage_from(&row)?)
}

/// Defers the serving trigger's work for the rest of the transaction (or until
/// [`SERVE_AGAIN`]).
const DEFER_SERVING: &str = "SELECT set_config('slot_booking.defer_serving', 'on', true)";

/// Ends [`DEFER_SERVING`].
const SERVE_AGAIN: &str = "SELECT set_config('slot_booking.defer_serving', 'off', true)";

/// How many times the sweeper's pass serves one pool's head before it moves on (each offer
/// may make the next head ready; the lines themselves bound it).
const SWEEP_ROUNDS: usize = 64;

impl PostgresStore {
    /// The sweeper's pass over the pools' lines (after `reclaim_expired`): for each pool some
    /// entry of whose slots waits, its head's rows taken in the lock order and its lines served,
    /// each in a statement (a transaction) of its own, again while that offers something.
    pub(crate) async fn serve_pool_lines(&self, now: Timestamp) -> Result<(), StoreError> {
        let statements = &self.inner.pools;
        let pools: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(statements.waiting_pools.as_str()))
            .fetch_all(self.pool())
            .await
            .map_err(map_err)?;
        let now = self.now_param(now);
        for pool in pools {
            for _ in 0..SWEEP_ROUNDS {
                let offered: Vec<i64> =
                    sqlx::query_scalar(AssertSqlSafe(statements.serve_head.as_str()))
                        .bind(pool)
                        .bind(now)
                        .fetch_one(self.pool())
                        .await
                        .map_err(map_err)?;
                if offered.is_empty() {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// What the reclaiming hold statement did.
enum Reclaimed {
    /// Took the units, or found none; the statement says which.
    Done(Insert),
    /// The slot had the units but these pools did not.
    PoolsShort(Vec<i64>),
}

impl Run<'_> {
    pub(crate) fn pool_sql(&self) -> Arc<Inner> {
        Arc::clone(&self.store.inner)
    }

    /// The reclaiming hold statement, and when only pools were short, the step that gives
    /// back their slots' expired holds and the statement once more. `savepoint`: the hold
    /// runs under the hold savepoint on the caller's connection, rolled back before that step
    /// so its locks are taken in order.
    pub(crate) async fn hold_reclaiming(
        &mut self,
        request: &HoldRequest<'_>,
        savepoint: bool,
    ) -> Result<Insert, StoreError> {
        let short = match self.try_hold_reclaim(request).await? {
            Reclaimed::Done(insert) => return Ok(insert),
            Reclaimed::PoolsShort(short) => short,
        };
        if savepoint {
            self.conn
                .get()
                .await?
                .execute("ROLLBACK TO SAVEPOINT slot_booking_hold")
                .await
                .map_err(map_err)?;
        }
        if self.reclaim_pools(&short, &[], request.now).await? == 0 {
            return Ok(Insert::NoUnit);
        }
        match self.try_hold_reclaim(request).await? {
            Reclaimed::Done(insert) => Ok(insert),
            Reclaimed::PoolsShort(_) => Ok(Insert::NoUnit),
        }
    }

    async fn try_hold_reclaim(
        &mut self,
        request: &HoldRequest<'_>,
    ) -> Result<Reclaimed, StoreError> {
        let inner = self.pool_sql();
        let lifetime = request.expires_at - request.now;
        let inserted = sqlx::query(AssertSqlSafe(inner.sql.hold_reclaim.as_str()))
            .bind(request.slot_id.get())
            .bind(request.key.as_str())
            .bind(self.now_param(request.now))
            .bind(interval(lifetime)?)
            .bind(request.quantity)
            .bind(request.owner.map(OwnerId::as_str))
            .fetch_optional(self.conn.get().await?)
            .await;
        let row = match inserted {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(Reclaimed::Done(Insert::NoUnit)),
            Err(error) if is_unique_violation(&error) => {
                return Ok(Reclaimed::Done(Insert::KeyTaken))
            }
            Err(error) => return Err(map_err(error)),
        };
        if crate::writes::took(&row)? {
            return Ok(Reclaimed::Done(Insert::Created(decided(
                &row,
                hold_from_row(&row)?,
            )?)));
        }
        let slot_fits: bool = row.try_get("slot_fits").map_err(map_err)?;
        let short: Vec<i64> = row.try_get("short_pools").map_err(map_err)?;
        Ok(if slot_fits && !short.is_empty() {
            Reclaimed::PoolsShort(short)
        } else {
            Reclaimed::Done(Insert::NoUnit)
        })
    }

    /// The step of its own that gives back the expired holds of the slots of `pools` and of
    /// `slots` ([`reclaim_deferred`], in a transaction of its own on the pool): the units it
    /// gave back.
    pub(crate) async fn reclaim_pools(
        &mut self,
        pools: &[i64],
        slots: &[i64],
        now: Timestamp,
    ) -> Result<i64, StoreError> {
        let inner = self.pool_sql();
        let now = self.now_param(now);
        // One transaction: the deferral lasts as long as it.
        let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
        let units = reclaim_deferred(&mut tx, &inner, pools, slots, now).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(units)
    }

    pub(crate) async fn create_pool(
        &mut self,
        pool: &NewPool,
        now: Timestamp,
    ) -> Result<Pool, StoreError> {
        let inner = self.pool_sql();
        let row = sqlx::query(AssertSqlSafe(inner.pools.create.as_str()))
            .bind(pool.capacity)
            .bind(self.now_param(now))
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        Ok(Pool {
            pool_id: PoolId(row.try_get("id").map_err(map_err)?),
            capacity: row.try_get("capacity").map_err(map_err)?,
            stored_remaining: row.try_get("remaining").map_err(map_err)?,
            slots: Vec::new(),
        })
    }

    pub(crate) async fn get_pool(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Decided<Option<PoolUsage>>, StoreError> {
        let inner = self.pool_sql();
        let now = self.now_param(now);
        read_pool(self.conn.get().await?, &inner, pool_id, now).await
    }

    pub(crate) async fn pools(
        &mut self,
        now: Timestamp,
    ) -> Result<Decided<Vec<PoolUsage>>, StoreError> {
        let inner = self.pool_sql();
        let rows = sqlx::query(AssertSqlSafe(inner.pools.all.as_str()))
            .bind(self.now_param(now))
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        listed(&rows, "the pools", usage_from)
    }

    /// The pool as read now, as `change` says (`Applied` or `InUse`), or `PoolNotFound`.
    async fn pool_answer(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
        change: fn(PoolUsage) -> PoolChange,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let read = self.get_pool(pool_id, now).await?;
        Ok(read.map(|usage| usage.map_or(PoolChange::PoolNotFound, change)))
    }

    /// Attach (`attach`) or detach: the statement, and for an attach the pool short, once more
    /// after giving back the expired holds of the slot and the pool's slots, in the same
    /// transaction ([`reclaim_deferred`]). A detach serves the pool's line (its units came
    /// back) and the slot's (its entries left the pool's line), in its transaction; an attach
    /// serves nothing.
    async fn link(
        &mut self,
        attach: bool,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let inner = self.pool_sql();
        let sql = if attach {
            &inner.pools.attach
        } else {
            &inner.pools.detach
        };
        let most = i32::try_from(MAX_POOLS_PER_SLOT).unwrap_or(i32::MAX);
        let now_param = self.now_param(now);
        let (pool, slot) = ([pool_id.get()], [slot_id.get()]);
        for attempt in 0..2 {
            let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
            if attempt == 1
                && reclaim_deferred(&mut tx, &inner, &pool, &slot, now_param).await? == 0
            {
                tx.rollback().await.map_err(map_err)?;
                break;
            }
            let row = sqlx::query(AssertSqlSafe(sql.as_str()))
                .bind(pool_id.get())
                .bind(slot_id.get())
                .bind(most)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
            let flag = |column: &str| row.try_get::<bool, _>(column).map_err(map_err);
            if !attach && flag("applied")? {
                // The answer is the change, read before the lines take any unit.
                let read = read_pool(&mut tx, &inner, pool_id, now_param).await?;
                serve_lines(&mut tx, &inner.pools.serve, &slot, &pool, now_param).await?;
                tx.commit().await.map_err(map_err)?;
                return Ok(
                    read.map(|usage| usage.map_or(PoolChange::PoolNotFound, PoolChange::Applied))
                );
            }
            // Nothing else stays: a reclaim that did not make it fit is undone with the change.
            if flag("applied")? {
                tx.commit().await.map_err(map_err)?;
            } else {
                tx.rollback().await.map_err(map_err)?;
            }
            if !flag("slot_found")? {
                let read = self.get_pool(pool_id, now).await?;
                return Ok(read.map(|_| PoolChange::SlotNotFound));
            }
            if !flag("pool_found")? {
                let read = self.get_pool(pool_id, now).await?;
                return Ok(read.map(|_| PoolChange::PoolNotFound));
            }
            if attach && flag("removed")? {
                let read = self.get_pool(pool_id, now).await?;
                return Ok(read.map(|_| PoolChange::SlotNotFound));
            }
            if flag("applied")? || flag("attached")? == attach {
                // Applied, or already as asked (attached, or not attached for a detach).
                return self.pool_answer(pool_id, now, PoolChange::Applied).await;
            }
            if flag("full")? {
                return self
                    .pool_answer(pool_id, now, |_| PoolChange::TooManyPools)
                    .await;
            }
        }
        self.pool_answer(pool_id, now, PoolChange::InUse).await
    }

    pub(crate) async fn attach_slot(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        self.link(true, pool_id, slot_id, now).await
    }

    pub(crate) async fn detach_slot(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        self.link(false, pool_id, slot_id, now).await
    }

    /// A pool's capacity change: the statement and, when it changed the capacity, the pool's
    /// line served, in one transaction; when it did not fit, once more after giving back the
    /// expired holds of the pool's slots in the same transaction ([`reclaim_deferred`]): the
    /// change is decided before the line takes any of those units.
    pub(crate) async fn change_pool_capacity(
        &mut self,
        pool_id: PoolId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let inner = self.pool_sql();
        let terms = change.terms();
        let now_param = self.now_param(now);
        let pool = [pool_id.get()];
        for attempt in 0..2 {
            let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
            if attempt == 1 && reclaim_deferred(&mut tx, &inner, &pool, &[], now_param).await? == 0
            {
                tx.rollback().await.map_err(map_err)?;
                break;
            }
            let row = sqlx::query(AssertSqlSafe(inner.pools.capacity.as_str()))
                .bind(pool_id.get())
                .bind(terms.keep)
                .bind(terms.add)
                .bind(terms.expected)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
            let flag = |column: &str| row.try_get::<bool, _>(column).map_err(map_err);
            if flag("changed")? {
                // The answer is the change, read before the line takes any unit.
                let read = read_pool(&mut tx, &inner, pool_id, now_param).await?;
                serve_lines(&mut tx, &inner.pools.serve, &[], &pool, now_param).await?;
                tx.commit().await.map_err(map_err)?;
                return Ok(
                    read.map(|usage| usage.map_or(PoolChange::PoolNotFound, PoolChange::Applied))
                );
            }
            // Not changed: nothing stays, the reclaim that did not make it fit included.
            tx.rollback().await.map_err(map_err)?;
            if !flag("found")? {
                let read = self.get_pool(pool_id, now).await?;
                return Ok(read.map(|_| PoolChange::PoolNotFound));
            }
            if flag("applied")? {
                return self.pool_answer(pool_id, now, PoolChange::Applied).await;
            }
        }
        self.pool_answer(pool_id, now, PoolChange::InUse).await
    }
}

// Every pool operation on a connection of the pool, through the same statements.
slot_booking::forward_store!(
    impl[] PoolStore for PostgresStore,
    |this| this.pooled()
);
