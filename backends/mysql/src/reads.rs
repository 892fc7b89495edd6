//! The reads of the store, each one statement on a connection (of the pool, through
//! [`reading!`](crate::run::reading), or the caller's): a slot,
//! availability, one hold, pages of holds, the operator's listing. Every answer is decided at
//! the `now` the engine passed.

use slot_booking::{
    AvailabilityEntry, AvailabilityQuery, Hold, HoldId, OwnerId, PageRequest, Slot, SlotCursor,
    SlotId, SlotUsage, StoreError, Timestamp,
};
use sqlx::mysql::{MySqlArguments, MySqlConnection};
use sqlx::{AssertSqlSafe, MySql, Row};

use crate::map_err;
use crate::rows::{from_micros, hold_from_row, slot_from_row, to_micros, usage_from_row, Cols};
use crate::sql::Statements;

type Query<'q> = sqlx::query::Query<'q, MySql, MySqlArguments>;

pub(crate) async fn get_slot(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
) -> Result<Option<Slot>, StoreError> {
    sqlx::query(AssertSqlSafe(sql.slot_by_id.as_str()))
        .bind(slot_id.get())
        .fetch_optional(conn)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(slot_from_row)
        .transpose()
}

pub(crate) async fn availability(
    sql: &Statements,
    conn: &mut MySqlConnection,
    now: Timestamp,
) -> Result<Vec<AvailabilityEntry>, StoreError> {
    let rows = sqlx::query(AssertSqlSafe(sql.availability.as_str()))
        .bind(to_micros(now))
        .bind(to_micros(now))
        .bind(to_micros(now))
        .fetch_all(conn)
        .await
        .map_err(map_err)?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let available: i64 = row.try_get("available").map_err(map_err)?;
        entries.push(AvailabilityEntry {
            slot_id: SlotId(row.try_get("id").map_err(map_err)?),
            starts_at: from_micros(row.try_get("starts_at").map_err(map_err)?)?,
            ends_at: from_micros(row.try_get("ends_at").map_err(map_err)?)?,
            capacity: row.try_get("capacity").map_err(map_err)?,
            remaining: i32::try_from(available).map_err(StoreError::failed)?,
            resource: slot_booking::store::resource_of(&Cols(row))?,
        });
    }
    Ok(entries)
}

/// One keyset page of holds: `query` (the owner's or the slot's statement, its first
/// parameter bound) with the cursor and the limit.
async fn page(
    conn: &mut MySqlConnection,
    query: Query<'_>,
    page: PageRequest,
) -> Result<Vec<Hold>, StoreError> {
    let rows = query
        .bind(page.after.map_or(i64::MIN, HoldId::get))
        .bind(i64::from(page.limit))
        .fetch_all(conn)
        .await
        .map_err(map_err)?;
    rows.iter().map(hold_from_row).collect()
}

pub(crate) async fn owner_holds(
    sql: &Statements,
    conn: &mut MySqlConnection,
    owner: &OwnerId,
    request: PageRequest,
) -> Result<Vec<Hold>, StoreError> {
    let query = sqlx::query(AssertSqlSafe(sql.owner_holds.as_str())).bind(owner.as_str());
    page(conn, query, request).await
}

pub(crate) async fn slot_holds(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    request: PageRequest,
) -> Result<Vec<Hold>, StoreError> {
    let query = sqlx::query(AssertSqlSafe(sql.slot_holds.as_str())).bind(slot_id.get());
    page(conn, query, request).await
}

/// The operator's listing: one keyset range of `slots_starts_at_id`, or of
/// `slots_by_resource` for one resource, each slot with its held units at `now`.
pub(crate) async fn list_slots(
    sql: &Statements,
    conn: &mut MySqlConnection,
    filter: &AvailabilityQuery,
    page: PageRequest<SlotCursor>,
    now: Timestamp,
) -> Result<Vec<SlotUsage>, StoreError> {
    let statement = match filter.resource {
        Some(_) => &sql.resource_slots_page,
        None => &sql.slots_page,
    };
    // Open bounds as the extreme integers: no stored timestamp reaches them, and ids start at 1.
    let (after_starts, after_id) = page.after.map_or((i64::MIN, i64::MIN), |c| {
        (to_micros(c.starts_at), c.slot_id.get())
    });
    let mut query = sqlx::query(AssertSqlSafe(statement.as_str()))
        .bind(to_micros(now))
        .bind(to_micros(now));
    if let Some(resource) = &filter.resource {
        query = query.bind(resource.as_str());
    }
    let rows = query
        .bind(filter.from.map_or(i64::MIN, to_micros))
        .bind(filter.to.map_or(i64::MAX, to_micros))
        .bind(after_starts)
        .bind(after_starts)
        .bind(after_id)
        .bind(i64::from(page.limit))
        .fetch_all(conn)
        .await
        .map_err(map_err)?;
    rows.iter().map(usage_from_row).collect()
}

/// The slot with its units at `now`, removed or not, read on `conn`.
pub(crate) async fn slot_usage(
    sql: &Statements,
    conn: &mut MySqlConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Option<SlotUsage>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(sql.slot_usage.as_str()))
        .bind(to_micros(now))
        .bind(to_micros(now))
        .bind(slot_id.get())
        .fetch_optional(conn);
    row.await
        .map_err(map_err)?
        .as_ref()
        .map(usage_from_row)
        .transpose()
}
