//! Slot administration of [`MemoryStore`].

use async_trait::async_trait;

use super::*;
use crate::model::CapacityChange;

#[async_trait]
impl SlotAdmin for MemoryStore {
    async fn change_capacity(
        &self,
        slot_id: SlotId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError> {
        let Some(row) = self.slot_row(slot_id) else {
            return Ok(Decided::new(now, SlotChange::NotFound));
        };
        let mut row = lock(&row);
        let before = (row.slot.capacity, row.slot.stored_remaining);
        // The capacity the change gives the slot, when it applies and is in range; widened, as
        // a move or `new - capacity` can leave i32.
        let capacity_after = |slot: &Slot| {
            change
                .applied_to(slot.capacity)
                .filter(|capacity| (1..=i64::from(i32::MAX)).contains(capacity))
        };
        let change = row.change_taking_free_units(
            now,
            &self.log,
            &self.pools,
            |slot, extra| {
                capacity_after(slot).is_some_and(|capacity| {
                    i64::from(slot.stored_remaining) + i64::from(extra) + capacity
                        - i64::from(slot.capacity)
                        >= 0
                })
            },
            |slot| {
                if let Some(capacity) = capacity_after(slot).and_then(|c| i32::try_from(c).ok()) {
                    slot.stored_remaining += capacity - slot.capacity;
                    slot.capacity = capacity;
                }
                EventKind::SlotCapacityChanged
            },
        );
        // A change that gave the slot something (another capacity, units given back) serves
        // the line in this step.
        if let SlotChange::Applied(slot) = &change {
            if slot.capacity != before.0 || slot.stored_remaining > before.1 {
                self.serve(&mut row, now);
                let pools = row.pools.clone();
                drop(row);
                self.serve_lines(&[slot_id], &pools, now);
            }
        }
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
                    let reopened = row.slot.closed && !closed;
                    let flipped = row.slot.closed != closed;
                    if flipped {
                        row.slot.closed = closed;
                        let kind = if closed {
                            EventKind::SlotClosed
                        } else {
                            EventKind::SlotReopened
                        };
                        row.log_slot(kind, now, &self.log);
                    }
                    let changed = SlotChange::Applied(row.slot.clone());
                    // Reopened: units freed while closed go to the line now (the answer is
                    // the change itself, before the line took any). Closed: its entries leave
                    // its pools' lines, whose next heads may be served.
                    if reopened {
                        self.serve(&mut row, now);
                    }
                    row.sync_line(&self.pools);
                    let pools = row.pools.clone();
                    drop(row);
                    if flipped {
                        self.serve_lines(&[slot_id], &pools, now);
                    }
                    changed
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
            &self.pools,
            |slot, extra| slot.stored_remaining + extra == slot.capacity,
            |slot| {
                slot.removed_at = Some(now);
                EventKind::SlotRemoved
            },
        );
        // Its entries leave its pools' lines, whose next heads may be served.
        row.sync_line(&self.pools);
        let pools = row.pools.clone();
        drop(row);
        if matches!(change, SlotChange::Applied(_)) {
            self.serve_lines(&[], &pools, now);
        }
        Ok(Decided::new(now, change))
    }

    async fn list_slots(
        &self,
        filter: &AvailabilityQuery,
        page: PageRequest<SlotCursor>,
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
