//! An in-memory [`Store`]: the reference implementation, for tests, prototypes and
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

use async_trait::async_trait;

use crate::admin::{SlotFilter, SlotPageRequest, SlotUsage};
use crate::events::{Event, EventKind, EventPosition, EventStore, NewEvent, Purged};
use crate::model::{
    AvailabilityEntry, ConsumerId, Hold, HoldId, HoldStatus, IdempotencyKey, LeaseHolder, NewSlot,
    OwnerId, PageRequest, Slot, SlotId, Timestamp,
};
use crate::scope::Scope;
use crate::store::{
    Decided, HoldOutcome, HoldRequest, RenewRequest, SlotChange, SlotLimits, Store, StoreError,
    Transition,
};

const SHARDS: usize = 16;

/// A [`Store`] kept in process memory. Cheap to create; nothing survives a restart.
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
        self.events.push_back(event.at_position(position));
    }

    /// Where the unread events of a consumer at `after` begin.
    fn first_after(&self, after: EventPosition) -> usize {
        self.events.partition_point(|event| event.position <= after)
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
            self.reclaim(now, usize::MAX, log);
        }
        let before = self.slot.clone();
        let kind = change(&mut self.slot);
        if self.slot != before {
            self.log_slot(kind, now, log);
        }
        SlotChange::Applied(self.slot.clone())
    }

    /// Marks up to `limit` held holds with `expires_at <= now` as expired, gives their units
    /// back and logs one `hold_expired` event each; returns them.
    fn reclaim(&mut self, now: Timestamp, limit: usize, log: &Mutex<EventLog>) -> Vec<Hold> {
        let expired: Vec<(Timestamp, HoldId)> =
            self.expired_held(now).take(limit).copied().collect();
        let mut reclaimed = Vec::with_capacity(expired.len());
        for entry in expired {
            self.held_by_expiry.remove(&entry);
            if let Some(hold) = self.holds.get_mut(&entry.1) {
                hold.status = HoldStatus::Expired;
                self.slot.remaining += hold.quantity;
                reclaimed.push(hold.clone());
            }
        }
        if !reclaimed.is_empty() {
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

    /// Applies `change` to the hold if it is in `scope` and `change` allows it (it names the
    /// event of the change, `None` when refused), and logs that event at `now` if the hold
    /// really changed (a renewal already at its maximum life moves nothing and logs nothing).
    fn transition(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        change: impl FnOnce(&mut SlotRow, HoldId) -> Option<EventKind>,
    ) -> Transition {
        let Some(row) = self.slot_of_hold(hold_id) else {
            return Transition::NotFound;
        };
        let mut row = lock(&row);
        if !row.holds.get(&hold_id).is_some_and(|h| scope.admits(h)) {
            return Transition::NotFound;
        }
        let before = row.holds.get(&hold_id).cloned();
        let applied = change(&mut row, hold_id);
        match (row.holds.get(&hold_id), applied) {
            (Some(hold), Some(kind)) => {
                if before.as_ref() != Some(hold) {
                    lock(&self.log).append(NewEvent::of_hold(kind, hold, now));
                }
                Transition::Applied(hold.clone())
            }
            (Some(hold), None) => Transition::NotApplied(hold.clone()),
            (None, _) => Transition::NotFound,
        }
    }

    /// The hold as stored, whatever its scope.
    fn read_hold(&self, hold_id: HoldId) -> Option<Hold> {
        self.slot_of_hold(hold_id)
            .and_then(|row| lock(&row).holds.get(&hold_id).cloned())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn create_slot(&self, new: &NewSlot, now: Timestamp) -> Result<Slot, StoreError> {
        let mut table = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        table.last_id += 1;
        let slot = Slot {
            slot_id: SlotId(table.last_id),
            starts_at: new.starts_at,
            ends_at: new.ends_at,
            capacity: new.capacity,
            remaining: new.capacity,
            resource: new.resource.clone(),
            closed: false,
            removed_at: None,
        };
        let row = SlotRow {
            slot: slot.clone(),
            holds: BTreeMap::new(),
            held_by_expiry: BTreeSet::new(),
            keys: HashMap::new(),
        };
        row.log_slot(EventKind::SlotCreated, now, &self.log);
        table.by_start.insert((slot.starts_at, slot.slot_id));
        table.by_id.insert(slot.slot_id, Arc::new(Mutex::new(row)));
        Ok(slot)
    }

    async fn availability(
        &self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
        let table = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        let upcoming = table
            .by_start
            .range((Bound::Excluded((now, SlotId(i64::MAX))), Bound::Unbounded));
        let mut entries = Vec::with_capacity(table.by_start.len());
        for (_, slot_id) in upcoming {
            let Some(row) = table.by_id.get(slot_id) else {
                continue;
            };
            let row = lock(row);
            if !row.slot.is_selling_at(now) {
                continue;
            }
            entries.push(AvailabilityEntry {
                slot_id: row.slot.slot_id,
                starts_at: row.slot.starts_at,
                ends_at: row.slot.ends_at,
                capacity: row.slot.capacity,
                remaining: row.slot.remaining + row.expired_units(now),
                resource: row.slot.resource.clone(),
            });
        }
        Ok(Decided::new(now, entries))
    }

    async fn create_hold(
        &self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let outcome = self.place_hold(&request)?;
        Ok(Decided::new(request.now, outcome))
    }

    async fn confirm_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let transition = self.transition(hold_id, scope, now, |row, hold_id| {
            let hold = row.holds.get_mut(&hold_id)?;
            if hold.status != HoldStatus::Held || hold.expires_at <= now {
                return None;
            }
            hold.status = HoldStatus::Confirmed;
            hold.confirmed_at = Some(now);
            let expiry = (hold.expires_at, hold_id);
            row.held_by_expiry.remove(&expiry);
            Some(EventKind::HoldConfirmed)
        });
        Ok(Decided::new(now, transition))
    }

    async fn cancel_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let transition = self.transition(hold_id, scope, now, |row, hold_id| {
            let hold = row.holds.get_mut(&hold_id)?;
            let was_held = match hold.status {
                HoldStatus::Held if hold.expires_at > now => true,
                HoldStatus::Confirmed => false,
                _ => return None,
            };
            hold.status = HoldStatus::Cancelled;
            hold.cancelled_at = Some(now);
            let (expiry, quantity) = ((hold.expires_at, hold_id), hold.quantity);
            if was_held {
                row.held_by_expiry.remove(&expiry);
            }
            row.slot.remaining += quantity;
            Some(EventKind::HoldCancelled)
        });
        Ok(Decided::new(now, transition))
    }

    async fn renew_hold(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let now = request.now;
        let transition = self.transition(request.hold_id, request.scope, now, |row, hold_id| {
            let hold = row.holds.get_mut(&hold_id)?;
            if hold.status != HoldStatus::Held || hold.expires_at <= now {
                return None;
            }
            let old = (hold.expires_at, hold_id);
            hold.expires_at = request.renewed_expiry(hold);
            let new = (hold.expires_at, hold_id);
            row.held_by_expiry.remove(&old);
            row.held_by_expiry.insert(new);
            Some(EventKind::HoldRenewed)
        });
        Ok(Decided::new(now, transition))
    }

    async fn get_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        let hold = self.read_hold(hold_id).filter(|h| scope.admits(h));
        Ok(Decided::new(now, hold))
    }

    async fn owner_holds(
        &self,
        owner: &OwnerId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let after = (owner.clone(), page.after.unwrap_or(HoldId(i64::MIN)));
        let ids: Vec<HoldId> = {
            let owners = lock(&self.owners);
            owners
                .range((Bound::Excluded(after), Bound::Unbounded))
                .take_while(|(o, _)| o == owner)
                .take(page.limit as usize)
                .map(|(_, id)| *id)
                .collect()
        };
        // Holds never change owner; one purged since the index was read is left out.
        let holds = ids
            .into_iter()
            .filter_map(|id| self.read_hold(id))
            .collect();
        Ok(Decided::new(now, holds))
    }

    async fn slot_holds(
        &self,
        slot_id: SlotId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let holds = match self.slot_row(slot_id) {
            Some(row) => {
                let row = lock(&row);
                let after = page.after.unwrap_or(HoldId(i64::MIN));
                row.holds
                    .range((Bound::Excluded(after), Bound::Unbounded))
                    .take(page.limit as usize)
                    .map(|(_, hold)| hold.clone())
                    .collect()
            }
            None => Vec::new(),
        };
        Ok(Decided::new(now, holds))
    }

    async fn get_slot(&self, slot_id: SlotId) -> Result<Option<Slot>, StoreError> {
        Ok(self.slot_row(slot_id).map(|row| lock(&row).slot.clone()))
    }

    async fn change_capacity(
        &self,
        slot_id: SlotId,
        capacity: i32,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let Some(row) = self.slot_row(slot_id) else {
            return Ok(Decided::new(now, SlotChange::NotFound));
        };
        let mut row = lock(&row);
        // Widened: `capacity - slot.capacity` can leave i32 when one is near its maximum.
        let remaining_after = |slot: &Slot, extra: i32| {
            i64::from(slot.remaining) + i64::from(extra) + i64::from(capacity)
                - i64::from(slot.capacity)
        };
        let change = row.change_taking_free_units(
            now,
            &self.log,
            |slot, extra| remaining_after(slot, extra) >= 0,
            |slot| {
                slot.remaining += capacity - slot.capacity;
                slot.capacity = capacity;
                EventKind::SlotCapacityChanged
            },
        );
        Ok(Decided::new(now, change))
    }

    async fn set_closed(
        &self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let change = match self.slot_row(slot_id) {
            Some(row) => {
                let mut row = lock(&row);
                if row.slot.removed_at.is_some() {
                    SlotChange::NotFound
                } else {
                    // Closing a closed slot (or reopening an open one) changes nothing and
                    // logs nothing.
                    if row.slot.closed != closed {
                        row.slot.closed = closed;
                        let kind = if closed {
                            EventKind::SlotClosed
                        } else {
                            EventKind::SlotReopened
                        };
                        row.log_slot(kind, now, &self.log);
                    }
                    SlotChange::Applied(row.slot.clone())
                }
            }
            None => SlotChange::NotFound,
        };
        Ok(Decided::new(now, change))
    }

    async fn remove_slot(
        &self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let Some(row) = self.slot_row(slot_id) else {
            return Ok(Decided::new(now, SlotChange::NotFound));
        };
        let mut row = lock(&row);
        // No unit held or confirmed is the slot row's own `remaining == capacity`.
        let change = row.change_taking_free_units(
            now,
            &self.log,
            |slot, extra| slot.remaining + extra == slot.capacity,
            |slot| {
                slot.removed_at = Some(now);
                EventKind::SlotRemoved
            },
        );
        Ok(Decided::new(now, change))
    }

    async fn list_slots(
        &self,
        filter: &SlotFilter,
        page: SlotPageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<SlotUsage>>, StoreError> {
        let table = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        let start = match page.after {
            Some(after) => Bound::Excluded((after.starts_at, after.slot_id)),
            None => Bound::Unbounded,
        };
        let mut listed = Vec::new();
        for (_, slot_id) in table.by_start.range((start, Bound::Unbounded)) {
            if listed.len() >= page.limit as usize {
                break;
            }
            let Some(row) = table.by_id.get(slot_id) else {
                continue;
            };
            let row = lock(row);
            if filter.admits(&row.slot) {
                listed.push(row.usage(now));
            }
        }
        Ok(Decided::new(now, listed))
    }
}

