//! Waitlists ([`WaitlistStore`](slot_booking::WaitlistStore)): a request joins its slot's line when
//! its units are short and is offered them (a hold of its owner, for its offer window) in the step
//! that frees them (the `serve` module). A waiting entry is a row of the holds table with status
//! `waiting` (migration 5): its key is taken like a hold's, and offering it turns the row into the
//! held hold of the same id.
//!
//! A join locks its slot's row, then its pools' (ascending), answers a key in use (a replay of
//! the entry or of its offer, or the key reused) and a slot that does not sell or a quantity
//! beyond the slot's or a pool's capacity as a hold would be refused, and otherwise inserts the
//! entry, counts it in the slot's and the pools' rows, and serves the slot's line and its
//! pools'. A leave deletes the entry (its key with it), counts it out and serves the same lines.

use slot_booking::{
    EntryId, HoldOutcome, JoinOutcome, JoinRequest, OwnerId, Scope, SlotLimits, StoreError,
    Timestamp, WaitlistEntry,
};
use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::{AssertSqlSafe, Row};

use crate::lines::booking_by_key;
use crate::map_err;
use crate::rows::entry_from_row;
use crate::rows::{from_micros, to_micros};
use crate::serve::{count, serve, Lines};
use crate::sql::Statements;
use crate::units::{lock_pools_of, lock_slot, Step};

/// A row of an entry with its `position`.
fn placed_entry_from_row(row: &MySqlRow) -> Result<(WaitlistEntry, u32), StoreError> {
    let position: i64 = row.try_get("position").map_err(map_err)?;
    Ok((
        entry_from_row(row)?,
        u32::try_from(position).map_err(StoreError::failed)?,
    ))
}

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

/// Whether the idempotency `key` is a waiting entry's.
pub(crate) async fn key_waits(
    sql: &Statements,
    conn: &mut MySqlConnection,
    key: &str,
) -> Result<bool, StoreError> {
    let entry: Option<i64> = sqlx::query_scalar(AssertSqlSafe(sql.waitlists.key_waits.as_str()))
        .bind(key)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(entry.is_some())
}

/// What a join's key answers, if it is taken: the entry's replay or reuse, or the hold's or
/// booking's.
pub(crate) async fn key_answer(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &JoinRequest<'_>,
) -> Result<Option<JoinOutcome>, StoreError> {
    let hold = &request.hold;
    let keyed = sqlx::query(AssertSqlSafe(sql.waitlists.entry_by_key.as_str()))
        .bind(hold.key.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    if let Some(row) = keyed {
        let (entry, position) = placed_entry_from_row(&row)?;
        return Ok(Some(JoinOutcome::key_waits(
            request, entry, position, hold.now,
        )));
    }
    if let Some(holder) = booking_by_key(sql, conn, hold.key.as_str()).await? {
        return Ok(Some(JoinOutcome::key_taken(hold, holder)));
    }
    Ok(None)
}

/// What `join_limits` reads: the slot's `starts_at`, `capacity`, `closed` and `removed_at`,
/// and the least capacity of its pools (none: no pool).
type JoinLimits = (i64, i32, bool, Option<i64>, Option<i32>);

/// [`WaitlistStore::join_waitlist`] as a step (see the module's docs). `None`: the key's
/// unique constraint refused the entry (a concurrent request took the key); answered after
/// the rollback.
pub(crate) async fn join(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &JoinRequest<'_>,
) -> Result<Step<Option<JoinOutcome>>, StoreError> {
    let hold = &request.hold;
    let slot = hold.slot_id;
    lock_slot(sql, conn, slot).await?;
    let pools = lock_pools_of(sql, conn, &[slot]).await?;
    if let Some(answer) = key_answer(sql, conn, request).await? {
        return Ok(Step::undo(Some(answer)));
    }
    let limits: Option<JoinLimits> =
        sqlx::query_as(AssertSqlSafe(sql.waitlists.join_limits.as_str()))
            .bind(slot.get())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    let limits = match limits {
        Some((starts_at, capacity, closed, removed_at, pool_capacity)) => Some(SlotLimits {
            starts_at: from_micros(starts_at)?,
            // More than a pool's capacity exceeds it as the slot's own would.
            capacity: pool_capacity.map_or(capacity, |pool| pool.min(capacity)),
            closed,
            removed: removed_at.is_some(),
        }),
        None => None,
    };
    match HoldOutcome::refused(hold, None, limits) {
        HoldOutcome::SoldOut => {}
        refused => return Ok(Step::undo(Some(JoinOutcome::Refused(refused)))),
    }
    let offer_micros = (hold.expires_at - hold.now)
        .num_microseconds()
        .ok_or_else(|| StoreError::failed("an offer window overflows microseconds"))?;
    let inserted = sqlx::query(AssertSqlSafe(sql.waitlists.insert_entry.as_str()))
        .bind(slot.get())
        .bind(hold.key.as_str())
        .bind(to_micros(hold.now))
        .bind(to_micros(hold.now))
        .bind(hold.quantity)
        .bind(hold.owner.map(OwnerId::as_str))
        .bind(request.priority)
        .bind(offer_micros)
        .execute(&mut *conn)
        .await;
    let inserted = match inserted {
        Ok(inserted) => inserted,
        Err(sqlx::Error::Database(db)) if db.is_unique_violation() => return Ok(Step::undo(None)),
        Err(error) => return Err(map_err(error)),
    };
    let entry_id = EntryId(crate::units::id_of(inserted)?);
    count(sql, conn, slot.get(), &pools, 1).await?;
    let mut lines = Lines::new();
    lines.slot_and_pools(sql, conn, slot).await?;
    let offers = serve(sql, conn, lines, hold.now).await?;
    if let Some(offer) = offers.into_iter().find(|o| o.hold_id.get() == entry_id.0) {
        return Ok(Step::keep(Some(JoinOutcome::Held {
            hold: offer,
            replayed: false,
        })));
    }
    let (entry, position) = entry_in_scope(sql, conn, entry_id, &Scope::BackOffice)
        .await?
        .ok_or_else(|| StoreError::failed("a new waitlist entry is gone"))?;
    Ok(Step::keep(Some(JoinOutcome::Waiting {
        entry,
        position,
        replayed: false,
    })))
}

/// [`WaitlistStore::leave_waitlist`] as a step: the entry's slot (which never changes) locked,
/// then its pools, the entry deleted if it waits in `scope`, counted out, its lines served.
pub(crate) async fn leave(
    sql: &Statements,
    conn: &mut MySqlConnection,
    entry_id: EntryId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Option<WaitlistEntry>>, StoreError> {
    let Some((entry, _)) = entry_in_scope(sql, conn, entry_id, scope).await? else {
        return Ok(Step::keep(None));
    };
    let slot = entry.slot_id;
    lock_slot(sql, conn, slot).await?;
    let pools = lock_pools_of(sql, conn, &[slot]).await?;
    let (any, owner) = scope.as_filter();
    let deleted = sqlx::query(AssertSqlSafe(sql.waitlists.leave.as_str()))
        .bind(entry_id.0)
        .bind(any)
        .bind(owner)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if deleted.rows_affected() != 1 {
        // Offered (or left) since it was read.
        return Ok(Step::keep(None));
    }
    count(sql, conn, slot.get(), &pools, -1).await?;
    let mut lines = Lines::new();
    lines.slot_and_pools(sql, conn, slot).await?;
    serve(sql, conn, lines, now).await?;
    Ok(Step::keep(Some(entry)))
}
