//! Bookings of several lines: the store's [`BookingStore`], every line taken or none, and ended
//! together.
//!
//! A booking of N lines is N hold rows inserted in one transaction in slot id order, so the
//! first line gets the lowest id, which is the booking's id and every line's `booking_id`.
//! Only the first line carries the client's idempotency key (its unique constraint refuses a
//! second booking or hold with it); each later line carries a key of the store's own
//! ([`line_key`]), since the column is `NOT NULL` and unique.
//!
//! **Placing a booking** locks every line's slot row by ascending id (the request's lines come
//! in that order) before anything else, then every pool of them by ascending id, then takes
//! each line's units by the conditional decrement, and each pool's. Short, the core's rule
//! ([`take_with_refill`]) reclaims the short lines' slots' expired holds (their rows locked
//! after every slot's) and takes once more, and a pool still short is refilled in a step of its
//! own before the booking runs again. When every line fits, the lines are inserted with one
//! `hold_placed` event each; when any does not, a key in use answers first, then the
//! transaction is rolled back, reclaims included, and each line's slot read in it explains the
//! refusal ([`BookingOutcome::refused`]).
//!
//! **Changing a booking** (confirm, cancel, renew, by its id or by a hold change of any line)
//! is the `lines` module's whole-booking change.

use async_trait::async_trait;
use slot_booking::store::{take_with_refill, Attempt, HoldChange, LineState, Refill, RefillOps};
use slot_booking::{
    Booking, BookingLine, BookingOutcome, BookingRequest, Decided, Hold, HoldId, HoldStatus,
    RenewRequest, Scope, SlotId, SlotLimits, StoreError, Timestamp, Transition,
};
use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Connection};

use std::collections::{BTreeMap, BTreeSet};

use crate::lines::{booking_by_id, booking_by_key, change_booking, hold_place};
use crate::map_err;
use crate::pools::pool_usage;
use crate::retry::reading;
use crate::rows::{from_micros, to_micros};
use crate::run::{in_unit, Run};
use crate::sql::Statements;
use crate::units::{finish, id_of, lock_pools_of, lock_slot, log_hold, pools_of_slot, Step};
use crate::waitlists::key_waits;
use crate::writes::{
    cancel_hold, confirm_hold, reclaim_selling, renew_hold, take_pool_newcomer, take_units,
    PoolRefill,
};

/// The key of a line that is not its booking's first: a leading space (no client key starts
/// with one: a client's key is visible ASCII), the booking's id and the line's slot id, unique
/// as the pair is.
fn line_key(booking: HoldId, line: &BookingLine) -> String {
    format!(" line {}/{}", booking.get(), line.slot_id.get())
}

/// What a booking's step came to.
pub(crate) enum Booked {
    /// Its answer.
    Outcome(BookingOutcome),
    /// The key's unique constraint refused the booking: rolled back, it is answered from the
    /// key's booking, read after the rollback.
    KeyTaken,
    /// A pool was short even after the short lines' slots were reclaimed: rolled back, so that
    /// the expired holds of the slots of every pool of the booking (these pools' ids) are given
    /// back in a step of their own before the booking is tried once more. Every pool, not only
    /// the first found short: another may be short by expired holds too, and the booking is
    /// tried once more only once.
    PoolShort(Vec<i64>),
}

/// [`BookingStore::create_booking`] as a step: every line's slot row locked by ascending id,
/// then every pool of those slots by ascending id; then the core's rule
/// ([`take_with_refill`]) over [`Retake`]'s attempts, each every line's units from its slot
/// and each pool's units for every line on its slots, all or none. All taken, the lines are
/// inserted. `pools_reclaimed`: the caller already gave back the expired holds of a short
/// pool's slots, so a short pool refuses.
pub(crate) async fn create_booking(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &BookingRequest<'_>,
    pools_reclaimed: bool,
) -> Result<Step<Booked>, StoreError> {
    for line in request.lines {
        lock_slot(sql, conn, line.slot_id).await?;
    }
    let slots: Vec<SlotId> = request.lines.iter().map(|line| line.slot_id).collect();
    lock_pools_of(sql, conn, &slots).await?;
    let mut retake = Retake {
        sql,
        conn,
        request,
        taken: Vec::new(),
        refill: PoolRefill::new(pools_reclaimed),
    };
    let first = retake.attempt().await?;
    let last = take_with_refill(&mut retake, first).await?;
    let Retake { conn, taken, .. } = retake;
    match last {
        Attempt::Done(booked) => return Ok(booked),
        Attempt::RefillApart => {
            let mut pools = BTreeSet::new();
            for line in request.lines {
                pools.extend(pools_of_slot(sql, conn, line.slot_id).await?);
            }
            return Ok(Step::undo(Booked::PoolShort(pools.into_iter().collect())));
        }
        Attempt::Short { .. } => {}
    }
    if let Some(refused) = key_in_use(sql, conn, request).await? {
        return Ok(Step::undo(Booked::Outcome(refused)));
    }
    let mut states = Vec::with_capacity(request.lines.len());
    for (line, taken) in request.lines.iter().zip(&taken) {
        states.push(line_state(sql, conn, line, request.now, *taken).await?);
    }
    let states = within_pools(sql, conn, request, states).await?;
    let refused = BookingOutcome::refused(request, None, &states);
    Ok(Step::undo(Booked::Outcome(refused)))
}

