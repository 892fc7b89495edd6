//! The sequential runner: each operation against the store and the model, the store's state
//! compared with the model's after every step, and the property harness every check runs on.

use std::future::Future;

use chrono::Duration;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::candidates::NewAnyHold;
use crate::conformance::kit::SlotTally;
use crate::conformance::Fixture;
use crate::engine::BookingEngine;
use crate::error::BookingError;
use crate::model::SlotCursor;
use crate::model::{AvailabilityQuery, HoldId, HoldPage, HoldStatus, PageRequest, Timestamp};
use crate::scope::Scope;
use crate::store::Store;
use crate::Clock;

use super::ops::{owner, resource, ModelOp};
use super::reference::{Model, Seen};
use super::strategies::sequence;
use super::writes::{seen_hold, write_step};
use super::Mismatch;

/// Walks every page of the operator's listing `limit` at a time, checking each page's limit
/// and cursor as it comes.
async fn walk_slots<S: Store>(
    engine: &BookingEngine<S>,
    filter: &AvailabilityQuery,
    limit: u32,
) -> Seen {
    let mut all = Vec::new();
    let mut page = PageRequest::first(limit);
    loop {
        let listed = match engine.list_slots(filter, page).await {
            Ok(listed) => listed,
            Err(error) => return Seen::Error(error.code()),
        };
        let full = listed.items.len() == limit as usize;
        let cursor = listed.items.last().filter(|_| full).map(|s| SlotCursor {
            starts_at: s.starts_at,
            slot_id: s.slot_id,
        });
        if listed.items.len() > limit as usize || listed.next_after != cursor {
            return Seen::Error("(a slot page broke its limit or cursor)");
        }
        all.push(listed.items);
        match listed.next_after {
            Some(after) if all.len() <= 1_000 => page = PageRequest::after(after, limit),
            _ => return Seen::SlotPages(all),
        }
    }
}

/// Walks every page of a query `limit` at a time; a page is checked against the limit and
/// its cursor as it comes.
pub(super) async fn walk<F, Fut>(limit: u32, mut read: F) -> Seen
where
    F: FnMut(PageRequest) -> Fut,
    Fut: Future<Output = Result<HoldPage, BookingError>>,
{
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = match read(PageRequest { after, limit }).await {
            Ok(page) => page,
            Err(error) => return Seen::Error(error.code()),
        };
        let full = page.items.len() == limit as usize;
        if page.items.len() > limit as usize
            || page.next_after != page.items.last().filter(|_| full).map(|h| h.hold_id)
        {
            return Seen::Error("(a page broke its limit or cursor)");
        }
        after = page.next_after;
        all.push(page.items);
        if after.is_none() || all.len() > 1_000 {
            return Seen::Pages(all);
        }
    }
}

/// Runs one sequence against a fresh store; `Err` describes the first difference.
async fn run_sequence<S: Store>(store: S, ops: &[ModelOp]) -> Result<(), Mismatch> {
    run_checked(store, ops, &mut NoEvents).await
}

/// What a sequence run checks beyond outcomes and state: the event log of an
/// [`EventStore`], or nothing.
#[async_trait::async_trait]
pub(super) trait StepCheck<S: Store>: Send {
    /// Runs an operation only this kind of store has (`None`: not one of those).
    async fn extra_op(
        &mut self,
        engine: &BookingEngine<S>,
        model: &mut Model,
        op: &ModelOp,
        now: Timestamp,
    ) -> Option<(Seen, Seen)>;

    /// Checks what the step that turned `before` into `after` left in the store.
    async fn after_step(
        &mut self,
        engine: &BookingEngine<S>,
        before: &Model,
        after: &Model,
    ) -> Result<(), Mismatch>;
}

/// The plain run: no event log.
pub(super) struct NoEvents;

#[async_trait::async_trait]
impl<S: Store> StepCheck<S> for NoEvents {
    async fn extra_op(
        &mut self,
        _: &BookingEngine<S>,
        _: &mut Model,
        _: &ModelOp,
        _: Timestamp,
    ) -> Option<(Seen, Seen)> {
        None
    }

