//! [`EventStore`] for [`PostgresStore`]: reading the event log, consumers' cursors, the sweep
//! of expired holds and the purge of old history. The events themselves are appended by the
//! write statements in `sql.rs`, each in the statement that makes its change.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use slot_booking::{
    ConsumerId, Event, EventKind, EventPosition, EventStore, Hold, HoldId, LeaseHolder, OwnerId,
    Purged, SlotId, StoreError, Timestamp,
};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{AssertSqlSafe, Row};

use crate::sql::Statements;
use crate::{interval, map_err, optional_hold, PostgresStore};

/// How many times [`EventStore::reclaim_expired`] looks again when it saw expired holds but
/// every one was reclaimed by a concurrent sweeper (or hold) first.
const RECLAIM_ATTEMPTS: u32 = 8;

/// One look at the log: the events after the cursor in the horizons taken so far, whether
/// committed events exist that the newest horizon does not see, and how long ago the newest
/// horizon was taken.
struct Look {
    events: Vec<Event>,
    fresh: bool,
    newest_age: Duration,
}

fn event_from_row(row: &PgRow) -> Result<Option<Event>, StoreError> {
    let Some(epoch) = row.try_get::<Option<i64>, _>("epoch").map_err(map_err)? else {
        return Ok(None);
    };
    let kind: String = row.try_get("kind").map_err(map_err)?;
    let owner: Option<String> = row.try_get("owner").map_err(map_err)?;
    let hold_id: Option<i64> = row.try_get("hold_id").map_err(map_err)?;
    Ok(Some(Event {
        position: EventPosition::new(epoch, row.try_get("sequence").map_err(map_err)?),
        kind: EventKind::from_str(&kind).map_err(StoreError::failed)?,
        slot_id: SlotId(row.try_get("slot_id").map_err(map_err)?),
        hold_id: hold_id.map(HoldId),
        owner: owner
            .map(OwnerId::new)
            .transpose()
            .map_err(StoreError::failed)?,
        quantity: row.try_get("quantity").map_err(map_err)?,
        at: row.try_get("occurred_at").map_err(map_err)?,
    }))
}

impl PostgresStore {
    /// This store, unchanged: reads no longer wait for anything (since migration 8 a read
    /// delivers every committed event at once, whatever else is running), so there is no
    /// wait to set.
    #[deprecated(
        since = "0.2.0",
        note = "event reads no longer wait; this does nothing"
    )]
    pub fn with_event_read_wait(self, _wait: Duration) -> Self {
        self
    }

    async fn look(&self, consumer: &ConsumerId, limit: u32) -> Result<Look, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(self.sql().read_events.as_str()))
            .bind(consumer.as_str())
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await
            .map_err(map_err)?;
        let Some(first) = rows.first() else {
            return Err(StoreError::failed("the event read returned no row"));
        };
        let age: Option<i64> = first.try_get("newest_age_us").map_err(map_err)?;
        Ok(Look {
            fresh: first.try_get("fresh").map_err(map_err)?,
            // A clock stepped back reads as a horizon taken just now.
            newest_age: Duration::from_micros(age.map_or(0, |us| u64::try_from(us).unwrap_or(0))),
            events: rows
                .iter()
                .filter_map(|row| event_from_row(row).transpose())
                .collect::<Result<_, _>>()?,
        })
    }

    /// Takes a new horizon when events exist that the newest one does not see (migration 8's
    /// function: the lock, then the snapshot), one round trip.
    async fn take_horizon(&self) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(self.sql().take_horizon.as_str()))
            .execute(self.pool())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// This store with horizons taken at most once per `interval` (default
    /// [`DEFAULT_HORIZON_INTERVAL`](crate::DEFAULT_HORIZON_INTERVAL)) by its readers: a read that comes up short while events
    /// committed since the newest horizon waits out the rest of the interval before taking the
    /// next one, so that readers polling without pause cost the writers a bounded number of
    /// horizons (each a small committed write) however many events there are. The longest an
    /// event waits for a horizon; `Duration::ZERO` takes one at every short read.
    pub fn with_horizon_interval(mut self, interval: Duration) -> Self {
        self.horizon_interval = interval;
        self
    }
}

