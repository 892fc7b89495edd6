//! Waitlists in the model: joining (held at once or waiting), leaving, reading a place, and
//! the serving every freeing step does (the model's cancel, capacity change, reopening,
//! reclaim, join and leave call [`Model::serve_lines`]); the step check that runs them
//! against a store, and their property test.

use std::future::Future;

use proptest::prelude::*;

use crate::engine::{BookingEngine, NewHold};
use crate::error::BookingError;
use crate::model::{served, EntryId, PoolId, SlotId, Timestamp, WaitlistEntry};
use crate::store::{BookingStore, EventStore, PoolStore, Store, WaitlistStore};
use crate::waitlists::Joined;

use super::bookings::{booking_op, BookingSteps};
use super::ops::{duration_of, owner, scope_of, ModelOp};
use super::pools::{pool_op, PoolSteps};
use super::reference::{pick_lifetime, Model, ModelEntry, Seen};
use super::runner::{reclaim_step, run_checked, run_pinned, run_property, StepCheck};
use super::strategies::{admin_op, after_opening, lifecycle_op, lifetime};
use super::Mismatch;

impl Model {
    /// The waiting entry (index) whose key is key number `key`.
    pub(super) fn waiting_key(&self, key: u8) -> Option<usize> {
        self.entries.iter().position(|e| e.waiting && e.key == key)
    }

    /// Slot `id`'s line, in line order.
    pub(super) fn line(&self, id: SlotId) -> impl Iterator<Item = &WaitlistEntry> {
        let mut line: Vec<&WaitlistEntry> = self
            .entries
            .iter()
            .filter(|e| e.waiting && e.entry.slot_id == id)
            .map(|e| &e.entry)
            .collect();
        line.sort_by_key(|e| e.line_order());
        line.into_iter()
    }

    /// Entry `entry_id`'s place in its line, if it waits.
    fn place(&self, entry_id: EntryId) -> Option<u32> {
        let entry = &self
            .entries
            .iter()
            .find(|e| e.entry.entry_id == entry_id)?
            .entry;
        let index = self
            .line(entry.slot_id)
            .position(|e| e.entry_id == entry_id)?;
        u32::try_from(index + 1).ok()
    }

    /// Serves every slot's line (and so every pool's), as a reclaim of every slot does.
    pub(super) fn serve_lines(&mut self, now: Timestamp) {
        let slots: Vec<SlotId> = self.slots.iter().map(|s| s.id).collect();
        let pools: Vec<PoolId> = self.pools.iter().map(|p| p.id).collect();
        self.serve(&slots, &pools, now);
    }

    /// Whether slot `id` sells at `now`.
    fn sells(&self, id: SlotId, now: Timestamp) -> bool {
        self.slots
            .iter()
            .any(|s| s.id == id && !s.closed && s.removed_at.is_none() && s.starts_at > now)
    }

    /// The ids of the pools slot `id` draws from.
    pub(super) fn pools_of(&self, id: SlotId) -> Vec<PoolId> {
        let pools = self.pools.iter().filter(|p| p.slots.contains(&id));
        pools.map(|p| p.id).collect()
    }

    /// Pool `id`'s line: the waiting entries of its slots that sell at `now`, in line order.
    fn pool_line(&self, id: PoolId, now: Timestamp) -> Vec<&WaitlistEntry> {
        let Some(pool) = self.pools.iter().find(|p| p.id == id) else {
            return Vec::new();
        };
        let mut line: Vec<&WaitlistEntry> = self
            .entries
            .iter()
            .filter(|e| e.waiting && pool.slots.contains(&e.entry.slot_id))
            .map(|e| &e.entry)
            .filter(|e| self.sells(e.slot_id, now))
            .collect();
        line.sort_by_key(|e| e.line_order());
        line
    }

    /// Whether a newcomer on slot `id` finds a line waiting: its own or one of its pools'.
    pub(super) fn line_waits(&self, id: SlotId, now: Timestamp) -> bool {
        self.line(id).next().is_some()
            || (self.pools_of(id).into_iter()).any(|p| !self.pool_line(p, now).is_empty())
    }