    async fn after_step(
        &mut self,
        _: &BookingEngine<S>,
        _: &Model,
        _: &Model,
    ) -> Result<(), Mismatch> {
        Ok(())
    }
}

pub(super) async fn run_checked<S: Store, C: StepCheck<S>>(
    store: S,
    ops: &[ModelOp],
    checks: &mut C,
) -> Result<(), Mismatch> {
    let Fixture { engine, clock } = Fixture::new(store);
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let now = clock.now();
        let before = model.clone();
        let (expected, actual) = match *op {
            ModelOp::ReclaimExpired
            | ModelOp::Book { .. }
            | ModelOp::ChangeBooking { .. }
            | ModelOp::GetBooking { .. }
            | ModelOp::CreatePool { .. }
            | ModelOp::PoolMember { .. }
            | ModelOp::SetPoolCapacity { .. }
            | ModelOp::GetPool { .. }
            | ModelOp::Lease { .. }
            | ModelOp::Release { .. }
            | ModelOp::AcknowledgeLeased { .. }
            | ModelOp::Join { .. }
            | ModelOp::Leave { .. }
            | ModelOp::EntryPlace { .. } => {
                match checks.extra_op(&engine, &mut model, op, now).await {
                    Some(seen) => seen,
                    None => continue,
                }
            }
            ModelOp::CreateSlot { .. }
            | ModelOp::SetCapacity { .. }
            | ModelOp::SetClosed { .. }
            | ModelOp::Remove { .. }
            | ModelOp::Hold { .. }
            | ModelOp::Confirm { .. }
            | ModelOp::Cancel { .. }
            | ModelOp::Renew { .. }
            | ModelOp::Get { .. } => {
                let mut writer = &engine;
                write_step(&mut writer, &mut model, op, now).await
            }
            ModelOp::HoldAny {
                ref slots,
                key,
                quantity,
                owner: owner_number,
            } => {
                let candidates = slots.iter().map(|&slot| model.slot_id(slot)).collect();
                let mut request =
                    NewAnyHold::new(candidates, format!("key-{key}")).quantity(quantity);
                if let Some(owner) = owner(owner_number) {
                    request = request.owner(owner);
                }
                let actual = seen_hold(engine.hold_any(request).await);
                let new_id = match &actual {
                    Seen::Hold {
                        hold,
                        replayed: false,
                    } => Some(hold.hold_id),
                    _ => None,
                };
                (model.hold_any(op, now, new_id), actual)
            }
            ModelOp::ListSlots {
                limit,
                resource: resource_number,
            } => {
                let only = resource(resource_number);
                let mut filter = AvailabilityQuery::all();
                filter.resource = only.clone();
                let actual = walk_slots(&engine, &filter, limit).await;
                (model.list_slots(limit, only.as_ref(), now), actual)
            }
            ModelOp::OwnerHolds {
                owner: owner_number,
                limit,
            } => {
                let Some(who) = owner(owner_number) else {
                    continue;
                };
                let actual = walk(limit, |page| engine.owner_holds(&who, page)).await;
                let expected = model.pages(|h| h.owner.as_ref() == Some(&who), limit, now);
                (expected, actual)
            }
            ModelOp::Roster { slot, limit } => {
                let slot_id = model.slot_id(slot);
                let actual = walk(limit, |page| engine.slot_holds(slot_id, page)).await;
                (model.pages(|h| h.slot_id == slot_id, limit, now), actual)
            }
            ModelOp::Availability {
                resource: resource_number,
            } => {
                let only = resource(resource_number);
                let mut query = AvailabilityQuery::all();
                query.resource = only.clone();
                let actual = match engine.availability(query).await {
                    Ok(listing) => {
                        Seen::Listing(listing.iter().map(|e| (e.slot_id, e.remaining)).collect())
                    }
                    Err(error) => Seen::Error(error.code()),
                };
                (model.availability(now, only.as_ref()), actual)
            }
            ModelOp::Advance { micros } => {
                clock.advance(Duration::microseconds(micros));
                (Seen::Done, Seen::Done)
            }
            ModelOp::ToExpiry { hold, offset } => {
                if let Some(i) = model.hold_index(hold) {
                    let target = model.holds[i].expires_at + Duration::microseconds(offset);
                    if target > now {
                        clock.set(target);
                    }
                }
                (Seen::Done, Seen::Done)
            }
        };
        // Once pools exist, a slot's stored `remaining` depends on which expired holds a store
        // gave back (they were free either way): a changed slot is compared without it.
        let (expected, actual) = match model.pools.is_empty() {
            true => (expected, actual),
            false => (expected.into_read(), actual.into_read()),
        };
        ensure!(
            expected == actual,
            "step {step} {op:?}: model says {expected:?}, store gave {actual:?}"
        );
        // Once pools exist, a store may give back expired holds of a pool's slots its own way
        // (they were free either way): the pool steps compare the state as it reads instead.
        if model.pools.is_empty() {
            check_state(&engine, &model, clock.now())
                .await
                .map_err(|Mismatch(m)| Mismatch(format!("after step {step} {op:?}: {m}")))?;
        }
        checks
            .after_step(&engine, &before, &model)
            .await
            .map_err(|Mismatch(m)| Mismatch(format!("events of step {step} {op:?}: {m}")))?;
    }
    Ok(())
}

