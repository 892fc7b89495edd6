//! The pools' statements, with this store's schema, and the pieces of SQL every unit-moving
//! statement of the store uses for pools (the second hold statement, a booking's pool steps):
//! the SQL of `pools.rs`, `sql.rs` and `bookings.rs` (see `pools.rs` for the storage, the lock
//! order and what a statement short in a pool does).

use crate::fragments::{
    append_events, capacity_after, capacity_expected, give_back, hold_event_rows, now, H_COLUMNS,
};

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
/// `remaining` is computed from `s` (and `capacity` written from it) for the reason the
/// slot's `change_capacity` gives in `sql.rs`.
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
/// `all`, `$1` now; of `some`, `$1` now and `$2` pool ids (`int8[]`); of `membership`,
/// `attach` and `detach`, `$1` pool id, `$2` slot id, and of the two changes `$3` the most
/// pools a slot may have; of `capacity`, `$1` pool id, `$2` keep, `$3` add, `$4` expected (a
/// [`CapacityChange`](slot_booking::CapacityChange)'s terms); of `reclaim`, `$1` pool ids
/// (`int8[]`), `$2` now, `$3` more slot ids (`int8[]`). The changes (the kernel's
/// `update_pool`) return whether they changed the pool (`applied`, `changed`).
#[derive(Debug)]
pub(crate) struct PoolStatements {
    pub(crate) create: String,
    pub(crate) get: String,
    pub(crate) all: String,
    pub(crate) some: String,
    pub(crate) membership: String,
    pub(crate) attach: String,
    pub(crate) detach: String,
    pub(crate) capacity: String,
    pub(crate) reclaim: String,
    /// Serves the lines of slots `$1` and pools `$2` at `$3` (`serve_lines`, migration 12).
    pub(crate) serve: String,
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
        // serves next, in the same unit of work, need them (`edit_pool`).
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
                 SELECT EXISTS (SELECT 1 FROM go) AS applied"
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
            // What a unit of work reads of slot `$2` and pool `$1` when attaching or
            // detaching changed nothing (`Membership`).
            membership: format!(
                "SELECT EXISTS (SELECT 1 FROM {s}.slots WHERE id = $2) AS slot_stored, \
                        EXISTS (SELECT 1 FROM {s}.slots WHERE id = $2 AND removed_at IS NULL) \
                            AS slot_live, \
                        EXISTS (SELECT 1 FROM {s}.pools WHERE id = $1) AS pool, \
                        coalesce((SELECT $1 = ANY(pools) FROM {s}.slots WHERE id = $2), false) \
                            AS attached, \
                        coalesce((SELECT cardinality(pools) FROM {s}.slots WHERE id = $2), 0)::int8 \
                            AS pools_of_slot"
            ),
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
                     FROM o WHERE p.id = o.id AND {guard} AND {new} <> o.capacity \
                       AND {new} BETWEEN 0 AND 2147483647 \
                       AND o.remaining::int8 + ({new} - o.capacity) >= 0 \
                     RETURNING p.id) \
                 SELECT EXISTS (SELECT 1 FROM ch) AS changed",
                new = capacity_after(2, "o.capacity"),
                guard = capacity_expected(4, "o.capacity"),
            ),
            // Gives back the expired holds of pools' slots and of `$3`'s: the slots `$3` and
            // those of the pools with held holds expired by now (at the snapshot: only which
            // slots to lock), locked by id (`$3`'s always, so a change that goes on to lock
            // one of them takes it in order); their expired holds re-checked on their latest
            // versions and marked expired; their units given back to each slot and to each
            // pool its locked row names (locked by id after the slots); one `hold_expired`
            // each. Returns the holds reclaimed, by id.
            reclaim: format!(
                "WITH ps AS ( \
                     SELECT DISTINCT h.slot_id FROM {s}.holds h \
                     WHERE h.status = 'held' AND h.expires_at <= {now2} \
                       AND (h.slot_id = ANY($3::int8[]) OR h.slot_id IN ( \
                           SELECT sp.slot_id FROM {s}.slot_pools sp \
                           WHERE sp.pool_id = ANY($1::int8[])))), \
                 s AS ( \
                     SELECT sl.id, sl.remaining, sl.capacity, sl.pools FROM {s}.slots sl \
                     WHERE sl.id IN (SELECT slot_id FROM ps) OR sl.id = ANY($3::int8[]) \
                     ORDER BY sl.id FOR NO KEY UPDATE), \
                 r AS ( \
                     UPDATE {s}.holds h SET status = 'expired' FROM s \
                     WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= {now2} \
                     RETURNING {H_COLUMNS}), \
                 per AS (SELECT slot_id, sum(quantity)::int4 AS units FROM r GROUP BY slot_id), \
                 inc AS ( \
                     UPDATE {s}.slots sl \
                     SET remaining = s.remaining + per.units, capacity = s.capacity \
                     FROM s JOIN per ON per.slot_id = s.id WHERE sl.id = s.id \
                     RETURNING sl.id), \
                 {give}, \
                 ev AS ({expired}) \
                 SELECT {H_COLUMNS} FROM r h ORDER BY h.id"
            ),
        }
    }
}
