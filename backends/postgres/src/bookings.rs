//! Bookings of several lines ([`BookingStore`](slot_booking::BookingStore)): their statements, beside the code that runs
//! them on the one write path ([`Run`]), and the whole-booking changes every hold change of a
//! line takes.
//!
//! A booking of several lines is one hold per line (so availability, rosters, reclaiming and
//! events work line by line as for any hold), inserted in slot-id order by one statement; every
//! line carries `booking_id`, the booking's id (its first line's hold id), and only the first
//! line's key is in `hold_keys`. A plain hold has `booking_id` NULL: it is a booking of one
//! line for [`get_booking`](slot_booking::BookingStore::get_booking) and the booking transitions.
//!
//! # Lock paths
//!
//! Every statement here that locks several rows takes slot rows first, by id ascending (an
//! `ORDER BY id ... FOR NO KEY UPDATE`, whose sort runs below the row locks), and only then
//! hold rows of those slots (a booking's lines by hold id, which is their slot order), as the
//! reclaim (`reclaim_expired`) does: a statement never holds a hold row while it waits for a
//! slot row, and two statements wait for slot rows in one order, so there is no cycle with a
//! hold, a cancel, a slot change, the reclaim or another booking. Placing a booking inserts its
//! key last, as a hold does. `tests/lock_paths.rs` races bookings over the same slots given in
//! opposite orders.
//!
//! Each decision is on the rows the statement locked (their latest versions) and on the rows
//! its writes affected: a booking is placed only when every line's slot, as locked, is selling
//! with enough units after the expired holds the statement reclaimed; a change applies only
//! when its rule holds for every locked line.

use slot_booking::store::LineState;
use slot_booking::{Booking, BookingLine, BookingOutcome, BookingRequest};

use super::*;
use crate::fragments::{append_events, give_back, hold_event_rows, now, HOLD_COLUMNS, H_COLUMNS};

/// A change of a whole booking.
#[derive(Debug, Clone, Copy)]
enum Change {
    Confirm,
    Cancel,
    Renew,
}

/// How a change statement finds its booking from `$1`.
#[derive(Debug, Clone, Copy)]
enum By {
    /// `$1` is the booking's id: its first line's hold id, or a plain hold's.
    Booking,
    /// `$1` is the id of any line of a booking of several lines (a plain hold: no row).
    Line,
}

/// The booking statements, with table names qualified by the schema.
///
/// Parameters of `create`: `$1` the lines' slot ids (`int8[]`, ascending), `$2` their
/// quantities (`int4[]`), `$3` the key, `$4` now (nullable), `$5` the lifetime, `$6` owner.
/// Of `key_holder`: `$1` key, `$2` now. Of `get` and the changes: `$1` a hold id, `$2` now,
/// `$3` "any hold" and `$4` owner (the caller's scope), then, for a renewal, `$5` the lifetime
/// and `$6` the maximum life.
#[derive(Debug)]
pub(crate) struct BookingStatements {
    pub(crate) create: String,
    pub(crate) key_holder: String,
    get: String,
    confirm_booking: String,
    cancel_booking: String,
    renew_booking: String,
    pub(crate) confirm_lines: String,
    pub(crate) cancel_lines: String,
    pub(crate) renew_lines: String,
}

/// `f` (the booking's id as `root`, from the hold `$1`) and `ln` (its lines' ids and slots),
/// as CTEs. `scope`: only a booking in the caller's scope.
fn lines_of(s: &str, by: By, scope: bool) -> String {
    let (root, cond) = match by {
        By::Booking => ("id", "(booking_id IS NULL OR booking_id = id)"),
        By::Line => ("booking_id", "booking_id IS NOT NULL"),
    };
    let scope = if scope {
        " AND ($3 OR owner IS NOT DISTINCT FROM $4)"
    } else {
        ""
    };
    format!(
        "f AS (SELECT {root} AS root FROM {s}.holds WHERE id = $1 AND {cond}{scope}), \
         ln AS ( \
             SELECT y.id, y.slot_id FROM {s}.holds y JOIN f ON y.id = f.root \
             UNION \
             SELECT y.id, y.slot_id FROM {s}.holds y JOIN f ON y.booking_id = f.root)"
    )
}

