//! Bookings of several lines in the model: what placing, changing and reading a booking should
//! do, the step check that runs them against a store, and their property test.

use std::future::Future;

use proptest::prelude::*;

use crate::bookings::NewBooking;
use crate::engine::BookingEngine;
use crate::error::BookingError;
use crate::events::EventStore;
use crate::model::{Booking, HoldStatus, LineProblem, LineShortfall, SlotId, Timestamp};
use crate::scope::Scope;
use crate::store::{BookingStore, Store};

use super::expected_events::EventsMatchTheModel;
use super::ops::{duration_of, owner, ModelOp};
use super::reference::{cancelling, confirming, pick_lifetime, renewing, Model, Seen};
use super::runner::{run_checked, run_property, NoEvents, StepCheck};
use super::strategies::{admin_op, after_opening, lifecycle_op, lifetime};
use super::Mismatch;

/// The most lines a booking may have.
const MAX_LINES: usize = 50;

impl Model {
    /// The expected result of placing a booking; `created` is the booking the store stored,
    /// if it stored one (the model cannot know ids in advance).
    pub(super) fn book(&mut self, op: &ModelOp, now: Timestamp, created: Option<&Booking>) -> Seen {
        let ModelOp::Book {
            lines,
            key,
            owner: owner_number,
            lifetime,
        } = op
        else {
            return Seen::Error("(not a booking)");
        };
        let mut asked: Vec<(SlotId, i32, usize)> = lines
            .iter()
            .map(|&(slot, quantity)| (self.slot_id(slot), quantity, slot))
            .collect();
        asked.sort_by_key(|line| line.0);
        let twice = asked.windows(2).any(|w| w[0].0 == w[1].0);
        if asked.is_empty()
            || asked.len() > MAX_LINES
            || asked.iter().any(|l| !(1..=1000).contains(&l.1))
            || twice
        {
            return Seen::Error("invalid_booking");
        }
        if let [(_, quantity, slot)] = asked[..] {
            let hold = ModelOp::Hold {
                slot,
                key: *key,
                quantity,
                owner: *owner_number,
                lifetime: *lifetime,
            };
            let new_id = created.map(|booking| booking.booking_id);
            return match self.hold(&hold, now, new_id) {
                Seen::Hold { hold, replayed } => Seen::Booking {
                    lines: vec![hold],
                    replayed,
                },
                other => other,
            };
        }
        let lifetime = match pick_lifetime(*lifetime) {
            Ok(lifetime) => lifetime,
            Err(refused) => return refused,
        };
        let owner = owner(*owner_number);
        // A waiting entry's key is taken, as by a hold.
        if self.waiting_key(*key).is_some() {
            return Seen::KeyReused(None);
        }
        if let Some(&existing) = self.keys.get(key) {
            let lines: Vec<_> = self
                .group(existing)
                .iter()
                .map(|&i| &self.holds[i])
                .collect();
            let same = lines.len() == asked.len()
                && lines
                    .iter()
                    .zip(&asked)
                    .all(|(h, a)| (h.slot_id, h.quantity) == (a.0, a.1));
            if same && lines[0].owner == owner {
                return Seen::Booking {
                    lines: lines.into_iter().map(|h| h.clone().at(now)).collect(),
                    replayed: true,
                };
            }
            return Seen::KeyReused((lines[0].owner == owner).then_some(lines[0].hold_id));
        }
        let short: Vec<LineShortfall> = asked
            .iter()
            .filter_map(|&(slot_id, quantity, _)| {
                let problem = match self.line_problem(slot_id, quantity, now) {
                    None | Some(LineProblem::SoldOut { .. }) => {
                        self.within_pools(slot_id, quantity, &asked, now)?
                    }
                    problem => problem?,
                };
                Some(LineShortfall {
                    slot_id,
                    quantity,
                    problem,
                })
            })
            .collect();
        if !short.is_empty() {
            return Seen::Lines(short);
        }
        let Some(created) = created else {
            return Seen::Error("(model expected a new booking here)");
        };
        let first = self.holds.len();
        let mut placed = Vec::new();
        for &(slot_id, quantity, _) in &asked {
            let Some(stored) = created.lines.iter().find(|h| h.slot_id == slot_id) else {
                return Seen::Error("(the store's booking misses a line)");
            };
            let Some(index) = self.slots.iter().position(|s| s.id == slot_id) else {
                return Seen::Error("(no such slot)");
            };
            if self.slots[index].remaining < quantity {
                let units = self.reclaim(slot_id, now);
                self.slots[index].remaining += units;
            }
            self.slots[index].remaining -= quantity;
            let mut hold = stored.clone();
            hold.status = HoldStatus::Held;
            hold.expires_at = now + lifetime;
            hold.confirmed_at = None;
            hold.cancelled_at = None;
            hold.quantity = quantity;
            hold.owner = owner.clone();
            hold.created_at = now;
            placed.push(hold);
        }
        let indexes: Vec<usize> = (first..first + placed.len()).collect();
        for &i in &indexes {
            self.lines.insert(i, indexes.clone());
        }
        self.keys.insert(*key, first);
        self.holds.extend(placed.iter().cloned());
        Seen::Booking {
            lines: placed,
            replayed: false,
        }
    }

