//! Every write of the hold lifecycle as statements on one connection inside a transaction,
//! answering with a [`Step`]: its outcome and whether its writes stay. [`finish`] commits or
//! rolls back as the step says, and the store answers only once that succeeded
//! ([`in_transaction!`](crate::retry::in_transaction) retries a step that lost a conflict).
//!
//! Lock order: a write takes a slot's row before any hold of that slot, and several slots by
//! ascending id, so two writes never wait for each other in turn.
//!
//! A confirm, cancel or renewal of a hold that is a line of a booking of several lines changes
//! every line of that booking, whole or not at all (`lines::change_booking`); a plain hold's is
//! the one conditional update of its row here.

use async_trait::async_trait;
use slot_booking::events::NewEvent;
use slot_booking::store::{take_with_refill, Attempt, HoldChange, Refill, RefillOps};
use slot_booking::{
    EventKind, Hold, HoldId, HoldOutcome, HoldRequest, HoldStatus, NewSlot, OwnerId, RenewRequest,
    ResourceId, Scope, Slot, SlotId, SlotLimits, StoreError, Timestamp, Transition,
};
use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Connection};

use crate::lines::{booking_by_key, change_booking, hold_place, line_transition, renewal_micros};
use crate::map_err;
use crate::rows::{from_micros, hold_from_row, to_micros};
use crate::serve::{serve, Lines};
use crate::sql::Statements;
pub(crate) use crate::units::{
    append_event, finish, gave_back, hold_by_id, lock_slot, log_hold, not_applied, reclaim_locked,
    reclaim_slot, Step,
};
use crate::units::{give_back, id_of, lock_pools_of, pools_of_slot};
use crate::waitlists::key_waits;

/// Stores a new slot and appends its `slot_created` event at `now`.
pub(crate) async fn create_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    new: &NewSlot,
    now: Timestamp,
) -> Result<Step<Slot>, StoreError> {
    let inserted = sqlx::query(AssertSqlSafe(sql.create_slot.as_str()))
        .bind(to_micros(new.starts_at))
        .bind(to_micros(new.ends_at))
        .bind(new.capacity)
        .bind(new.capacity)
        .bind(new.resource.as_ref().map(ResourceId::as_str))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    let slot = Slot {
        slot_id: SlotId(id_of(inserted)?),
        starts_at: new.starts_at,
        ends_at: new.ends_at,
        capacity: new.capacity,
        stored_remaining: new.capacity,
        resource: new.resource.clone(),
        closed: false,
        removed_at: None,
    };
    let event = NewEvent::of_slot(EventKind::SlotCreated, slot.slot_id, slot.capacity, now);
    append_event(sql, conn, &event).await?;
    Ok(Step::keep(slot))
}

/// Takes `quantity` units from a selling slot by the conditional decrement: whether one row
/// matched.
pub(crate) async fn take_units(
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

/// What inserting a hold's row did.
pub(crate) enum Inserted {
    Hold(Hold),
    /// The key's unique constraint refused it.
    KeyTaken,
}

/// Inserts the hold of `request`, whose units were just taken, with its `hold_placed` event.
async fn insert_hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &HoldRequest<'_>,
) -> Result<Inserted, StoreError> {
    let inserted = sqlx::query(AssertSqlSafe(sql.insert_hold.as_str()))
        .bind(request.slot_id.get())
        .bind(request.key.as_str())
        .bind(to_micros(request.expires_at))
        .bind(to_micros(request.now))
        .bind(request.quantity)
        .bind(request.owner.map(OwnerId::as_str))
        .execute(&mut *conn)
        .await;
    let inserted = match inserted {
        Ok(inserted) => inserted,
        Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
            return Ok(Inserted::KeyTaken)
        }
        Err(error) => return Err(map_err(error)),
    };
    let hold = Hold {
        hold_id: HoldId(id_of(inserted)?),
        slot_id: request.slot_id,
        status: HoldStatus::Held,
        expires_at: request.expires_at,
        confirmed_at: None,
        cancelled_at: None,
        quantity: request.quantity,
        owner: request.owner.cloned(),
        created_at: request.now,
    };
    log_hold(sql, conn, EventKind::HoldPlaced, &hold, request.now).await?;
    Ok(Inserted::Hold(hold))
}

