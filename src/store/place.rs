//! Placing a hold or a booking of several lines, the one rule every store follows:
//! [`place_hold`] and [`place_booking`] over the store's [`PlaceKernel`], in one unit of work.
//!
//! 1. A booking of several lines locks its accounts first
//!    ([`PlaceKernel::lock_accounts`]): its slots by ascending id, then their pools by
//!    ascending id, the store's lock order. A hold (and a booking of one line) takes its slot
//!    and then its pools, which is that order already.
//! 2. Each row (the hold, or each line in slot id order) is placed
//!    ([`PlaceKernel::place`]): its units taken from its slot and from each pool of the slot,
//!    and its row stored with its `hold_placed` event, all or none, decided by rows affected
//!    and the unique key. A booking's first line carries the client's key and gets the lowest
//!    id, the booking's; every other line carries [`line_key`] and the booking's id.
//! 3. A row short *as stored* is placed again by the core's refill rule
//!    ([`take_with_refill`]): its slot's expired holds reclaimed, then its short pools'. A store
//!    that refills pools in a unit of their own gets [`Placing::Refill`]: undo this unit,
//!    reclaim the pools' slots, and place again with `refilled`.
//! 4. Every row placed: the booking's first line is marked as the booking's, and the unit
//!    stays. A row the unique key refused: [`Placing::KeyTaken`], the unit undone, and the
//!    answer read after it ([`hold_key_answer`], [`booking_key_answer`]).
//! 5. Otherwise the unit is undone, and reads in it say why, in the order every store
//!    answers: the key in use (by a hold or booking, or by a waiting entry), then each slot's
//!    limits and free units ([`HoldOutcome::refused`], [`BookingOutcome::refused`]). A
//!    booking's lines placed in the unit count their own units as free, in their slots and in
//!    their pools: the undo gives them back.

use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};

use super::bookings::{BookingOutcome, BookingRequest, LineState};
use super::error::StoreError;
use super::outcome::{HoldOutcome, HoldRequest, SlotLimits};
use super::pool_edit::PoolKernel;
use super::refill::{take_with_refill, Attempt, Refill, RefillOps};
use super::step::Step;
use crate::model::{
    Booking, BookingLine, Hold, HoldId, OwnerId, PoolId, SlotId, Timestamp, WaitlistEntry,
};

/// The row a placement stores: a hold, or one line of a booking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewLine<'a> {
    /// The slot to take units of.
    pub slot_id: SlotId,
    /// Units to take from the slot and from each pool of it.
    pub quantity: i32,
    /// The row's idempotency key: the client's for a hold and a booking's first line,
    /// [`line_key`] for the others.
    pub key: &'a str,
    /// A later line's booking (its first line's id); `None` for a hold and a first line.
    pub booking: Option<HoldId>,
    /// Who the row belongs to.
    pub owner: Option<&'a OwnerId>,
    /// The placement's time, stored as `created_at`.
    pub now: Timestamp,
    /// When the row expires.
    pub expires_at: Timestamp,
}

impl<'a> NewLine<'a> {
    /// The row of a hold.
    pub fn hold(request: &HoldRequest<'a>) -> Self {
        NewLine {
            slot_id: request.slot_id,
            quantity: request.quantity,
            key: request.key.as_str(),
            booking: None,
            owner: request.owner,
            now: request.now,
            expires_at: request.expires_at,
        }
    }
}

/// The key of a booking's line that is not its first: a leading space (no client's key
/// starts with one: a client's key is visible ASCII, and a key scoped to its owner starts
/// with the owner's id), the booking's id and the line's slot id, unique as that pair is.
/// `booking` is `None` while the first line is not placed: the booking is refused then.
pub fn line_key(booking: Option<HoldId>, slot_id: SlotId) -> String {
    match booking {
        Some(booking) => format!(" line {}/{}", booking.get(), slot_id.get()),
        None => format!(" line -/{}", slot_id.get()),
    }
}

/// What placing one row did ([`PlaceKernel::place`]): nothing changed unless `Created`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// Its units taken and its row stored.
    Created(Hold),
    /// The slot has not the units as stored (or does not sell).
    SlotShort,
    /// The slot has them, a pool of it has not as stored: that pool, when the store knows it.
    PoolShort(Option<PoolId>),
    /// No units, and the statement itself found that no reclaim could change that (a store
    /// may never answer this: a short slot is then read to say why).
    SoldOut,
    /// The key's unique constraint refused the row.
    KeyTaken,
    /// A waiting entry has the key.
    KeyWaits,
}

