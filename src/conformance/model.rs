//! Model-based property test: random operation sequences run against a store through the
//! engine and against a plain sequential model, which decides the expected outcome of every
//! step. After every step the store's slots and holds must equal the model's, which implies the
//! capacity invariant; the invariant is also checked on its own so a failure names it.
//!
//! Backends run it with [`check`]; `PROPTEST_CASES` raises the case count.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;

use chrono::Duration;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::kit::SlotTally;
use super::{Fixture, HOLD_TTL, MAX_HOLD_LIFE, MAX_REQUESTED_TTL, MIN_REQUESTED_TTL};
use crate::admin::{SlotCursor, SlotFilter, SlotPageRequest, SlotSummary};
use crate::engine::{BookingEngine, NewHold};
use crate::error::BookingError;
use crate::events::{EventKind, EventStore};
use crate::model::{
    AvailabilityQuery, Hold, HoldId, HoldPage, HoldStatus, NewSlot, OwnerId, PageRequest,
    ResourceId, Slot, SlotId, Timestamp,
};
use crate::scope::Scope;
use crate::store::Store;
use crate::transaction::{TransactionWrites, TransactionalStore, Within};
use crate::Clock;

/// The owners a sequence draws from: 0 is anonymous.
const OWNERS: [Option<&str>; 3] = [None, Some("alice"), Some("bob")];

/// The resources a sequence draws from: 0 is none (or, in a filter, every resource).
const RESOURCES: [Option<&str>; 3] = [None, Some("room-a"), Some("room-b")];

/// One step of a generated sequence. Indexes refer to slots and holds created earlier in the
/// sequence; an index past the end means an id the store never assigned.
#[derive(Clone, Debug)]
pub enum Op {
    /// Create a slot of this capacity starting this many seconds from now.
    CreateSlot {
        /// Units.
        capacity: i32,
        /// Seconds from now to `starts_at`.
        starts_in: i64,
        /// Resource number, 0 for none.
        resource: u8,
    },
    /// Set slot number `slot`'s capacity (some out of bounds on purpose).
    SetCapacity {
        /// Slot index.
        slot: usize,
        /// The new capacity.
        capacity: i64,
    },
    /// Close (`true`) or reopen slot number `slot`'s sales.
    SetClosed {
        /// Slot index.
        slot: usize,
        /// Close or reopen.
        closed: bool,
    },
    /// Remove slot number `slot`.
    Remove {
        /// Slot index.
        slot: usize,
    },
    /// Read every page of the operator's listing, `limit` at a time, narrowed to resource
    /// number `resource` (0: every slot).
    ListSlots {
        /// Page size.
        limit: u32,
        /// Resource number, 0 for every slot.
        resource: u8,
    },
    /// Hold `quantity` units of slot `slot` with key number `key` (keys repeat on purpose)
    /// for owner number `owner` (0: anonymous), with a lifetime of its own if given.
    Hold {
        /// Slot index.
        slot: usize,
        /// Key number.
        key: u8,
        /// Units asked for (some out of bounds on purpose).
        quantity: i64,
        /// Owner number, 0 for anonymous.
        owner: u8,
        /// Requested lifetime in seconds (some out of bounds on purpose).
        lifetime: Option<u64>,
    },
    /// Confirm hold number `hold` in scope number `scope`.
    Confirm {
        /// Hold index.
        hold: usize,
        /// Scope number: 0 anonymous, 1 alice, 2 bob, 3 back office, 4 and up the hold's own.
        scope: u8,
    },
    /// Cancel hold number `hold` in scope number `scope`.
    Cancel {
        /// Hold index.
        hold: usize,
        /// Scope number.
        scope: u8,
    },
    /// Renew hold number `hold` in scope number `scope`, for `lifetime` seconds if given.
    Renew {
        /// Hold index.
        hold: usize,
        /// Scope number.
        scope: u8,
        /// Requested lifetime in seconds.
        lifetime: Option<u64>,
    },
    /// Read hold number `hold` in scope number `scope`.
    Get {
        /// Hold index.
        hold: usize,
        /// Scope number.
        scope: u8,
    },
    /// Read every page of owner number `owner`'s holds, `limit` at a time.
    OwnerHolds {
        /// Owner number, 1 or 2.
        owner: u8,
        /// Page size.
        limit: u32,
    },
    /// Read every page of slot number `slot`'s roster, `limit` at a time.
    Roster {
        /// Slot index.
        slot: usize,
        /// Page size.
        limit: u32,
    },
    /// Read the availability listing, narrowed to resource number `resource` (0: every slot).
    Availability {
        /// Resource number, 0 for every slot.
        resource: u8,
    },
    /// Move the clock forward.
    Advance {
        /// Microseconds.
        micros: i64,
    },
    /// Move the clock to hold number `hold`'s `expires_at` plus `offset` microseconds (if
    /// that is later than now): the boundary cases.
    ToExpiry {
        /// Hold index.
        hold: usize,
        /// -1, 0 or +1 microseconds.
        offset: i64,
    },
    /// Reclaim every expired hold (an [`EventStore`] sweep; drawn only by [`check_events`]).
    ReclaimExpired,
    /// Take or extend the lease of the consumer `leased` for [`LEASE`] as holder number
    /// `holder` (drawn only by [`check_events`]).
    Lease {
        /// Holder number, 1 or 2.
        holder: u8,
    },
    /// Release that lease as holder number `holder`.
    Release {
        /// Holder number, 1 or 2.
        holder: u8,
    },
    /// Acknowledge, for the consumer `leased` as holder number `holder`, every event the
    /// model's reader has seen so far (fenced by the lease).
    AcknowledgeLeased {
        /// Holder number, 1 or 2.
        holder: u8,
    },
}

/// The lease [`Op::Lease`] takes.
pub const LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// Scope numbers: 0 anonymous, 1 alice, 2 bob, 3 back office, 4 and up the scope of the hold's
/// own owner (so most calls land in scope).
fn scope_of(number: u8, hold: Option<&Hold>) -> Scope {
    match number {
        0 => Scope::Anonymous,
        1 | 2 => Scope::Owner(owner(number).unwrap_or_else(|| unreachable!())),
        3 => Scope::BackOffice,
        _ => Scope::of(hold.and_then(|h| h.owner.clone())),
    }
}

fn resource(number: u8) -> Option<ResourceId> {
    RESOURCES
        .get(usize::from(number))
        .copied()
        .flatten()
        .and_then(|r| ResourceId::new(r).ok())
}

fn owner(number: u8) -> Option<OwnerId> {
    OWNERS
        .get(usize::from(number))
        .copied()
        .flatten()
        .and_then(|o| OwnerId::new(o).ok())
}

fn lifetime() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        6 => Just(None),
        1 => Just(Some(0)),
        2 => Just(Some(1)),
        2 => Just(Some(120)),
        2 => Just(Some(MAX_REQUESTED_TTL.as_secs())),
        1 => Just(Some(MAX_REQUESTED_TTL.as_secs() + 1)),
    ]
}

