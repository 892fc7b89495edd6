//! The event log: placing events, reading them by position, consumers' cursors and leases,
//! the sweeper's reclaim and the purge.
//!
//! A write appends its events unplaced (`position` NULL) in its own transaction. Readers place
//! them ([`place`]): a placer locks the log's one row, gives the committed events not yet
//! placed the positions after the highest handed out, in `seq` order, and commits. An event
//! whose transaction is still open is locked by that transaction and skipped
//! (`SKIP LOCKED`), never waited for; it is placed by the first read after its commit, above
//! every position handed out before. So positions are handed out in one order however the
//! writes interleave, across the nodes of a Galera cluster too (two placers on two nodes
//! conflict on the log's row at commit, and the loser places again), and a node that shows a
//! position shows every lower one: the placement that handed it out read the log's row after
//! every earlier placement. A consumer acknowledging as it reads skips nothing.
//!
//! A read places first only when unplaced events exist (checked before it reads): a log read
//! as fast as it is written costs one placement per batch of events, not per event.

use slot_booking::{
    async_trait, ConsumerId, Event, EventPosition, EventStore, Hold, HoldStatus, LeaseHolder,
    Purged, StoreError, Timestamp,
};
use sqlx::mysql::MySqlConnection;
use sqlx::{AssertSqlSafe, Row};

use crate::fragments::placeholders;
use crate::guard::write_statement;
use crate::map_err;
use crate::pooled::Pooled;
use crate::retry::in_transaction;
use crate::rows::{event_from_row, hold_from_row, to_micros};
use crate::serve::{serve, serve_waiting, Lines};
use crate::sql::Statements;
use crate::units::lock_pools_of;
use crate::writes::{gave_back, Step};
use crate::MySqlStore;

/// Most events one placement places: the statement binds one parameter per event.
const PLACE_AT_ONCE: u32 = 1_000;

/// Places up to [`PLACE_AT_ONCE`] committed unplaced events, in `seq` order, after the highest
/// position handed out. Returns how many it placed.
async fn place(sql: &Statements, conn: &mut MySqlConnection) -> Result<Step<u32>, StoreError> {
    let placed: i64 = sqlx::query_scalar(AssertSqlSafe(sql.lock_event_log.as_str()))
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    let seqs: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql.unplaced.as_str()))
        .bind(PLACE_AT_ONCE)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    // By the lowest and highest, not the first and last: positions must start above
    // `placed` whatever order the rows came in.
    let (Some(&first), Some(&last)) = (seqs.iter().min(), seqs.iter().max()) else {
        return Ok(Step::undo(0));
    };
    // Positions follow `seq` from `placed + 1`: increasing, above every earlier one, with
    // gaps where a skipped event lies between two placed ones (it comes later, higher).
    let offset = placed - first + 1;
    let statement = write_statement!(
        "UPDATE {} SET position = ? + seq WHERE seq IN ({})",
        sql.events,
        placeholders(seqs.len())
    );
    let mut update = sqlx::query(AssertSqlSafe(statement)).bind(offset);
    for seq in &seqs {
        update = update.bind(seq);
    }
    let updated = update.execute(&mut *conn).await.map_err(map_err)?;
    if updated.rows_affected() != seqs.len() as u64 {
        return Err(StoreError::failed("placing events: a locked event changed"));
    }
    sqlx::query(AssertSqlSafe(sql.move_event_log.as_str()))
        .bind(offset + last)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(Step::keep(u32::try_from(seqs.len()).unwrap_or(u32::MAX)))
}

/// Moves a consumer's cursor through `through`: any holder's (`holder` `None`: always `true`),
/// or only while `holder` has the consumer's lease (whether it moved).
pub(crate) async fn acknowledge(
    sql: &Statements,
    conn: &mut MySqlConnection,
    consumer: &ConsumerId,
    holder: Option<&LeaseHolder>,
    through: EventPosition,
) -> Result<Step<bool>, StoreError> {
    let Some(holder) = holder else {
        sqlx::query(AssertSqlSafe(sql.acknowledge.as_str()))
            .bind(consumer.as_str())
            .bind(number(through))
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        return Ok(Step::keep(true));
    };
    let moved = sqlx::query(AssertSqlSafe(sql.acknowledge_leased.as_str()))
        .bind(number(through))
        .bind(consumer.as_str())
        .bind(holder.as_str())
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(Step::keep(moved.rows_affected() == 1))
}

impl MySqlStore {
    /// Places every event committed before the call (in batches).
    async fn place_all(&self) -> Result<(), StoreError> {
        loop {
            let placed = in_transaction!(self, |conn| place(&self.sql, conn))?;
            if placed < PLACE_AT_ONCE {
                return Ok(());
            }
        }
    }

