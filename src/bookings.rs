//! Bookings of several lines on the engine: units of several slots taken together, all or
//! nothing, and confirmed, cancelled, renewed and expired together.
//!
//! A hotel stay is a unit of each night, a course a seat in each of its sessions, an order two
//! concert seats and a parking space. [`BookingEngine::book`] takes every line or none; a
//! refusal names every line that cannot be had. A booking of one line is exactly a hold
//! ([`BookingEngine::place_hold`]): the same rules, errors and events.
//!
//! ```
//! # tokio_test::block_on(async {
//! use chrono::{Duration, Utc};
//! use slot_booking::{BookingEngine, BookingError, HoldStatus, MemoryStore, NewBooking, NewSlot, Scope};
//!
//! let engine = BookingEngine::new(MemoryStore::new());
//! let night = |n| Utc::now() + Duration::days(n);
//! let mut nights = Vec::new();
//! for n in 1..=3 {
//!     let slot = NewSlot::new(night(n), night(n) + Duration::hours(12), 1);
//!     nights.push(engine.create_slot(slot).await?.slot_id);
//! }
//! let stay = NewBooking::new("stay-42").line(nights[0], 1).line(nights[1], 1);
//! let placed = engine.book(stay).await?;
//! assert_eq!(placed.booking.lines.len(), 2);
//!
//! // Nights 2 and 3: night 2 is taken, so neither is.
//! let overlap = NewBooking::new("stay-43").line(nights[1], 1).line(nights[2], 1);
//! let Err(BookingError::LinesUnavailable { lines }) = engine.book(overlap).await else {
//!     panic!("night 2 is sold out");
//! };
//! assert_eq!(lines.len(), 1);
//! assert_eq!(lines[0].slot_id, nights[1]);
//!
//! let booked = engine
//!     .confirm_booking(&Scope::Anonymous, placed.booking.booking_id)
//!     .await?;
//! assert!(booked.lines.iter().all(|line| line.status == HoldStatus::Confirmed));
//! # Ok::<(), BookingError>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::answers::settle;
use crate::engine::{detached, guarded, BookingEngine, NewHold};
use crate::error::BookingError;
use crate::model::{
    canonical_lines, Booking, BookingLine, HoldId, HoldStatus, IdempotencyKey, OwnerId, SlotId,
    Timestamp,
};
use crate::observe::{Op, Operation};
use crate::scope::Scope;
use crate::store::{
    BookingOutcome, BookingRequest, BookingStore, Decided, RenewRequest, StoreError, Transition,
};

/// A booking to place: lines, one idempotency key, one owner, one lifetime.
///
/// ```
/// # use slot_booking::{NewBooking, OwnerId, SlotId};
/// let request = NewBooking::new("order-17")
///     .line(SlotId(3), 2)
///     .line(SlotId(9), 1)
///     .owner(OwnerId::new("customer-8")?);
/// # Ok::<(), slot_booking::model::InvalidOwnerId>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBooking {
    /// The idempotency key: 1 to 255 visible ASCII characters, unique across all holds and
    /// bookings.
    pub key: String,
    /// 1 to [`MAX_LINES`](crate::model::MAX_LINES) lines, in any order, each slot once.
    pub lines: Vec<BookingLine>,
    /// Who the booking belongs to (default: nobody, an anonymous booking).
    pub owner: Option<OwnerId>,
    /// How long it lasts unconfirmed (default: the engine's hold lifetime).
    pub lifetime: Option<Duration>,
}

impl NewBooking {
    /// A booking with no lines yet, anonymous, for the engine's hold lifetime.
    pub fn new(key: impl Into<String>) -> Self {
        NewBooking {
            key: key.into(),
            lines: Vec::new(),
            owner: None,
            lifetime: None,
        }
    }

    /// Adds a line: `quantity` units of `slot_id`.
    pub fn line(mut self, slot_id: SlotId, quantity: i32) -> Self {
        self.lines.push(BookingLine::new(slot_id, quantity));
        self
    }

    /// Makes the booking `owner`'s: later calls on it must act in that owner's [`Scope`].
    pub fn owner(mut self, owner: OwnerId) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Asks for a lifetime of its own, within the engine's
    /// [`requested_ttl_bounds`](crate::EngineBuilder::requested_ttl_bounds).
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = Some(lifetime);
        self
    }
}

/// What [`BookingEngine::book`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookingPlaced {
    /// The booking, every line's status resolved at the time of the call.
    pub booking: Booking,
    /// `true` when the idempotency key had already placed this very booking (the same lines,
    /// in any order, and the same owner): nothing more was taken.
    pub replayed: bool,
}

