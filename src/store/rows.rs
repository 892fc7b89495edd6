//! Decoding a store's rows into the crate's types, once: a store says how to read one column
//! of its rows ([`Columns`]), and [`hold_of`], [`slot_of`], [`event_of`] and [`entry_of`] say
//! which columns make which value, and check them (a row written behind the store's back may
//! hold anything: an unknown status, an owner or resource the crate would refuse).
//!
//! The columns are those every SQL store's tables have: a hold's `id`, `slot_id`, `status`,
//! `expires_at`, `confirmed_at`, `cancelled_at`, `quantity`, `owner`, `created_at`; a slot's
//! `id`, `starts_at`, `ends_at`, `capacity`, `remaining`, `resource`, `closed`, `removed_at`;
//! an event's `kind`, `slot_id`, `hold_id`, `booking_id`, `owner`, `quantity`, `occurred_at`;
//! a waiting entry's `id`, `slot_id`, `quantity`, `owner`, `priority`, `joined_at`,
//! `offer_micros`; a pool's `id`, `capacity`, `remaining`. A store whose statement names them otherwise (a prefix, say) renames them
//! in its [`Columns`].

use std::str::FromStr;

use super::error::StoreError;
use super::outcome::SlotLimits;
use crate::model::{
    EntryId, Event, EventKind, EventPosition, Hold, HoldId, HoldStatus, OwnerId, Pool, PoolId,
    PoolUsage, ResourceId, Slot, SlotId, SlotUsage, Timestamp, WaitlistEntry,
};

/// How a store reads the columns of one of its rows, by name: the few types the crate's
/// tables hold. A store implements it on a wrapper of its driver's row; a column that is
/// missing, of another type or NULL where a value is required is an error.
pub trait Columns {
    /// A 64-bit integer (an id, a count of microseconds).
    fn int(&self, column: &str) -> Result<i64, StoreError>;
    /// A 64-bit integer or NULL.
    fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError>;
    /// A 32-bit integer (units, a capacity, a priority).
    fn units(&self, column: &str) -> Result<i32, StoreError>;
    /// Text or NULL.
    fn opt_text(&self, column: &str) -> Result<Option<String>, StoreError>;
    /// A boolean.
    fn flag(&self, column: &str) -> Result<bool, StoreError>;
    /// An instant: by default an integer of microseconds since the Unix epoch; a store with
    /// a timestamp type of its own reads that.
    fn at(&self, column: &str) -> Result<Timestamp, StoreError> {
        from_micros(self.int(column)?)
    }
    /// An instant or NULL, as [`at`](Self::at) reads it.
    fn opt_at(&self, column: &str) -> Result<Option<Timestamp>, StoreError> {
        self.opt_int(column)?.map(from_micros).transpose()
    }
}

/// Declares `struct $cols<'r>(&'r $row)` and implements [`Columns`] for it over sqlx's
/// `Row::try_get`, each error mapped by `$map_err` (the store's `fn(sqlx::Error) ->
/// StoreError`), instants as microseconds. For stores built on sqlx, which must name it
/// `sqlx` in their dependencies.
#[macro_export]
macro_rules! sqlx_columns {
    ($cols:ident, $row:ty, $map_err:path) => {
        /// A row's columns as the core's decoders read them (instants as microseconds).
        pub(crate) struct $cols<'r>(pub(crate) &'r $row);

        impl $crate::store::Columns for $cols<'_> {
            fn int(&self, column: &str) -> Result<i64, $crate::StoreError> {
                ::sqlx::Row::try_get(self.0, column).map_err($map_err)
            }
            fn opt_int(&self, column: &str) -> Result<Option<i64>, $crate::StoreError> {
                ::sqlx::Row::try_get(self.0, column).map_err($map_err)
            }
            fn units(&self, column: &str) -> Result<i32, $crate::StoreError> {
                ::sqlx::Row::try_get(self.0, column).map_err($map_err)
            }
            fn opt_text(&self, column: &str) -> Result<Option<String>, $crate::StoreError> {
                ::sqlx::Row::try_get(self.0, column).map_err($map_err)
            }
            fn flag(&self, column: &str) -> Result<bool, $crate::StoreError> {
                ::sqlx::Row::try_get(self.0, column).map_err($map_err)
            }
        }
    };
}

/// The instant `micros` microseconds after the Unix epoch, for stores that keep instants so;
/// out of chrono's range is an error.
pub fn from_micros(micros: i64) -> Result<Timestamp, StoreError> {
    chrono::DateTime::from_timestamp_micros(micros)
        .ok_or_else(|| StoreError::failed(format!("timestamp out of range: {micros} µs")))
}

