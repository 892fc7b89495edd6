//! Slot administration: changing capacity, closing and reopening sales, removing slots, and
//! the operator's listing of every slot with its units.
//!
//! Every change is one atomic store operation decided by the rows it affected, and invalidates
//! the cached availability after it committed. None of them ever takes a unit that is held or
//! confirmed: lowering a capacity or removing a slot takes only free units (expired holds
//! included, which the store reclaims when that makes the change fit), and is refused with the
//! units in use otherwise.
//!
//! ```
//! use chrono::{Duration, Utc};
//! use slot_booking::{
//!     BookingEngine, BookingError, MemoryStore, NewSlot, ResourceId, SlotFilter, SlotPageRequest,
//! };
//!
//! # tokio_test::block_on(async {
//! let engine = BookingEngine::new(MemoryStore::new());
//! let room = ResourceId::new("room-7").expect("a valid resource id");
//! let start = Utc::now() + Duration::days(1);
//! let slot = engine
//!     .create_slot(NewSlot::new(start, start + Duration::hours(1), 10).resource(room.clone()))
//!     .await?;
//! let hold = engine.hold(slot.slot_id, "order-1").await?.hold;
//! engine.confirm(hold.hold_id).await?;
//!
//! // Fewer seats: free units only. One is sold, so 1 is the floor.
//! assert_eq!(engine.change_capacity(slot.slot_id, 4).await?.remaining, 3);
//! let refused = engine.change_capacity(slot.slot_id, 0).await.unwrap_err();
//! assert_eq!(refused.code(), "invalid_slot");
//!
//! // Stop selling; the booking stands, and removal waits until nothing is sold.
//! engine.close_sales(slot.slot_id).await?;
//! assert!(matches!(
//!     engine.remove_slot(slot.slot_id).await,
//!     Err(BookingError::SlotInUse { held: 0, confirmed: 1, .. })
//! ));
//!
//! let page = engine
//!     .list_slots(&SlotFilter::all().resource(room), SlotPageRequest::first(50))
//!     .await?;
//! let row = &page.slots[0];
//! assert_eq!((row.capacity, row.remaining, row.held, row.confirmed), (4, 3, 0, 1));
//! assert!(row.closed && page.next_after.is_none());
//! # Ok::<(), BookingError>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::engine::{detached, guarded, BookingEngine};
use crate::error::BookingError;
use crate::model::{
    rfc3339, AvailabilityQuery, InvalidSlot, ResourceId, Slot, SlotId, Timestamp, MAX_PAGE_SIZE,
};
use crate::observe::{Op, Operation};
use crate::store::{Decided, SlotChange, Store};

/// Which slots the operator's listing ([`BookingEngine::list_slots`]) shows: the narrowing of
/// an availability query (a resource, `starts_at` in `[from, to)`), applied to every slot,
/// past, closed and removed ones included.
pub type SlotFilter = AvailabilityQuery;

/// Where a page of the operator's listing starts: after the slot with this `starts_at` and id
/// (the listing's order). Written `<microseconds since the epoch>_<slot id>` as text, for URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotCursor {
    /// The last listed slot's start.
    pub starts_at: Timestamp,
    /// The last listed slot's id.
    pub slot_id: SlotId,
}

impl SlotCursor {
    /// The cursor just after `slot`.
    pub fn after(slot: &Slot) -> Self {
        SlotCursor {
            starts_at: slot.starts_at,
            slot_id: slot.slot_id,
        }
    }
}

impl fmt::Display for SlotCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.starts_at.timestamp_micros(), self.slot_id)
    }
}

/// A string that is not a [`SlotCursor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a slot cursor is `<microseconds>_<slot id>`, got {0:?}")]
pub struct InvalidSlotCursor(pub String);

impl FromStr for SlotCursor {
    type Err = InvalidSlotCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidSlotCursor(s.to_owned());
        let (micros, id) = s.split_once('_').ok_or_else(invalid)?;
        let signed = micros.strip_prefix('-').unwrap_or(micros);
        if signed.is_empty() || !signed.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let micros: i64 = micros.parse().map_err(|_| invalid())?;
        let starts_at = chrono::DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?;
        let slot_id = id.parse::<SlotId>().map_err(|_| invalid())?;
        Ok(SlotCursor { starts_at, slot_id })
    }
}