/// What a hold's step came to.
pub(crate) enum Held {
    /// Its answer.
    Outcome(HoldOutcome),
    /// The key's unique constraint refused the hold: rolled back, it is answered from the key's
    /// hold by [`answer_key_taken`], read after the rollback.
    KeyTaken,
    /// A pool of the slot was short even after the slot's own expired holds were reclaimed:
    /// rolled back, so that the expired holds of the slots of every pool of the slot (these
    /// pools' ids) are given back in a step of their own (which locks those slots first) before
    /// the hold is tried once more. Every pool, not only the one found short: another may be
    /// short by expired holds too, and the hold is tried once more only once.
    PoolShort(Vec<i64>),
}

/// What taking a slot's units and its pools' did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// From the slot and every pool of it.
    Yes,
    /// The slot's conditional decrement matched nothing.
    SlotShort,
    /// This pool's matched nothing; nothing of the take stays.
    PoolShort(i64),
}

/// Takes `quantity` units from a selling slot and from each of its pools (ascending, read once
/// the slot's row is locked by its decrement), each by its conditional decrement, under a
/// savepoint: a pool that matches nothing undoes the whole take.
pub(crate) async fn take_with_pools(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    quantity: i32,
    now: Timestamp,
) -> Result<Taken, StoreError> {
    let mut savepoint = Connection::begin(&mut *conn).await.map_err(map_err)?;
    let taken = async {
        if !take_units(sql, &mut savepoint, slot_id, quantity, now).await? {
            return Ok(Taken::SlotShort);
        }
        for pool in pools_of_slot(sql, &mut savepoint, slot_id).await? {
            if !take_pool_newcomer(sql, &mut savepoint, pool, i64::from(quantity), now).await? {
                return Ok(Taken::PoolShort(pool));
            }
        }
        Ok(Taken::Yes)
    }
    .await;
    let step = taken.map(|taken| match taken {
        Taken::Yes => Step::keep(taken),
        _ => Step::undo(taken),
    });
    finish(savepoint, step).await
}

/// Takes a newcomer's `units` from a pool by its conditional decrement, refused while anyone
/// waits in the pool's line: whether one row matched.
pub(crate) async fn take_pool_newcomer(
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

/// Whether anyone waits in a pool's line: a newcomer's take the pool refused then is refused
/// (nobody takes units past a waiting line), not a shortage that giving back the expired holds
/// of the pool's slots could mend.
pub(crate) async fn pool_line_waits(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let found: Option<i32> = sqlx::query_scalar(AssertSqlSafe(sql.pools.pool_line_waits.as_str()))
        .bind(pool)
        .bind(to_micros(now))
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(found.is_some())
}

/// Takes `units` from a pool by its conditional decrement, whoever waits: whether one row
/// matched.
pub(crate) async fn take_pool(
    sql: &Statements,
    conn: &mut MySqlConnection,
    pool: i64,
    units: i64,
) -> Result<bool, StoreError> {
    let taken = sqlx::query(AssertSqlSafe(sql.pools.take_pool.as_str()))
        .bind(units)
        .bind(pool)
        .bind(units)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(taken.rows_affected() == 1)
}

/// A hold, in one transaction: the conditional decrement of the slot's `remaining`, then of
/// each of its pools' ([`take_with_pools`]); all matched, the hold's row and its event are
/// inserted (a key in use aborts through the unique constraint: everything is rolled back and
/// the key's hold answers). Short, the core's rule ([`take_with_refill`]) reclaims the selling
/// slot's expired holds (its row locked first, then its pools', then the holds) and takes once
/// more; a pool still short asks for [`Held::PoolShort`], the refill in a step of its own,
/// unless `pools_reclaimed` (this is that step's rerun) or anyone waits in the pool's line. A
/// key in use answers before any refusal; a refusal says why by the slot's limits, and
/// everything is rolled back (the reclaim too: the next hold that needs those units redoes it).
pub(crate) async fn hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &HoldRequest<'_>,
    pools_reclaimed: bool,
) -> Result<Step<Held>, StoreError> {
    let mut retake = Retake {
        sql,
        conn,
        request,
        refill: PoolRefill::new(pools_reclaimed),
    };
    let first = retake.attempt().await?;
    let last = take_with_refill(&mut retake, first).await?;
    let conn = retake.conn;
    match last {
        Attempt::Done(Inserted::Hold(hold)) => {
            return Ok(Step::keep(Held::Outcome(HoldOutcome::Created(hold))))
        }
        // The units taken are given back by the rollback; the key's hold is read after it.
        Attempt::Done(Inserted::KeyTaken) => return Ok(Step::undo(Held::KeyTaken)),
        Attempt::RefillApart => {
            let pools = pools_of_slot(sql, conn, request.slot_id).await?;
            return Ok(Step::undo(Held::PoolShort(pools)));
        }
        Attempt::Short { .. } => {}
    }
    if let Some(holder) = booking_by_key(sql, conn, request.key.as_str()).await? {
        let refused = HoldOutcome::key_taken(request, holder);
        return Ok(Step::undo(Held::Outcome(refused)));
    }
    if key_waits(sql, conn, request.key.as_str()).await? {
        return Ok(Step::undo(Held::Outcome(HoldOutcome::KeyReused(None))));
    }
    let limits = slot_limits(sql, conn, request.slot_id).await?;
    let refused = HoldOutcome::refused(request, None, limits);
    Ok(Step::undo(Held::Outcome(refused)))
}

