//! Pools ([`PoolStore`](slot_booking::PoolStore)): capacities several slots draw from. Their
//! statements and the pieces of SQL every unit-moving statement of the store uses for them,
//! beside the code that runs them on the one write path ([`Run`]).
//!
//! # Storage
//!
//! `pools` keeps each pool's `capacity` and `remaining` (migration 10), under the invariant
//! `remaining + units held (expired included until reclaimed) + units confirmed = capacity`
//! over the holds of its slots. Which slots draw from a pool is in `slot_pools` (read by
//! pool) and, the same list, on each slot's own row (`slots.pools`), both written by attach
//! and detach under the slot row's lock. Every statement that moves units of a slot moves
//! them for the pools named on the slot row *as it locked it* (its latest version), never for
//! `slot_pools` read at the statement's snapshot: in READ COMMITTED that snapshot can predate
//! an attach that committed while the statement waited for the slot's lock, and the pool
//! would miss the units.
//!
//! # Lock order
//!
//! Slot rows first, by id ascending, then pool rows by id ascending (`SELECT ... FROM pools
//! WHERE id ... ORDER BY id FOR NO KEY UPDATE`, the sort below the row locks, reading ids
//! only from slot rows already locked), in every statement: a hold, a booking, a cancel, the
//! reclaims, attach and detach. Hold rows are locked only under their slot's row lock (or by
//! a confirm or renewal, which holds nothing else), so where they come relative to pools does
//! not matter. A capacity change of a pool locks that pool row alone; its reclaiming step
//! locks the pool's slots first. No statement holds a pool row while it waits for a slot row,
//! so there is no cycle: a deadlock is a bug here, not a retry. Serving a pool's line after a
//! statement that holds the pool row (a pool capacity change, a detach, the serving trigger)
//! needs the head's slot row and its other pools: those it takes with `SKIP LOCKED`, never
//! waiting (migration 12, `waitlists.rs`).
//!
//! # Short in a pool
//!
//! A hold or booking refused only because a pool is short, when expired holds of *other*
//! slots of that pool would make room, cannot reclaim them in its own statement without
//! locking those slots after its own (out of order). It is refused; then one statement of
//! its own ([`PoolStatements::reclaim`], a transaction by itself on the pool) locks the
//! slots with expired holds of the short pools by id, then their pools, marks those holds
//! expired, gives their units back to slots and pools with one `hold_expired` event each,
//! and commits; and the hold or booking is tried once more. Those units were free already,
//! so availability is the same either way (as with the reclaim a booking keeps when a clock
//! skewed the estimate). Inside a caller's transaction the refused statement is rolled back
//! to its savepoint first, so the reclaim's locks are taken in order there too (after
//! whatever the caller's transaction already holds).

use slot_booking::{
    CapacityChange, NewPool, Pool, PoolChange, PoolId, PoolUsage, MAX_POOLS_PER_SLOT,
};
use sqlx::Connection;

use super::*;
use crate::fragments::{
    append_events, capacity_after, capacity_expected, give_back, hold_event_rows, now, H_COLUMNS,
};
use crate::writes::Insert;

