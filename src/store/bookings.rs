//! [`BookingStore`]: bookings of several lines, every line taken or none, and ended together.

use async_trait::async_trait;

use super::error::StoreError;
use super::holds::HoldStore;
use super::outcome::{Decided, HoldOutcome, HoldRequest, RenewRequest, SlotLimits, Transition};
use crate::model::{
    Booking, BookingLine, Hold, HoldId, IdempotencyKey, LineProblem, LineShortfall, OwnerId,
    PoolUsage, Timestamp,
};
use crate::scope::Scope;

/// Bookings of several lines: units of several slots taken in one atomic step, all or none,
/// and confirmed, cancelled, renewed and expired together.
///
/// A booking is stored as one hold per line (so availability, rosters, reclaiming and events
/// work line by line as for any hold), the first line's hold carrying the idempotency key; the
/// booking's id is that hold's id. The rules on top of [`HoldStore`]'s:
///
/// - **All or nothing**, decided by rows affected: each line is the rule-4 conditional
///   decrement of its slot; a line that does not fit first reclaims that slot's expired holds
///   and is tried once more; when any line still does not fit, nothing of the booking stays
///   taken, and [`BookingOutcome::refused`] names every line that cannot be had.
/// - **One lock order**: slot rows are locked by slot id ascending (the request's lines come
///   in that order), so two bookings over the same slots never deadlock.
/// - **Whole bookings**: [`confirm_booking`](BookingStore::confirm_booking),
///   [`cancel_booking`](BookingStore::cancel_booking) and
///   [`renew_booking`](BookingStore::renew_booking) change every line in one atomic step, and
///   so do [`HoldStore::confirm_hold`], [`HoldStore::cancel_hold`] and
///   [`HoldStore::renew_hold`] called with the id of any line: no booking is ever half
///   confirmed. Every line's status, expiry and owner stay the same.
/// - A hold placed by [`HoldStore::create_hold`] is a booking of one line: `get_booking` and
///   the booking transitions accept its id.
///
/// The [`conformance`](crate::conformance) suite's booking cases check an implementation.
#[async_trait]
pub trait BookingStore: HoldStore {
    /// Places a booking of two or more lines, atomically:
    ///
    /// 1. if `request.key` belongs to a hold or booking, change nothing and answer by
    ///    [`BookingOutcome::refused`];
    /// 2. for each line in order (slot id ascending), decrement the slot's `remaining` by the
    ///    line's quantity where `remaining >= quantity`, the slot selling (`starts_at > now`,
    ///    not closed, not removed); a line that affected no row reclaims the slot's held holds
    ///    with `expires_at <= now` (marking them expired, giving their units back) and tries
    ///    once more;
    /// 3. if every line affected a row, insert one hold per line (`created_at = now`, the
    ///    request's owner and expiry; the first line's hold under the unique key), else undo
    ///    every write of the booking, reclaims included (a refused booking changes nothing,
    ///    like a refused hold), and answer [`BookingOutcome::refused`] from each line's
    ///    [`LineState`]. A store that decides whether to reclaim by an estimate made under
    ///    the slots' locks may keep reclaims when a concurrent change made the estimate wrong
    ///    (a hold confirmed by a clock that had not yet seen it expire): those units were free
    ///    already, so availability and the invariant are the same either way.
    async fn create_booking(
        &self,
        request: BookingRequest<'_>,
    ) -> Result<Decided<BookingOutcome>, StoreError>;