impl MemoryStore {
    /// [`Store::create_hold`]'s decision, made under the key shard's lock and then the slot's.
    fn place_hold(&self, request: &HoldRequest<'_>) -> Result<HoldOutcome, StoreError> {
        let mut keys = lock(self.key_shard(request.key));
        let vacant = match keys.entry(request.key.clone()) {
            Entry::Occupied(taken) => {
                let (hold_id, _) = *taken.get();
                let holder = self.read_hold(hold_id).ok_or_else(|| {
                    StoreError::failed("idempotency key points at a missing hold")
                })?;
                return Ok(HoldOutcome::refused(request, Some(holder), None));
            }
            Entry::Vacant(vacant) => vacant,
        };

        let Some(row) = self.slot_row(request.slot_id) else {
            return Ok(HoldOutcome::refused(request, None, None));
        };
        let mut row = lock(&row);
        let open = row.slot.is_selling_at(request.now);
        // Reclaim expired holds only when that makes the hold fit: a refused hold changes
        // nothing.
        if open
            && row.slot.remaining < request.quantity
            && row.slot.remaining + row.expired_units(request.now) >= request.quantity
        {
            row.reclaim(request.now, usize::MAX, &self.log);
        }
        if !open || row.slot.remaining < request.quantity {
            return Ok(HoldOutcome::refused(request, None, Some(row.limits())));
        }
        row.slot.remaining -= request.quantity;

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
            created_at: request.now,
        };
        row.holds.insert(hold_id, hold.clone());
        row.held_by_expiry.insert((hold.expires_at, hold_id));
        row.keys.insert(hold_id, request.key.clone());
        vacant.insert((hold_id, request.slot_id));
        lock(self.hold_shard(hold_id)).insert(hold_id, request.slot_id);
        if let Some(owner) = request.owner {
            lock(&self.owners).insert((owner.clone(), hold_id));
        }
        lock(&self.log).append(NewEvent::of_hold(EventKind::HoldPlaced, &hold, request.now));
        Ok(HoldOutcome::Created(hold))
    }
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