impl Serialize for SlotCursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SlotCursor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

/// One page of the operator's listing: slots after `after` in `(starts_at, slot_id)` order, at
/// most `limit` of them (`1..=`[`MAX_PAGE_SIZE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotPageRequest {
    /// Only slots after this one; `None` starts at the first.
    pub after: Option<SlotCursor>,
    /// At most this many slots.
    pub limit: u32,
}

impl SlotPageRequest {
    /// The first page of up to `limit` slots.
    pub fn first(limit: u32) -> Self {
        SlotPageRequest { after: None, limit }
    }

    /// The page of up to `limit` slots after `after`.
    pub fn after(after: SlotCursor, limit: u32) -> Self {
        SlotPageRequest {
            after: Some(after),
            limit,
        }
    }
}

impl Default for SlotPageRequest {
    /// The first page of 100 slots.
    fn default() -> Self {
        SlotPageRequest::first(100)
    }
}

/// A slot as stored with the units of its holds still stored as held, split at the instant of
/// the read: what a store reports for the operator's listing and for a refused change.
///
/// Confirmed units follow from the capacity invariant
/// (`remaining + held + expired + confirmed == capacity`), so a store need not count them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotUsage {
    /// The slot as stored.
    pub slot: Slot,
    /// Units of holds stored as held that are still active.
    pub held: i32,
    /// Units of holds stored as held that have expired but were not yet reclaimed: free.
    pub expired: i32,
}

impl SlotUsage {
    /// Units a new hold could take (if the slot is selling): free plus expired.
    pub fn available(&self) -> i32 {
        self.slot.remaining + self.expired
    }

    /// Units of confirmed holds.
    pub fn confirmed(&self) -> i32 {
        self.slot.capacity - self.slot.remaining - self.held - self.expired
    }

    /// Units held (active) or confirmed: what no capacity change or removal may take.
    pub fn taken(&self) -> i32 {
        self.held + self.confirmed()
    }
}

/// One slot of the operator's listing: the slot and where each of its units is.
/// `capacity == remaining + held + confirmed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotSummary {
    /// The slot's id.
    pub slot_id: SlotId,
    /// When it begins.
    #[serde(with = "rfc3339")]
    pub starts_at: Timestamp,
    /// When it ends.
    #[serde(with = "rfc3339")]
    pub ends_at: Timestamp,
    /// Total units.
    pub capacity: i32,
    /// Units a new hold could take (free, expired holds included), were it selling.
    pub remaining: i32,
    /// Units of active holds.
    pub held: i32,
    /// Units of confirmed holds.
    pub confirmed: i32,
    /// Its resource, if any.
    pub resource: Option<ResourceId>,
    /// Whether its sales are closed.
    pub closed: bool,
    /// When it was removed, if it was.
    #[serde(with = "rfc3339::option")]
    pub removed_at: Option<Timestamp>,
}

impl From<SlotUsage> for SlotSummary {
    fn from(usage: SlotUsage) -> Self {
        let (remaining, confirmed) = (usage.available(), usage.confirmed());
        let SlotUsage { slot, held, .. } = usage;
        SlotSummary {
            slot_id: slot.slot_id,
            starts_at: slot.starts_at,
            ends_at: slot.ends_at,
            capacity: slot.capacity,
            remaining,
            held,
            confirmed,
            resource: slot.resource,
            closed: slot.closed,
            removed_at: slot.removed_at,
        }
    }
}

/// A page of the operator's listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotPage {
    /// The slots, by `starts_at` then id.
    pub slots: Vec<SlotSummary>,
    /// Where the next page starts when this one was full; `None` when nothing follows.
    pub next_after: Option<SlotCursor>,
}

/// A capacity as the engine accepts it: `1..=i32::MAX`.
pub(crate) fn checked_capacity(capacity: i64) -> Result<i32, BookingError> {
    match i32::try_from(capacity) {
        Ok(c) if c >= 1 => Ok(c),
        _ => Err(BookingError::InvalidSlot(InvalidSlot::Capacity(capacity))),
    }
}

/// An administrative change of a slot, for turning what the store did into the caller's
/// answer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SlotOperation {
    /// A new capacity (already checked).
    Capacity(i32),
    /// Closing or reopening sales.
    Sales,
    /// Removal.
    Remove,
}

