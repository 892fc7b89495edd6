//! The store's placement primitives ([`PlaceKernel`]): what the core's rule for a hold and a
//! booking ([`place_hold`](slot_booking::store::place_hold),
//! [`place_booking`](slot_booking::store::place_booking)) asks of a unit of work, and their
//! statements.
//!
//! A row's placement is one statement under a savepoint (a key in use fails the statement,
//! which would abort the unit's transaction): it locks the slot's row, selling and with nobody
//! waiting in its line, then the pools its locked row names, by id; only if the slot and every
//! pool have the units as stored, and nobody waits in a pool's line, does it take them, insert
//! the row with its `hold_placed` event and, for a hold or a booking's first line, its key.
//! Every decision is on the values the locks returned ("Deciding on the locked row" in
//! `sql.rs`). Writers run side by side, so a short pool is refilled in a unit of its own
//! ([`Refill::InOwnStep`]): its slots may come before the ones this unit locked.
//!
//! The store's one-statement hold and booking (`writes.rs`, `bookings.rs`) are the fast paths
//! of the same rules; [`PostgresStore::without_fast_paths`] places by these primitives alone.

use async_trait::async_trait;
use slot_booking::store::{self, KeyHolder, NewLine, PlaceKernel, Placed, Placing, Refill};
use slot_booking::{BookingOutcome, BookingRequest, PoolId};
use sqlx::Connection;

use super::*;
use crate::fragments::{append_events, now, HOLD_COLUMNS, H_COLUMNS};
use crate::kernel::Kernel;
use crate::rows::Cols;

/// The placement's statements, with this store's schema.
#[derive(Debug)]
pub(crate) struct PlaceStatements {
    /// Places one row: `$1` slot, `$2` key, `$3` now, `$4` expires at, `$5` units, `$6`
    /// owner, `$7` booking (NULL for a hold or a first line, whose key goes to `hold_keys`).
    /// One row: the hold if placed (`id` NULL if not), whether the slot had the units
    /// (`slot_fits`) and the first short pool (`short_pool`).
    place: String,
    /// Locks slots `$1` by id, then their pools by id.
    lock_accounts: String,
    /// Marks hold `$1` as its booking's first line.
    mark_booking: String,
    /// Whether anyone waits in pool `$1`'s line at `$2`.
    pool_line_waits: String,
    /// Slot `$1`'s limits and the units a hold could take of it at `$2` (`free`).
    slot_state: String,
    /// The pools slot `$1` is in.
    pools_of_slot: String,
}

