//! The one write path: every write of the store on one connection, a pool's or the caller's,
//! through the same statements ([`Run`]); how a hold's refusal is explained.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// What a hold-inserting statement did.
#[derive(Debug)]
pub(crate) enum Insert {
    /// Took a unit and stored the hold.
    Created(Decided<Hold>),
    /// Found no unit, and the statement's own read says why, for good: nothing changed.
    Refused(Decided<HoldOutcome>),
    /// Found no unit; nothing changed.
    NoUnit,
    /// The key is taken; the statement was rolled back as a whole.
    KeyTaken,
}

/// The connection a [`Run`] works on, and how its statements stand to a transaction.
#[derive(Debug)]
pub(crate) enum Conn<'a> {
    /// A connection of the pool for this call, taken at the call's first statement (so a
    /// hold waiting for its slot's group commit holds none, `group.rs`), outside any
    /// transaction: each statement commits by itself, and one that fails undoes itself and
    /// nothing else. No savepoint is needed, nor its round trips. The flag is up while a unit
    /// of work (`kernel.rs`) is open on the connection: a call cut then closes the connection
    /// instead of returning it to the pool, as [`Conn`]'s `Drop` says.
    Pooled(PgPool, Option<PoolConnection<Postgres>>, Arc<AtomicBool>),
    /// The caller's connection, usually inside the caller's transaction, where a failing
    /// statement would abort the whole transaction: the hold's statements, whose key may be
    /// taken by design, run under a savepoint.
    Caller(&'a mut PgConnection),
}

impl Conn<'_> {
    /// The connection to run a statement on: the caller's, or the pool's for this call (taken
    /// now if this is the call's first statement). Not a round trip: with
    /// `test_before_acquire(false)` (as [`PostgresStore::connect`] builds its pool) the pool
    /// hands out an idle connection as it is, exactly as running a statement on the pool did.
    pub(crate) async fn get(&mut self) -> Result<&mut PgConnection, StoreError> {
        match self {
            Conn::Pooled(pool, conn, _) => {
                if conn.is_none() {
                    *conn = Some(pool.acquire().await.map_err(map_err)?);
                }
                conn.as_deref_mut()
                    .ok_or_else(|| StoreError::failed("the pool's connection went missing"))
            }
            Conn::Caller(conn) => Ok(conn),
        }
    }

    /// The flag a unit of work on this connection raises while it is open (`None` on the
    /// caller's connection, whose savepoint sqlx undoes before the caller's next statement).
    pub(crate) fn unit_flag(&self) -> Option<Arc<AtomicBool>> {
        match self {
            Conn::Pooled(_, _, open) => Some(Arc::clone(open)),
            Conn::Caller(_) => None,
        }
    }
}

/// A call cut while a unit of work was open on a connection of the pool (its transaction begun,
/// not yet ended) closes the connection rather than return it: a connection whose statement
/// was cut midway may be out of step with the server, and one parked in a transaction would
/// keep its locks until sqlx rolled it back. The server rolls the transaction back when the
/// connection closes, and the pool opens a fresh one when it needs one.
impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Conn::Pooled(_, Some(conn), open) = self {
            if open.load(Ordering::Acquire) {
                conn.close_on_drop();
            }
        }
    }
}

/// The store's statements on one connection: the one implementation of every operation, run
/// by the pool path ([`Store`](slot_booking::Store), on a connection acquired for the call) and by [`PostgresWrites`] (on
/// the caller's connection).
#[derive(Debug)]
pub(crate) struct Run<'a> {
    pub(crate) store: PostgresStore,
    pub(crate) conn: Conn<'a>,
}

impl PostgresStore {
    pub(crate) fn sql(&self) -> &Statements {
        &self.inner.sql
    }

    pub(crate) fn event_sql(&self) -> &crate::events::EventStatements {
        &self.inner.events
    }