/// A hold's take and insert, tried again after the reclaims the core's rule
/// ([`take_with_refill`]) asks for, in the unit of work `conn` is in.
struct Retake<'a> {
    sql: &'a Statements,
    conn: &'a mut MySqlConnection,
    request: &'a HoldRequest<'a>,
    refill: PoolRefill,
}

/// Where a MySQL take refills a short pool: in a step of its own, since the pool's slots may
/// come before the ones the take's step locked ([`Refill::InOwnStep`]), once per write.
pub(crate) struct PoolRefill {
    /// The pools' refill ran already, in a step of its own.
    pools_reclaimed: bool,
    /// The pool the last attempt found short.
    pub(crate) short_pool: Option<i64>,
}

impl PoolRefill {
    pub(crate) fn new(pools_reclaimed: bool) -> Self {
        PoolRefill {
            pools_reclaimed,
            short_pool: None,
        }
    }

    /// In a step of its own, unless it ran already or anyone waits in the short pool's line
    /// (nobody takes units past a waiting line, so no refill could serve the take).
    pub(crate) async fn refill(
        &self,
        sql: &Statements,
        conn: &mut MySqlConnection,
        now: Timestamp,
    ) -> Result<Refill, StoreError> {
        let Some(pool) = self.short_pool.filter(|_| !self.pools_reclaimed) else {
            return Ok(Refill::Nothing);
        };
        Ok(match pool_line_waits(sql, conn, pool, now).await? {
            true => Refill::Nothing,
            false => Refill::InOwnStep,
        })
    }
}

#[async_trait]
impl RefillOps for Retake<'_> {
    type Done = Inserted;

    async fn attempt(&mut self) -> Result<Attempt<Inserted>, StoreError> {
        let (sql, request) = (self.sql, self.request);
        let (slot_id, quantity, now) = (request.slot_id, request.quantity, request.now);
        self.refill.short_pool = None;
        Ok(
            match take_with_pools(sql, self.conn, slot_id, quantity, now).await? {
                Taken::Yes => Attempt::Done(insert_hold(sql, self.conn, request).await?),
                Taken::SlotShort => Attempt::Short { pool: false },
                Taken::PoolShort(pool) => {
                    self.refill.short_pool = Some(pool);
                    Attempt::Short { pool: true }
                }
            },
        )
    }

    /// Only a selling slot's holds are reclaimed; under its row's lock, an attempt can find
    /// more only if this reclaimed any.
    async fn reclaim_slot(&mut self) -> Result<bool, StoreError> {
        let (slot_id, now) = (self.request.slot_id, self.request.now);
        Ok(!reclaim_selling(self.sql, self.conn, slot_id, now)
            .await?
            .is_empty())
    }

    async fn refill_pools(&mut self) -> Result<Refill, StoreError> {
        self.refill
            .refill(self.sql, self.conn, self.request.now)
            .await
    }
}