/// Who has an idempotency key ([`PlaceKernel::key_holder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyHolder {
    /// A hold, or a booking of several lines.
    Booking(Booking),
    /// A waiting entry, at this place in its line.
    Waiting(WaitlistEntry, u32),
    /// Nobody.
    Free,
}

/// What a placement's unit of work came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placing<T> {
    /// The answer.
    Done(T),
    /// The key's unique constraint refused a row: undo the unit, then answer from the key's
    /// holder read after it ([`hold_key_answer`], [`booking_key_answer`]).
    KeyTaken,
    /// A pool is short and the store refills pools in a unit of their own
    /// ([`Refill::InOwnStep`]): undo the unit, reclaim the expired holds of these pools'
    /// slots (every pool of the placement's slots, by id) in a unit of their own, then place
    /// again with `refilled`.
    Refill(Vec<PoolId>),
}

/// The primitives a placement needs of a store's unit of work, beside a [`PoolKernel`]'s.
#[async_trait]
pub trait PlaceKernel: PoolKernel {
    /// Locks the rows of `slots` (ascending) and then of every pool of them, by ascending id:
    /// the accounts a booking takes from, in the store's lock order. A store that writes
    /// alone locks nothing.
    async fn lock_accounts(&mut self, slots: &[SlotId]) -> Result<(), StoreError>;

