//! Decoding rows into the crate's types, and timestamps as the microseconds SQLite keeps.

use super::*;
use slot_booking::{EntryId, OwnerId, WaitlistEntry};

pub(crate) fn to_micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

pub(crate) fn from_micros(micros: i64) -> Result<Timestamp, StoreError> {
    DateTime::from_timestamp_micros(micros)
        .ok_or_else(|| StoreError::failed(format!("timestamp out of range: {micros} µs")))
}

pub(crate) fn opt_from_micros(micros: Option<i64>) -> Result<Option<Timestamp>, StoreError> {
    micros.map(from_micros).transpose()
}

pub(crate) fn hold_from_row(row: &SqliteRow) -> Result<Hold, StoreError> {
    let status: String = row.try_get("status").map_err(map_err)?;
    let owner: Option<String> = row.try_get("owner").map_err(map_err)?;
    Ok(Hold {
        quantity: row.try_get("quantity").map_err(map_err)?,
        owner: owner
            .map(OwnerId::new)
            .transpose()
            .map_err(StoreError::failed)?,
        created_at: from_micros(row.try_get("created_at").map_err(map_err)?)?,
        hold_id: HoldId(row.try_get("id").map_err(map_err)?),
        slot_id: SlotId(row.try_get("slot_id").map_err(map_err)?),
        status: HoldStatus::from_str(&status).map_err(StoreError::failed)?,
        expires_at: from_micros(row.try_get("expires_at").map_err(map_err)?)?,
        confirmed_at: opt_from_micros(row.try_get("confirmed_at").map_err(map_err)?)?,
        cancelled_at: opt_from_micros(row.try_get("cancelled_at").map_err(map_err)?)?,
    })
}

pub(crate) fn slot_from_row(row: &SqliteRow) -> Result<Slot, StoreError> {
    Ok(Slot {
        slot_id: SlotId(row.try_get("id").map_err(map_err)?),
        starts_at: from_micros(row.try_get("starts_at").map_err(map_err)?)?,
        ends_at: from_micros(row.try_get("ends_at").map_err(map_err)?)?,
        capacity: row.try_get("capacity").map_err(map_err)?,
        stored_remaining: row.try_get("remaining").map_err(map_err)?,
        resource: resource_from_row(row)?,
        closed: row.try_get("closed").map_err(map_err)?,
        removed_at: opt_from_micros(row.try_get("removed_at").map_err(map_err)?)?,
    })
}

pub(crate) fn resource_from_row(row: &SqliteRow) -> Result<Option<ResourceId>, StoreError> {
    let resource: Option<String> = row.try_get("resource").map_err(map_err)?;
    resource
        .map(ResourceId::new)
        .transpose()
        .map_err(StoreError::failed)
}

/// A row of the `slot_usage` or a `slots_page` statement: the slot and its held units.
pub(crate) fn usage_from_row(row: &SqliteRow) -> Result<SlotUsage, StoreError> {
    let units = |column: &str| -> Result<i32, StoreError> {
        let sum: i64 = row.try_get(column).map_err(map_err)?;
        i32::try_from(sum).map_err(StoreError::failed)
    };
    Ok(SlotUsage {
        slot: slot_from_row(row)?,
        held: units("held")?,
        expired: units("expired")?,
    })
}

/// A row of the `read_events` statement.
pub(crate) fn event_from_row(row: &SqliteRow) -> Result<Event, StoreError> {
    let kind: String = row.try_get("kind").map_err(map_err)?;
    let owner: Option<String> = row.try_get("owner").map_err(map_err)?;
    let hold_id: Option<i64> = row.try_get("hold_id").map_err(map_err)?;
    let booking_id: Option<i64> = row.try_get("booking_id").map_err(map_err)?;
    Ok(Event {
        position: EventPosition::new(0, row.try_get("id").map_err(map_err)?),
        kind: EventKind::from_str(&kind).map_err(StoreError::failed)?,
        slot_id: SlotId(row.try_get("slot_id").map_err(map_err)?),
        hold_id: hold_id.map(HoldId),
        booking_id: booking_id.map(HoldId),
        owner: owner
            .map(OwnerId::new)
            .transpose()
            .map_err(StoreError::failed)?,
        quantity: row.try_get("quantity").map_err(map_err)?,
        at: from_micros(row.try_get("occurred_at").map_err(map_err)?)?,
    })
}

/// A row of [`ENTRY_COLUMNS`](crate::waitlist_sql::ENTRY_COLUMNS).
pub(crate) fn entry_from_row(row: &SqliteRow) -> Result<WaitlistEntry, StoreError> {
    let owner: Option<String> = row.try_get("owner").map_err(map_err)?;
    Ok(WaitlistEntry {
        entry_id: EntryId(row.try_get("id").map_err(map_err)?),
        slot_id: SlotId(row.try_get("slot_id").map_err(map_err)?),
        quantity: row.try_get("quantity").map_err(map_err)?,
        owner: owner
            .map(OwnerId::new)
            .transpose()
            .map_err(StoreError::failed)?,
        priority: row.try_get("priority").map_err(map_err)?,
        joined_at: from_micros(row.try_get("joined_at").map_err(map_err)?)?,
        offer_micros: row.try_get("offer_micros").map_err(map_err)?,
    })
}

/// A row of [`ENTRY_COLUMNS`](crate::waitlist_sql::ENTRY_COLUMNS) and its `position`.
pub(crate) fn placed_entry_from_row(row: &SqliteRow) -> Result<(WaitlistEntry, u32), StoreError> {
    let position: i64 = row.try_get("position").map_err(map_err)?;
    Ok((
        entry_from_row(row)?,
        u32::try_from(position).unwrap_or(u32::MAX),
    ))
}
