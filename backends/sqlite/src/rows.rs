//! Decoding rows into the crate's types, and timestamps as the microseconds SQLite keeps.

use super::*;
use slot_booking::store;
use slot_booking::WaitlistEntry;

pub(crate) fn to_micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

pub(crate) fn from_micros(micros: i64) -> Result<Timestamp, StoreError> {
    store::from_micros(micros)
}

slot_booking::sqlx_columns!(Cols, SqliteRow, map_err);

pub(crate) fn hold_from_row(row: &SqliteRow) -> Result<Hold, StoreError> {
    store::hold_of(&Cols(row))
}

pub(crate) fn slot_from_row(row: &SqliteRow) -> Result<Slot, StoreError> {
    store::slot_of(&Cols(row))
}

/// A row of the `slot_usage` or a `slots_page` statement: the slot and its held units.
pub(crate) fn usage_from_row(row: &SqliteRow) -> Result<SlotUsage, StoreError> {
    store::usage_of(&Cols(row))
}

/// A row of the `read_events` statement.
pub(crate) fn event_from_row(row: &SqliteRow) -> Result<Event, StoreError> {
    let id: i64 = row.try_get("id").map_err(map_err)?;
    store::event_of(&Cols(row), EventPosition::new(0, id))
}

/// A row of [`ENTRY_COLUMNS`](crate::waitlist_sql::ENTRY_COLUMNS).
pub(crate) fn entry_from_row(row: &SqliteRow) -> Result<WaitlistEntry, StoreError> {
    store::entry_of(&Cols(row))
}

/// A row of [`ENTRY_COLUMNS`](crate::waitlist_sql::ENTRY_COLUMNS) and its `position`.
pub(crate) fn placed_entry_from_row(row: &SqliteRow) -> Result<(WaitlistEntry, u32), StoreError> {
    store::placed_entry_of(&Cols(row))
}
