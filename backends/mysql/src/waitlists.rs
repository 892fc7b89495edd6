//! Waitlists ([`WaitlistStore`](slot_booking::WaitlistStore)): a request joins its slot's line when
//! its units are short and is offered them (a hold of its owner, for its offer window) in the step
//! that frees them (the `serve` module). A waiting entry is a row of the holds table with status
//! `waiting` (migration 5): its key is taken like a hold's, and offering it turns the row into the
//! held hold of the same id.
//!
//! A join and a leave are the core's rules ([`join_line`](slot_booking::store::join_line),
//! [`leave_line`](slot_booking::store::leave_line)) on this store's primitives: the entry's
//! conditional insert and its delete, each counted in or out of the slot's and its pools'
//! rows.

use async_trait::async_trait;
use slot_booking::store::{self, Enqueued, WaitKernel};
use slot_booking::{
    EntryId, JoinRequest, OwnerId, Scope, SlotId, SlotLimits, StoreError, WaitlistEntry,
};
use sqlx::mysql::MySqlConnection;
use sqlx::AssertSqlSafe;

use crate::kernel::Kernel;
use crate::map_err;
use crate::rows::{placed_entry_from_row, to_micros, Cols};
use crate::serve::count;
use crate::sql::Statements;
use crate::units::{id_of, pools_of_slot};

/// The entry `entry_id` still waiting, if `scope` admits it, with its place in line.
pub(crate) async fn entry_in_scope(
    sql: &Statements,
    conn: &mut MySqlConnection,
    entry_id: EntryId,
    scope: &Scope,
) -> Result<Option<(WaitlistEntry, u32)>, StoreError> {
    let (any, owner) = scope.as_filter();
    sqlx::query(AssertSqlSafe(sql.waitlists.entry_in_scope.as_str()))
        .bind(entry_id.0)
        .bind(any)
        .bind(owner)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(placed_entry_from_row)
        .transpose()
}

/// The store's primitives of a join and a leave: the entry's conditional insert and its
/// delete, each counted in or out of its slot's and its pools' `waiting`.
#[async_trait]
impl WaitKernel for Kernel<'_> {
    async fn insert_entry(&mut self, request: &JoinRequest<'_>) -> Result<Enqueued, StoreError> {
        let hold = &request.hold;
        let offer_micros = (hold.expires_at - hold.now)
            .num_microseconds()
            .ok_or_else(|| StoreError::failed("an offer window overflows microseconds"))?;
        let inserted = sqlx::query(AssertSqlSafe(self.sql.waitlists.insert_entry.as_str()))
            .bind(hold.key.as_str())
            .bind(to_micros(hold.now))
            .bind(to_micros(hold.now))
            .bind(hold.quantity)
            .bind(hold.owner.map(OwnerId::as_str))
            .bind(request.priority)
            .bind(offer_micros)
            .bind(hold.slot_id.get())
            .bind(to_micros(hold.now))
            .bind(hold.quantity)
            .bind(hold.quantity)
            .execute(&mut *self.conn)
            .await;
        let inserted = match inserted {
            Ok(inserted) if inserted.rows_affected() == 0 => return Ok(Enqueued::NotStored),
            Ok(inserted) => inserted,
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                return Ok(Enqueued::KeyTaken)
            }
            Err(error) => return Err(map_err(error)),
        };
        let entry_id = EntryId(id_of(inserted)?);
        self.count(hold.slot_id, 1).await?;
        Ok(Enqueued::Stored(entry_id))
    }

    async fn join_limits(&mut self, slot_id: SlotId) -> Result<Option<SlotLimits>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.sql.waitlists.join_limits.as_str()))
            .bind(slot_id.get())
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(map_err)?;
        row.map(|row| store::join_limits_of(&Cols(&row)))
            .transpose()
    }

    async fn entry_in_scope(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
    ) -> Result<Option<(WaitlistEntry, u32)>, StoreError> {
        entry_in_scope(self.sql, self.conn, entry_id, scope).await
    }

    async fn delete_entry(
        &mut self,
        entry: &WaitlistEntry,
        scope: &Scope,
    ) -> Result<bool, StoreError> {
        let (any, owner) = scope.as_filter();
        let deleted = sqlx::query(AssertSqlSafe(self.sql.waitlists.leave.as_str()))
            .bind(entry.entry_id.0)
            .bind(any)
            .bind(owner)
            .execute(&mut *self.conn)
            .await
            .map_err(map_err)?;
        if deleted.rows_affected() != 1 {
            return Ok(false);
        }
        self.count(entry.slot_id, -1).await?;
        Ok(true)
    }
}

impl Kernel<'_> {
    /// Counts `change` entries in (or out of) the line of `slot_id` and of each of its pools.
    async fn count(&mut self, slot_id: SlotId, change: i64) -> Result<(), StoreError> {
        let pools = pools_of_slot(self.sql, self.conn, slot_id).await?;
        count(self.sql, self.conn, slot_id.get(), &pools, change).await
    }
}