    /// Whether `entry` is offered now: its slot sells, it heads its slot's line and every
    /// line of its slot's pools, and its units are free in the slot (its expired holds
    /// counted free) and in every pool (their slots' expired holds counted free).
    fn ready(&self, entry: &WaitlistEntry, now: Timestamp) -> bool {
        let id = entry.slot_id;
        let heads = |line: &[&WaitlistEntry]| line.first().map(|e| e.entry_id);
        let Some(slot) = self.slots.iter().find(|s| s.id == id) else {
            return false;
        };
        self.sells(id, now)
            && self.line(id).next().map(|e| e.entry_id) == Some(entry.entry_id)
            && (self.pools_of(id).into_iter())
                .all(|p| heads(&self.pool_line(p, now)) == Some(entry.entry_id))
            && served(slot.remaining + self.held_units(id, now).1, [entry]) == 1
            && self.pool_free_of(id, now) >= entry.quantity
    }

    /// Serves the lines of `slots` and `pools` in strict order, as each step that frees
    /// their units does: while the head of one of them is ready, it becomes its offer (its
    /// slot's expired holds reclaimed first when only they make it fit). An offered entry
    /// leaves every line it was in: those lines are served too, since the next in each may
    /// have waited only behind it.
    pub(super) fn serve(&mut self, slots: &[SlotId], pools: &[PoolId], now: Timestamp) {
        let (mut slots, mut pools) = (slots.to_vec(), pools.to_vec());
        loop {
            let mut heads: Vec<WaitlistEntry> = (slots.iter())
                .filter_map(|&id| self.line(id).next().cloned())
                .chain(pools.iter().filter_map(|&p| {
                    let line = self.pool_line(p, now);
                    line.first().map(|e| (*e).clone())
                }))
                .collect();
            heads.sort_by_key(|e| e.line_order());
            let Some(head) = heads.into_iter().find(|e| self.ready(e, now)) else {
                return;
            };
            self.offer(&head, now);
            slots.push(head.slot_id);
            pools.extend(self.pools_of(head.slot_id));
            slots.sort_unstable();
            slots.dedup();
            pools.sort_unstable();
            pools.dedup();
        }
    }

    /// Slot `id`'s line and its pools' lines served: what a step that frees units of the
    /// slot does.
    pub(super) fn serve_line(&mut self, id: SlotId, now: Timestamp) {
        let pools = self.pools_of(id);
        self.serve(&[id], &pools, now);
    }

    /// `head` offered: its hold placed, its units taken from its slot.
    fn offer(&mut self, head: &WaitlistEntry, now: Timestamp) {
        let Some(index) = self.slots.iter().position(|s| s.id == head.slot_id) else {
            return;
        };
        if self.slots[index].remaining < head.quantity {
            let units = self.reclaim(head.slot_id, now);
            self.slots[index].remaining += units;
        }
        self.slots[index].remaining -= head.quantity;
        let Some(entry) = self
            .entries
            .iter_mut()
            .find(|e| e.entry.entry_id == head.entry_id)
        else {
            return;
        };
        entry.waiting = false;
        let key = entry.key;
        self.holds.push(head.offer(now));
        self.keys.insert(key, self.holds.len() - 1);
    }

    fn entry_id(&self, index: usize) -> EntryId {
        self.entries.get(index).map_or(
            EntryId(self.holds.iter().map(|h| h.hold_id.0).max().unwrap_or(0) + 5_000),
            |e| e.entry.entry_id,
        )
    }