/// The second hold statement (`$1`..`$6` as the fast one's), when the fast one found no unit
/// or the slot draws from pools (the fast one takes units only of a slot without pools). One
/// statement: lock the selling slot's row first (only while nobody waits in its line:
/// `waiting = 0`, re-checked on the row's latest version, so a refused hold reclaims nothing) (a row lock returns its latest `remaining`
/// and `pools`), then its pools' rows by id; while the line of any of them waits (`pw`: a
/// pool with entries whose line, read after its lock by `pool_line_head`, is not empty) the
/// hold is refused and reclaims nothing, like a slot whose line waits, and no pool is named
/// short; only if the slot's expired units would make the
/// hold fit in the slot and in every pool (a refused hold changes nothing) mark its held holds
/// that expired by now as expired. One update of the slot, and one of each pool, give their
/// units back and take the hold's if it fits in all of them; the hold is inserted only then
/// (`insert`, given the answer). Rows affected decide everything: two racing reclaims
/// serialize on the slot lock and the second finds the holds no longer `held`. Should the
/// estimate `e` (read before the lock) be off, the units reclaimed are still given back: the
/// invariant holds either way. Whether the hold fits is decided on the values the locks
/// returned (`s`, `pl`), which nobody can change while the statement holds them: a condition
/// on the updated row would first be tested on the row as of the statement's snapshot, and a
/// row that failed it there would be skipped without a look at its latest version. The new
/// `remaining` is computed from `s` (and `capacity` written from it) for the reason
/// `reclaim_then_change` gives in `sql.rs`.
///
/// Always one row: the hold (`took`), or `took` false with whether the slot itself had the
/// units (`slot_fits`) and the pools that were short (`short_pools`, by id).
pub(crate) fn hold_reclaim(s: &str, now3: &str, insert: impl Fn(&str) -> String) -> String {
    let answer = format!(
        "SELECT h.id IS NOT NULL AS took, {H_COLUMNS}, {now3} AS decided_at, \
                coalesce((SELECT s.remaining + u.units >= $5 FROM s, u), false) AS slot_fits, \
                pf.short AS short_pools \
         FROM pf LEFT JOIN ins h ON true"
    );
    let insert = insert(&answer);
    format!(
        "WITH s AS ( \
             SELECT id, remaining, capacity, pools FROM {s}.slots \
             WHERE id = $1 AND starts_at > {now3} AND NOT closed AND removed_at IS NULL \
               AND waiting = 0 \
             FOR NO KEY UPDATE), \
         pl AS ( \
             SELECT p.id, p.remaining, p.waiting FROM {s}.pools p \
             WHERE p.id = ANY(coalesce((SELECT pools FROM s), '{{}}'::int8[])) \
             ORDER BY p.id FOR NO KEY UPDATE), \
         pw AS ( \
             SELECT coalesce(bool_or(CASE WHEN pl.waiting > 0 \
                                          THEN {s}.pool_line_head(pl.id, {now3}) IS NOT NULL \
                                          ELSE false END), false) AS waits \
             FROM pl), \
         pe AS ( \
             SELECT CASE WHEN pw.waits THEN -1 \
                         ELSE coalesce(min(pl.remaining), 2147483647) END::int8 AS least \
             FROM pw LEFT JOIN pl ON true GROUP BY pw.waits), \
         e AS ( \
             SELECT coalesce(sum(h.quantity), 0)::int4 AS units \
             FROM s JOIN {s}.holds h ON h.slot_id = s.id \
             WHERE h.status = 'held' AND h.expires_at <= {now3}), \
         r AS ( \
             UPDATE {s}.holds h SET status = 'expired' FROM s, e, pe, pw \
             WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= {now3} \
               AND s.remaining + e.units >= $5 AND pe.least + e.units >= $5 \
               AND NOT pw.waits \
             RETURNING h.id, h.slot_id, h.owner, h.quantity), \
         u AS (SELECT coalesce(sum(quantity), 0)::int4 AS units FROM r), \
         pf AS ( \
             SELECT coalesce(bool_and(pl.remaining + u.units >= $5), true) AND NOT pw.waits \
                        AS fit, \
                    CASE WHEN pw.waits THEN '{{}}'::int8[] \
                         ELSE coalesce(array_agg(pl.id ORDER BY pl.id) \
                                           FILTER (WHERE pl.remaining + u.units < $5), \
                                       '{{}}'::int8[]) END AS short \
             FROM u CROSS JOIN pw LEFT JOIN pl ON true GROUP BY pw.waits), \
         dec AS ( \
             UPDATE {s}.slots sl \
             SET remaining = s.remaining + u.units \
                 - CASE WHEN s.remaining + u.units >= $5 AND pf.fit THEN $5 ELSE 0 END, \
                 capacity = s.capacity \
             FROM s, u, pf \
             WHERE sl.id = s.id AND (u.units > 0 OR (s.remaining >= $5 AND pf.fit)) \
             RETURNING sl.id, s.remaining + u.units >= $5 AND pf.fit AS took), \
         pdec AS ( \
             UPDATE {s}.pools p \
             SET remaining = pl.remaining + u.units - CASE WHEN dec.took THEN $5 ELSE 0 END \
             FROM pl, u, dec WHERE p.id = pl.id \
             RETURNING p.id), \
         {insert}"
    )
}