/// The store's rows equal the model's, and the invariant holds.
pub(super) async fn check_state<S: Store>(
    engine: &BookingEngine<S>,
    model: &Model,
    now: Timestamp,
) -> Result<(), Mismatch> {
    let store = engine.store();
    let mut seen_keys = std::collections::HashSet::new();
    for slot in &model.slots {
        let stored = store
            .get_slot(slot.id)
            .await
            .map_err(|e| Mismatch(format!("get_slot: {e}")))?;
        let Some(stored) = stored else {
            return Err(Mismatch(format!("slot {} is missing", slot.id)));
        };
        ensure!(
            stored == slot.as_slot(),
            "slot {} is {stored:?}, model has {slot:?}",
            slot.id
        );
        let mut holds = Vec::new();
        for hold in model.holds.iter().filter(|h| h.slot_id == slot.id) {
            let stored = store
                .get_hold(hold.hold_id, &Scope::BackOffice, now)
                .await
                .map_err(|e| Mismatch(format!("get_hold: {e}")))?
                .outcome;
            ensure!(
                stored.as_ref() == Some(hold),
                "hold {} is {stored:?}, model has {hold:?}",
                hold.hold_id
            );
            ensure!(
                seen_keys.insert(hold.hold_id),
                "hold {} listed twice",
                hold.hold_id
            );
            holds.push(hold.clone());
        }
        SlotTally::of(&stored, &holds, now)
            .check()
            .map_err(|broken| Mismatch(format!("slot {}: {broken}", slot.id)))?;
    }
    Ok(())
}

/// How long a failing case is shrunk, in milliseconds.
const SHRINK_TIME_MS: u32 = 120_000;

/// The case count (`PROPTEST_CASES` wins over `cases`), a runtime with `workers` threads and a
/// test runner that keeps no failure files.
fn harness(cases: u32, workers: usize) -> (u32, tokio::runtime::Runtime, TestRunner) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("conformance: cannot build a tokio runtime");
    let runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        // A failing case is shrunk for at most this long, then reported as shrunk so far: each
        // attempt runs on a fresh store, which takes seconds on a cluster (its DDL is
        // replicated), so unbounded shrinking of a race found there outlasted CI.
        max_shrink_time: SHRINK_TIME_MS,
        ..Config::default()
    });
    (cases, runtime, runner)
}

