//! The engine fixture every case runs on: an engine with a manual clock and no availability
//! caching, and the helpers the cases read the store through.

use std::time::Duration;

use chrono::{TimeZone, Utc};

use super::kit::SlotTally;
use super::{HOLD_TTL, MAX_HOLD_LIFE, MAX_REQUESTED_TTL, MIN_REQUESTED_TTL};
use crate::clock::ManualClock;
use crate::engine::{BookingEngine, NewHold};
use crate::model::{
    AvailabilityQuery, Hold, HoldId, HoldStatus, NewSlot, ResourceId, SlotId, Timestamp,
};
use crate::model::{PageRequest, SlotSummary};
use crate::scope::Scope;
use crate::store::{HoldStore, SlotAdmin};

/// An engine on `store` that caches availability for an hour, on a manual clock at
/// [`epoch`], and the start of a slot an hour later: for cases about invalidation (R3).
pub(super) fn cached_engine<S: HoldStore>(store: S) -> (BookingEngine<S>, Timestamp) {
    let engine = BookingEngine::builder(store)
        .cache_period(Duration::from_secs(3600))
        .clock(ManualClock::new(epoch()))
        .build();
    (engine, epoch() + chrono::Duration::hours(1))
}

/// The first instant of every case's manual clock.
pub fn epoch() -> Timestamp {
    Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0)
        .single()
        .expect("a valid date")
}

/// An engine with no availability caching and a manual clock, plus helpers.
pub struct Fixture<S> {
    /// The engine under test.
    pub engine: BookingEngine<S>,
    /// Its clock.
    pub clock: ManualClock,
}

impl<S: HoldStore> Fixture<S> {
    /// Wraps `store` in an engine whose availability is read from the store every time.
    pub fn new(store: S) -> Self {
        let clock = ManualClock::new(epoch());
        let engine = BookingEngine::builder(store)
            .cache_period(Duration::ZERO)
            .hold_ttl(HOLD_TTL)
            .requested_ttl_bounds(MIN_REQUESTED_TTL, MAX_REQUESTED_TTL)
            .max_hold_life(MAX_HOLD_LIFE)
            .clock(clock.clone())
            .build();
        Fixture { engine, clock }
    }

    /// The clock's current time.
    pub fn now(&self) -> Timestamp {
        crate::Clock::now(&self.clock)
    }

    /// Moves the clock.
    pub fn advance(&self, by: chrono::Duration) {
        self.clock.advance(by);
    }

    /// Creates a slot starting `starts_in` from now, one hour long.
    pub async fn slot(&self, capacity: i32, starts_in: chrono::Duration) -> SlotId {
        let starts_at = self.now() + starts_in;
        self.engine
            .create_slot(NewSlot::new(
                starts_at,
                starts_at + chrono::Duration::hours(1),
                capacity,
            ))
            .await
            .expect("create_slot")
            .slot_id
    }

    /// The slot's stored `remaining`.
    pub async fn remaining(&self, slot_id: SlotId) -> i32 {
        self.stored_slot(slot_id).await.stored_remaining
    }

    /// The slot's availability entry `remaining` (units a new hold could take now).
    pub async fn available(&self, slot_id: SlotId) -> Option<i32> {
        self.engine
            .availability(crate::AvailabilityQuery::all())
            .await
            .expect("availability")
            .entry(slot_id)
            .map(|entry| entry.remaining)
    }

    /// Checks the capacity invariant of `slot_id`, given every hold ever placed on it.
    pub async fn assert_invariant(&self, slot_id: SlotId, holds: &[HoldId]) {
        let slot = self.stored_slot(slot_id).await;
        let now = self.now();
        let mut stored = Vec::with_capacity(holds.len());
        for &hold_id in holds {
            let hold = self.stored_hold(hold_id).await.expect("hold exists");
            assert_eq!(hold.slot_id, slot_id, "hold {hold_id} is on another slot");
            stored.push(hold);
        }
        SlotTally::of(&slot, &stored, now).assert();
    }
}

impl<S: HoldStore> Fixture<S> {
    /// Creates a slot of `resource` starting `starts_in` from now, one hour long.
    pub async fn resource_slot(
        &self,
        capacity: i32,
        starts_in: chrono::Duration,
        resource: &ResourceId,
    ) -> SlotId {
        let starts_at = self.now() + starts_in;
        self.engine
            .create_slot(
                NewSlot::new(starts_at, starts_at + chrono::Duration::hours(1), capacity)
                    .resource(resource.clone()),
            )
            .await
            .expect("create_slot")
            .slot_id
    }

    /// The slot as stored.
    pub async fn stored_slot(&self, slot_id: SlotId) -> crate::model::Slot {
        self.engine
            .store()
            .get_slot(slot_id)
            .await
            .expect("get_slot")
            .expect("slot exists")
    }

    /// The hold as stored now, seen from outside any transaction, its status not resolved
    /// against the clock (`None`: no such hold).
    pub(crate) async fn stored_hold(&self, hold_id: HoldId) -> Option<Hold> {
        self.engine
            .store()
            .get_hold(hold_id, &Scope::BackOffice, self.now())
            .await
            .expect("get_hold")
            .outcome
    }

    /// The hold's status as stored (not resolved against the clock).
    pub(crate) async fn stored_status(&self, hold_id: HoldId) -> Option<HoldStatus> {
        self.stored_hold(hold_id).await.map(|h| h.status)
    }

    /// An anonymous one-unit hold on `slot` with `key` that lives one minute only.
    pub(crate) async fn minute_hold(&self, slot: SlotId, key: &str) -> Hold {
        let request = NewHold::new(slot, key).lifetime(Duration::from_secs(60));
        self.engine.place_hold(request).await.unwrap().hold
    }

    /// An anonymous one-unit hold on `slot` for each of `keys`: their ids, in order.
    pub(crate) async fn hold_each(
        &self,
        slot: SlotId,
        keys: impl IntoIterator<Item = String>,
    ) -> Vec<HoldId> {
        let mut ids = Vec::new();
        for key in keys {
            ids.push(self.engine.hold(slot, &key).await.unwrap().hold.hold_id);
        }
        ids
    }

    /// The ids of the slots in the availability listing `query` gives.
    pub async fn listed(&self, query: AvailabilityQuery) -> Vec<SlotId> {
        self.engine
            .availability(query)
            .await
            .expect("availability")
            .iter()
            .map(|e| e.slot_id)
            .collect()
    }
}

impl<S: HoldStore + SlotAdmin> Fixture<S> {
    /// Every page of the operator's listing under `filter`, `limit` at a time.
    pub async fn list_all(&self, filter: &AvailabilityQuery, limit: u32) -> Vec<SlotSummary> {
        let mut all = Vec::new();
        let mut page = PageRequest::first(limit);
        loop {
            let listed = self
                .engine
                .list_slots(filter, page)
                .await
                .expect("list_slots");
            assert!(
                listed.items.len() <= limit as usize,
                "a page over its limit"
            );
            all.extend(listed.items);
            match listed.next_after {
                Some(after) => page = PageRequest::after(after, limit),
                None => return all,
            }
        }
    }
}
