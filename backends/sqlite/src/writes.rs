//! The writes of slots and single holds on the one write path ([`Run`], `run.rs`): a slot
//! created; a hold placed (on the caller's connection, or through the store's group commit),
//! with the reclaim and retry a refused insert earns; a hold's confirm, renewal and cancel,
//! each changing every line of its booking; "any one of these" through the core's
//! [`first_that_fits`].

use slot_booking::{
    Decided, EventKind, Hold, HoldId, HoldOutcome, HoldRequest, NewSlot, RenewRequest, ResourceId,
    Scope, Slot, SlotLimits, StoreError, Timestamp, Transition,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, Sqlite};
use std::sync::Arc;

use slot_booking::store::{
    first_that_fits, take_with_refill, Attempt, HoldChange, Refill, RefillOps,
};
use slot_booking::{
    async_trait, AnyHoldOutcome, AnyHoldRequest, BookingLine, BookingRequest, PlaceOne,
};

use crate::group::{insert_hold, insert_outcome, sold_out, Insert};
use crate::lines::change_lines;
use crate::map_err;
use crate::reads::{booking_by_key, hold_by_id};
use crate::rows::{from_micros, hold_from_row, slot_from_row, to_micros};
use crate::run::{begin_unit, finish, Run, Step, Target};
use crate::sql::Statements;
use crate::units::{log_slot, reclaim, reclaim_short_pools, Query};

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
/// work, then, only if it found no unit for a reason the statement could not settle,
/// [`hold_after_reclaim`] in a unit of work of its own. The insert needs no savepoint: a
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
) -> Result<HoldOutcome, StoreError> {
    match insert_hold(sql, &mut *conn, request).await? {
        Insert::Created(hold) => Ok(HoldOutcome::Created(hold)),
        Insert::KeyTaken => key_taken(sql, conn, request).await,
        Insert::SoldOut => Ok(sold_out()),
        Insert::KeyWaits => Ok(HoldOutcome::KeyReused(None)),
        Insert::NoUnit | Insert::PoolShort => {
            let mut unit = begin_unit(conn).await?;
            let step = hold_after_reclaim(sql, &mut unit, request).await;
            finish(unit, step).await
        }
    }
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
        .ok_or_else(|| StoreError::failed(KEY_TAKEN_BY_NONE))
}

const KEY_TAKEN_BY_NONE: &str = "a unique violation on the idempotency key, but no hold has it";