    /// Whether an event is waiting to be placed (committed or not).
    async fn any_unplaced(&self) -> Result<bool, StoreError> {
        let mut conn = Pooled::acquire(self).await?;
        let found: Option<i64> = sqlx::query_scalar(AssertSqlSafe(self.sql.any_unplaced.as_str()))
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        conn.done();
        Ok(found.is_some())
    }

    /// `read` (one statement of the log by position), placing first when something waits to
    /// be placed.
    ///
    /// The check comes before the read, never after it: an event whose placement commits
    /// between a read and a later check would be seen by neither (the read is too early to see
    /// its position, the check too late to see it unplaced), and a reader that found the log
    /// empty would miss an event committed before its call. Checked first, an event committed
    /// before the call is either still unplaced (and placed here) or placed by a placement
    /// committed before the check, which the read then sees.
    async fn read_placed<'a>(
        &self,
        read: impl Fn() -> sqlx::query::Query<'a, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    ) -> Result<Vec<Event>, StoreError> {
        if self.any_unplaced().await? {
            self.place_all().await?;
        }
        let mut conn = Pooled::acquire(self).await?;
        let rows = read().fetch_all(&mut *conn).await.map_err(map_err)?;
        conn.done();
        rows.iter().map(event_from_row).collect()
    }
}

/// The position's number in this store's log: positions are `0_<n>`; one of a later epoch (no
/// position of this store) is past every event.
fn number(position: EventPosition) -> i64 {
    if position.epoch() > 0 {
        i64::MAX
    } else {
        position.sequence()
    }
}