/// A change of every line of a booking, in one statement: lock the lines' slot rows by id,
/// then the lines by id; apply the change to every line only if its rule holds for every
/// line as locked, and the booking is in the caller's scope; append one event per line that
/// changed. Returns the changed lines, or no row.
fn change(s: &str, by: By, change: Change) -> String {
    let now2 = now(2);
    let lines = lines_of(s, by, false);
    let active = format!("o.status = 'held' AND o.expires_at > {now2}");
    let (applies, set, kind, moved) = match change {
        Change::Confirm => (
            active,
            format!("status = 'confirmed', confirmed_at = {now2}"),
            "hold_confirmed",
            "",
        ),
        Change::Cancel => (
            format!("(o.status = 'confirmed' OR ({active}))"),
            format!("status = 'cancelled', cancelled_at = {now2}"),
            "hold_cancelled",
            "",
        ),
        // Every line to the renewed expiry of the first (they share creation and expiry).
        Change::Renew => (
            active,
            format!("expires_at = greatest(ld.expires_at, least({now2} + $5, ld.created_at + $6))"),
            "hold_renewed",
            " WHERE expires_at <> old_expires_at",
        ),
    };
    // A cancel gives each line's units back to its slot, computed from the locked row, and
    // to the pools that row names (`pools.rs`).
    let give_back = match change {
        Change::Cancel => format!(
            "inc AS ( \
                 UPDATE {s}.slots sl SET remaining = lk.remaining + c.quantity, \
                     capacity = lk.capacity \
                 FROM c JOIN lk ON lk.id = c.slot_id WHERE sl.id = lk.id \
                 RETURNING sl.id), {}, ",
            give_back(
                s,
                "SELECT lk.pools, c.quantity AS units FROM c JOIN lk ON lk.id = c.slot_id"
            )
        ),
        _ => String::new(),
    };
    let events = append_events(
        s,
        &format!("SELECT '{kind}', slot_id, id, owner, quantity, {now2} FROM c{moved} ORDER BY id"),
    );
    // `o` locks hold rows only once every slot row of `lk` is locked: its one-time filter on
    // `lk` runs before it reads (let alone locks) a hold.
    format!(
        "WITH {lines}, \
         lk AS ( \
             SELECT sl.id, sl.remaining, sl.capacity, sl.pools FROM {s}.slots sl \
             WHERE sl.id IN (SELECT slot_id FROM ln) ORDER BY sl.id FOR NO KEY UPDATE), \
         o AS ( \
             SELECT h.id, h.status, h.expires_at, h.created_at, h.owner FROM {s}.holds h \
             WHERE h.id IN (SELECT id FROM ln) AND (SELECT count(*) FROM lk) >= 0 \
             ORDER BY h.id FOR NO KEY UPDATE), \
         ld AS (SELECT expires_at, created_at FROM o ORDER BY id LIMIT 1), \
         go AS ( \
             SELECT coalesce(bool_and({applies} \
                                      AND ($3 OR o.owner IS NOT DISTINCT FROM $4)), false) AS go \
             FROM o), \
         c AS ( \
             UPDATE {s}.holds h SET {set} FROM o, go, ld WHERE h.id = o.id AND go.go \
             RETURNING {H_COLUMNS}, o.expires_at AS old_expires_at), \
         {give_back}\
         ev AS ({events}) \
         SELECT {HOLD_COLUMNS}, {now2} AS decided_at FROM c ORDER BY slot_id"
    )
}