    /// The operations on a connection of the pool, taken for one call at its first statement.
    pub(crate) fn pooled(&self) -> Run<'static> {
        Run {
            store: self.clone(),
            conn: Conn::Pooled(self.pool.clone(), None, Arc::default()),
        }
    }
}

impl Run<'_> {
    pub(crate) fn now_param(&self, now: Timestamp) -> Option<Timestamp> {
        self.store.now_param(now)
    }

    pub(crate) async fn create_slot(
        &mut self,
        slot: &NewSlot,
        now: Timestamp,
    ) -> Result<Slot, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().create_slot.as_str()))
            .bind(slot.starts_at)
            .bind(slot.ends_at)
            .bind(slot.capacity)
            .bind(slot.resource.as_ref().map(ResourceId::as_str))
            .bind(self.now_param(now))
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        slot_from_row(&row)
    }

    /// Places a hold: the fast statement, then, only when it found no unit and expired holds
    /// might make room, the reclaiming one (under a savepoint on the caller's connection), then,
    /// when they stored nothing, one read to say why.
    ///
    /// The fast statement needs no savepoint, even inside the caller's transaction: it checks
    /// the key at its snapshot before it takes anything, so a key in use is a refusal that
    /// changes nothing and locks nothing, like a slot without units; only a key that a
    /// concurrent transaction inserted after that snapshot fails it (see [`Run::key_raced`]).
    /// So a hold that is created, replayed or refused in that statement costs one round trip,
    /// on the pool and in the caller's transaction alike.
    pub(crate) async fn create_hold(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let request = &request;
        if !self.store.fast_paths {
            return self.place_hold(request).await;
        }
        let inner = Arc::clone(&self.store.inner);
        let sql = &inner.sql;
        // On the pool, together with the other holds of the slot placed meanwhile (`group.rs`).
        let fast = match self.conn {
            Conn::Pooled(..) => self.fast_hold(request, &sql.hold_fast).await?,
            Conn::Caller(_) => self.try_insert_hold(&sql.hold_fast, request).await?,
        };
        let inserted = match fast {
            Insert::NoUnit => self.hold_with_reclaim(request).await?,
            Insert::KeyTaken if matches!(self.conn, Conn::Caller(_)) => {
                return self.key_raced(request).await;
            }
            done => done,
        };
        match inserted {
            Insert::Created(hold) => Ok(created(hold)),
            Insert::Refused(outcome) => Ok(outcome),
            Insert::NoUnit | Insert::KeyTaken => self.explain(request).await,
        }
    }

    /// The reclaiming statements of a hold the fast statement found no unit for: lock the slot,
    /// then its pools, reclaim its expired holds, decrement once more and insert, all in one
    /// statement (atomic; a unique violation undoes the reclaim as well); when only pools were
    /// short, give back their slots' expired holds in a step of its own and try once more
    /// (`pools.rs`). On the caller's connection they run under a savepoint: kept when they
    /// stored the hold, undone otherwise (a refused attempt, whose reclaim and slot row lock go
    /// with it, or a failure, which would leave the caller's transaction aborted).
    async fn hold_with_reclaim(&mut self, request: &HoldRequest<'_>) -> Result<Insert, StoreError> {
        let savepoint = matches!(self.conn, Conn::Caller(_)) && self.open_savepoint().await?;
        let inserted = self.hold_reclaiming(request, savepoint).await;
        if !savepoint {
            return inserted;
        }
        let end = match inserted {
            Ok(Insert::Created(_)) => sql::RELEASE_HOLD_SAVEPOINT,
            _ => sql::UNDO_HOLD_SAVEPOINT,
        };
        let ended = self.conn.get().await?.execute(end).await.map_err(map_err);
        // A failed statement's own error says more than its undo's.
        let inserted = inserted?;
        ended?;
        Ok(inserted)
    }

    /// The fast statement on the caller's connection failed on its key: a concurrent
    /// transaction inserted it after the statement's snapshot. Outside a transaction block the
    /// statement undid only itself, and the key's hold says why, as on the pool. Inside one,
    /// the failed statement aborted the caller's transaction (the read finds it so, SQLSTATE
    /// `25P02`): [`StoreError::unavailable`], for the caller to roll back and run the
    /// transaction again, when the key replays or is refused as reused.
    async fn key_raced(
        &mut self,
        request: &HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        match self.explain(request).await {
            Err(error) if transaction_aborted(&error) => Err(StoreError::unavailable(
                "a concurrent transaction inserted this hold's idempotency key first, which \
                 aborted the caller's transaction: roll it back and run it again",
            )),
            answer => answer,
        }
    }

    /// Opens the savepoint of a hold's statements on the caller's connection: `true` when
    /// opened, `false` when the connection is not in a transaction block (PostgreSQL refuses a
    /// savepoint there with SQLSTATE `25P01`). Outside a transaction block every statement
    /// commits by itself and one that fails undoes only itself, as on the pool path, so there
    /// is nothing for a savepoint to protect.
    pub(crate) async fn open_savepoint(&mut self) -> Result<bool, StoreError> {
        match self.conn.get().await?.execute(sql::HOLD_SAVEPOINT).await {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("25P01") => Ok(false),
            Err(error) => Err(map_err(error)),
        }
    }

    /// Runs the fast hold-inserting statement.
    pub(crate) async fn try_insert_hold(
        &mut self,
        sql: &str,
        request: &HoldRequest<'_>,
    ) -> Result<Insert, StoreError> {
        let lifetime = request.expires_at - request.now;
        let inserted = sqlx::query(AssertSqlSafe(sql))
            .bind(request.slot_id.get())
            .bind(request.key.as_str())
            .bind(self.now_param(request.now))
            .bind(interval(lifetime)?)
            .bind(request.quantity)
            .bind(request.owner.map(OwnerId::as_str))
            .fetch_optional(self.conn.get().await?)
            .await;
        match inserted {
            // The key belongs to a booking of several lines: `explain` reads all of it.
            Ok(Some(row)) if !took(&row)? && key_booking(&row)?.is_some() => Ok(Insert::KeyTaken),
            // The fast statement's refusal row (the reclaiming one returns no row instead).
            Ok(Some(row)) if !took(&row)? => {
                Ok(final_refusal(&row, request)?.map_or(Insert::NoUnit, Insert::Refused))
            }
            Ok(Some(row)) => Ok(Insert::Created(decided(&row, hold_from_row(&row)?)?)),
            Ok(None) => Ok(Insert::NoUnit),
            Err(error) if is_unique_violation(&error) => Ok(Insert::KeyTaken),
            Err(error) => Err(map_err(error)),
        }
    }

    /// Says why no hold was created: the key's hold if there is one (it takes precedence),
    /// else whether the slot is missing, started or full. One read, after the write.
    pub(crate) async fn explain(
        &mut self,
        request: &HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.store.sql().explain_hold.as_str()))
            .bind(request.slot_id.get())
            .bind(request.key.as_str())
            .bind(self.now_param(request.now))
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let (at, key_holder, limits) = refusal_facts(&row)?;
        if key_entry(&row)?.is_some() {
            // The key is a waitlist entry's, still waiting: never this hold request.
            return Ok(Decided::new(at, HoldOutcome::KeyReused(None)));
        }
        if key_booking(&row)?.is_some() {
            // A booking of several lines holds the key: never this hold request made again.
            let read = self.key_holder_of(request.key.as_str(), at).await?;
            if let Some(booking) = read.outcome {
                let request = HoldRequest {
                    now: read.at,
                    ..*request
                };
                return Ok(Decided::new(
                    read.at,
                    HoldOutcome::key_taken(&request, booking),
                ));
            }
        }
        Ok(refused(request, at, key_holder, limits))
    }

    /// Runs a conditional update of one plain hold (confirm, cancel, renew) whose first four
    /// parameters are the hold id, now and the scope, then `extra` intervals; when it changes
    /// nothing, reads the hold in the same scope to say why. A line of a booking of several
    /// lines is changed with the whole booking (`lines`, the same change of every line).
    pub(crate) async fn transition(
        &mut self,
        sql: &str,
        lines: &str,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        extra: &[chrono::Duration],
    ) -> Result<Decided<Transition>, StoreError> {
        let (any, owner) = scope.as_filter();
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(hold_id.get())
            .bind(self.now_param(now))
            .bind(any)
            .bind(owner);
        for &duration in extra {
            query = query.bind(interval(duration)?);
        }
        let updated = query
            .fetch_optional(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        if let Some(row) = updated {
            return decided(&row, Transition::Applied(hold_from_row(&row)?));
        }
        // Nothing changed: the hold as it is now, at the instant of that read.
        let (read, booking) = self.get_line(hold_id, scope, now).await?;
        if read.outcome.is_some() && booking.is_some() {
            // A line of a booking of several lines: every line changes, or none.
            if let Some(changed) = self.change_lines(lines, hold_id, scope, now, extra).await? {
                let line = changed
                    .outcome
                    .lines
                    .into_iter()
                    .find(|hold| hold.hold_id == hold_id);
                return Ok(Decided::new(
                    changed.at,
                    line.map_or(Transition::NotFound, Transition::Applied),
                ));
            }
            let read = self.get_hold(hold_id, scope, now).await?;
            return Ok(read.map(|hold| hold.map_or(Transition::NotFound, Transition::NotApplied)));
        }
        Ok(Decided::new(
            read.at,
            match read.outcome {
                Some(hold) => Transition::NotApplied(hold),
                None => Transition::NotFound,
            },
        ))
    }

    pub(crate) async fn confirm_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let sql = &inner.sql;
        let lines = &inner.bookings.confirm_lines;
        self.transition(&sql.confirm, lines, hold_id, scope, now, &[])
            .await
    }

    pub(crate) async fn cancel_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let sql = &inner.sql;
        let lines = &inner.bookings.cancel_lines;
        self.transition(&sql.cancel, lines, hold_id, scope, now, &[])
            .await
    }

    pub(crate) async fn renew_hold(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        let sql = &inner.sql;
        self.transition(
            &sql.renew,
            &inner.bookings.renew_lines,
            request.hold_id,
            request.scope,
            request.now,
            &[request.lifetime, request.max_life],
        )
        .await
    }

    pub(crate) async fn acknowledge(
        &mut self,
        consumer: &ConsumerId,
        holder: Option<&LeaseHolder>,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        let inner = Arc::clone(&self.store.inner);
        events::acknowledge_on(
            self.conn.get().await?,
            &inner.events,
            consumer,
            holder,
            through,
        )
        .await
    }
}

