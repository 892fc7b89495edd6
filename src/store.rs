//! The [`Store`] trait: what a backend must do, operation by operation.
//!
//! Each method is one atomic operation in the store. A backend decides every outcome by the
//! rows its conditional writes affected and by its unique constraint on the idempotency key,
//! never by a read made before the write. Reads after a write that changed nothing
//! are fine: they only say *why* nothing changed.
//!
//! Time is passed in: the engine reads its [`Clock`](crate::Clock) once per operation and hands
//! that instant to the store as `now`. A store decides by it and says so: every answer that
//! depends on time comes back as a [`Decided`] carrying the instant the store decided at, and
//! the engine resolves hold statuses against that same instant. A store may instead keep time
//! itself (the PostgreSQL store can use the database server's clock, so application servers
//! whose clocks disagree still agree on what has expired); it then ignores `now` and reports
//! its own instant in [`Decided::at`].
//!
//! Cancellation: the engine runs every write (`create_hold`, `confirm_hold`, `cancel_hold`,
//! `create_slot`) on a task of its own, so a write it starts always runs to the end even if
//! the engine's caller goes away. A store used directly, without the engine, gets no such
//! guarantee: dropping one of its futures mid-way is as safe as the database driver makes it.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::admin::{SlotFilter, SlotPageRequest, SlotUsage};
use crate::model::{
    AvailabilityEntry, Hold, HoldId, IdempotencyKey, NewSlot, OwnerId, PageRequest, Slot, SlotId,
    Timestamp,
};
use crate::scope::Scope;

/// A request to place a hold, as the engine hands it to the store (every field validated).
#[derive(Debug, Clone, Copy)]
pub struct HoldRequest<'a> {
    /// The slot to take units of.
    pub slot_id: SlotId,
    /// The client's idempotency key.
    pub key: &'a IdempotencyKey,
    /// Who the hold will belong to; `None` for an anonymous hold.
    pub owner: Option<&'a OwnerId>,
    /// Units to take, all or none: `1..=`[`MAX_QUANTITY`](crate::model::MAX_QUANTITY).
    pub quantity: i32,
    /// The engine's current time; the slot must start after it. Stored as `created_at`.
    pub now: Timestamp,
    /// When the new hold will expire (`now` plus the hold's lifetime).
    pub expires_at: Timestamp,
}

impl HoldRequest<'_> {
    /// Whether `hold`, the hold this request's key already belongs to, is this very request
    /// made again: same slot, same quantity, same owner.
    pub fn is_replay_of(&self, hold: &Hold) -> bool {
        hold.slot_id == self.slot_id
            && hold.quantity == self.quantity
            && hold.owner.as_ref() == self.owner
    }
}

/// A request to renew a hold, as the engine hands it to the store.
#[derive(Debug, Clone, Copy)]
pub struct RenewRequest<'a> {
    /// The hold to renew.
    pub hold_id: HoldId,
    /// Whose holds the caller may renew.
    pub scope: &'a Scope,
    /// The engine's current time.
    pub now: Timestamp,
    /// The new lifetime, counted from `now`.
    pub lifetime: chrono::Duration,
    /// The longest a hold may live, counted from its `created_at`.
    pub max_life: chrono::Duration,
}

impl RenewRequest<'_> {
    /// The `expires_at` a renewal gives `hold`: `now + lifetime`, but never past
    /// `created_at + max_life` and never earlier than it already was (a renewal does not
    /// shorten a hold). Stores compute the same in their own language.
    pub fn renewed_expiry(&self, hold: &Hold) -> Timestamp {
        let wanted = self.now + self.lifetime;
        let cap = hold.created_at + self.max_life;
        wanted.min(cap).max(hold.expires_at)
    }
}

/// A store's answer together with the instant it was decided at.
///
/// A store that takes its time from the engine sets `at` to the `now` it was given; one that
/// keeps its own clock sets it to that clock's reading for the decision. The engine resolves
/// every hold status in the answer at `at`, so a hold is never "expired" by one clock and
/// "held" by another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided<T> {
    /// The instant the store decided at.
    pub at: Timestamp,
    /// What it decided.
    pub outcome: T,
}

impl<T> Decided<T> {
    /// An answer decided at `at`.
    pub fn new(at: Timestamp, outcome: T) -> Self {
        Decided { at, outcome }
    }

    /// The answer without its instant.
    pub fn into_outcome(self) -> T {
        self.outcome
    }

