//! Serving lines in the unit of work of the write that frees their units (see `waitlists.rs`
//! for which writes serve which lines), by the core's one rule
//! ([`serve_lines`](slot_booking::store::serve_lines): strict order, to a fixpoint, readiness
//! and the reclaims that make a head fit decided there) over this store's primitives
//! ([`LineOps`] for `Serving`).

use slot_booking::store::{self, HeadState, LineOps, Units};
use slot_booking::{
    async_trait, EventKind, Hold, PoolId, SlotId, StoreError, Timestamp, WaitlistEntry,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::AssertSqlSafe;

use crate::map_err;
use crate::rows::{entry_from_row, hold_from_row, to_micros};
use crate::sql::Statements;
use crate::units::{log_hold, reclaim};

/// A set of lines to serve: slots' lines and pools' lines (the core's
/// [`slot_booking::store::Lines`]).
#[derive(Debug, Default)]
pub(crate) struct Lines(store::Lines);

impl Lines {
    /// No line.
    pub(crate) fn new() -> Self {
        Lines::default()
    }

    /// Adds the pool's line.
    pub(crate) fn pool(&mut self, pool_id: PoolId) -> &mut Self {
        self.0.pools.insert(pool_id);
        self
    }

    /// Adds the slot's line and the lines of its pools, read in the unit of work `conn` is in.
    pub(crate) async fn slot_and_pools(
        &mut self,
        sql: &Statements,
        conn: &mut SqliteConnection,
        slot_id: SlotId,
    ) -> Result<&mut Self, StoreError> {
        self.0.slots.insert(slot_id);
        self.0.pools.extend(pools_of(sql, conn, slot_id).await?);
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
        self.0.slots.extend(slots.into_iter().map(SlotId));
        let pools: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.waitlists.pools_lined.as_str()))
            .bind(to_micros(now))
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        self.0.pools.extend(pools.into_iter().map(PoolId));
        Ok(self)
    }

    /// Whether there is no line in the set.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The pools of slot `slot_id`, by id.
async fn pools_of(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
) -> Result<Vec<PoolId>, StoreError> {
    let pools: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.pools.pools_of_slot.as_str()))
        .bind(slot_id.get())
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(pools.into_iter().map(PoolId).collect())
}

/// Serves `lines` in the unit of work `conn` is in, to a fixpoint: the core's rule
/// ([`serve_lines`](store::serve_lines)) over this store's primitives. SQLite's one writer
/// holds the write lock: nothing else moves meanwhile. Returns the offers made, in the order
/// made.
pub(crate) async fn serve_lines(
    sql: &Statements,
    conn: &mut SqliteConnection,
    lines: &Lines,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    store::serve_lines(&mut Serving { sql, conn }, lines.0.clone(), now).await
}

/// The store's serving primitives in one unit of work.
struct Serving<'a> {
    sql: &'a Statements,
    conn: &'a mut SqliteConnection,
}

#[async_trait]
impl LineOps for Serving<'_> {
    async fn heads(
        &mut self,
        lines: &store::Lines,
        now: Timestamp,
    ) -> Result<Vec<WaitlistEntry>, StoreError> {
        let statements = &self.sql.waitlists;
        let mut heads = Vec::new();
        for slot_id in &lines.slots {
            let head = sqlx::query(AssertSqlSafe(statements.slot_head.as_str()))
                .bind(slot_id.get())
                .fetch_optional(&mut *self.conn)
                .await
                .map_err(map_err)?;
            heads.extend(head.as_ref().map(entry_from_row).transpose()?);
        }
        for pool_id in &lines.pools {
            let head = sqlx::query(AssertSqlSafe(statements.pool_head.as_str()))
                .bind(pool_id.get())
                .bind(to_micros(now))
                .fetch_optional(&mut *self.conn)
                .await
                .map_err(map_err)?;
            heads.extend(head.as_ref().map(entry_from_row).transpose()?);
        }
        Ok(heads)
    }

    async fn head_state(
        &mut self,
        entry: &WaitlistEntry,
        now: Timestamp,
    ) -> Result<Option<HeadState>, StoreError> {
        let statements = &self.sql.waitlists;
        let slot: Option<(bool, i64, i64)> =
            sqlx::query_as(AssertSqlSafe(statements.entry_state.as_str()))
                .bind(entry.entry_id.0)
                .bind(to_micros(now))
                .fetch_optional(&mut *self.conn)
                .await
                .map_err(map_err)?;
        let Some((heads_every_line, remaining, expired)) = slot else {
            return Ok(None);
        };
        let pools: Vec<(i64, i64, i64)> =
            sqlx::query_as(AssertSqlSafe(statements.slot_pools_state.as_str()))
                .bind(entry.slot_id.get())
                .bind(to_micros(now))
                .fetch_all(&mut *self.conn)
                .await
                .map_err(map_err)?;
        Ok(Some(HeadState {
            heads_every_line,
            slot: Units { remaining, expired },
            pools: (pools.into_iter())
                .map(|(id, remaining, expired)| (PoolId(id), Units { remaining, expired }))
                .collect(),
        }))
    }

    async fn reclaim_slot(&mut self, slot: SlotId, now: Timestamp) -> Result<(), StoreError> {
        reclaim(self.sql, &self.sql.reclaim, self.conn, slot.get(), now).await?;
        Ok(())
    }

    async fn refill(&mut self, pool: PoolId, now: Timestamp) -> Result<(), StoreError> {
        let statement = &self.sql.pools.reclaim_pool;
        reclaim(self.sql, statement, self.conn, pool.get(), now).await?;
        Ok(())
    }

    /// The offer's conditional insert, which takes its units from the slot's and the pools'
    /// stored `remaining` (the `holds_take_a_unit` trigger) and appends `hold_placed` (the
    /// `holds_placed_event` trigger); when it stored the hold, the entry deleted and
    /// `waitlist_offered` appended.
    async fn offer(
        &mut self,
        entry: &WaitlistEntry,
        now: Timestamp,
    ) -> Result<Option<Hold>, StoreError> {
        let (sql, conn) = (self.sql, &mut *self.conn);
        let statements = &sql.waitlists;
        let rows = sqlx::query(AssertSqlSafe(statements.offer_entry.as_str()))
            .bind(entry.entry_id.0)
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

    async fn pools_of(&mut self, slot: SlotId) -> Result<Vec<PoolId>, StoreError> {
        pools_of(self.sql, self.conn, slot).await
    }
}
