//! The reference model of slot administration: the outcome and state a capacity change, a
//! close or reopen, a removal and the operator's listing should have.

use crate::admin::SlotSummary;
use crate::model::{ResourceId, SlotId, Timestamp};

use super::reference::{pages, Model, ModelSlot, Seen};

/// The expected outcomes of slot administration: capacity, closing, removal, the operator's
/// listing.
impl Model {
    /// A change of slot `index` that takes free units: applied as stored, or after reclaiming
    /// expired holds when only that makes it fit (`fits` given the extra free units), else
    /// refused by `refuse`.
    pub(super) fn take_free_units(
        &mut self,
        index: usize,
        now: Timestamp,
        fits: impl Fn(&ModelSlot, i64) -> bool,
        change: impl FnOnce(&mut ModelSlot),
        refuse: impl FnOnce(&Model, SlotId) -> Seen,
    ) -> Seen {
        let Some(slot) = self.slots.get(index).filter(|s| s.removed_at.is_none()) else {
            return Seen::Error("slot_not_found");
        };
        let id = slot.id;
        if !fits(slot, 0) {
            let (_, expired) = self.held_units(id, now);
            if !fits(slot, i64::from(expired)) {
                return refuse(self, id);
            }
            let units = self.reclaim(id, now);
            self.slots[index].remaining += units;
        }
        change(&mut self.slots[index]);
        Seen::Slot(self.slots[index].as_slot())
    }

    pub(super) fn set_capacity(
        &mut self,
        index: usize,
        change: crate::CapacityChange,
        now: Timestamp,
    ) -> Seen {
        if change.target().is_some_and(|capacity| capacity < 1) {
            return Seen::Error("invalid_slot");
        }
        // The capacity the change gives a slot of `capacity`, when it applies (a
        // compare-and-set of another capacity does not).
        let after = move |capacity: i32| change.applied_to(capacity);
        let in_range = |capacity: i64| (1..=i64::from(i32::MAX)).contains(&capacity);
        let before = self.slots.get(index).map(|s| (s.capacity, s.remaining));
        let seen = self.take_free_units(
            index,
            now,
            |s, extra| {
                after(s.capacity).is_some_and(|capacity| {
                    in_range(capacity)
                        && i64::from(s.remaining) + extra + capacity - i64::from(s.capacity) >= 0
                })
            },
            |s| {
                if let Some(capacity) = after(s.capacity).and_then(|c| i32::try_from(c).ok()) {
                    s.remaining += capacity - s.capacity;
                    s.capacity = capacity;
                }
            },
            |model, id| {
                let capacity = model
                    .slots
                    .iter()
                    .find(|s| s.id == id)
                    .map_or(0, |s| s.capacity);
                match after(capacity) {
                    None => Seen::CapacityChanged(capacity),
                    Some(new) if !in_range(new) => Seen::Error("invalid_slot"),
                    Some(_) => {
                        let (active, _) = model.held_units(id, now);
                        Seen::CapacityTaken(active + model.confirmed_units(id))
                    }
                }
            },
        );
        // Served when the change gave the slot something: another capacity, units back.
        if let (Seen::Slot(slot), Some((capacity, remaining))) = (&seen, before) {
            if slot.capacity != capacity || slot.stored_remaining > remaining {
                self.serve_line(slot.slot_id, now);
            }
        }
        seen
    }

    pub(super) fn remove(&mut self, index: usize, now: Timestamp) -> Seen {
        let seen = self.take_free_units(
            index,
            now,
            |s, extra| i64::from(s.remaining) + extra == i64::from(s.capacity),
            |s| s.removed_at = Some(now),
            |model, id| Seen::InUse(model.held_units(id, now).0, model.confirmed_units(id)),
        );
        // Its entries leave its pools' lines, whose next heads may be served.
        if let Seen::Slot(slot) = &seen {
            let pools = self.pools_of(slot.slot_id);
            self.serve(&[], &pools, now);
        }
        seen
    }

    pub(super) fn set_closed(&mut self, index: usize, closed: bool, now: Timestamp) -> Seen {
        let (seen, changed) = match self.slots.get_mut(index).filter(|s| s.removed_at.is_none()) {
            Some(slot) => {
                let changed = slot.closed != closed;
                slot.closed = closed;
                (Seen::Slot(slot.as_slot()), changed)
            }
            None => (Seen::Error("slot_not_found"), false),
        };
        // Reopened, the slot's line (and its entries in its pools' lines) is served; closed,
        // its entries leave its pools' lines, whose next heads may be served.
        if let (Seen::Slot(slot), true) = (&seen, changed) {
            self.serve_line(slot.slot_id, now);
        }
        seen
    }

    /// Every page of the operator's listing, narrowed to `only`.
    pub(super) fn list_slots(&self, limit: u32, only: Option<&ResourceId>, now: Timestamp) -> Seen {
        let mut slots: Vec<&ModelSlot> = self
            .slots
            .iter()
            .filter(|s| only.is_none_or(|r| s.resource.as_ref() == Some(r)))
            .collect();
        slots.sort_by_key(|s| (s.starts_at, s.id));
        let summaries = slots
            .into_iter()
            .map(|s| {
                let (held, expired) = self.held_units(s.id, now);
                SlotSummary {
                    slot_id: s.id,
                    starts_at: s.starts_at,
                    ends_at: s.ends_at,
                    capacity: s.capacity,
                    remaining: s.remaining + expired,
                    held,
                    confirmed: self.confirmed_units(s.id),
                    resource: s.resource.clone(),
                    closed: s.closed,
                    removed_at: s.removed_at,
                }
            })
            .collect();
        Seen::SlotPages(pages(summaries, limit))
    }
}
