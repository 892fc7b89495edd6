//! An in-memory store: the reference implementation, for tests, prototypes and
//! single-process deployments that can afford to lose everything on restart.
//!
//! Each slot and its holds sit behind a mutex of their own, so holds on different slots run in
//! parallel. The unique constraint on idempotency keys is a sharded map: inserting into it
//! under its shard lock is what decides "created" versus "replayed", the way a unique index
//! does in SQL. Locks are always taken in the order key shard → slot table → slot → hold index
//! shard → owner index → event log, so no two operations can deadlock.
//!
//! Each change appends its [`Event`]s while it still holds the lock of the slot it changed, so
//! an event is in the log exactly when its change is visible, and a slot's events are in the
//! order of its changes.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::model::{
    AvailabilityEntry, AvailabilityQuery, ConsumerId, Event, EventKind, EventPosition, Hold,
    HoldId, HoldStatus, IdempotencyKey, LeaseHolder, NewEvent, NewSlot, OwnerId, PageRequest,
    PoolId, Purged, Slot, SlotCursor, SlotId, SlotUsage, Timestamp,
};
use crate::scope::Scope;
use crate::store::{
    Decided, EventStore, HoldOutcome, HoldQueries, HoldRequest, HoldStore, RenewRequest, SlotAdmin,
    SlotChange, SlotLimits, StoreError, Transition,
};

mod admin;
mod bookings;
mod events;
mod holds;
mod pool_lines;
mod pools;
mod waitlists;

use pools::PoolTable;

const SHARDS: usize = 16;

/// A booking's line holds and their slots, by slot id ascending.
type Lines = Arc<[(HoldId, SlotId)]>;

/// A [`Store`](crate::Store) kept in process memory. Cheap to create; nothing survives a restart.
///
/// ```
/// use slot_booking::{memory::MemoryStore, BookingEngine};
///
/// let engine = BookingEngine::new(MemoryStore::new());
/// # let _ = engine;
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    slots: RwLock<SlotTable>,
    /// The unique constraint on `idempotency_key`: key → (hold, its slot).
    keys: [Mutex<HashMap<IdempotencyKey, (HoldId, SlotId)>>; SHARDS],
    /// Which slot each hold belongs to, sharded by hold id.
    hold_slots: [Mutex<HashMap<HoldId, SlotId>>; SHARDS],
    /// The lines of every booking of several lines, by each line's hold id: the booking's
    /// line holds and their slots, by slot id (the first is the booking's id). A leaf lock:
    /// nothing else is taken while it is held.
    bookings: Mutex<HashMap<HoldId, Lines>>,
    /// Every pool, locked after the slots an operation holds (see [`pools`]).
    pools: Mutex<PoolTable>,
    /// Owned holds by owner, then id: the twin of the SQL index on `(owner, id)`.
    owners: Mutex<BTreeSet<(OwnerId, HoldId)>>,
    last_hold_id: AtomicI64,
    hasher: RandomState,
    /// The event log and its consumers' cursors.
    log: Mutex<EventLog>,
}

#[derive(Debug, Default)]
struct EventLog {
    /// Events not purged, in ascending position.
    events: VecDeque<Event>,
    last_sequence: i64,
    consumers: HashMap<ConsumerId, Cursor>,
}

/// A consumer's acknowledged position and its lease: the holder and when the lease ends.
#[derive(Debug, Default)]
struct Cursor {
    position: EventPosition,
    lease: Option<(LeaseHolder, Timestamp)>,
}

impl Cursor {
    fn held_by(&self, holder: &LeaseHolder) -> bool {
        self.lease.as_ref().is_some_and(|(held, _)| held == holder)
    }
}

impl EventLog {
    fn append(&mut self, event: NewEvent) {
        self.last_sequence += 1;
        let position = EventPosition::new(0, self.last_sequence);
        // The booking of a hold event is read from the store's bookings when it is read
        // ([`MemoryStore::with_bookings`]), as the SQL stores read it from the holds.
        self.events.push_back(event.at_position(position, None));
    }

    /// Up to `limit` events after `after`, oldest first.
    fn read_after(&self, after: EventPosition, limit: u32) -> Vec<Event> {
        let first = self.events.partition_point(|event| event.position <= after);
        self.events
            .range(first..)
            .take(limit as usize)
            .cloned()
            .collect()
    }
}

#[derive(Debug, Default)]
struct SlotTable {
    by_id: HashMap<SlotId, Arc<Mutex<SlotRow>>>,
    /// The slots in availability order.
    by_start: BTreeSet<(Timestamp, SlotId)>,
    last_id: i64,
}

