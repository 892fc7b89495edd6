//! The writes of slots and single holds on the one write path ([`Run`], `run.rs`): a slot
//! created; a hold placed (on the caller's connection, or through the store's group commit),
//! with the reclaim and retry a refused insert earns; a hold's confirm, renewal and cancel,
//! each changing every line of its booking; "any one of these" through the core's
//! [`first_that_fits`].

use slot_booking::store::{first_that_fits, place_hold, HoldChange, Placing};
use slot_booking::{AnyHoldOutcome, AnyHoldRequest, PlaceOne};
use slot_booking::{
    Decided, EventKind, Hold, HoldId, HoldOutcome, HoldRequest, NewSlot, RenewRequest, ResourceId,
    Scope, Slot, StoreError, Timestamp, Transition,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, Sqlite};
use std::sync::Arc;

use crate::group::{insert_hold, sold_out, Insert};
use crate::kernel::Kernel;
use crate::lines::change_lines;
use crate::map_err;
use crate::place::REFILLED_IN_PLACE;
use crate::reads::{booking_by_key, hold_by_id};
use crate::rows::{hold_from_row, slot_from_row, to_micros};
use crate::run::{begin_unit, finish, Run, Step, Target};
use crate::sql::Statements;
use crate::units::{log_slot, Query};

/// Stores a new slot and appends its `slot_created` event at `now`.
pub(crate) async fn create_slot(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot: &NewSlot,
    now: Timestamp,
) -> Result<Step<Slot>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(sql.create_slot.as_str()))
        .bind(to_micros(slot.starts_at))
        .bind(to_micros(slot.ends_at))
        .bind(slot.capacity)
        .bind(slot.resource.as_ref().map(ResourceId::as_str))
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    let slot = slot_from_row(&row)?;
    log_slot(sql, conn, EventKind::SlotCreated, &slot, now).await?;
    Ok(Step::keep(slot))
}

/// A hold on the caller's connection: the insert as the slot is stored, outside any unit of
/// work (unless the store is [`without_fast_paths`](crate::SqliteStore::without_fast_paths)),
/// then, only if it found no unit for a reason the statement could not settle, the core's
/// rule ([`place_hold`]) in a unit of work of its own. The insert needs no savepoint: a
/// statement aborted by the trigger or by the unique key undoes only itself, so a refusal
/// leaves the caller's transaction as it was (and usable), and a hold it stored stays in that
/// transaction as it would under a released savepoint. So a hold that is created, replayed or
/// sold out costs the insert (and, for a key in use, the key's read) and nothing else. The
/// insert's `hold_placed` event is appended by the `holds_placed_event` trigger (migration 5)
/// inside the insert itself.
pub(crate) async fn hold(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &HoldRequest<'_>,
    fast_paths: bool,
) -> Result<HoldOutcome, StoreError> {
    if fast_paths {
        match insert_hold(sql, &mut *conn, request).await? {
            Insert::Created(hold) => return Ok(HoldOutcome::Created(hold)),
            Insert::KeyTaken => return key_taken(sql, conn, request).await,
            Insert::SoldOut => return Ok(sold_out()),
            Insert::KeyWaits => return Ok(HoldOutcome::KeyReused(None)),
            Insert::NoUnit | Insert::PoolShort => {}
        }
    }
    let mut unit = begin_unit(conn).await?;
    let step = hold_after_reclaim(sql, &mut unit, request).await;
    let placing = finish(unit, step).await?;
    placed(sql, conn, request, placing).await
}

/// The answer to a hold whose key is taken: the key's hold, replayed or refused, or the
/// booking of several lines it is the first line of, refused.
pub(crate) async fn key_taken<'e, E>(
    sql: &Statements,
    executor: E,
    request: &HoldRequest<'_>,
) -> Result<HoldOutcome, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    booking_by_key(sql, executor, request.key.as_str())
        .await?
        .map(|holder| HoldOutcome::key_taken(request, holder))
        .ok_or_else(|| {
            StoreError::failed("a unique violation on the idempotency key, but no hold has it")
        })
}

/// A hold that found no unit as stored, placed by the core's rule ([`place_hold`]) in the
/// unit of work `conn` is in: the slot's expired holds reclaimed (one `hold_expired` event
/// each) and once more; when a pool of the slot is short then, the expired holds of the short
/// pools' slots and once more. Refused, it says why and undoes the reclaims and their events
/// (the next hold that needs the units redoes them).
pub(crate) async fn hold_after_reclaim(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &HoldRequest<'_>,
) -> Result<Step<Placing<HoldOutcome>>, StoreError> {
    place_hold(&mut Kernel { sql, conn }, request, false).await
}

/// The answer of a hold [`hold_after_reclaim`] placed, once its unit of work ended: a key the
/// unique constraint refused is read on `executor`.
pub(crate) async fn placed<'e, E>(
    sql: &Statements,
    executor: E,
    request: &HoldRequest<'_>,
    placing: Placing<HoldOutcome>,
) -> Result<HoldOutcome, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    match placing {
        Placing::Done(outcome) => Ok(outcome),
        Placing::KeyTaken => key_taken(sql, executor, request).await,
        Placing::Refill(_) => Err(StoreError::failed(REFILLED_IN_PLACE)),
    }
}

