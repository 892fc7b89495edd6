//! [`SlotAdmin`]: the operator's changes to slots and the listing of every slot with its units.

use async_trait::async_trait;

use super::error::StoreError;
use super::outcome::{Decided, SlotChange};
use crate::model::{
    AvailabilityQuery, CapacityChange, PageRequest, SlotCursor, SlotId, SlotUsage, Timestamp,
};

/// Slot administration: change a slot's capacity, close or reopen its sales, remove
/// it, list every slot with its units. Each change is one conditional write on the slot row,
/// never taking a unit that is held or confirmed.
#[async_trait]
pub trait SlotAdmin: Send + Sync + 'static {
    /// Changes the capacity of a slot that has not been removed as `change` says
    /// ([`CapacityChange`]: to a number, by a number, or to a number while it still is the one
    /// read), the capacity after it in `1..=i32::MAX`, moving `remaining` by the same amount,
    /// atomically:
    ///
    /// 1. one conditional update ([`CapacityChange::terms`]): `capacity = new, remaining =
    ///    remaining + (new - capacity)` where the new `remaining` is `>= 0`, the new capacity
    ///    in range and, for a `Replace`, the capacity the one expected; a change that leaves
    ///    the capacity as it is is applied without a write or an event;
    /// 2. if no row was affected and the slot's held holds with `expires_at <= now` hold
    ///    enough units to make it fit, mark them expired, give their units back and update
    ///    once more; a refused change reclaims nothing it could tell would not help (a store
    ///    that estimates before taking its lock may reclaim holds that had expired anyway
    ///    when a concurrent confirm makes the estimate wrong: they were free already, so
    ///    availability and the invariant are the same either way).
    ///
    /// [`SlotChange::InUse`] answers any refusal of a slot that exists (units in the way, a
    /// capacity out of range, another capacity than expected) with the slot's units as read
    /// after it: the engine says which.
    async fn change_capacity(
        &self,
        slot_id: SlotId,
        change: CapacityChange,
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
        filter: &AvailabilityQuery,
        page: PageRequest<SlotCursor>,
        now: Timestamp,
    ) -> Result<Decided<Vec<SlotUsage>>, StoreError>;
}
