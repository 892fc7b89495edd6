//! Serving waitlists in the step that frees units: a cancel, an expiry reclaim (the sweeper's,
//! a pool refill's), a capacity raise, reopened sales, a detach, a pool's capacity raise, a
//! leave and a join each serve the lines of the slots and pools they gave units to, in their
//! own transaction, before it commits.
//!
//! Lines are served by the core's one rule, [`serve_lines`] (strict order, to a fixpoint,
//! readiness and the reclaims that make a head fit decided there), over this store's
//! primitives ([`LineOps`] for `Serving`): the heads of lines, a head's state read under its
//! rows' locks, the reclaims, the offer.
//!
//! **Lock order.** The rows a head needs beyond the step's own (another slot of a pool, its
//! pools) are locked with `SKIP LOCKED`, never waited for: a head whose rows another step holds
//! is left in line for the next step that frees its units, or the sweeper's pass.

use slot_booking::store::{self, serve_lines, HeadState, LineOps, Units};
use slot_booking::{
    async_trait, EventKind, Hold, HoldId, PoolId, Scope, SlotId, StoreError, Timestamp,
    WaitlistEntry,
};
use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Connection, Row};

use crate::map_err;
use crate::reads::slot_usage;
use crate::rows::{entry_from_row, to_micros};
use crate::sql::Statements;
use crate::units::{finish, hold_by_id, log_hold, pools_of_slot, reclaim_slot, Step};

/// The lines a step looks at: slots' and pools' (the core's [`slot_booking::store::Lines`]).
#[derive(Debug, Default)]
pub(crate) struct Lines(store::Lines);

impl Lines {
    /// No line.
    pub(crate) fn new() -> Self {
        Lines::default()
    }

    /// Adds the line of `slot` and the lines of its pools.
    pub(crate) async fn slot_and_pools(
        &mut self,
        sql: &Statements,
        conn: &mut MySqlConnection,
        slot: SlotId,
    ) -> Result<(), StoreError> {
        self.0.slots.insert(slot);
        let pools = pools_of_slot(sql, conn, slot).await?;
        self.0.pools.extend(pools.into_iter().map(PoolId));
        Ok(())
    }

    /// Adds the line of a pool.
    pub(crate) fn pool(&mut self, pool: i64) {
        self.0.pools.insert(PoolId(pool));
    }
}

/// The sweeper's pass over every line anyone waits in: serves any head a concurrent step
/// could not (its rows were another step's). How many entries it offered.
pub(crate) async fn serve_waiting(
    sql: &Statements,
    conn: &mut MySqlConnection,
    now: Timestamp,
) -> Result<Step<usize>, StoreError> {
    let slots: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.waitlists.waiting_slots.as_str()))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let pools: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.waitlists.waiting_pools.as_str()))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    if slots.is_empty() && pools.is_empty() {
        return Ok(Step::undo(0));
    }
    let lines = store::Lines {
        slots: slots.into_iter().map(SlotId).collect(),
        pools: pools.into_iter().map(PoolId).collect(),
    };
    let offers = serve_lines(&mut Serving::new(sql, conn), lines, now).await?;
    Ok(Step::keep(offers.len()))
}

/// Serves `lines` to a fixpoint: the core's rule ([`serve_lines`]) over this store's
/// primitives. Returns the offers made, in order.
pub(crate) async fn serve(
    sql: &Statements,
    conn: &mut MySqlConnection,
    lines: Lines,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    serve_lines(&mut Serving::new(sql, conn), lines.0, now).await
}

/// The store's serving primitives in one step's transaction.
struct Serving<'a> {
    sql: &'a Statements,
    conn: &'a mut MySqlConnection,
    /// The pools of the slot whose rows [`LineOps::head_state`] locked last.
    locked: Vec<i64>,
}

impl<'a> Serving<'a> {
    fn new(sql: &'a Statements, conn: &'a mut MySqlConnection) -> Self {
        Serving {
            sql,
            conn,
            locked: Vec::new(),
        }
    }
}

