//! [`EventStore`] for [`PostgresStore`]: reading the event log, consumers' cursors, the reclaim
//! of expired holds and the purge of old history. The events themselves are appended by the
//! write statements in `sql.rs`, each in the statement that makes its change.
//!
//! # Lock path of the reclaim
//!
//! The reclaim (`reclaim_expired`) locks several slot rows: in
//! ascending id order (its `ORDER BY` runs below the row locks), and before any hold row; it
//! then locks held holds of those slots with `SKIP LOCKED`, so it waits only for slot rows, in
//! one order, holding no hold row. A statement of `sql.rs` that holds one slot row and waits
//! for a hold row of that slot never waits for the reclaim (which does not wait on hold rows), and two
//! reclaims lock slots in the same order. Had it locked holds first and then their slots, a hold
//! statement holding a slot row and reclaiming that slot's expired holds would wait for the
//! reclaim's hold rows while the reclaim waited for its slot row: `tests/events.rs` replays that
//! interleaving.

use std::time::Duration;

use async_trait::async_trait;
use slot_booking::{
    ConsumerId, Event, EventPosition, EventStore, Hold, LeaseHolder, Purged, StoreError, Timestamp,
};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{AssertSqlSafe, Row};

use crate::fragments::{self, append_events, give_back, EV_COLUMNS, H_COLUMNS};
use crate::rows::Cols;
use crate::{interval, map_err, optional_hold, PostgresStore};

/// How many times [`EventStore::reclaim_expired`] looks again when it saw expired holds but
/// every one was reclaimed by a concurrent reclaimer (or hold) first.
const RECLAIM_ATTEMPTS: u32 = 8;

/// Where a read starts: after a consumer's cursor, or after a position.
#[derive(Clone, Copy)]
enum ReadFrom<'a> {
    Cursor(&'a ConsumerId),
    After(EventPosition),
}

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
    let sequence: i64 = row.try_get("sequence").map_err(map_err)?;
    let position = EventPosition::new(epoch, sequence);
    slot_booking::store::event_of(&Cols::of(row), position).map(Some)
}

impl PostgresStore {
    /// Up to `limit` events after `from`: one look, and when it comes up short while events
    /// committed since the newest horizon, a new horizon (not sooner than the interval after
    /// the newest) and a second look.
    async fn read(&self, from: ReadFrom<'_>, limit: u32) -> Result<Vec<Event>, StoreError> {
        let look = self.look(from, limit).await?;
        if look.events.len() >= limit as usize || !look.fresh {
            return Ok(look.events);
        }
        if let Some(rest) = self.horizon_interval.checked_sub(look.newest_age) {
            tokio::time::sleep(rest).await;
        }
        self.take_horizon().await?;
        Ok(self.look(from, limit).await?.events)
    }

    async fn look(&self, from: ReadFrom<'_>, limit: u32) -> Result<Look, StoreError> {
        let sql = self.event_sql();
        let query = match from {
            ReadFrom::Cursor(consumer) => sqlx::query(AssertSqlSafe(sql.read_events.as_str()))
                .bind(consumer.as_str())
                .bind(i64::from(limit)),
            // A position before the start (a negative number) is the start.
            ReadFrom::After(after) => {
                let after = after.max(EventPosition::START);
                sqlx::query(AssertSqlSafe(sql.read_events_after.as_str()))
                    .bind(after.epoch())
                    .bind(i64::from(limit))
                    .bind(after.sequence())
            }
        };
        let rows = query.fetch_all(self.pool()).await.map_err(map_err)?;
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
        sqlx::query(AssertSqlSafe(self.event_sql().take_horizon.as_str()))
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
    sql: &EventStatements,
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
        self.read(ReadFrom::Cursor(consumer), limit).await
    }

    async fn read_events_after(
        &self,
        after: EventPosition,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        self.read(ReadFrom::After(after), limit).await
    }

    async fn event_log_end(&self) -> Result<EventPosition, StoreError> {
        // Events committed since the newest horizon get one of their own first (as a read
        // that came up short would take it), so that every event committed before this call
        // is of a horizon at or below the newest, and every later one of a newer horizon:
        // the end is after any id in the newest horizon.
        self.take_horizon().await?;
        let newest: Option<i64> =
            sqlx::query_scalar(AssertSqlSafe(self.event_sql().newest_horizon.as_str()))
                .fetch_one(self.pool())
                .await
                .map_err(map_err)?;
        Ok(newest.map_or(EventPosition::START, |n| EventPosition::new(n, i64::MAX)))
    }

    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError> {
        self.pooled().acknowledge(consumer, None, through).await?;
        Ok(())
    }