/// A booking's takes and inserts, tried again after the reclaims the core's rule
/// ([`take_with_refill`]) asks for, in the unit of work `conn` is in.
struct Retake<'a> {
    sql: &'a Statements,
    conn: &'a mut MySqlConnection,
    request: &'a BookingRequest<'a>,
    /// Whether the last attempt took each line's units from its slot.
    taken: Vec<bool>,
    refill: PoolRefill,
}

impl Retake<'_> {
    /// Takes every line's units from its slot, then from each pool the units of every line on
    /// its slots, under a savepoint: anything short undoes every take.
    async fn take(&mut self) -> Result<Attempt<()>, StoreError> {
        let Retake {
            sql,
            conn,
            request,
            taken: taken_out,
            refill,
        } = self;
        let (sql, request) = (*sql, *request);
        let mut savepoint = Connection::begin(&mut **conn).await.map_err(map_err)?;
        let attempt = async {
            let mut taken = Vec::with_capacity(request.lines.len());
            for line in request.lines {
                let (slot_id, quantity) = (line.slot_id, line.quantity);
                taken.push(take_units(sql, &mut savepoint, slot_id, quantity, request.now).await?);
            }
            let short_slot = taken.contains(&false);
            *taken_out = taken;
            if short_slot {
                return Ok(Attempt::Short { pool: false });
            }
            // Per pool, the units of every line on its slots.
            let mut asked: BTreeMap<i64, i64> = BTreeMap::new();
            for line in request.lines {
                for pool in pools_of_slot(sql, &mut savepoint, line.slot_id).await? {
                    *asked.entry(pool).or_default() += i64::from(line.quantity);
                }
            }
            for (pool, units) in asked {
                if !take_pool_newcomer(sql, &mut savepoint, pool, units, request.now).await? {
                    refill.short_pool = Some(pool);
                    return Ok(Attempt::Short { pool: true });
                }
            }
            Ok(Attempt::Done(()))
        }
        .await;
        let step = attempt.map(|attempt| match attempt {
            Attempt::Done(()) => Step::keep(attempt),
            _ => Step::undo(attempt),
        });
        finish(savepoint, step).await
    }
}

#[async_trait]
impl RefillOps for Retake<'_> {
    type Done = Step<Booked>;

    async fn attempt(&mut self) -> Result<Attempt<Step<Booked>>, StoreError> {
        self.refill.short_pool = None;
        Ok(match self.take().await? {
            Attempt::Done(()) => {
                Attempt::Done(insert_lines(self.sql, self.conn, self.request).await?)
            }
            Attempt::Short { pool } => Attempt::Short { pool },
            Attempt::RefillApart => Attempt::RefillApart,
        })
    }

    /// Only the short lines' selling slots are reclaimed; under their rows' locks, an attempt
    /// can find more only if this reclaimed any.
    async fn reclaim_slot(&mut self) -> Result<bool, StoreError> {
        let (request, mut reclaimed) = (self.request, false);
        for (line, taken) in request.lines.iter().zip(&self.taken) {
            if !*taken {
                let holds = reclaim_selling(self.sql, self.conn, line.slot_id, request.now).await?;
                reclaimed |= !holds.is_empty();
            }
        }
        Ok(reclaimed)
    }

    async fn refill_pools(&mut self) -> Result<Refill, StoreError> {
        self.refill
            .refill(self.sql, self.conn, self.request.now)
            .await
    }
}

