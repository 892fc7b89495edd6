//! [`SlotAdmin`]: the operator's changes to slots and the listing of every slot with its units.

use async_trait::async_trait;

use super::error::StoreError;
use super::outcome::{Decided, SlotChange};
use crate::model::{AvailabilityQuery, PageRequest, SlotCursor, SlotId, SlotUsage, Timestamp};

/// Slot administration: change a slot's capacity, close or reopen its sales, remove
/// it, list every slot with its units. Each change is one conditional write on the slot row,
/// never taking a unit that is held or confirmed.
#[async_trait]
pub trait SlotAdmin: Send + Sync + 'static {
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
        filter: &AvailabilityQuery,
        page: PageRequest<SlotCursor>,
        now: Timestamp,
    ) -> Result<Decided<Vec<SlotUsage>>, StoreError>;
}
