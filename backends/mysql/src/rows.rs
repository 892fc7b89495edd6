//! Decoding rows into the crate's types, and timestamps as the microseconds the tables keep.

use slot_booking::store;
use slot_booking::{
    Event, EventPosition, Hold, Slot, SlotUsage, StoreError, Timestamp, WaitlistEntry,
};
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use crate::map_err;

pub(crate) fn to_micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

pub(crate) fn from_micros(micros: i64) -> Result<Timestamp, StoreError> {
    store::from_micros(micros)
}

slot_booking::sqlx_columns!(Cols, MySqlRow, map_err);

pub(crate) fn hold_from_row(row: &MySqlRow) -> Result<Hold, StoreError> {
    store::hold_of(&Cols(row))
}

pub(crate) fn slot_from_row(row: &MySqlRow) -> Result<Slot, StoreError> {
    store::slot_of(&Cols(row))
}

/// A row of `slot_usage` or a slots page: the slot and its held units.
pub(crate) fn usage_from_row(row: &MySqlRow) -> Result<SlotUsage, StoreError> {
    store::usage_of(&Cols(row))
}

/// A row of a read of the event log: its position is `0_<position>`.
pub(crate) fn event_from_row(row: &MySqlRow) -> Result<Event, StoreError> {
    let position: i64 = row.try_get("position").map_err(map_err)?;
    store::event_of(&Cols(row), EventPosition::new(0, position))
}

/// A waiting entry's row with its place in line (`position`).
pub(crate) fn placed_entry_from_row(row: &MySqlRow) -> Result<(WaitlistEntry, u32), StoreError> {
    store::placed_entry_of(&Cols(row))
}

/// A waiting entry's row.
pub(crate) fn entry_from_row(row: &MySqlRow) -> Result<WaitlistEntry, StoreError> {
    store::entry_of(&Cols(row))
}