    /// The booking whose id is `booking_id` with all its lines as stored, if it exists in
    /// `scope`; the id of a line that is not the first is no booking's.
    async fn get_booking(
        &self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Booking>>, StoreError>;

    /// Confirms every line of a booking in `scope` stored as held with `expires_at > now`,
    /// setting `confirmed_at = now`, in one atomic step. Capacity does not change.
    async fn confirm_booking(
        &self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError>;

    /// Cancels every line of a booking in `scope` that is confirmed, or held with
    /// `expires_at > now`, setting `cancelled_at = now` and giving each line's units back to
    /// its slot (slots locked by id ascending), in one atomic step.
    async fn cancel_booking(
        &self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError>;

    /// Renews every line of a booking (`request.hold_id` is the booking's id) stored as held
    /// with `expires_at > now` to [`RenewRequest::renewed_expiry`] of its first line, in one
    /// atomic step. Capacity does not change.
    async fn renew_booking(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError>;
}

/// A request to place a booking of several lines, as the engine hands it to a store (every
/// field validated).
#[derive(Debug, Clone, Copy)]
pub struct BookingRequest<'a> {
    /// The client's idempotency key.
    pub key: &'a IdempotencyKey,
    /// Who the booking will belong to; `None` for an anonymous booking.
    pub owner: Option<&'a OwnerId>,
    /// Two to [`MAX_LINES`](crate::model::MAX_LINES) lines, by slot id ascending, each slot
    /// once: the order stores lock slots in.
    pub lines: &'a [BookingLine],
    /// The engine's current time; every slot must start after it. Stored as `created_at`.
    pub now: Timestamp,
    /// When the new booking will expire.
    pub expires_at: Timestamp,
}

impl BookingRequest<'_> {
    /// Whether `booking`, the booking this request's key already belongs to, is this very
    /// request made again: the same lines (the request's come sorted) and the same owner.
    pub fn is_replay_of(&self, booking: &Booking) -> bool {
        booking.owner() == self.owner
            && booking.lines.len() == self.lines.len()
            && booking
                .lines
                .iter()
                .zip(self.lines)
                .all(|(hold, line)| BookingLine::of(hold) == *line)
    }
}

/// What a store read of one line's slot after a booking it refused: enough to say what is
/// wrong with the line, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineState {
    /// The line asked for.
    pub line: BookingLine,
    /// The slot's limits, `None` when no slot has the line's id.
    pub slot: Option<SlotLimits>,
    /// Units a hold could take from the slot at the decision: `remaining` plus units of held
    /// holds with `expires_at <= now`.
    pub free: i32,
    /// Whether the line's conditional decrement affected no row (so it is short even if the
    /// units read since look enough).
    pub failed: bool,
}

impl LineState {
    /// The line's state once the pools read after the refusal are counted: `pools` (any of
    /// them; those the line's slot is not in are left out) each with its units at the
    /// decision. The line's `free` becomes the least of its slot's and its pools' available
    /// units, and it has `failed` when any of its slot's pools has fewer available units than
    /// every line of `request` on that pool's slots asks together. Every store with pools
    /// explains a refused booking through this.
    pub fn within_pools(mut self, request: &BookingRequest<'_>, pools: &[PoolUsage]) -> Self {
        let slot = self.line.slot_id;
        for usage in pools.iter().filter(|u| u.pool.slots.contains(&slot)) {
            let asked: i32 = request
                .lines
                .iter()
                .filter(|line| usage.pool.slots.contains(&line.slot_id))
                .map(|line| line.quantity)
                .sum();
            self.free = self.free.min(usage.available());
            self.failed |= usage.available() < asked;
        }
        self
    }
}

/// What [`BookingStore::create_booking`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookingOutcome {
    /// Every line was taken and the booking stored.
    Created(Booking),
    /// The key already belongs to a booking made by this same request; nothing changed. The
    /// booking is returned as stored now.
    Replayed(Booking),
    /// The key already belongs to a hold or booking made by another request; nothing changed.
    /// It is given only when it has the caller's owner (or both are anonymous).
    KeyReused(Option<Booking>),
    /// At least one line cannot be had; nothing changed. Every such line, by slot id.
    Refused(Vec<LineShortfall>),
}

impl BookingOutcome {
    /// The answer to a booking request that stored nothing: the booking the key already
    /// belongs to, if any (a key in use wins over every other answer), else every line that
    /// cannot be had, each for the first of these that applies: no such slot or a removed one,
    /// a started or closed slot, more units than its capacity, fewer units free than asked (or
    /// a decrement that affected no row). Every backend explains a refusal through this.
    pub fn refused(
        request: &BookingRequest<'_>,
        key_holder: Option<Booking>,
        lines: &[LineState],
    ) -> BookingOutcome {
        if let Some(booking) = key_holder {
            return if request.is_replay_of(&booking) {
                BookingOutcome::Replayed(booking)
            } else if booking.owner() == request.owner {
                BookingOutcome::KeyReused(Some(booking))
            } else {
                BookingOutcome::KeyReused(None)
            };
        }
        let short = lines
            .iter()
            .filter_map(|state| {
                let problem = line_problem(state, request.now)?;
                Some(LineShortfall {
                    slot_id: state.line.slot_id,
                    quantity: state.line.quantity,
                    problem,
                })
            })
            .collect();
        BookingOutcome::Refused(short)
    }
}

