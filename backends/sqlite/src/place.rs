//! The store's placement primitives ([`PlaceKernel`]): what the core's rule for a hold and a
//! booking ([`place_hold`](slot_booking::store::place_hold),
//! [`place_booking`](slot_booking::store::place_booking)) asks of a unit of work.
//!
//! A row's insert is its placement: the `holds_take_a_unit` trigger takes its units from the
//! slot and each pool of the slot inside the insert, and `holds_placed_event` appends its
//! `hold_placed` event (migrations 5, 6, 9-11); a refused insert changes nothing, and the
//! trigger's message says why. The store writes alone (`BEGIN IMMEDIATE`), so it locks no
//! account and refills short pools in place.

use async_trait::async_trait;
use slot_booking::store::{self, KeyHolder, NewLine, PlaceKernel, Placed, Refill};
use slot_booking::{HoldId, PoolId, SlotId, SlotLimits, StoreError, Timestamp};
use sqlx::AssertSqlSafe;

use crate::group::{insert_outcome, Insert};
use crate::kernel::Kernel;
use crate::map_err;
use crate::reads::booking_by_key;
use crate::rows::{placed_entry_from_row, to_micros, Cols};
use crate::units::reclaim_short_pools;

/// Why a [`Placing::Refill`](slot_booking::store::Placing::Refill) is an error here.
pub(crate) const REFILLED_IN_PLACE: &str =
    "a placement asked to refill pools apart, but this store refills them in place";

#[async_trait]
impl PlaceKernel for Kernel<'_> {
    async fn lock_accounts(&mut self, _: &[SlotId]) -> Result<(), StoreError> {
        Ok(())
    }

    async fn place(&mut self, row: &NewLine<'_>) -> Result<Placed, StoreError> {
        let inserted = sqlx::query(AssertSqlSafe(self.sql.insert_line.as_str()))
            .bind(row.slot_id.get())
            .bind(row.key)
            .bind(to_micros(row.now))
            .bind(to_micros(row.expires_at))
            .bind(row.quantity)
            .bind(row.owner.map(|owner| owner.as_str()))
            .bind(row.booking.map(HoldId::get))
            // Stepped to its end, as a hold's insert is (see `run_insert`).
            .fetch_all(&mut *self.conn)
            .await;
        Ok(match insert_outcome(inserted).map_err(map_err)? {
            Insert::Created(hold) => Placed::Created(hold),
            Insert::NoUnit => Placed::SlotShort,
            Insert::PoolShort => Placed::PoolShort(None),
            Insert::SoldOut => Placed::SoldOut,
            Insert::KeyTaken => Placed::KeyTaken,
            Insert::KeyWaits => Placed::KeyWaits,
        })
    }

    async fn mark_booking(&mut self, booking: HoldId) -> Result<(), StoreError> {
        let marked = sqlx::query(AssertSqlSafe(self.sql.mark_booking.as_str()))
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

    async fn refill_pools(
        &mut self,
        row: &NewLine<'_>,
        _: Option<PoolId>,
    ) -> Result<Refill, StoreError> {
        let (slot_id, quantity) = (row.slot_id.get(), row.quantity);
        reclaim_short_pools(self.sql, self.conn, slot_id, quantity, row.now).await?;
        Ok(Refill::InPlace)
    }

    async fn key_holder(&mut self, key: &str) -> Result<KeyHolder, StoreError> {
        if let Some(holder) = booking_by_key(self.sql, &mut *self.conn, key).await? {
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
            .bind(slot_id.get())
            .bind(to_micros(now))
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?;
        row.map(|row| store::slot_state_of(&Cols(&row))).transpose()
    }

    async fn pools_of_slot(&mut self, slot_id: SlotId) -> Result<Vec<PoolId>, StoreError> {
        let pools: Vec<i64> =
            sqlx::query_scalar(AssertSqlSafe(self.sql.pools.pools_of_slot.as_str()))
                .bind(slot_id.get())
                .fetch_all(&mut *self.conn)
                .await
                .map_err(map_err)?;
        Ok(pools.into_iter().map(PoolId).collect())
    }
}