/// The text of `column`, which must not be NULL.
fn text(row: &impl Columns, column: &str) -> Result<String, StoreError> {
    row.opt_text(column)?
        .ok_or_else(|| StoreError::failed(format!("column {column} is NULL")))
}

/// The row's `owner`, checked as an [`OwnerId`].
pub fn owner_of(row: &impl Columns) -> Result<Option<OwnerId>, StoreError> {
    row.opt_text("owner")?
        .map(OwnerId::new)
        .transpose()
        .map_err(StoreError::failed)
}

/// The row's `resource`, checked as a [`ResourceId`].
pub fn resource_of(row: &impl Columns) -> Result<Option<ResourceId>, StoreError> {
    row.opt_text("resource")?
        .map(ResourceId::new)
        .transpose()
        .map_err(StoreError::failed)
}

/// The hold of a row of the holds table.
pub fn hold_of(row: &impl Columns) -> Result<Hold, StoreError> {
    Ok(Hold {
        hold_id: HoldId(row.int("id")?),
        slot_id: SlotId(row.int("slot_id")?),
        status: HoldStatus::from_str(&text(row, "status")?).map_err(StoreError::failed)?,
        expires_at: row.at("expires_at")?,
        confirmed_at: row.opt_at("confirmed_at")?,
        cancelled_at: row.opt_at("cancelled_at")?,
        quantity: row.units("quantity")?,
        owner: owner_of(row)?,
        created_at: row.at("created_at")?,
    })
}

/// The slot of a row of the slots table.
pub fn slot_of(row: &impl Columns) -> Result<Slot, StoreError> {
    Ok(Slot {
        slot_id: SlotId(row.int("id")?),
        starts_at: row.at("starts_at")?,
        ends_at: row.at("ends_at")?,
        capacity: row.units("capacity")?,
        stored_remaining: row.units("remaining")?,
        resource: resource_of(row)?,
        closed: row.flag("closed")?,
        removed_at: row.opt_at("removed_at")?,
    })
}

/// The slot of a row of a slot listing or usage read, with its units `held` and `expired`
/// (sums, read as 64-bit integers).
pub fn usage_of(row: &impl Columns) -> Result<SlotUsage, StoreError> {
    let units = |column: &str| i32::try_from(row.int(column)?).map_err(StoreError::failed);
    Ok(SlotUsage {
        slot: slot_of(row)?,
        held: units("held")?,
        expired: units("expired")?,
    })
}

/// The pool of a row of a pool read, with its units `held` and `expired` (sums, read as
/// 64-bit integers) and its `slots` (which each store reads its own way), sorted here.
pub fn pool_usage_of(row: &impl Columns, mut slots: Vec<SlotId>) -> Result<PoolUsage, StoreError> {
    let units = |column: &str| i32::try_from(row.int(column)?).map_err(StoreError::failed);
    slots.sort_unstable();
    Ok(PoolUsage {
        pool: Pool {
            pool_id: PoolId(row.int("id")?),
            capacity: row.units("capacity")?,
            stored_remaining: row.units("remaining")?,
            slots,
        },
        held: units("held")?,
        expired: units("expired")?,
    })
}

/// The event of a row of the event log, at `position` (which each store keeps its own way).
pub fn event_of(row: &impl Columns, position: EventPosition) -> Result<Event, StoreError> {
    Ok(Event {
        position,
        kind: EventKind::from_str(&text(row, "kind")?).map_err(StoreError::failed)?,
        slot_id: SlotId(row.int("slot_id")?),
        hold_id: row.opt_int("hold_id")?.map(HoldId),
        booking_id: row.opt_int("booking_id")?.map(HoldId),
        owner: owner_of(row)?,
        quantity: row.units("quantity")?,
        at: row.at("occurred_at")?,
    })
}

/// The waiting entry of a row of the waitlist table.
pub fn entry_of(row: &impl Columns) -> Result<WaitlistEntry, StoreError> {
    Ok(WaitlistEntry {
        entry_id: EntryId(row.int("id")?),
        slot_id: SlotId(row.int("slot_id")?),
        quantity: row.units("quantity")?,
        owner: owner_of(row)?,
        priority: row.units("priority")?,
        joined_at: row.at("joined_at")?,
        offer_micros: row.int("offer_micros")?,
    })
}

/// A waiting entry of a row of the waitlist table with its place in line (`position`).
pub fn placed_entry_of(row: &impl Columns) -> Result<(WaitlistEntry, u32), StoreError> {
    let position = u32::try_from(row.int("position")?).map_err(StoreError::failed)?;
    Ok((entry_of(row)?, position))
}

/// A slot's limits, from its `starts_at`, `capacity`, `closed` and `removed_at`.
pub fn limits_of(row: &impl Columns) -> Result<SlotLimits, StoreError> {
    Ok(SlotLimits {
        starts_at: row.at("starts_at")?,
        capacity: row.units("capacity")?,
        closed: row.flag("closed")?,
        removed: row.opt_at("removed_at")?.is_some(),
    })
}

