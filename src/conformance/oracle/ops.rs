//! The operations a generated sequence is made of, and what their numbers (owners, resources,
//! scopes, lifetimes) stand for.

use std::str::FromStr;

use crate::model::{Hold, OwnerId, ResourceId};
use crate::scope::Scope;

/// The owners a sequence draws from: 0 is anonymous.
const OWNERS: [Option<&str>; 3] = [None, Some("alice"), Some("bob")];

/// The resources a sequence draws from: 0 is none (or, in a filter, every resource).
const RESOURCES: [Option<&str>; 3] = [None, Some("room-a"), Some("room-b")];

/// One step of a generated sequence. Indexes refer to slots and holds created earlier in the
/// sequence; an index past the end means an id the store never assigned.
#[derive(Clone, Debug)]
pub enum ModelOp {
    /// Create a slot of this capacity starting this many seconds from now.
    CreateSlot {
        /// Units.
        capacity: i32,
        /// Seconds from now to `starts_at`.
        starts_in: i64,
        /// Resource number, 0 for none.
        resource: u8,
    },
    /// Change slot number `slot`'s capacity: to a number, by a number, or compare-and-set
    /// (some out of bounds on purpose).
    SetCapacity {
        /// Slot index.
        slot: usize,
        /// The change.
        change: crate::CapacityChange,
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
        quantity: i32,
        /// Owner number, 0 for anonymous.
        owner: u8,
        /// Requested lifetime in seconds (some out of bounds on purpose).
        lifetime: Option<u64>,
    },
    /// Join slot `slot`'s waitlist (held at once when nobody waits and the units are free)
    /// with key number `key` for owner number `owner` at `priority`, with a lifetime (the
    /// offer window) of its own if given (drawn only by
    /// [`check_waitlists`](super::check_waitlists)).
    Join {
        /// Slot index.
        slot: usize,
        /// Key number (shared with holds).
        key: u8,
        /// Units asked for.
        quantity: i32,
        /// Owner number, 0 for anonymous.
        owner: u8,
        /// Higher first.
        priority: i32,
        /// Requested lifetime in seconds.
        lifetime: Option<u64>,
    },
    /// Leave waitlist entry number `entry` (in the order made) in scope number `scope`.
    Leave {
        /// Entry index.
        entry: usize,
        /// Scope number, as for holds.
        scope: u8,
    },
    /// Read waitlist entry number `entry` and its place in scope number `scope`.
    EntryPlace {
        /// Entry index.
        entry: usize,
        /// Scope number, as for holds.
        scope: u8,
    },
    /// Hold `quantity` units of any one of `slots` (slot indexes, tried in this order; some
    /// repeated or past the end on purpose) with key number `key` for owner number `owner`.
    HoldAny {
        /// Slot indexes, in order.
        slots: Vec<usize>,
        /// Key number (shared with holds).
        key: u8,
        /// Units asked for.
        quantity: i32,
        /// Owner number, 0 for anonymous.
        owner: u8,
    },
    /// Book `lines` (slot index, units; slots may repeat and quantities be out of bounds, on
    /// purpose) with key number `key` for owner number `owner`, with a lifetime of its own if
    /// given (drawn only by [`check_bookings`](super::check_bookings)).
    Book {
        /// (slot index, units) per line.
        lines: Vec<(usize, i32)>,
        /// Key number (shared with holds).
        key: u8,
        /// Owner number, 0 for anonymous.
        owner: u8,
        /// Requested lifetime in seconds.
        lifetime: Option<u64>,
    },
    /// Confirm (`Some(true)`), cancel (`Some(false)`) or renew (`None`) the booking whose id
    /// is hold number `hold`'s, in scope number `scope`: every line at once.
    ChangeBooking {
        /// Hold index (its id as a booking id: a line that is not a booking's first is none).
        hold: usize,
        /// Scope number.
        scope: u8,
        /// Confirm, cancel, or renew.
        confirm: Option<bool>,
    },
    /// Read the booking whose id is hold number `hold`'s, in scope number `scope`.
    GetBooking {
        /// Hold index.
        hold: usize,
        /// Scope number.
        scope: u8,
    },
    /// Create a pool of `capacity` units (some below zero on purpose; drawn only by
    /// [`check_pools`](super::check_pools)).
    CreatePool {
        /// Units.
        capacity: i32,
    },
    /// Attach (`attach`) slot number `slot` to pool number `pool`, or detach it.
    PoolMember {
        /// Pool index (of the pools created so far).
        pool: usize,
        /// Slot index.
        slot: usize,
        /// Attach or detach.
        attach: bool,
    },
    /// Change pool number `pool`'s capacity (some below zero on purpose).
    SetPoolCapacity {
        /// Pool index.
        pool: usize,
        /// The change.
        change: crate::CapacityChange,
    },
    /// Read pool number `pool`.
    GetPool {
        /// Pool index.
        pool: usize,
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
    /// Reclaim every expired hold (an [`EventStore`](crate::events::EventStore) reclaim; drawn
    /// only by [`check_events`](super::check_events)).
    ReclaimExpired,
    /// Take or extend the lease of the consumer `leased` for [`LEASE`] as holder number
    /// `holder` (drawn only by [`check_events`](super::check_events)).
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

/// The lease [`ModelOp::Lease`] takes.
pub const LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// Scope numbers: 0 anonymous, 1 alice, 2 bob, 3 back office, 4 and up the scope of the hold's
/// own owner (so most calls land in scope).
pub(super) fn scope_of(number: u8, hold: Option<&Hold>) -> Scope {
    match number {
        0 => Scope::Anonymous,
        1 | 2 => Scope::Owner(owner(number).unwrap_or_else(|| unreachable!())),
        3 => Scope::BackOffice,
        _ => Scope::of(hold.and_then(|h| h.owner.clone())),
    }
}

/// Resource number `number` (`None`: none, or every resource in a filter).
pub(super) fn resource(number: u8) -> Option<ResourceId> {
    nth(&RESOURCES, number)
}

/// Owner number `number` (`None`: anonymous).
pub(super) fn owner(number: u8) -> Option<OwnerId> {
    nth(&OWNERS, number)
}

/// The id that number `number` of `names` stands for (`None` for a `None` there, or past the
/// end).
fn nth<T: FromStr>(names: &[Option<&str>], number: u8) -> Option<T> {
    let name = names.get(usize::from(number)).copied().flatten()?;
    name.parse().ok()
}

pub(super) fn duration_of(seconds: Option<u64>) -> Option<std::time::Duration> {
    seconds.map(std::time::Duration::from_secs)
}