    /// Takes `row`'s units from its selling slot (nobody waiting in its line) and from each
    /// pool of it (nobody waiting in the pool's line), and stores the row held with its
    /// `hold_placed` event: all or none, by rows affected and the unique key.
    async fn place(&mut self, row: &NewLine<'_>) -> Result<Placed, StoreError>;

    /// Marks the row `booking` as its booking's first line, once every line is placed.
    async fn mark_booking(&mut self, booking: HoldId) -> Result<(), StoreError>;

    /// Reclaims the expired holds of the slots of `row`'s slot's short pools (`short`, the
    /// pool the last attempt found short, if the store knows it), or says why not here:
    /// [`Refill::InPlace`], [`Refill::InOwnStep`], or [`Refill::Nothing`] when anyone waits
    /// in the short pool's line (nobody takes units past it).
    async fn refill_pools(
        &mut self,
        row: &NewLine<'_>,
        short: Option<PoolId>,
    ) -> Result<Refill, StoreError>;

    /// Who has the idempotency `key`.
    async fn key_holder(&mut self, key: &str) -> Result<KeyHolder, StoreError>;

    /// The limits of slot `slot_id` and the units a hold could take of it at `now`: its
    /// `remaining` and its held holds expired by then, 0 while anyone waits in its line or in
    /// the line of one of its pools. `None` when no slot has the id.
    async fn slot_state(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<(SlotLimits, i64)>, StoreError>;

    /// The ids of the pools slot `slot_id` is in, ascending.
    async fn pools_of_slot(&mut self, slot_id: SlotId) -> Result<Vec<PoolId>, StoreError>;
}

/// A hold, placed as the module's docs say.
pub async fn place_hold<K: PlaceKernel + ?Sized>(
    kernel: &mut K,
    request: &HoldRequest<'_>,
    refilled: bool,
) -> Result<Step<Placing<HoldOutcome>>, StoreError> {
    let row = NewLine::hold(request);
    let answer = match place_row(kernel, &row, refilled).await? {
        Attempt::Done(Placed::Created(hold)) => {
            return Ok(Step::keep(Placing::Done(HoldOutcome::Created(hold))))
        }
        Attempt::Done(Placed::KeyTaken) => Placing::KeyTaken,
        Attempt::Done(Placed::KeyWaits) => Placing::Done(HoldOutcome::KeyReused(None)),
        Attempt::Done(Placed::SoldOut) => Placing::Done(HoldOutcome::SoldOut),
        Attempt::RefillApart => Placing::Refill(kernel.pools_of_slot(row.slot_id).await?),
        Attempt::Done(Placed::SlotShort | Placed::PoolShort(_)) | Attempt::Short { .. } => {
            let refused = match kernel.key_holder(row.key).await? {
                KeyHolder::Booking(holder) => HoldOutcome::key_taken(request, holder),
                KeyHolder::Waiting(..) => HoldOutcome::KeyReused(None),
                KeyHolder::Free => {
                    let slot = kernel.slot_state(row.slot_id, row.now).await?;
                    HoldOutcome::refused(request, None, slot.map(|(limits, _)| limits))
                }
            };
            Placing::Done(refused)
        }
    };
    Ok(Step::undo(answer))
}

/// A booking of several lines, placed as the module's docs say.
pub async fn place_booking<K: PlaceKernel + ?Sized>(
    kernel: &mut K,
    request: &BookingRequest<'_>,
    refilled: bool,
) -> Result<Step<Placing<BookingOutcome>>, StoreError> {
    let slots: Vec<SlotId> = request.lines.iter().map(|line| line.slot_id).collect();
    if slots.len() > 1 {
        kernel.lock_accounts(&slots).await?;
    }
    let mut placed: Vec<Option<Hold>> = Vec::with_capacity(request.lines.len());
    let mut booking: Option<HoldId> = None;
    for (i, line) in request.lines.iter().enumerate() {
        let key = match i {
            0 => request.key.as_str().to_owned(),
            _ => line_key(booking, line.slot_id),
        };
        let row = NewLine {
            slot_id: line.slot_id,
            quantity: line.quantity,
            key: &key,
            booking,
            owner: request.owner,
            now: request.now,
            expires_at: request.expires_at,
        };
        match place_row(kernel, &row, refilled).await? {
            Attempt::Done(Placed::Created(hold)) => {
                booking = booking.or(Some(hold.hold_id));
                placed.push(Some(hold));
            }
            Attempt::Done(Placed::KeyTaken) if i == 0 => return Ok(Step::undo(Placing::KeyTaken)),
            Attempt::Done(Placed::KeyWaits) if i == 0 => {
                return Ok(Step::undo(Placing::Done(BookingOutcome::KeyReused(None))))
            }
            Attempt::Done(Placed::KeyTaken | Placed::KeyWaits) => {
                return Err(StoreError::failed(format!(
                    "the line key {key:?} of a new booking is taken"
                )))
            }
            Attempt::RefillApart => {
                let mut pools = BTreeSet::new();
                for slot_id in &slots {
                    pools.extend(kernel.pools_of_slot(*slot_id).await?);
                }
                return Ok(Step::undo(Placing::Refill(pools.into_iter().collect())));
            }
            Attempt::Done(Placed::SlotShort | Placed::PoolShort(_) | Placed::SoldOut)
            | Attempt::Short { .. } => placed.push(None),
        }
    }
    if placed.iter().all(Option::is_some) {
        let booking = booking.ok_or_else(|| StoreError::failed("a booking of no lines"))?;
        kernel.mark_booking(booking).await?;
        let booking = Booking::of_lines(placed.into_iter().flatten().collect())
            .ok_or_else(|| StoreError::failed("a booking of no lines"))?;
        return Ok(Step::keep(Placing::Done(BookingOutcome::Created(booking))));
    }
    // The first line placed has the key: nobody else has it.
    let holder = match placed.first() {
        Some(Some(_)) => KeyHolder::Free,
        _ => kernel.key_holder(request.key.as_str()).await?,
    };
    let refused = match holder {
        KeyHolder::Booking(holder) => BookingOutcome::refused(request, Some(holder), &[]),
        KeyHolder::Waiting(..) => BookingOutcome::KeyReused(None),
        KeyHolder::Free => {
            let states = line_states(kernel, request, &placed).await?;
            BookingOutcome::refused(request, None, &states)
        }
    };
    Ok(Step::undo(Placing::Done(refused)))
}

/// The answer to a hold whose key the unique constraint refused, from the key's holder read
/// after the unit was undone. A holder gone since (a waiting entry that left) leaves the key
/// reused by nobody to show.
pub fn hold_key_answer(request: &HoldRequest<'_>, holder: KeyHolder) -> HoldOutcome {
    match holder {
        KeyHolder::Booking(holder) => HoldOutcome::key_taken(request, holder),
        KeyHolder::Waiting(..) | KeyHolder::Free => HoldOutcome::KeyReused(None),
    }
}

/// The answer to a booking whose key the unique constraint refused, from the key's holder
/// read after the unit was undone (as [`hold_key_answer`]).
pub fn booking_key_answer(request: &BookingRequest<'_>, holder: KeyHolder) -> BookingOutcome {
    match holder {
        KeyHolder::Booking(holder) => BookingOutcome::refused(request, Some(holder), &[]),
        KeyHolder::Waiting(..) | KeyHolder::Free => BookingOutcome::KeyReused(None),
    }
}

/// One row's placement by the refill rule: as stored, then after the reclaims.
async fn place_row<K: PlaceKernel + ?Sized>(
    kernel: &mut K,
    row: &NewLine<'_>,
    refilled: bool,
) -> Result<Attempt<Placed>, StoreError> {
    let mut ops = Retry {
        kernel,
        row,
        refilled,
        short_pool: None,
    };
    let first = ops.attempt().await?;
    take_with_refill(&mut ops, first).await
}

/// A row placed again after the reclaims [`take_with_refill`] asks for.
struct Retry<'k, 'r, K: ?Sized> {
    kernel: &'k mut K,
    row: &'k NewLine<'r>,
    refilled: bool,
    /// The pool the last attempt found short, if the store said.
    short_pool: Option<PoolId>,
}

#[async_trait]
impl<K: PlaceKernel + ?Sized> RefillOps for Retry<'_, '_, K> {
    type Done = Placed;

    async fn attempt(&mut self) -> Result<Attempt<Placed>, StoreError> {
        self.short_pool = None;
        Ok(match self.kernel.place(self.row).await? {
            Placed::SlotShort => Attempt::Short { pool: false },
            Placed::PoolShort(pool) => {
                self.short_pool = pool;
                Attempt::Short { pool: true }
            }
            settled => Attempt::Done(settled),
        })
    }

    /// Under the slot's lock, an attempt can find more only if this reclaimed any.
    async fn reclaim_slot(&mut self) -> Result<bool, StoreError> {
        let reclaimed = self
            .kernel
            .reclaim_slot(self.row.slot_id, self.row.now)
            .await?;
        Ok(!reclaimed.is_empty())
    }

    async fn refill_pools(&mut self) -> Result<Refill, StoreError> {
        if self.refilled {
            return Ok(Refill::Nothing);
        }
        self.kernel.refill_pools(self.row, self.short_pool).await
    }
}

/// A refused booking's line states, read in its unit: each line's slot, then the pools of
/// the lines' slots ([`LineState::within_pools`]), the units of the lines placed in the unit
/// counted free.
async fn line_states<K: PlaceKernel + ?Sized>(
    kernel: &mut K,
    request: &BookingRequest<'_>,
    placed: &[Option<Hold>],
) -> Result<Vec<LineState>, StoreError> {
    let mut states = Vec::with_capacity(request.lines.len());
    // Per pool, by id: the units the lines placed in this unit took from it.
    let mut own: BTreeMap<PoolId, i64> = BTreeMap::new();
    for (line, hold) in request.lines.iter().zip(placed) {
        let units = hold.as_ref().map_or(0, |hold| i64::from(hold.quantity));
        states.push(line_state(kernel, line, request.now, units, hold.is_none()).await?);
        for pool in kernel.pools_of_slot(line.slot_id).await? {
            *own.entry(pool).or_default() += units;
        }
    }
    let mut pools = Vec::with_capacity(own.len());
    for (pool_id, own) in own {
        if let Some(mut usage) = kernel.pool_usage(pool_id, request.now).await? {
            let remaining = i64::from(usage.pool.stored_remaining) + own;
            usage.pool.stored_remaining = i32::try_from(remaining).unwrap_or(i32::MAX);
            pools.push(usage);
        }
    }
    Ok(states
        .into_iter()
        .map(|state| state.within_pools(request, &pools))
        .collect())
}

/// One line's state: its slot's limits and free units, `own` (the line's units placed in this
/// unit) counted free.
async fn line_state<K: PlaceKernel + ?Sized>(
    kernel: &mut K,
    line: &BookingLine,
    now: Timestamp,
    own: i64,
    failed: bool,
) -> Result<LineState, StoreError> {
    let (slot, free) = match kernel.slot_state(line.slot_id, now).await? {
        Some((limits, free)) => (Some(limits), free.saturating_add(own)),
        None => (None, 0),
    };
    Ok(LineState {
        line: *line,
        slot,
        free: i32::try_from(free).unwrap_or(i32::MAX),
        failed,
    })
}

#[cfg(test)]
mod tests;