/// The pieces of a booking's placing statement (`bookings.rs`) for the pools of its lines'
/// slots: `pl` (after `lk`), the pool rows named by the locked slot rows, locked by id once
/// every slot row is; the estimate that gates the reclaim (each pool has room for the units
/// of its lines with the expired units the statement would reclaim counted free); after
/// `fit`, `pn` (units asked of each pool), `pr` (units reclaimed on its slots), `pp` (each
/// pool's free units, decided on the locked row, and as shown), and `pf`, each line with
/// whether all its pools fit and the short ones; after `dec`,
/// `pdec`, one update per pool giving back what was reclaimed and taking the lines' units only
/// when the whole booking is placed. A short pool fails every line on its slots.
pub(crate) fn booking_pools(s: &str) -> (String, String, String, String) {
    let now4 = now(4);
    let need = "SELECT x.pool_id, sum(t.quantity)::int8 AS need, \
                       sum(CASE WHEN t.selling AND t.remaining < t.quantity \
                                     AND t.remaining + t.expired >= t.quantity \
                                THEN t.expired ELSE 0 END)::int8 AS est \
                FROM st t CROSS JOIN LATERAL unnest(t.pools) AS x(pool_id) GROUP BY x.pool_id";
    let locked = format!(
        "pl AS ( \
             SELECT p.id, p.remaining, p.waiting FROM {s}.pools p \
             WHERE p.id = ANY(ARRAY(SELECT unnest(lk.pools) FROM lk)) \
             ORDER BY p.id FOR NO KEY UPDATE), \
         pw AS ( \
             SELECT pl.id FROM pl \
             WHERE CASE WHEN pl.waiting > 0 \
                        THEN {s}.pool_line_head(pl.id, {now4}) IS NOT NULL ELSE false END), "
    );
    let estimate = format!(
        "(SELECT coalesce(bool_and(pl.remaining + n.est >= n.need), true) \
          FROM pl JOIN ({need}) n ON n.pool_id = pl.id)"
    );
    let fit = format!(
        "pn AS ({need}), \
         pr AS ( \
             SELECT x.pool_id, sum(f.reclaimed)::int8 AS units \
             FROM fit f CROSS JOIN LATERAL unnest(f.pools) AS x(pool_id) GROUP BY x.pool_id), \
         pp AS ( \
             SELECT pl.id, pn.need, pl.remaining + pr.units AS free, pr.units AS reclaimed, \
                    CASE WHEN (SELECT all_fit FROM est) THEN pl.remaining + pr.units \
                         ELSE pl.remaining + greatest(pn.est, pr.units) END AS shown \
             FROM pl JOIN pn ON pn.pool_id = pl.id JOIN pr ON pr.pool_id = pl.id), \
         pf AS ( \
             SELECT f.*, \
                    coalesce((SELECT bool_and(pp.free >= pp.need) FROM pp \
                              WHERE pp.id = ANY(f.pools)), true) AS pools_fit, \
                    ARRAY(SELECT pp.id FROM pp WHERE pp.id = ANY(f.pools) \
                          AND pp.shown < pp.need ORDER BY pp.id) AS short_pools \
             FROM fit f), "
    );
    let take = format!(
        "pdec AS ( \
             UPDATE {s}.pools p \
             SET remaining = (pp.free - CASE WHEN ok.ok THEN pp.need ELSE 0 END)::int4 \
             FROM pp, ok WHERE p.id = pp.id AND (ok.ok OR pp.reclaimed > 0) \
             RETURNING p.id), "
    );
    (locked, estimate, fit, take)
}

/// The pool statements, with table names qualified by the schema.
///
/// Parameters: of `create`, `$1` capacity, `$2` now; of `get`, `$1` pool id, `$2` now; of
/// `all`, `$1` now; of `some`, `$1` now and `$2` pool ids (`int8[]`); of `attach` and `detach`, `$1` pool id, `$2` slot id, `$3` the most pools
/// a slot may have; of `capacity`, `$1` pool id, `$2` the new capacity; of `reclaim`, `$1`
/// pool ids (`int8[]`), `$2` now, `$3` more slot ids (`int8[]`).
#[derive(Debug)]
pub(crate) struct PoolStatements {
    create: String,
    get: String,
    all: String,
    pub(crate) some: String,
    attach: String,
    detach: String,
    capacity: String,
    pub(crate) reclaim: String,
    /// Serves the lines of slots `$1` and pools `$2` at `$3` (`serve_lines`, migration 12).
    serve: String,
    /// The pools some entry of whose slots waits, by id.
    pub(crate) waiting_pools: String,
    /// The sweeper's pass over pool `$1` at `$2` (`serve_pool_head`, migration 12).
    pub(crate) serve_head: String,
}

/// A pool with its slots and its units held and expired at `c.now`, of the pools `p` joined
/// to the one-row `c` by `on`.
fn usage(s: &str, now: &str, on: &str) -> String {
    format!(
        "SELECT c.now AS decided_at, p.id, p.capacity, p.remaining, \
                ARRAY(SELECT sp.slot_id FROM {s}.slot_pools sp \
                      WHERE sp.pool_id = p.id ORDER BY sp.slot_id) AS slots, \
                coalesce(u.held, 0)::int4 AS held, coalesce(u.expired, 0)::int4 AS expired \
         FROM (SELECT {now} AS now) c LEFT JOIN {s}.pools p ON {on} \
         LEFT JOIN LATERAL ( \
             SELECT sum(h.quantity) FILTER (WHERE h.expires_at > c.now) AS held, \
                    sum(h.quantity) FILTER (WHERE h.expires_at <= c.now) AS expired \
             FROM {s}.slot_pools sp JOIN {s}.holds h ON h.slot_id = sp.slot_id \
             WHERE sp.pool_id = p.id AND h.status = 'held') u ON true \
         ORDER BY p.id"
    )
}