#[async_trait]
impl EventStore for MemoryStore {
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let log = lock(&self.log);
        let after = log
            .consumers
            .get(consumer)
            .map_or(EventPosition::START, |cursor| cursor.position);
        let first = log.first_after(after);
        Ok(log
            .events
            .range(first..)
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError> {
        let mut log = lock(&self.log);
        let cursor = log.consumers.entry(consumer.clone()).or_default();
        cursor.position = cursor.position.max(through);
        Ok(())
    }

    async fn consumer_position(
        &self,
        consumer: &ConsumerId,
    ) -> Result<Option<EventPosition>, StoreError> {
        Ok(lock(&self.log)
            .consumers
            .get(consumer)
            .map(|cursor| cursor.position))
    }

    async fn lease_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut log = lock(&self.log);
        let cursor = log.consumers.entry(consumer.clone()).or_default();
        let free = match &cursor.lease {
            None => true,
            Some((held, ends)) => held == holder || *ends <= now,
        };
        if free {
            cursor.lease = Some((holder.clone(), until));
        }
        Ok(free)
    }

    async fn release_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
    ) -> Result<(), StoreError> {
        let mut log = lock(&self.log);
        if let Some(cursor) = log.consumers.get_mut(consumer) {
            if cursor.held_by(holder) {
                cursor.lease = None;
            }
        }
        Ok(())
    }

    async fn acknowledge_leased(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        let mut log = lock(&self.log);
        match log.consumers.get_mut(consumer) {
            Some(cursor) if cursor.held_by(holder) => {
                cursor.position = cursor.position.max(through);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn reclaim_expired(&self, now: Timestamp, limit: u32) -> Result<Vec<Hold>, StoreError> {
        let rows: Vec<Arc<Mutex<SlotRow>>> = {
            let table = self.slots.read().unwrap_or_else(PoisonError::into_inner);
            table.by_id.values().cloned().collect()
        };
        let mut reclaimed = Vec::new();
        for row in rows {
            let left = limit as usize - reclaimed.len();
            if left == 0 {
                break;
            }
            reclaimed.extend(lock(&row).reclaim(now, left, &self.log));
        }
        Ok(reclaimed)
    }

    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError> {
        // Ended holds never change again, so candidates picked under each slot's lock are
        // deleted afterwards in lock order: key shard, then slot, then the indexes.
        let rows: Vec<Arc<Mutex<SlotRow>>> = {
            let table = self.slots.read().unwrap_or_else(PoisonError::into_inner);
            table.by_id.values().cloned().collect()
        };
        let mut candidates = Vec::new();
        for row in &rows {
            let left = limit as usize - candidates.len();
            if left == 0 {
                break;
            }
            let row_guard = lock(row);
            candidates.extend(
                row_guard
                    .holds
                    .values()
                    .filter(|hold| ended_before(hold, before))
                    .take(left)
                    .filter_map(|hold| {
                        let key = row_guard.keys.get(&hold.hold_id)?.clone();
                        Some((Arc::clone(row), hold.hold_id, key))
                    }),
            );
        }
        let mut purged = Purged::default();
        for (row, hold_id, key) in candidates {
            let mut keys = lock(self.key_shard(&key));
            let mut row = lock(&row);
            let Some(hold) = row.holds.remove(&hold_id) else {
                continue;
            };
            row.keys.remove(&hold_id);
            if keys.get(&key).is_some_and(|(id, _)| *id == hold_id) {
                keys.remove(&key);
            }
            lock(self.hold_shard(hold_id)).remove(&hold_id);
            if let Some(owner) = hold.owner {
                lock(&self.owners).remove(&(owner, hold_id));
            }
            purged.holds += 1;
        }

        let mut log = lock(&self.log);
        let delivered = log.consumers.values().map(|cursor| cursor.position).min();
        while purged.events < u64::from(limit) {
            let Some(first) = log.events.front() else {
                break;
            };
            let acknowledged = delivered.is_none_or(|through| first.position <= through);
            if !acknowledged || first.at >= before {
                break;
            }
            log.events.pop_front();
            purged.events += 1;
        }
        Ok(purged)
    }
}
