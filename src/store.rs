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

use crate::model::{
    AvailabilityEntry, Hold, HoldId, IdempotencyKey, NewSlot, Slot, SlotId, Timestamp,
};

/// A request to place a hold, as the engine hands it to the store.
#[derive(Debug, Clone, Copy)]
pub struct HoldRequest<'a> {
    /// The slot to take a unit of.
    pub slot_id: SlotId,
    /// The client's idempotency key (already validated).
    pub key: &'a IdempotencyKey,
    /// The engine's current time; the slot must start after it.
    pub now: Timestamp,
    /// When the new hold will expire.
    pub expires_at: Timestamp,
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

/// What [`Store::create_hold`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    /// A unit was taken and a new hold stored.
    Created(Hold),
    /// A hold with this key already exists on this slot; nothing changed. The hold is returned
    /// as stored now.
    Replayed(Hold),
    /// A hold with this key exists on a *different* slot; nothing changed.
    KeyReused(Hold),
    /// The slot has no free unit, even after reclaiming expired holds; nothing changed.
    SoldOut,
    /// No slot has this id.
    SlotNotFound,
    /// The slot has already started (`starts_at <= now`); nothing changed.
    SlotClosed,
}

impl HoldOutcome {
    /// The answer to a hold request that stored nothing, from what the store reads after its
    /// writes changed nothing: the hold the key already belongs to, if any (a key in use wins
    /// over every other answer), else the requested slot's `starts_at`, if the slot exists.
    /// Every backend explains a refusal the same way through this.
    pub fn refused(
        request: &HoldRequest<'_>,
        key_holder: Option<Hold>,
        slot_starts_at: Option<Timestamp>,
    ) -> HoldOutcome {
        match (key_holder, slot_starts_at) {
            (Some(hold), _) if hold.slot_id == request.slot_id => HoldOutcome::Replayed(hold),
            (Some(hold), _) => HoldOutcome::KeyReused(hold),
            (None, None) => HoldOutcome::SlotNotFound,
            (None, Some(starts_at)) if starts_at <= request.now => HoldOutcome::SlotClosed,
            (None, Some(_)) => HoldOutcome::SoldOut,
        }
    }
}

/// What [`Store::confirm_hold`] or [`Store::cancel_hold`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The hold changed state; here it is after the change.
    Applied(Hold),
    /// The hold exists but was not in a state the operation applies to; nothing changed. Here
    /// it is as stored now. The engine decides what that means for the caller.
    NotApplied(Hold),
    /// No hold has this id.
    NotFound,
}

/// A backend's storage, operation by operation. Object safe: `Arc<dyn Store>` is a `Store`.
///
/// The rules each method must follow: the capacity invariant
/// `remaining + stored held + confirmed == capacity` (with `remaining >= 0`) holds after every
/// call, a unit is reserved only by a conditional decrement that affected a row, and two holds
/// never share an idempotency key. The
/// [`conformance`](crate::conformance) suite (feature `conformance`) checks an implementation.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Stores a validated slot with `remaining = capacity` and returns it with its new id.
    async fn create_slot(&self, slot: &NewSlot) -> Result<Slot, StoreError>;

    /// Every slot with `starts_at > now`, ordered by `starts_at` then `slot_id`, sold-out
    /// slots included. `remaining` counts holds stored as held whose `expires_at <= now` as
    /// free.
    async fn availability(
        &self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError>;

    /// Places a hold, atomically:
    ///
    /// 1. decrement the slot's `remaining` where `remaining > 0` and `starts_at > now`;
    /// 2. if no row was affected, mark the slot's held holds with `expires_at <= now` as
    ///    expired, add the number of rows that changed back to `remaining`, and decrement once
    ///    more;
    /// 3. insert the hold under the unique key; a unique violation undoes the decrement and
    ///    yields [`HoldOutcome::Replayed`] or [`HoldOutcome::KeyReused`].
    ///
    /// A key already used takes precedence over every other outcome: a replay on a sold-out or
    /// started slot is still a replay.
    async fn create_hold(
        &self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError>;

    /// Confirms a hold stored as held with `expires_at > now`, setting `confirmed_at = now`.
    /// Capacity does not change.
    async fn confirm_hold(
        &self,
        hold_id: HoldId,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError>;

    /// Cancels a confirmed hold, or a held one with `expires_at > now`, setting
    /// `cancelled_at = now` and giving its unit back to the slot in the same transaction.
    async fn cancel_hold(
        &self,
        hold_id: HoldId,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError>;

    /// The hold as stored (status not resolved against the clock), if it exists, with the
    /// instant to resolve it at (`now` unless the store keeps its own clock).
    async fn get_hold(
        &self,
        hold_id: HoldId,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError>;

    /// The slot as stored, if it exists.
    async fn get_slot(&self, slot_id: SlotId) -> Result<Option<Slot>, StoreError>;
}

macro_rules! forward_store {
    ($($ptr:ty),*) => {$(
        #[async_trait]
        impl<T: Store + ?Sized> Store for $ptr {
            async fn create_slot(&self, slot: &NewSlot) -> Result<Slot, StoreError> {
                (**self).create_slot(slot).await
            }
            async fn availability(&self, now: Timestamp) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
                (**self).availability(now).await
            }
            async fn create_hold(&self, request: HoldRequest<'_>) -> Result<Decided<HoldOutcome>, StoreError> {
                (**self).create_hold(request).await
            }
            async fn confirm_hold(&self, hold_id: HoldId, now: Timestamp) -> Result<Decided<Transition>, StoreError> {
                (**self).confirm_hold(hold_id, now).await
            }
            async fn cancel_hold(&self, hold_id: HoldId, now: Timestamp) -> Result<Decided<Transition>, StoreError> {
                (**self).cancel_hold(hold_id, now).await
            }
            async fn get_hold(&self, hold_id: HoldId, now: Timestamp) -> Result<Decided<Option<Hold>>, StoreError> {
                (**self).get_hold(hold_id, now).await
            }
            async fn get_slot(&self, slot_id: SlotId) -> Result<Option<Slot>, StoreError> {
                (**self).get_slot(slot_id).await
            }
        }
    )*};
}

forward_store!(Arc<T>, Box<T>);

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
        let request = HoldRequest {
            slot_id: SlotId(1),
            key: &key,
            now,
            expires_at: now + Duration::minutes(5),
        };
        let holder = |slot| Hold {
            hold_id: HoldId(9),
            slot_id: SlotId(slot),
            status: HoldStatus::Held,
            expires_at: now,
            confirmed_at: None,
            cancelled_at: None,
        };
        let later = Some(now + Duration::hours(1));
        assert_eq!(
            HoldOutcome::refused(&request, Some(holder(1)), Some(now)),
            HoldOutcome::Replayed(holder(1)),
            "a replay wins over a started slot"
        );
        assert_eq!(
            HoldOutcome::refused(&request, Some(holder(2)), later),
            HoldOutcome::KeyReused(holder(2))
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, None),
            HoldOutcome::SlotNotFound
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, Some(now)),
            HoldOutcome::SlotClosed
        );
        assert_eq!(
            HoldOutcome::refused(&request, None, later),
            HoldOutcome::SoldOut
        );
    }
}