impl PoolStatements {
    pub(crate) fn new(s: &str) -> Self {
        let (now1, now2) = (now(1), now(2));
        // Slots then pools, as everywhere: the pool row is locked only once the slot row is
        // (its filter on `s` runs before it reads a pool). The slot's units taken are
        // `capacity - remaining` on its locked row (its invariant), never holds counted at the
        // snapshot; they are taken from the pool by a conditional update (`go`). The slot's
        // line's entries (`waiting`, on its locked row) join the pool's count or leave it. A
        // detach also locks the slot's other pools (`pa`, with the pool, by id): the lines it
        // serves next, in the same transaction, need them (`Run::link`).
        let change = |kind: &str| {
            let (go, pools, pool, waiting, link, others) = match kind {
                // A removed slot joins no pool (it may still leave one).
                "attach" => (
                    "s.removed_at IS NULL AND NOT (p.id = ANY(s.pools)) AND cardinality(s.pools) < $3 \
                     AND p.remaining >= s.capacity - s.remaining",
                    "array_append(s.pools, $1)",
                    "p.remaining - go.units",
                    "p.waiting + go.waiting",
                    format!(
                        "INSERT INTO {s}.slot_pools (slot_id, pool_id) SELECT go.id, $1 FROM go"
                    ),
                    "",
                ),
                _ => (
                    "p.id = ANY(s.pools) AND $3 > 0",
                    "array_remove(s.pools, $1)",
                    "p.remaining + go.units",
                    "p.waiting - go.waiting",
                    format!(
                        "DELETE FROM {s}.slot_pools \
                         WHERE slot_id = $2 AND pool_id = $1 AND EXISTS (SELECT 1 FROM go)"
                    ),
                    " OR id = ANY(coalesce((SELECT pools FROM s), '{}'::int8[]))",
                ),
            };
            format!(
                "WITH s AS ( \
                     SELECT id, remaining, capacity, pools, removed_at, waiting FROM {s}.slots \
                     WHERE id = $2 FOR NO KEY UPDATE), \
                 pa AS ( \
                     SELECT id, remaining, waiting FROM {s}.pools \
                     WHERE (id = $1{others}) AND EXISTS (SELECT 1 FROM s) \
                     ORDER BY id FOR NO KEY UPDATE), \
                 p AS (SELECT id, remaining, waiting FROM pa WHERE id = $1), \
                 go AS ( \
                     SELECT s.id, s.capacity - s.remaining AS units, s.waiting \
                     FROM s, p WHERE {go}), \
                 pu AS ( \
                     UPDATE {s}.pools x SET remaining = {pool}, waiting = {waiting} \
                     FROM p, go WHERE x.id = p.id \
                     RETURNING x.id), \
                 su AS ( \
                     UPDATE {s}.slots x SET pools = {pools} FROM s, go WHERE x.id = s.id \
                     RETURNING x.id), \
                 link AS ({link}) \
                 SELECT EXISTS (SELECT 1 FROM s) AS slot_found, \
                        EXISTS (SELECT 1 FROM s WHERE removed_at IS NOT NULL) AS removed, \
                        EXISTS (SELECT 1 FROM p) AS pool_found, \
                        coalesce((SELECT $1 = ANY(pools) FROM s), false) AS attached, \
                        coalesce((SELECT cardinality(pools) >= $3 FROM s), false) AS full, \
                        EXISTS (SELECT 1 FROM go) AS applied"
            )
        };
        let expired = append_events(
            s,
            &format!(
                "SELECT kind, slot_id, hold_id, owner, quantity, {now2} FROM ({}) x \
                 ORDER BY hold_id",
                hold_event_rows(1, "hold_expired", "r")
            ),
        );
        let give = give_back(
            s,
            "SELECT s.pools, per.units FROM s JOIN per ON per.slot_id = s.id",
        );
        PoolStatements {
            serve: format!(
                "SELECT {s}.serve_lines($1::int8[], $2::int8[], {}) AS offered",
                now(3)
            ),
            waiting_pools: format!("SELECT id FROM {s}.pools WHERE waiting > 0 ORDER BY id"),
            serve_head: format!("SELECT {s}.serve_pool_head($1, {now2}) AS offered"),
            create: format!(
                "INSERT INTO {s}.pools (capacity, remaining, created_at) \
                 VALUES ($1, $1, {now2}) RETURNING id, capacity, remaining"
            ),
            get: usage(s, &now2, "p.id = $1"),
            all: usage(s, &now1, "true"),
            some: usage(s, &now1, "p.id = ANY($2::int8[])"),
            attach: change("attach"),
            detach: change("detach"),
            // One conditional update of the pool row alone, decided on the row it locked: the
            // capacity change's terms `$2` keep, `$3` add, `$4` expected (`capacity_after`), the
            // capacity after it in 0..=i32::MAX.
            capacity: format!(
                "WITH o AS ( \
                     SELECT id, remaining, capacity FROM {s}.pools WHERE id = $1 \
                     FOR NO KEY UPDATE), \
                 ch AS ( \
                     UPDATE {s}.pools p SET capacity = ({new})::int4, \
                         remaining = (o.remaining::int8 + ({new} - o.capacity))::int4 \
                     FROM o WHERE p.id = o.id AND {guard} \
                       AND {new} BETWEEN 0 AND 2147483647 \
                       AND o.remaining::int8 + ({new} - o.capacity) >= 0 \
                     RETURNING p.id, o.capacity <> {new} AS changed) \
                 SELECT EXISTS (SELECT 1 FROM o) AS found, EXISTS (SELECT 1 FROM ch) AS applied, \
                        coalesce((SELECT changed FROM ch), false) AS changed",
                new = capacity_after(2, "o.capacity"),
                guard = capacity_expected(4, "o.capacity"),
            ),
            // The step of its own that gives back the expired holds of pools' slots (and of
            // `$3`'s): the slots with held holds expired by now (at the snapshot: only which
            // slots to lock), locked by id; their expired holds re-checked on their latest
            // versions and marked expired; their units given back to each slot and to each
            // pool its locked row names (locked by id after the slots); one `hold_expired`
            // each. Returns the units given back.
            reclaim: format!(
                "WITH ps AS ( \
                     SELECT DISTINCT h.slot_id FROM {s}.holds h \
                     WHERE h.status = 'held' AND h.expires_at <= {now2} \
                       AND (h.slot_id = ANY($3::int8[]) OR h.slot_id IN ( \
                           SELECT sp.slot_id FROM {s}.slot_pools sp \
                           WHERE sp.pool_id = ANY($1::int8[])))), \
                 s AS ( \
                     SELECT sl.id, sl.remaining, sl.capacity, sl.pools FROM {s}.slots sl \
                     WHERE sl.id IN (SELECT slot_id FROM ps) ORDER BY sl.id FOR NO KEY UPDATE), \
                 r AS ( \
                     UPDATE {s}.holds h SET status = 'expired' FROM s \
                     WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= {now2} \
                     RETURNING h.id, h.slot_id, h.owner, h.quantity), \
                 per AS (SELECT slot_id, sum(quantity)::int4 AS units FROM r GROUP BY slot_id), \
                 inc AS ( \
                     UPDATE {s}.slots sl \
                     SET remaining = s.remaining + per.units, capacity = s.capacity \
                     FROM s JOIN per ON per.slot_id = s.id WHERE sl.id = s.id \
                     RETURNING sl.id), \
                 {give}, \
                 ev AS ({expired}) \
                 SELECT coalesce((SELECT sum(units) FROM per), 0)::int8 AS reclaimed"
            ),
        }
    }
}