    /// The same instant with another outcome.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Decided<U> {
        Decided {
            at: self.at,
            outcome: f(self.outcome),
        }
    }
}

/// What a store knows of a slot when it explains a refused hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLimits {
    /// When the slot starts.
    pub starts_at: Timestamp,
    /// Its capacity.
    pub capacity: i32,
    /// Whether its sales are closed.
    pub closed: bool,
    /// Whether it has been removed.
    pub removed: bool,
}

impl SlotLimits {
    /// The limits of `slot`.
    pub fn of(slot: &Slot) -> Self {
        SlotLimits {
            starts_at: slot.starts_at,
            capacity: slot.capacity,
            closed: slot.closed,
            removed: slot.removed_at.is_some(),
        }
    }
}

/// What [`Store::create_hold`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    /// Units were taken and a new hold stored.
    Created(Hold),
    /// The key already belongs to a hold made by this same request (same slot, quantity and
    /// owner); nothing changed. The hold is returned as stored now.
    Replayed(Hold),
    /// The key already belongs to a hold made by another request; nothing changed. The hold is
    /// given only when it has the caller's owner (or both are anonymous): a hold of somebody
    /// else is never revealed.
    KeyReused(Option<Hold>),
    /// The slot has not enough free units, even after reclaiming expired holds; nothing
    /// changed.
    SoldOut,
    /// More units than the slot's whole capacity were asked for; nothing changed.
    ExceedsCapacity {
        /// The slot's capacity.
        capacity: i32,
    },
    /// No slot has this id, or it has been removed.
    SlotNotFound,
    /// The slot has already started (`starts_at <= now`) or its sales are closed; nothing
    /// changed.
    SlotClosed,
}

impl HoldOutcome {
    /// The answer to a hold request that stored nothing, from what the store reads after its
    /// writes changed nothing: the hold the key already belongs to, if any (a key in use wins
    /// over every other answer), else the requested slot's limits, if the slot exists.
    /// Every backend explains a refusal the same way through this.
    pub fn refused(
        request: &HoldRequest<'_>,
        key_holder: Option<Hold>,
        slot: Option<SlotLimits>,
    ) -> HoldOutcome {
        match (key_holder, slot) {
            (Some(hold), _) if request.is_replay_of(&hold) => HoldOutcome::Replayed(hold),
            (Some(hold), _) if hold.owner.as_ref() == request.owner => {
                HoldOutcome::KeyReused(Some(hold))
            }
            (Some(_), _) => HoldOutcome::KeyReused(None),
            (None, None) => HoldOutcome::SlotNotFound,
            (None, Some(slot)) if slot.removed => HoldOutcome::SlotNotFound,
            (None, Some(slot)) if slot.closed || slot.starts_at <= request.now => {
                HoldOutcome::SlotClosed
            }
            (None, Some(slot)) if request.quantity > slot.capacity => {
                HoldOutcome::ExceedsCapacity {
                    capacity: slot.capacity,
                }
            }
            (None, Some(_)) => HoldOutcome::SoldOut,
        }
    }
}

/// What [`Store::confirm_hold`], [`Store::cancel_hold`] or [`Store::renew_hold`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The hold changed; here it is after the change.
    Applied(Hold),
    /// The hold exists in the caller's scope but was not in a state the operation applies to;
    /// nothing changed. Here it is as stored now. The engine decides what that means for the
    /// caller.
    NotApplied(Hold),
    /// No hold has this id in the caller's scope.
    NotFound,
}

/// What an administrative change of a slot ([`Store::change_capacity`], [`Store::set_closed`],
/// [`Store::remove_slot`]) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotChange {
    /// The slot changed (or already was as asked, for closing and reopening); here it is now.
    Applied(Slot),
    /// The change would take units that are held or confirmed; nothing changed. The slot and
    /// its units as read right after, for the engine to say how many are taken.
    InUse(SlotUsage),
    /// No slot has this id, or it has been removed.
    NotFound,
}

