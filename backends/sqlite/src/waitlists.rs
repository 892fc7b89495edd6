//! Waitlists (migrations 10 and 11): slots' and pools' lines of entries, served in strict
//! order in the unit of work that frees their units, on the one write path ([`Run`]).
//!
//! An entry is a row of `<prefix>waitlist_entries`; its slot's `waiting` counts the entries of
//! its line (kept by the triggers of migration 10 with each insert and delete of an entry). A
//! pool's line is the waiting entries of its slots that sell at the time, in line order.
//!
//! * **Nobody jumps the line.** The `holds_take_a_unit` trigger's conditional decrement requires
//!   `waiting = 0` on the slot and on every selling slot of its pools (migration 11; an offer,
//!   the hold of a waiting entry's own id, excepted), so a hold, a booking's line and a group
//!   commit's insert on a slot with a line, or in a pool with one, are refused as sold out by
//!   their own statement; availability lists such a slot with 0 units.
//! * **Keys.** An entry's key is free of holds when it is inserted (the join's insert checks
//!   in the same statement, under the write lock) and of other entries (the unique
//!   constraint); the trigger refuses a hold whose key a waiting entry has. The offer is stored
//!   under the entry's key; leaving deletes the row, and the key with it.
//! * **Ids.** An entry's id is [`next_hold_id`](crate::fragments::next_hold_id), as a hold's is, and
//!   `waitlist_ids` keeps the highest ever drawn, so no hold ever takes the number of an
//!   entry: its offer is the hold of that number.
//! * **Serving** ([`serve_lines`](crate::serve::serve_lines)): a set of slots' and pools' lines, to a fixpoint: each
//!   line's head that is ready (its slot sells; it heads its slot's line and every line of its
//!   slot's pools; it fits its slot's `remaining` and every pool's, expired units counted free)
//!   is offered: the expired holds that make it fit reclaimed (its slot's, and for a short pool
//!   those of the pool's slots), then one `INSERT … SELECT` of the entry, which takes its units
//!   through the trigger and appends `hold_placed` through the other, its entry deleted and
//!   `waitlist_offered` appended. Every write that must serve lines does so in its own unit of
//!   work, after its own change: a cancel of a hold or booking (`lines.rs`), the sweeper's
//!   reclaim (`events.rs`, every line), a capacity change, reopened or closed sales and a
//!   removal (`admin.rs`), a pool's capacity change and a detach (`pools.rs`), a leave and a
//!   join (here).

use std::sync::Arc;

use async_trait::async_trait;
use slot_booking::store::{
    self, join_key_answer, join_line, leave_line, Enqueued, Joining, PlaceKernel as _, WaitKernel,
};
use slot_booking::{
    Decided, EntryId, JoinOutcome, JoinRequest, OwnerId, Scope, SlotId, SlotLimits, StoreError,
    Timestamp, WaitlistEntry,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::AssertSqlSafe;

use crate::kernel::Kernel;
use crate::rows::{placed_entry_from_row, to_micros, Cols};
use crate::run::Run;
use crate::sql::Statements;
use crate::{is_unique_violation, map_err};

/// The store's primitives of a join and a leave: the entry's conditional insert and its
/// delete (the triggers of migration 10 count it in and out of its slot's `waiting`).
#[async_trait]
impl WaitKernel for Kernel<'_> {
    async fn insert_entry(&mut self, request: &JoinRequest<'_>) -> Result<Enqueued, StoreError> {
        let hold = &request.hold;
        let offer_micros = (hold.expires_at - hold.now)
            .num_microseconds()
            .ok_or_else(|| StoreError::failed("an offer window overflows microseconds"))?;
        let inserted = sqlx::query_scalar(AssertSqlSafe(self.sql.waitlists.join.as_str()))
            .bind(hold.slot_id.get())
            .bind(hold.key.as_str())
            .bind(hold.quantity)
            .bind(hold.owner.map(OwnerId::as_str))
            .bind(request.priority)
            .bind(to_micros(hold.now))
            .bind(offer_micros)
            .fetch_all(&mut *self.conn)
            .await;
        match inserted {
            Ok(ids) => Ok(match ids.first() {
                Some(id) => Enqueued::Stored(EntryId(*id)),
                None => Enqueued::NotStored,
            }),
            Err(error) if is_unique_violation(&error) => Ok(Enqueued::KeyTaken),
            Err(error) => Err(map_err(error)),
        }
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
        let rows = sqlx::query(AssertSqlSafe(self.sql.waitlists.leave.as_str()))
            .bind(entry.entry_id.0)
            .bind(any)
            .bind(owner)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(map_err)?;
        Ok(!rows.is_empty())
    }
}

/// The entry `entry_id` still waiting, if `scope` admits it, with its place in line.
async fn entry_in_scope(
    sql: &Statements,
    conn: &mut SqliteConnection,
    entry_id: EntryId,
    scope: &Scope,
) -> Result<Option<(WaitlistEntry, u32)>, StoreError> {
    let (any, owner) = scope.as_filter();
    sqlx::query(AssertSqlSafe(sql.waitlists.entry_in_scope.as_str()))
        .bind(entry_id.0)
        .bind(any)
        .bind(owner)
        .fetch_optional(conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(placed_entry_from_row)
        .transpose()
}

impl Run<'_> {
    /// A join, by the core's rule ([`join_line`]) in a unit of work of its own.
    pub(crate) async fn join_waitlist(
        &mut self,
        request: JoinRequest<'_>,
    ) -> Result<Decided<JoinOutcome>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let kernel = &mut Kernel {
            sql: &sql,
            conn: unit.connection(),
        };
        let step = join_line(kernel, &request).await;
        let outcome = match unit.finish(step).await? {
            Joining::Done(outcome) => outcome,
            Joining::KeyTaken => {
                let mut conn = self.conn().await?;
                let reader = &mut Kernel {
                    sql: &sql,
                    conn: &mut conn,
                };
                let holder = reader.key_holder(request.hold.key.as_str()).await?;
                join_key_answer(&request, holder)
            }
        };
        Ok(Decided::new(request.hold.now, outcome))
    }

    /// A leave, by the core's rule ([`leave_line`]) in a unit of work of its own.
    pub(crate) async fn leave_waitlist(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<WaitlistEntry>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let kernel = &mut Kernel {
            sql: &sql,
            conn: unit.connection(),
        };
        let step = leave_line(kernel, entry_id, scope, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn waitlist_entry(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<(WaitlistEntry, u32)>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        let found = entry_in_scope(&sql, &mut conn, entry_id, scope).await?;
        Ok(Decided::new(now, found))
    }
}