/// A pool and its units of a row of `get` or `all` (`None`: the one row of no pool).
pub(crate) fn usage_from(row: &PgRow) -> Result<Option<PoolUsage>, StoreError> {
    let Some(id) = row_id(row)? else {
        return Ok(None);
    };
    let slots: Vec<i64> = row.try_get("slots").map_err(map_err)?;
    Ok(Some(PoolUsage {
        pool: Pool {
            pool_id: PoolId(id),
            capacity: row.try_get("capacity").map_err(map_err)?,
            stored_remaining: row.try_get("remaining").map_err(map_err)?,
            slots: slots.into_iter().map(SlotId).collect(),
        },
        held: row.try_get("held").map_err(map_err)?,
        expired: row.try_get("expired").map_err(map_err)?,
    }))
}

/// Serves the lines of `slots` and `pools` at `now` (NULL: the database's clock) on `conn`,
/// in its transaction: the entries offered.
async fn serve_lines(
    conn: &mut PgConnection,
    statement: &str,
    slots: &[i64],
    pools: &[i64],
    now: Option<Timestamp>,
) -> Result<Vec<i64>, StoreError> {
    sqlx::query_scalar(AssertSqlSafe(statement))
        .bind(slots)
        .bind(pools)
        .bind(now)
        .fetch_one(conn)
        .await
        .map_err(map_err)
}