    async fn acknowledge_leased(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        self.pooled()
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
        let row = sqlx::query(AssertSqlSafe(self.event_sql().lease_consumer.as_str()))
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
        sqlx::query(AssertSqlSafe(self.event_sql().release_consumer.as_str()))
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
        let row = sqlx::query(AssertSqlSafe(self.event_sql().consumer_position.as_str()))
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
            let rows = sqlx::query(AssertSqlSafe(self.event_sql().reclaim_expired.as_str()))
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
            // Candidates seen but none reclaimed: another reclaimer (or a hold) reclaimed them
            // after this statement's snapshot was taken, or their rows were locked. A new
            // statement has a new snapshot, in which those are gone.
            if !reclaimed.is_empty() || candidates == 0 {
                self.serve_pool_lines(now).await?;
                return Ok(reclaimed);
            }
        }
        self.serve_pool_lines(now).await?;
        Ok(Vec::new())
    }

    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.event_sql().purge.as_str()))
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

/// The read of the events after the position `cur` (a query of one row, `e` epoch and `q`
/// sequence) with `$2` the limit: see `read_events` in [`EventStatements::new`].
fn read_from(s: &str, cur: &str) -> String {
    format!(
        "WITH cur AS ({cur}), \
                 newest AS ( \
                     SELECT pg_catalog.pg_snapshot_xmax(z.snap) AS xmax, \
                            ARRAY(SELECT pg_catalog.pg_snapshot_xip(z.snap)) AS running, \
                            z.taken_at \
                     FROM {s}.event_horizons z ORDER BY z.n DESC LIMIT 1), \
                 fresh AS ( \
                     SELECT coalesce((SELECT e.tx FROM {s}.events e \
                                      ORDER BY e.tx DESC LIMIT 1) \
                                     >= (SELECT xmax FROM newest), false) \
                         OR EXISTS ( \
                             SELECT 1 FROM unnest((SELECT running FROM newest)) r(x) \
                             CROSS JOIN LATERAL ( \
                                 SELECT 1 FROM {s}.events e WHERE e.tx = r.x LIMIT 1) hit) \
                         AS fresh, \
                         (extract(epoch FROM pg_catalog.clock_timestamp() \
                                  - (SELECT taken_at FROM newest)) * 1000000)::int8 \
                         AS newest_age_us), \
                 legacy AS ( \
                     SELECT ev.tx::text::int8 AS epoch, {EV_COLUMNS} \
                     FROM cur, ( \
                         SELECT z.n, z.snap, z.legacy FROM {s}.event_horizons z \
                         ORDER BY z.n LIMIT 1) z CROSS JOIN LATERAL ( \
                         SELECT * FROM {s}.events e \
                         WHERE (e.tx, e.id) > (cur.e::text::xid8, cur.q) \
                           AND e.tx < pg_catalog.pg_snapshot_xmax(z.snap) \
                           AND pg_catalog.pg_visible_in_snapshot(e.tx, z.snap) \
                         ORDER BY e.tx, e.id LIMIT $2) ev \
                     WHERE z.legacy AND z.n > cur.e), \
                 later AS ( \
                     SELECT z.n AS epoch, {EV_COLUMNS} \
                     FROM cur, {s}.event_horizons z CROSS JOIN LATERAL ( \
                         SELECT * FROM ( \
                             SELECT * FROM {s}.events e \
                             WHERE e.tx >= z.lo AND e.tx < pg_catalog.pg_snapshot_xmax(z.snap) \
                             UNION ALL \
                             SELECT * FROM {s}.events e WHERE e.tx = ANY (z.pending)) e \
                         WHERE pg_catalog.pg_visible_in_snapshot(e.tx, z.snap) \
                           AND (z.n > cur.e OR e.id > cur.q) \
                         ORDER BY e.id LIMIT $2) ev \
                     WHERE NOT z.legacy AND z.n >= (SELECT e FROM cur) \
                     ORDER BY z.n, ev.id LIMIT $2), \
                 found AS ( \
                     SELECT * FROM legacy UNION ALL SELECT * FROM later \
                     ORDER BY epoch, sequence LIMIT $2) \
                 SELECT f.fresh, f.newest_age_us, x.*, \
                        (SELECT h.booking_id FROM {s}.holds h WHERE h.id = x.hold_id) \
                        AS booking_id \
                 FROM fresh f LEFT JOIN found x ON true \
                 ORDER BY x.epoch, x.sequence"
    )
}