/// The answer to a booking whose key is in use: its booking's (or hold's), or a waiting
/// entry's (taken, by no booking to show).
async fn key_in_use(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &BookingRequest<'_>,
) -> Result<Option<BookingOutcome>, StoreError> {
    if let Some(holder) = booking_by_key(sql, conn, request.key.as_str()).await? {
        return Ok(Some(BookingOutcome::refused(request, Some(holder), &[])));
    }
    if key_waits(sql, conn, request.key.as_str()).await? {
        return Ok(Some(BookingOutcome::KeyReused(None)));
    }
    Ok(None)
}

/// A refused booking's line states with the pools of its lines' slots, each read in this
/// transaction (the refused attempt undid its takes), as [`LineState::within_pools`] explains
/// every store's.
async fn within_pools(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &BookingRequest<'_>,
    states: Vec<LineState>,
) -> Result<Vec<LineState>, StoreError> {
    let mut pools = BTreeSet::new();
    for line in request.lines {
        pools.extend(pools_of_slot(sql, conn, line.slot_id).await?);
    }
    if pools.is_empty() {
        return Ok(states);
    }
    let mut usages = Vec::with_capacity(pools.len());
    for pool in pools {
        if let Some(usage) = pool_usage(sql, conn, pool, request.now).await? {
            usages.push(usage);
        }
    }
    Ok(states
        .into_iter()
        .map(|state| state.within_pools(request, &usages))
        .collect())
}

/// Inserts every line of a booking whose units were all taken, each with its `hold_placed`
/// event; the first under the client's key (refused by its unique constraint:
/// [`Booked::KeyTaken`]).
async fn insert_lines(
    sql: &Statements,
    conn: &mut MySqlConnection,
    request: &BookingRequest<'_>,
) -> Result<Step<Booked>, StoreError> {
    let mut lines: Vec<Hold> = Vec::with_capacity(request.lines.len());
    let mut booking: Option<HoldId> = None;
    for line in request.lines {
        let key = match booking {
            Some(booking) => line_key(booking, line),
            None => request.key.as_str().to_owned(),
        };
        let inserted = sqlx::query(AssertSqlSafe(sql.insert_line.as_str()))
            .bind(line.slot_id.get())
            .bind(key)
            .bind(to_micros(request.expires_at))
            .bind(to_micros(request.now))
            .bind(line.quantity)
            .bind(request.owner.map(|owner| owner.as_str()))
            .bind(booking.map(HoldId::get))
            .execute(&mut *conn)
            .await;
        let inserted = match inserted {
            Ok(inserted) => inserted,
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() && booking.is_none() => {
                // The units taken go back with the rollback; the key's booking is read after.
                return Ok(Step::undo(Booked::KeyTaken));
            }
            Err(error) => return Err(map_err(error)),
        };
        let hold_id = HoldId(id_of(inserted)?);
        if booking.is_none() {
            let marked = sqlx::query(AssertSqlSafe(sql.mark_booking.as_str()))
                .bind(hold_id.get())
                .bind(hold_id.get())
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
            if marked.rows_affected() != 1 {
                return Err(StoreError::failed(
                    "the first line of a new booking is gone",
                ));
            }
            booking = Some(hold_id);
        }
        let hold = Hold {
            hold_id,
            slot_id: line.slot_id,
            status: HoldStatus::Held,
            expires_at: request.expires_at,
            confirmed_at: None,
            cancelled_at: None,
            quantity: line.quantity,
            owner: request.owner.cloned(),
            created_at: request.now,
        };
        log_hold(
            sql,
            conn,
            slot_booking::EventKind::HoldPlaced,
            &hold,
            request.now,
        )
        .await?;
        lines.push(hold);
    }
    let booking =
        Booking::of_lines(lines).ok_or_else(|| StoreError::failed("a booking of no lines"))?;
    Ok(Step::keep(Booked::Outcome(BookingOutcome::Created(
        booking,
    ))))
}

