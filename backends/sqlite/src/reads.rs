//! The reads of the store on one connection (one of the pool's, or the caller's):
//! availability, one hold, pages of holds, one slot, the operator's listing; and the reads the
//! writes make in their units of work (a hold by id, a booking by its key or its id).

use super::*;
use slot_booking::Booking;

use crate::run::Run;

/// One keyset page of holds: `query` (the owner's or the slot's statement, its first
/// parameter bound) with the cursor and the limit.
async fn page<'q>(
    conn: &mut SqliteConnection,
    query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>,
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

/// Every answer is decided at the `now` the engine passed: SQLite keeps no clock of its own.
impl Run<'_> {
    pub(crate) async fn availability(
        &mut self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        let rows = sqlx::query(AssertSqlSafe(sql.availability.as_str()))
            .bind(to_micros(now))
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        // Sized up front: the engine keeps the listing while it caches it, and collecting
        // `Result`s grows the vector by doubling (up to twice the entries carried).
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
        Ok(Decided::new(now, entries))
    }

    pub(crate) async fn get_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        let hold = hold_by_id(&sql, &mut *conn, hold_id, scope).await?;
        Ok(Decided::new(now, hold))
    }

    pub(crate) async fn owner_holds(
        &mut self,
        owner: &OwnerId,
        page_request: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let query = sqlx::query(AssertSqlSafe(sql.owner_holds.as_str())).bind(owner.as_str());
        let mut conn = self.conn().await?;
        Ok(Decided::new(
            now,
            page(&mut conn, query, page_request).await?,
        ))
    }

    pub(crate) async fn slot_holds(
        &mut self,
        slot_id: SlotId,
        page_request: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let query = sqlx::query(AssertSqlSafe(sql.slot_holds.as_str())).bind(slot_id.get());
        let mut conn = self.conn().await?;
        Ok(Decided::new(
            now,
            page(&mut conn, query, page_request).await?,
        ))
    }

    pub(crate) async fn get_slot(&mut self, slot_id: SlotId) -> Result<Option<Slot>, StoreError> {
        let sql = Arc::clone(&self.sql);
        let mut conn = self.conn().await?;
        sqlx::query(AssertSqlSafe(sql.slot_by_id.as_str()))
            .bind(slot_id.get())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?
            .as_ref()
            .map(slot_from_row)
            .transpose()
    }

    pub(crate) async fn list_slots(
        &mut self,
        filter: &AvailabilityQuery,
        page: PageRequest<SlotCursor>,
        now: Timestamp,
    ) -> Result<Decided<Vec<SlotUsage>>, StoreError> {
        // Two statements, so that each reads one range of its own index.
        let statement = match filter.resource {
            Some(_) => &self.sql.resource_slots_page,
            None => &self.sql.slots_page,
        };
        // Open bounds as the extreme integers: no stored timestamp reaches them (chrono's range
        // is narrower than i64 microseconds), and ids start at 1.
        let after = page.after.map_or((i64::MIN, i64::MIN), |c| {
            (to_micros(c.starts_at), c.slot_id.get())
        });
        let mut query = sqlx::query(AssertSqlSafe(statement.as_str()))
            .bind(to_micros(now))
            .bind(filter.from.map_or(i64::MIN, to_micros))
            .bind(filter.to.map_or(i64::MAX, to_micros))
            .bind(after.0)
            .bind(after.1)
            .bind(i64::from(page.limit));
        if let Some(resource) = &filter.resource {
            query = query.bind(resource.as_str());
        }
        let mut conn = self.conn().await?;
        let rows = query.fetch_all(&mut *conn).await.map_err(map_err)?;
        let listed = rows.iter().map(usage_from_row).collect::<Result<_, _>>()?;
        Ok(Decided::new(now, listed))
    }
}

/// The hold `hold_id` if it is in `scope`, as stored.
pub(crate) async fn hold_by_id<'e, E>(
    sql: &Statements,
    executor: E,
    hold_id: HoldId,
    scope: &Scope,
) -> Result<Option<Hold>, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let (any, owner) = scope.as_filter();
    sqlx::query(AssertSqlSafe(sql.hold_by_id.as_str()))
        .bind(hold_id.get())
        .bind(any)
        .bind(owner)
        .fetch_optional(executor)
        .await
        .map_err(map_err)?
        .as_ref()
        .map(hold_from_row)
        .transpose()
}

/// Every line of the booking (or the plain hold) whose first line has `key`, if any.
pub(crate) async fn booking_by_key<'e, E>(
    sql: &Statements,
    executor: E,
    key: &str,
) -> Result<Option<Booking>, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let rows = sqlx::query(AssertSqlSafe(sql.booking_by_key.as_str()))
        .bind(key)
        .fetch_all(executor)
        .await
        .map_err(map_err)?;
    let lines = rows.iter().map(hold_from_row).collect::<Result<_, _>>()?;
    Ok(Booking::of_lines(lines))
}

/// Every line of the booking whose id is `booking_id`, if it exists in `scope` (a plain hold is
/// a booking of one line; the id of a line that is not the first is no booking's).
pub(crate) async fn booking_by_id(
    sql: &Statements,
    conn: &mut SqliteConnection,
    booking_id: HoldId,
    scope: &Scope,
) -> Result<Option<Booking>, StoreError> {
    let (any, owner) = scope.as_filter();
    let rows = sqlx::query(AssertSqlSafe(sql.booking_lines.as_str()))
        .bind(booking_id.get())
        .bind(any)
        .bind(owner)
        .fetch_all(conn)
        .await
        .map_err(map_err)?;
    let lines = rows.iter().map(hold_from_row).collect::<Result<_, _>>()?;
    Ok(Booking::of_lines(lines))
}

/// The slot with its units at `now`, removed or not, read on `conn`.
pub(crate) async fn slot_usage(
    sql: &Statements,
    conn: &mut SqliteConnection,
    slot_id: SlotId,
    now: Timestamp,
) -> Result<Option<SlotUsage>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(sql.slot_usage.as_str()))
        .bind(to_micros(now))
        .bind(slot_id.get())
        .fetch_optional(conn);
    row.await
        .map_err(map_err)?
        .as_ref()
        .map(usage_from_row)
        .transpose()
}