#[derive(Debug)]
struct SlotRow {
    slot: Slot,
    /// The slot's holds by id: the roster, in keyset order.
    holds: BTreeMap<HoldId, Hold>,
    /// Holds stored as held, by expiry: the in-memory twin of the SQL partial index.
    held_by_expiry: BTreeSet<(Timestamp, HoldId)>,
    /// Each hold's idempotency key, to free it when the hold is purged.
    keys: HashMap<HoldId, IdempotencyKey>,
    /// The pools the slot draws from, by id.
    pools: Vec<PoolId>,
    /// The slot's waitlist, in line order (see [`waitlists`]).
    waiting: waitlists::Line,
}

impl SlotRow {
    fn expired_held(&self, now: Timestamp) -> impl Iterator<Item = &(Timestamp, HoldId)> {
        self.held_by_expiry.range(..=(now, HoldId(i64::MAX)))
    }

    /// Units of held holds with `expires_at <= now`: free again, though not yet reclaimed.
    fn expired_units(&self, now: Timestamp) -> i32 {
        self.expired_held(now)
            .filter_map(|(_, id)| self.holds.get(id))
            .map(|hold| hold.quantity)
            .sum()
    }

    /// The slot with its held units split at `now` into active and expired.
    fn usage(&self, now: Timestamp) -> SlotUsage {
        let expired = self.expired_units(now);
        let all_held: i32 = self
            .held_by_expiry
            .iter()
            .filter_map(|(_, id)| self.holds.get(id))
            .map(|hold| hold.quantity)
            .sum();
        SlotUsage {
            slot: self.slot.clone(),
            held: all_held - expired,
            expired,
        }
    }

    /// Applies `change` (an administrative change of the slot row) if it fits as stored, or
    /// after reclaiming expired holds when only that makes it fit; otherwise changes nothing.
    /// `fits` says whether the change fits with this many extra free units.
    fn change_taking_free_units(
        &mut self,
        now: Timestamp,
        log: &Mutex<EventLog>,
        pools: &Mutex<PoolTable>,
        fits: impl Fn(&Slot, i32) -> bool,
        change: impl FnOnce(&mut Slot) -> EventKind,
    ) -> SlotChange {
        if self.slot.removed_at.is_some() {
            return SlotChange::NotFound;
        }
        if !fits(&self.slot, 0) {
            if !fits(&self.slot, self.expired_units(now)) {
                return SlotChange::InUse(self.usage(now));
            }
            self.reclaim(now, usize::MAX, log, pools);
        }
        let before = self.slot.clone();
        let kind = change(&mut self.slot);
        if self.slot != before {
            self.log_slot(kind, now, log);
        }
        SlotChange::Applied(self.slot.clone())
    }

    /// Marks up to `limit` held holds with `expires_at <= now` as expired, gives their units
    /// back to the slot and its pools and logs one `hold_expired` event each; returns them.
    fn reclaim(
        &mut self,
        now: Timestamp,
        limit: usize,
        log: &Mutex<EventLog>,
        pools: &Mutex<PoolTable>,
    ) -> Vec<Hold> {
        let expired: Vec<(Timestamp, HoldId)> =
            self.expired_held(now).take(limit).copied().collect();
        let mut reclaimed = Vec::with_capacity(expired.len());
        for entry in expired {
            self.held_by_expiry.remove(&entry);
            if let Some(hold) = self.holds.get_mut(&entry.1) {
                hold.status = HoldStatus::Expired;
                self.slot.stored_remaining += hold.quantity;
                reclaimed.push(hold.clone());
            }
        }
        if !reclaimed.is_empty() {
            let units = reclaimed.iter().map(|hold| hold.quantity).sum();
            lock(pools).give_back(&self.pools, units);
            let mut log = lock(log);
            for hold in &reclaimed {
                log.append(NewEvent::of_hold(EventKind::HoldExpired, hold, now));
            }
        }
        reclaimed
    }

    /// Logs `kind` about this slot as it is now.
    fn log_slot(&self, kind: EventKind, now: Timestamp, log: &Mutex<EventLog>) {
        let event = NewEvent::of_slot(kind, self.slot.slot_id, self.slot.capacity, now);
        lock(log).append(event);
    }

    fn limits(&self) -> SlotLimits {
        SlotLimits::of(&self.slot)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below leaves its data consistent before anything can panic, so
    // a poisoned lock still guards valid data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn key_shard(&self, key: &IdempotencyKey) -> &Mutex<HashMap<IdempotencyKey, (HoldId, SlotId)>> {
        let index = self.hasher.hash_one(key) as usize % SHARDS;
        &self.keys[index]
    }

    fn hold_shard(&self, hold_id: HoldId) -> &Mutex<HashMap<HoldId, SlotId>> {
        &self.hold_slots[hold_id.0.rem_euclid(SHARDS as i64) as usize]
    }

    fn slot_row(&self, slot_id: SlotId) -> Option<Arc<Mutex<SlotRow>>> {
        let table = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        table.by_id.get(&slot_id).cloned()
    }

