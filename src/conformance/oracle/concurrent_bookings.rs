//! Concurrent batches with bookings of several lines: bookings, holds and whole-booking
//! changes (by the booking or by a line's hold operation) started together; after each batch
//! every booking is whole, every acknowledged success shows, and every slot's invariant holds.

use std::collections::HashMap;
use std::future::Future;

use chrono::Duration;
use proptest::prelude::*;

use crate::bookings::NewBooking;
use crate::conformance::kit::SlotTally;
use crate::conformance::{Fixture, HOLD_TTL};
use crate::error::BookingError;
use crate::model::{Booking, HoldId, HoldStatus, NewSlot, SlotId};
use crate::scope::Scope;
use crate::store::{BookingStore, Store};
use crate::Clock;

use super::runner::run_property;
use super::Mismatch;

/// One operation of a concurrent batch with bookings.
#[derive(Clone, Debug)]
pub enum BookingStep {
    /// Book one unit of each of these slots (indexes; repeats dropped) under key number `key`.
    Book {
        /// Slot indexes.
        slots: Vec<usize>,
        /// Key number (keys repeat on purpose).
        key: u8,
    },
    /// Confirm (`Some(true)`), cancel (`Some(false)`) or renew (`None`) booking number
    /// `booking`, through the booking's routes or (`by_line`) a hold operation on its last line.
    Change {
        /// Booking index.
        booking: usize,
        /// Confirm, cancel or renew.
        confirm: Option<bool>,
        /// Through a line's hold operation instead of the booking's.
        by_line: bool,
    },
}

pub(super) fn step() -> impl Strategy<Value = BookingStep> {
    prop_oneof![
        5 => (proptest::collection::vec(0..4usize, 1..=3), 0..10u8)
            .prop_map(|(slots, key)| BookingStep::Book { slots, key }),
        4 => (0..12usize, prop_oneof![Just(Some(true)), Just(Some(false)), Just(None)], any::<bool>())
            .prop_map(|(booking, confirm, by_line)| BookingStep::Change { booking, confirm, by_line }),
    ]
}

/// What the successful calls on one booking imply about its final state.
#[derive(Debug, Default, Clone)]
struct Acknowledged {
    confirmed: bool,
    cancelled: bool,
}

/// Runs one batch's step on the engine; `Some` booking when it answered one.
async fn run_step<S: Store + BookingStore>(
    engine: crate::BookingEngine<S>,
    step: BookingStep,
    slots: Vec<SlotId>,
    target: Option<Booking>,
) -> Result<Option<(Booking, char)>, BookingError> {
    match (step, target) {
        (BookingStep::Book { slots: picked, key }, _) => {
            let mut request = NewBooking::new(format!("key-{key}"));
            let mut seen = Vec::new();
            for index in picked {
                let slot = slots[index % slots.len()];
                if !seen.contains(&slot) {
                    seen.push(slot);
                    request = request.line(slot, 1);
                }
            }
            let placed = engine.book(request).await?;
            Ok(Some((placed.booking, 'b')))
        }
        (
            BookingStep::Change {
                confirm, by_line, ..
            },
            Some(booking),
        ) => {
            let (id, any) = (booking.booking_id, Scope::Anonymous);
            let line = booking.lines.last().map_or(id, |h| h.hold_id);
            let kind = match confirm {
                Some(true) => 'c',
                Some(false) => 'x',
                None => 'r',
            };
            let done = match (confirm, by_line) {
                (Some(true), false) => engine.confirm_booking(&any, id).await?,
                (Some(false), false) => engine.cancel_booking(&any, id).await?,
                (None, false) => engine.renew_booking(&any, id, None).await?,
                (Some(true), true) => {
                    engine.confirm(&any, line).await?;
                    booking
                }
                (Some(false), true) => {
                    engine.cancel(&any, line).await?;
                    booking
                }
                (None, true) => {
                    engine.renew(&any, line, None).await?;
                    booking
                }
            };
            Ok(Some((done, kind)))
        }
        (BookingStep::Change { .. }, None) => Ok(None),
    }
}

/// The slots every concurrent booking run books from: capacities 1, 2, 3 and 5.
pub(super) async fn batch_slots<S: Store>(f: &Fixture<S>) -> Result<Vec<SlotId>, Mismatch> {
    let mut slots = Vec::new();
    for capacity in [1, 2, 3, 5] {
        let starts_at = f.clock.now() + Duration::hours(2);
        let slot = NewSlot::new(starts_at, starts_at + Duration::hours(1), capacity);
        let slot = f
            .engine
            .create_slot(slot)
            .await
            .map_err(|e| Mismatch(format!("create_slot: {e}")))?;
        slots.push(slot.slot_id);
    }
    Ok(slots)
}

/// Runs batches concurrently against a fresh store; `Err` describes the first violation.
async fn run_batches<S: Store + BookingStore>(
    store: S,
    batches: &[(Vec<BookingStep>, i64)],
) -> Result<(), Mismatch> {
    let f = Fixture::new(store);
    let slots = batch_slots(&f).await?;
    run_batches_on(&f, &slots, batches, async |_, _| Ok(())).await
}