/// A backend's storage, operation by operation. Object safe: `Arc<dyn Store>` is a `Store`.
///
/// The rules each method must follow: the capacity invariant
/// `remaining + Σ quantity(stored held) + Σ quantity(confirmed) == capacity` (with
/// `remaining >= 0`) holds after every call, units are reserved only by a conditional
/// decrement (`remaining >= quantity`) that affected a row, two holds never share an
/// idempotency key, and an operation on an existing hold acts only inside the caller's
/// [`Scope`], as part of its write's condition. The
/// [`conformance`](crate::conformance) suite (feature `conformance`) checks an implementation.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Stores a validated slot with `remaining = capacity` and returns it with its new id;
    /// `now` is when (for the store's event log, if it keeps one).
    async fn create_slot(&self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError>;

    /// Every slot with `starts_at > now`, ordered by `starts_at` then `slot_id`, sold-out
    /// slots included. `remaining` counts the units of holds stored as held whose
    /// `expires_at <= now` as free.
    async fn availability(
        &self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError>;

    /// Places a hold, atomically:
    ///
    /// 1. decrement the slot's `remaining` by `quantity` where `remaining >= quantity` and
    ///    `starts_at > now`;
    /// 2. if no row was affected, mark the slot's held holds with `expires_at <= now` as
    ///    expired, add their quantities back to `remaining`, and decrement once more;
    /// 3. insert the hold (`created_at = now`) under the unique key; a unique violation undoes
    ///    the decrement.
    ///
    /// When nothing was stored, [`HoldOutcome::refused`] explains why. A key already used
    /// takes precedence over every other outcome: a replay on a sold-out or started slot is
    /// still a replay.
    async fn create_hold(
        &self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError>;

    /// Confirms a hold in `scope` stored as held with `expires_at > now`, setting
    /// `confirmed_at = now`. Capacity does not change.
    async fn confirm_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError>;

    /// Cancels a hold in `scope` that is confirmed, or held with `expires_at > now`, setting
    /// `cancelled_at = now` and giving its `quantity` units back to the slot in the same
    /// transaction.
    async fn cancel_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError>;

    /// Renews a hold in `request.scope` stored as held with `expires_at > now`: one
    /// conditional update setting `expires_at` to [`RenewRequest::renewed_expiry`]. Capacity
    /// does not change.
    async fn renew_hold(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError>;

    /// The hold as stored (status not resolved against the clock), if it exists in `scope`,
    /// with the instant to resolve it at (`now` unless the store keeps its own clock).
    async fn get_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError>;

    /// The holds of `owner` with ids after `page.after`, by id, at most `page.limit`, as
    /// stored, read through an index on `(owner, id)`.
    async fn owner_holds(
        &self,
        owner: &OwnerId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError>;

    /// The holds of `slot_id` (every owner's) with ids after `page.after`, by id, at most
    /// `page.limit`, as stored, read through an index on `(slot_id, id)`.
    async fn slot_holds(
        &self,
        slot_id: SlotId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError>;

    /// The slot as stored, if it exists (removed slots included).
    async fn get_slot(&self, slot_id: SlotId) -> Result<Option<Slot>, StoreError>;

    /// Sets the capacity of a slot that has not been removed to `capacity` (`>= 1`), moving
    /// `remaining` by the same amount, atomically:
    ///
    /// 1. one conditional update: `capacity = new, remaining = remaining + (new - capacity)`
    ///    where the new `remaining` is `>= 0`;
    /// 2. if no row was affected and the slot's held holds with `expires_at <= now` hold
    ///    enough units to make it fit, mark them expired, give their units back and update
    ///    once more; a refused change reclaims nothing it could tell would not help (a store
    ///    that estimates before taking its lock may reclaim holds that had expired anyway
    ///    when a concurrent confirm makes the estimate wrong: they were free already, so
    ///    availability and the invariant are the same either way).
    ///
    /// [`SlotChange::InUse`] carries the slot's units as read after the refusal.
    async fn change_capacity(
        &self,
        slot_id: SlotId,
        capacity: i32,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError>;

    /// Closes (`closed = true`) or reopens the sales of a slot that has not been removed: one
    /// conditional update. Never [`SlotChange::InUse`].
    async fn set_closed(
        &self,
        slot_id: SlotId,
        closed: bool,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError>;

    /// Removes (archives) a slot that has not been removed, setting `removed_at = now`, when
    /// no unit is held by an active hold or confirmed: decided on the slot row itself, by
    /// `remaining = capacity` after reclaiming the slot's expired holds (only when that makes
    /// it fit), never by counting holds before the write. Holds stay stored.
    async fn remove_slot(
        &self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<SlotChange>, StoreError>;

    /// Every slot `filter` admits (removed, closed and started ones included) after
    /// `page.after` in `(starts_at, slot_id)` order, at most `page.limit`, each with its held
    /// units split at `now` into active and expired.
    async fn list_slots(
        &self,
        filter: &SlotFilter,
        page: SlotPageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<SlotUsage>>, StoreError>;
}

/// A [`Store`] impl for `$ty` that hands every call to the store `$get` returns (an
/// expression of `$this`, which is `self`), optionally through `$wrap`, an expression of the
/// call's future `$call` (by default `$call.await`).
macro_rules! forward_store {
    (impl[$($generics:tt)*] for $ty:ty, |$this:ident| $get:expr) => {
        $crate::store::forward_store!(impl[$($generics)*] for $ty, |$this| $get, |call| call.await);
    };
    (impl[$($generics:tt)*] for $ty:ty, |$this:ident| $get:expr, |$call:ident| $wrap:expr) => {
        #[async_trait::async_trait]
        impl<$($generics)*> $crate::Store for $ty {
            async fn create_slot(&self, slot: &$crate::NewSlot, now: $crate::Timestamp) -> Result<$crate::Slot, $crate::StoreError> {
                let $this = self;
                let $call = ($get).create_slot(slot, now);
                $wrap
            }
            async fn availability(&self, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::AvailabilityEntry>>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).availability(now);
                $wrap
            }
            async fn create_hold(&self, request: $crate::HoldRequest<'_>) -> Result<$crate::Decided<$crate::HoldOutcome>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).create_hold(request);
                $wrap
            }
            async fn confirm_hold(&self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).confirm_hold(hold_id, scope, now);
                $wrap
            }
            async fn cancel_hold(&self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).cancel_hold(hold_id, scope, now);
                $wrap
            }
            async fn renew_hold(&self, request: $crate::RenewRequest<'_>) -> Result<$crate::Decided<$crate::Transition>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).renew_hold(request);
                $wrap
            }
            async fn get_hold(&self, hold_id: $crate::HoldId, scope: &$crate::Scope, now: $crate::Timestamp) -> Result<$crate::Decided<Option<$crate::Hold>>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).get_hold(hold_id, scope, now);
                $wrap
            }
            async fn owner_holds(&self, owner: &$crate::OwnerId, page: $crate::PageRequest, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::Hold>>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).owner_holds(owner, page, now);
                $wrap
            }
            async fn slot_holds(&self, slot_id: $crate::SlotId, page: $crate::PageRequest, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::Hold>>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).slot_holds(slot_id, page, now);
                $wrap
            }
            async fn get_slot(&self, slot_id: $crate::SlotId) -> Result<Option<$crate::Slot>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).get_slot(slot_id);
                $wrap
            }
            async fn change_capacity(&self, slot_id: $crate::SlotId, capacity: i32, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).change_capacity(slot_id, capacity, now);
                $wrap
            }
            async fn set_closed(&self, slot_id: $crate::SlotId, closed: bool, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).set_closed(slot_id, closed, now);
                $wrap
            }
            async fn remove_slot(&self, slot_id: $crate::SlotId, now: $crate::Timestamp) -> Result<$crate::Decided<$crate::SlotChange>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).remove_slot(slot_id, now);
                $wrap
            }
            async fn list_slots(&self, filter: &$crate::SlotFilter, page: $crate::SlotPageRequest, now: $crate::Timestamp) -> Result<$crate::Decided<Vec<$crate::SlotUsage>>, $crate::StoreError> {
                let $this = self;
                let $call = ($get).list_slots(filter, page, now);
                $wrap
            }
        }
    };
}
#[cfg_attr(not(feature = "conformance"), allow(unused_imports))]
pub(crate) use forward_store;