    /// The expected result of a join; `made` is the entry the store made, if it made one.
    fn join(&mut self, op: &ModelOp, now: Timestamp, made: Option<EntryId>) -> Seen {
        let ModelOp::Join {
            slot,
            key,
            quantity,
            owner: owner_number,
            priority,
            lifetime,
        } = *op
        else {
            return Seen::Error("(not a join)");
        };
        if !(1..=1000).contains(&quantity) {
            return Seen::Error("invalid_quantity");
        }
        let lifetime = match pick_lifetime(lifetime) {
            Ok(lifetime) => lifetime,
            Err(refused) => return refused,
        };
        let slot_id = self.slot_id(slot);
        let owner = owner(owner_number);
        if let Some(index) = self.waiting_key(key) {
            let entry = self.entries[index].entry.clone();
            let same = entry.slot_id == slot_id
                && entry.quantity == quantity
                && entry.owner == owner
                && entry.priority == priority;
            if same {
                let position = self.place(entry.entry_id).unwrap_or(u32::MAX);
                return Seen::Waiting {
                    entry,
                    position,
                    replayed: true,
                };
            }
            return Seen::KeyReused((entry.owner == owner).then_some(entry.offer_id()));
        }
        if let Some(&existing) = self.keys.get(&key) {
            let hold = &self.holds[existing];
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
        let Some(model_slot) = self.slots.get(slot).filter(|s| s.removed_at.is_none()) else {
            return Seen::Error("slot_not_found");
        };
        if model_slot.closed || model_slot.starts_at <= now {
            return Seen::Error("slot_closed");
        }
        let pool_capacity = (self.pools.iter())
            .filter(|p| p.slots.contains(&slot_id))
            .map(|p| p.capacity)
            .fold(i32::MAX, i32::min);
        if quantity > model_slot.capacity.min(pool_capacity) {
            return Seen::Error("quantity_exceeds_capacity");
        }
        let Some(entry_id) = made else {
            return Seen::Error("(model expected a new entry here)");
        };
        let entry = WaitlistEntry {
            entry_id,
            slot_id,
            quantity,
            owner,
            priority,
            joined_at: now,
            offer_micros: lifetime.num_microseconds().unwrap_or(i64::MAX),
        };
        self.entries.push(ModelEntry {
            entry: entry.clone(),
            key,
            waiting: true,
        });
        self.serve_line(slot_id, now);
        match self.place(entry_id) {
            Some(position) => Seen::Waiting {
                entry,
                position,
                replayed: false,
            },
            None => Seen::Hold {
                hold: entry.offer(now),
                replayed: false,
            },
        }
    }

    /// The expected result of leaving (`leave`) or reading entry number `index` in scope
    /// number `scope`.
    fn entry_op(&mut self, index: usize, scope: u8, leave: bool, now: Timestamp) -> Seen {
        let entry_id = self.entry_id(index);
        let Some(found) = self
            .entries
            .iter()
            .position(|e| e.waiting && e.entry.entry_id == entry_id)
        else {
            return Seen::Error("entry_not_found");
        };
        let entry = self.entries[found].entry.clone();
        let offer = entry.offer(now);
        if !scope_of(scope, Some(&offer)).admits(&offer) {
            return Seen::Error("entry_not_found");
        }
        if !leave {
            return Seen::Entry(entry.clone(), self.place(entry_id));
        }
        self.entries[found].waiting = false;
        self.serve_line(entry.slot_id, now);
        Seen::Entry(entry, None)
    }
}

/// The step check of the waitlist sequences: joins, leaves, places and reclaims run against
/// the store and the model.
pub(super) struct WaitlistSteps;

#[async_trait::async_trait]
impl<S: Store + WaitlistStore + EventStore> StepCheck<S> for WaitlistSteps {
    async fn extra_op(
        &mut self,
        engine: &BookingEngine<S>,
        model: &mut Model,
        op: &ModelOp,
        now: Timestamp,
    ) -> Option<(Seen, Seen)> {
        match *op {
            ModelOp::Join {
                slot,
                key,
                quantity,
                owner: owner_number,
                priority,
                lifetime,
            } => {
                let mut request =
                    NewHold::new(model.slot_id(slot), format!("key-{key}")).quantity(quantity);
                if let Some(owner) = owner(owner_number) {
                    request = request.owner(owner);
                }
                if let Some(lifetime) = duration_of(lifetime) {
                    request = request.lifetime(lifetime);
                }
                let (actual, made) = match engine.join_waitlist(request, priority).await {
                    Ok(Joined::Held { hold, replayed }) => {
                        let made = (!replayed).then_some(EntryId(hold.hold_id.0));
                        (Seen::Hold { hold, replayed }, made)
                    }
                    Ok(Joined::Waiting {
                        entry,
                        position,
                        replayed,
                    }) => {
                        let made = (!replayed).then_some(entry.entry_id);
                        let seen = Seen::Waiting {
                            entry,
                            position,
                            replayed,
                        };
                        (seen, made)
                    }
                    Err(BookingError::IdempotencyKeyReused {
                        existing_hold_id, ..
                    }) => (Seen::KeyReused(existing_hold_id), None),
                    Err(error) => (Seen::Error(error.code()), None),
                };
                Some((model.join(op, now, made), actual))
            }
            ModelOp::Leave { entry, scope } | ModelOp::EntryPlace { entry, scope } => {
                let leave = matches!(op, ModelOp::Leave { .. });
                let entry_id = model.entry_id(entry);
                let scope_used = model
                    .entries
                    .get(entry)
                    .map(|e| e.entry.offer(now))
                    .map_or_else(|| scope_of(scope, None), |h| scope_of(scope, Some(&h)));
                let actual = if leave {
                    match engine.leave_waitlist(&scope_used, entry_id).await {
                        Ok(entry) => Seen::Entry(entry, None),
                        Err(error) => Seen::Error(error.code()),
                    }
                } else {
                    match engine.waitlist_entry(&scope_used, entry_id).await {
                        Ok((entry, place)) => Seen::Entry(entry, Some(place)),
                        Err(error) => Seen::Error(error.code()),
                    }
                };
                Some((model.entry_op(entry, scope, leave, now), actual))
            }
            ModelOp::ReclaimExpired => Some(reclaim_step(engine, model, now).await),
            _ => None,
        }
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

/// The generator of one waitlist operation: join (some with a priority or a lifetime of its
/// own), leave, read a place.
fn waitlist_op() -> impl Strategy<Value = ModelOp> {
    let quantity = prop_oneof![6 => Just(1i32), 3 => 2..=3i32, 1 => Just(0i32)];
    prop_oneof![
        5 => (0..3usize, 0..8u8, quantity, 0..3u8, prop_oneof![4 => Just(0i32), 1 => Just(5i32)], lifetime())
            .prop_map(|(slot, key, quantity, owner, priority, lifetime)| ModelOp::Join { slot, key, quantity, owner, priority, lifetime }),
        2 => (0..8usize, 0..5u8).prop_map(|(entry, scope)| ModelOp::Leave { entry, scope }),
        1 => (0..8usize, 0..5u8).prop_map(|(entry, scope)| ModelOp::EntryPlace { entry, scope }),
    ]
}

/// Random sequences of lifecycle, administration and waitlist operations and reclaims,
/// against the model: every answer, the state after each step and the invariant.
///
/// # Panics
///
/// When a sequence's outcomes or state differ from the model's.
pub fn check_waitlists<S, F, Fut>(factory: F, cases: u32, max_len: usize)
where
    S: Store + WaitlistStore + EventStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let step = prop_oneof![
        12 => lifecycle_op(),
        3 => admin_op(),
        8 => waitlist_op(),
        2 => Just(ModelOp::ReclaimExpired),
    ];
    let sequences = after_opening(proptest::collection::vec(step, 1..=max_len));
    run_property(
        "waitlist model check",
        cases,
        2,
        &sequences,
        factory,
        |store, ops| async move { run_checked(store, &ops, &mut WaitlistSteps).await },
    );
}

/// Random sequences of lifecycle, administration, booking, pool and waitlist operations
/// against the model: lines of slots in pools, served by the steps that free their pools'
/// units too. No sweeper reclaims here (a store gives a pool's expired holds back at moments
/// of its own, so the state is compared as it reads, as in [`check_pools`]).
///
/// # Panics
///
/// When a sequence's outcomes or state differ from the model's.
///
/// [`check_pools`]: super::check_pools
pub fn check_pool_waitlists<S, F, Fut>(factory: F, cases: u32, max_len: usize)
where
    S: Store + WaitlistStore + EventStore + BookingStore + PoolStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let step = prop_oneof![
        10 => lifecycle_op(),
        2 => admin_op(),
        3 => booking_op(),
        5 => pool_op(),
        8 => waitlist_op(),
    ];
    // Both opening slots in a pool of 2 to 4 units, so lines of pooled slots form early.
    let sequences = (
        2..=4i32,
        after_opening(proptest::collection::vec(step, 1..=max_len)),
    )
        .prop_map(|(capacity, ops)| {
            let mut all = ops;
            let pool = [
                ModelOp::CreatePool { capacity },
                ModelOp::PoolMember {
                    pool: 0,
                    slot: 0,
                    attach: true,
                },
                ModelOp::PoolMember {
                    pool: 0,
                    slot: 1,
                    attach: true,
                },
            ];
            all.splice(2..2, pool);
            all
        });
    let run = |store, ops: Vec<ModelOp>| async move {
        let mut steps = PoolSteps(BookingSteps(WaitlistSteps));
        run_checked(store, &ops, &mut steps).await
    };
    let name = "pool waitlist model check";
    run_pinned(name, 2, pinned_pool_waitlists(), &factory, &run);
    run_property(name, cases, 2, &sequences, factory, run);
}

/// Sequences this model found failing on a store once (shrunk), run first on every store:
/// a capacity set to what it was serves no line; a newcomer's hold or booking on a slot whose
/// pool has a line waiting is refused, and changes nothing: no reclaim serves the line; an attach that only the
/// expired holds of the slot made short succeeds.
fn pinned_pool_waitlists() -> Vec<Vec<ModelOp>> {
    use ModelOp::{Advance, Book, CreatePool, CreateSlot, Hold, Join, PoolMember, SetPoolCapacity};
    let opening = || {
        vec![
            CreateSlot {
                capacity: 4,
                starts_in: 3600,
                resource: 1,
            },
            CreateSlot {
                capacity: 1,
                starts_in: 600,
                resource: 0,
            },
            CreatePool { capacity: 2 },
            PoolMember {
                pool: 0,
                slot: 0,
                attach: true,
            },
            PoolMember {
                pool: 0,
                slot: 1,
                attach: true,
            },
        ]
    };
    let join = |slot, key, lifetime| Join {
        slot,
        key,
        quantity: 1,
        owner: 0,
        priority: 0,
        lifetime,
    };
    let unchanged_capacity = [
        join(1, 0, None),
        join(1, 1, Some(1)),
        join(0, 2, Some(1)),
        SetPoolCapacity {
            pool: 0,
            change: crate::CapacityChange::To(5),
        },
        Advance {
            micros: 300_000_000,
        },
        SetPoolCapacity {
            pool: 0,
            change: crate::CapacityChange::To(5),
        },
    ];
    let hold_behind_a_pool_line = [
        join(0, 1, Some(1)),
        Hold {
            slot: 0,
            key: 0,
            quantity: 1,
            owner: 0,
            lifetime: Some(1),
        },
        join(1, 4, Some(1)),
        Advance { micros: 1_000_000 },
        Hold {
            slot: 0,
            key: 2,
            quantity: 1,
            owner: 0,
            lifetime: None,
        },
    ];
    let booking_behind_a_pool_line = [
        join(0, 1, Some(1)),
        Hold {
            slot: 0,
            key: 0,
            quantity: 1,
            owner: 0,
            lifetime: Some(1),
        },
        join(1, 4, Some(1)),
        Advance { micros: 1_000_000 },
        Book {
            lines: vec![(0, 1)],
            key: 2,
            owner: 0,
            lifetime: None,
        },
    ];
    let attach_after_expiry = [
        CreatePool { capacity: 0 },
        join(1, 0, Some(1)),
        join(1, 1, Some(1)),
        Advance { micros: 1_000_000 },
        PoolMember {
            pool: 1,
            slot: 1,
            attach: true,
        },
    ];
    [
        &unchanged_capacity[..],
        &hold_behind_a_pool_line[..],
        &booking_behind_a_pool_line[..],
        &attach_after_expiry[..],
    ]
    .into_iter()
    .map(|tail| opening().into_iter().chain(tail.iter().cloned()).collect())
    .collect()
}