#[async_trait]
impl LineOps for Serving<'_> {
    async fn heads(
        &mut self,
        lines: &store::Lines,
        now: Timestamp,
    ) -> Result<Vec<WaitlistEntry>, StoreError> {
        let (sql, conn) = (self.sql, &mut *self.conn);
        let mut heads = Vec::new();
        for slot in &lines.slots {
            heads.extend(head(conn, &sql.waitlists.slot_head, slot.get(), now).await?);
        }
        for pool in &lines.pools {
            heads.extend(head(conn, &sql.waitlists.pool_head, pool.get(), now).await?);
        }
        Ok(heads)
    }

    /// The entry's slot row and its pools' locked without waiting (`None` when another step
    /// has one), then whether it heads every line it is in and the units of each.
    async fn head_state(
        &mut self,
        entry: &WaitlistEntry,
        now: Timestamp,
    ) -> Result<Option<HeadState>, StoreError> {
        let (sql, conn) = (self.sql, &mut *self.conn);
        let slot = entry.slot_id.get();
        let Some(pools) = try_lock_slot(sql, conn, slot).await? else {
            return Ok(None);
        };
        let mut heads_every_line = head(conn, &sql.waitlists.slot_head, slot, now)
            .await?
            .is_some_and(|head| head.entry_id == entry.entry_id);
        for pool in &pools {
            let head = head(conn, &sql.waitlists.pool_head, *pool, now).await?;
            heads_every_line &= head.is_some_and(|head| head.entry_id == entry.entry_id);
        }
        let slot_units = slot_units(sql, conn, slot, now).await?;
        let mut pool_units = Vec::with_capacity(pools.len());
        for pool in &pools {
            pool_units.push((
                PoolId(*pool),
                self::pool_units(sql, conn, *pool, now).await?,
            ));
        }
        self.locked = pools;
        Ok(Some(HeadState {
            heads_every_line,
            slot: slot_units,
            pools: pool_units,
        }))
    }

    async fn reclaim_slot(&mut self, slot: SlotId, now: Timestamp) -> Result<(), StoreError> {
        reclaim_slot(self.sql, self.conn, slot, now).await?;
        Ok(())
    }

    /// The pool's slots whose rows can be had without waiting.
    async fn refill(&mut self, pool: PoolId, now: Timestamp) -> Result<(), StoreError> {
        let (sql, conn) = (self.sql, &mut *self.conn);
        let slots: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.pools.pool_slots.as_str()))
            .bind(pool.get())
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        for other in slots {
            if try_lock_slot(sql, conn, other).await?.is_some() {
                reclaim_slot(sql, conn, SlotId(other), now).await?;
            }
        }
        Ok(())
    }

    /// Its units taken from its slot and pools (the rows [`LineOps::head_state`] locked), its
    /// row turned into its held offer, the lines' counts moved down.
    async fn offer(
        &mut self,
        entry: &WaitlistEntry,
        now: Timestamp,
    ) -> Result<Option<Hold>, StoreError> {
        let (sql, conn) = (self.sql, &mut *self.conn);
        let slot = entry.slot_id.get();
        let pools = std::mem::take(&mut self.locked);
        if !take(sql, conn, slot, &pools, i64::from(entry.quantity), now).await? {
            return Ok(None);
        }
        let offered = sqlx::query(AssertSqlSafe(sql.waitlists.offer.as_str()))
            .bind(to_micros(now))
            .bind(to_micros(now))
            .bind(entry.entry_id.0)
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        if offered.rows_affected() != 1 {
            return Err(StoreError::failed(format!(
                "the waiting entry {} is gone",
                entry.entry_id.0
            )));
        }
        count(sql, conn, slot, &pools, -1).await?;
        let hold = hold_by_id(sql, conn, HoldId(entry.entry_id.0), &Scope::BackOffice)
            .await?
            .ok_or_else(|| StoreError::failed("an offer made, then not found"))?;
        log_hold(sql, conn, EventKind::HoldPlaced, &hold, now).await?;
        log_hold(sql, conn, EventKind::WaitlistOffered, &hold, now).await?;
        Ok(Some(hold))
    }

    async fn pools_of(&mut self, slot: SlotId) -> Result<Vec<PoolId>, StoreError> {
        let pools = pools_of_slot(self.sql, self.conn, slot).await?;
        Ok(pools.into_iter().map(PoolId).collect())
    }
}

