//! The hold lifecycle and hold queries of [`MemoryStore`].

use async_trait::async_trait;

use super::*;
use crate::store::HoldChange;

#[async_trait]
impl HoldStore for MemoryStore {
    async fn create_slot(&self, new: &NewSlot, now: Timestamp) -> Result<Slot, StoreError> {
        let mut table = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        table.last_id += 1;
        let slot = Slot {
            slot_id: SlotId(table.last_id),
            starts_at: new.starts_at,
            ends_at: new.ends_at,
            capacity: new.capacity,
            stored_remaining: new.capacity,
            resource: new.resource.clone(),
            closed: false,
            removed_at: None,
        };
        let row = SlotRow {
            slot: slot.clone(),
            holds: BTreeMap::new(),
            held_by_expiry: BTreeSet::new(),
            keys: HashMap::new(),
            pools: Vec::new(),
            waiting: Vec::new(),
        };
        row.log_slot(EventKind::SlotCreated, now, &self.log);
        table.by_start.insert((slot.starts_at, slot.slot_id));
        table.by_id.insert(slot.slot_id, Arc::new(Mutex::new(row)));
        Ok(slot)
    }

    async fn get_slot(&self, slot_id: SlotId) -> Result<Option<Slot>, StoreError> {
        Ok(self.slot_row(slot_id).map(|row| lock(&row).slot.clone()))
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
                // A slot with a waiting line has no unit for anyone else.
                remaining: match self.line_waits(&row, now) {
                    false => row.slot.stored_remaining + row.expired_units(now),
                    true => 0,
                },
                resource: row.slot.resource.clone(),
            });
        }
        Ok(Decided::new(now, entries))
    }

    async fn pools(
        &self,
        now: Timestamp,
    ) -> Result<Decided<Vec<crate::model::PoolUsage>>, StoreError> {
        Ok(Decided::new(now, self.every_pool(now)))
    }

    async fn create_hold(
        &self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let outcome = self.create_hold_now(&request)?;
        Ok(Decided::new(request.now, outcome))
    }

    async fn confirm_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let transition = self.change_hold(hold_id, scope, now, HoldChange::Confirm);
        Ok(Decided::new(now, transition))
    }

    async fn cancel_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let transition = self.change_hold(hold_id, scope, now, HoldChange::Cancel);
        Ok(Decided::new(now, transition))
    }

    async fn renew_hold(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let (hold_id, now) = (request.hold_id, request.now);
        let transition = self.change_hold(hold_id, request.scope, now, HoldChange::Renew(&request));
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
}

#[async_trait]
impl HoldQueries for MemoryStore {
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
}
