//! [`WaitlistStore`]: waitlists of slots, served in strict order in the same atomic step that
//! frees units.

use async_trait::async_trait;

use super::error::StoreError;
use super::holds::HoldStore;
use super::outcome::{Decided, HoldOutcome, HoldRequest};
use crate::model::{Booking, EntryId, Hold, Timestamp, WaitlistEntry};
use crate::scope::Scope;

/// A request to join a slot's waitlist, as the engine hands it to the store: the hold it
/// wants (its lifetime is the offer window: an offer expires that long after it is made),
/// and its priority.
#[derive(Debug, Clone, Copy)]
pub struct JoinRequest<'a> {
    /// The hold wanted: slot, key, owner, quantity, `now` and the expiry a hold placed now
    /// would have.
    pub hold: HoldRequest<'a>,
    /// Higher is served first; equal priorities by arrival.
    pub priority: i32,
}

impl JoinRequest<'_> {
    /// Whether `entry`, the entry this request's key already belongs to, is this request
    /// made again: same slot, quantity, owner and priority.
    pub fn is_replay_of_entry(&self, entry: &WaitlistEntry) -> bool {
        entry.slot_id == self.hold.slot_id
            && entry.quantity == self.hold.quantity
            && entry.owner.as_ref() == self.hold.owner
            && entry.priority == self.priority
    }
}

/// What [`WaitlistStore::join_waitlist`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinOutcome {
    /// Nobody waited and the units were free: a hold was placed at once (its id is the
    /// entry's number). `replayed` when the key's request was this one and already held.
    Held {
        /// The hold.
        hold: Hold,
        /// Whether an earlier call with this key placed it (or it was offered since).
        replayed: bool,
    },
    /// The request waits in line, at `position` (1 is the head).
    Waiting {
        /// The entry.
        entry: WaitlistEntry,
        /// Its place in line.
        position: u32,
        /// Whether an earlier call with this key made it.
        replayed: bool,
    },
    /// Refused as a hold would be (`KeyReused`, `SlotNotFound`, `SlotClosed`,
    /// `ExceedsCapacity`, with the least capacity of the slot and its pools); nothing
    /// changed.
    Refused(HoldOutcome),
}

impl JoinOutcome {
    /// The answer to `request` when its key is `entry`'s, waiting at `position`, at `now`:
    /// this request made again waits where it waits (a replay); any other request reuses the
    /// key, and is shown the entry's offer as it would be made `now` if it is the entry's
    /// owner's, nothing otherwise.
    pub fn key_waits(
        request: &JoinRequest<'_>,
        entry: WaitlistEntry,
        position: u32,
        now: Timestamp,
    ) -> JoinOutcome {
        if request.is_replay_of_entry(&entry) {
            JoinOutcome::Waiting {
                entry,
                position,
                replayed: true,
            }
        } else if entry.owner.as_ref() == request.hold.owner {
            JoinOutcome::Refused(HoldOutcome::KeyReused(Some(entry.offer(now))))
        } else {
            JoinOutcome::Refused(HoldOutcome::KeyReused(None))
        }
    }

    /// The answer to the join of `hold` when its key belongs to `holder`, a hold (an entry
    /// offered since, say) or a booking: the hold's answer ([`HoldOutcome::key_taken`]), a
    /// replay shown as the hold held.
    pub fn key_taken(hold: &HoldRequest<'_>, holder: Booking) -> JoinOutcome {
        match HoldOutcome::key_taken(hold, holder) {
            HoldOutcome::Replayed(hold) => JoinOutcome::Held {
                hold,
                replayed: true,
            },
            other => JoinOutcome::Refused(other),
        }
    }
}

/// Waitlists: a request joins a slot's line when its units are short, and is offered them
/// (a hold of its owner, for its offer window) as soon as they free up. Lines are served by
/// priority, then arrival, in strict order ([`served`](crate::model::served)): the head waits
/// until its whole quantity is free, and nobody behind it is served first.
///
/// **Pools.** A slot in pools has a line too; its entries are also in the line of each of its
/// pools, which holds the waiting entries of the pool's slots that sell at the moment (a slot
/// closed, removed or started leaves its entries out, so they never block the pool). An entry
/// is offered when it heads its slot's line and every line of its slot's pools, and its
/// quantity is free in its slot (the slot's expired holds counted free, reclaimed first when
/// only they make it fit) and in every pool (the pool's slots' expired holds counted free,
/// reclaimed first when only they make it fit).
///
/// What a store must do, beyond its methods here:
///
/// - **Offers in the step that frees.** Every atomic step that gives units back to a slot or
///   a pool with a waiting line (a cancel, an expiry reclaim, a capacity change, reopened
///   sales, a detach from a pool, a leave) serves the lines of the slot and its pools (of
///   the pool) in that same step, until no head is ready: each served entry becomes a hold
///   (`HoldId(entry_id.0)`, held, the entry's owner and quantity, created now, expiring
///   after its offer window), logged as `hold_placed` then `waitlist_offered`. An offer not
///   confirmed in time expires like any hold, and its reclaim serves the lines again. An
///   administrative answer is the change before the serving.
/// - **Nobody jumps the line.** While a slot's line or a line of one of its pools is not
///   empty, a hold, booking line or candidate on it (not an offer) is refused as sold out,
///   and availability lists the slot with 0 units.
/// - **Keys.** An entry's key is taken like a hold's: no hold or other entry may use it while
///   the entry waits; its offer is stored under it. Leaving frees it.
/// - **Lock order.** A store that locks rows serves a pool's line without ever waiting for a
///   row out of its order (slots by id, then pools by id): a head whose rows another step
///   holds is left in line (newcomers stay refused) for the next step that frees its units,
///   or the expired-hold sweeper's pass.
#[async_trait]
pub trait WaitlistStore: HoldStore {
    /// Joins the slot's line, atomically: if the key is taken, the replay (a hold or an entry
    /// of this same request) or `KeyReused`; else, if the slot is not selling or the quantity
    /// is more than its capacity, the hold's refusal; else the entry is added to the line and
    /// the line is served (reclaiming the slot's expired holds when that serves its head), so
    /// a request that finds nobody waiting and its units free is held at once.
    async fn join_waitlist(
        &self,
        request: JoinRequest<'_>,
    ) -> Result<Decided<JoinOutcome>, StoreError>;

    /// Leaves the line, atomically: the entry in `scope` that still waits is removed (its key
    /// freed) and the line served. `None` when no entry waits with this id in `scope`
    /// (offered entries are holds now).
    async fn leave_waitlist(
        &self,
        entry_id: EntryId,
        scope: &Scope,
        now: crate::model::Timestamp,
    ) -> Result<Decided<Option<WaitlistEntry>>, StoreError>;

    /// The entry in `scope` that still waits, with its place in line (1 is the head).
    async fn waitlist_entry(
        &self,
        entry_id: EntryId,
        scope: &Scope,
        now: crate::model::Timestamp,
    ) -> Result<Decided<Option<(WaitlistEntry, u32)>>, StoreError>;
}