impl BookingStatements {
    pub(crate) fn new(s: &str) -> Self {
        let (now2, now4) = (now(2), now(4));
        // The booking's lines from its key, with the instant; one row even when there is none.
        let key_holder = format!(
            "WITH f AS ( \
                 SELECT coalesce(x.booking_id, x.id) AS root FROM {s}.hold_keys k \
                 JOIN {s}.holds x ON x.id = k.hold_id WHERE k.idempotency_key = $1), \
             ln AS ( \
                 SELECT y.id FROM {s}.holds y JOIN f ON y.id = f.root \
                 UNION \
                 SELECT y.id FROM {s}.holds y JOIN f ON y.booking_id = f.root) \
             SELECT {now2} AS decided_at, {H_COLUMNS} \
             FROM (SELECT 1) AS one \
             LEFT JOIN {s}.holds h ON h.id IN (SELECT id FROM ln) \
             ORDER BY h.slot_id"
        );
        let get = format!(
            "WITH {} \
             SELECT {now2} AS decided_at, {H_COLUMNS} \
             FROM (SELECT 1) AS one \
             LEFT JOIN {s}.holds h ON h.id IN (SELECT id FROM ln) \
             ORDER BY h.slot_id",
            lines_of(s, By::Booking, true)
        );
        // Placing a booking, in one statement. `lk` locks the lines' slot rows by id; each
        // line's decision is on its row as locked (`st`); a line whose slot has a waiting line
        // (`waiting`, migration 11), or one of whose pools' lines waits (`pw`, migration 12, read
        // after the pool rows are locked), never fits and shows no unit free: nobody jumps the line. Only when every line would fit with
        // its slot's expired holds counted free (`est`) are a short line's expired holds
        // reclaimed (`r`), and each line then fits by the rows the reclaim affected (`fit`):
        // a refused booking reclaims nothing, but for the rare case of a concurrent change
        // that made the estimate wrong (those units were free already). Only when every line
        // fits (`ok`) does one update of each slot take its line's units (and give reclaimed
        // ones back) and are the lines inserted, in slot-id order, with ids drawn in that
        // order (the first line's the lowest: the booking's id, on every line), then the first
        // line's key, last: a key in use fails the whole statement, reclaims included.
        // Otherwise one row per line says what was read of its slot. The reclaim and the
        // update also name the lines' slots by `= ANY($1)`, so that the generic plan of the
        // prepared statement (which knows nothing of `$1`'s length) reaches the holds and slots
        // through their indexes, not by a scan of every expired hold or of the slots table
        // (`tests/queries.rs`).
        let expired = hold_event_rows(1, "hold_expired", "r");
        let placed = hold_event_rows(2, "hold_placed", "ins");
        let events = append_events(
            s,
            &format!(
                "SELECT kind, slot_id, hold_id, owner, quantity, {now4} \
                 FROM ({expired} UNION ALL {placed}) x ORDER BY ord, hold_id"
            ),
        );
        let (pools_locked, pools_estimate, pools_fit, pools_take) =
            crate::pool_sql::booking_pools(s);
        let create = format!(
            "WITH l AS ( \
                 SELECT x.slot_id, x.quantity, x.n \
                 FROM unnest($1::int8[], $2::int4[]) WITH ORDINALITY AS x(slot_id, quantity, n)), \
             lk AS ( \
                 SELECT sl.id, sl.remaining, sl.capacity, sl.starts_at, sl.closed, sl.removed_at, \
                        sl.pools, sl.waiting \
                 FROM {s}.slots sl WHERE sl.id = ANY($1::int8[]) \
                 ORDER BY sl.id FOR NO KEY UPDATE), \
             {pools_locked}
             st AS ( \
                 SELECT l.slot_id, l.quantity, l.n, lk.id IS NOT NULL AS found, lk.remaining, \
                        lk.capacity, lk.starts_at, lk.closed, lk.removed_at, lk.pools, \
                        coalesce(lk.starts_at > {now4} AND NOT lk.closed \
                                 AND lk.removed_at IS NULL, false) AS selling, \
                        coalesce(lk.waiting > 0 \
                                 OR lk.pools && ARRAY(SELECT id FROM pw), false) AS line_waits, \
                        coalesce((SELECT sum(h.quantity) FROM {s}.holds h \
                                  WHERE h.slot_id = lk.id AND h.status = 'held' \
                                    AND h.expires_at <= {now4}), 0)::int4 AS expired \
                 FROM l LEFT JOIN lk ON lk.id = l.slot_id), \
             est AS ( \
                 SELECT coalesce(bool_and(selling AND NOT line_waits \
                                          AND remaining + expired >= quantity), false) \
                        AND {pools_estimate} AS all_fit FROM st), \
             r AS ( \
                 UPDATE {s}.holds h SET status = 'expired' FROM st, est \
                 WHERE est.all_fit AND h.slot_id = ANY($1::int8[]) \
                   AND h.slot_id = st.slot_id AND st.selling \
                   AND st.remaining < st.quantity \
                   AND st.remaining + st.expired >= st.quantity \
                   AND h.status = 'held' AND h.expires_at <= {now4} \
                 RETURNING h.id, h.slot_id, h.owner, h.quantity), \
             u AS (SELECT slot_id, sum(quantity)::int4 AS units FROM r GROUP BY slot_id), \
             fit AS ( \
                 SELECT st.*, coalesce(u.units, 0) AS reclaimed, \
                        st.selling AND NOT st.line_waits \
                            AND st.remaining + coalesce(u.units, 0) >= st.quantity AS fits \
                 FROM st LEFT JOIN u ON u.slot_id = st.slot_id), \
             {pools_fit} \
             ok AS (SELECT coalesce(bool_and(fits AND pools_fit), false) AS ok FROM pf), \
             dec AS ( \
                 UPDATE {s}.slots sl \
                 SET remaining = f.remaining + f.reclaimed \
                         - CASE WHEN ok.ok THEN f.quantity ELSE 0 END, \
                     capacity = f.capacity \
                 FROM fit f, ok \
                 WHERE sl.id = ANY($1::int8[]) AND sl.id = f.slot_id \
                   AND (ok.ok OR f.reclaimed > 0) \
                 RETURNING sl.id), \
             {pools_take} \
             ids AS ( \
                 SELECT nextval(pg_get_serial_sequence('{s}.holds', 'id')) AS id \
                 FROM unnest($1::int8[]) \
                 WHERE (SELECT ok FROM ok) AND (SELECT count(*) FROM dec) >= 0), \
             nid AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM ids), \
             ins AS ( \
                 INSERT INTO {s}.holds \
                     (id, slot_id, idempotency_key, status, expires_at, created_at, quantity, \
                      owner, booking_id) \
                 OVERRIDING SYSTEM VALUE \
                 SELECT nid.id, l.slot_id, $3, 'held', {now4} + $5, {now4}, l.quantity, $6, \
                        (SELECT min(id) FROM nid) \
                 FROM l JOIN nid ON nid.n = l.n \
                 RETURNING {HOLD_COLUMNS}), \
             ev AS ({events}), \
             k AS ( \
                 INSERT INTO {s}.hold_keys (idempotency_key, hold_id) \
                 SELECT $3, id FROM ins ORDER BY id LIMIT 1) \
             SELECT {now4} AS decided_at, ok.ok AS placed, f.slot_id AS line_slot_id, \
                    f.quantity AS line_quantity, f.found AS slot_found, \
                    f.starts_at AS slot_starts_at, f.capacity AS slot_capacity, \
                    f.closed AS slot_closed, f.removed_at AS slot_removed_at, \
                    (CASE WHEN f.line_waits THEN 0 \
                          ELSE coalesce(f.remaining, 0) + greatest(f.expired, f.reclaimed) END)::int4 \
                        AS line_free, f.pools AS slot_pools, \
                    (f.fits OR (NOT est.all_fit AND f.selling AND NOT f.line_waits \
                                AND f.remaining + f.expired >= f.quantity)) \
                        AND cardinality(f.short_pools) = 0 AS line_fits, f.short_pools, \
                    (SELECT hk.hold_id FROM {s}.hold_keys hk WHERE hk.idempotency_key = $3) \
                        AS key_hold_id, \
                    (SELECT hk.entry_id FROM {s}.hold_keys hk WHERE hk.idempotency_key = $3) \
                        AS key_entry_id, \
                    {H_COLUMNS} \
             FROM pf f CROSS JOIN ok CROSS JOIN est LEFT JOIN ins h ON h.slot_id = f.slot_id \
             ORDER BY f.n"
        );
        BookingStatements {
            create,
            key_holder,
            get,
            confirm_booking: change(s, By::Booking, Change::Confirm),
            cancel_booking: change(s, By::Booking, Change::Cancel),
            renew_booking: change(s, By::Booking, Change::Renew),
            confirm_lines: change(s, By::Line, Change::Confirm),
            cancel_lines: change(s, By::Line, Change::Cancel),
            renew_lines: change(s, By::Line, Change::Renew),
        }
    }
}

