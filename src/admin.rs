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
//!     AvailabilityQuery, BookingEngine, BookingError, MemoryStore, NewSlot, PageRequest, ResourceId, Scope,
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
//! engine.confirm(&Scope::Anonymous, hold.hold_id).await?;
//!
//! // Fewer seats: free units only. One is sold, so 1 is the floor.
//! assert_eq!(engine.change_capacity(slot.slot_id, 4).await?.stored_remaining, 3);
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
//!     .list_slots(&AvailabilityQuery::all().resource(room), PageRequest::first(50))
//!     .await?;
//! let row = &page.items[0];
//! assert_eq!((row.capacity, row.remaining, row.held, row.confirmed), (4, 3, 0, 1));
//! assert!(row.closed && page.next_after.is_none());
//! # Ok::<(), BookingError>(())
//! # }).unwrap();
//! ```

use crate::engine::{check_limit, guarded, BookingEngine};
use crate::error::BookingError;
use crate::model::{
    AvailabilityQuery, CapacityChange, InvalidSlot, Page, PageRequest, Slot, SlotId,
};
use crate::observe::{Op, Operation};
use crate::store::{HoldStore, SlotAdmin, SlotChange};

pub use crate::model::{InvalidSlotCursor, SlotCursor, SlotPage, SlotSummary, SlotUsage};

/// A capacity change as the engine accepts it: a capacity it names outright in
/// `1..=i32::MAX` (a move by any number of units is checked against the slot by the store).
pub(crate) fn checked_capacity(change: CapacityChange) -> Result<CapacityChange, BookingError> {
    match change.target() {
        Some(capacity) if capacity < 1 => Err(BookingError::InvalidSlot(InvalidSlot::Capacity(
            capacity.into(),
        ))),
        _ => Ok(change),
    }
}

/// An administrative change of a slot, for turning what the store did into the caller's
/// answer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SlotOperation {
    /// A capacity change (already checked).
    Capacity(CapacityChange),
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
            // Refused: why, from the slot as read after the refusal.
            (SlotChange::InUse(usage), SlotOperation::Capacity(change)) => {
                let actual = usage.slot.capacity;
                match change.applied_to(actual) {
                    None => Err(BookingError::CapacityChanged {
                        slot_id,
                        expected: change.terms().expected.unwrap_or(actual),
                        actual,
                    }),
                    Some(requested) => match i32::try_from(requested) {
                        Ok(requested) if requested >= 1 => Err(BookingError::CapacityTaken {
                            slot_id,
                            requested,
                            taken: usage.taken(),
                        }),
                        _ => Err(BookingError::InvalidSlot(InvalidSlot::Capacity(requested))),
                    },
                }
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

impl<S: HoldStore + SlotAdmin> BookingEngine<S> {
    /// Changes the slot's capacity: to a number (`change_capacity(slot, 12)`), by a number of
    /// units (`CapacityChange::By(1)`: concurrent moves add up, none is lost), or to a number
    /// only while it is still the capacity the caller read (`CapacityChange::Replace`); see
    /// [`CapacityChange`]. The capacity after it is in `1..=i32::MAX` (`invalid_slot`).
    ///
    /// Raising it adds free units. Lowering it takes free units only, in one conditional
    /// update (`remaining >= capacity taken away`), reclaiming the slot's expired holds first
    /// when that makes it fit; when units held or confirmed stand in the way nothing changes
    /// and the error says how many are taken (`capacity_taken`). A `Replace` that finds another
    /// capacity changes nothing (`capacity_changed`, with the capacity found). Works on closed
    /// and started slots, not on removed ones (`slot_not_found`).
    ///
    /// ```
    /// # use chrono::{Duration, Utc};
    /// # use slot_booking::{BookingEngine, BookingError, CapacityChange, MemoryStore, NewSlot};
    /// # tokio_test::block_on(async {
    /// let engine = BookingEngine::new(MemoryStore::new());
    /// let start = Utc::now() + Duration::days(1);
    /// let slot = engine.create_slot(NewSlot::new(start, start + Duration::hours(1), 4)).await?;
    /// let id = slot.slot_id;
    /// // One more room, whatever the others add meanwhile.
    /// assert_eq!(engine.change_capacity(id, CapacityChange::By(1)).await?.capacity, 5);
    /// // Six, but only if nobody changed it since we read 5.
    /// let replace = CapacityChange::Replace { expected: 5, to: 6 };
    /// assert_eq!(engine.change_capacity(id, replace).await?.capacity, 6);
    /// let stale = CapacityChange::Replace { expected: 5, to: 8 };
    /// let refused = engine.change_capacity(id, stale).await.unwrap_err();
    /// assert_eq!(refused.code(), "capacity_changed");
    /// # Ok::<(), BookingError>(())
    /// # }).unwrap();
    /// ```
    pub async fn change_capacity(
        &self,
        slot_id: SlotId,
        change: impl Into<CapacityChange>,
    ) -> Result<Slot, BookingError> {
        let change = change.into();
        let op = Op::new(Operation::ChangeCapacity).slot(slot_id);
        op.run(async {
            let capacity = checked_capacity(change)?;
            let now = self.clock().now();
            let change = self
                .changing_write(
                    &op,
                    move |store| async move { store.change_capacity(slot_id, capacity, now).await },
                    |change| matches!(change, SlotChange::Applied(_)),
                )
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
                .changing_write(
                    &op,
                    move |store| async move { store.set_closed(slot_id, closed, now).await },
                    |change| matches!(change, SlotChange::Applied(_)),
                )
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
                .changing_write(
                    &op,
                    move |store| async move { store.remove_slot(slot_id, now).await },
                    |change| matches!(change, SlotChange::Applied(_)),
                )
                .await?;
            SlotOperation::Remove.answer(change.outcome, slot_id)
        })
        .await
    }

    /// The slot as stored, removed ones included (`removed_at` set); `slot_not_found` when no
    /// slot has this id. `stored_remaining` counts expired holds not yet reclaimed as taken; the
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
        filter: &AvailabilityQuery,
        page: PageRequest<SlotCursor>,
    ) -> Result<SlotPage, BookingError> {
        let op = Op::new(Operation::ListSlots);
        op.run(async {
            check_limit(page.limit)?;
            filter.check()?;
            let now = self.clock().now();
            let read = op
                .store(guarded(self.store().list_slots(filter, page, now)))
                .await?;
            let slots = read.outcome.into_iter().map(SlotSummary::from).collect();
            Ok(Page::of(slots, page.limit))
        })
        .await
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
                stored_remaining: 3,
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
        let to = CapacityChange::To;
        assert_eq!(checked_capacity(to(1)).ok(), Some(to(1)));
        assert_eq!(checked_capacity(to(i32::MAX)).ok(), Some(to(i32::MAX)));
        // A move is checked against the slot by the store.
        assert!(checked_capacity(CapacityChange::By(i32::MIN)).is_ok());
        for bad in [0, -1, i32::MIN] {
            for change in [
                to(bad),
                CapacityChange::Replace {
                    expected: 1,
                    to: bad,
                },
            ] {
                assert!(matches!(
                    checked_capacity(change),
                    Err(BookingError::InvalidSlot(InvalidSlot::Capacity(c))) if c == i64::from(bad)
                ));
            }
        }
    }
}
