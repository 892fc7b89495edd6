//! Waitlists of [`MemoryStore`]: each slot's line sits in its row, in
//! [`WaitlistEntry::line_order`], and is served under the slot's lock by every operation that
//! gives the slot units back.

use async_trait::async_trait;

use super::*;
use crate::model::{served, EntryId, WaitlistEntry};
use crate::store::{JoinOutcome, JoinRequest, WaitlistStore};

/// A slot's line: each entry with its key.
pub(super) type Line = Vec<(WaitlistEntry, IdempotencyKey)>;

impl SlotRow {
    /// Serves the line of a slot in no pool in strict order ([`served`]): while the head fits
    /// in the free units (after reclaiming the slot's expired holds when only that makes it
    /// fit), it becomes its offer. A slot in pools is served with its pools' lines
    /// ([`MemoryStore::serve_lines`]) once the step lets its lock go. Returns the offers made.
    pub(super) fn serve_line(
        &mut self,
        now: Timestamp,
        owners: &Mutex<BTreeSet<(OwnerId, HoldId)>>,
        pools: &Mutex<PoolTable>,
        log: &Mutex<EventLog>,
    ) -> Vec<Hold> {
        let mut offers = Vec::new();
        while let Some((head, _)) = self.waiting.first() {
            if !self.slot.is_selling_at(now) || !self.pools.is_empty() {
                break;
            }
            if served(self.slot.stored_remaining, [head]) == 0 {
                if served(self.slot.stored_remaining + self.expired_units(now), [head]) == 0 {
                    break;
                }
                self.reclaim(now, usize::MAX, log, pools);
            }
            match self.offer_head(now, owners, pools, log) {
                Some(hold) => offers.push(hold),
                None => break,
            }
        }
        self.sync_line(pools);
        offers
    }

    /// The head of the line offered its units, taken from the slot and its pools (none if a
    /// pool is short): a hold logged `hold_placed` then `waitlist_offered`.
    pub(super) fn offer_head(
        &mut self,
        now: Timestamp,
        owners: &Mutex<BTreeSet<(OwnerId, HoldId)>>,
        pools: &Mutex<PoolTable>,
        log: &Mutex<EventLog>,
    ) -> Option<Hold> {
        let need = self.waiting.first()?.0.quantity;
        if self.slot.stored_remaining < need {
            return None;
        }
        let needs: Vec<(PoolId, i32)> = self.pools.iter().map(|&p| (p, need)).collect();
        lock(pools).take(&needs).ok()?;
        let (entry, key) = self.waiting.remove(0);
        self.slot.stored_remaining -= need;
        let hold = entry.offer(now);
        self.holds.insert(hold.hold_id, hold.clone());
        self.held_by_expiry.insert((hold.expires_at, hold.hold_id));
        self.keys.insert(hold.hold_id, key);
        if let Some(owner) = &hold.owner {
            lock(owners).insert((owner.clone(), hold.hold_id));
        }
        let mut log = lock(log);
        log.append(NewEvent::of_hold(EventKind::HoldPlaced, &hold, now));
        log.append(NewEvent::of_hold(EventKind::WaitlistOffered, &hold, now));
        Some(hold)
    }

    /// The waiting entry `entry_id` and its place in line, if it waits.
    fn waiting_entry(&self, entry_id: EntryId) -> Option<(usize, &WaitlistEntry)> {
        self.waiting
            .iter()
            .enumerate()
            .find(|(_, (entry, _))| entry.entry_id == entry_id)
            .map(|(i, (entry, _))| (i, entry))
    }
}

/// Whether `scope` may see or act on `entry`, as on a hold of the same owner.
fn admits(scope: &Scope, entry: &WaitlistEntry, now: Timestamp) -> bool {
    scope.admits(&entry.offer(now))
}