/// The lines a statement returned, as a booking (`None` for no line).
pub(crate) fn booking_of(rows: &[PgRow]) -> Result<Option<Booking>, StoreError> {
    let mut lines = Vec::with_capacity(rows.len());
    for row in rows {
        if let Some(hold) = optional_hold(row)? {
            lines.push(hold);
        }
    }
    Ok(Booking::of_lines(lines))
}

/// The instant of a statement's first row.
fn decided_at(rows: &[PgRow], statement: &str) -> Result<Timestamp, StoreError> {
    match rows.first() {
        Some(row) => row.try_get("decided_at").map_err(map_err),
        None => Err(StoreError::failed(format!("{statement} returned no row"))),
    }
}

/// What the placing statement read of one line's slot.
fn line_state(row: &PgRow) -> Result<LineState, StoreError> {
    let line = BookingLine::new(
        SlotId(row.try_get("line_slot_id").map_err(map_err)?),
        row.try_get("line_quantity").map_err(map_err)?,
    );
    let found: bool = row.try_get("slot_found").map_err(map_err)?;
    let starts_at: Option<Timestamp> = row.try_get("slot_starts_at").map_err(map_err)?;
    let capacity: Option<i32> = row.try_get("slot_capacity").map_err(map_err)?;
    let closed: Option<bool> = row.try_get("slot_closed").map_err(map_err)?;
    let removed_at: Option<Timestamp> = row.try_get("slot_removed_at").map_err(map_err)?;
    let slot = match (found, starts_at, capacity, closed) {
        (true, Some(starts_at), Some(capacity), Some(closed)) => Some(SlotLimits {
            starts_at,
            capacity,
            closed,
            removed: removed_at.is_some(),
        }),
        _ => None,
    };
    Ok(LineState {
        line,
        slot,
        free: row.try_get::<i32, _>("line_free").map_err(map_err)?,
        failed: !row.try_get::<bool, _>("line_fits").map_err(map_err)?,
    })
}