/// Runs `batches` concurrently on `f`'s engine over `slots`; after each batch, checks every
/// booking, every slot's invariant, and whatever `check` checks of the lines stored (by
/// slot) at the clock's time.
pub(super) async fn run_batches_on<S: Store + BookingStore>(
    f: &Fixture<S>,
    slots: &[SlotId],
    batches: &[(Vec<BookingStep>, i64)],
    check: impl AsyncFn(&HashMap<SlotId, Vec<crate::Hold>>, crate::Timestamp) -> Result<(), Mismatch>,
) -> Result<(), Mismatch> {
    let (engine, clock) = (&f.engine, &f.clock);
    let slots = slots.to_vec();
    let mut bookings: Vec<Booking> = Vec::new();
    let mut acked: HashMap<HoldId, Acknowledged> = HashMap::new();
    for (number, (steps, advance)) in batches.iter().enumerate() {
        let tasks: Vec<_> = steps
            .iter()
            .map(|step| {
                let target = match step {
                    BookingStep::Change { booking, .. } if !bookings.is_empty() => {
                        Some(bookings[booking % bookings.len()].clone())
                    }
                    _ => None,
                };
                tokio::spawn(run_step(
                    engine.clone(),
                    step.clone(),
                    slots.clone(),
                    target,
                ))
            })
            .collect();
        for (task, step) in tasks.into_iter().zip(steps) {
            let outcome = task
                .await
                .map_err(|e| Mismatch(format!("batch {number}: task failed: {e}")))?;
            match outcome {
                Ok(Some((booking, kind))) => {
                    let entry = acked.entry(booking.booking_id).or_insert_with(|| {
                        bookings.push(booking.clone());
                        Acknowledged::default()
                    });
                    match kind {
                        'c' => entry.confirmed = true,
                        'x' => entry.cancelled = true,
                        _ => {}
                    }
                }
                Ok(None) => {}
                Err(BookingError::Store(e)) => {
                    return Err(Mismatch(format!(
                        "batch {number} {step:?}: store error {e}"
                    )))
                }
                Err(BookingError::HoldNotFound { hold_id }) => {
                    return Err(Mismatch(format!(
                        "batch {number} {step:?}: {hold_id} not found"
                    )))
                }
                Err(_) => {}
            }
        }
        clock.advance(Duration::microseconds(*advance));
        let now = clock.now();
        let mut per_slot: HashMap<SlotId, Vec<crate::Hold>> = HashMap::new();
        for booking in &bookings {
            let stored = engine
                .store()
                .get_booking(booking.booking_id, &Scope::BackOffice, now)
                .await
                .map_err(|e| Mismatch(format!("get_booking: {e}")))?
                .outcome
                .ok_or_else(|| Mismatch(format!("booking {} is missing", booking.booking_id)))?;
            ensure!(
                stored.booked_lines() == booking.booked_lines(),
                "after batch {number}: booking {} has lines {:?}, placed with {:?}",
                booking.booking_id,
                stored.booked_lines(),
                booking.booked_lines()
            );
            let status = stored.status_at(now);
            ensure!(
                stored.lines.iter().all(|h| h.status_at(now) == status),
                "after batch {number}: booking {} is not whole: {stored:?}",
                booking.booking_id
            );
            let ack = &acked[&booking.booking_id];
            let expected_ok = if ack.cancelled {
                status == HoldStatus::Cancelled
            } else if ack.confirmed {
                status == HoldStatus::Confirmed
            } else {
                matches!(status, HoldStatus::Held | HoldStatus::Expired)
            };
            ensure!(
                expected_ok,
                "after batch {number}: booking {} is {status}, acknowledged {ack:?}",
                booking.booking_id
            );
            for line in stored.lines {
                per_slot.entry(line.slot_id).or_default().push(line);
            }
        }
        check(&per_slot, now)
            .await
            .map_err(|Mismatch(m)| Mismatch(format!("after batch {number}: {m}")))?;
        for &slot_id in &slots {
            let slot = engine
                .store()
                .get_slot(slot_id)
                .await
                .map_err(|e| Mismatch(format!("get_slot: {e}")))?
                .ok_or_else(|| Mismatch(format!("slot {slot_id} is missing")))?;
            let lines = per_slot.remove(&slot_id).unwrap_or_default();
            SlotTally::of(&slot, &lines, now)
                .check()
                .map_err(|broken| Mismatch(format!("after batch {number}: {slot:?}: {broken}")))?;
        }
    }
    Ok(())
}

/// Runs `cases` random sequences of concurrent batches of bookings (more with
/// `PROPTEST_CASES`), each on a fresh store from `factory`, on a multi-threaded runtime.
/// Outcomes need not match any serial order; after each batch every booking is whole (every
/// line there, all of one status), every success shows in the state, and every slot's
/// invariant holds.
///
/// # Panics
///
/// When a batch leaves the store violating any of these.
pub fn check_concurrent_bookings<S, F, Fut>(factory: F, cases: u32)
where
    S: Store + BookingStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let ttl = HOLD_TTL.as_micros() as i64;
    let batch = (
        proptest::collection::vec(step(), 1..=12),
        prop_oneof![Just(0i64), Just(1_000_000), Just(ttl)],
    );
    let batches = proptest::collection::vec(batch, 1..=6);
    run_property(
        "concurrent booking check",
        cases,
        4,
        &batches,
        factory,
        |store, batches| async move { run_batches(store, &batches).await },
    );
}