impl SlotOperation {
    /// The caller's answer to what the store did with this operation on `slot_id`.
    pub(crate) fn answer(self, change: SlotChange, slot_id: SlotId) -> Result<Slot, BookingError> {
        match (change, self) {
            (SlotChange::Applied(slot), _) => Ok(slot),
            (SlotChange::InUse(usage), SlotOperation::Capacity(requested)) => {
                Err(BookingError::CapacityTaken {
                    slot_id,
                    requested,
                    taken: usage.taken(),
                })
            }
            (SlotChange::InUse(usage), SlotOperation::Remove) => Err(BookingError::SlotInUse {
                slot_id,
                held: usage.held,
                confirmed: usage.confirmed(),
            }),
            // Closing and reopening take no unit: "in use" cannot be their answer.
            (SlotChange::NotFound | SlotChange::InUse(_), _) => {
                Err(BookingError::SlotNotFound { slot_id })
            }
        }
    }
}

impl<S: Store> BookingEngine<S> {
    /// Sets the slot's capacity to `capacity` (`1..=i32::MAX`).
    ///
    /// Raising it adds free units. Lowering it takes free units only, in one conditional
    /// update (`remaining >= capacity taken away`), reclaiming the slot's expired holds first
    /// when that makes it fit; when units held or confirmed stand in the way nothing changes
    /// and the error says how many are taken (`capacity_taken`). Works on closed and started
    /// slots, not on removed ones (`slot_not_found`).
    pub async fn change_capacity(
        &self,
        slot_id: SlotId,
        capacity: i64,
    ) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::ChangeCapacity).slot(slot_id);
        op.run(async {
            let capacity = checked_capacity(capacity)?;
            let now = self.clock().now();
            let change = self
                .admin_write(&op, move |store| async move {
                    store.change_capacity(slot_id, capacity, now).await
                })
                .await?;
            SlotOperation::Capacity(capacity).answer(change.outcome, slot_id)
        })
        .await
    }

    /// Closes the slot's sales: new holds are refused (`slot_closed`) and the slot leaves the
    /// availability listing, while its existing holds can still be confirmed, cancelled and
    /// renewed. Closing a closed slot changes nothing.
    pub async fn close_sales(&self, slot_id: SlotId) -> Result<Slot, BookingError> {
        self.set_closed(slot_id, true).await
    }

    /// Reopens the slot's sales after [`close_sales`](BookingEngine::close_sales).
    pub async fn reopen_sales(&self, slot_id: SlotId) -> Result<Slot, BookingError> {
        self.set_closed(slot_id, false).await
    }

    async fn set_closed(&self, slot_id: SlotId, closed: bool) -> Result<Slot, BookingError> {
        let op = Op::new(sales_operation(closed)).slot(slot_id);
        op.run(async {
            let now = self.clock().now();
            let change = self
                .admin_write(&op, move |store| async move {
                    store.set_closed(slot_id, closed, now).await
                })
                .await?;
            SlotOperation::Sales.answer(change.outcome, slot_id)
        })
        .await
    }

    /// Removes a slot that has no active held and no confirmed units (expired holds are
    /// reclaimed when that makes it so); otherwise nothing changes and the error says how
    /// many units are held and confirmed (`slot_in_use`).
    ///
    /// Removal archives: the slot gets `removed_at`, leaves availability, takes no holds
    /// (`slot_not_found`) and cannot be changed again, but the slot and every hold on it stay
    /// stored, so hold reads and idempotency-key replays keep answering and the operator's
    /// listing still shows it. No booking is ever lost by a removal.
    pub async fn remove_slot(&self, slot_id: SlotId) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::RemoveSlot).slot(slot_id);
        op.run(async {
            let now = self.clock().now();
            let change = self
                .admin_write(&op, move |store| async move {
                    store.remove_slot(slot_id, now).await
                })
                .await?;
            SlotOperation::Remove.answer(change.outcome, slot_id)
        })
        .await
    }

    /// The slot as stored, removed ones included (`removed_at` set); `slot_not_found` when no
    /// slot has this id. `remaining` counts expired holds not yet reclaimed as taken; the
    /// operator's listing counts them as free.
    pub async fn get_slot(&self, slot_id: SlotId) -> Result<Slot, BookingError> {
        let op = Op::new(Operation::GetSlot).slot(slot_id);
        op.run(async {
            op.store(guarded(self.store().get_slot(slot_id)))
                .await?
                .ok_or(BookingError::SlotNotFound { slot_id })
        })
        .await
    }

    /// A page of every slot the filter admits — past, closed and removed ones included — by
    /// `starts_at` then id, each with its capacity and its units free, held and confirmed.
    /// For operators: it reads the store, never the availability cache.
    pub async fn list_slots(
        &self,
        filter: &SlotFilter,
        page: SlotPageRequest,
    ) -> Result<SlotPage, BookingError> {
        let op = Op::new(Operation::ListSlots);
        op.run(async {
            if !(1..=MAX_PAGE_SIZE).contains(&page.limit) {
                return Err(BookingError::InvalidPage { limit: page.limit });
            }
            filter.check()?;
            let now = self.clock().now();
            let read = op
                .store(guarded(self.store().list_slots(filter, page, now)))
                .await?;
            let full = read.outcome.len() >= page.limit as usize;
            let next_after = read
                .outcome
                .last()
                .filter(|_| full)
                .map(|usage| SlotCursor::after(&usage.slot));
            Ok(SlotPage {
                slots: read.outcome.into_iter().map(SlotSummary::from).collect(),
                next_after,
            })
        })
        .await
    }

    /// Runs an administrative write to its end whatever happens to the caller, and
    /// invalidates the cached availability once it has committed a change (R3).
    async fn admin_write<F, Fut>(
        &self,
        op: &Op,
        write: F,
    ) -> Result<Decided<SlotChange>, BookingError>
    where
        F: FnOnce(Arc<S>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<Decided<SlotChange>, crate::StoreError>>
            + Send
            + 'static,
    {
        let store = self.store_handle();
        let engine = self.clone();
        Ok(op
            .store(detached(async move {
                let change = write(store).await?;
                if matches!(change.outcome, SlotChange::Applied(_)) {
                    engine.invalidate_availability();
                }
                Ok(change)
            }))
            .await?)
    }
}