impl Run<'_> {
    fn statements(&self) -> Arc<Inner> {
        Arc::clone(&self.store.inner)
    }

    /// Places a booking: the placing statement, then, when a key in use failed it or it
    /// refused with the key taken, one read of the key's booking.
    pub(crate) async fn create_booking(
        &mut self,
        request: BookingRequest<'_>,
    ) -> Result<Decided<BookingOutcome>, StoreError> {
        if !self.store.fast_paths {
            return self.place_booking(&request).await;
        }
        let inner = self.statements();
        let slots: Vec<i64> = request.lines.iter().map(|l| l.slot_id.get()).collect();
        let quantities: Vec<i32> = request.lines.iter().map(|l| l.quantity).collect();
        let lifetime = interval(request.expires_at - request.now)?;
        // A key whose holder is purged between the failed statement and the read is free
        // again: place the booking once more. Short only in pools whose slots have expired
        // holds: give those back in a step of their own and place it once more (`pools.rs`).
        let mut pools_reclaimed = false;
        for _ in 0..3 {
            let placed = sqlx::query(AssertSqlSafe(inner.bookings.create.as_str()))
                .bind(&slots)
                .bind(&quantities)
                .bind(request.key.as_str())
                .bind(self.now_param(request.now))
                .bind(lifetime)
                .bind(request.owner.map(OwnerId::as_str))
                .fetch_all(self.conn.get().await?)
                .await;
            let rows = match placed {
                Ok(rows) => rows,
                Err(error) if is_unique_violation(&error) => {
                    let read = self.key_holder(&request).await?;
                    if let Some(holder) = read.outcome {
                        let request = BookingRequest {
                            now: read.at,
                            ..request
                        };
                        return Ok(Decided::new(
                            read.at,
                            BookingOutcome::refused(&request, Some(holder), &[]),
                        ));
                    }
                    // A waitlist entry's key, still waiting: never this booking.
                    if self.key_waits(request.key.as_str()).await? {
                        return Ok(Decided::new(read.at, BookingOutcome::KeyReused(None)));
                    }
                    continue;
                }
                Err(error) => return Err(map_err(error)),
            };
            let at = decided_at(&rows, "placing a booking")?;
            let placed: bool = match rows.first() {
                Some(row) => row.try_get("placed").map_err(map_err)?,
                None => false,
            };
            if placed {
                let booking = booking_of(&rows)?
                    .ok_or_else(|| StoreError::failed("a booking placed without lines"))?;
                return Ok(Decided::new(at, BookingOutcome::Created(booking)));
            }
            if !pools_reclaimed {
                pools_reclaimed = true;
                let mut short = Vec::new();
                for row in &rows {
                    short.extend(row.try_get::<Vec<i64>, _>("short_pools").map_err(map_err)?);
                }
                short.sort_unstable();
                short.dedup();
                if !short.is_empty() && self.reclaim_pools(&short, &[], request.now).await? > 0 {
                    continue;
                }
            }
            let states = rows.iter().map(line_state).collect::<Result<Vec<_>, _>>()?;
            let states = self.within_pools(&rows, &request, states).await?;
            let mut key_taken = false;
            for row in &rows {
                key_taken |= row
                    .try_get::<Option<i64>, _>("key_hold_id")
                    .map_err(map_err)?
                    .is_some();
                if crate::writes::key_entry(row)?.is_some() {
                    return Ok(Decided::new(at, BookingOutcome::KeyReused(None)));
                }
            }
            let holder = if key_taken {
                self.key_holder(&request).await?.outcome
            } else {
                None
            };
            let request = BookingRequest { now: at, ..request };
            return Ok(Decided::new(
                at,
                BookingOutcome::refused(&request, holder, &states),
            ));
        }
        Err(StoreError::unavailable(
            "the booking's key was taken and freed again, three times",
        ))
    }

    /// The booking (or hold) the request's key belongs to, as stored.
    async fn key_holder(
        &mut self,
        request: &BookingRequest<'_>,
    ) -> Result<Decided<Option<Booking>>, StoreError> {
        self.key_holder_of(request.key.as_str(), request.now).await
    }

    /// The booking (or hold) `key` belongs to, as stored, read at `now`.
    pub(crate) async fn key_holder_of(
        &mut self,
        key: &str,
        now: Timestamp,
    ) -> Result<Decided<Option<Booking>>, StoreError> {
        let inner = self.statements();
        let rows = sqlx::query(AssertSqlSafe(inner.bookings.key_holder.as_str()))
            .bind(key)
            .bind(self.now_param(now))
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let at = decided_at(&rows, "the key's booking")?;
        Ok(Decided::new(at, booking_of(&rows)?))
    }

    pub(crate) async fn get_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Booking>>, StoreError> {
        let inner = self.statements();
        let (any, owner) = scope.as_filter();
        let rows = sqlx::query(AssertSqlSafe(inner.bookings.get.as_str()))
            .bind(booking_id.get())
            .bind(self.now_param(now))
            .bind(any)
            .bind(owner)
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let at = decided_at(&rows, "a booking read")?;
        Ok(Decided::new(at, booking_of(&rows)?))
    }

    /// Runs a change statement of whole bookings (`$1` the hold id, `$2` now, `$3`/`$4` the
    /// scope, then `extra` intervals): the booking's lines as changed, or `None` when it
    /// changed nothing.
    pub(crate) async fn change_lines(
        &mut self,
        sql: &str,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        extra: &[chrono::Duration],
    ) -> Result<Option<Decided<Booking>>, StoreError> {
        let (any, owner) = scope.as_filter();
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(hold_id.get())
            .bind(self.now_param(now))
            .bind(any)
            .bind(owner);
        for &duration in extra {
            query = query.bind(interval(duration)?);
        }
        let rows = query
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let at = decided_at(&rows, "a booking change")?;
        Ok(booking_of(&rows)?.map(|booking| Decided::new(at, booking)))
    }

    /// A change of a whole booking by its id; when it changed nothing, one read of the
    /// booking says why.
    async fn change_booking(
        &mut self,
        sql: &str,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        extra: &[chrono::Duration],
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        if let Some(changed) = self
            .change_lines(sql, booking_id, scope, now, extra)
            .await?
        {
            return Ok(changed.map(Transition::Applied));
        }
        let read = self.get_booking(booking_id, scope, now).await?;
        Ok(read.map(|booking| booking.map_or(Transition::NotFound, Transition::NotApplied)))
    }

    pub(crate) async fn confirm_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let inner = self.statements();
        let sql = &inner.bookings.confirm_booking;
        self.change_booking(sql, booking_id, scope, now, &[]).await
    }

    pub(crate) async fn cancel_booking(
        &mut self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let inner = self.statements();
        let sql = &inner.bookings.cancel_booking;
        self.change_booking(sql, booking_id, scope, now, &[]).await
    }

    pub(crate) async fn renew_booking(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let inner = self.statements();
        let sql = &inner.bookings.renew_booking;
        let extra = [request.lifetime, request.max_life];
        self.change_booking(sql, request.hold_id, request.scope, request.now, &extra)
            .await
    }
}