/// The acknowledgement of `consumer` through `through` on `conn` (a pool connection or the
/// caller's): an upsert for anyone (`holder` `None`, always `true`), or the fenced update for
/// the lease's holder (`false` when another holder has the lease).
pub(crate) async fn acknowledge_on(
    conn: &mut PgConnection,
    sql: &Statements,
    consumer: &ConsumerId,
    holder: Option<&LeaseHolder>,
    through: EventPosition,
) -> Result<bool, StoreError> {
    // A position before the start (a negative number) is the start: every cursor starts there.
    let through = through.max(EventPosition::START);
    let query = match holder {
        None => sqlx::query(AssertSqlSafe(sql.acknowledge.as_str())),
        Some(_) => sqlx::query(AssertSqlSafe(sql.acknowledge_leased.as_str())),
    }
    .bind(consumer.as_str())
    .bind(through.epoch())
    .bind(through.sequence());
    let query = match holder {
        None => query,
        Some(holder) => query.bind(holder.as_str()),
    };
    let done = query.execute(conn).await.map_err(map_err)?;
    Ok(holder.is_none() || done.rows_affected() == 1)
}

#[async_trait]
impl EventStore for PostgresStore {
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let look = self.look(consumer, limit).await?;
        if look.events.len() >= limit as usize || !look.fresh {
            return Ok(look.events);
        }
        // Events committed since the newest horizon: take one that sees them (not sooner than
        // the interval after the newest) and look again.
        if let Some(rest) = self.horizon_interval.checked_sub(look.newest_age) {
            tokio::time::sleep(rest).await;
        }
        self.take_horizon().await?;
        Ok(self.look(consumer, limit).await?.events)
    }

    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError> {
        self.pooled()
            .await?
            .acknowledge(consumer, None, through)
            .await?;
        Ok(())
    }

    async fn acknowledge_leased(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        self.pooled()
            .await?
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
        let row = sqlx::query(AssertSqlSafe(self.sql().lease_consumer.as_str()))
            .bind(consumer.as_str())
            .bind(holder.as_str())
            .bind(self.now_param(now))
            .bind(interval(until - now)?)
            .fetch_optional(self.pool())
            .await
            .map_err(map_err)?;
        Ok(row.is_some())
    }

    async fn release_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
    ) -> Result<(), StoreError> {
        sqlx::query(AssertSqlSafe(self.sql().release_consumer.as_str()))
            .bind(consumer.as_str())
            .bind(holder.as_str())
            .execute(self.pool())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn consumer_position(
        &self,
        consumer: &ConsumerId,
    ) -> Result<Option<EventPosition>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.sql().consumer_position.as_str()))
            .bind(consumer.as_str())
            .fetch_optional(self.pool())
            .await
            .map_err(map_err)?;
        row.map(|row| {
            Ok(EventPosition::new(
                row.try_get("epoch").map_err(map_err)?,
                row.try_get("sequence").map_err(map_err)?,
            ))
        })
        .transpose()
    }

    async fn reclaim_expired(&self, now: Timestamp, limit: u32) -> Result<Vec<Hold>, StoreError> {
        for _ in 0..RECLAIM_ATTEMPTS {
            let rows = sqlx::query(AssertSqlSafe(self.sql().reclaim_expired.as_str()))
                .bind(self.now_param(now))
                .bind(i64::from(limit))
                .fetch_all(self.pool())
                .await
                .map_err(map_err)?;
            let Some(first) = rows.first() else {
                return Err(StoreError::failed("the reclaim returned no row"));
            };
            let candidates: i64 = first.try_get("candidates").map_err(map_err)?;
            let reclaimed = rows
                .iter()
                .filter_map(|row| optional_hold(row).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            // Candidates seen but none reclaimed: another sweeper (or a hold) reclaimed them
            // after this statement's snapshot was taken, or their rows were locked. A new
            // statement has a new snapshot, in which those are gone.
            if !reclaimed.is_empty() || candidates == 0 {
                return Ok(reclaimed);
            }
        }
        Ok(Vec::new())
    }

    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.sql().purge.as_str()))
            .bind(before)
            .bind(i64::from(limit))
            .fetch_one(self.pool())
            .await
            .map_err(map_err)?;
        let count = |column: &str| -> Result<u64, StoreError> {
            let n: i64 = row.try_get(column).map_err(map_err)?;
            u64::try_from(n).map_err(StoreError::failed)
        };
        Ok(Purged {
            holds: count("holds")?,
            events: count("events")?,
        })
    }
}
