//! The events a step must append, derived from the model's change of state, and the check of
//! the event log (with consumer leases) against them.

use std::future::Future;

use chrono::Duration;
use proptest::prelude::*;

use crate::engine::BookingEngine;
use crate::error::BookingError;
use crate::events::{EventKind, EventStore};
use crate::model::{HoldId, HoldStatus, OwnerId, SlotId, Timestamp};

use super::ops::{ModelOp, LEASE};
use super::reference::{Model, Seen};
use super::runner::{reclaim_step, run_checked, run_property, StepCheck};
use super::strategies::{after_opening, op};
use super::Mismatch;

/// An event as the model predicts it: kind, slot, hold, units (or capacity), owner, booking.
type ExpectedEvent = (
    EventKind,
    SlotId,
    Option<HoldId>,
    i32,
    Option<OwnerId>,
    Option<HoldId>,
);

/// The events a step that turned `before` into `after` must have appended, derived from the
/// difference of the two states alone (sorted, as a step's events may come in any order).
pub(super) fn expected_events(before: &Model, after: &Model) -> Vec<ExpectedEvent> {
    let mut expected = Vec::new();
    for slot in &after.slots {
        let event = |kind| (kind, slot.id, None, slot.capacity, None, None);
        match before.slots.iter().find(|s| s.id == slot.id) {
            None => expected.push(event(EventKind::SlotCreated)),
            Some(old) => {
                if old.capacity != slot.capacity {
                    expected.push(event(EventKind::SlotCapacityChanged));
                }
                if old.closed != slot.closed {
                    expected.push(event(if slot.closed {
                        EventKind::SlotClosed
                    } else {
                        EventKind::SlotReopened
                    }));
                }
                if old.removed_at.is_none() && slot.removed_at.is_some() {
                    expected.push(event(EventKind::SlotRemoved));
                }
            }
        }
    }
    for (index, hold) in after.holds.iter().enumerate() {
        // The booking of several lines the hold is a line of: its first line's id.
        let group = after.group(index);
        let booking = (group.len() > 1)
            .then(|| group.iter().map(|&i| after.holds[i].hold_id).min())
            .flatten();
        let event = |kind| {
            (
                kind,
                hold.slot_id,
                Some(hold.hold_id),
                hold.quantity,
                hold.owner.clone(),
                booking,
            )
        };
        let Some(old) = before.holds.iter().find(|h| h.hold_id == hold.hold_id) else {
            expected.push(event(EventKind::HoldPlaced));
            continue;
        };
        match (old.status, hold.status) {
            (HoldStatus::Held, HoldStatus::Held) if old.expires_at != hold.expires_at => {
                expected.push(event(EventKind::HoldRenewed));
            }
            (HoldStatus::Held, HoldStatus::Confirmed) => {
                expected.push(event(EventKind::HoldConfirmed));
            }
            (HoldStatus::Held | HoldStatus::Confirmed, HoldStatus::Cancelled) => {
                expected.push(event(EventKind::HoldCancelled));
            }
            (HoldStatus::Held, HoldStatus::Expired) => {
                expected.push(event(EventKind::HoldExpired));
            }
            _ => {}
        }
    }
    expected.sort_by_key(|e| (e.0.as_str(), e.1, e.2));
    expected
}

/// The event log checked against the model after every step, through one consumer that
/// acknowledges what it read.
pub(super) struct EventsMatchTheModel {
    consumer: crate::model::ConsumerId,
    last: Option<crate::events::EventPosition>,
    /// Where a follower reading by position (no cursor in the store) has read to.
    followed: crate::events::EventPosition,
    /// The model of the consumer `leased`: its lease (holder number, end) and its cursor.
    lease: Option<(u8, Timestamp)>,
    leased_cursor: Option<crate::events::EventPosition>,
}

impl EventsMatchTheModel {
    pub(super) fn new() -> Self {
        EventsMatchTheModel {
            consumer: crate::model::ConsumerId::new("model").expect("a valid consumer id"),
            last: None,
            followed: crate::events::EventPosition::START,
            lease: None,
            leased_cursor: None,
        }
    }

    /// The lease operations against the model of the consumer `leased`: a lease is granted
    /// when free, lapsed or already the holder's; a release by its holder frees it; a fenced
    /// acknowledgement moves the cursor (never back) only for the holder.
    async fn lease_op<S: crate::Store + EventStore>(
        &mut self,
        engine: &BookingEngine<S>,
        op: &ModelOp,
        now: Timestamp,
    ) -> Option<(Seen, Seen)> {
        let leased = crate::model::ConsumerId::new("leased").expect("a valid consumer id");
        let holder = |number: u8| {
            crate::model::LeaseHolder::new(format!("holder-{number}")).expect("a valid holder")
        };
        match *op {
            ModelOp::Lease { holder: number } => {
                let granted = match self.lease {
                    None => true,
                    Some((held, until)) => held == number || until <= now,
                };
                if granted {
                    let until = now + Duration::from_std(LEASE).expect("fits");
                    self.lease = Some((number, until));
                    self.leased_cursor = self
                        .leased_cursor
                        .or(Some(crate::events::EventPosition::START));
                }
                let actual = match engine.lease_consumer(&leased, &holder(number), LEASE).await {
                    Ok(granted) => Seen::Leased(granted),
                    Err(error) => Seen::Error(error.code()),
                };
                Some((Seen::Leased(granted), actual))
            }
            ModelOp::Release { holder: number } => {
                if self.lease.is_some_and(|(held, _)| held == number) {
                    self.lease = None;
                }
                let actual = match engine.release_consumer(&leased, &holder(number)).await {
                    Ok(()) => Seen::Done,
                    Err(error) => Seen::Error(error.code()),
                };
                Some((Seen::Done, actual))
            }
            ModelOp::AcknowledgeLeased { holder: number } => {
                let through = self.last.unwrap_or(crate::events::EventPosition::START);
                let answer = if self.lease.is_some_and(|(held, _)| held == number) {
                    self.leased_cursor = self.leased_cursor.max(Some(through));
                    Ok(())
                } else {
                    Err("lease_lost")
                };
                let acknowledged = engine
                    .acknowledge_leased(&leased, &holder(number), through)
                    .await
                    .map_err(|error| error.code());
                let cursor = engine.store().consumer_position(&leased).await;
                let actual = match cursor {
                    Ok(cursor) => Seen::Cursor(acknowledged, cursor),
                    Err(error) => Seen::Error(BookingError::Store(error).code()),
                };
                Some((Seen::Cursor(answer, self.leased_cursor), actual))
            }
            _ => None,
        }
    }
}