impl Run<'_> {
    /// The lines' states of a refused booking's rows with the pools of their slots counted, as
    /// read now (after the refusal), as every store with pools explains one
    /// ([`LineState::within_pools`](slot_booking::store::LineState::within_pools)).
    pub(crate) async fn within_pools(
        &mut self,
        rows: &[PgRow],
        request: &slot_booking::BookingRequest<'_>,
        states: Vec<slot_booking::store::LineState>,
    ) -> Result<Vec<slot_booking::store::LineState>, StoreError> {
        let mut ids = Vec::new();
        for row in rows {
            let pools: Option<Vec<i64>> = row.try_get("slot_pools").map_err(map_err)?;
            ids.extend(pools.unwrap_or_default());
        }
        if ids.is_empty() {
            return Ok(states);
        }
        ids.sort_unstable();
        ids.dedup();
        let inner = self.pool_sql();
        let rows = sqlx::query(AssertSqlSafe(inner.pools.some.as_str()))
            .bind(self.now_param(request.now))
            .bind(&ids)
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        let pools = listed(&rows, "the booking's pools", crate::pools::usage_from)?.outcome;
        Ok(states
            .into_iter()
            .map(|state| state.within_pools(request, &pools))
            .collect())
    }
}

// Every booking operation on a connection of the pool, through the same statements.
slot_booking::forward_store!(
    impl[] BookingStore for PostgresStore,
    |this| this.pooled()
);