forward_store!(impl[T: Store + ?Sized] for Arc<T>, |this| &**this);
forward_store!(impl[T: Store + ?Sized] for Box<T>, |this| &**this);

/// Whether retrying the same call later may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreErrorKind {
    /// The store could not be reached or did not answer in time (connection refused or lost,
    /// pool exhausted, timeout, database busy). Retrying later may work.
    Unavailable,
    /// Anything else: a constraint the store did not expect, data it cannot decode, a bug.
    Failed,
}

/// A failure inside a store. Cheap to clone, so one failed availability load can be handed to
/// every waiting reader.
#[derive(Clone)]
pub struct StoreError {
    kind: StoreErrorKind,
    source: Arc<dyn StdError + Send + Sync>,
}

impl StoreError {
    /// A failure that may go away on retry.
    pub fn unavailable(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        StoreError {
            kind: StoreErrorKind::Unavailable,
            source: Arc::from(source.into()),
        }
    }

    /// Any other failure.
    pub fn failed(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        StoreError {
            kind: StoreErrorKind::Failed,
            source: Arc::from(source.into()),
        }
    }

    /// Which kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Whether retrying later may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind == StoreErrorKind::Unavailable
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreError")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            StoreErrorKind::Unavailable => write!(f, "store unavailable: {}", self.source),
            StoreErrorKind::Failed => write!(f, "store failed: {}", self.source),
        }
    }
}