impl PlaceStatements {
    pub(crate) fn new(s: &str) -> Self {
        let now3 = now(3);
        let placed = append_events(
            s,
            &format!("SELECT 'hold_placed', slot_id, id, owner, quantity, {now3} FROM ins"),
        );
        // A pool's line waits when it has a head (`pool_line_head`, read after the pool's
        // lock: its entries change only under it).
        let line_waits = |pool: &str, now: &str| {
            format!("({pool}.waiting > 0 AND {s}.pool_line_head({pool}.id, {now}) IS NOT NULL)")
        };
        PlaceStatements {
            place: format!(
                "WITH sl AS ( \
                     SELECT id, remaining, capacity, pools FROM {s}.slots \
                     WHERE id = $1 AND starts_at > {now3} AND NOT closed \
                       AND removed_at IS NULL AND waiting = 0 \
                     FOR NO KEY UPDATE), \
                 pl AS ( \
                     SELECT p.id, p.remaining, p.waiting FROM {s}.pools p \
                     WHERE p.id = ANY(coalesce((SELECT pools FROM sl), '{{}}'::int8[])) \
                     ORDER BY p.id FOR NO KEY UPDATE), \
                 ps AS ( \
                     SELECT min(pl.id) AS id FROM pl \
                     WHERE pl.remaining < $5 OR {waits}), \
                 ok AS (SELECT sl.id FROM sl, ps WHERE sl.remaining >= $5 AND ps.id IS NULL), \
                 dec AS ( \
                     UPDATE {s}.slots x SET remaining = sl.remaining - $5, capacity = sl.capacity \
                     FROM sl, ok WHERE x.id = sl.id RETURNING x.id), \
                 pdec AS ( \
                     UPDATE {s}.pools x SET remaining = pl.remaining - $5 \
                     FROM pl, ok WHERE x.id = pl.id RETURNING x.id), \
                 ins AS ( \
                     INSERT INTO {s}.holds (slot_id, idempotency_key, status, expires_at, \
                                            created_at, quantity, owner, booking_id) \
                     SELECT id, $2, 'held', $4, {now3}, $5, $6, $7 FROM dec \
                     RETURNING {HOLD_COLUMNS}), \
                 ev AS ({placed}), \
                 k AS ( \
                     INSERT INTO {s}.hold_keys (idempotency_key, hold_id) \
                     SELECT $2, id FROM ins WHERE $7::int8 IS NULL) \
                 SELECT {H_COLUMNS}, \
                        coalesce((SELECT remaining >= $5 FROM sl), false) AS slot_fits, \
                        (SELECT id FROM ps) AS short_pool \
                 FROM (SELECT 1) one LEFT JOIN ins h ON true",
                waits = line_waits("pl", &now3),
            ),
            lock_accounts: format!(
                "WITH sl AS ( \
                     SELECT id, pools FROM {s}.slots WHERE id = ANY($1::int8[]) \
                     ORDER BY id FOR NO KEY UPDATE) \
                 SELECT count(*) FROM ( \
                     SELECT id FROM {s}.pools \
                     WHERE id = ANY(ARRAY(SELECT unnest(pools) FROM sl)) \
                     ORDER BY id FOR NO KEY UPDATE) p"
            ),
            mark_booking: format!(
                "UPDATE {s}.holds SET booking_id = id WHERE id = $1 AND booking_id IS NULL"
            ),
            pool_line_waits: format!("SELECT {s}.pool_line_head($1, $2) IS NOT NULL"),
            slot_state: format!(
                "SELECT sl.starts_at, sl.capacity, sl.closed, sl.removed_at, \
                        CASE WHEN sl.waiting > 0 OR EXISTS ( \
                                 SELECT 1 FROM {s}.pools p \
                                 WHERE p.id = ANY(sl.pools) AND {waits}) \
                             THEN 0 \
                             ELSE sl.remaining + coalesce(( \
                                 SELECT sum(h.quantity) FROM {s}.holds h \
                                 WHERE h.slot_id = sl.id AND h.status = 'held' \
                                   AND h.expires_at <= $2), 0) END::int8 AS free \
                 FROM {s}.slots sl WHERE sl.id = $1",
                waits = line_waits("p", "$2"),
            ),
            pools_of_slot: format!("SELECT pools FROM {s}.slots WHERE id = $1"),
        }
    }
}

impl Kernel<'_> {
    fn place_sql(&self) -> &PlaceStatements {
        &self.inner.place
    }
}

#[async_trait]
impl PlaceKernel for Kernel<'_> {
    async fn lock_accounts(&mut self, slots: &[SlotId]) -> Result<(), StoreError> {
        let slots: Vec<i64> = slots.iter().map(|slot| slot.get()).collect();
        sqlx::query(AssertSqlSafe(self.place_sql().lock_accounts.as_str()))
            .bind(slots)
            .execute(&mut *self.conn)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn place(&mut self, row: &NewLine<'_>) -> Result<Placed, StoreError> {
        let statement = self.inner.place.place.as_str();
        let mut savepoint = Connection::begin(&mut *self.conn).await.map_err(map_err)?;
        let placed = sqlx::query(AssertSqlSafe(statement))
            .bind(row.slot_id.get())
            .bind(row.key)
            .bind(row.now)
            .bind(row.expires_at)
            .bind(row.quantity)
            .bind(row.owner.map(OwnerId::as_str))
            .bind(row.booking.map(HoldId::get))
            .fetch_one(&mut *savepoint)
            .await;
        let placed = match placed {
            Ok(placed) => placed,
            Err(error) if is_unique_violation(&error) => {
                savepoint.rollback().await.map_err(map_err)?;
                return Ok(Placed::KeyTaken);
            }
            Err(error) => return Err(map_err(error)),
        };
        // Nothing was written unless the row was: the savepoint ends either way.
        savepoint.commit().await.map_err(map_err)?;
        if let Some(hold) = optional_hold(&placed)? {
            return Ok(Placed::Created(hold));
        }
        if !placed.try_get::<bool, _>("slot_fits").map_err(map_err)? {
            return Ok(Placed::SlotShort);
        }
        let short: Option<i64> = placed.try_get("short_pool").map_err(map_err)?;
        Ok(Placed::PoolShort(short.map(PoolId)))
    }

    async fn mark_booking(&mut self, booking: HoldId) -> Result<(), StoreError> {
        let marked = sqlx::query(AssertSqlSafe(self.place_sql().mark_booking.as_str()))
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
        let waits: Option<bool> =
            sqlx::query_scalar(AssertSqlSafe(self.place_sql().pool_line_waits.as_str()))
                .bind(pool.get())
                .bind(row.now)
                .fetch_one(&mut *self.conn)
                .await
                .map_err(map_err)?;
        Ok(match waits {
            Some(true) => Refill::Nothing,
            _ => Refill::InOwnStep,
        })
    }

    async fn key_holder(&mut self, key: &str) -> Result<KeyHolder, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(self.inner.bookings.key_holder.as_str()))
            .bind(key)
            .bind(None::<Timestamp>)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(map_err)?;
        if let Some(booking) = crate::bookings::booking_of(&rows)? {
            return Ok(KeyHolder::Booking(booking));
        }
        let row = sqlx::query(AssertSqlSafe(self.inner.waitlists.by_key.as_str()))
            .bind(key)
            .bind(None::<Timestamp>)
            .fetch_one(&mut *self.conn)
            .await
            .map_err(map_err)?;
        Ok(match crate::waitlists::placed_entry(&row)? {
            Some((entry, position)) => KeyHolder::Waiting(entry, position),
            None => KeyHolder::Free,
        })
    }

    async fn slot_state(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<(SlotLimits, i64)>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.place_sql().slot_state.as_str()))
            .bind(slot_id.get())
            .bind(now)
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?;
        row.map(|row| store::slot_state_of(&Cols::of(&row)))
            .transpose()
    }

    async fn pools_of_slot(&mut self, slot_id: SlotId) -> Result<Vec<PoolId>, StoreError> {
        let pools: Option<Vec<i64>> =
            sqlx::query_scalar(AssertSqlSafe(self.place_sql().pools_of_slot.as_str()))
                .bind(slot_id.get())
                .fetch_optional(&mut *self.conn)
                .await
                .map_err(map_err)?;
        let mut pools = pools.unwrap_or_default();
        pools.sort_unstable();
        Ok(pools.into_iter().map(PoolId).collect())
    }
}