/// The generator for one operation.
pub fn op() -> impl Strategy<Value = Op> {
    let ttl = HOLD_TTL.as_micros() as i64;
    let quantity = prop_oneof![8 => Just(1i64), 4 => 2..=3i64, 1 => Just(0i64), 1 => Just(7i64), 1 => Just(1001i64)];
    let capacity = prop_oneof![8 => 1..=8i64, 1 => Just(0i64), 1 => Just(-1i64), 1 => Just(i64::from(i32::MAX) + 1)];
    prop_oneof![
        1 => (1..=6i32, 1..=40i64, 0..3u8).prop_map(|(capacity, m, resource)| Op::CreateSlot { capacity, starts_in: m * 60, resource }),
        2 => (0..5usize, capacity).prop_map(|(slot, capacity)| Op::SetCapacity { slot, capacity }),
        1 => (0..5usize, any::<bool>()).prop_map(|(slot, closed)| Op::SetClosed { slot, closed }),
        1 => (0..5usize).prop_map(|slot| Op::Remove { slot }),
        1 => (1..=3u32, 0..3u8).prop_map(|(limit, resource)| Op::ListSlots { limit, resource }),
        6 => (0..4usize, 0..8u8, quantity, 0..3u8, lifetime())
            .prop_map(|(slot, key, quantity, owner, lifetime)| Op::Hold { slot, key, quantity, owner, lifetime }),
        2 => (0..10usize, 0..7u8).prop_map(|(hold, scope)| Op::Confirm { hold, scope }),
        2 => (0..10usize, 0..7u8).prop_map(|(hold, scope)| Op::Cancel { hold, scope }),
        2 => (0..10usize, 0..7u8, lifetime()).prop_map(|(hold, scope, lifetime)| Op::Renew { hold, scope, lifetime }),
        1 => (0..10usize, 0..7u8).prop_map(|(hold, scope)| Op::Get { hold, scope }),
        1 => (1..3u8, 1..=3u32).prop_map(|(owner, limit)| Op::OwnerHolds { owner, limit }),
        1 => (0..4usize, 1..=3u32).prop_map(|(slot, limit)| Op::Roster { slot, limit }),
        1 => (0..3u8).prop_map(|resource| Op::Availability { resource }),
        2 => prop_oneof![Just(1i64), Just(1_000_000), Just(60_000_000), Just(ttl - 1), Just(ttl), Just(ttl + 1), Just(ttl * 3)]
            .prop_map(|micros| Op::Advance { micros }),
        1 => (0..10usize, -1..=1i64).prop_map(|(hold, offset)| Op::ToExpiry { hold, offset }),
    ]
}

/// A sequence: two slots to start with, then `1..=max_len` random operations.
pub fn sequence(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    after_opening(proptest::collection::vec(op(), 1..=max_len))
}

/// Every sequence starts with two slots, so most operations have something to act on.
fn after_opening(ops: impl Strategy<Value = Vec<Op>>) -> impl Strategy<Value = Vec<Op>> {
    ops.prop_map(|ops| {
        let mut all = vec![
            Op::CreateSlot {
                capacity: 4,
                starts_in: 3600,
                resource: 1,
            },
            Op::CreateSlot {
                capacity: 1,
                starts_in: 600,
                resource: 0,
            },
        ];
        all.extend(ops);
        all
    })
}

#[derive(Debug, Clone)]
struct ModelSlot {
    id: SlotId,
    starts_at: Timestamp,
    ends_at: Timestamp,
    capacity: i32,
    remaining: i32,
    resource: Option<ResourceId>,
    closed: bool,
    removed_at: Option<Timestamp>,
}

impl ModelSlot {
    fn as_slot(&self) -> Slot {
        Slot {
            slot_id: self.id,
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            capacity: self.capacity,
            remaining: self.remaining,
            resource: self.resource.clone(),
            closed: self.closed,
            removed_at: self.removed_at,
        }
    }
}

/// The sequential model of the booking rules (the outcome table of the crate docs).
#[derive(Debug, Default, Clone)]
struct Model {
    slots: Vec<ModelSlot>,
    holds: Vec<Hold>,
    keys: HashMap<u8, usize>,
}

/// What an operation returned, with store-assigned ids kept as they are.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Hold {
        hold: Hold,
        replayed: bool,
    },
    /// `idempotency_key_reused`, with the existing hold's id when it may be shown.
    KeyReused(Option<HoldId>),
    Listing(Vec<(SlotId, i32)>),
    /// Every page of a query, in order.
    Pages(Vec<Vec<Hold>>),
    /// Every page of the operator's listing, in order.
    SlotPages(Vec<Vec<SlotSummary>>),
    /// A slot after a change.
    Slot(Slot),
    /// `capacity_taken`, with the units taken.
    CapacityTaken(i32),
    /// `slot_in_use`, with the units held and confirmed.
    InUse(i32, i32),
    /// The holds a sweep reclaimed, by id.
    Reclaimed(Vec<HoldId>),
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

fn duration_of(seconds: Option<u64>) -> Option<std::time::Duration> {
    seconds.map(std::time::Duration::from_secs)
}

/// The lifetime the engine picks, or its refusal.
fn pick_lifetime(seconds: Option<u64>) -> Result<Duration, Seen> {
    let lifetime = duration_of(seconds).unwrap_or(HOLD_TTL);
    if lifetime < MIN_REQUESTED_TTL || lifetime > MAX_REQUESTED_TTL {
        return Err(Seen::Error("invalid_lifetime"));
    }
    Ok(Duration::from_std(lifetime).unwrap_or(Duration::MAX))
}

/// The pages a walk `limit` at a time over `items` (in listing order) yields: full pages,
/// then the last one, which is empty when the full ones took every item.
fn pages<T: Clone>(items: Vec<T>, limit: u32) -> Vec<Vec<T>> {
    let limit = limit as usize;
    let mut pages: Vec<Vec<T>> = items.chunks(limit).map(<[T]>::to_vec).collect();
    if pages.last().is_none_or(|last| last.len() == limit) {
        pages.push(Vec::new());
    }
    pages
}

impl Model {
    fn slot_id(&self, index: usize) -> SlotId {
        self.slots.get(index).map_or(
            SlotId(self.slots.iter().map(|s| s.id.0).max().unwrap_or(0) + 1000),
            |s| s.id,
        )
    }

    fn hold_id(&self, index: usize) -> HoldId {
        if self.holds.is_empty() {
            return HoldId(1_000_000);
        }
        self.holds[index % self.holds.len()].hold_id
    }

    fn hold_index(&self, index: usize) -> Option<usize> {
        (!self.holds.is_empty()).then(|| index % self.holds.len())
    }

    fn scope(&self, number: u8, index: usize) -> Scope {
        scope_of(number, self.hold_index(index).map(|i| &self.holds[i]))
    }

    /// The hold `index` if it is in `scope`.
    fn scoped(&self, index: usize, scope: &Scope) -> Option<usize> {
        self.hold_index(index)
            .filter(|&i| scope.admits(&self.holds[i]))
    }