    fn slot_of_hold(&self, hold_id: HoldId) -> Option<Arc<Mutex<SlotRow>>> {
        let slot_id = *lock(self.hold_shard(hold_id)).get(&hold_id)?;
        self.slot_row(slot_id)
    }

    /// The hold as stored, whatever its scope.
    fn read_hold(&self, hold_id: HoldId) -> Option<Hold> {
        self.slot_of_hold(hold_id)
            .and_then(|row| lock(&row).holds.get(&hold_id).cloned())
    }
}

impl MemoryStore {
    /// [`HoldStore::create_hold`](crate::HoldStore::create_hold): placed, or tried once more
    /// after giving back the expired holds of a pool that was short.
    fn create_hold_now(&self, request: &HoldRequest<'_>) -> Result<HoldOutcome, StoreError> {
        match self.place_hold(request)? {
            Placed::Decided(outcome) => Ok(outcome),
            Placed::PoolShort(short) if self.reclaim_pools(&short, request.now) => {
                match self.place_hold(request)? {
                    Placed::Decided(outcome) => Ok(outcome),
                    Placed::PoolShort(_) => Ok(HoldOutcome::SoldOut),
                }
            }
            Placed::PoolShort(_) => Ok(HoldOutcome::SoldOut),
        }
    }

    /// The hold's decision, made under the key shard's lock, then the slot's, then the pool
    /// table's.
    fn place_hold(&self, request: &HoldRequest<'_>) -> Result<Placed<HoldOutcome>, StoreError> {
        let decided = |outcome| Ok(Placed::Decided(outcome));
        let mut keys = lock(self.key_shard(request.key));
        let vacant = match keys.entry(request.key.clone()) {
            Entry::Occupied(taken) => {
                let (id, slot_id) = *taken.get();
                return decided(match self.key_holder(id, slot_id)? {
                    Some(holder) => HoldOutcome::key_taken(request, holder),
                    None => HoldOutcome::KeyReused(None),
                });
            }
            Entry::Vacant(vacant) => vacant,
        };

        let Some(row) = self.slot_row(request.slot_id) else {
            return decided(HoldOutcome::refused(request, None, None));
        };
        let mut row = lock(&row);
        let now = request.now;
        let expired = row.expired_units(now);
        // Nobody takes units past a waiting line.
        if !row.slot.is_selling_at(now)
            || self.line_waits(&row, now)
            || row.slot.stored_remaining + expired < request.quantity
        {
            return decided(HoldOutcome::refused(request, None, Some(row.limits())));
        }
        let needs: Vec<(PoolId, i32)> = row.pools.iter().map(|&p| (p, request.quantity)).collect();
        // Reclaim expired holds only when that makes the hold fit: a refused hold changes
        // nothing. The slot's expired units are its pools' too.
        let (short, tight) = lock(&self.pools).short_of(&needs, |_| expired);
        if !short.is_empty() {
            return Ok(Placed::PoolShort(short));
        }
        if row.slot.stored_remaining < request.quantity || tight {
            row.reclaim(now, usize::MAX, &self.log, &self.pools);
        }
        if let Err(short) = lock(&self.pools).take(&needs) {
            return Ok(Placed::PoolShort(short));
        }
        row.slot.stored_remaining -= request.quantity;

        let hold_id = HoldId(self.last_hold_id.fetch_add(1, Ordering::Relaxed) + 1);
        let hold = Hold {
            hold_id,
            slot_id: request.slot_id,
            status: HoldStatus::Held,
            expires_at: request.expires_at,
            confirmed_at: None,
            cancelled_at: None,
            quantity: request.quantity,
            owner: request.owner.cloned(),
            created_at: now,
        };
        row.holds.insert(hold_id, hold.clone());
        row.held_by_expiry.insert((hold.expires_at, hold_id));
        row.keys.insert(hold_id, request.key.clone());
        vacant.insert((hold_id, request.slot_id));
        lock(self.hold_shard(hold_id)).insert(hold_id, request.slot_id);
        if let Some(owner) = request.owner {
            lock(&self.owners).insert((owner.clone(), hold_id));
        }
        lock(&self.log).append(NewEvent::of_hold(EventKind::HoldPlaced, &hold, now));
        decided(HoldOutcome::Created(hold))
    }
}

/// A placement's result: decided, or short in these pools (nothing changed but reclaims of
/// units that were free already).
pub(super) enum Placed<T> {
    Decided(T),
    PoolShort(Vec<PoolId>),
}

/// Whether `hold` ended (cancelled, or expired and reclaimed) before `before`: history a purge
/// may delete. Confirmed holds are bookings and holds stored as held still count.
fn ended_before(hold: &Hold, before: Timestamp) -> bool {
    match hold.status {
        HoldStatus::Cancelled => hold.cancelled_at.is_some_and(|at| at < before),
        HoldStatus::Expired => hold.expires_at < before,
        HoldStatus::Held | HoldStatus::Confirmed => false,
    }
}