/// A slot's limits, as stored now.
pub(crate) async fn slot_limits(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<Option<SlotLimits>, StoreError> {
    let limits: Option<(i64, i32, bool, Option<i64>)> =
        sqlx::query_as(AssertSqlSafe(sql.slot_limits.as_str()))
            .bind(slot_id.get())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    Ok(match limits {
        Some((starts_at, capacity, closed, removed_at)) => Some(SlotLimits {
            starts_at: from_micros(starts_at)?,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        None => None,
    })
}

/// The answer to a hold the key's unique constraint refused, from the key's hold read after
/// the rollback: the committed hold (or booking) that won the key.
pub(crate) async fn answer_key_taken(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &HoldRequest<'_>,
) -> Result<HoldOutcome, StoreError> {
    match booking_by_key(sql, conn, request.key.as_str()).await? {
        Some(holder) => Ok(HoldOutcome::key_taken(request, holder)),
        // A waiting entry's key: taken, by no hold to show.
        None if key_waits(sql, conn, request.key.as_str()).await? => {
            Ok(HoldOutcome::KeyReused(None))
        }
        None => Err(StoreError::failed(
            "a unique violation on the idempotency key, but no hold has it",
        )),
    }
}

/// Reclaims the held holds of a selling slot that expired by `now` (see [`reclaim_locked`]),
/// its row locked first. A slot that does not sell is left alone: a hold refused because of
/// that changes nothing.
pub(crate) async fn reclaim_selling(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Vec<Hold>, StoreError> {
    let selling = sqlx::query(AssertSqlSafe(sql.lock_selling_slot.as_str()))
        .bind(slot_id.get())
        .bind(to_micros(now))
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    if selling.is_none() {
        return Ok(Vec::new());
    }
    reclaim_locked(sql, conn, slot_id, now).await
}

/// Confirms the active held hold `hold_id` in `scope`, with every line of its booking.
pub(crate) async fn confirm(
    sql: &Statements,
    conn: &mut MySqlConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    match hold_place(sql, conn, hold_id).await? {
        None => Ok(Step::keep(Transition::NotFound)),
        Some((_, Some(booking))) => {
            let change = HoldChange::Confirm;
            by_booking(sql, conn, booking, hold_id, scope, now, change).await
        }
        Some((_, None)) => confirm_hold(sql, conn, hold_id, scope, now).await,
    }
}

/// Cancels the active held or the confirmed hold `hold_id` in `scope`, with every line of its
/// booking, giving their units back.
pub(crate) async fn cancel(
    sql: &Statements,
    conn: &mut MySqlConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    match hold_place(sql, conn, hold_id).await? {
        None => Ok(Step::keep(Transition::NotFound)),
        Some((_, Some(booking))) => {
            let change = HoldChange::Cancel;
            by_booking(sql, conn, booking, hold_id, scope, now, change).await
        }
        Some((slot_id, None)) => cancel_hold(sql, conn, slot_id, hold_id, scope, now).await,
    }
}

/// Renews the active held hold `hold_id`, with every line of its booking.
pub(crate) async fn renew(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition>, StoreError> {
    let hold_id = request.hold_id;
    match hold_place(sql, conn, hold_id).await? {
        None => Ok(Step::keep(Transition::NotFound)),
        Some((_, Some(booking))) => {
            let (scope, now, change) = (request.scope, request.now, HoldChange::Renew(request));
            by_booking(sql, conn, booking, hold_id, scope, now, change).await
        }
        Some((_, None)) => renew_hold(sql, conn, request).await,
    }
}

/// A hold change of the line `hold_id` of a booking of several lines: the whole booking's.
async fn by_booking(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking: HoldId,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
    change: HoldChange<'_>,
) -> Result<Step<Transition>, StoreError> {
    let step = change_booking(sql, conn, booking, scope, now, change).await?;
    step.try_map(|transition| line_transition(transition, hold_id))
}

/// Confirms the active held plain hold `hold_id` in `scope`.
pub(crate) async fn confirm_hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let (any, owner) = scope.as_filter();
    let confirmed = sqlx::query(AssertSqlSafe(sql.confirm.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(to_micros(now))
        .bind(any)
        .bind(owner)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    changed(
        sql,
        conn,
        confirmed.rows_affected(),
        hold_id,
        scope,
        HoldChange::Confirm,
        now,
    )
    .await
}

/// Cancels the active held or the confirmed plain hold `hold_id` of the slot `slot_id` in
/// `scope`, giving its units back: its slot's row locked first, then the hold's.
pub(crate) async fn cancel_hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    hold_id: HoldId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    lock_slot(sql, conn, slot_id).await?;
    lock_pools_of(sql, conn, &[slot_id]).await?;
    let (any, owner) = scope.as_filter();
    let cancelled = sqlx::query(AssertSqlSafe(sql.cancel.as_str()))
        .bind(to_micros(now))
        .bind(hold_id.get())
        .bind(to_micros(now))
        .bind(any)
        .bind(owner)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    let step = changed(
        sql,
        conn,
        cancelled.rows_affected(),
        hold_id,
        scope,
        HoldChange::Cancel,
        now,
    )
    .await?;
    if let Transition::Applied(hold) = step.value() {
        give_back(sql, conn, i64::from(hold.quantity), slot_id.get()).await?;
        let mut lines = Lines::new();
        lines.slot_and_pools(sql, conn, slot_id).await?;
        serve(sql, conn, lines, now).await?;
    }
    Ok(step)
}

/// Renews the active held plain hold `hold_id`: the update matches only when the renewal moves the
/// expiry (and then appends `hold_renewed`); otherwise a read with the same parameters tells a
/// renewal with nothing to move (applied, unchanged, no event) from a refusal.
pub(crate) async fn renew_hold(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &RenewRequest<'_>,
) -> Result<Step<Transition>, StoreError> {
    let (wanted, max_life) = renewal_micros(request)?;
    let now = to_micros(request.now);
    let (any, owner) = request.scope.as_filter();
    let renewed = sqlx::query(AssertSqlSafe(sql.renew.as_str()))
        .bind(wanted)
        .bind(max_life)
        .bind(request.hold_id.get())
        .bind(now)
        .bind(any)
        .bind(owner)
        .bind(wanted)
        .bind(max_life)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if renewed.rows_affected() == 1 {
        return changed(
            sql,
            conn,
            1,
            request.hold_id,
            request.scope,
            HoldChange::Renew(request),
            request.now,
        )
        .await;
    }
    let unmoved = sqlx::query(AssertSqlSafe(sql.renew_unmoved.as_str()))
        .bind(request.hold_id.get())
        .bind(now)
        .bind(any)
        .bind(owner)
        .bind(wanted)
        .bind(max_life)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?;
    let transition = match unmoved {
        Some(row) => Transition::Applied(hold_from_row(&row)?),
        None => not_applied(hold_by_id(sql, conn, request.hold_id, request.scope).await?),
    };
    Ok(Step::keep(transition))
}

/// After a conditional update of the hold `hold_id`: when it matched, the hold as it is now
/// (read in the same transaction, which holds its row) with the change's event; otherwise the
/// hold as it is, or not found in the scope.
async fn changed(
    sql: &Statements,
    conn: &mut MySqlConnection,
    matched: u64,
    hold_id: HoldId,
    scope: &Scope,
    change: HoldChange<'_>,
    now: Timestamp,
) -> Result<Step<Transition>, StoreError> {
    let hold = hold_by_id(sql, conn, hold_id, &Scope::BackOffice).await?;
    if matched == 1 {
        let hold = hold.ok_or_else(|| StoreError::failed("a hold changed, then not found"))?;
        log_hold(sql, conn, change.event(), &hold, now).await?;
        return Ok(Step::keep(Transition::Applied(hold)));
    }
    Ok(Step::keep(not_applied(hold.filter(|h| scope.admits(h)))))
}