impl<S: BookingStore> BookingEngine<S> {
    /// Places a booking: every line's units taken, or none.
    ///
    /// Lines may come in any order; each slot at most once. A short line first reclaims its
    /// slot's expired holds. When any line cannot be had nothing is taken and the error
    /// (`lines_unavailable`) names every such line: sold out (with the units free), more than
    /// the slot's capacity, a started or closed slot, or no such slot. Idempotent by key: the
    /// same key with the same lines and owner returns the same booking in its current state
    /// with `replayed: true`; anything else with that key is `idempotency_key_reused`.
    ///
    /// A booking of one line is [`place_hold`](BookingEngine::place_hold): the same hold, the
    /// same errors (`sold_out`, `slot_closed`, …) and events.
    pub async fn book(&self, request: NewBooking) -> Result<BookingPlaced, BookingError> {
        let request = match checked(request)? {
            Checked::One(hold) => return Ok(self.place_hold(hold).await?.into()),
            Checked::Several(request) => request,
        };
        let op = Op::new(Operation::Book).slot(request.lines[0].slot_id);
        op.run(async {
            let prepared = self.prepare_booking(request)?;
            let first = prepared.lines[0].slot_id;
            let inner = Arc::clone(&self.inner);
            let outcome = op
                .store(detached(async move {
                    let outcome = inner.store.create_booking(prepared.request()).await;
                    if let Ok(Decided {
                        outcome: BookingOutcome::Created(booking),
                        ..
                    }) = &outcome
                    {
                        let units: Vec<_> = booking
                            .lines
                            .iter()
                            .map(|h| (h.slot_id, h.quantity))
                            .collect();
                        inner.show_taken(&units);
                    }
                    outcome
                }))
                .await?;
            booking_placed(&op, outcome, first)
        })
        .await
    }

    /// Reads a booking in `scope` with every line, statuses resolved at the current time. A
    /// hold's id reads it as a booking of one line; a booking outside `scope`, or the id of a
    /// line that is not its first, is `hold_not_found`.
    pub async fn get_booking(
        &self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        let op = Op::new(Operation::GetBooking).hold(booking_id);
        op.run(async {
            let now = self.clock().now();
            let read = op
                .store(guarded(self.store().get_booking(booking_id, scope, now)))
                .await?;
            match read.outcome {
                Some(booking) => Ok(whole(booking)?.at(read.at)),
                None => Err(BookingError::HoldNotFound {
                    hold_id: booking_id,
                }),
            }
        })
        .await
    }

    /// Confirms every line of an active booking in `scope` at once. Confirming a confirmed
    /// booking returns it unchanged; an expired one is `hold_expired`, a cancelled one
    /// `hold_cancelled`.
    pub async fn confirm_booking(
        &self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        self.end_booking(scope, booking_id, HoldStatus::Confirmed)
            .await
    }

    /// Cancels every line of an active or confirmed booking in `scope` at once, giving each
    /// line's units back. Cancelling a cancelled booking returns it unchanged.
    pub async fn cancel_booking(
        &self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        self.end_booking(scope, booking_id, HoldStatus::Cancelled)
            .await
    }

    /// Renews every line of an active booking in `scope` at once, as
    /// [`renew`](BookingEngine::renew) renews a hold.
    pub async fn renew_booking(
        &self,
        scope: &Scope,
        booking_id: HoldId,
        lifetime: Option<Duration>,
    ) -> Result<Booking, BookingError> {
        let op = Op::new(Operation::RenewBooking).hold(booking_id);
        op.run(async {
            let (lifetime, max_life, now) = self.prepare_renew(lifetime)?;
            let inner = Arc::clone(&self.inner);
            let scope = scope.clone();
            let transition = op
                .store(detached(async move {
                    let request = RenewRequest {
                        hold_id: booking_id,
                        scope: &scope,
                        now,
                        lifetime,
                        max_life,
                    };
                    inner.store.renew_booking(request).await
                }))
                .await?;
            settle(
                &op,
                whole_transition(transition)?,
                booking_id,
                HoldStatus::Confirmed,
            )
        })
        .await
    }

    /// Confirms or cancels (`to`) a whole booking, invalidating the cached availability once
    /// the change committed (R3).
    async fn end_booking(
        &self,
        scope: &Scope,
        booking_id: HoldId,
        to: HoldStatus,
    ) -> Result<Booking, BookingError> {
        let confirm = to == HoldStatus::Confirmed;
        let operation = if confirm {
            Operation::ConfirmBooking
        } else {
            Operation::CancelBooking
        };
        let op = Op::new(operation).hold(booking_id);
        op.run(async {
            let now = self.clock().now();
            let inner = Arc::clone(&self.inner);
            let scope = scope.clone();
            let transition = op
                .store(detached(async move {
                    let done = if confirm {
                        inner.store.confirm_booking(booking_id, &scope, now).await
                    } else {
                        inner.store.cancel_booking(booking_id, &scope, now).await
                    };
                    inner.invalidate_if_applied(done)
                }))
                .await?;
            settle(&op, whole_transition(transition)?, booking_id, to)
        })
        .await
    }
}

/// A booking request whose lines were checked: one line (a hold), or several.
pub(crate) enum Checked {
    One(NewHold),
    Several(NewBooking),
}