    /// What is wrong with a line of `quantity` units of `slot_id` at `now`, if anything;
    /// expired holds count as free.
    fn line_problem(&self, slot_id: SlotId, quantity: i32, now: Timestamp) -> Option<LineProblem> {
        let Some(slot) = self.slots.iter().find(|s| s.id == slot_id) else {
            return Some(LineProblem::SlotNotFound);
        };
        if slot.removed_at.is_some() {
            return Some(LineProblem::SlotNotFound);
        }
        if slot.closed || slot.starts_at <= now {
            return Some(LineProblem::SlotClosed);
        }
        if quantity > slot.capacity {
            return Some(LineProblem::ExceedsCapacity {
                capacity: slot.capacity,
            });
        }
        // Nobody takes units past a waiting line (its slot's or a pool's).
        let free = match self.line_waits(slot_id, now) {
            true => 0,
            false => slot.remaining + self.held_units(slot_id, now).1,
        };
        (free < quantity).then(|| LineProblem::SoldOut {
            free: free.clamp(0, quantity - 1),
        })
    }

    /// The booking whose id is hold `index`'s, if it is one in `scope`: its lines' indexes.
    fn booking(&self, index: usize, scope: &Scope) -> Option<Vec<usize>> {
        let i = self.scoped(index, scope)?;
        let group = self.group(i);
        (group.first() == Some(&i)).then_some(group)
    }

    fn booking_seen(&self, group: &[usize], now: Timestamp) -> Seen {
        Seen::Booking {
            lines: group
                .iter()
                .map(|&i| self.holds[i].clone().at(now))
                .collect(),
            replayed: false,
        }
    }

    /// The expected result of confirming (`Some(true)`), cancelling (`Some(false)`) or
    /// renewing (`None`) a booking.
    pub(super) fn change_booking(
        &mut self,
        index: usize,
        scope: &Scope,
        confirm: Option<bool>,
        now: Timestamp,
    ) -> Seen {
        let Some(group) = self.booking(index, scope) else {
            return Seen::Error("hold_not_found");
        };
        let lead = group[0];
        let mut freed = Vec::new();
        let changed = match confirm {
            Some(true) => self.change_group(lead, now, confirming(now)),
            Some(false) => self.change_group(lead, now, cancelling(now, &mut freed)),
            None => match pick_lifetime(None) {
                Ok(lifetime) => self.change_group(lead, now, renewing(now, lifetime)),
                Err(refused) => return refused,
            },
        };
        let slots: Vec<SlotId> = freed.iter().map(|&(slot, _)| slot).collect();
        self.give_back(freed);
        for slot in slots {
            self.serve_line(slot, now);
        }
        match changed {
            Ok(()) => self.booking_seen(&group, now),
            Err(code) => Seen::Error(code),
        }
    }

    /// The expected result of reading a booking.
    pub(super) fn get_booking(&self, index: usize, scope: &Scope, now: Timestamp) -> Seen {
        match self.booking(index, scope) {
            Some(group) => self.booking_seen(&group, now),
            None => Seen::Error("hold_not_found"),
        }
    }
}

/// What the engine answered, as the model says it.
fn seen(result: Result<Booking, BookingError>, replayed: bool) -> Seen {
    match result {
        Ok(booking) => Seen::Booking {
            lines: booking.lines,
            replayed,
        },
        Err(BookingError::LinesUnavailable { lines }) => Seen::Lines(lines),
        Err(BookingError::IdempotencyKeyReused {
            existing_hold_id, ..
        }) => Seen::KeyReused(existing_hold_id),
        Err(error) => Seen::Error(error.code()),
    }
}

/// Runs the booking operations, against the engine and the model side by side, and hands
/// every other check to `inner` (the event log's, or none).
pub(super) struct BookingSteps<C>(pub(super) C);

