//! Concurrent batches: operations started together, after which the invariant and every
//! acknowledged success must show in the store.

use std::collections::HashMap;
use std::future::Future;

use chrono::Duration;
use proptest::prelude::*;

use crate::conformance::kit::SlotTally;
use crate::conformance::{Fixture, HOLD_TTL};
use crate::engine::NewHold;
use crate::error::BookingError;
use crate::model::{AvailabilityQuery, HoldId, HoldStatus, NewSlot, OwnerId, SlotId};
use crate::scope::Scope;
use crate::store::Store;
use crate::Clock;

use super::ops::{owner, resource, ModelOp};
use super::runner::run_property;
use super::Mismatch;

/// One batch of a concurrent run: operations started together, then a clock step.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Operations run concurrently (only `Hold`, `Confirm`, `Cancel`, `Renew`,
    /// `Availability`, `SetCapacity` and `SetClosed`; calls on a hold act in its owner's
    /// scope).
    pub ops: Vec<ModelOp>,
    /// Microseconds the clock moves after the batch.
    pub advance: i64,
}

fn batch() -> impl Strategy<Value = Batch> {
    let ttl = HOLD_TTL.as_micros() as i64;
    let op = prop_oneof![
        5 => (0..3usize, 0..12u8, 1..=3i32, 0..3u8).prop_map(|(slot, key, quantity, owner)| ModelOp::Hold {
            slot, key, quantity, owner, lifetime: None,
        }),
        2 => (0..16usize).prop_map(|hold| ModelOp::Confirm { hold, scope: 4 }),
        2 => (0..16usize).prop_map(|hold| ModelOp::Cancel { hold, scope: 4 }),
        1 => (0..16usize).prop_map(|hold| ModelOp::Renew { hold, scope: 4, lifetime: None }),
        1 => (0..3u8).prop_map(|resource| ModelOp::Availability { resource }),
        1 => (0..3usize, super::strategies::capacity_change(1..=8i32))
            .prop_map(|(slot, change)| ModelOp::SetCapacity { slot, change }),
        1 => (0..3usize, any::<bool>()).prop_map(|(slot, closed)| ModelOp::SetClosed { slot, closed }),
    ];
    (
        proptest::collection::vec(op, 1..=16),
        prop_oneof![Just(0i64), Just(1_000_000), Just(ttl / 2), Just(ttl)],
    )
        .prop_map(|(ops, advance)| Batch { ops, advance })
}

/// What the successful calls on one hold imply about its final state.
#[derive(Debug, Default, Clone)]
struct Acknowledged {
    slot: usize,
    owner: Option<OwnerId>,
    confirmed: bool,
    cancelled: bool,
}

