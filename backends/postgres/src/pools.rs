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
//! not matter. A capacity change of a pool locks that pool row alone; its reclaiming attempt
//! locks the pool's slots first (`edit_pool`). No statement holds a pool row while it waits for a slot row,
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

use slot_booking::store::{EditPools as _, Membership, PoolEdit, PoolKernel};
use slot_booking::{NewPool, Pool, PoolId, PoolUsage, MAX_POOLS_PER_SLOT};
use sqlx::Connection;

use super::*;
use crate::kernel::{reclaim, Kernel, DEFER_SERVING, SERVE_AGAIN};
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

/// On `conn`, in its transaction (which must be one: the deferral is the transaction's): the
/// step that gives back the expired holds of the slots of
/// `pools` and of `slots` (locks in the global order), with the serving trigger deferred
/// (`slot_booking.defer_serving`, migration 12). The reclaims a write makes only to make room
/// for itself (a hold's or a booking's pool refill) serve no line, as in the model; the change that follows is decided on the units they gave
/// back. The units given back.
async fn reclaim_deferred(
    conn: &mut PgConnection,
    inner: &Inner,
    pools: &[i64],
    slots: &[i64],
    now: Option<Timestamp>,
) -> Result<i64, StoreError> {
    (&mut *conn).execute(DEFER_SERVING).await.map_err(map_err)?;
    let reclaimed = reclaim(conn, inner, pools, slots, now).await?;
    (&mut *conn).execute(SERVE_AGAIN).await.map_err(map_err)?;
    Ok(reclaimed.iter().map(|hold| i64::from(hold.quantity)).sum())
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
}

// Every pool operation on a connection of the pool, through the same statements.
slot_booking::forward_store!(
    impl[] PoolStore for PostgresStore,
    |this| this.pooled()
);

/// The pool's primitives of a unit of work, on which the core's rule
/// ([`edit_pool`](slot_booking::store::edit_pool)) changes a pool.
#[async_trait]
impl PoolKernel for Kernel<'_> {
    async fn pool_usage(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Option<PoolUsage>, StoreError> {
        let read = read_pool(self.conn, self.inner, pool_id, Some(now)).await?;
        Ok(read.outcome)
    }

    async fn membership(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
    ) -> Result<Membership, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.inner.pools.membership.as_str()))
            .bind(pool_id.get())
            .bind(slot_id.get())
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        let flag = |column: &str| row.try_get::<bool, _>(column).map_err(map_err);
        let pools_of_slot: i64 = row.try_get("pools_of_slot").map_err(map_err)?;
        Ok(Membership {
            slot_stored: flag("slot_stored")?,
            slot_live: flag("slot_live")?,
            pool: flag("pool")?,
            attached: flag("attached")?,
            pools_of_slot: usize::try_from(pools_of_slot).map_err(StoreError::failed)?,
        })
    }

    async fn update_pool(
        &mut self,
        pool_id: PoolId,
        edit: PoolEdit,
        _now: Timestamp,
    ) -> Result<bool, StoreError> {
        let statements = &self.inner.pools;
        let most = i32::try_from(MAX_POOLS_PER_SLOT).unwrap_or(i32::MAX);
        let (query, changed) = match edit {
            PoolEdit::Attach(slot_id) | PoolEdit::Detach(slot_id) => {
                let statement = match edit {
                    PoolEdit::Attach(_) => &statements.attach,
                    _ => &statements.detach,
                };
                let query = sqlx::query(AssertSqlSafe(statement.as_str()))
                    .bind(pool_id.get())
                    .bind(slot_id.get())
                    .bind(most);
                (query, "applied")
            }
            PoolEdit::Capacity(change) => {
                let terms = change.terms();
                let query = sqlx::query(AssertSqlSafe(statements.capacity.as_str()))
                    .bind(pool_id.get())
                    .bind(terms.keep)
                    .bind(terms.add)
                    .bind(terms.expected);
                (query, "changed")
            }
        };
        let row = query.fetch_one(&mut *self.conn).await.map_err(map_err)?;
        row.try_get(changed).map_err(map_err)
    }

    async fn reclaim_pool(
        &mut self,
        pool_id: PoolId,
        also: Option<SlotId>,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError> {
        let slots: Vec<i64> = also.map(SlotId::get).into_iter().collect();
        reclaim(self.conn, self.inner, &[pool_id.get()], &slots, Some(now)).await
    }
}
