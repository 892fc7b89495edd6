//! slot_booking — sell limited capacity in time slots without overselling.
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub mod cache;
pub mod clock;
pub mod error;
pub mod model;
pub mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::BookingError;
pub use model::{
    AvailabilityEntry, AvailabilityQuery, Hold, HoldId, HoldStatus, IdempotencyKey, NewSlot, Slot,
    SlotId, Timestamp,
};
pub use store::{HoldOutcome, HoldRequest, Store, StoreError, StoreErrorKind, Transition};