    /// The expected result of placing a hold; `hold_id` is what the store assigned if it
    /// created one (the model cannot know ids in advance).
    fn hold(&mut self, op: &Op, now: Timestamp, new_id: Option<HoldId>) -> Seen {
        let Op::Hold {
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
        let quantity = quantity as i32;
        let lifetime = match pick_lifetime(lifetime) {
            Ok(lifetime) => lifetime,
            Err(refused) => return refused,
        };
        let owner = owner(owner_number);
        if let Some(&existing) = self.keys.get(&key) {
            let hold = &self.holds[existing];
            if hold.slot_id == slot_id && hold.quantity == quantity && hold.owner == owner {
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
        let expired =
            |h: &Hold| h.slot_id == slot_id && h.status == HoldStatus::Held && h.expires_at <= now;
        if model_slot.remaining < quantity {
            let free: i32 = self
                .holds
                .iter()
                .filter(|h| expired(h))
                .map(|h| h.quantity)
                .sum();
            // Reclaim only when it makes the hold fit: a refused hold changes nothing.
            if model_slot.remaining + free >= quantity {
                for hold in self.holds.iter_mut().filter(|h| expired(h)) {
                    hold.status = HoldStatus::Expired;
                }
                self.slots[slot].remaining += free;
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

    fn confirm(&mut self, index: usize, scope: &Scope, now: Timestamp) -> Seen {
        let Some(i) = self.scoped(index, scope) else {
            return Seen::Error("hold_not_found");
        };
        let hold = &mut self.holds[i];
        match hold.status_at(now) {
            HoldStatus::Held => {
                hold.status = HoldStatus::Confirmed;
                hold.confirmed_at = Some(now);
            }
            HoldStatus::Confirmed => {}
            HoldStatus::Cancelled => return Seen::Error("hold_cancelled"),
            HoldStatus::Expired => return Seen::Error("hold_expired"),
        }
        Seen::Hold {
            hold: hold.clone().at(now),
            replayed: false,
        }
    }

    fn cancel(&mut self, index: usize, scope: &Scope, now: Timestamp) -> Seen {
        let Some(i) = self.scoped(index, scope) else {
            return Seen::Error("hold_not_found");
        };
        let hold = &mut self.holds[i];
        match hold.status_at(now) {
            HoldStatus::Held | HoldStatus::Confirmed => {
                hold.status = HoldStatus::Cancelled;
                hold.cancelled_at = Some(now);
                let (slot_id, quantity) = (hold.slot_id, hold.quantity);
                if let Some(slot) = self.slots.iter_mut().find(|s| s.id == slot_id) {
                    slot.remaining += quantity;
                }
            }
            HoldStatus::Cancelled => {}
            HoldStatus::Expired => return Seen::Error("hold_expired"),
        }
        Seen::Hold {
            hold: self.holds[i].clone().at(now),
            replayed: false,
        }
    }

    fn renew(
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
        let Some(i) = self.scoped(index, scope) else {
            return Seen::Error("hold_not_found");
        };
        let hold = &mut self.holds[i];
        match hold.status_at(now) {
            HoldStatus::Held => {
                let cap =
                    hold.created_at + Duration::from_std(MAX_HOLD_LIFE).unwrap_or(Duration::MAX);
                hold.expires_at = (now + lifetime).min(cap).max(hold.expires_at);
            }
            HoldStatus::Confirmed => {}
            HoldStatus::Cancelled => return Seen::Error("hold_cancelled"),
            HoldStatus::Expired => return Seen::Error("hold_expired"),
        }
        Seen::Hold {
            hold: hold.clone().at(now),
            replayed: false,
        }
    }

    fn get(&self, index: usize, scope: &Scope, now: Timestamp) -> Seen {
        match self.scoped(index, scope) {
            Some(i) => Seen::Hold {
                hold: self.holds[i].clone().at(now),
                replayed: false,
            },
            None => Seen::Error("hold_not_found"),
        }
    }

    /// Every page of the holds `keep` selects, by id, resolved at `now`.
    fn pages(&self, keep: impl Fn(&Hold) -> bool, limit: u32, now: Timestamp) -> Seen {
        let mut holds: Vec<Hold> = self
            .holds
            .iter()
            .filter(|h| keep(h))
            .map(|h| h.clone().at(now))
            .collect();
        holds.sort_by_key(|h| h.hold_id);
        Seen::Pages(pages(holds, limit))
    }

    /// Units of slot `id`'s holds stored as held: (active, expired) at `now`.
    fn held_units(&self, id: SlotId, now: Timestamp) -> (i32, i32) {
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

    fn confirmed_units(&self, id: SlotId) -> i32 {
        self.holds
            .iter()
            .filter(|h| h.slot_id == id && h.status == HoldStatus::Confirmed)
            .map(|h| h.quantity)
            .sum()
    }

    /// Marks slot `id`'s expired held holds expired; returns their units.
    fn reclaim(&mut self, id: SlotId, now: Timestamp) -> i32 {
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

    /// A change of slot `index` that takes free units: applied as stored, or after reclaiming
    /// expired holds when only that makes it fit (`fits` given the extra free units), else
    /// refused by `refuse`.
    fn take_free_units(
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

    fn set_capacity(&mut self, index: usize, capacity: i64, now: Timestamp) -> Seen {
        let Ok(capacity) =
            i32::try_from(capacity).map_err(|_| ()).and_then(
                |c| {
                    if c >= 1 {
                        Ok(c)
                    } else {
                        Err(())
                    }
                },
            )
        else {
            return Seen::Error("invalid_slot");
        };
        self.take_free_units(
            index,
            now,
            |s, extra| {
                i64::from(s.remaining) + extra + i64::from(capacity) - i64::from(s.capacity) >= 0
            },
            |s| {
                s.remaining += capacity - s.capacity;
                s.capacity = capacity;
            },
            |model, id| {
                let (active, _) = model.held_units(id, now);
                Seen::CapacityTaken(active + model.confirmed_units(id))
            },
        )
    }

    fn remove(&mut self, index: usize, now: Timestamp) -> Seen {
        self.take_free_units(
            index,
            now,
            |s, extra| i64::from(s.remaining) + extra == i64::from(s.capacity),
            |s| s.removed_at = Some(now),
            |model, id| Seen::InUse(model.held_units(id, now).0, model.confirmed_units(id)),
        )
    }

    fn set_closed(&mut self, index: usize, closed: bool) -> Seen {
        match self.slots.get_mut(index).filter(|s| s.removed_at.is_none()) {
            Some(slot) => {
                slot.closed = closed;
                Seen::Slot(slot.as_slot())
            }
            None => Seen::Error("slot_not_found"),
        }
    }

    /// Every page of the operator's listing, narrowed to `only`.
    fn list_slots(&self, limit: u32, only: Option<&ResourceId>, now: Timestamp) -> Seen {
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

    fn availability(&self, now: Timestamp, only: Option<&ResourceId>) -> Seen {
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
                    let expired: i32 = self
                        .holds
                        .iter()
                        .filter(|h| {
                            h.slot_id == s.id && h.status == HoldStatus::Held && h.expires_at <= now
                        })
                        .map(|h| h.quantity)
                        .sum();
                    (s.id, s.remaining + expired)
                })
                .collect(),
        )
    }
}

fn seen_hold(result: Result<crate::HoldPlaced, BookingError>) -> Seen {
    match result {
        Ok(placed) => Seen::Hold {
            hold: placed.hold,
            replayed: placed.replayed,
        },
        Err(BookingError::IdempotencyKeyReused {
            existing_hold_id, ..
        }) => Seen::KeyReused(existing_hold_id),
        Err(error) => Seen::Error(error.code()),
    }
}

fn seen_slot(result: Result<Slot, BookingError>) -> Seen {
    match result {
        Ok(slot) => Seen::Slot(slot),
        Err(BookingError::CapacityTaken { taken, .. }) => Seen::CapacityTaken(taken),
        Err(BookingError::SlotInUse {
            held, confirmed, ..
        }) => Seen::InUse(held, confirmed),
        Err(error) => Seen::Error(error.code()),
    }
}

/// Walks every page of the operator's listing `limit` at a time, checking each page's limit
/// and cursor as it comes.
async fn walk_slots<S: Store>(engine: &BookingEngine<S>, filter: &SlotFilter, limit: u32) -> Seen {
    let mut all = Vec::new();
    let mut page = SlotPageRequest::first(limit);
    loop {
        let listed = match engine.list_slots(filter, page).await {
            Ok(listed) => listed,
            Err(error) => return Seen::Error(error.code()),
        };
        let full = listed.slots.len() == limit as usize;
        let cursor = listed.slots.last().filter(|_| full).map(|s| SlotCursor {
            starts_at: s.starts_at,
            slot_id: s.slot_id,
        });
        if listed.slots.len() > limit as usize || listed.next_after != cursor {
            return Seen::Error("(a slot page broke its limit or cursor)");
        }
        all.push(listed.slots);
        match listed.next_after {
            Some(after) if all.len() <= 1_000 => page = SlotPageRequest::after(after, limit),
            _ => return Seen::SlotPages(all),
        }
    }
}

fn seen_transition(result: Result<Hold, BookingError>) -> Seen {
    match result {
        Ok(hold) => Seen::Hold {
            hold,
            replayed: false,
        },
        Err(error) => Seen::Error(error.code()),
    }
}

/// Walks every page of a query `limit` at a time; a page is checked against the limit and
/// its cursor as it comes.
async fn walk<F, Fut>(limit: u32, mut read: F) -> Seen
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
        let full = page.holds.len() == limit as usize;
        if page.holds.len() > limit as usize
            || page.next_after != page.holds.last().filter(|_| full).map(|h| h.hold_id)
        {
            return Seen::Error("(a page broke its limit or cursor)");
        }
        after = page.next_after;
        all.push(page.holds);
        if after.is_none() || all.len() > 1_000 {
            return Seen::Pages(all);
        }
    }
}

/// A step whose outcome differed from the model's, or a broken invariant.
struct Mismatch(String);

impl fmt::Debug for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(Mismatch(format!($($msg)*)));
        }
    };
}

/// Runs one sequence against a fresh store; `Err` describes the first difference.
/// The writes a sequence makes: through the engine, or inside a caller's transaction
/// ([`Within`]).
trait Writer {
    async fn place_hold(&mut self, request: NewHold) -> Result<crate::HoldPlaced, BookingError>;
    async fn confirm_as(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError>;
    async fn cancel_as(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError>;
    async fn renew_as(
        &mut self,
        scope: &Scope,
        hold: HoldId,
        lifetime: Option<std::time::Duration>,
    ) -> Result<Hold, BookingError>;
    async fn get_hold_as(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError>;
    async fn create_slot(&mut self, slot: NewSlot) -> Result<Slot, BookingError>;
    async fn change_capacity(&mut self, slot: SlotId, capacity: i64) -> Result<Slot, BookingError>;
    async fn close_sales(&mut self, slot: SlotId) -> Result<Slot, BookingError>;
    async fn reopen_sales(&mut self, slot: SlotId) -> Result<Slot, BookingError>;
    async fn remove_slot(&mut self, slot: SlotId) -> Result<Slot, BookingError>;
}

/// Forwards every [`Writer`] method to the type's own method of the same name.
macro_rules! writer {
    (impl[$($generics:tt)*] for $ty:ty) => {
        impl<$($generics)*> Writer for $ty {
            async fn place_hold(&mut self, request: NewHold) -> Result<crate::HoldPlaced, BookingError> {
                (*self).place_hold(request).await
            }
            async fn confirm_as(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError> {
                (*self).confirm_as(scope, hold).await
            }
            async fn cancel_as(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError> {
                (*self).cancel_as(scope, hold).await
            }
            async fn renew_as(&mut self, scope: &Scope, hold: HoldId, lifetime: Option<std::time::Duration>) -> Result<Hold, BookingError> {
                (*self).renew_as(scope, hold, lifetime).await
            }
            async fn get_hold_as(&mut self, scope: &Scope, hold: HoldId) -> Result<Hold, BookingError> {
                (*self).get_hold_as(scope, hold).await
            }
            async fn create_slot(&mut self, slot: NewSlot) -> Result<Slot, BookingError> {
                (*self).create_slot(slot).await
            }
            async fn change_capacity(&mut self, slot: SlotId, capacity: i64) -> Result<Slot, BookingError> {
                (*self).change_capacity(slot, capacity).await
            }
            async fn close_sales(&mut self, slot: SlotId) -> Result<Slot, BookingError> {
                (*self).close_sales(slot).await
            }
            async fn reopen_sales(&mut self, slot: SlotId) -> Result<Slot, BookingError> {
                (*self).reopen_sales(slot).await
            }
            async fn remove_slot(&mut self, slot: SlotId) -> Result<Slot, BookingError> {
                (*self).remove_slot(slot).await
            }
        }
    };
}

writer!(impl[S: Store] for &BookingEngine<S>);
writer!(impl[S: Store, W: TransactionWrites] for Within<'_, S, W>);

/// Whether `op` writes (or reads one hold): what a transaction may run.
fn is_write(op: &Op) -> bool {
    matches!(
        op,
        Op::CreateSlot { .. }
            | Op::SetCapacity { .. }
            | Op::SetClosed { .. }
            | Op::Remove { .. }
            | Op::Hold { .. }
            | Op::Confirm { .. }
            | Op::Cancel { .. }
            | Op::Renew { .. }
            | Op::Get { .. }
    )
}

/// Runs the write `op` through `writer` and the model: the model's expectation and what the
/// writer gave.
async fn write_step(
    writer: &mut impl Writer,
    model: &mut Model,
    op: &Op,
    now: Timestamp,
) -> (Seen, Seen) {
    match *op {
        Op::CreateSlot {
            capacity,
            starts_in,
            resource: resource_number,
        } => {
            let starts_at = now + Duration::seconds(starts_in);
            let ends_at = starts_at + Duration::hours(1);
            let mut new = NewSlot::new(starts_at, ends_at, capacity);
            new.resource = resource(resource_number);
            match writer.create_slot(new).await {
                Ok(slot) => {
                    let expected = ModelSlot {
                        id: slot.slot_id,
                        starts_at,
                        ends_at,
                        capacity,
                        remaining: capacity,
                        resource: resource(resource_number),
                        closed: false,
                        removed_at: None,
                    };
                    let seen = (Seen::Slot(expected.as_slot()), Seen::Slot(slot));
                    model.slots.push(expected);
                    seen
                }
                Err(error) => (Seen::Done, Seen::Error(error.code())),
            }
        }
        Op::SetCapacity { slot, capacity } => {
            let actual = seen_slot(writer.change_capacity(model.slot_id(slot), capacity).await);
            (model.set_capacity(slot, capacity, now), actual)
        }
        Op::SetClosed { slot, closed } => {
            let slot_id = model.slot_id(slot);
            let result = if closed {
                writer.close_sales(slot_id).await
            } else {
                writer.reopen_sales(slot_id).await
            };
            (model.set_closed(slot, closed), seen_slot(result))
        }
        Op::Remove { slot } => {
            let actual = seen_slot(writer.remove_slot(model.slot_id(slot)).await);
            (model.remove(slot, now), actual)
        }
        Op::Hold {
            slot,
            key,
            quantity,
            owner: owner_number,
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
            let actual = seen_hold(writer.place_hold(request).await);
            let new_id = match &actual {
                Seen::Hold {
                    hold,
                    replayed: false,
                } => Some(hold.hold_id),
                _ => None,
            };
            (model.hold(op, now, new_id), actual)
        }
        Op::Confirm { hold, scope } => {
            let scope = model.scope(scope, hold);
            let actual = seen_transition(writer.confirm_as(&scope, model.hold_id(hold)).await);
            (model.confirm(hold, &scope, now), actual)
        }
        Op::Cancel { hold, scope } => {
            let scope = model.scope(scope, hold);
            let actual = seen_transition(writer.cancel_as(&scope, model.hold_id(hold)).await);
            (model.cancel(hold, &scope, now), actual)
        }
        Op::Renew {
            hold,
            scope,
            lifetime,
        } => {
            let scope = model.scope(scope, hold);
            let actual = seen_transition(
                writer
                    .renew_as(&scope, model.hold_id(hold), duration_of(lifetime))
                    .await,
            );
            (model.renew(hold, &scope, lifetime, now), actual)
        }
        Op::Get { hold, scope } => {
            let scope = model.scope(scope, hold);
            let actual = seen_transition(writer.get_hold_as(&scope, model.hold_id(hold)).await);
            (model.get(hold, &scope, now), actual)
        }
        _ => (Seen::Done, Seen::Error("(not a write)")),
    }
}

async fn run_sequence<S: Store>(store: S, ops: &[Op]) -> Result<(), Mismatch> {
    run_checked(store, ops, &mut NoEvents).await
}

/// What a sequence run checks beyond outcomes and state: the event log of an
/// [`EventStore`], or nothing.
#[async_trait::async_trait]
trait StepCheck<S: Store>: Send {
    /// Runs an operation only this kind of store has (`None`: not one of those).
    async fn extra_op(
        &mut self,
        engine: &BookingEngine<S>,
        model: &mut Model,
        op: &Op,
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
struct NoEvents;

#[async_trait::async_trait]
impl<S: Store> StepCheck<S> for NoEvents {
    async fn extra_op(
        &mut self,
        _: &BookingEngine<S>,
        _: &mut Model,
        _: &Op,
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

async fn run_checked<S: Store, C: StepCheck<S>>(
    store: S,
    ops: &[Op],
    checks: &mut C,
) -> Result<(), Mismatch> {
    let Fixture { engine, clock } = Fixture::new(store);
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let now = clock.now();
        let before = model.clone();
        let (expected, actual) = match *op {
            Op::ReclaimExpired
            | Op::Lease { .. }
            | Op::Release { .. }
            | Op::AcknowledgeLeased { .. } => {
                match checks.extra_op(&engine, &mut model, op, now).await {
                    Some(seen) => seen,
                    None => continue,
                }
            }
            Op::CreateSlot { .. }
            | Op::SetCapacity { .. }
            | Op::SetClosed { .. }
            | Op::Remove { .. }
            | Op::Hold { .. }
            | Op::Confirm { .. }
            | Op::Cancel { .. }
            | Op::Renew { .. }
            | Op::Get { .. } => {
                let mut writer = &engine;
                write_step(&mut writer, &mut model, op, now).await
            }
            Op::ListSlots {
                limit,
                resource: resource_number,
            } => {
                let only = resource(resource_number);
                let mut filter = SlotFilter::all();
                filter.resource = only.clone();
                let actual = walk_slots(&engine, &filter, limit).await;
                (model.list_slots(limit, only.as_ref(), now), actual)
            }
            Op::OwnerHolds {
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
            Op::Roster { slot, limit } => {
                let slot_id = model.slot_id(slot);
                let actual = walk(limit, |page| engine.slot_holds(slot_id, page)).await;
                (model.pages(|h| h.slot_id == slot_id, limit, now), actual)
            }
            Op::Availability {
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
            Op::Advance { micros } => {
                clock.advance(Duration::microseconds(micros));
                (Seen::Done, Seen::Done)
            }
            Op::ToExpiry { hold, offset } => {
                if let Some(i) = model.hold_index(hold) {
                    let target = model.holds[i].expires_at + Duration::microseconds(offset);
                    if target > now {
                        clock.set(target);
                    }
                }
                (Seen::Done, Seen::Done)
            }
        };
        ensure!(
            expected == actual,
            "step {step} {op:?}: model says {expected:?}, store gave {actual:?}"
        );
        check_state(&engine, &model, clock.now())
            .await
            .map_err(|Mismatch(m)| Mismatch(format!("after step {step} {op:?}: {m}")))?;
        checks
            .after_step(&engine, &before, &model)
            .await
            .map_err(|Mismatch(m)| Mismatch(format!("events of step {step} {op:?}: {m}")))?;
    }
    Ok(())
}

/// An event as the model predicts it: kind, slot, hold, units (or capacity), owner.
type ExpectedEvent = (EventKind, SlotId, Option<HoldId>, i32, Option<OwnerId>);

/// The events a step that turned `before` into `after` must have appended, derived from the
/// difference of the two states alone (sorted, as a step's events may come in any order).
fn expected_events(before: &Model, after: &Model) -> Vec<ExpectedEvent> {
    let mut expected = Vec::new();
    for slot in &after.slots {
        let event = |kind| (kind, slot.id, None, slot.capacity, None);
        match before.slots.iter().find(|s| s.id == slot.id) {
            None => expected.push(event(EventKind::SlotCreated)),
            Some(old) => {
                if old.capacity != slot.capacity {
                    expected.push(event(EventKind::SlotCapacityChanged));
                }
                if old.closed != slot.closed {
                    expected.push(event(if slot.closed {
                        EventKind::SlotClosed
                    } else {
                        EventKind::SlotReopened
                    }));
                }
                if old.removed_at.is_none() && slot.removed_at.is_some() {
                    expected.push(event(EventKind::SlotRemoved));
                }
            }
        }
    }
    for hold in &after.holds {
        let event = |kind| {
            (
                kind,
                hold.slot_id,
                Some(hold.hold_id),
                hold.quantity,
                hold.owner.clone(),
            )
        };
        let Some(old) = before.holds.iter().find(|h| h.hold_id == hold.hold_id) else {
            expected.push(event(EventKind::HoldPlaced));
            continue;
        };
        match (old.status, hold.status) {
            (HoldStatus::Held, HoldStatus::Held) if old.expires_at != hold.expires_at => {
                expected.push(event(EventKind::HoldRenewed));
            }
            (HoldStatus::Held, HoldStatus::Confirmed) => {
                expected.push(event(EventKind::HoldConfirmed));
            }
            (HoldStatus::Held | HoldStatus::Confirmed, HoldStatus::Cancelled) => {
                expected.push(event(EventKind::HoldCancelled));
            }
            (HoldStatus::Held, HoldStatus::Expired) => {
                expected.push(event(EventKind::HoldExpired));
            }
            _ => {}
        }
    }
    expected.sort_by_key(|e| (e.0.as_str(), e.1, e.2));
    expected
}

/// The event log checked against the model after every step, through one consumer that
/// acknowledges what it read.
struct EventsMatchTheModel {
    consumer: crate::model::ConsumerId,
    last: Option<crate::events::EventPosition>,
    /// The model of the consumer `leased`: its lease (holder number, end) and its cursor.
    lease: Option<(u8, Timestamp)>,
    leased_cursor: Option<crate::events::EventPosition>,
}

impl EventsMatchTheModel {
    fn new() -> Self {
        EventsMatchTheModel {
            consumer: crate::model::ConsumerId::new("model").expect("a valid consumer id"),
            last: None,
            lease: None,
            leased_cursor: None,
        }
    }

    /// The lease operations against the model of the consumer `leased`: a lease is granted
    /// when free, lapsed or already the holder's; a release by its holder frees it; a fenced
    /// acknowledgement moves the cursor (never back) only for the holder.
    async fn lease_op<S: EventStore>(
        &mut self,
        engine: &BookingEngine<S>,
        op: &Op,
        now: Timestamp,
    ) -> Option<(Seen, Seen)> {
        let leased = crate::model::ConsumerId::new("leased").expect("a valid consumer id");
        let holder = |number: u8| {
            crate::model::LeaseHolder::new(format!("holder-{number}")).expect("a valid holder")
        };
        match *op {
            Op::Lease { holder: number } => {
                let granted = match self.lease {
                    None => true,
                    Some((held, until)) => held == number || until <= now,
                };
                if granted {
                    let until = now + Duration::from_std(LEASE).expect("fits");
                    self.lease = Some((number, until));
                    self.leased_cursor = self
                        .leased_cursor
                        .or(Some(crate::events::EventPosition::START));
                }
                let actual = match engine.lease_consumer(&leased, &holder(number), LEASE).await {
                    Ok(granted) => Seen::Leased(granted),
                    Err(error) => Seen::Error(error.code()),
                };
                Some((Seen::Leased(granted), actual))
            }
            Op::Release { holder: number } => {
                if self.lease.is_some_and(|(held, _)| held == number) {
                    self.lease = None;
                }
                let actual = match engine.release_consumer(&leased, &holder(number)).await {
                    Ok(()) => Seen::Done,
                    Err(error) => Seen::Error(error.code()),
                };
                Some((Seen::Done, actual))
            }
            Op::AcknowledgeLeased { holder: number } => {
                let through = self.last.unwrap_or(crate::events::EventPosition::START);
                let answer = if self.lease.is_some_and(|(held, _)| held == number) {
                    self.leased_cursor = self.leased_cursor.max(Some(through));
                    Ok(())
                } else {
                    Err("lease_lost")
                };
                let acknowledged = engine
                    .acknowledge_leased(&leased, &holder(number), through)
                    .await
                    .map_err(|error| error.code());
                let cursor = engine.store().consumer_position(&leased).await;
                let actual = match cursor {
                    Ok(cursor) => Seen::Cursor(acknowledged, cursor),
                    Err(error) => Seen::Error(BookingError::Store(error).code()),
                };
                Some((Seen::Cursor(answer, self.leased_cursor), actual))
            }
            _ => None,
        }
    }
}

#[async_trait::async_trait]
impl<S: EventStore> StepCheck<S> for EventsMatchTheModel {
    async fn extra_op(
        &mut self,
        engine: &BookingEngine<S>,
        model: &mut Model,
        op: &Op,
        now: Timestamp,
    ) -> Option<(Seen, Seen)> {
        let Op::ReclaimExpired = op else {
            return self.lease_op(engine, op, now).await;
        };
        // Every expired held hold, on every slot: the model's own reclaim, slot by slot.
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
        let actual = match engine.reclaim_expired(crate::events::MAX_BATCH).await {
            Ok(holds) => {
                let mut ids: Vec<HoldId> = holds.iter().map(|h| h.hold_id).collect();
                ids.sort();
                Seen::Reclaimed(ids)
            }
            Err(error) => Seen::Error(error.code()),
        };
        Some((Seen::Reclaimed(expected), actual))
    }

    async fn after_step(
        &mut self,
        engine: &BookingEngine<S>,
        before: &Model,
        after: &Model,
    ) -> Result<(), Mismatch> {
        let read = engine
            .read_events(&self.consumer, crate::events::MAX_BATCH)
            .await
            .map_err(|e| Mismatch(format!("read_events: {e}")))?;
        for event in &read {
            ensure!(
                self.last.is_none_or(|last| event.position > last),
                "event position {} not after {:?}",
                event.position,
                self.last
            );
            self.last = Some(event.position);
        }
        if let Some(last) = self.last {
            engine
                .acknowledge_events(&self.consumer, last)
                .await
                .map_err(|e| Mismatch(format!("acknowledge_events: {e}")))?;
        }
        let mut actual: Vec<ExpectedEvent> = read
            .iter()
            .map(|e| (e.kind, e.slot_id, e.hold_id, e.quantity, e.owner.clone()))
            .collect();
        actual.sort_by_key(|e| (e.0.as_str(), e.1, e.2));
        let expected = expected_events(before, after);
        ensure!(
            expected == actual,
            "the model expects events {expected:?}, the store appended {actual:?}"
        );
        Ok(())
    }
}

/// Runs `cases` random sequences like [`check`], with sweeps of expired holds among the
/// operations, and after every step compares the events the store appended with those the
/// model's change of state implies: one per change, none for a refusal.
///
/// # Panics
///
/// When a sequence's outcomes, state or events differ from the model's.
pub fn check_events<S, F, Fut>(factory: F, cases: u32, max_len: usize)
where
    S: EventStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let step = prop_oneof![
        18 => op(),
        2 => Just(Op::ReclaimExpired),
        1 => (1..=2u8).prop_map(|holder| Op::Lease { holder }),
        1 => (1..=2u8).prop_map(|holder| Op::AcknowledgeLeased { holder }),
        1 => (1..=2u8).prop_map(|holder| Op::Release { holder }),
    ];
    let sequences = after_opening(proptest::collection::vec(step, 1..=max_len));
    run_property("event model check", cases, 2, &sequences, |ops| {
        let store = factory();
        async move {
            let mut checks = EventsMatchTheModel::new();
            run_checked(store.await, &ops, &mut checks).await
        }
    });
}

/// The store's rows equal the model's, and the invariant holds.
async fn check_state<S: Store>(
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
        ..Config::default()
    });
    (cases, runtime, runner)
}

/// Runs the property `name`: `cases` values of `strategy` (more with `PROPTEST_CASES`), each
/// checked by `check` on a runtime of `workers` threads under the case timeout; panics with
/// the shrunk failing value.
fn run_property<St, F, Fut>(name: &str, cases: u32, workers: usize, strategy: &St, check: F)
where
    St: Strategy,
    F: Fn(St::Value) -> Fut,
    Fut: Future<Output = Result<(), Mismatch>>,
{
    let (cases, runtime, mut runner) = harness(cases, workers);
    let result = runner.run(strategy, |value| {
        runtime.block_on(async {
            tokio::time::timeout(super::CASE_TIMEOUT, check(value))
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
    run_property("model check", cases, 2, &sequence(max_len), |ops| {
        let store = factory();
        async move { run_sequence(store.await, &ops).await }
    });
}

/// One batch of a concurrent run: operations started together, then a clock step.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Operations run concurrently (only `Hold`, `Confirm`, `Cancel`, `Renew`,
    /// `Availability`, `SetCapacity` and `SetClosed`; calls on a hold act in its owner's
    /// scope).
    pub ops: Vec<Op>,
    /// Microseconds the clock moves after the batch.
    pub advance: i64,
}

fn batch() -> impl Strategy<Value = Batch> {
    let ttl = HOLD_TTL.as_micros() as i64;
    let op = prop_oneof![
        5 => (0..3usize, 0..12u8, 1..=3i64, 0..3u8).prop_map(|(slot, key, quantity, owner)| Op::Hold {
            slot, key, quantity, owner, lifetime: None,
        }),
        2 => (0..16usize).prop_map(|hold| Op::Confirm { hold, scope: 4 }),
        2 => (0..16usize).prop_map(|hold| Op::Cancel { hold, scope: 4 }),
        1 => (0..16usize).prop_map(|hold| Op::Renew { hold, scope: 4, lifetime: None }),
        1 => (0..3u8).prop_map(|resource| Op::Availability { resource }),
        1 => (0..3usize, 1..=8i64).prop_map(|(slot, capacity)| Op::SetCapacity { slot, capacity }),
        1 => (0..3usize, any::<bool>()).prop_map(|(slot, closed)| Op::SetClosed { slot, closed }),
    ];
    (
        proptest::collection::vec(op, 1..=16),
        prop_oneof![Just(0i64), Just(1_000_000), Just(ttl / 2), Just(ttl)],
    )
        .prop_map(|(ops, advance)| Batch { ops, advance })
}

/// What the successful calls on one hold imply about its final state.
#[derive(Debug, Default, Clone)]
struct Acknowledged {
    slot: usize,
    owner: Option<OwnerId>,
    confirmed: bool,
    cancelled: bool,
}

/// Runs batches concurrently against a fresh store; `Err` describes the first violation.
async fn run_batches<S: Store>(store: S, batches: &[Batch]) -> Result<(), Mismatch> {
    let Fixture { engine, clock } = Fixture::new(store);
    let mut slots = Vec::new();
    for capacity in [1, 3, 6] {
        let starts_at = clock.now() + Duration::hours(2);
        let slot = engine
            .create_slot(NewSlot::new(
                starts_at,
                starts_at + Duration::hours(1),
                capacity,
            ))
            .await
            .map_err(|e| Mismatch(format!("create_slot: {e}")))?;
        slots.push(slot.slot_id);
    }
    let mut holds: Vec<HoldId> = Vec::new();
    let mut acked: HashMap<HoldId, Acknowledged> = HashMap::new();
    for (number, batch) in batches.iter().enumerate() {
        let tasks: Vec<_> = batch
            .ops
            .iter()
            .map(|op| {
                let engine = engine.clone();
                let op = op.clone();
                let target_slot = match op {
                    Op::Hold { slot, .. }
                    | Op::SetCapacity { slot, .. }
                    | Op::SetClosed { slot, .. } => slots[slot % slots.len()],
                    _ => SlotId(0),
                };
                // Calls on a hold act in its owner's scope.
                let target = match op {
                    Op::Confirm { hold, .. } | Op::Cancel { hold, .. } | Op::Renew { hold, .. }
                        if !holds.is_empty() =>
                    {
                        let id = holds[hold % holds.len()];
                        let owner = acked.get(&id).and_then(|a| a.owner.clone());
                        Some((id, Scope::of(owner)))
                    }
                    _ => None,
                };
                tokio::spawn(async move {
                    match (op, target) {
                        (
                            Op::Hold {
                                key,
                                quantity,
                                owner: owner_number,
                                ..
                            },
                            _,
                        ) => {
                            let mut request =
                                NewHold::new(target_slot, format!("key-{key}")).quantity(quantity);
                            if let Some(owner) = owner(owner_number) {
                                request = request.owner(owner);
                            }
                            engine
                                .place_hold(request)
                                .await
                                .map(|placed| Some((placed.hold, 'h')))
                        }
                        (Op::Confirm { .. }, Some((id, scope))) => {
                            engine.confirm_as(&scope, id).await.map(|h| Some((h, 'c')))
                        }
                        (Op::Cancel { .. }, Some((id, scope))) => {
                            engine.cancel_as(&scope, id).await.map(|h| Some((h, 'x')))
                        }
                        (Op::Renew { .. }, Some((id, scope))) => engine
                            .renew_as(&scope, id, None)
                            .await
                            .map(|h| Some((h, 'r'))),
                        (Op::Availability { resource: number }, _) => {
                            let mut query = AvailabilityQuery::all();
                            query.resource = resource(number);
                            engine.availability(query).await.map(|_| None)
                        }
                        // A capacity change or a close races the holds; the invariant after
                        // the batch, with the slot's capacity as stored then, judges them.
                        (Op::SetCapacity { capacity, .. }, _) => engine
                            .change_capacity(target_slot, capacity)
                            .await
                            .map(|_| None),
                        (Op::SetClosed { closed: true, .. }, _) => {
                            engine.close_sales(target_slot).await.map(|_| None)
                        }
                        (Op::SetClosed { closed: false, .. }, _) => {
                            engine.reopen_sales(target_slot).await.map(|_| None)
                        }
                        _ => Ok(None),
                    }
                })
            })
            .collect();
        for (task, op) in tasks.into_iter().zip(&batch.ops) {
            let outcome = task
                .await
                .map_err(|e| Mismatch(format!("batch {number}: task failed: {e}")))?;
            match outcome {
                Ok(Some((hold, kind))) => {
                    let slot = match op {
                        Op::Hold { slot, .. } => slot % slots.len(),
                        _ => acked.get(&hold.hold_id).map_or(0, |a| a.slot),
                    };
                    let entry = acked.entry(hold.hold_id).or_insert_with(|| {
                        holds.push(hold.hold_id);
                        Acknowledged {
                            slot,
                            owner: hold.owner.clone(),
                            ..Acknowledged::default()
                        }
                    });
                    match kind {
                        'c' => entry.confirmed = true,
                        'x' => entry.cancelled = true,
                        _ => {}
                    }
                }
                Ok(None) => {}
                Err(BookingError::Store(e)) => {
                    return Err(Mismatch(format!("batch {number} {op:?}: store error {e}")))
                }
                Err(BookingError::HoldNotFound { hold_id }) => {
                    return Err(Mismatch(format!(
                        "batch {number} {op:?}: hold {hold_id} not found in its owner's scope"
                    )))
                }
                Err(_) => {}
            }
        }
        clock.advance(Duration::microseconds(batch.advance));
        let now = clock.now();
        // Every success is reflected in the state, and the invariant holds on every slot.
        let mut per_slot = vec![Vec::new(); slots.len()];
        for (&id, ack) in &acked {
            let stored = engine
                .store()
                .get_hold(id, &Scope::BackOffice, now)
                .await
                .map_err(|e| Mismatch(format!("get_hold: {e}")))?
                .outcome
                .ok_or_else(|| Mismatch(format!("acknowledged hold {id} is missing")))?;
            let expected_ok = if ack.cancelled {
                stored.status == HoldStatus::Cancelled
            } else if ack.confirmed {
                stored.status == HoldStatus::Confirmed
            } else {
                matches!(stored.status, HoldStatus::Held | HoldStatus::Expired)
            };
            ensure!(
                expected_ok && stored.owner == ack.owner,
                "after batch {number}: hold {id} is {stored:?}, acknowledged {ack:?}"
            );
            per_slot[ack.slot].push(stored);
        }
        for (i, &slot_id) in slots.iter().enumerate() {
            let slot = engine
                .store()
                .get_slot(slot_id)
                .await
                .map_err(|e| Mismatch(format!("get_slot: {e}")))?
                .ok_or_else(|| Mismatch(format!("slot {slot_id} is missing")))?;
            SlotTally::of(&slot, &per_slot[i], now)
                .check()
                .map_err(|broken| Mismatch(format!("after batch {number}: {slot:?}: {broken}")))?;
        }
    }
    Ok(())
}

/// Runs `cases` random sequences of concurrent batches (more with `PROPTEST_CASES`), each on a
/// fresh store from `factory`, on a multi-threaded runtime. Outcomes need not match any serial
/// order; the invariant and "every success shows in the final state" must hold after each batch.
///
/// # Panics
///
/// When a batch leaves the store violating either.
pub fn check_concurrent<S, F, Fut>(factory: F, cases: u32)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let batches = proptest::collection::vec(batch(), 1..=6);
    run_property("concurrent check", cases, 4, &batches, |batches| {
        let store = factory();
        async move { run_batches(store.await, &batches).await }
    });
}

/// One transaction of a transactional sequence: writes run together in a caller's
/// transaction, which then commits or rolls back; then the clock moves.
#[derive(Clone, Debug)]
pub struct TransactionStep {
    /// The writes, in order (only the operations [`Within`] offers).
    pub ops: Vec<Op>,
    /// Commit (else roll back).
    pub commit: bool,
    /// Microseconds the clock moves afterwards.
    pub advance: i64,
}

fn transaction_step() -> impl Strategy<Value = TransactionStep> {
    let ttl = HOLD_TTL.as_micros() as i64;
    (
        proptest::collection::vec(op().prop_filter("a write", is_write), 1..=5),
        proptest::bool::weighted(0.6),
        prop_oneof![Just(0i64), Just(1_000_000), Just(ttl)],
    )
        .prop_map(|(ops, commit, advance)| TransactionStep {
            ops,
            commit,
            advance,
        })
}

/// Runs transactions against a fresh store; each step's writes are checked against a draft
/// of the model that becomes the model on commit and is dropped on rollback, and after each
/// transaction the store's rows (read outside it) must equal the model's.
async fn run_transactions<S: TransactionalStore>(
    store: S,
    steps: &[TransactionStep],
) -> Result<(), Mismatch> {
    let Fixture { engine, clock } = Fixture::new(store);
    let mut model = Model::default();
    for (capacity, starts_in) in [(4, 3600), (1, 600)] {
        let op = Op::CreateSlot {
            capacity,
            starts_in,
            resource: 0,
        };
        let (expected, actual) = write_step(&mut &engine, &mut model, &op, clock.now()).await;
        ensure!(
            expected == actual,
            "setup {op:?}: {expected:?} != {actual:?}"
        );
    }
    let store = engine.store();
    for (number, step) in steps.iter().enumerate() {
        let now = clock.now();
        let mut transaction = store
            .begin()
            .await
            .map_err(|e| Mismatch(format!("begin: {e}")))?;
        let mut draft = model.clone();
        {
            let mut within = engine.within(store.writes(&mut transaction));
            for op in &step.ops {
                let (expected, actual) = write_step(&mut within, &mut draft, op, now).await;
                ensure!(
                    expected == actual,
                    "transaction {number} {op:?}: model says {expected:?}, store gave {actual:?}"
                );
            }
        }
        if step.commit {
            store
                .commit(transaction)
                .await
                .map_err(|e| Mismatch(format!("commit: {e}")))?;
            model = draft;
        } else {
            store
                .rollback(transaction)
                .await
                .map_err(|e| Mismatch(format!("rollback: {e}")))?;
        }
        check_state(&engine, &model, now)
            .await
            .map_err(|Mismatch(m)| {
                let ended = if step.commit { "commit" } else { "rollback" };
                Mismatch(format!("after transaction {number} ({ended}): {m}"))
            })?;
        clock.advance(Duration::microseconds(step.advance));
    }
    Ok(())
}

/// Runs `cases` random sequences of transactions (more with `PROPTEST_CASES`), each against a
/// fresh store from `factory`, and panics with the shrunk failing sequence.
///
/// # Panics
///
/// When a transaction's outcomes, or the state after it commits or rolls back, differ from
/// the model's.
pub fn check_transactional<S, F, Fut>(factory: F, cases: u32)
where
    S: TransactionalStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let transactions = proptest::collection::vec(transaction_step(), 1..=8);
    run_property(
        "transaction model check",
        cases,
        2,
        &transactions,
        |steps| {
            let store = factory();
            async move { run_transactions(store.await, &steps).await }
        },
    );
}
