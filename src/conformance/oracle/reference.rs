//! The reference model: the state of slots and holds a sequence should leave, and the outcome
//! each operation should have, by the outcome table of the crate docs.

use std::collections::HashMap;

use chrono::Duration;

use crate::admin::SlotSummary;
use crate::conformance::{HOLD_TTL, MAX_HOLD_LIFE, MAX_REQUESTED_TTL, MIN_REQUESTED_TTL};
use crate::model::{Hold, HoldId, HoldStatus, ResourceId, Slot, SlotId, Timestamp};
use crate::scope::Scope;

use super::ops::{duration_of, owner, scope_of, ModelOp};

#[derive(Debug, Clone)]
pub(super) struct ModelSlot {
    pub(super) id: SlotId,
    pub(super) starts_at: Timestamp,
    pub(super) ends_at: Timestamp,
    pub(super) capacity: i32,
    pub(super) remaining: i32,
    pub(super) resource: Option<ResourceId>,
    pub(super) closed: bool,
    pub(super) removed_at: Option<Timestamp>,
}

impl ModelSlot {
    pub(super) fn as_slot(&self) -> Slot {
        Slot {
            slot_id: self.id,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            capacity: self.capacity,
            stored_remaining: self.remaining,
            resource: self.resource.clone(),
            closed: self.closed,
            removed_at: self.removed_at,
        }
    }
}

/// A pool in the model.
#[derive(Debug, Clone)]
pub(super) struct ModelPool {
    pub(super) id: crate::model::PoolId,
    pub(super) capacity: i32,
    /// Its slots, by id.
    pub(super) slots: Vec<SlotId>,
}

/// A waitlist entry in the model (see `waitlists.rs`), with its key number and whether it
/// still waits.
#[derive(Debug, Clone)]
pub(super) struct ModelEntry {
    pub(super) entry: crate::model::WaitlistEntry,
    pub(super) key: u8,
    pub(super) waiting: bool,
}

/// The sequential model of the booking rules (the outcome table of the crate docs).
#[derive(Debug, Default, Clone)]
pub(super) struct Model {
    pub(super) slots: Vec<ModelSlot>,
    pub(super) holds: Vec<Hold>,
    pub(super) keys: HashMap<u8, usize>,
    /// The lines of each booking of several lines (indexes into `holds`, by slot id), under
    /// each line's index. A hold not here is a booking of one line.
    pub(super) lines: HashMap<usize, Vec<usize>>,
    /// The pools created so far, in order (see `pools.rs`).
    pub(super) pools: Vec<ModelPool>,
    /// Every waitlist entry made so far, in order (see `waitlists.rs`).
    pub(super) entries: Vec<ModelEntry>,
}

/// What an operation returned, with store-assigned ids kept as they are.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
    Hold {
        hold: Hold,
        replayed: bool,
    },
    /// `idempotency_key_reused`, with the existing hold's id when it may be shown.
    KeyReused(Option<HoldId>),
    /// A booking's lines (by slot id), and whether the request was a replay.
    Booking {
        lines: Vec<Hold>,
        replayed: bool,
    },
    /// `lines_unavailable`, with every line that cannot be had.
    Lines(Vec<crate::model::LineShortfall>),
    Listing(Vec<(SlotId, i32)>),
    /// Every page of a query, in order.
    Pages(Vec<Vec<Hold>>),
    /// Every page of the operator's listing, in order.
    SlotPages(Vec<Vec<SlotSummary>>),
    /// A slot after a change.
    Slot(Slot),
    /// `capacity_taken`, with the units taken.
    CapacityTaken(i32),
    /// `capacity_changed`, with the capacity found.
    CapacityChanged(i32),
    /// `pool_capacity_changed`, with the capacity found.
    PoolCapacityChanged(i32),
    /// `slot_in_use`, with the units held and confirmed.
    InUse(i32, i32),
    /// A pool after a change or read.
    Pool(crate::model::PoolSummary),
    /// `pool_in_use`, with the units asked for and those taken.
    PoolInUse(i32, i32),
    /// The holds a reclaim reclaimed, by id.
    Reclaimed(Vec<HoldId>),
    /// A join that waits in line: the entry, its place, whether a replay.
    Waiting {
        entry: crate::model::WaitlistEntry,
        position: u32,
        replayed: bool,
    },
    /// A waitlist entry left (no place) or read (its place).
    Entry(crate::model::WaitlistEntry, Option<u32>),
    /// Whether a lease was granted.
    Leased(bool),
    /// An acknowledgement's answer (`Ok`, or its error code) and the cursor after it.
    Cursor(
        Result<(), &'static str>,
        Option<crate::events::EventPosition>,
    ),
    Error(&'static str),
    Done,
}

