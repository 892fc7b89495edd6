//! [`EventStore`] for [`PostgresStore`]: reading the event log, consumers' cursors, the sweep
//! of expired holds and the purge of old history. The events themselves are appended by the
//! write statements in `sql.rs`, each in the statement that makes its change.

use std::str::FromStr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use slot_booking::{
    ConsumerId, Event, EventKind, EventPosition, EventStore, Hold, HoldId, OwnerId, Purged, SlotId,
    StoreError, Timestamp,
};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::{map_err, optional_hold, PostgresStore};

/// How many times [`EventStore::reclaim_expired`] looks again when it saw expired holds but
/// every one was reclaimed by a concurrent sweeper (or hold) first.
const RECLAIM_ATTEMPTS: u32 = 8;

/// The longest pause between two looks of a read waiting for the horizon.
const MAX_READ_PAUSE: Duration = Duration::from_millis(16);

/// One look at the log: the events after the cursor below the horizon, the horizon, and the
/// newest event's transaction id visible at that moment.
struct Look {
    events: Vec<Event>,
    horizon: i64,
    newest: Option<i64>,
}

impl Look {
    /// Whether committed events exist that the horizon still holds back.
    fn held_back(&self) -> Option<i64> {
        self.newest.filter(|&newest| newest >= self.horizon)
    }
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
    /// This store, with [`EventStore::read_events`] waiting up to `wait` (default
    /// [`DEFAULT_EVENT_READ_WAIT`](crate::DEFAULT_EVENT_READ_WAIT)) for the transactions that
    /// hold back events already committed; `Duration::ZERO` never waits.
    ///
    /// A read returns only events of transactions below the oldest transaction still running
    /// anywhere in the cluster (see the crate docs, "Events"). When it finds committed events
    /// held back that way and its batch is not full, it looks again, with pauses of 1 to
    /// 16 ms, until the horizon passes the newest of them or `wait` runs out, and then returns
    /// what it may. A consumer never misses an event either way: the wait only makes events
    /// delivered sooner after a burst of short transactions.
    pub fn with_event_read_wait(mut self, wait: Duration) -> Self {
        self.event_read_wait = wait;
        self
    }

    async fn look(&self, consumer: &ConsumerId, limit: u32) -> Result<Look, StoreError> {
        let rows = sqlx::query(&self.sql().read_events)
            .bind(consumer.as_str())
            .bind(i64::from(limit))
            .fetch_all(self.pool())
            .await
            .map_err(map_err)?;
        let Some(first) = rows.first() else {
            return Err(StoreError::failed("the event read returned no row"));
        };
        Ok(Look {
            horizon: first.try_get("horizon").map_err(map_err)?,
            newest: first.try_get("newest").map_err(map_err)?,
            events: rows
                .iter()
                .filter_map(|row| event_from_row(row).transpose())
                .collect::<Result<_, _>>()?,
        })
    }
}

#[async_trait]
impl EventStore for PostgresStore {
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let deadline = Instant::now() + self.event_read_wait;
        let mut look = self.look(consumer, limit).await?;
        // Wait for the events committed before the first look, not for ones that keep coming.
        let Some(wanted) = look.held_back() else {
            return Ok(look.events);
        };
        let mut pause = Duration::from_millis(1);
        while look.events.len() < limit as usize && look.horizon <= wanted {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(MAX_READ_PAUSE);
            look = self.look(consumer, limit).await?;
        }
        Ok(look.events)
    }

    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError> {
        // A position before the start (a negative number) is the start: transaction ids are
        // unsigned, and every cursor starts there.
        let through = through.max(EventPosition::START);
        sqlx::query(&self.sql().acknowledge)
            .bind(consumer.as_str())
            .bind(through.epoch())
            .bind(through.sequence())
            .execute(self.pool())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn consumer_position(
        &self,
        consumer: &ConsumerId,
    ) -> Result<Option<EventPosition>, StoreError> {
        let row = sqlx::query(&self.sql().consumer_position)
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
            let rows = sqlx::query(&self.sql().reclaim_expired)
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
        let row = sqlx::query(&self.sql().purge)
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