/// Runs the sequences `pinned` (cases a model once found failing on some store, kept so that
/// every store meets them on every run), each checked by `run` on a fresh store from
/// `factory`, on a runtime of `workers` threads under the case timeout; panics with the first
/// that fails.
pub(super) fn run_pinned<S, F, Fut, V, R, RFut>(
    name: &str,
    workers: usize,
    pinned: Vec<V>,
    factory: &F,
    run: &R,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    V: std::fmt::Debug + Clone,
    R: Fn(S, V) -> RFut,
    RFut: Future<Output = Result<(), Mismatch>>,
{
    let (_, runtime, _) = harness(0, workers);
    for (number, value) in pinned.into_iter().enumerate() {
        let shown = value.clone();
        let checked = runtime.block_on(async {
            let case = async { run(factory().await, value).await };
            tokio::time::timeout(crate::conformance::CASE_TIMEOUT, case).await
        });
        match checked {
            Ok(Ok(())) => {}
            Ok(Err(Mismatch(m))) => {
                panic!("{name} failed on pinned sequence {number}: {m}\nsequence: {shown:#?}")
            }
            Err(_) => panic!("{name}: pinned sequence {number} timed out\nsequence: {shown:#?}"),
        }
    }
}

/// Runs the property `name`: `cases` values of `strategy` (more with `PROPTEST_CASES`), each
/// checked by `run` on a fresh store from `factory`, on a runtime of `workers` threads under
/// the case timeout; panics with the shrunk failing value.
pub(super) fn run_property<S, F, Fut, St, R, RFut>(
    name: &str,
    cases: u32,
    workers: usize,
    strategy: &St,
    factory: F,
    run: R,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
    St: Strategy,
    R: Fn(S, St::Value) -> RFut,
    RFut: Future<Output = Result<(), Mismatch>>,
{
    let (cases, runtime, mut runner) = harness(cases, workers);
    let result = runner.run(strategy, |value| {
        runtime.block_on(async {
            let case = async { run(factory().await, value).await };
            tokio::time::timeout(crate::conformance::CASE_TIMEOUT, case)
                .await
                .map_err(|_| TestCaseError::fail(format!("{name}: a case timed out")))?
                .map_err(|Mismatch(m)| TestCaseError::fail(m))
        })
    });
    eprintln!("{name}: {cases} cases");
    if let Err(error) = result {
        panic!("{name} failed: {error}");
    }
}

/// Runs `cases` random sequences of up to `max_len` operations (more with `PROPTEST_CASES`),
/// each against a fresh store from `factory`, and panics with the shrunk failing sequence.
///
/// # Panics
///
/// When a sequence's outcomes or state differ from the model's.
pub fn check<S, F, Fut>(factory: F, cases: u32, max_len: usize)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    run_property(
        "model check",
        cases,
        2,
        &sequence(max_len),
        factory,
        |store, ops| async move { run_sequence(store, &ops).await },
    );
}

/// A reclaim of every expired held hold through `engine`, and the model's: each slot's
/// expired holds given back, then every line served (as the store's reclaim does in its
/// step). The expected and the actual reclaimed holds, by id.
pub(super) async fn reclaim_step<S: Store + crate::store::EventStore>(
    engine: &BookingEngine<S>,
    model: &mut Model,
    now: Timestamp,
) -> (Seen, Seen) {
    let mut expected: Vec<HoldId> = model
        .holds
        .iter()
        .filter(|h| h.status == HoldStatus::Held && h.expires_at <= now)
        .map(|h| h.hold_id)
        .collect();
    expected.sort();
    for i in 0..model.slots.len() {
        let units = model.reclaim(model.slots[i].id, now);
        model.slots[i].remaining += units;
    }
    model.serve_lines(now);
    let actual = match engine.reclaim_expired(crate::events::MAX_BATCH).await {
        Ok(holds) => {
            let mut ids: Vec<HoldId> = holds.iter().map(|h| h.hold_id).collect();
            ids.sort();
            Seen::Reclaimed(ids)
        }
        Err(error) => Seen::Error(error.code()),
    };
    (Seen::Reclaimed(expected), actual)
}