impl HoldOutcome {
    /// The answer to a hold request whose key already belongs to `holder`, a hold (a booking
    /// of one line) or a booking of several lines: a replay only of the same hold
    /// ([`HoldOutcome::refused`]); a booking of several lines is never the same request.
    pub fn key_taken(request: &HoldRequest<'_>, holder: Booking) -> HoldOutcome {
        match <[Hold; 1]>::try_from(holder.lines) {
            Ok([hold]) => HoldOutcome::refused(request, Some(hold), None),
            Err(mut lines) if lines.first().and_then(|h| h.owner.as_ref()) == request.owner => {
                HoldOutcome::KeyReused(Some(lines.swap_remove(0)))
            }
            Err(_) => HoldOutcome::KeyReused(None),
        }
    }
}

/// What is wrong with one line, if anything.
fn line_problem(state: &LineState, now: Timestamp) -> Option<LineProblem> {
    let Some(slot) = state.slot.filter(|slot| !slot.removed) else {
        return Some(LineProblem::SlotNotFound);
    };
    if slot.closed || slot.starts_at <= now {
        return Some(LineProblem::SlotClosed);
    }
    if state.line.quantity > slot.capacity {
        return Some(LineProblem::ExceedsCapacity {
            capacity: slot.capacity,
        });
    }
    if state.failed || state.free < state.line.quantity {
        return Some(LineProblem::SoldOut {
            free: state.free.clamp(0, state.line.quantity.saturating_sub(1)),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HoldStatus, SlotId};
    use chrono::{Duration, TimeZone, Utc};

    #[test]
    fn a_refused_booking_names_every_line_it_cannot_have() {
        let now = Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap();
        let key = IdempotencyKey::new("k").unwrap();
        let lines = [
            BookingLine::new(SlotId(1), 2),
            BookingLine::new(SlotId(2), 2),
            BookingLine::new(SlotId(3), 5),
            BookingLine::new(SlotId(4), 1),
            BookingLine::new(SlotId(5), 1),
            BookingLine::new(SlotId(6), 1),
        ];
        let request = BookingRequest {
            key: &key,
            owner: None,
            lines: &lines,
            now,
            expires_at: now + Duration::minutes(5),
        };
        let limits = |starts_in: i64, capacity, closed, removed| {
            Some(SlotLimits {
                starts_at: now + Duration::minutes(starts_in),
                capacity,
                closed,
                removed,
            })
        };
        let state = |i: usize, slot, free, failed| LineState {
            line: lines[i],
            slot,
            free,
            failed,
        };
        let states = [
            state(0, limits(60, 5, false, false), 5, false), // fine
            state(1, limits(60, 5, false, false), 1, true),  // short: 1 free
            state(2, limits(60, 4, false, false), 4, true),  // more than its capacity
            state(3, limits(0, 5, false, false), 5, false),  // started
            state(4, limits(60, 5, true, true), 5, false),   // removed
            state(5, None, 0, true),                         // no such slot
        ];
        let short = |slot, quantity, problem| LineShortfall {
            slot_id: SlotId(slot),
            quantity,
            problem,
        };
        assert_eq!(
            BookingOutcome::refused(&request, None, &states),
            BookingOutcome::Refused(vec![
                short(2, 2, LineProblem::SoldOut { free: 1 }),
                short(3, 5, LineProblem::ExceedsCapacity { capacity: 4 }),
                short(4, 1, LineProblem::SlotClosed),
                short(5, 1, LineProblem::SlotNotFound),
                short(6, 1, LineProblem::SlotNotFound),
            ])
        );
        // A decrement that affected no row is short even if the units read since look enough.
        let raced = [state(0, limits(60, 5, false, false), 5, true)];
        assert_eq!(
            BookingOutcome::refused(&request, None, &raced),
            BookingOutcome::Refused(vec![short(1, 2, LineProblem::SoldOut { free: 1 })])
        );

        let hold = |hold_id, slot, quantity| Hold {
            hold_id: HoldId(hold_id),
            slot_id: SlotId(slot),
            status: HoldStatus::Held,
            expires_at: now,
            confirmed_at: None,
            cancelled_at: None,
            quantity,
            owner: None,
            created_at: now,
        };
        let same = Booking::of_lines(
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| hold(10 + i as i64, l.slot_id.0, l.quantity))
                .collect(),
        )
        .unwrap();
        assert_eq!(
            BookingOutcome::refused(&request, Some(same.clone()), &states),
            BookingOutcome::Replayed(same),
            "a replay wins over every line's problem"
        );
        let other = Booking::of_hold(hold(9, 1, 2));
        assert_eq!(
            BookingOutcome::refused(&request, Some(other.clone()), &states),
            BookingOutcome::KeyReused(Some(other))
        );
    }
}