/// A slot's limits and the units a hold could take of it (`free`, a 64-bit sum): what
/// [`PlaceKernel::slot_state`](super::PlaceKernel::slot_state) answers.
pub fn slot_state_of(row: &impl Columns) -> Result<(SlotLimits, i64), StoreError> {
    Ok((limits_of(row)?, row.int("free")?))
}

/// The limits a join is held to ([`WaitKernel::join_limits`](super::WaitKernel::join_limits)):
/// the slot's, its capacity the least of its own and `pool_capacity` (the least capacity of
/// its pools, NULL for none).
pub fn join_limits_of(row: &impl Columns) -> Result<SlotLimits, StoreError> {
    let mut limits = limits_of(row)?;
    if let Some(pool) = row.opt_int("pool_capacity")? {
        let pool = i32::try_from(pool).map_err(StoreError::failed)?;
        limits.capacity = limits.capacity.min(pool);
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A row as a map of column to value (`None` for NULL).
    struct Row(HashMap<&'static str, Option<&'static str>>);

    impl Row {
        fn get(&self, column: &str) -> Result<Option<&'static str>, StoreError> {
            self.0
                .get(column)
                .copied()
                .ok_or_else(|| StoreError::failed(format!("no column {column}")))
        }
    }

    impl Columns for Row {
        fn int(&self, column: &str) -> Result<i64, StoreError> {
            self.opt_int(column)?
                .ok_or_else(|| StoreError::failed("NULL"))
        }
        fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError> {
            self.get(column)?
                .map(|v| v.parse().map_err(StoreError::failed))
                .transpose()
        }
        fn units(&self, column: &str) -> Result<i32, StoreError> {
            i32::try_from(self.int(column)?).map_err(StoreError::failed)
        }
        fn opt_text(&self, column: &str) -> Result<Option<String>, StoreError> {
            Ok(self.get(column)?.map(str::to_owned))
        }
        fn flag(&self, column: &str) -> Result<bool, StoreError> {
            Ok(self.int(column)? != 0)
        }
    }

    fn hold_row(status: &'static str, owner: Option<&'static str>) -> Row {
        Row(HashMap::from([
            ("id", Some("7")),
            ("slot_id", Some("3")),
            ("status", Some(status)),
            ("expires_at", Some("2000000")),
            ("confirmed_at", None),
            ("cancelled_at", None),
            ("quantity", Some("2")),
            ("owner", owner),
            ("created_at", Some("1000000")),
        ]))
    }

    #[test]
    fn a_hold_row_is_decoded_column_by_column() {
        let hold = hold_of(&hold_row("held", Some("alice"))).unwrap();
        assert_eq!(hold.hold_id, HoldId(7));
        assert_eq!(hold.slot_id, SlotId(3));
        assert_eq!(hold.status, HoldStatus::Held);
        assert_eq!(hold.expires_at, from_micros(2_000_000).unwrap());
        assert_eq!(hold.created_at, from_micros(1_000_000).unwrap());
        assert_eq!(hold.quantity, 2);
        assert_eq!(hold.owner.as_ref().map(OwnerId::as_str), Some("alice"));
        assert_eq!(hold.confirmed_at, None);
    }

    #[test]
    fn a_row_the_crate_would_refuse_is_an_error_not_a_value() {
        assert!(hold_of(&hold_row("lost", None)).is_err(), "unknown status");
        assert!(hold_of(&hold_row("held", Some(""))).is_err(), "empty owner");
        let mut missing = hold_row("held", None);
        missing.0.remove("created_at");
        assert!(hold_of(&missing).is_err(), "a missing column");
        assert!(from_micros(i64::MAX).is_err(), "out of chrono's range");
    }

    #[test]
    fn a_pool_row_sums_its_units_and_sorts_its_slots() {
        let mut row = Row(HashMap::from([
            ("id", Some("5")),
            ("capacity", Some("10")),
            ("remaining", Some("4")),
            ("held", Some("2")),
            ("expired", Some("1")),
        ]));
        let usage = pool_usage_of(&row, vec![SlotId(9), SlotId(2)]).unwrap();
        assert_eq!(usage.pool.pool_id, PoolId(5));
        assert_eq!((usage.pool.capacity, usage.pool.stored_remaining), (10, 4));
        assert_eq!((usage.held, usage.expired), (2, 1));
        assert_eq!(usage.pool.slots, [SlotId(2), SlotId(9)]);
        row.0.insert("held", Some("4294967296"));
        assert!(pool_usage_of(&row, Vec::new()).is_err(), "a sum past i32");
    }
}