impl Seen {
    /// The answer without what a store's own way of giving back expired holds may change: a
    /// changed slot's stored `remaining`.
    pub(super) fn into_read(self) -> Seen {
        match self {
            Seen::Slot(mut slot) => {
                slot.stored_remaining = 0;
                Seen::Slot(slot)
            }
            other => other,
        }
    }
}

/// Confirms a line at `now`, as the outcome table says.
pub(super) fn confirming(
    now: Timestamp,
) -> impl FnMut(&mut Hold, HoldStatus) -> Result<(), &'static str> {
    move |hold, status| match status {
        HoldStatus::Held => {
            hold.status = HoldStatus::Confirmed;
            hold.confirmed_at = Some(now);
            Ok(())
        }
        HoldStatus::Confirmed => Ok(()),
        HoldStatus::Cancelled => Err("hold_cancelled"),
        HoldStatus::Expired => Err("hold_expired"),
    }
}

/// Cancels a line at `now`, noting in `freed` the units it gives back.
pub(super) fn cancelling(
    now: Timestamp,
    freed: &mut Vec<(SlotId, i32)>,
) -> impl FnMut(&mut Hold, HoldStatus) -> Result<(), &'static str> + '_ {
    move |hold, status| match status {
        HoldStatus::Held | HoldStatus::Confirmed => {
            hold.status = HoldStatus::Cancelled;
            hold.cancelled_at = Some(now);
            freed.push((hold.slot_id, hold.quantity));
            Ok(())
        }
        HoldStatus::Cancelled => Ok(()),
        HoldStatus::Expired => Err("hold_expired"),
    }
}

/// Renews a line at `now` for `lifetime`, capped by the maximum hold life.
pub(super) fn renewing(
    now: Timestamp,
    lifetime: Duration,
) -> impl FnMut(&mut Hold, HoldStatus) -> Result<(), &'static str> {
    move |hold, status| match status {
        HoldStatus::Held => {
            let cap = hold.created_at + Duration::from_std(MAX_HOLD_LIFE).unwrap_or(Duration::MAX);
            hold.expires_at = (now + lifetime).min(cap).max(hold.expires_at);
            Ok(())
        }
        HoldStatus::Confirmed => Ok(()),
        HoldStatus::Cancelled => Err("hold_cancelled"),
        HoldStatus::Expired => Err("hold_expired"),
    }
}

/// The lifetime the engine picks, or its refusal.
pub(super) fn pick_lifetime(seconds: Option<u64>) -> Result<Duration, Seen> {
    let lifetime = duration_of(seconds).unwrap_or(HOLD_TTL);
    if lifetime < MIN_REQUESTED_TTL || lifetime > MAX_REQUESTED_TTL {
        return Err(Seen::Error("invalid_lifetime"));
    }
    Ok(Duration::from_std(lifetime).unwrap_or(Duration::MAX))
}

/// The pages a walk `limit` at a time over `items` (in listing order) yields: full pages,
/// then the last one, which is empty when the full ones took every item.
pub(super) fn pages<T: Clone>(items: Vec<T>, limit: u32) -> Vec<Vec<T>> {
    let limit = limit as usize;
    let mut pages: Vec<Vec<T>> = items.chunks(limit).map(<[T]>::to_vec).collect();
    if pages.last().is_none_or(|last| last.len() == limit) {
        pages.push(Vec::new());
    }
    pages
}

/// Indexes into the model and counts of a slot's units.
impl Model {
    pub(super) fn slot_id(&self, index: usize) -> SlotId {
        self.slots.get(index).map_or(
            SlotId(self.slots.iter().map(|s| s.id.0).max().unwrap_or(0) + 1000),
            |s| s.id,
        )
    }

    pub(super) fn hold_id(&self, index: usize) -> HoldId {
        if self.holds.is_empty() {
            return HoldId(1_000_000);
        }
        self.holds[index % self.holds.len()].hold_id
    }

    pub(super) fn hold_index(&self, index: usize) -> Option<usize> {
        (!self.holds.is_empty()).then(|| index % self.holds.len())
    }

    pub(super) fn scope(&self, number: u8, index: usize) -> Scope {
        scope_of(number, self.hold_index(index).map(|i| &self.holds[i]))
    }

    /// The hold `index` if it is in `scope`.
    pub(super) fn scoped(&self, index: usize, scope: &Scope) -> Option<usize> {
        self.hold_index(index)
            .filter(|&i| scope.admits(&self.holds[i]))
    }