/// What the store reads of a line's slot after the booking was refused: its limits and the
/// units a hold could take (the refused attempt undid its takes); `taken`, whether that
/// attempt took the line's units.
async fn line_state(
    sql: &Statements,
    conn: &mut MySqlConnection,
    line: &BookingLine,
    now: Timestamp,
    taken: bool,
) -> Result<LineState, StoreError> {
    let row: Option<(i64, i32, bool, Option<i64>, i64, bool)> =
        sqlx::query_as(AssertSqlSafe(sql.line_state.as_str()))
            .bind(to_micros(now))
            .bind(to_micros(now))
            .bind(line.slot_id.get())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
    let Some((starts_at, capacity, closed, removed_at, free, blocked)) = row else {
        return Ok(LineState {
            line: *line,
            slot: None,
            free: 0,
            failed: true,
        });
    };
    // Nobody jumps a line: a slot anyone waits for has no unit for a newcomer.
    let (free, taken) = if blocked { (0, false) } else { (free, taken) };
    Ok(LineState {
        line: *line,
        slot: Some(SlotLimits {
            starts_at: from_micros(starts_at)?,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        free: i32::try_from(free).unwrap_or(i32::MAX),
        failed: !taken,
    })
}

/// What a booking id names, for the whole-booking changes.
enum Target {
    None,
    /// A plain hold (a booking of one line), of this slot.
    Hold(SlotId),
    /// A booking of several lines.
    Booking,
}

async fn target(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking_id: HoldId,
) -> Result<Target, StoreError> {
    Ok(match hold_place(sql, conn, booking_id).await? {
        Some((slot_id, None)) => Target::Hold(slot_id),
        Some((_, Some(booking))) if booking == booking_id => Target::Booking,
        // A later line's id, or none.
        _ => Target::None,
    })
}

/// A plain hold's transition as its booking's.
fn of_hold(step: Step<Transition>) -> Result<Step<Transition<Booking>>, StoreError> {
    step.try_map(|transition| {
        Ok(match transition {
            Transition::Applied(hold) => Transition::Applied(Booking::of_hold(hold)),
            Transition::NotApplied(hold) => Transition::NotApplied(Booking::of_hold(hold)),
            Transition::NotFound => Transition::NotFound,
        })
    })
}

/// Confirms, cancels or renews a whole booking, or a plain hold as the booking of one line.
async fn change(
    sql: &Statements,
    conn: &mut MySqlConnection,
    booking_id: HoldId,
    scope: &Scope,
    now: Timestamp,
    change: HoldChange<'_>,
) -> Result<Step<Transition<Booking>>, StoreError> {
    match target(sql, conn, booking_id).await? {
        Target::None => Ok(Step::keep(Transition::NotFound)),
        Target::Booking => change_booking(sql, conn, booking_id, scope, now, change).await,
        Target::Hold(slot_id) => of_hold(match change {
            HoldChange::Confirm => confirm_hold(sql, conn, booking_id, scope, now).await?,
            HoldChange::Cancel => cancel_hold(sql, conn, slot_id, booking_id, scope, now).await?,
            HoldChange::Renew(request) => renew_hold(sql, conn, request).await?,
        }),
    }
}

impl Run<'_> {
    /// A booking's step, and when a pool is short, the pools' reclaim in a step of its own and
    /// the booking's step once more.
    pub(crate) async fn create_booking(
        &mut self,
        request: BookingRequest<'_>,
    ) -> Result<Decided<BookingOutcome>, StoreError> {
        let sql = self.statements();
        let request = &request;
        let mut pools_reclaimed = false;
        loop {
            let booked = in_unit!(self, |conn| create_booking(
                sql,
                conn,
                request,
                pools_reclaimed
            ))?;
            match booked {
                Booked::Outcome(outcome) => return Ok(Decided::new(request.now, outcome)),
                Booked::KeyTaken => {
                    let outcome = reading!(self, |conn| key_in_use(sql, conn, request))?
                        .ok_or_else(|| {
                            StoreError::failed(
                                "a unique violation on the idempotency key, but no hold has it",
                            )
                        })?;
                    return Ok(Decided::new(request.now, outcome));
                }
                Booked::PoolShort(pools) => {
                    self.reclaim(&pools, None, request.now).await?;
                    pools_reclaimed = true;
                }
            }
        }
    }

    pub(crate) async fn get_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Booking>>, StoreError> {
        let sql = self.statements();
        let booking = reading!(self, |conn| booking_by_id(sql, conn, booking_id, scope))?;
        Ok(Decided::new(now, booking))
    }

    pub(crate) async fn confirm_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        self.change_booking(booking_id, scope, now, HoldChange::Confirm)
            .await
    }

    pub(crate) async fn cancel_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        self.change_booking(booking_id, scope, now, HoldChange::Cancel)
            .await
    }

    pub(crate) async fn renew_booking(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let (id, scope, now) = (request.hold_id, request.scope, request.now);
        self.change_booking(id, scope, now, HoldChange::Renew(&request))
            .await
    }

    /// Confirms, cancels or renews a booking (a plain hold as the booking of one line).
    async fn change_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        what: HoldChange<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let sql = self.statements();
        let done = in_unit!(self, |conn| change(sql, conn, booking_id, scope, now, what))?;
        Ok(Decided::new(now, done))
    }
}