/// The sweeper's reclaim of one batch: candidates read, their slots' rows locked by ascending
/// id, the candidates locked and checked again (another reclaimer or a lazy reclaim may have
/// taken some), marked expired, their units given back, one `hold_expired` event each.
async fn reclaim_batch(
    sql: &Statements,
    conn: &mut MySqlConnection,
    now: Timestamp,
    limit: u32,
) -> Result<Step<Vec<Hold>>, StoreError> {
    let candidates: Vec<(i64, i64)> =
        sqlx::query_as(AssertSqlSafe(sql.expired_candidates.as_str()))
            .bind(to_micros(now))
            .bind(limit)
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
    if candidates.is_empty() {
        return Ok(Step::undo(Vec::new()));
    }
    let mut slots: Vec<i64> = candidates.iter().map(|&(_, slot)| slot).collect();
    slots.sort_unstable();
    slots.dedup();
    let lock = format!(
        "SELECT id FROM {} WHERE id IN ({}) ORDER BY id FOR UPDATE",
        sql.slots,
        placeholders(slots.len())
    );
    let mut query = sqlx::query(AssertSqlSafe(lock));
    for slot in &slots {
        query = query.bind(slot);
    }
    query.fetch_all(&mut *conn).await.map_err(map_err)?;
    // Then the pools they give units back to, before any hold.
    let locked: Vec<slot_booking::SlotId> = slots
        .iter()
        .map(|slot| slot_booking::SlotId(*slot))
        .collect();
    lock_pools_of(sql, conn, &locked).await?;
    let recheck = format!(
        "SELECT {} FROM {} WHERE id IN ({}) AND status = 'held' AND expires_at <= ? \
         ORDER BY id FOR UPDATE",
        crate::fragments::HOLD_COLUMNS,
        sql.holds,
        placeholders(candidates.len())
    );
    let mut query = sqlx::query(AssertSqlSafe(recheck));
    for (id, _) in &candidates {
        query = query.bind(id);
    }
    let rows = query
        .bind(to_micros(now))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let mut reclaimed = rows
        .iter()
        .map(hold_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    if reclaimed.is_empty() {
        return Ok(Step::undo(reclaimed));
    }
    let expire = write_statement!(
        "UPDATE {} SET status = 'expired' WHERE id IN ({})",
        sql.holds,
        placeholders(reclaimed.len())
    );
    let mut update = sqlx::query(AssertSqlSafe(expire));
    for hold in &reclaimed {
        update = update.bind(hold.hold_id.get());
    }
    let expired = update.execute(&mut *conn).await.map_err(map_err)?;
    if expired.rows_affected() != reclaimed.len() as u64 {
        return Err(StoreError::failed("reclaiming: a locked hold changed"));
    }
    for hold in &mut reclaimed {
        hold.status = HoldStatus::Expired;
    }
    gave_back(sql, conn, &reclaimed, now).await?;
    let mut lines = Lines::new();
    for slot in &slots {
        lines
            .slot_and_pools(sql, conn, slot_booking::SlotId(*slot))
            .await?;
    }
    serve(sql, conn, lines, now).await?;
    Ok(Step::keep(reclaimed))
}

/// Up to `limit` ended holds and up to `limit` acknowledged old events deleted.
async fn purge(
    sql: &Statements,
    conn: &mut MySqlConnection,
    before: Timestamp,
    limit: u32,
) -> Result<Step<Purged>, StoreError> {
    // The events first: a hold an event still kept names is not purged.
    let events = sqlx::query(AssertSqlSafe(sql.purge_events.as_str()))
        .bind(to_micros(before))
        .bind(limit)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    let holds = sqlx::query(AssertSqlSafe(sql.purge_holds.as_str()))
        .bind(to_micros(before))
        .bind(to_micros(before))
        .bind(limit)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(Step::keep(Purged {
        holds: holds.rows_affected(),
        events: events.rows_affected(),
    }))
}

/// Takes or extends a consumer's lease: the update matches a free, lapsed or own lease; a
/// consumer never seen is registered with it. Whether `holder` holds it afterwards.
async fn lease(
    sql: &Statements,
    conn: &mut MySqlConnection,
    consumer: &ConsumerId,
    holder: &LeaseHolder,
    now: Timestamp,
    until: Timestamp,
) -> Result<Step<bool>, StoreError> {
    let extended = sqlx::query(AssertSqlSafe(sql.extend_lease.as_str()))
        .bind(holder.as_str())
        .bind(to_micros(until))
        .bind(consumer.as_str())
        .bind(holder.as_str())
        .bind(to_micros(now))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if extended.rows_affected() == 1 {
        return Ok(Step::keep(true));
    }
    let registered = sqlx::query(AssertSqlSafe(sql.register_leased.as_str()))
        .bind(consumer.as_str())
        .bind(holder.as_str())
        .bind(to_micros(until))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(Step::keep(registered.rows_affected() == 1))
}

#[async_trait]
impl EventStore for MySqlStore {
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let read = || {
            sqlx::query(AssertSqlSafe(self.sql.read_events.as_str()))
                .bind(consumer.as_str())
                .bind(limit)
        };
        self.read_placed(read).await
    }

    async fn read_events_after(
        &self,
        after: EventPosition,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let read = || {
            sqlx::query(AssertSqlSafe(self.sql.read_events_after.as_str()))
                .bind(number(after))
                .bind(limit)
        };
        self.read_placed(read).await
    }

    async fn event_log_end(&self) -> Result<EventPosition, StoreError> {
        self.place_all().await?;
        let mut conn = Pooled::acquire(self).await?;
        let placed: i64 = sqlx::query_scalar(AssertSqlSafe(self.sql.event_log_end.as_str()))
            .fetch_one(&mut *conn)
            .await
            .map_err(map_err)?;
        conn.done();
        Ok(EventPosition::new(0, placed))
    }

    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError> {
        self.run().acknowledge(consumer, None, through).await?;
        Ok(())
    }

    async fn consumer_position(
        &self,
        consumer: &ConsumerId,
    ) -> Result<Option<EventPosition>, StoreError> {
        let mut conn = Pooled::acquire(self).await?;
        let row = sqlx::query(AssertSqlSafe(self.sql.consumer_position.as_str()))
            .bind(consumer.as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        conn.done();
        row.map(|row| {
            let acknowledged: i64 = row.try_get("acknowledged").map_err(map_err)?;
            Ok(EventPosition::new(0, acknowledged))
        })
        .transpose()
    }

    async fn lease_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        in_transaction!(self, |conn| lease(
            &self.sql, conn, consumer, holder, now, until
        ))
    }

    async fn release_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
    ) -> Result<(), StoreError> {
        in_transaction!(self, |conn| async {
            sqlx::query(AssertSqlSafe(self.sql.release_consumer.as_str()))
                .bind(consumer.as_str())
                .bind(holder.as_str())
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
            Ok(Step::keep(()))
        })
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

    async fn reclaim_expired(&self, now: Timestamp, limit: u32) -> Result<Vec<Hold>, StoreError> {
        let reclaimed = in_transaction!(self, |conn| reclaim_batch(&self.sql, conn, now, limit))?;
        // Then any head a concurrent step could not serve (its rows were busy).
        in_transaction!(self, |conn| serve_waiting(&self.sql, conn, now))?;
        Ok(reclaimed)
    }

    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError> {
        in_transaction!(self, |conn| purge(&self.sql, conn, before, limit))
    }
}