/// The event log's statements, in the store's schema.
#[derive(Debug)]
pub(crate) struct EventStatements {
    pub(crate) read_events: String,
    pub(crate) read_events_after: String,
    pub(crate) newest_horizon: String,
    pub(crate) take_horizon: String,
    pub(crate) acknowledge: String,
    pub(crate) acknowledge_leased: String,
    pub(crate) consumer_position: String,
    pub(crate) lease_consumer: String,
    pub(crate) release_consumer: String,
    pub(crate) reclaim_expired: String,
    pub(crate) purge: String,
}

impl EventStatements {
    pub(crate) fn new(s: &str) -> Self {
        let now1 = fragments::now(1);
        let now3 = fragments::now(3);
        EventStatements {
            // `$1` consumer, `$2` limit. Up to `$2` events after the consumer's cursor (the
            // start for a consumer never seen) in position order, from the horizons taken so
            // far (migration 8): first the events visible in the legacy horizon (the oldest,
            // while no purge dropped it), by `(tx, id)`, for a cursor still below it; then each later horizon's events (of
            // transactions at or above its `lo` and below its snapshot's xmax, or among its
            // `pending`, and visible in its snapshot), by id, horizon after horizon, stopping
            // once `$2` are found. Also `fresh`: whether events exist that the newest horizon
            // does not see (committed since it was taken), so that the caller takes a new one
            // when this read comes up short, and how long ago (µs) the newest was taken. Every
            // part walks an index (the newest event's tx, one probe per running transaction,
            // the horizons from the cursor's on), so its estimated cost stays far below
            // `jit_above_cost`: a read never pays for JIT compilation. At least one row.
            read_events: read_from(
                s,
                &format!(
                    "SELECT coalesce(max(c.tx::text::int8), 0) AS e, \
                            coalesce(max(c.id), 0) AS q \
                     FROM {s}.event_consumers c WHERE c.name = $1"
                ),
            ),
            // `$1` and `$3` the position (epoch, sequence; at or after the start), `$2` limit:
            // as `read_events` for a cursor at that position.
            read_events_after: read_from(s, "SELECT $1::int8 AS e, $3::int8 AS q"),
            // The newest horizon's number (`NULL` before any; migration 8 takes the first).
            newest_horizon: format!("SELECT max(n) FROM {s}.event_horizons"),
            // A new horizon when events exist that the newest one does not see: migration 8's
            // function (the table's lock, then a fresh snapshot), one round trip.
            take_horizon: format!("SELECT {s}.take_event_horizon()"),
            // `$1` consumer, `$2` and `$3` the position acknowledged: an upsert that never
            // moves a cursor back (the update applies only to a later position).
            acknowledge: format!(
                "INSERT INTO {s}.event_consumers AS c (name, tx, id, acknowledged_at) \
                 VALUES ($1, $2::int8::text::xid8, $3, statement_timestamp()) \
                 ON CONFLICT (name) DO UPDATE \
                 SET tx = excluded.tx, id = excluded.id, acknowledged_at = excluded.acknowledged_at \
                 WHERE (c.tx, c.id) < (excluded.tx, excluded.id)"
            ),
            // `$1` consumer, `$2` and `$3` the position, `$4` the holder: decided on the
            // locked row, one row affected while `$4` holds the lease (the cursor moved
            // forward, or already there), none otherwise.
            acknowledge_leased: format!(
                "UPDATE {s}.event_consumers c \
                 SET tx = CASE WHEN (c.tx, c.id) < ($2::int8::text::xid8, $3) \
                               THEN $2::int8::text::xid8 ELSE c.tx END, \
                     id = CASE WHEN (c.tx, c.id) < ($2::int8::text::xid8, $3) \
                               THEN $3 ELSE c.id END, \
                     acknowledged_at = statement_timestamp() \
                 WHERE c.name = $1 AND c.holder = $4"
            ),
            // `$1` consumer, `$2` holder, `$3` now, `$4` the lease's length (an interval).
            // Registers a consumer never seen (at the start) with the lease; takes it when free
            // or lapsed, extends it for its holder, decided on the locked row: one row
            // returned when `$2` holds the lease afterwards, none otherwise.
            lease_consumer: format!(
                "INSERT INTO {s}.event_consumers AS c \
                     (name, tx, id, acknowledged_at, holder, lease_until) \
                 VALUES ($1, '0'::xid8, 0, statement_timestamp(), $2, {now3} + $4) \
                 ON CONFLICT (name) DO UPDATE \
                 SET holder = excluded.holder, lease_until = excluded.lease_until \
                 WHERE c.holder IS NULL OR c.holder = excluded.holder \
                    OR c.lease_until <= {now3} \
                 RETURNING c.name"
            ),
            // `$1` consumer, `$2` holder.
            release_consumer: format!(
                "UPDATE {s}.event_consumers SET holder = NULL, lease_until = NULL \
                 WHERE name = $1 AND holder = $2"
            ),
            consumer_position: format!(
                "SELECT tx::text::int8 AS epoch, id AS sequence FROM {s}.event_consumers \
                 WHERE name = $1"
            ),
            // `$1` now, `$2` limit. Lock order as everywhere: slot rows first, then hold rows
            // of those slots. Candidate slots are those of the first `$2` expired held holds
            // (through the per-slot partial index of held holds, in its order); their rows are
            // locked in ascending id order (the sort runs below the row locks), so reclaimers
            // lock slots in one order and a hold, a cancel or a slot change (one slot row,
            // then holds of that slot) never holds a hold row a reclaimer waits for while
            // waiting for a slot the reclaimer holds. Then up to `$2` held holds of the locked
            // slots, re-checked on their latest versions (`status = 'held' AND expires_at <=
            // now`), skipping hold rows another statement has locked (a confirm or renewal in
            // flight, which locks nothing else; the hold is left for a later reclaim): a reclaimer
            // waits for slot rows only. Marking them expired, giving their units back (the
            // new `remaining` computed from the locked slot row `s`, as in the reclaiming
            // statements) and one `hold_expired` event each are one statement: rows affected
            // decide, so two reclaimers never report one hold. Also how many candidates it saw,
            // so a reclaimer that found them all taken by another can look again.
            reclaim_expired: {
                let expired = append_events(
                    s,
                    &format!(
                        "SELECT 'hold_expired', slot_id, id, owner, quantity, {now1} \
                         FROM r ORDER BY id"
                    ),
                );
                // The units go back to each pool the locked slot rows name, those pool rows
                // locked by id after every slot row (`pools.rs`).
                let give = give_back(
                    s,
                    "SELECT s.pools, per.units FROM s JOIN per ON per.slot_id = s.id",
                );
                format!(
                    "WITH cand AS ( \
                         SELECT DISTINCT x.slot_id FROM ( \
                             SELECT h.slot_id FROM {s}.holds h \
                             WHERE h.status = 'held' AND h.expires_at <= {now1} \
                             ORDER BY h.slot_id, h.expires_at LIMIT $2) x), \
                     s AS ( \
                         SELECT sl.id, sl.remaining, sl.capacity, sl.pools FROM {s}.slots sl \
                         WHERE sl.id IN (SELECT slot_id FROM cand) \
                         ORDER BY sl.id FOR NO KEY UPDATE OF sl), \
                     pick AS ( \
                         SELECT h.id FROM {s}.holds h JOIN s ON h.slot_id = s.id \
                         WHERE h.status = 'held' AND h.expires_at <= {now1} \
                         ORDER BY h.slot_id, h.expires_at, h.id LIMIT $2 \
                         FOR NO KEY UPDATE OF h SKIP LOCKED), \
                     r AS ( \
                         UPDATE {s}.holds h SET status = 'expired' FROM pick \
                         WHERE h.id = pick.id AND h.status = 'held' \
                           AND h.expires_at <= {now1} \
                         RETURNING {H_COLUMNS}), \
                     per AS ( \
                         SELECT slot_id, sum(quantity)::int4 AS units FROM r GROUP BY slot_id), \
                     inc AS ( \
                         UPDATE {s}.slots sl \
                         SET remaining = s.remaining + per.units, capacity = s.capacity \
                         FROM s JOIN per ON per.slot_id = s.id WHERE sl.id = s.id \
                         RETURNING sl.id), \
                     {give}, \
                     ev AS ({expired}) \
                     SELECT (SELECT count(*) FROM cand) AS candidates, \
                            {now1} AS decided_at, {H_COLUMNS} \
                     FROM (SELECT 1) AS one LEFT JOIN r h ON true \
                     ORDER BY h.id"
                )
            },
            // `$1` before, `$2` limit. Up to `$2` ended holds (cancelled, or expired and
            // reclaimed, before `$1`: through `holds_ended`), with their keys (deleted in the
            // same statement, before the foreign key is checked at its end; a line of a booking
            // only when no event kept after this purge names it, so that a consumer reading
            // late finds each line's booking: `events_by_hold`, migration 13), and up to `$2`
            // events before `$1` at or below every consumer's cursor (all of them with no
            // consumer). An event is acknowledged by every consumer when the newest horizon
            // below the lowest cursor's epoch sees it (every horizon before the cursor's is
            // consumed whole), when it is of the cursor's own horizon with an id at or below
            // the cursor's, or, for a cursor still in the legacy horizon, when the legacy
            // horizon sees it and it is at or below the cursor by `(tx, id)`. Ended holds never change again and
            // nothing else locks them; rows locked by a concurrent purge are skipped, so
            // purges never wait for each other over holds or events. Also the horizons no
            // remaining event needs (all but the newest whose snapshot's xmax is at or below
            // every remaining event's tx, so none of their events is left), which waits only
            // for a reader taking a horizon.
            purge: format!(
                "WITH low AS ( \
                     SELECT tx, id FROM {s}.event_consumers ORDER BY tx, id LIMIT 1), \
                 done AS ( \
                     SELECT z.snap FROM {s}.event_horizons z \
                     WHERE z.n < (SELECT tx::text::int8 FROM low) ORDER BY z.n DESC LIMIT 1), \
                 cz AS ( \
                     SELECT z.snap, z.lo, z.pending FROM {s}.event_horizons z \
                     WHERE z.n = (SELECT tx::text::int8 FROM low) AND NOT z.legacy), \
                 leg AS (SELECT z.snap FROM {s}.event_horizons z WHERE z.legacy), \
                 old AS ( \
                     SELECT e.tx, e.id FROM {s}.events e \
                     WHERE e.occurred_at < $1 \
                       AND (NOT EXISTS (SELECT 1 FROM low) \
                            OR pg_catalog.pg_visible_in_snapshot(e.tx, (SELECT snap FROM done)) \
                            OR (e.id <= (SELECT id FROM low) \
                                AND pg_catalog.pg_visible_in_snapshot( \
                                        e.tx, (SELECT snap FROM cz)) \
                                AND (e.tx >= (SELECT lo FROM cz) \
                                     OR e.tx = ANY ((SELECT pending FROM cz)::xid8[]))) \
                            OR ((e.tx, e.id) <= (SELECT tx, id FROM low) \
                                AND pg_catalog.pg_visible_in_snapshot( \
                                        e.tx, (SELECT snap FROM leg)))) \
                     ORDER BY e.tx, e.id LIMIT $2 FOR UPDATE SKIP LOCKED), \
                 de AS ( \
                     DELETE FROM {s}.events e USING old o WHERE e.tx = o.tx AND e.id = o.id \
                     RETURNING e.id), \
                 doomed AS ( \
                     SELECT h.id FROM {s}.holds h \
                     WHERE h.status IN ('cancelled', 'expired') \
                       AND (CASE WHEN h.status = 'cancelled' THEN h.cancelled_at \
                                 ELSE h.expires_at END) < $1 \
                       AND (h.booking_id IS NULL OR NOT EXISTS ( \
                           SELECT 1 FROM {s}.events e WHERE e.hold_id = h.id \
                             AND (e.tx, e.id) NOT IN (SELECT tx, id FROM old))) \
                     LIMIT $2 FOR UPDATE OF h SKIP LOCKED), \
                 dk AS ( \
                     DELETE FROM {s}.hold_keys k USING doomed d WHERE k.hold_id = d.id), \
                 dh AS ( \
                     DELETE FROM {s}.holds h USING doomed d WHERE h.id = d.id RETURNING h.id), \
                 dz AS ( \
                     DELETE FROM {s}.event_horizons z \
                     WHERE z.n < (SELECT max(n) FROM {s}.event_horizons) \
                       AND pg_catalog.pg_snapshot_xmax(z.snap) \
                           <= coalesce((SELECT min(tx) FROM {s}.events), \
                                       pg_catalog.pg_snapshot_xmax(z.snap))) \
                 SELECT (SELECT count(*) FROM dh) AS holds, (SELECT count(*) FROM de) AS events"
            ),
        }
    }
}
