//! The hold lifecycle on the engine: place, confirm, cancel, renew and read holds, create
//! slots, and page through an owner's holds or a slot's roster.

use std::sync::Arc;
use std::time::Duration;

use crate::answers::{hold_placed, settle};
use crate::engine::{
    check_limit, chrono_duration, detached, guarded, prepare_slot, BookingEngine, HoldPlaced,
    NewHold, PreparedHold,
};
use crate::error::BookingError;
use crate::model::{
    Hold, HoldId, HoldPage, HoldStatus, NewSlot, OwnerId, Page, PageRequest, Slot, SlotId,
    Timestamp, MAX_QUANTITY,
};
use crate::observe::{Op, Operation};
use crate::scope::Scope;
use crate::store::{Decided, HoldOutcome, HoldQueries, HoldStore, RenewRequest, StoreError};

impl<S: HoldStore> BookingEngine<S> {
    /// Places an anonymous hold on one unit of `slot_id` for the engine's hold lifetime: the
    /// seed's hold. [`place_hold`](BookingEngine::place_hold) takes quantity, owner and
    /// lifetime.
    ///
    /// Idempotent by `key`: calling again with the same key and slot returns the same hold in
    /// its current state with `replayed: true`, reserving nothing more.
    pub async fn hold(&self, slot_id: SlotId, key: &str) -> Result<HoldPlaced, BookingError> {
        self.place_hold(NewHold::new(slot_id, key)).await
    }

    /// Places a hold on `request.quantity` units of a slot, all or none, for the requested
    /// lifetime (or the engine's), owned by `request.owner` (or anonymous).
    ///
    /// Idempotent by key: the same key with the same slot, quantity and owner returns the same
    /// hold in its current state with `replayed: true`, reserving nothing more. The same key
    /// with anything else is `idempotency_key_reused`; when the key's hold belongs to another
    /// owner the error says nothing about it.
    pub async fn place_hold(&self, request: NewHold) -> Result<HoldPlaced, BookingError> {
        let op = Op::new(Operation::Hold).slot(request.slot_id);
        op.run(async {
            let prepared = self.prepare_hold(request)?;
            let inner = Arc::clone(&self.inner);
            let (slot_id, quantity) = (prepared.slot_id, prepared.quantity);
            let outcome = op
                .store(detached(async move {
                    let outcome = inner.store.create_hold(prepared.request()).await;
                    if let Ok(Decided {
                        outcome: HoldOutcome::Created(hold),
                        ..
                    }) = &outcome
                    {
                        inner.show_taken(&[(hold.slot_id, hold.quantity)]);
                    }
                    outcome
                }))
                .await?;
            hold_placed(&op, outcome, slot_id, quantity)
        })
        .await
    }

    /// Checks a hold request and fixes its instant and expiry: everything the store is
    /// handed, before any store sees it.
    pub(crate) fn prepare_hold(&self, request: NewHold) -> Result<PreparedHold, BookingError> {
        let key = self.inner.stored_key(request.key, request.owner.as_ref())?;
        let quantity = request.quantity;
        if !(1..=MAX_QUANTITY).contains(&quantity) {
            return Err(BookingError::InvalidQuantity {
                quantity: quantity.into(),
            });
        }
        let lifetime = self.inner.lifetimes.pick(request.lifetime)?;
        let now = self.inner.clock.now();
        let expires_at = now
            .checked_add_signed(lifetime)
            .ok_or_else(|| StoreError::failed("the hold's expiry is past the end of time"))?;
        Ok(PreparedHold {
            slot_id: request.slot_id,
            key,
            owner: request.owner,
            quantity,
            now,
            expires_at,
        })
    }

    /// The lifetime, maximum life and instant of a renewal asking for `lifetime`.
    pub(crate) fn prepare_renew(
        &self,
        lifetime: Option<Duration>,
    ) -> Result<(chrono::Duration, chrono::Duration, Timestamp), BookingError> {
        let lifetime = self.inner.lifetimes.pick(lifetime)?;
        let max_life = chrono_duration(self.inner.lifetimes.max_life);
        Ok((lifetime, max_life, self.inner.clock.now()))
    }

    /// Confirms an active hold in `scope`. Confirming a confirmed hold returns it unchanged;
    /// a hold outside `scope` is `hold_not_found`.
    pub async fn confirm(&self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.end_hold(scope, hold_id, HoldStatus::Confirmed).await
    }

    /// Cancels an active or confirmed hold in `scope`, giving its units back. Cancelling a
    /// cancelled hold returns it unchanged; a hold outside `scope` is `hold_not_found`.
    pub async fn cancel(&self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        self.end_hold(scope, hold_id, HoldStatus::Cancelled).await
    }

