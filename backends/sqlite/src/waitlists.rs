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

use slot_booking::{
    Decided, EntryId, HoldOutcome, JoinOutcome, JoinRequest, OwnerId, Scope, SlotLimits,
    StoreError, Timestamp, WaitlistEntry,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::AssertSqlSafe;

use crate::reads::booking_by_key;
use crate::rows::{entry_from_row, from_micros, placed_entry_from_row, to_micros};
use crate::run::{Run, Step};
use crate::serve::serve;
use crate::sql::Statements;
use crate::{is_unique_violation, map_err};

/// [`WaitlistStore::join_waitlist`](slot_booking::WaitlistStore::join_waitlist) in the unit
/// of work `conn` is in: the entry's conditional insert, then the line served; the new entry
/// served is answered with its offer. No row inserted: [`join_refusal`] says why.
async fn join(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &JoinRequest<'_>,
) -> Result<Step<JoinOutcome>, StoreError> {
    let hold = &request.hold;
    let offer_micros = (hold.expires_at - hold.now)
        .num_microseconds()
        .ok_or_else(|| StoreError::failed("an offer window overflows microseconds"))?;
    let inserted = sqlx::query(AssertSqlSafe(sql.waitlists.join.as_str()))
        .bind(hold.slot_id.get())
        .bind(hold.key.as_str())
        .bind(hold.quantity)
        .bind(hold.owner.map(OwnerId::as_str))
        .bind(request.priority)
        .bind(to_micros(hold.now))
        .bind(offer_micros)
        .fetch_all(&mut *conn)
        .await;
    let entry = match inserted {
        Ok(rows) => match rows.first() {
            Some(row) => entry_from_row(row)?,
            None => return join_refusal(sql, conn, request).await,
        },
        // Another entry has the key.
        Err(error) if is_unique_violation(&error) => return join_refusal(sql, conn, request).await,
        Err(error) => return Err(map_err(error)),
    };
    let offers = serve(sql, conn, entry.slot_id, hold.now).await?;
    if let Some(offer) = offers
        .into_iter()
        .find(|offer| offer.hold_id == entry.offer_id())
    {
        return Ok(Step::keep(JoinOutcome::Held {
            hold: offer,
            replayed: false,
        }));
    }
    let (entry, position) = entry_in_scope(sql, conn, entry.entry_id, &Scope::BackOffice)
        .await?
        .ok_or_else(|| StoreError::failed("a new waitlist entry is gone"))?;
    Ok(Step::keep(JoinOutcome::Waiting {
        entry,
        position,
        replayed: false,
    }))
}

/// What `join_refusal` reads: the slot's `starts_at`, `capacity`, `closed` and `removed_at`,
/// and the smallest capacity of its pools (none: no pool).
type JoinLimits = (i64, i32, bool, Option<i64>, Option<i32>);

/// Why a join stored no entry, read in its unit of work, in the order every store answers: the
/// key's entry (a replay, or the key reused), the key's hold or booking (a replay of the
/// offer, or the key reused), then the slot's limits, then its pools.
async fn join_refusal(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &JoinRequest<'_>,
) -> Result<Step<JoinOutcome>, StoreError> {
    let hold = &request.hold;
    let keyed = sqlx::query(AssertSqlSafe(sql.waitlists.entry_by_key.as_str()))
        .bind(hold.key.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    if let Some(row) = keyed {
        let (entry, position) = placed_entry_from_row(&row)?;
        let outcome = JoinOutcome::key_waits(request, entry, position, hold.now);
        return Ok(Step::undo(outcome));
    }
    if let Some(holder) = booking_by_key(sql, &mut *conn, hold.key.as_str()).await? {
        return Ok(Step::undo(JoinOutcome::key_taken(hold, holder)));
    }
    let slot: Option<JoinLimits> =
        sqlx::query_as(AssertSqlSafe(sql.waitlists.join_refusal.as_str()))
            .bind(hold.slot_id.get())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    let Some((starts_at, capacity, closed, removed_at, pool_capacity)) = slot else {
        return Ok(Step::undo(JoinOutcome::Refused(HoldOutcome::refused(
            hold, None, None,
        ))));
    };
    // A quantity more than the capacity of a pool of the slot exceeds it as the slot's own
    // would: the smallest of them is the most a request can ever be given.
    let limits = SlotLimits {
        starts_at: from_micros(starts_at)?,
        capacity: pool_capacity.map_or(capacity, |pool| pool.min(capacity)),
        closed,
        removed: removed_at.is_some(),
    };
    match HoldOutcome::refused(hold, None, Some(limits)) {
        HoldOutcome::SoldOut => Err(StoreError::failed(
            "a waitlist entry that its slot admits was not stored",
        )),
        refused => Ok(Step::undo(JoinOutcome::Refused(refused))),
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

/// [`WaitlistStore::leave_waitlist`](slot_booking::WaitlistStore::leave_waitlist) in the unit
/// of work `conn` is in: the entry's row deleted (its key with it) if it waits in `scope`, then
/// its line served.
async fn leave(
    sql: &Statements,
    conn: &mut SqliteConnection,
    entry_id: EntryId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Option<WaitlistEntry>>, StoreError> {
    let (any, owner) = scope.as_filter();
    let rows = sqlx::query(AssertSqlSafe(sql.waitlists.leave.as_str()))
        .bind(entry_id.0)
        .bind(any)
        .bind(owner)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let Some(row) = rows.first() else {
        return Ok(Step::keep(None));
    };
    let entry = entry_from_row(row)?;
    serve(sql, conn, entry.slot_id, now).await?;
    Ok(Step::keep(Some(entry)))
}

impl Run<'_> {
    pub(crate) async fn join_waitlist(
        &mut self,
        request: JoinRequest<'_>,
    ) -> Result<Decided<JoinOutcome>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = join(&sql, unit.connection(), &request).await;
        Ok(Decided::new(request.hold.now, unit.finish(step).await?))
    }

    pub(crate) async fn leave_waitlist(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<WaitlistEntry>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = leave(&sql, unit.connection(), entry_id, scope, now).await;
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
