#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub mod cache;
pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod engine;
pub mod error;
pub mod memory;
pub mod model;
pub mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{Availability, AvailabilitySnapshot, BookingEngine, EngineBuilder, HoldPlaced};
pub use error::BookingError;
pub use memory::MemoryStore;
pub use model::{
    AvailabilityEntry, AvailabilityQuery, Hold, HoldId, HoldStatus, IdempotencyKey, NewSlot, Slot,
    SlotId, Timestamp,
};
pub use store::{Decided, HoldOutcome, HoldRequest, Store, StoreError, StoreErrorKind, Transition};