impl EventsMatchTheModel {
    /// A follower reading by position gets what the consumer just read (`read`), and the
    /// end of the log is at or after it, with nothing after the end.
    async fn follow<S: crate::Store + EventStore>(
        &mut self,
        engine: &BookingEngine<S>,
        read: &[crate::events::Event],
    ) -> Result<(), Mismatch> {
        let followed = engine
            .read_events_after(self.followed, crate::events::MAX_BATCH)
            .await
            .map_err(|e| Mismatch(format!("read_events_after: {e}")))?;
        ensure!(
            followed == read,
            "after {} a follower read {followed:?}, the consumer {read:?}",
            self.followed
        );
        if let Some(last) = followed.last() {
            self.followed = last.position;
        }
        let end = engine
            .event_log_end()
            .await
            .map_err(|e| Mismatch(format!("event_log_end: {e}")))?;
        ensure!(
            end >= self.followed,
            "the log's end {end} is before the last event read, {}",
            self.followed
        );
        let past_end = engine
            .read_events_after(end, crate::events::MAX_BATCH)
            .await
            .map_err(|e| Mismatch(format!("read_events_after: {e}")))?;
        ensure!(
            past_end.is_empty(),
            "events after the log's end {end}: {past_end:?}"
        );
        Ok(())
    }
}

#[async_trait::async_trait]
impl<S: crate::Store + EventStore> StepCheck<S> for EventsMatchTheModel {
    async fn extra_op(
        &mut self,
        engine: &BookingEngine<S>,
        model: &mut Model,
        op: &ModelOp,
        now: Timestamp,
    ) -> Option<(Seen, Seen)> {
        let ModelOp::ReclaimExpired = op else {
            return self.lease_op(engine, op, now).await;
        };
        Some(reclaim_step(engine, model, now).await)
    }

    async fn after_step(
        &mut self,
        engine: &BookingEngine<S>,
        before: &Model,
        after: &Model,
    ) -> Result<(), Mismatch> {
        let read = engine
            .read_events(&self.consumer, crate::events::MAX_BATCH)
            .await
            .map_err(|e| Mismatch(format!("read_events: {e}")))?;
        for event in &read {
            ensure!(
                self.last.is_none_or(|last| event.position > last),
                "event position {} not after {:?}",
                event.position,
                self.last
            );
            self.last = Some(event.position);
        }
        if let Some(last) = self.last {
            engine
                .acknowledge_events(&self.consumer, last)
                .await
                .map_err(|e| Mismatch(format!("acknowledge_events: {e}")))?;
        }
        self.follow(engine, &read).await?;
        let mut actual: Vec<ExpectedEvent> = read
            .iter()
            .map(|e| {
                (
                    e.kind,
                    e.slot_id,
                    e.hold_id,
                    e.quantity,
                    e.owner.clone(),
                    e.booking_id,
                )
            })
            .collect();
        actual.sort_by_key(|e| (e.0.as_str(), e.1, e.2));
        let expected = expected_events(before, after);
        ensure!(
            expected == actual,
            "the model expects events {expected:?}, the store appended {actual:?}"
        );
        Ok(())
    }
}

/// Runs `cases` random sequences like [`check`](super::check), with reclaims of expired holds
/// among the operations, and after every step compares the events the store appended with
/// those the model's change of state implies: one per change, none for a refusal.
///
/// # Panics
///
/// When a sequence's outcomes, state or events differ from the model's.
pub fn check_events<S, F, Fut>(factory: F, cases: u32, max_len: usize)
where
    S: crate::Store + EventStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let step = prop_oneof![
        18 => op(),
        2 => Just(ModelOp::ReclaimExpired),
        1 => (1..=2u8).prop_map(|holder| ModelOp::Lease { holder }),
        1 => (1..=2u8).prop_map(|holder| ModelOp::AcknowledgeLeased { holder }),
        1 => (1..=2u8).prop_map(|holder| ModelOp::Release { holder }),
    ];
    let sequences = after_opening(proptest::collection::vec(step, 1..=max_len));
    run_property(
        "event model check",
        cases,
        2,
        &sequences,
        factory,
        |store, ops| async move {
            let mut checks = EventsMatchTheModel::new();
            run_checked(store, &ops, &mut checks).await
        },
    );
}