/// On `conn`, in its transaction (which must be one: the deferral is the transaction's): the
/// step that gives back the expired holds of the slots of
/// `pools` and of `slots` (locks in the global order), with the serving trigger deferred
/// (`slot_booking.defer_serving`, migration 12). The reclaims a write makes only to make room
/// for itself (a hold's or a booking's pool refill, a pool capacity change's, an attach's)
/// serve no line, as in the model; the change that follows is decided on the units they gave
/// back. The units given back.
async fn reclaim_deferred(
    conn: &mut PgConnection,
    inner: &Inner,
    pools: &[i64],
    slots: &[i64],
    now: Option<Timestamp>,
) -> Result<i64, StoreError> {
    (&mut *conn).execute(DEFER_SERVING).await.map_err(map_err)?;
    let row = sqlx::query(AssertSqlSafe(inner.pools.reclaim.as_str()))
        .bind(pools)
        .bind(now)
        .bind(slots)
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    (&mut *conn).execute(SERVE_AGAIN).await.map_err(map_err)?;
    row.try_get("reclaimed").map_err(map_err)
}

/// Pool `pool_id` and its units, read on `conn` at `now` (NULL: the database's clock).
async fn read_pool(
    conn: &mut PgConnection,
    inner: &Inner,
    pool_id: PoolId,
    now: Option<Timestamp>,
) -> Result<Decided<Option<PoolUsage>>, StoreError> {
    let row = sqlx::query(AssertSqlSafe(inner.pools.get.as_str()))
        .bind(pool_id.get())
        .bind(now)
        .fetch_one(conn)
        .await
        .map_err(map_err)?;
    decided(&row, usage_from(&row)?)
}

/// Defers the serving trigger's work for the rest of the transaction (or until
/// [`SERVE_AGAIN`]).
const DEFER_SERVING: &str = "SELECT set_config('slot_booking.defer_serving', 'on', true)";

/// Ends [`DEFER_SERVING`].
const SERVE_AGAIN: &str = "SELECT set_config('slot_booking.defer_serving', 'off', true)";

/// How many times the sweeper's pass serves one pool's head before it moves on (each offer
/// may make the next head ready; the lines themselves bound it).
const SWEEP_ROUNDS: usize = 64;

