//! [`HoldStore`]: the hold lifecycle, what a store must do for the seed's four operations
//! (availability, hold, confirm, cancel) plus renewal and reading one hold.

use async_trait::async_trait;

use super::candidates::{first_that_fits, AnyHoldOutcome, AnyHoldRequest, PlaceOne};
use super::error::StoreError;
use super::outcome::{Decided, HoldOutcome, HoldRequest, RenewRequest, Transition};
use crate::model::{AvailabilityEntry, Hold, HoldId, NewSlot, PoolUsage, Slot, SlotId, Timestamp};
use crate::scope::Scope;

/// The hold lifecycle, operation by operation: the one capability every store has. Object
/// safe: `Arc<dyn HoldStore>` is one.
///
/// The rules each method must follow: the capacity invariant
/// `remaining + Σ quantity(stored held) + Σ quantity(confirmed) == capacity` (with
/// `remaining >= 0`) holds after every call, units are reserved only by a conditional
/// decrement (`remaining >= quantity`) that affected a row, two holds never share an
/// idempotency key, and an operation on an existing hold acts only inside the caller's
/// [`Scope`], as part of its write's condition. The
/// [`conformance`](crate::conformance) suite (feature `conformance`) checks an implementation:
/// `hold_store_conformance_tests!` for this trait alone.
#[async_trait]
pub trait HoldStore: Send + Sync + 'static {
    /// Stores a validated slot with `remaining = capacity` and returns it with its new id;
    /// `now` is when (for the store's event log, if it keeps one).
    async fn create_slot(&self, slot: &NewSlot, now: Timestamp) -> Result<Slot, StoreError>;

    /// The slot as stored, if it exists (removed slots included).
    async fn get_slot(&self, slot_id: SlotId) -> Result<Option<Slot>, StoreError>;

    /// Every slot with `starts_at > now`, ordered by `starts_at` then `slot_id`, sold-out
    /// slots included. `remaining` counts the units of holds stored as held whose
    /// `expires_at <= now` as free.
    async fn availability(
        &self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError>;

    /// Every pool with its units at `now` ([`PoolStore`](super::PoolStore)): the engine
    /// reads it with [`availability`](HoldStore::availability), so a slot's units in the
    /// listing are the least of its own and its pools'. A store without pools keeps this
    /// default, no pools.
    async fn pools(&self, now: Timestamp) -> Result<Decided<Vec<PoolUsage>>, StoreError> {
        Ok(Decided::new(now, Vec::new()))
    }

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

    /// Places a hold on any one of `request.candidates`: the first, in their order, that
    /// fits. The default, [`first_that_fits`], gives each candidate in turn
    /// [`create_hold`](HoldStore::create_hold) until one stores a hold; a store may do better
    /// (PostgreSQL first takes the first candidate that fits and that no other transaction
    /// has locked, without waiting), as long as what it answers is what the default could
    /// have: a hold on one candidate, a replay, a key in use, or every candidate refused.
    async fn create_hold_any(
        &self,
        request: AnyHoldRequest<'_>,
    ) -> Result<Decided<AnyHoldOutcome>, StoreError> {
        first_that_fits(self, request).await
    }

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
}

/// Every hold store places one hold for [`first_that_fits`].
#[async_trait]
impl<S: HoldStore + ?Sized> PlaceOne for &S {
    async fn place_one(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        (**self).create_hold(request).await
    }
}