/// The line `hold_id` of the booking whose lines a change returned: `None` when it changed
/// nothing.
fn line_of(lines: Vec<Hold>, hold_id: HoldId) -> Result<Option<Hold>, StoreError> {
    if lines.is_empty() {
        return Ok(None);
    }
    lines
        .into_iter()
        .find(|hold| hold.hold_id == hold_id)
        .map(Some)
        .ok_or_else(|| {
            StoreError::failed("a change of a booking left out the line it was asked of")
        })
}

/// Confirms the active held hold `hold_id` with every line of its booking (see
/// [`change_lines`](crate::lines::change_lines)).
pub(crate) async fn confirm(
    sql: &Statements,
    conn: &mut SqliteConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let (any, owner) = scope.as_filter();
    let update = sqlx::query(AssertSqlSafe(sql.confirm.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner);
    let lines = change_lines(sql, conn, update, HoldChange::Confirm, now).await?;
    let transition = match line_of(lines, hold_id)? {
        Some(hold) => Transition::Applied(hold),
        None => not_applied(hold_by_id(sql, conn, hold_id, scope).await?),
    };
    Ok(Step::keep(transition))
}

/// Renews the active held hold `hold_id` with every line of its booking. The update changes
/// the rows only when the renewal moves their expiry (and then appends `hold_renewed` for each
/// line); when it changes nothing, a read with the same parameters tells a renewal with nothing
/// to move (applied, the hold unchanged, no event) from a refusal.
pub(crate) async fn renew(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition>, StoreError> {
    let renewal = Renewal::of(request)?;
    let lines = change_lines(
        sql,
        conn,
        renewal.bind(&sql.renew),
        HoldChange::Renew(request),
        request.now,
    )
    .await?;
    if let Some(hold) = line_of(lines, request.hold_id)? {
        return Ok(Step::keep(Transition::Applied(hold)));
    }
    let unmoved = renewal
        .bind(&sql.renew_unmoved)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let transition = match unmoved {
        Some(row) => Transition::Applied(hold_from_row(&row)?),
        None => not_applied(hold_by_id(sql, conn, request.hold_id, request.scope).await?),
    };
    Ok(Step::keep(transition))
}

/// A renewal's parameters, bound the same way to each of its statements: `?1` now, `?2` the
/// hold's (or booking's) id, `?3` lifetime and `?4` maximum life in microseconds, `?5` and `?6`
/// the scope.
pub(crate) struct Renewal<'r> {
    request: &'r RenewRequest<'r>,
    lifetime: i64,
    max_life: i64,
}

impl<'r> Renewal<'r> {
    pub(crate) fn of(request: &'r RenewRequest<'r>) -> Result<Self, StoreError> {
        let (lifetime, max_life) = request.micros()?;
        Ok(Renewal {
            request,
            lifetime,
            max_life,
        })
    }

    pub(crate) fn bind<'q>(&self, statement: &'q str) -> Query<'q> {
        let (any, owner) = self.request.scope.as_filter();
        sqlx::query(AssertSqlSafe(statement))
            .bind(to_micros(self.request.now))
            .bind(self.request.hold_id.get())
            .bind(self.lifetime)
            .bind(self.max_life)
            .bind(any)
            .bind(owner.map(str::to_owned))
    }
}

/// Cancels the active held or confirmed hold `hold_id` with every line of its booking, giving
/// each line's units back to its slot.
pub(crate) async fn cancel(
    sql: &Statements,
    conn: &mut SqliteConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let (any, owner) = scope.as_filter();
    let update = sqlx::query(AssertSqlSafe(sql.cancel.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner);
    let lines = change_lines(sql, conn, update, HoldChange::Cancel, now).await?;
    let transition = match line_of(lines, hold_id)? {
        Some(hold) => Transition::Applied(hold),
        None => not_applied(hold_by_id(sql, conn, hold_id, scope).await?),
    };
    Ok(Step::keep(transition))
}

impl Run<'_> {
    pub(crate) async fn create_slot(
        &mut self,
        slot: &NewSlot,
        now: Timestamp,
    ) -> Result<Slot, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = create_slot(&sql, unit.connection(), slot, now).await;
        unit.finish(step).await
    }

    pub(crate) async fn create_hold(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let outcome = match &mut self.target {
            Target::Store(store) => store.place_hold(&request).await?,
            Target::Caller(conn) => hold(&self.sql, conn, &request, self.fast_paths).await?,
        };
        Ok(Decided::new(request.now, outcome))
    }

    /// An "any one of these" hold: the core's rule, each candidate's attempt on this target.
    pub(crate) async fn create_hold_any(
        &mut self,
        request: AnyHoldRequest<'_>,
    ) -> Result<Decided<AnyHoldOutcome>, StoreError> {
        first_that_fits(self, request).await
    }

    pub(crate) async fn confirm_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = confirm(&sql, unit.connection(), hold_id, scope, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn cancel_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = cancel(&sql, unit.connection(), hold_id, scope, now).await;
        Ok(Decided::new(now, unit.finish(step).await?))
    }

    pub(crate) async fn renew_hold(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut unit = self.unit().await?;
        let step = renew(&sql, unit.connection(), &request).await;
        Ok(Decided::new(request.now, unit.finish(step).await?))
    }
}

/// A hold an update did not change: as it is now, or not found in the caller's scope.
pub(crate) fn not_applied(hold: Option<Hold>) -> Transition {
    match hold {
        Some(hold) => Transition::NotApplied(hold),
        None => Transition::NotFound,
    }
}

#[slot_booking::async_trait]
impl PlaceOne for Run<'_> {
    async fn place_one(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        self.create_hold(request).await
    }
}