/// Whether `error` is PostgreSQL's "current transaction is aborted" (SQLSTATE `25P02`).
fn transaction_aborted(error: &StoreError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<sqlx::Error>())
        .and_then(|error| match error {
            sqlx::Error::Database(db) => db.code(),
            _ => None,
        })
        .is_some_and(|code| code == "25P02")
}

/// Whether a row of the fast hold statement is the created hold (`took`) or its refusal.
pub(crate) fn took(row: &PgRow) -> Result<bool, StoreError> {
    row.try_get("took").map_err(map_err)
}

/// The booking of several lines whose key a refusal row's key holder is (`key_booking_id`).
pub(crate) fn key_booking(row: &PgRow) -> Result<Option<i64>, StoreError> {
    row.try_get("key_booking_id").map_err(map_err)
}

/// The waitlist entry whose key a refusal row's key is (`key_entry_id`): the key is taken
/// while the entry waits.
pub(crate) fn key_entry(row: &PgRow) -> Result<Option<i64>, StoreError> {
    row.try_get("key_entry_id").map_err(map_err)
}

/// What a refusal row (the fast hold statement's, or the explaining read's) says: the instant
/// it was read at, the hold the key belongs to, and the slot's limits. The slot's columns are
/// all NULL exactly when there is no such slot (`closed` is NOT NULL in the table).
pub(crate) fn refusal_facts(
    row: &PgRow,
) -> Result<(Timestamp, Option<Hold>, Option<SlotLimits>), StoreError> {
    let key_holder = optional_hold(row)?;
    let limits = slot_limits(row)?;
    let at: Timestamp = row.try_get("decided_at").map_err(map_err)?;
    Ok((at, key_holder, limits))
}