    /// Units of slot `id`'s holds stored as held: (active, expired) at `now`.
    pub(super) fn held_units(&self, id: SlotId, now: Timestamp) -> (i32, i32) {
        let held = self
            .holds
            .iter()
            .filter(|h| h.slot_id == id && h.status == HoldStatus::Held);
        held.fold((0, 0), |(active, expired), h| {
            if h.expires_at > now {
                (active + h.quantity, expired)
            } else {
                (active, expired + h.quantity)
            }
        })
    }

    pub(super) fn confirmed_units(&self, id: SlotId) -> i32 {
        self.holds
            .iter()
            .filter(|h| h.slot_id == id && h.status == HoldStatus::Confirmed)
            .map(|h| h.quantity)
            .sum()
    }

    /// Marks slot `id`'s expired held holds expired; returns their units.
    pub(super) fn reclaim(&mut self, id: SlotId, now: Timestamp) -> i32 {
        let mut units = 0;
        for hold in self
            .holds
            .iter_mut()
            .filter(|h| h.slot_id == id && h.status == HoldStatus::Held && h.expires_at <= now)
        {
            hold.status = HoldStatus::Expired;
            units += hold.quantity;
        }
        units
    }
}

/// The expected outcomes of the lifecycle: holds, their transitions, the availability listing.
impl Model {
    /// The expected result of placing a hold; `hold_id` is what the store assigned if it
    /// created one (the model cannot know ids in advance).
    pub(super) fn hold(&mut self, op: &ModelOp, now: Timestamp, new_id: Option<HoldId>) -> Seen {
        let ModelOp::Hold {
            slot,
            key,
            quantity,
            owner: owner_number,
            lifetime,
        } = *op
        else {
            return Seen::Error("(not a hold)");
        };
        let slot_id = self.slot_id(slot);
        if !(1..=1000).contains(&quantity) {
            return Seen::Error("invalid_quantity");
        }
        let lifetime = match pick_lifetime(lifetime) {
            Ok(lifetime) => lifetime,
            Err(refused) => return refused,
        };
        let owner = owner(owner_number);
        if self.waiting_key(key).is_some() {
            return Seen::KeyReused(None);
        }
        if let Some(&existing) = self.keys.get(&key) {
            let hold = &self.holds[existing];
            // A booking of several lines is never the same request as a hold.
            let single = self.group(existing).len() == 1;
            if single && hold.slot_id == slot_id && hold.quantity == quantity && hold.owner == owner
            {
                return Seen::Hold {
                    hold: hold.clone().at(now),
                    replayed: true,
                };
            }
            return Seen::KeyReused((hold.owner == owner).then_some(hold.hold_id));
        }
        let Some(model_slot) = self.slots.get(slot) else {
            return Seen::Error("slot_not_found");
        };
        if model_slot.removed_at.is_some() {
            return Seen::Error("slot_not_found");
        }
        if model_slot.closed || model_slot.starts_at <= now {
            return Seen::Error("slot_closed");
        }
        // Nobody takes units past a waiting line.
        if self.line_waits(slot_id, now) {
            return Seen::Error(if quantity > model_slot.capacity {
                "quantity_exceeds_capacity"
            } else {
                "sold_out"
            });
        }
        let slot_free = model_slot.remaining + self.held_units(slot_id, now).1;
        if slot_free >= quantity && self.pool_short(slot_id, &[(slot_id, quantity)], now) {
            return Seen::Error("sold_out");
        }
        let model_slot = &self.slots[slot];
        if model_slot.remaining < quantity {
            let (_, free) = self.held_units(slot_id, now);
            // Reclaim only when it makes the hold fit: a refused hold changes nothing.
            if model_slot.remaining + free >= quantity {
                let units = self.reclaim(slot_id, now);
                self.slots[slot].remaining += units;
            }
        }
        let model_slot = &self.slots[slot];
        if model_slot.remaining < quantity {
            return Seen::Error(if quantity > model_slot.capacity {
                "quantity_exceeds_capacity"
            } else {
                "sold_out"
            });
        }
        let Some(hold_id) = new_id else {
            // The store created nothing where the model would have: report the mismatch.
            return Seen::Error("(model expected a new hold here)");
        };
        self.slots[slot].remaining -= quantity;
        let hold = Hold {
            hold_id,
            slot_id,
            status: HoldStatus::Held,
            expires_at: now + lifetime,
            confirmed_at: None,
            cancelled_at: None,
            quantity,
            owner,
            created_at: now,
        };
        self.keys.insert(key, self.holds.len());
        self.holds.push(hold.clone());
        Seen::Hold {
            hold,
            replayed: false,
        }
    }