    /// Confirms or cancels (`to`) a hold in `scope`, running the store's write to its end and
    /// invalidating the cached availability once it committed a change (R3).
    async fn end_hold(
        &self,
        scope: &Scope,
        hold_id: HoldId,
        to: HoldStatus,
    ) -> Result<Hold, BookingError> {
        let confirm = to == HoldStatus::Confirmed;
        let operation = if confirm {
            Operation::Confirm
        } else {
            Operation::Cancel
        };
        let op = Op::new(operation).hold(hold_id);
        op.run(async {
            let now = self.inner.clock.now();
            let inner = Arc::clone(&self.inner);
            let scope = scope.clone();
            let transition = op
                .store(detached(async move {
                    let done = if confirm {
                        inner.store.confirm_hold(hold_id, &scope, now).await
                    } else {
                        inner.store.cancel_hold(hold_id, &scope, now).await
                    };
                    inner.invalidate_if_applied(done)
                }))
                .await?;
            settle(&op, transition, hold_id, to)
        })
        .await
    }

    /// Renews an active hold in `scope`: `expires_at` moves to now plus `lifetime` (the
    /// engine's hold lifetime if `None`, else within its
    /// [`requested_ttl_bounds`](crate::EngineBuilder::requested_ttl_bounds)), but never past the
    /// hold's creation plus the [`max_hold_life`](crate::EngineBuilder::max_hold_life), and never
    /// earlier than it was. Capacity does not change.
    ///
    /// An expired hold cannot be renewed (`hold_expired`), nor a cancelled one
    /// (`hold_cancelled`); a confirmed hold has nothing to renew and is returned unchanged.
    pub async fn renew(
        &self,
        scope: &Scope,
        hold_id: HoldId,
        lifetime: Option<Duration>,
    ) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::Renew).hold(hold_id);
        op.run(async {
            let (lifetime, max_life, now) = self.prepare_renew(lifetime)?;
            let inner = Arc::clone(&self.inner);
            let scope = scope.clone();
            let transition = op
                .store(detached(async move {
                    let request = RenewRequest {
                        hold_id,
                        scope: &scope,
                        now,
                        lifetime,
                        max_life,
                    };
                    inner.store.renew_hold(request).await
                }))
                .await?;
            // A confirmed hold has nothing to renew: it is returned unchanged.
            settle(&op, transition, hold_id, HoldStatus::Confirmed)
        })
        .await
    }

    /// Reads a hold in `scope`, its status resolved at the current time; a hold outside
    /// `scope` is `hold_not_found`.
    pub async fn get_hold(&self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let op = Op::new(Operation::GetHold).hold(hold_id);
        op.run(async {
            let now = self.inner.clock.now();
            let read = op
                .store(guarded(self.inner.store.get_hold(hold_id, scope, now)))
                .await?;
            match read.outcome {
                Some(hold) => Ok(hold.at(read.at)),
                None => Err(BookingError::HoldNotFound { hold_id }),
            }
        })
        .await
    }

    /// Validates and stores a new slot with all its capacity free, selling at once.
    pub async fn create_slot(&self, slot: NewSlot) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::CreateSlot);
        op.run(async {
            let slot = prepare_slot(slot)?;
            let now = self.clock().now();
            let inner = Arc::clone(&self.inner);
            let created = op
                .store(detached(async move {
                    let created = inner.store.create_slot(&slot, now).await?;
                    inner.cache.invalidate();
                    Ok(created)
                }))
                .await?;
            op.record_slot(created.slot_id);
            Ok(created)
        })
        .await
    }
}

impl<S: HoldStore + HoldQueries> BookingEngine<S> {
    /// A page of `owner`'s holds by id, every status, resolved at the current time.
    pub async fn owner_holds(
        &self,
        owner: &OwnerId,
        page: PageRequest,
    ) -> Result<HoldPage, BookingError> {
        let op = Op::new(Operation::OwnerHolds);
        op.run(async {
            check_limit(page.limit)?;
            let now = self.inner.clock.now();
            let read = op
                .store(guarded(self.inner.store.owner_holds(owner, page, now)))
                .await?;
            Ok(into_page(read, page))
        })
        .await
    }

    /// A page of the holds of `slot_id` (the roster: every owner's, every status) by id,
    /// resolved at the current time. Back-office code only: it shows other owners' holds.
    pub async fn slot_holds(
        &self,
        slot_id: SlotId,
        page: PageRequest,
    ) -> Result<HoldPage, BookingError> {
        let op = Op::new(Operation::SlotHolds).slot(slot_id);
        op.run(async {
            check_limit(page.limit)?;
            let now = self.inner.clock.now();
            let read = op
                .store(guarded(self.inner.store.slot_holds(slot_id, page, now)))
                .await?;
            Ok(into_page(read, page))
        })
        .await
    }
}

/// A store's page of holds, each resolved at the instant it was read.
fn into_page(read: Decided<Vec<Hold>>, page: PageRequest) -> HoldPage {
    let at = read.at;
    Page::of(
        read.outcome.into_iter().map(|h| h.at(at)).collect(),
        page.limit,
    )
}
