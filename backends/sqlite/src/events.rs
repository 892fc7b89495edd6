//! The event log in the store's database (migration 5): its [`EventStore`], and the statements
//! that reclaim expired holds, purge history and move consumers' cursors.

use super::*;
use std::collections::BTreeMap;

use crate::run::{Run, Step, Target};
use crate::serve::{serve_lines, Lines};
use crate::units::{give_back, log_hold};

/// The event log lives in the store's database (migration 5): every write above appends its
/// events in its own unit of work (see [`SqliteStore`]'s docs), and these read it, keep the
/// consumers' cursors, reclaim expired holds and purge history. Positions are `0_<id>`.
#[async_trait]
impl EventStore for SqliteStore {
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        // One statement, one snapshot: the cursor and the events after it. A writer holds the
        // write lock from the insert of its events to its commit, so no event with a lower id
        // than one seen here can commit later.
        let rows = sqlx::query(AssertSqlSafe(self.sql.read_events.as_str()))
            .bind(consumer.as_str())
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(event_from_row).collect()
    }

    async fn read_events_after(
        &self,
        after: EventPosition,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        // Every position here is `0_<id>`: one of a later epoch is after all of them, one of
        // an earlier epoch before all of them.
        let after_id = match after.epoch() {
            0 => after.sequence(),
            epoch if epoch > 0 => return Ok(Vec::new()),
            _ => 0,
        };
        let rows = sqlx::query(AssertSqlSafe(self.sql.read_events_after.as_str()))
            .bind(after_id)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(event_from_row).collect()
    }

    async fn event_log_end(&self) -> Result<EventPosition, StoreError> {
        let id: i64 = sqlx::query_scalar(AssertSqlSafe(self.sql.event_log_end.as_str()))
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(EventPosition::new(0, id))
    }

    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError> {
        self.run().acknowledge(consumer, None, through).await?;
        Ok(())
    }

    async fn acknowledge_leased(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        self.run()
            .acknowledge(consumer, Some(holder), through)
            .await
    }

    async fn lease_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        let _gate = self.write_gate.lock().await;
        let row = sqlx::query(AssertSqlSafe(self.sql.lease_consumer.as_str()))
            .bind(consumer.as_str())
            .bind(holder.as_str())
            .bind(to_micros(now))
            .bind(to_micros(until))
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(row.is_some())
    }

    async fn release_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
    ) -> Result<(), StoreError> {
        let _gate = self.write_gate.lock().await;
        sqlx::query(AssertSqlSafe(self.sql.release_consumer.as_str()))
            .bind(consumer.as_str())
            .bind(holder.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn consumer_position(
        &self,
        consumer: &ConsumerId,
    ) -> Result<Option<EventPosition>, StoreError> {
        let acknowledged: Option<i64> =
            sqlx::query_scalar(AssertSqlSafe(self.sql.consumer_position.as_str()))
                .bind(consumer.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?;
        Ok(acknowledged.map(|id| EventPosition::new(0, id)))
    }

    async fn reclaim_expired(&self, now: Timestamp, limit: u32) -> Result<Vec<Hold>, StoreError> {
        let mut w = self.begin_write().await?;
        let step = reclaim_expired_every(&self.sql, w.connection(), now, limit).await;
        w.finish(step).await
    }

    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError> {
        let mut w = self.begin_write().await?;
        let step = purge(&self.sql, w.connection(), before, limit).await;
        w.finish(step).await
    }
}

/// The reclaimer's reclaim ([`EventStore::reclaim_expired`](slot_booking::EventStore)): marks
/// up to `limit` held holds that expired by `now` as expired (on any slot, decided by the rows
/// the update returned, so a hold reclaimed by a racing reclaimer or a lazy reclaim is not among
/// them), gives their units back slot by slot and appends one `hold_expired` event each, then
/// serves every line that is not empty (every slot's and every pool's).
pub(crate) async fn reclaim_expired_every(
    sql: &Statements,
    conn: &mut SqliteConnection,
    now: Timestamp,
    limit: u32,
) -> Result<Step<Vec<Hold>>, StoreError> {
    let rows = sqlx::query(AssertSqlSafe(sql.reclaim_expired_every.as_str()))
        .bind(to_micros(now))
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let reclaimed = rows
        .iter()
        .map(hold_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let mut units: BTreeMap<i64, i64> = BTreeMap::new();
    for hold in &reclaimed {
        *units.entry(hold.slot_id.get()).or_default() += i64::from(hold.quantity);
    }
    for (slot_id, units) in units {
        give_back(sql, conn, units, slot_id).await?;
    }
    for hold in &reclaimed {
        log_hold(sql, conn, EventKind::HoldExpired, hold, now).await?;
    }
    // Every line is served in this same transaction: the lines the units given back may
    // serve among them, and any whose head became ready with no unit given back (a hold
    // expired, counted free; the entries before it left its pool's line when their slot
    // stopped selling).
    let mut lines = Lines::new();
    lines.every_line(sql, conn, now).await?;
    if !lines.is_empty() {
        serve_lines(sql, conn, &lines, now).await?;
    }
    Ok(Step::keep(reclaimed))
}

/// [`EventStore::purge`](slot_booking::EventStore): deletes up to `limit` holds that ended
/// (cancelled, or expired and reclaimed) before `before`, their idempotency keys with them, and
/// up to `limit` events older than `before` that every consumer has acknowledged.
pub(crate) async fn purge(
    sql: &Statements,
    conn: &mut SqliteConnection,
    before: Timestamp,
    limit: u32,
) -> Result<Step<Purged>, StoreError> {
    let mut purged = Purged::default();
    // New ids are drawn past the highest hold and `waitlist_ids`: remember the highest hold
    // before any goes, so that a purged hold's id is never drawn again (a client still holding
    // it would reach another's hold).
    sqlx::query(AssertSqlSafe(sql.keep_highest_hold_id.as_str()))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    // The events first: a hold an event still kept names is not purged.
    for (statement, count) in [
        (&sql.purge_events, &mut purged.events),
        (&sql.purge_holds, &mut purged.holds),
    ] {
        *count = sqlx::query(AssertSqlSafe(statement.as_str()))
            .bind(to_micros(before))
            .bind(i64::from(limit))
            .execute(&mut *conn)
            .await
            .map_err(map_err)?
            .rows_affected();
    }
    Ok(Step::keep(purged))
}

/// [`EventStore::acknowledge`](slot_booking::EventStore::acknowledge) (`holder` `None`:
/// always `true`) or [`acknowledge_leased`](slot_booking::EventStore::acknowledge_leased)
/// (`false`, nothing moved, when `holder` does not hold the lease): one statement.
pub(crate) async fn acknowledge(
    sql: &Statements,
    conn: &mut SqliteConnection,
    consumer: &ConsumerId,
    holder: Option<&LeaseHolder>,
    through: EventPosition,
) -> Result<bool, StoreError> {
    if through.epoch() != 0 {
        return Err(StoreError::failed(format!(
            "event position {through} is not one of this store's (0_<id>)"
        )));
    }
    let query = match holder {
        None => sqlx::query(AssertSqlSafe(sql.acknowledge.as_str())),
        Some(_) => sqlx::query(AssertSqlSafe(sql.acknowledge_leased.as_str())),
    }
    .bind(consumer.as_str())
    .bind(through.sequence());
    let query = match holder {
        None => query,
        Some(holder) => query.bind(holder.as_str()),
    };
    let done = query.execute(conn).await.map_err(map_err)?;
    Ok(holder.is_none() || done.rows_affected() == 1)
}

impl Run<'_> {
    pub(crate) async fn acknowledge(
        &mut self,
        consumer: &ConsumerId,
        holder: Option<&LeaseHolder>,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        let sql = Arc::clone(&self.sql);
        // On the store's own, one autocommit upsert, queued with its other writers like a
        // hold's insert.
        let _gate = match &self.target {
            Target::Store(store) => Some(Arc::clone(&store.write_gate).lock_owned().await),
            Target::Caller(_) => None,
        };
        let mut conn = self.conn().await?;
        acknowledge(&sql, &mut conn, consumer, holder, through).await
    }
}