impl StdError for StoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HoldStatus, IdempotencyKey};
    use chrono::{Duration, TimeZone, Utc};

    #[test]
    fn a_refusal_is_explained_key_first_then_by_the_slot() {
        let now = Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap();
        let key = IdempotencyKey::new("k").unwrap();
        let alice = OwnerId::new("alice").unwrap();
        let request = HoldRequest {
            slot_id: SlotId(1),
            key: &key,
            owner: Some(&alice),
            quantity: 2,
            now,
            expires_at: now + Duration::minutes(5),
        };
        let holder = |slot, quantity, owner: Option<&str>| Hold {
            hold_id: HoldId(9),
            slot_id: SlotId(slot),
            status: HoldStatus::Held,
            expires_at: now,
            confirmed_at: None,
            cancelled_at: None,
            quantity,
            owner: owner.map(|o| OwnerId::new(o).unwrap()),
            created_at: now,
        };
        let limits = |starts_at, capacity| {
            Some(SlotLimits {
                starts_at,
                capacity,
                closed: false,
                removed: false,
            })
        };
        let later = now + Duration::hours(1);
        assert_eq!(
            HoldOutcome::refused(&request, Some(holder(1, 2, Some("alice"))), limits(now, 5)),
            HoldOutcome::Replayed(holder(1, 2, Some("alice"))),
            "a replay wins over a started slot"
        );
        for (slot, quantity) in [(2, 2), (1, 1)] {
            assert_eq!(
                HoldOutcome::refused(&request, Some(holder(slot, quantity, Some("alice"))), None),
                HoldOutcome::KeyReused(Some(holder(slot, quantity, Some("alice")))),
                "the owner's own hold on slot {slot}, quantity {quantity}"
            );
        }
        for other in [None, Some("bob")] {
            assert_eq!(
                HoldOutcome::refused(&request, Some(holder(1, 2, other)), limits(later, 5)),
                HoldOutcome::KeyReused(None),
                "somebody else's hold ({other:?}) is never revealed"
            );
        }
        assert_eq!(
            HoldOutcome::refused(&request, None, None),
            HoldOutcome::SlotNotFound
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, limits(now, 1)),
            HoldOutcome::SlotClosed
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, limits(later, 1)),
            HoldOutcome::ExceedsCapacity { capacity: 1 }
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, limits(later, 2)),
            HoldOutcome::SoldOut
        );
        let closed = limits(later, 5).map(|l| SlotLimits { closed: true, ..l });
        assert_eq!(
            HoldOutcome::refused(&request, None, closed),
            HoldOutcome::SlotClosed,
            "closed sales refuse like a started slot"
        );
        let removed = limits(later, 5).map(|l| SlotLimits {
            removed: true,
            closed: true,
            ..l
        });
        assert_eq!(
            HoldOutcome::refused(&request, None, removed),
            HoldOutcome::SlotNotFound,
            "a removed slot is gone for clients"
        );
        assert_eq!(
            HoldOutcome::refused(&request, Some(holder(1, 2, Some("alice"))), removed),
            HoldOutcome::Replayed(holder(1, 2, Some("alice"))),
            "a replay still wins"
        );
    }

    #[test]
    fn a_renewal_moves_expiry_forward_within_the_maximum_life() {
        let created = Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap();
        let hold = Hold {
            hold_id: HoldId(1),
            slot_id: SlotId(1),
            status: HoldStatus::Held,
            expires_at: created + Duration::minutes(5),
            confirmed_at: None,
            cancelled_at: None,
            quantity: 1,
            owner: None,
            created_at: created,
        };
        let renew = |after_minutes, lifetime_minutes| {
            RenewRequest {
                hold_id: HoldId(1),
                scope: &Scope::Anonymous,
                now: created + Duration::minutes(after_minutes),
                lifetime: Duration::minutes(lifetime_minutes),
                max_life: Duration::minutes(20),
            }
            .renewed_expiry(&hold)
        };
        assert_eq!(renew(4, 5), created + Duration::minutes(9));
        assert_eq!(renew(4, 30), created + Duration::minutes(20), "capped");
        assert_eq!(renew(1, 1), hold.expires_at, "never shortened");
    }
}
