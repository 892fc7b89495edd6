//! The store's placement primitives ([`PlaceKernel`]): what the core's rule for a hold and a
//! booking ([`place_hold`](slot_booking::store::place_hold),
//! [`place_booking`](slot_booking::store::place_booking)) asks of a unit of work.
//!
//! A row's placement is, under a savepoint, the conditional decrement of its slot's
//! `remaining`, then of each pool of the slot (ascending, read once the slot's row is locked
//! by its decrement), then the row's insert under the unique key and its `hold_placed` event:
//! anything that matches nothing undoes the whole placement. Writers run side by side, so a
//! short pool is refilled in a unit of its own ([`Refill::InOwnStep`]): its slots may come
//! before the ones this unit locked.

use async_trait::async_trait;
use slot_booking::store::{self, KeyHolder, NewLine, PlaceKernel, Placed, Refill};
use slot_booking::{
    EventKind, Hold, HoldId, HoldStatus, PoolId, SlotId, SlotLimits, StoreError, Timestamp,
};
use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Connection};

use crate::kernel::Kernel;
use crate::lines::booking_by_key;
use crate::map_err;
use crate::rows::{placed_entry_from_row, to_micros, Cols};
use crate::sql::Statements;
use crate::units::{finish, id_of, lock_pools_of, lock_slot, log_hold, pools_of_slot, Step};

#[async_trait]
impl PlaceKernel for Kernel<'_> {
    async fn lock_accounts(&mut self, slots: &[SlotId]) -> Result<(), StoreError> {
        for slot_id in slots {
            lock_slot(self.sql, self.conn, *slot_id).await?;
        }
        lock_pools_of(self.sql, self.conn, slots).await?;
        Ok(())
    }

    async fn place(&mut self, row: &NewLine<'_>) -> Result<Placed, StoreError> {
        let sql = self.sql;
        let mut savepoint = Connection::begin(&mut *self.conn).await.map_err(map_err)?;
        let placed = async {
            if !take_units(sql, &mut savepoint, row.slot_id, row.quantity, row.now).await? {
                return Ok(Placed::SlotShort);
            }
            for pool in pools_of_slot(sql, &mut savepoint, row.slot_id).await? {
                let units = i64::from(row.quantity);
                if !take_pool_newcomer(sql, &mut savepoint, pool, units, row.now).await? {
                    return Ok(Placed::PoolShort(Some(PoolId(pool))));
                }
            }
            insert_row(sql, &mut savepoint, row).await
        }
        .await;
        let step = placed.map(|placed| match placed {
            Placed::Created(_) => Step::keep(placed),
            _ => Step::undo(placed),
        });
        finish(savepoint, step).await
    }

    async fn mark_booking(&mut self, booking: HoldId) -> Result<(), StoreError> {
        let marked = sqlx::query(AssertSqlSafe(self.sql.mark_booking.as_str()))
            .bind(booking.get())
            .bind(booking.get())
            .execute(&mut *self.conn)
            .await
            .map_err(map_err)?;
        match marked.rows_affected() {
            1 => Ok(()),
            _ => Err(StoreError::failed(
                "the first line of a new booking is gone",
            )),
        }
    }

    /// In a unit of its own, unless anyone waits in the short pool's line (nobody takes units
    /// past a waiting line, so no refill could serve the row).
    async fn refill_pools(
        &mut self,
        row: &NewLine<'_>,
        short: Option<PoolId>,
    ) -> Result<Refill, StoreError> {
        let Some(pool) = short else {
            return Ok(Refill::InOwnStep);
        };
        let waits: Option<i32> =
            sqlx::query_scalar(AssertSqlSafe(self.sql.pools.pool_line_waits.as_str()))
                .bind(pool.get())
                .bind(to_micros(row.now))
                .fetch_optional(&mut *self.conn)
                .await
                .map_err(map_err)?;
        Ok(match waits {
            Some(_) => Refill::Nothing,
            None => Refill::InOwnStep,
        })
    }

    async fn key_holder(&mut self, key: &str) -> Result<KeyHolder, StoreError> {
        if let Some(holder) = booking_by_key(self.sql, self.conn, key).await? {
            return Ok(KeyHolder::Booking(holder));
        }
        let entry = sqlx::query(AssertSqlSafe(self.sql.waitlists.entry_by_key.as_str()))
            .bind(key)
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?;
        Ok(match entry {
            Some(row) => {
                let (entry, position) = placed_entry_from_row(&row)?;
                KeyHolder::Waiting(entry, position)
            }
            None => KeyHolder::Free,
        })
    }

    async fn slot_state(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<(SlotLimits, i64)>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.sql.line_state.as_str()))
            .bind(to_micros(now))
            .bind(to_micros(now))
            .bind(slot_id.get())
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?;
        row.map(|row| store::slot_state_of(&Cols(&row))).transpose()
    }

    async fn pools_of_slot(&mut self, slot_id: SlotId) -> Result<Vec<PoolId>, StoreError> {
        let pools = pools_of_slot(self.sql, self.conn, slot_id).await?;
        Ok(pools.into_iter().map(PoolId).collect())
    }
}

/// Takes `quantity` units from a selling slot nobody waits for, by the conditional decrement:
/// whether one row matched.
async fn take_units(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    quantity: i32,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let taken = sqlx::query(AssertSqlSafe(sql.take_units.as_str()))
        .bind(quantity)
        .bind(slot_id.get())
        .bind(quantity)
        .bind(to_micros(now))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(taken.rows_affected() == 1)
}

/// Takes a newcomer's `units` from a pool by its conditional decrement, refused while anyone
/// waits in the pool's line: whether one row matched.
async fn take_pool_newcomer(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    units: i64,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let taken = sqlx::query(AssertSqlSafe(sql.pools.take_pool_newcomer.as_str()))
        .bind(units)
        .bind(pool)
        .bind(units)
        .bind(to_micros(now))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(taken.rows_affected() == 1)
}

/// Inserts `row`, whose units were just taken, with its `hold_placed` event.
async fn insert_row(
    sql: &Statements,
    conn: &mut MySqlConnection,
    row: &NewLine<'_>,
) -> Result<Placed, StoreError> {
    let inserted = sqlx::query(AssertSqlSafe(sql.insert_line.as_str()))
        .bind(row.slot_id.get())
        .bind(row.key)
        .bind(to_micros(row.expires_at))
        .bind(to_micros(row.now))
        .bind(row.quantity)
        .bind(row.owner.map(|owner| owner.as_str()))
        .bind(row.booking.map(HoldId::get))
        .execute(&mut *conn)
        .await;
    let inserted = match inserted {
        Ok(inserted) => inserted,
        Err(sqlx::Error::Database(db)) if db.is_unique_violation() => return Ok(Placed::KeyTaken),
        Err(error) => return Err(map_err(error)),
    };
    let hold = Hold {
        hold_id: HoldId(id_of(inserted)?),
        slot_id: row.slot_id,
        status: HoldStatus::Held,
        expires_at: row.expires_at,
        confirmed_at: None,
        cancelled_at: None,
        quantity: row.quantity,
        owner: row.owner.cloned(),
        created_at: row.now,
    };
    log_hold(sql, conn, EventKind::HoldPlaced, &hold, row.now).await?;
    Ok(Placed::Created(hold))
}
