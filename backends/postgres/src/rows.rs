//! Decoding rows into the crate's types, and the bounds of what a row can hold.

use super::*;
use slot_booking::store::{self, Columns};

/// A row's columns as the core's decoders read them, each named `<prefix><column>` (a
/// statement that returns the columns of two tables prefixes one of them).
pub(crate) struct Cols<'r> {
    pub(crate) row: &'r PgRow,
    pub(crate) prefix: &'static str,
}

impl<'r> Cols<'r> {
    /// The row's columns, unprefixed.
    pub(crate) fn of(row: &'r PgRow) -> Self {
        Cols { row, prefix: "" }
    }

    fn get<'a, T>(&'a self, column: &str) -> Result<T, StoreError>
    where
        T: sqlx::Decode<'a, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        match self.prefix {
            "" => self.row.try_get(column),
            prefix => self.row.try_get(format!("{prefix}{column}").as_str()),
        }
        .map_err(map_err)
    }
}

impl Columns for Cols<'_> {
    fn int(&self, column: &str) -> Result<i64, StoreError> {
        self.get(column)
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.get(column)
    }
    fn units(&self, column: &str) -> Result<i32, StoreError> {
        self.get(column)
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.get(column)
    }
    fn flag(&self, column: &str) -> Result<bool, StoreError> {
        self.get(column)
    }
    fn at(&self, column: &str) -> Result<Timestamp, StoreError> {
        self.get(column)
    }
    fn opt_at(&self, column: &str) -> Result<Option<Timestamp>, StoreError> {
        self.get(column)
    }
}

pub(crate) fn hold_from_row(row: &PgRow) -> Result<Hold, StoreError> {
    store::hold_of(&Cols::of(row))
}

/// `outcome`, decided at the row's `decided_at`.
pub(crate) fn decided<T>(row: &PgRow, outcome: T) -> Result<Decided<T>, StoreError> {
    Ok(Decided::new(
        row.try_get("decided_at").map_err(map_err)?,
        outcome,
    ))
}

pub(crate) fn slot_from_row(row: &PgRow) -> Result<Slot, StoreError> {
    store::slot_of(&Cols::of(row))
}

/// The slot of a row whose slot columns come from a LEFT JOIN: `None` when they are NULL.
pub(crate) fn optional_slot(row: &PgRow) -> Result<Option<Slot>, StoreError> {
    row_id(row)?.map(|_| slot_from_row(row)).transpose()
}

/// The slot and its held units of a row of the listing or of the usage read.
pub(crate) fn usage_from_row(row: &PgRow) -> Result<Option<SlotUsage>, StoreError> {
    let Some(slot) = optional_slot(row)? else {
        return Ok(None);
    };
    Ok(Some(SlotUsage {
        slot,
        held: row.try_get("held").map_err(map_err)?,
        expired: row.try_get("expired").map_err(map_err)?,
    }))
}

/// The earliest instant a PostgreSQL `timestamptz` holds (4714-11-24 BC, Julian day 0), in
/// microseconds since the Unix epoch. Every slot starts at or after it; the latest instant
/// chrono holds is earlier than PostgreSQL's latest.
pub(crate) const EARLIEST_MICROS: i64 = -210_866_803_200_000_000;

/// Whether PostgreSQL can hold `at`.
pub(crate) fn representable(at: Timestamp) -> bool {
    at.timestamp_micros() >= EARLIEST_MICROS
}

/// The listing of a statement that always returns at least one row: its `decided_at`, and
/// what `item` makes of each row (the one row of an empty listing, with NULL columns but the
/// instant, makes nothing).
pub(crate) fn listed<T>(
    rows: &[PgRow],
    statement: &str,
    item: impl Fn(&PgRow) -> Result<Option<T>, StoreError>,
) -> Result<Decided<Vec<T>>, StoreError> {
    let at = match rows.first() {
        Some(row) => row.try_get("decided_at").map_err(map_err)?,
        None => return Err(StoreError::failed(format!("{statement} returned no row"))),
    };
    // Sized up front: a listing is kept as long as the engine caches it, and a vector grown
    // by doubling would carry up to twice its entries (1.64x measured at 10,000 slots).
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        if let Some(listed) = item(row)? {
            items.push(listed);
        }
    }
    Ok(Decided::new(at, items))
}

/// The row's `id`, NULL in the one row of an empty answer.
pub(crate) fn row_id(row: &PgRow) -> Result<Option<i64>, StoreError> {
    row.try_get("id").map_err(map_err)
}

/// The hold of a row whose hold columns come from a LEFT JOIN: `None` when they are NULL.
pub(crate) fn optional_hold(row: &PgRow) -> Result<Option<Hold>, StoreError> {
    row_id(row)?.map(|_| hold_from_row(row)).transpose()
}

/// A duration as a PostgreSQL interval of microseconds.
pub(crate) fn interval(duration: chrono::Duration) -> Result<PgInterval, StoreError> {
    let microseconds = duration
        .num_microseconds()
        .ok_or_else(|| StoreError::failed("a hold lifetime overflows an interval"))?;
    Ok(PgInterval {
        months: 0,
        days: 0,
        microseconds,
    })
}