/// Checks `request`'s lines and puts them in lock order; a booking of one line becomes the
/// hold it is.
pub(crate) fn checked(mut request: NewBooking) -> Result<Checked, BookingError> {
    let lines = canonical_lines(std::mem::take(&mut request.lines))?;
    if let [line] = lines[..] {
        let mut hold = NewHold::new(line.slot_id, request.key).quantity(line.quantity);
        hold.owner = request.owner;
        hold.lifetime = request.lifetime;
        return Ok(Checked::One(hold));
    }
    request.lines = lines;
    Ok(Checked::Several(request))
}

/// A checked booking of several lines with its instant and expiry: what the store is handed.
pub(crate) struct PreparedBooking {
    key: IdempotencyKey,
    owner: Option<OwnerId>,
    pub(crate) lines: Vec<BookingLine>,
    now: Timestamp,
    expires_at: Timestamp,
}

impl PreparedBooking {
    /// The request as the store takes it.
    pub(crate) fn request(&self) -> BookingRequest<'_> {
        BookingRequest {
            key: &self.key,
            owner: self.owner.as_ref(),
            lines: &self.lines,
            now: self.now,
            expires_at: self.expires_at,
        }
    }
}

impl<S: crate::HoldStore> BookingEngine<S> {
    /// Fixes a checked booking's stored key (scoped to its owner if the engine scopes keys),
    /// lifetime, instant and expiry, before any store sees it.
    pub(crate) fn prepare_booking(
        &self,
        request: NewBooking,
    ) -> Result<PreparedBooking, BookingError> {
        let key = self.inner.stored_key(request.key, request.owner.as_ref())?;
        let lifetime = self.inner.lifetimes.pick(request.lifetime)?;
        let now = self.clock().now();
        let expires_at = now
            .checked_add_signed(lifetime)
            .ok_or_else(|| StoreError::failed("the expiry is past the end of time"))?;
        Ok(PreparedBooking {
            key,
            owner: request.owner,
            lines: request.lines,
            now,
            expires_at,
        })
    }
}

impl From<crate::HoldPlaced> for BookingPlaced {
    fn from(placed: crate::HoldPlaced) -> Self {
        BookingPlaced {
            booking: Booking::of_hold(placed.hold),
            replayed: placed.replayed,
        }
    }
}

/// `booking` if it has lines: a store that answers a booking of none is broken, and the
/// engine says so rather than reading a first line that is not there.
pub(crate) fn whole(booking: Booking) -> Result<Booking, StoreError> {
    if booking.lines.is_empty() {
        return Err(StoreError::failed(format!(
            "the store answered booking {} with no lines",
            booking.booking_id
        )));
    }
    Ok(booking)
}

fn whole_outcome(outcome: BookingOutcome) -> Result<BookingOutcome, StoreError> {
    Ok(match outcome {
        BookingOutcome::Created(b) => BookingOutcome::Created(whole(b)?),
        BookingOutcome::Replayed(b) => BookingOutcome::Replayed(whole(b)?),
        BookingOutcome::KeyReused(Some(b)) => BookingOutcome::KeyReused(Some(whole(b)?)),
        other => other,
    })
}

pub(crate) fn whole_transition(
    transition: Decided<Transition<Booking>>,
) -> Result<Decided<Transition<Booking>>, StoreError> {
    let at = transition.at;
    let outcome = match transition.outcome {
        Transition::Applied(b) => Transition::Applied(whole(b)?),
        Transition::NotApplied(b) => Transition::NotApplied(whole(b)?),
        Transition::NotFound => Transition::NotFound,
    };
    Ok(Decided::new(at, outcome))
}

/// Turns what the store did with a booking request into the caller's answer.
pub(crate) fn booking_placed(
    op: &Op,
    outcome: Decided<BookingOutcome>,
    first_slot: SlotId,
) -> Result<BookingPlaced, BookingError> {
    let now = outcome.at;
    let outcome = whole_outcome(outcome.outcome)?;
    let placed = |booking: Booking, replayed| {
        op.record_hold(booking.booking_id);
        op.record_replayed(replayed);
        Ok(BookingPlaced {
            booking: booking.at(now),
            replayed,
        })
    };
    match outcome {
        BookingOutcome::Created(booking) => placed(booking, false),
        BookingOutcome::Replayed(booking) => placed(booking, true),
        BookingOutcome::KeyReused(booking) => Err(BookingError::IdempotencyKeyReused {
            slot_id: first_slot,
            existing_hold_id: booking.as_ref().map(|b| b.booking_id),
            existing_slot_id: booking.as_ref().map(|b| b.lead().slot_id),
        }),
        BookingOutcome::Refused(lines) if lines.is_empty() => Err(crate::StoreError::failed(
            "the store refused a booking without naming a line that cannot be had",
        )
        .into()),
        BookingOutcome::Refused(lines) => Err(BookingError::LinesUnavailable { lines }),
    }
}