/// Runs batches concurrently against a fresh store; `Err` describes the first violation.
async fn run_batches<S: Store>(store: S, batches: &[Batch]) -> Result<(), Mismatch> {
    let Fixture { engine, clock } = Fixture::new(store);
    let mut slots = Vec::new();
    for capacity in [1, 3, 6] {
        let starts_at = clock.now() + Duration::hours(2);
        let slot = engine
            .create_slot(NewSlot::new(
                starts_at,
                starts_at + Duration::hours(1),
                capacity,
            ))
            .await
            .map_err(|e| Mismatch(format!("create_slot: {e}")))?;
        slots.push(slot.slot_id);
    }
    let mut holds: Vec<HoldId> = Vec::new();
    let mut acked: HashMap<HoldId, Acknowledged> = HashMap::new();
    for (number, batch) in batches.iter().enumerate() {
        let tasks: Vec<_> = batch
            .ops
            .iter()
            .map(|op| {
                let engine = engine.clone();
                let op = op.clone();
                let target_slot = match op {
                    ModelOp::Hold { slot, .. }
                    | ModelOp::SetCapacity { slot, .. }
                    | ModelOp::SetClosed { slot, .. } => slots[slot % slots.len()],
                    _ => SlotId(0),
                };
                // Calls on a hold act in its owner's scope.
                let target = match op {
                    ModelOp::Confirm { hold, .. }
                    | ModelOp::Cancel { hold, .. }
                    | ModelOp::Renew { hold, .. }
                        if !holds.is_empty() =>
                    {
                        let id = holds[hold % holds.len()];
                        let owner = acked.get(&id).and_then(|a| a.owner.clone());
                        Some((id, Scope::of(owner)))
                    }
                    _ => None,
                };
                tokio::spawn(async move {
                    match (op, target) {
                        (
                            ModelOp::Hold {
                                key,
                                quantity,
                                owner: owner_number,
                                ..
                            },
                            _,
                        ) => {
                            let mut request =
                                NewHold::new(target_slot, format!("key-{key}")).quantity(quantity);
                            if let Some(owner) = owner(owner_number) {
                                request = request.owner(owner);
                            }
                            engine
                                .place_hold(request)
                                .await
                                .map(|placed| Some((placed.hold, 'h')))
                        }
                        (ModelOp::Confirm { .. }, Some((id, scope))) => {
                            engine.confirm(&scope, id).await.map(|h| Some((h, 'c')))
                        }
                        (ModelOp::Cancel { .. }, Some((id, scope))) => {
                            engine.cancel(&scope, id).await.map(|h| Some((h, 'x')))
                        }
                        (ModelOp::Renew { .. }, Some((id, scope))) => {
                            engine.renew(&scope, id, None).await.map(|h| Some((h, 'r')))
                        }
                        (ModelOp::Availability { resource: number }, _) => {
                            let mut query = AvailabilityQuery::all();
                            query.resource = resource(number);
                            engine.availability(query).await.map(|_| None)
                        }
                        // A capacity change or a close races the holds; the invariant after
                        // the batch, with the slot's capacity as stored then, judges them.
                        (ModelOp::SetCapacity { change, .. }, _) => engine
                            .change_capacity(target_slot, change)
                            .await
                            .map(|_| None),
                        (ModelOp::SetClosed { closed: true, .. }, _) => {
                            engine.close_sales(target_slot).await.map(|_| None)
                        }
                        (ModelOp::SetClosed { closed: false, .. }, _) => {
                            engine.reopen_sales(target_slot).await.map(|_| None)
                        }
                        _ => Ok(None),
                    }
                })
            })
            .collect();
        for (task, op) in tasks.into_iter().zip(&batch.ops) {
            let outcome = task
                .await
                .map_err(|e| Mismatch(format!("batch {number}: task failed: {e}")))?;
            match outcome {
                Ok(Some((hold, kind))) => {
                    let slot = match op {
                        ModelOp::Hold { slot, .. } => slot % slots.len(),
                        _ => acked.get(&hold.hold_id).map_or(0, |a| a.slot),
                    };
                    let entry = acked.entry(hold.hold_id).or_insert_with(|| {
                        holds.push(hold.hold_id);
                        Acknowledged {
                            slot,
                            owner: hold.owner.clone(),
                            ..Acknowledged::default()
                        }
                    });
                    match kind {
                        'c' => entry.confirmed = true,
                        'x' => entry.cancelled = true,
                        _ => {}
                    }
                }
                Ok(None) => {}
                Err(BookingError::Store(e)) => {
                    return Err(Mismatch(format!("batch {number} {op:?}: store error {e}")))
                }
                Err(BookingError::HoldNotFound { hold_id }) => {
                    return Err(Mismatch(format!(
                        "batch {number} {op:?}: hold {hold_id} not found in its owner's scope"
                    )))
                }
                Err(_) => {}
            }
        }
        clock.advance(Duration::microseconds(batch.advance));
        let now = clock.now();
        // Every success is reflected in the state, and the invariant holds on every slot.
        let mut per_slot = vec![Vec::new(); slots.len()];
        for (&id, ack) in &acked {
            let stored = engine
                .store()
                .get_hold(id, &Scope::BackOffice, now)
                .await
                .map_err(|e| Mismatch(format!("get_hold: {e}")))?
                .outcome
                .ok_or_else(|| Mismatch(format!("acknowledged hold {id} is missing")))?;
            let expected_ok = if ack.cancelled {
                stored.status == HoldStatus::Cancelled
            } else if ack.confirmed {
                stored.status == HoldStatus::Confirmed
            } else {
                matches!(stored.status, HoldStatus::Held | HoldStatus::Expired)
            };
            ensure!(
                expected_ok && stored.owner == ack.owner,
                "after batch {number}: hold {id} is {stored:?}, acknowledged {ack:?}"
            );
            per_slot[ack.slot].push(stored);
        }
        for (i, &slot_id) in slots.iter().enumerate() {
            let slot = engine
                .store()
                .get_slot(slot_id)
                .await
                .map_err(|e| Mismatch(format!("get_slot: {e}")))?
                .ok_or_else(|| Mismatch(format!("slot {slot_id} is missing")))?;
            SlotTally::of(&slot, &per_slot[i], now)
                .check()
                .map_err(|broken| Mismatch(format!("after batch {number}: {slot:?}: {broken}")))?;
        }
    }
    Ok(())
}

/// Runs `cases` random sequences of concurrent batches (more with `PROPTEST_CASES`), each on a
/// fresh store from `factory`, on a multi-threaded runtime. Outcomes need not match any serial
/// order; the invariant and "every success shows in the final state" must hold after each batch.
///
/// # Panics
///
/// When a batch leaves the store violating either.
pub fn check_concurrent<S, F, Fut>(factory: F, cases: u32)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let batches = proptest::collection::vec(batch(), 1..=6);
    run_property(
        "concurrent check",
        cases,
        4,
        &batches,
        factory,
        |store, batches| async move { run_batches(store, &batches).await },
    );
}