/// The operation of closing (`true`) or reopening (`false`) a slot's sales.
pub(crate) fn sales_operation(closed: bool) -> Operation {
    if closed {
        Operation::CloseSales
    } else {
        Operation::ReopenSales
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn cursors_round_trip_as_text() {
        let cursor = SlotCursor {
            starts_at: chrono::Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap()
                + chrono::Duration::microseconds(7),
            slot_id: SlotId(42),
        };
        assert_eq!(cursor.to_string(), "1893488400000007_42");
        assert_eq!(cursor.to_string().parse::<SlotCursor>(), Ok(cursor));
        assert!("-5_1".parse::<SlotCursor>().is_ok());
        for bad in [
            "",
            "1",
            "_1",
            "1_",
            "a_1",
            "1_+2",
            "1_-2",
            "+1_2",
            "1_2_3",
            "99999999999999999999_1",
        ] {
            assert!(bad.parse::<SlotCursor>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn usage_splits_capacity_into_free_held_and_confirmed() {
        let at = chrono::Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap();
        let usage = SlotUsage {
            slot: Slot {
                slot_id: SlotId(1),
                starts_at: at,
                ends_at: at + chrono::Duration::hours(1),
                capacity: 10,
                remaining: 3,
                resource: None,
                closed: false,
                removed_at: None,
            },
            held: 2,
            expired: 1,
        };
        assert_eq!(
            (usage.available(), usage.confirmed(), usage.taken()),
            (4, 4, 6)
        );
        let summary = SlotSummary::from(usage);
        assert_eq!(
            summary.capacity,
            summary.remaining + summary.held + summary.confirmed
        );
    }

    #[test]
    fn capacities_outside_the_range_are_invalid() {
        assert_eq!(checked_capacity(1).ok(), Some(1));
        assert_eq!(checked_capacity(i64::from(i32::MAX)).ok(), Some(i32::MAX));
        for bad in [0, -1, i64::from(i32::MAX) + 1, i64::MIN] {
            assert!(matches!(
                checked_capacity(bad),
                Err(BookingError::InvalidSlot(InvalidSlot::Capacity(c))) if c == bad
            ));
        }
    }
}