    /// The indexes of the lines of the booking hold `i` belongs to (its own alone for a
    /// plain hold).
    pub(super) fn group(&self, i: usize) -> Vec<usize> {
        self.lines.get(&i).cloned().unwrap_or_else(|| vec![i])
    }

    /// The expected result of a transition of hold `index` called in `scope`, which acts on
    /// every line of its booking: `change` applies it to a line, given the line's status
    /// now, or refuses it with an error code (the same for every line: they share status
    /// and expiry); then the hold as it is now.
    fn transition(
        &mut self,
        index: usize,
        scope: &Scope,
        now: Timestamp,
        change: impl FnMut(&mut Hold, HoldStatus) -> Result<(), &'static str>,
    ) -> Seen {
        let Some(i) = self.scoped(index, scope) else {
            return Seen::Error("hold_not_found");
        };
        if let Err(code) = self.change_group(i, now, change) {
            return Seen::Error(code);
        }
        Seen::Hold {
            hold: self.holds[i].clone().at(now),
            replayed: false,
        }
    }

    /// Applies `change` to every line of hold `i`'s booking, or to none when it refuses.
    pub(super) fn change_group(
        &mut self,
        i: usize,
        now: Timestamp,
        mut change: impl FnMut(&mut Hold, HoldStatus) -> Result<(), &'static str>,
    ) -> Result<(), &'static str> {
        let group = self.group(i);
        let mut changed = self.holds.clone();
        for &line in &group {
            let status = changed[line].status_at(now);
            change(&mut changed[line], status)?;
        }
        self.holds = changed;
        Ok(())
    }

    pub(super) fn confirm(&mut self, index: usize, scope: &Scope, now: Timestamp) -> Seen {
        self.transition(index, scope, now, confirming(now))
    }

    pub(super) fn cancel(&mut self, index: usize, scope: &Scope, now: Timestamp) -> Seen {
        let mut freed = Vec::new();
        let seen = self.transition(index, scope, now, cancelling(now, &mut freed));
        let slots: Vec<SlotId> = freed.iter().map(|&(slot, _)| slot).collect();
        self.give_back(freed);
        for slot in slots {
            self.serve_line(slot, now);
        }
        seen
    }

    /// Gives each `(slot, units)` back to its slot.
    pub(super) fn give_back(&mut self, freed: Vec<(SlotId, i32)>) {
        for (slot_id, quantity) in freed {
            if let Some(slot) = self.slots.iter_mut().find(|s| s.id == slot_id) {
                slot.remaining += quantity;
            }
        }
    }

    pub(super) fn renew(
        &mut self,
        index: usize,
        scope: &Scope,
        lifetime: Option<u64>,
        now: Timestamp,
    ) -> Seen {
        let lifetime = match pick_lifetime(lifetime) {
            Ok(lifetime) => lifetime,
            Err(refused) => return refused,
        };
        self.transition(index, scope, now, renewing(now, lifetime))
    }

    pub(super) fn get(&self, index: usize, scope: &Scope, now: Timestamp) -> Seen {
        match self.scoped(index, scope) {
            Some(i) => Seen::Hold {
                hold: self.holds[i].clone().at(now),
                replayed: false,
            },
            None => Seen::Error("hold_not_found"),
        }
    }

    pub(super) fn availability(&self, now: Timestamp, only: Option<&ResourceId>) -> Seen {
        let mut upcoming: Vec<&ModelSlot> = self
            .slots
            .iter()
            .filter(|s| s.starts_at > now && !s.closed && s.removed_at.is_none())
            .filter(|s| only.is_none_or(|r| s.resource.as_ref() == Some(r)))
            .collect();
        upcoming.sort_by_key(|s| (s.starts_at, s.id));
        Seen::Listing(
            upcoming
                .into_iter()
                .map(|s| {
                    let (_, expired) = self.held_units(s.id, now);
                    let free = match self.line_waits(s.id, now) {
                        true => 0,
                        false => self.pool_free_of(s.id, now).min(s.remaining + expired),
                    };
                    (s.id, free)
                })
                .collect(),
        )
    }
}

/// The expected outcomes of the queries: an owner's holds and a slot's roster.
impl Model {
    /// Every page of the holds `keep` selects, by id, resolved at `now`.
    pub(super) fn pages(&self, keep: impl Fn(&Hold) -> bool, limit: u32, now: Timestamp) -> Seen {
        let mut holds: Vec<Hold> = self
            .holds
            .iter()
            .filter(|h| keep(h))
            .map(|h| h.clone().at(now))
            .collect();
        holds.sort_by_key(|h| h.hold_id);
        Seen::Pages(pages(holds, limit))
    }
}
