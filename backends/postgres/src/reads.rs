//! The reads of the store on one connection: availability, one hold, pages of holds, one slot,
//! the operator's listing.

use super::*;

impl Run<'_> {
    pub(crate) async fn availability(
        &mut self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(self.store.sql().availability.as_str()))
            .bind(self.now_param(now))
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        listed(&rows, "availability", |row| {
            // The one row of an empty listing has no slot.
            let Some(slot_id) = row_id(row)? else {
                return Ok(None);
            };
            Ok(Some(AvailabilityEntry {
                slot_id: SlotId(slot_id),
                starts_at: row.try_get("starts_at").map_err(map_err)?,
                ends_at: row.try_get("ends_at").map_err(map_err)?,
                capacity: row.try_get("capacity").map_err(map_err)?,
                remaining: row.try_get("available").map_err(map_err)?,
                resource: slot_booking::store::resource_of(&Cols::of(row))?,
            }))
        })
    }

    pub(crate) async fn get_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        let (any, owner) = scope.as_filter();
        let row = sqlx::query(AssertSqlSafe(self.store.sql().hold_by_id.as_str()))
            .bind(hold_id.get())
            .bind(self.now_param(now))
            .bind(any)
            .bind(owner)
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        decided(&row, optional_hold(&row)?)
    }

    /// [`Run::get_hold`], with the id of the booking of several lines the hold is a line of.
    pub(crate) async fn get_line(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<(Decided<Option<Hold>>, Option<i64>), StoreError> {
        let (any, owner) = scope.as_filter();
        let row = sqlx::query(AssertSqlSafe(self.store.sql().hold_by_id.as_str()))
            .bind(hold_id.get())
            .bind(self.now_param(now))
            .bind(any)
            .bind(owner)
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let booking: Option<i64> = row.try_get("booking_id").map_err(map_err)?;
        Ok((decided(&row, optional_hold(&row)?)?, booking))
    }

    /// One keyset page of holds (`sql` is the owner's or the slot's query).
    pub(crate) async fn page<'q>(
        &mut self,
        sql: &'q str,
        bind: impl FnOnce(
            sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
        ) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let rows = bind(sqlx::query(AssertSqlSafe(sql)))
            .bind(page.after.map_or(i64::MIN, HoldId::get))
            .bind(i64::from(page.limit))
            .bind(self.now_param(now))
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        listed(&rows, "a page query", optional_hold)
    }

    pub(crate) async fn owner_holds(
        &mut self,
        owner: &OwnerId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let sql = &inner.sql.owner_holds;
        self.page(sql, |q| q.bind(owner.as_str()), page, now).await
    }

    pub(crate) async fn slot_holds(
        &mut self,
        slot_id: SlotId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let sql = &inner.sql.slot_holds;
        self.page(sql, |q| q.bind(slot_id.get()), page, now).await
    }

    pub(crate) async fn get_slot(&mut self, slot_id: SlotId) -> Result<Option<Slot>, StoreError> {
        sqlx::query(AssertSqlSafe(self.store.sql().slot_by_id.as_str()))
            .bind(slot_id.get())
            .fetch_optional(self.conn.get().await?)
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
        // One exclusive lower bound on `(starts_at, id)`: the cursor or `from` (as
        // `(from, i64::MIN)`: ids are positive), whichever is later. NULL: from the start.
        let lower = match (page.after, filter.from) {
            (Some(after), Some(from)) if from > after.starts_at => (Some(from), i64::MIN),
            (Some(after), _) => (Some(after.starts_at), after.slot_id.get()),
            (None, from) => (from, i64::MIN),
        };
        // A cursor or bound from before PostgreSQL's earliest instant (a cursor is the
        // caller's text) would fail the statement: no slot starts that early, so it means
        // "from the start", and as an upper bound "nothing".
        let lower = match lower {
            (Some(start), _) if !representable(start) => (None, i64::MIN),
            other => other,
        };
        let to = match filter.to {
            Some(to) if !representable(to) => Some(
                chrono::DateTime::from_timestamp_micros(EARLIEST_MICROS)
                    .ok_or_else(|| StoreError::failed("PostgreSQL's earliest instant"))?,
            ),
            to => to,
        };
        let sql = match filter.resource {
            Some(_) => &self.store.sql().list_resource_slots,
            None => &self.store.sql().list_slots,
        };
        let mut query = sqlx::query(AssertSqlSafe(sql.as_str()))
            .bind(lower.0)
            .bind(lower.1)
            .bind(to)
            .bind(i64::from(page.limit))
            .bind(self.now_param(now));
        if let Some(resource) = &filter.resource {
            query = query.bind(resource.as_str());
        }
        let rows = query
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        listed(&rows, "the slot listing", usage_from_row)
    }
}