/// A hold that found no unit, inserted again by the core's rule ([`take_with_refill`]): the
/// slot's expired holds reclaimed (one `hold_expired` event each) and once more; when a pool of
/// the slot is short then, the expired holds of the short pools' slots
/// ([`reclaim_short_pools`]) and once more. Tried even if this reclaimed nothing: a racing hold
/// may have reclaimed units since. Refused, it says why and undoes the reclaims and their
/// events (the next hold that needs the units redoes them).
pub(crate) async fn hold_after_reclaim(
    sql: &Statements,
    conn: &mut SqliteConnection,
    request: &HoldRequest<'_>,
) -> Result<Step<HoldOutcome>, StoreError> {
    let slot_id = request.slot_id.get();
    let short = Attempt::Short { pool: false };
    let last = take_with_refill(&mut Retake::new(sql, conn, Taking::Hold(request)), short).await?;
    let insert = match last {
        Attempt::Done(insert) => insert,
        Attempt::Short { pool: false } => Insert::NoUnit,
        // Refilled in place: the rule never answers `RefillApart` here.
        Attempt::Short { pool: true } | Attempt::RefillApart => Insert::PoolShort,
    };
    match insert {
        Insert::Created(hold) => return Ok(Step::keep(HoldOutcome::Created(hold))),
        // Settled by the trigger after the reclaim: nothing left to read.
        Insert::SoldOut => return Ok(Step::undo(sold_out())),
        Insert::KeyWaits => return Ok(Step::undo(HoldOutcome::KeyReused(None))),
        Insert::KeyTaken | Insert::NoUnit | Insert::PoolShort => {}
    }
    // Nothing was stored: say why. A key in use wins over every other answer.
    if let Some(holder) = booking_by_key(sql, &mut *conn, request.key.as_str()).await? {
        return Ok(Step::undo(HoldOutcome::key_taken(request, holder)));
    }
    if matches!(insert, Insert::KeyTaken) {
        return Err(StoreError::failed(KEY_TAKEN_BY_NONE));
    }
    let limits: Option<(i64, i32, bool, Option<i64>)> =
        sqlx::query_as(AssertSqlSafe(sql.slot_limits.as_str()))
            .bind(slot_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    let limits = match limits {
        Some((starts_at, capacity, closed, removed_at)) => Some(SlotLimits {
            starts_at: from_micros(starts_at)?,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        None => None,
    };
    Ok(Step::undo(HoldOutcome::refused(request, None, limits)))
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
            Target::Caller(conn) => hold(&self.sql, conn, &request).await?,
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

/// What a [`Retake`] inserts: a hold, or a booking's line (`key` the client's key for the
/// first line, [`line_key`](crate::bookings::line_key) for the others).
pub(crate) enum Taking<'a> {
    Hold(&'a HoldRequest<'a>),
    Line {
        request: &'a BookingRequest<'a>,
        line: &'a BookingLine,
        key: &'a str,
        booking: Option<HoldId>,
    },
}

impl Taking<'_> {
    fn slot_and_quantity(&self) -> (i64, i32, Timestamp) {
        match self {
            Taking::Hold(request) => (request.slot_id.get(), request.quantity, request.now),
            Taking::Line { request, line, .. } => (line.slot_id.get(), line.quantity, request.now),
        }
    }
}

/// `taking`'s insert, as an attempt of the core's [`take_with_refill`]: short (the slot, or a
/// pool of it) when the trigger found no unit for a reason the statement could not settle.
pub(crate) async fn insert(
    sql: &Statements,
    conn: &mut SqliteConnection,
    taking: &Taking<'_>,
) -> Result<Attempt<Insert>, StoreError> {
    let insert = match taking {
        Taking::Hold(request) => insert_hold(sql, &mut *conn, request).await?,
        Taking::Line {
            request,
            line,
            key,
            booking,
        } => {
            let inserted = sqlx::query(AssertSqlSafe(sql.insert_line.as_str()))
                .bind(line.slot_id.get())
                .bind(*key)
                .bind(to_micros(request.now))
                .bind(to_micros(request.expires_at))
                .bind(line.quantity)
                .bind(request.owner.map(|o| o.as_str()))
                .bind(booking.map(HoldId::get))
                // Stepped to its end, as a hold's insert is (see `run_insert`).
                .fetch_all(&mut *conn)
                .await;
            insert_outcome(inserted).map_err(map_err)?
        }
    };
    Ok(match insert {
        Insert::NoUnit => Attempt::Short { pool: false },
        Insert::PoolShort => Attempt::Short { pool: true },
        settled => Attempt::Done(settled),
    })
}

/// A hold's or a booking line's insert, tried again after the reclaims the core's rule
/// ([`take_with_refill`]) asks for, in the unit of work `conn` is in.
pub(crate) struct Retake<'a> {
    sql: &'a Statements,
    conn: &'a mut SqliteConnection,
    taking: Taking<'a>,
}

impl<'a> Retake<'a> {
    pub(crate) fn new(
        sql: &'a Statements,
        conn: &'a mut SqliteConnection,
        taking: Taking<'a>,
    ) -> Self {
        Retake { sql, conn, taking }
    }
}

#[async_trait]
impl RefillOps for Retake<'_> {
    type Done = Insert;

    async fn attempt(&mut self) -> Result<Attempt<Insert>, StoreError> {
        insert(self.sql, self.conn, &self.taking).await
    }

    /// Only a selling slot's holds are reclaimed. Tried again whatever this reclaimed: the
    /// first attempt may have run before this unit of work took the write lock.
    async fn reclaim_slot(&mut self) -> Result<bool, StoreError> {
        let (slot_id, _, now) = self.taking.slot_and_quantity();
        reclaim(self.sql, &self.sql.reclaim, self.conn, slot_id, now).await?;
        Ok(true)
    }

    /// In place: SQLite writes alone, so no lock order stands in the way.
    async fn refill_pools(&mut self) -> Result<Refill, StoreError> {
        let (slot_id, quantity, now) = self.taking.slot_and_quantity();
        reclaim_short_pools(self.sql, self.conn, slot_id, quantity, now).await?;
        Ok(Refill::InPlace)
    }
}