impl PostgresStore {
    /// The sweeper's pass over the pools' lines (after `reclaim_expired`): for each pool some
    /// entry of whose slots waits, its head's rows taken in the lock order and its lines served,
    /// each in a statement (a transaction) of its own, again while that offers something.
    pub(crate) async fn serve_pool_lines(&self, now: Timestamp) -> Result<(), StoreError> {
        let statements = &self.inner.pools;
        let pools: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(statements.waiting_pools.as_str()))
            .fetch_all(self.pool())
            .await
            .map_err(map_err)?;
        let now = self.now_param(now);
        for pool in pools {
            for _ in 0..SWEEP_ROUNDS {
                let offered: Vec<i64> =
                    sqlx::query_scalar(AssertSqlSafe(statements.serve_head.as_str()))
                        .bind(pool)
                        .bind(now)
                        .fetch_one(self.pool())
                        .await
                        .map_err(map_err)?;
                if offered.is_empty() {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// What the reclaiming hold statement did.
enum Reclaimed {
    /// Took the units, or found none; the statement says which.
    Done(Insert),
    /// The slot had the units but these pools did not.
    PoolsShort(Vec<i64>),
}

impl Run<'_> {
    pub(crate) fn pool_sql(&self) -> Arc<Inner> {
        Arc::clone(&self.store.inner)
    }

    /// The reclaiming hold statement, and when only pools were short, the step that gives
    /// back their slots' expired holds and the statement once more. `savepoint`: the hold
    /// runs under the hold savepoint on the caller's connection, rolled back before that step
    /// so its locks are taken in order.
    pub(crate) async fn hold_reclaiming(
        &mut self,
        request: &HoldRequest<'_>,
        savepoint: bool,
    ) -> Result<Insert, StoreError> {
        let short = match self.try_hold_reclaim(request).await? {
            Reclaimed::Done(insert) => return Ok(insert),
            Reclaimed::PoolsShort(short) => short,
        };
        if savepoint {
            self.conn
                .get()
                .await?
                .execute("ROLLBACK TO SAVEPOINT slot_booking_hold")
                .await
                .map_err(map_err)?;
        }
        if self.reclaim_pools(&short, &[], request.now).await? == 0 {
            return Ok(Insert::NoUnit);
        }
        match self.try_hold_reclaim(request).await? {
            Reclaimed::Done(insert) => Ok(insert),
            Reclaimed::PoolsShort(_) => Ok(Insert::NoUnit),
        }
    }

    async fn try_hold_reclaim(
        &mut self,
        request: &HoldRequest<'_>,
    ) -> Result<Reclaimed, StoreError> {
        let inner = self.pool_sql();
        let lifetime = request.expires_at - request.now;
        let inserted = sqlx::query(AssertSqlSafe(inner.sql.hold_reclaim.as_str()))
            .bind(request.slot_id.get())
            .bind(request.key.as_str())
            .bind(self.now_param(request.now))
            .bind(interval(lifetime)?)
            .bind(request.quantity)
            .bind(request.owner.map(OwnerId::as_str))
            .fetch_optional(self.conn.get().await?)
            .await;
        let row = match inserted {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(Reclaimed::Done(Insert::NoUnit)),
            Err(error) if is_unique_violation(&error) => {
                return Ok(Reclaimed::Done(Insert::KeyTaken))
            }
            Err(error) => return Err(map_err(error)),
        };
        if crate::writes::took(&row)? {
            return Ok(Reclaimed::Done(Insert::Created(decided(
                &row,
                hold_from_row(&row)?,
            )?)));
        }
        let slot_fits: bool = row.try_get("slot_fits").map_err(map_err)?;
        let short: Vec<i64> = row.try_get("short_pools").map_err(map_err)?;
        Ok(if slot_fits && !short.is_empty() {
            Reclaimed::PoolsShort(short)
        } else {
            Reclaimed::Done(Insert::NoUnit)
        })
    }

    /// The step of its own that gives back the expired holds of the slots of `pools` and of
    /// `slots` ([`reclaim_deferred`], in a transaction of its own on the pool): the units it
    /// gave back.
    pub(crate) async fn reclaim_pools(
        &mut self,
        pools: &[i64],
        slots: &[i64],
        now: Timestamp,
    ) -> Result<i64, StoreError> {
        let inner = self.pool_sql();
        let now = self.now_param(now);
        // One transaction: the deferral lasts as long as it.
        let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
        let units = reclaim_deferred(&mut tx, &inner, pools, slots, now).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(units)
    }

    pub(crate) async fn create_pool(
        &mut self,
        pool: &NewPool,
        now: Timestamp,
    ) -> Result<Pool, StoreError> {
        let inner = self.pool_sql();
        let row = sqlx::query(AssertSqlSafe(inner.pools.create.as_str()))
            .bind(pool.capacity)
            .bind(self.now_param(now))
            .fetch_one(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        Ok(Pool {
            pool_id: PoolId(row.try_get("id").map_err(map_err)?),
            capacity: row.try_get("capacity").map_err(map_err)?,
            stored_remaining: row.try_get("remaining").map_err(map_err)?,
            slots: Vec::new(),
        })
    }

    pub(crate) async fn get_pool(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Decided<Option<PoolUsage>>, StoreError> {
        let inner = self.pool_sql();
        let now = self.now_param(now);
        read_pool(self.conn.get().await?, &inner, pool_id, now).await
    }

    pub(crate) async fn pools(
        &mut self,
        now: Timestamp,
    ) -> Result<Decided<Vec<PoolUsage>>, StoreError> {
        let inner = self.pool_sql();
        let rows = sqlx::query(AssertSqlSafe(inner.pools.all.as_str()))
            .bind(self.now_param(now))
            .fetch_all(self.conn.get().await?)
            .await
            .map_err(map_err)?;
        listed(&rows, "the pools", usage_from)
    }

    /// The pool as read now, as `change` says (`Applied` or `InUse`), or `PoolNotFound`.
    async fn pool_answer(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
        change: fn(PoolUsage) -> PoolChange,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let read = self.get_pool(pool_id, now).await?;
        Ok(read.map(|usage| usage.map_or(PoolChange::PoolNotFound, change)))
    }

    /// Attach (`attach`) or detach: the statement, and for an attach the pool short, once more
    /// after giving back the expired holds of the slot and the pool's slots, in the same
    /// transaction ([`reclaim_deferred`]). A detach serves the pool's line (its units came
    /// back) and the slot's (its entries left the pool's line), in its transaction; an attach
    /// serves nothing.
    async fn link(
        &mut self,
        attach: bool,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let inner = self.pool_sql();
        let sql = if attach {
            &inner.pools.attach
        } else {
            &inner.pools.detach
        };
        let most = i32::try_from(MAX_POOLS_PER_SLOT).unwrap_or(i32::MAX);
        let now_param = self.now_param(now);
        let (pool, slot) = ([pool_id.get()], [slot_id.get()]);
        for attempt in 0..2 {
            let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
            if attempt == 1
                && reclaim_deferred(&mut tx, &inner, &pool, &slot, now_param).await? == 0
            {
                tx.rollback().await.map_err(map_err)?;
                break;
            }
            let row = sqlx::query(AssertSqlSafe(sql.as_str()))
                .bind(pool_id.get())
                .bind(slot_id.get())
                .bind(most)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
            let flag = |column: &str| row.try_get::<bool, _>(column).map_err(map_err);
            if !attach && flag("applied")? {
                // The answer is the change, read before the lines take any unit.
                let read = read_pool(&mut tx, &inner, pool_id, now_param).await?;
                serve_lines(&mut tx, &inner.pools.serve, &slot, &pool, now_param).await?;
                tx.commit().await.map_err(map_err)?;
                return Ok(
                    read.map(|usage| usage.map_or(PoolChange::PoolNotFound, PoolChange::Applied))
                );
            }
            tx.commit().await.map_err(map_err)?;
            if !flag("slot_found")? {
                let read = self.get_pool(pool_id, now).await?;
                return Ok(read.map(|_| PoolChange::SlotNotFound));
            }
            if !flag("pool_found")? {
                let read = self.get_pool(pool_id, now).await?;
                return Ok(read.map(|_| PoolChange::PoolNotFound));
            }
            if attach && flag("removed")? {
                let read = self.get_pool(pool_id, now).await?;
                return Ok(read.map(|_| PoolChange::SlotNotFound));
            }
            if flag("applied")? || flag("attached")? == attach {
                // Applied, or already as asked (attached, or not attached for a detach).
                return self.pool_answer(pool_id, now, PoolChange::Applied).await;
            }
            if flag("full")? {
                return self
                    .pool_answer(pool_id, now, |_| PoolChange::TooManyPools)
                    .await;
            }
        }
        self.pool_answer(pool_id, now, PoolChange::InUse).await
    }

    pub(crate) async fn attach_slot(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        self.link(true, pool_id, slot_id, now).await
    }

    pub(crate) async fn detach_slot(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        self.link(false, pool_id, slot_id, now).await
    }

    /// A pool's capacity change: the statement and, when it changed the capacity, the pool's
    /// line served, in one transaction; when it did not fit, once more after giving back the
    /// expired holds of the pool's slots in the same transaction ([`reclaim_deferred`]): the
    /// change is decided before the line takes any of those units.
    pub(crate) async fn change_pool_capacity(
        &mut self,
        pool_id: PoolId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let inner = self.pool_sql();
        let terms = change.terms();
        let now_param = self.now_param(now);
        let pool = [pool_id.get()];
        for attempt in 0..2 {
            let mut tx = self.conn.get().await?.begin().await.map_err(map_err)?;
            if attempt == 1 && reclaim_deferred(&mut tx, &inner, &pool, &[], now_param).await? == 0
            {
                tx.rollback().await.map_err(map_err)?;
                break;
            }
            let row = sqlx::query(AssertSqlSafe(inner.pools.capacity.as_str()))
                .bind(pool_id.get())
                .bind(terms.keep)
                .bind(terms.add)
                .bind(terms.expected)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
            let flag = |column: &str| row.try_get::<bool, _>(column).map_err(map_err);
            if flag("changed")? {
                // The answer is the change, read before the line takes any unit.
                let read = read_pool(&mut tx, &inner, pool_id, now_param).await?;
                serve_lines(&mut tx, &inner.pools.serve, &[], &pool, now_param).await?;
                tx.commit().await.map_err(map_err)?;
                return Ok(
                    read.map(|usage| usage.map_or(PoolChange::PoolNotFound, PoolChange::Applied))
                );
            }
            tx.commit().await.map_err(map_err)?;
            if !flag("found")? {
                let read = self.get_pool(pool_id, now).await?;
                return Ok(read.map(|_| PoolChange::PoolNotFound));
            }
            if flag("applied")? {
                return self.pool_answer(pool_id, now, PoolChange::Applied).await;
            }
        }
        self.pool_answer(pool_id, now, PoolChange::InUse).await
    }
}

// Every pool operation on a connection of the pool, through the same statements.
slot_booking::forward_store!(
    impl[] PoolStore for PostgresStore,
    |this| this.pooled()
);