/// A place in line, counted from 1.
fn place(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

impl MemoryStore {
    /// Serves the line of `row` (locked by the caller) with this store's indexes.
    pub(super) fn serve(&self, row: &mut SlotRow, now: Timestamp) -> Vec<Hold> {
        row.serve_line(now, &self.owners, &self.pools, &self.log)
    }
}

#[async_trait]
impl WaitlistStore for MemoryStore {
    async fn join_waitlist(
        &self,
        request: JoinRequest<'_>,
    ) -> Result<Decided<JoinOutcome>, StoreError> {
        let hold = &request.hold;
        let now = hold.now;
        let decided = |outcome| Ok(Decided::new(now, outcome));
        let mut keys = lock(self.key_shard(hold.key));
        let vacant = match keys.entry(hold.key.clone()) {
            Entry::Occupied(taken) => {
                let (id, slot_id) = *taken.get();
                if let Some(row) = self.slot_row(slot_id) {
                    let row = lock(&row);
                    if let Some((index, entry)) = row.waiting_entry(EntryId(id.0)) {
                        let entry = entry.clone();
                        return decided(JoinOutcome::key_waits(&request, entry, place(index), now));
                    }
                }
                return decided(match self.key_holder(id, slot_id)? {
                    Some(holder) => JoinOutcome::key_taken(hold, holder),
                    None => JoinOutcome::Refused(HoldOutcome::KeyReused(None)),
                });
            }
            Entry::Vacant(vacant) => vacant,
        };
        let Some(row) = self.slot_row(hold.slot_id) else {
            return decided(JoinOutcome::Refused(HoldOutcome::SlotNotFound));
        };
        let mut row = lock(&row);
        let limits = row.limits();
        if !row.slot.is_selling_at(now) || hold.quantity > row.slot.capacity {
            return decided(JoinOutcome::Refused(HoldOutcome::refused(
                hold,
                None,
                Some(limits),
            )));
        }
        let least_pool = lock(&self.pools).least_capacity(&row.pools);
        if hold.quantity > least_pool {
            let capacity = least_pool;
            return decided(JoinOutcome::Refused(HoldOutcome::ExceedsCapacity {
                capacity,
            }));
        }
        let id = self.last_hold_id.fetch_add(1, Ordering::Relaxed) + 1;
        let offer_micros = (hold.expires_at - now)
            .num_microseconds()
            .unwrap_or(i64::MAX);
        let entry = WaitlistEntry {
            entry_id: EntryId(id),
            slot_id: hold.slot_id,
            quantity: hold.quantity,
            owner: hold.owner.cloned(),
            priority: request.priority,
            joined_at: now,
            offer_micros,
        };
        let at = row
            .waiting
            .partition_point(|(e, _)| e.line_order() < entry.line_order());
        row.waiting.insert(at, (entry.clone(), hold.key.clone()));
        vacant.insert((HoldId(id), hold.slot_id));
        lock(self.hold_shard(HoldId(id))).insert(HoldId(id), hold.slot_id);
        let at = |row: &SlotRow| {
            row.waiting_entry(entry.entry_id)
                .map_or(u32::MAX, |(index, _)| place(index))
        };
        let mut offers = self.serve(&mut row, now);
        let mut position = at(&row);
        let pools = row.pools.clone();
        if !pools.is_empty() {
            drop((row, keys));
            offers = self.serve_lines(&[entry.slot_id], &pools, now);
            position = self
                .slot_row(entry.slot_id)
                .map_or(u32::MAX, |row| at(&lock(&row)));
        }
        if let Some(offer) = offers.into_iter().find(|h| h.hold_id.0 == id) {
            return decided(JoinOutcome::Held {
                hold: offer,
                replayed: false,
            });
        }
        decided(JoinOutcome::Waiting {
            entry,
            position,
            replayed: false,
        })
    }

    async fn leave_waitlist(
        &self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<WaitlistEntry>>, StoreError> {
        let none = Ok(Decided::new(now, None));
        let hold_id = HoldId(entry_id.0);
        let Some(row) = self.slot_of_hold(hold_id) else {
            return none;
        };
        // The key's shard is locked before the slot: read the key first, then check again.
        let key = {
            let guard = lock(&row);
            match guard.waiting_entry(entry_id) {
                Some((index, entry)) if admits(scope, entry, now) => guard.waiting[index].1.clone(),
                _ => return none,
            }
        };
        let mut keys = lock(self.key_shard(&key));
        let mut row = lock(&row);
        let Some((index, entry)) = row.waiting_entry(entry_id) else {
            return none;
        };
        if !admits(scope, entry, now) {
            return none;
        }
        let (entry, key) = row.waiting.remove(index);
        keys.remove(&key);
        lock(self.hold_shard(hold_id)).remove(&hold_id);
        self.serve(&mut row, now);
        let pools = row.pools.clone();
        drop((row, keys));
        self.serve_lines(&[entry.slot_id], &pools, now);
        Ok(Decided::new(now, Some(entry)))
    }

    async fn waitlist_entry(
        &self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<(WaitlistEntry, u32)>>, StoreError> {
        let found = self.slot_of_hold(HoldId(entry_id.0)).and_then(|row| {
            let row = lock(&row);
            row.waiting_entry(entry_id)
                .filter(|(_, entry)| admits(scope, entry, now))
                .map(|(index, entry)| (entry.clone(), place(index)))
        });
        Ok(Decided::new(now, found))
    }
}
