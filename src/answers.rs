//! Turning what a store decided into the caller's answer: a placed hold or a refusal's error,
//! a transition's hold or booking (statuses resolved at the instant the store decided at) or
//! its error.

use crate::engine::HoldPlaced;
use crate::error::BookingError;
use crate::model::{Booking, Hold, HoldId, HoldStatus, SlotId, Timestamp};
use crate::observe::Op;
use crate::store::{AnyHoldOutcome, Decided, HoldOutcome, StoreError, Transition};

/// Turns what the store did with a hold request into the caller's answer, statuses resolved
/// at the instant the store decided at.
pub(crate) fn hold_placed(
    op: &Op,
    outcome: Decided<HoldOutcome>,
    slot_id: SlotId,
    quantity: i32,
) -> Result<HoldPlaced, BookingError> {
    let now = outcome.at;
    let placed = |hold: Hold, replayed| {
        op.record_hold(hold.hold_id);
        op.record_replayed(replayed);
        Ok(HoldPlaced {
            hold: hold.at(now),
            replayed,
        })
    };
    match outcome.outcome {
        HoldOutcome::Created(hold) => placed(hold, false),
        HoldOutcome::Replayed(hold) => placed(hold, true),
        refused => Err(hold_refused(refused, slot_id, quantity).unwrap_or_else(|| {
            BookingError::Store(StoreError::failed(
                "a hold outcome that is neither placed nor refused",
            ))
        })),
    }
}

/// The error of a hold request on `slot_id` for `quantity` units that the store refused;
/// `None` for a hold placed or replayed.
pub(crate) fn hold_refused(
    outcome: HoldOutcome,
    slot_id: SlotId,
    quantity: i32,
) -> Option<BookingError> {
    Some(match outcome {
        HoldOutcome::Created(_) | HoldOutcome::Replayed(_) => return None,
        HoldOutcome::KeyReused(hold) => BookingError::IdempotencyKeyReused {
            slot_id,
            existing_hold_id: hold.as_ref().map(|h| h.hold_id),
            existing_slot_id: hold.as_ref().map(|h| h.slot_id),
        },
        HoldOutcome::SoldOut => BookingError::SoldOut { slot_id },
        HoldOutcome::ExceedsCapacity { capacity } => BookingError::QuantityExceedsCapacity {
            slot_id,
            quantity,
            capacity,
        },
        HoldOutcome::SlotNotFound => BookingError::SlotNotFound { slot_id },
        HoldOutcome::SlotClosed => BookingError::SlotClosed { slot_id },
    })
}

/// Turns what the store did with an "any one of these" hold into the caller's answer;
/// `first` is the candidate tried first (named by `idempotency_key_reused`).
pub(crate) fn any_hold_placed(
    op: &Op,
    outcome: Decided<AnyHoldOutcome>,
    first: SlotId,
) -> Result<HoldPlaced, BookingError> {
    let at = outcome.at;
    let one = |outcome| hold_placed(op, Decided::new(at, outcome), first, 0);
    match outcome.outcome {
        AnyHoldOutcome::Created(hold) => {
            op.record_slot(hold.slot_id);
            one(HoldOutcome::Created(hold))
        }
        AnyHoldOutcome::Replayed(hold) => {
            op.record_slot(hold.slot_id);
            one(HoldOutcome::Replayed(hold))
        }
        AnyHoldOutcome::KeyReused(hold) => one(HoldOutcome::KeyReused(hold)),
        AnyHoldOutcome::Refused(candidates) => {
            Err(BookingError::NoCandidateAvailable { candidates })
        }
    }
}

/// Turns a store transition into the caller's answer, resolving statuses at the instant the
/// store decided at. A hold the operation did not change is returned as it is when its status
/// is `unchanged_ok` (confirming a confirmed hold, cancelling a cancelled one, renewing a
/// confirmed one), and is an error otherwise.
pub(crate) fn settle<T: Settled>(
    op: &Op,
    transition: Decided<Transition<T>>,
    hold_id: HoldId,
    unchanged_ok: HoldStatus,
) -> Result<T, BookingError> {
    let now = transition.at;
    match transition.outcome {
        Transition::Applied(hold) => {
            op.record_slot(hold.slot_id());
            Ok(hold.at(now))
        }
        Transition::NotFound => Err(BookingError::HoldNotFound { hold_id }),
        Transition::NotApplied(hold) => {
            op.record_slot(hold.slot_id());
            match hold.status_at(now) {
                status if status == unchanged_ok => Ok(hold.at(now)),
                HoldStatus::Cancelled => Err(BookingError::HoldCancelled { hold_id }),
                HoldStatus::Expired => Err(BookingError::HoldExpired { hold_id }),
                status => Err(BookingError::Store(StoreError::failed(format!(
                    "store refused to {} hold {hold_id}, which is {status}",
                    op.operation().name()
                )))),
            }
        }
    }
}

/// What a transition returns, a hold or a whole booking: its status resolved at an instant.
pub(crate) trait Settled {
    /// The status clients see at `now`.
    fn status_at(&self, now: Timestamp) -> HoldStatus;
    /// Itself with every status resolved at `now`.
    fn at(self, now: Timestamp) -> Self;
    /// The slot to record on the operation's span (a booking's first line's).
    fn slot_id(&self) -> SlotId;
}

impl Settled for Hold {
    fn status_at(&self, now: Timestamp) -> HoldStatus {
        Hold::status_at(self, now)
    }
    fn at(self, now: Timestamp) -> Self {
        Hold::at(self, now)
    }
    fn slot_id(&self) -> SlotId {
        self.slot_id
    }
}

impl Settled for Booking {
    fn status_at(&self, now: Timestamp) -> HoldStatus {
        Booking::status_at(self, now)
    }
    fn at(self, now: Timestamp) -> Self {
        Booking::at(self, now)
    }
    fn slot_id(&self) -> SlotId {
        self.lead().slot_id
    }
}