impl Run<'_> {
    /// A hold by the core's rule ([`place_hold`](store::place_hold)) over the kernel, in a
    /// unit of work deciding at one instant; when a pool of its slot is short, the pools'
    /// reclaim in a unit of its own and the hold once more.
    pub(crate) async fn place_hold(
        &mut self,
        request: &HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let mut refilled = false;
        loop {
            let mut unit = self.unit(request.now).await?;
            let at = unit.now;
            let request = HoldRequest {
                now: at,
                expires_at: at + (request.expires_at - request.now),
                ..*request
            };
            let step = store::place_hold(&mut unit.kernel(&inner), &request, refilled).await;
            let outcome = match unit.finish(step).await? {
                Placing::Done(outcome) => outcome,
                Placing::KeyTaken => {
                    let holder = self.read_key_holder(request.key.as_str()).await?;
                    store::hold_key_answer(&request, holder)
                }
                Placing::Refill(pools) => {
                    self.refill(&pools, at).await?;
                    refilled = true;
                    continue;
                }
            };
            return Ok(Decided::new(at, outcome));
        }
    }

    /// A booking of several lines by the core's rule
    /// ([`place_booking`](store::place_booking)), as [`Run::place_hold`] places a hold.
    pub(crate) async fn place_booking(
        &mut self,
        request: &BookingRequest<'_>,
    ) -> Result<Decided<BookingOutcome>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let mut refilled = false;
        loop {
            let mut unit = self.unit(request.now).await?;
            let at = unit.now;
            let request = BookingRequest {
                now: at,
                expires_at: at + (request.expires_at - request.now),
                ..*request
            };
            let step = store::place_booking(&mut unit.kernel(&inner), &request, refilled).await;
            let outcome = match unit.finish(step).await? {
                Placing::Done(outcome) => outcome,
                Placing::KeyTaken => {
                    let holder = self.read_key_holder(request.key.as_str()).await?;
                    store::booking_key_answer(&request, holder)
                }
                Placing::Refill(pools) => {
                    self.refill(&pools, at).await?;
                    refilled = true;
                    continue;
                }
            };
            return Ok(Decided::new(at, outcome));
        }
    }

    /// Who has the idempotency `key`, read after the unit of work its unique constraint
    /// refused was undone.
    pub(crate) async fn read_key_holder(&mut self, key: &str) -> Result<KeyHolder, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let conn = self.conn.get().await?;
        Kernel {
            inner: &inner,
            conn,
        }
        .key_holder(key)
        .await
    }

    /// Gives back the expired holds of every slot of `pools` in a unit of its own: the refill
    /// a placement asked for ([`Placing::Refill`]).
    async fn refill(&mut self, pools: &[PoolId], now: Timestamp) -> Result<(), StoreError> {
        let pools: Vec<i64> = pools.iter().map(|pool| pool.get()).collect();
        self.reclaim_pools(&pools, &[], now).await?;
        Ok(())
    }
}