/// The slot's limits of a row with `slot_starts_at`, `slot_capacity`, `slot_closed` and
/// `slot_removed_at`, all NULL exactly when there is no such slot (`closed` is NOT NULL in the
/// table).
pub(crate) fn slot_limits(row: &PgRow) -> Result<Option<SlotLimits>, StoreError> {
    let starts_at: Option<Timestamp> = row.try_get("slot_starts_at").map_err(map_err)?;
    let capacity: Option<i32> = row.try_get("slot_capacity").map_err(map_err)?;
    let closed: Option<bool> = row.try_get("slot_closed").map_err(map_err)?;
    let removed_at: Option<Timestamp> = row.try_get("slot_removed_at").map_err(map_err)?;
    Ok(match (starts_at, capacity, closed) {
        (Some(starts_at), Some(capacity), Some(closed)) => Some(SlotLimits {
            starts_at,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        _ => None,
    })
}

/// The refusal's answer, with started or full judged at the instant `at` it was read at.
pub(crate) fn refused(
    request: &HoldRequest<'_>,
    at: Timestamp,
    key_holder: Option<Hold>,
    limits: Option<SlotLimits>,
) -> Decided<HoldOutcome> {
    let request = HoldRequest {
        now: at,
        ..*request
    };
    Decided::new(at, HoldOutcome::refused(&request, key_holder, limits))
}

/// The answer to a hold the fast statement refused, when its own read settles it. Every
/// answer but `SoldOut` is final (a key in use, a waitlist entry's included, a slot missing,
/// not selling or too small: a reclaim would change none of them). `SoldOut` is final when
/// the slot is full at the statement's snapshot with no held hold expired by now (a reclaim
/// would find nothing to give back), or when its line waits (nobody jumps it). `None` when reclaiming might make room, or when the snapshot shows room that the
/// decrement, deciding on the row's latest version, did not find (the row changed under the
/// statement): the reclaiming statement and a fresh read decide those.
///
/// The decision itself is still the decrement's: it affected no row, so nothing was reserved.
/// The read only explains it, at the snapshot the statement ran in.
pub(crate) fn final_refusal(
    row: &PgRow,
    request: &HoldRequest<'_>,
) -> Result<Option<Decided<HoldOutcome>>, StoreError> {
    let (at, key_holder, limits) = refusal_facts(row)?;
    if key_entry(row)?.is_some() {
        return Ok(Some(Decided::new(at, HoldOutcome::KeyReused(None))));
    }
    let answer = refused(request, at, key_holder, limits);
    if answer.outcome != HoldOutcome::SoldOut {
        return Ok(Some(answer));
    }
    let remaining: Option<i32> = row.try_get("slot_remaining").map_err(map_err)?;
    let has_expired: Option<bool> = row.try_get("slot_has_expired").map_err(map_err)?;
    let waiting: Option<i32> = row.try_get("slot_waiting").map_err(map_err)?;
    let full = remaining.is_some_and(|units| units < request.quantity);
    let line = waiting.is_some_and(|entries| entries > 0);
    Ok((line || (full && has_expired == Some(false))).then_some(answer))
}

pub(crate) fn created(hold: Decided<Hold>) -> Decided<HoldOutcome> {
    Decided::new(hold.at, HoldOutcome::Created(hold.outcome))
}