#[async_trait::async_trait]
impl<S: Store + BookingStore, C: StepCheck<S>> StepCheck<S> for BookingSteps<C> {
    async fn extra_op(
        &mut self,
        engine: &BookingEngine<S>,
        model: &mut Model,
        op: &ModelOp,
        now: Timestamp,
    ) -> Option<(Seen, Seen)> {
        match op {
            ModelOp::Book {
                lines,
                key,
                owner: owner_number,
                lifetime,
            } => {
                let mut request = NewBooking::new(format!("key-{key}"));
                for &(slot, quantity) in lines {
                    request = request.line(model.slot_id(slot), quantity);
                }
                request.owner = owner(*owner_number);
                request.lifetime = duration_of(*lifetime);
                let (result, replayed) = match engine.book(request).await {
                    Ok(placed) => (Ok(placed.booking), placed.replayed),
                    Err(error) => (Err(error), false),
                };
                let created = result.as_ref().ok().filter(|_| !replayed);
                let expected = model.book(op, now, created);
                Some((expected, seen(result, replayed)))
            }
            &ModelOp::ChangeBooking {
                hold,
                scope,
                confirm,
            } => {
                let (id, scope) = (model.hold_id(hold), model.scope(scope, hold));
                let actual = match confirm {
                    Some(true) => engine.confirm_booking(&scope, id).await,
                    Some(false) => engine.cancel_booking(&scope, id).await,
                    None => engine.renew_booking(&scope, id, None).await,
                };
                let expected = model.change_booking(hold, &scope, confirm, now);
                Some((expected, seen(actual, false)))
            }
            &ModelOp::GetBooking { hold, scope } => {
                let (id, scope) = (model.hold_id(hold), model.scope(scope, hold));
                let actual = engine.get_booking(&scope, id).await;
                Some((model.get_booking(hold, &scope, now), seen(actual, false)))
            }
            _ => self.0.extra_op(engine, model, op, now).await,
        }
    }

    async fn after_step(
        &mut self,
        engine: &BookingEngine<S>,
        before: &Model,
        after: &Model,
    ) -> Result<(), Mismatch> {
        self.0.after_step(engine, before, after).await
    }
}

/// The generator for one booking operation: book 0 to 4 lines (slots may repeat, quantities be
/// out of bounds), confirm, cancel, renew or read a booking.
pub fn booking_op() -> impl Strategy<Value = ModelOp> {
    let quantity = prop_oneof![8 => Just(1i32), 3 => 2..=3i32, 1 => Just(0i32), 1 => Just(1001i32)];
    let line = (0..5usize, quantity);
    prop_oneof![
        6 => (proptest::collection::vec(line, 0..=4), 0..8u8, 0..3u8, lifetime())
            .prop_map(|(lines, key, owner, lifetime)| ModelOp::Book { lines, key, owner, lifetime }),
        3 => (0..12usize, 0..7u8, prop_oneof![Just(Some(true)), Just(Some(false)), Just(None)])
            .prop_map(|(hold, scope, confirm)| ModelOp::ChangeBooking { hold, scope, confirm }),
        1 => (0..12usize, 0..7u8).prop_map(|(hold, scope)| ModelOp::GetBooking { hold, scope }),
    ]
}

/// Runs `cases` random sequences of lifecycle, administration and booking operations (more
/// with `PROPTEST_CASES`), each against a fresh store from `factory`: every outcome, and the
/// store's slots and holds after every step, must equal the model's. Hold operations on a
/// booking's line act on the whole booking in the model too.
///
/// # Panics
///
/// When a sequence's outcomes or state differ from the model's.
pub fn check_bookings<S, F, Fut>(factory: F, cases: u32, max_len: usize)
where
    S: Store + BookingStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let step = prop_oneof![
        12 => lifecycle_op(),
        3 => admin_op(),
        8 => booking_op(),
    ];
    let sequences = after_opening(proptest::collection::vec(step, 1..=max_len));
    run_property(
        "booking model check",
        cases,
        2,
        &sequences,
        factory,
        |store, ops| async move { run_checked(store, &ops, &mut BookingSteps(NoEvents)).await },
    );
}

/// Runs `cases` random sequences like [`check_bookings`], with reclaims of expired holds among
/// the operations, and after every step compares the events the store appended with those
/// the model's change of state implies: one per line a booking's step changed, none for a
/// refusal.
///
/// # Panics
///
/// When a sequence's outcomes, state or events differ from the model's.
pub fn check_booking_events<S, F, Fut>(factory: F, cases: u32, max_len: usize)
where
    S: Store + BookingStore + EventStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let step = prop_oneof![
        12 => lifecycle_op(),
        3 => admin_op(),
        8 => booking_op(),
        2 => Just(ModelOp::ReclaimExpired),
    ];
    let sequences = after_opening(proptest::collection::vec(step, 1..=max_len));
    run_property(
        "booking event model check",
        cases,
        2,
        &sequences,
        factory,
        |store, ops| async move {
            let mut checks = BookingSteps(EventsMatchTheModel::new());
            run_checked(store, &ops, &mut checks).await
        },
    );
}