/// The head of a line (`statement`: a slot's or a pool's), if anyone waits in it.
async fn head(
    conn: &mut MySqlConnection,
    statement: &str,
    id: i64,
    now: Timestamp,
) -> Result<Option<WaitlistEntry>, StoreError> {
    sqlx::query(AssertSqlSafe(statement))
        .bind(id)
        .bind(to_micros(now))
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(entry_from_row)
        .transpose()
}

/// Locks a row out of the lock order without waiting (`statement`: a slot's or a pool's):
/// whether this transaction holds it now.
async fn try_lock(
    conn: &mut MySqlConnection,
    statement: &str,
    id: i64,
) -> Result<bool, StoreError> {
    let row = sqlx::query(AssertSqlSafe(statement))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(row.is_some())
}

/// Locks a slot's row and its pools' without waiting: their ids when all were had.
async fn try_lock_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot: i64,
) -> Result<Option<Vec<i64>>, StoreError> {
    if !try_lock(conn, &sql.waitlists.lock_slot_skip, slot).await? {
        return Ok(None);
    }
    let pools = pools_of_slot(sql, conn, SlotId(slot)).await?;
    for pool in &pools {
        if !try_lock(conn, &sql.waitlists.lock_pool_skip, *pool).await? {
            return Ok(None);
        }
    }
    Ok(Some(pools))
}

/// A slot's stored `remaining` and its held holds expired by `now`.
async fn slot_units(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot: i64,
    now: Timestamp,
) -> Result<Units, StoreError> {
    match slot_usage(sql, conn, SlotId(slot), now).await? {
        Some(usage) => Ok(Units {
            remaining: i64::from(usage.slot.stored_remaining),
            expired: i64::from(usage.expired),
        }),
        None => Err(StoreError::failed(format!("slot {slot} is gone"))),
    }
}

/// A pool's stored `remaining` and its slots' expired held holds.
async fn pool_units(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    now: Timestamp,
) -> Result<Units, StoreError> {
    let row = sqlx::query(AssertSqlSafe(sql.pools.pool_usage.as_str()))
        .bind(to_micros(now))
        .bind(to_micros(now))
        .bind(pool)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?
        .ok_or_else(|| StoreError::failed(format!("pool {pool} is gone")))?;
    let remaining: i32 = row.try_get("remaining").map_err(map_err)?;
    let expired: i64 = row.try_get("expired").map_err(map_err)?;
    Ok(Units {
        remaining: i64::from(remaining),
        expired,
    })
}

/// Takes an offer's units from its slot and each of its pools under a savepoint: all of them,
/// or (a pool's expired holds were another step's) none.
async fn take(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot: i64,
    pools: &[i64],
    quantity: i64,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let mut savepoint = Connection::begin(&mut *conn).await.map_err(map_err)?;
    let taken = async {
        let taken = sqlx::query(AssertSqlSafe(sql.waitlists.take_offer_units.as_str()))
            .bind(quantity)
            .bind(slot)
            .bind(quantity)
            .bind(to_micros(now))
            .execute(&mut *savepoint)
            .await
            .map_err(map_err)?;
        if taken.rows_affected() != 1 {
            return Ok(false);
        }
        for pool in pools {
            let taken = sqlx::query(AssertSqlSafe(sql.pools.take_pool.as_str()))
                .bind(quantity)
                .bind(pool)
                .bind(quantity)
                .execute(&mut *savepoint)
                .await
                .map_err(map_err)?;
            if taken.rows_affected() != 1 {
                return Ok(false);
            }
        }
        Ok(true)
    }
    .await;
    let step = taken.map(|taken| {
        if taken {
            Step::keep(true)
        } else {
            Step::undo(false)
        }
    });
    finish(savepoint, step).await
}

/// Moves the count of waiting entries of a slot and of each of its pools by `change`.
pub(crate) async fn count(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot: i64,
    pools: &[i64],
    change: i64,
) -> Result<(), StoreError> {
    sqlx::query(AssertSqlSafe(sql.waitlists.count_slot.as_str()))
        .bind(change)
        .bind(slot)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    for pool in pools {
        sqlx::query(AssertSqlSafe(sql.waitlists.count_pool.as_str()))
            .bind(change)
            .bind(pool)
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
    }
    Ok(())
}
