//! The SQL text of every statement, built once per store with its schema name.
//!
//! Every statement that depends on the time takes it as a nullable parameter and uses
//! `coalesce(<param>, statement_timestamp())`: the engine's `now` when the store follows the
//! engine's clock, the database server's clock when it is bound as NULL (see
//! [`PostgresStore::with_database_clock`](crate::PostgresStore::with_database_clock)). Each
//! returns the instant it decided at as `decided_at`, so the engine resolves statuses at it.
//!
//! Parameters of the hold statements: `$1` slot id, `$2` idempotency key, `$3` now (nullable),
//! `$4` the hold's lifetime (an interval), `$5` quantity, `$6` owner. Of confirm, cancel,
//! renew and the hold read: `$1` hold id, `$2` now, then the caller's
//! [`Scope`](slot_booking::Scope) as `$3` "any hold" and `$4` owner, in the predicate
//! `($3 OR owner IS NOT DISTINCT FROM $4)` (an anonymous scope binds false and NULL: holds
//! without an owner only); renew adds `$5` the lifetime and `$6` the maximum life. Of the
//! pages: `$1` owner or slot id, `$2` after, `$3` limit, `$4` now. Of availability: `$1` now.
//!
//! # Lock paths
//!
//! What a statement can wait for, in the order it takes it:
//!
//! 1. **A slot row.** A hold's decrement (`UPDATE slots`), the reclaim's and the cancel's
//!    `FOR NO KEY UPDATE` lock exactly one slot row, always first, and each statement runs in
//!    a transaction of its own, so no statement holds one slot row while waiting for another.
//!    A hold insert's foreign key takes `FOR KEY SHARE` on the slot, which conflicts with none
//!    of these.
//! 2. **Hold rows**, after the slot row: the reclaim's and the cancel's updates touch holds of
//!    the slot they locked; a confirm or a renewal locks only its hold and nothing before or
//!    after it. A
//!    hold row is locked only by a statement that has the hold's slot row or takes no other
//!    lock, so two statements never wait for each other's hold rows in a cycle.
//! 3. **Unique index entries.** The holds' primary key is an identity: an update writes the
//!    same id again (its own row version, no wait) and an insert a fresh one. Idempotency keys
//!    are unique in `hold_keys`, which is only ever inserted into, as the last step of a hold
//!    statement: an insert waits on a key only while another statement is inserting the same
//!    key, and that statement has nothing left to wait for. (When the key was unique on
//!    `holds` itself, a reclaim's update rewrote the index entries of the keys of the holds it
//!    expired, and two reclaims on two slots, each about to insert the key the other had
//!    rewritten, waited for each other: `tests/lock_paths.rs` replays that interleaving.)
//!
//! Every wait is for a statement that holds at most one slot row and waits only for locks
//! further down this list, so the waits-for graph has no cycle: a deadlock is a bug here, never
//! an expected retry.

/// The columns [`hold_from_row`](crate::hold_from_row) reads.
const HOLD_COLUMNS: &str =
    "id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity, owner, created_at";

/// [`HOLD_COLUMNS`] of the table or CTE aliased `h`.
const H_COLUMNS: &str = "h.id, h.slot_id, h.status, h.expires_at, h.confirmed_at, \
                         h.cancelled_at, h.quantity, h.owner, h.created_at";

/// Whether the hold `h` is in the caller's scope (`$3` any, `$4` owner).
const IN_SCOPE: &str = "($3 OR h.owner IS NOT DISTINCT FROM $4)";

/// The statement's instant: the bound `now`, or the database's when it is NULL.
fn now(param: u8) -> String {
    format!("coalesce(${param}::timestamptz, statement_timestamp())")
}

/// Every statement the store runs, with table names qualified by the schema.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) create_slot: String,
    pub(crate) slot_by_id: String,
    pub(crate) hold_by_id: String,
    pub(crate) availability: String,
    pub(crate) hold_fast: String,
    pub(crate) hold_reclaim: String,
    pub(crate) explain_hold: String,
    pub(crate) confirm: String,
    pub(crate) cancel: String,
    pub(crate) renew: String,
    pub(crate) owner_holds: String,
    pub(crate) slot_holds: String,
}

/// `"schema"`: the name is validated as `[a-z_][a-z0-9_]*`, quoting only guards reserved words.
pub(crate) fn quote(schema: &str) -> String {
    format!("\"{schema}\"")
}

impl Statements {
    pub(crate) fn new(schema: &str) -> Self {
        let s = quote(schema);
        let (now1, now2, now3, now4) = (now(1), now(2), now(3), now(4));
        // The new hold and its key, from the slot row `dec` returned if it took the units;
        // the key last, so a statement that waits on another's key holds no lock that one
        // could need.
        let insert_hold = format!(
            "ins AS ( \
                 INSERT INTO {s}.holds \
                     (slot_id, idempotency_key, status, expires_at, created_at, quantity, owner) \
                 SELECT id, $2, 'held', {now3} + $4, {now3}, $5, $6 FROM dec WHERE dec.took \
                 RETURNING {HOLD_COLUMNS}), \
             k AS ( \
                 INSERT INTO {s}.hold_keys (idempotency_key, hold_id) SELECT $2, id FROM ins) \
             SELECT {HOLD_COLUMNS}, {now3} AS decided_at FROM ins"
        );
        Statements {
            create_slot: format!(
                "INSERT INTO {s}.slots (starts_at, ends_at, capacity, remaining) \
                 VALUES ($1, $2, $3, $3) \
                 RETURNING id, starts_at, ends_at, capacity, remaining"
            ),
            slot_by_id: format!(
                "SELECT id, starts_at, ends_at, capacity, remaining FROM {s}.slots WHERE id = $1"
            ),
            // Always one row: the instant even when there is no such hold.
            hold_by_id: format!(
                "SELECT {now2} AS decided_at, {H_COLUMNS} \
                 FROM (SELECT 1) AS one LEFT JOIN {s}.holds h ON h.id = $1 AND {IN_SCOPE}"
            ),
            // Keyset pages through `holds_by_owner` and `holds_by_slot` (migration 4), with
            // the instant even when the page is empty (`id` is then NULL). The owner or slot
            // is matched as a range (`BETWEEN $1 AND $1`), not `= $1`: with an equality the
            // planner knows the column is constant, sees that the primary key already returns
            // rows `ORDER BY <column>, id`, and for evenly spread holds prefers walking it from
            // `after`, filtering out every other owner's or slot's holds (970 read for a page
            // of 25 in `tests/queries.rs`). As a range only the index delivers that order, so
            // one page reads one range of it.
            owner_holds: format!(
                "SELECT c.now AS decided_at, {H_COLUMNS} \
                 FROM (SELECT {now4} AS now) c LEFT JOIN LATERAL ( \
                     SELECT {HOLD_COLUMNS} FROM {s}.holds \
                     WHERE owner BETWEEN $1 AND $1 AND id > $2 ORDER BY owner, id LIMIT $3) h ON true \
                 ORDER BY h.id"
            ),
            slot_holds: format!(
                "SELECT c.now AS decided_at, {H_COLUMNS} \
                 FROM (SELECT {now4} AS now) c LEFT JOIN LATERAL ( \
                     SELECT {HOLD_COLUMNS} FROM {s}.holds \
                     WHERE slot_id BETWEEN $1 AND $1 AND id > $2 ORDER BY slot_id, id LIMIT $3) h ON true \
                 ORDER BY h.id"
            ),
            // Future slots only (an index range on starts_at), each with its expired but
            // unreclaimed holds counted as free through the per-slot index of held holds: the
            // cost follows the future slots and their expired holds, never the holds of slots
            // that have started. A slot with every unit free has no held hold to count. At
            // least one row: the instant even when there is no slot (`id` is then NULL).
            availability: format!(
                "SELECT c.now AS decided_at, sl.id, sl.starts_at, sl.ends_at, sl.capacity, \
                        (sl.remaining + CASE WHEN sl.remaining = sl.capacity THEN 0 ELSE ( \
                            SELECT coalesce(sum(h.quantity), 0) FROM {s}.holds h \
                            WHERE h.slot_id = sl.id AND h.status = 'held' \
                              AND h.expires_at <= c.now) END)::int4 AS available \
                 FROM (SELECT {now1} AS now) c \
                 LEFT JOIN {s}.slots sl ON sl.starts_at > c.now \
                 ORDER BY sl.starts_at, sl.id"
            ),
            // One statement: the conditional decrement (a unit is taken only if the update
            // affected the row), the hold and its key. No unit: no row from `dec`, nothing
            // inserted, nothing changed. Key taken: the unique violation aborts the statement,
            // decrement included.
            hold_fast: format!(
                "WITH dec AS ( \
                     UPDATE {s}.slots SET remaining = remaining - $5 \
                     WHERE id = $1 AND remaining >= $5 AND starts_at > {now3} \
                     RETURNING id, true AS took), \
                 {insert_hold}"
            ),
            // The slow path, also one statement: lock the open slot's row first (a row lock
            // returns the slot's latest `remaining`), then, only if the slot's expired units
            // would make the hold fit (a refused hold changes nothing), mark its held holds
            // that expired by now as expired. One update of the slot gives their units back
            // and takes the hold's if they fit; the hold is inserted only then. Rows affected
            // decide everything: two racing reclaims serialize on the slot lock and the second
            // finds the holds no longer `held`. Should the estimate `e` (read before the lock)
            // be off, the units reclaimed are still given back: the invariant holds either way.
            hold_reclaim: format!(
                "WITH s AS ( \
                     SELECT id, remaining FROM {s}.slots WHERE id = $1 AND starts_at > {now3} \
                     FOR NO KEY UPDATE), \
                 e AS ( \
                     SELECT coalesce(sum(h.quantity), 0)::int4 AS units \
                     FROM s JOIN {s}.holds h ON h.slot_id = s.id \
                     WHERE h.status = 'held' AND h.expires_at <= {now3}), \
                 r AS ( \
                     UPDATE {s}.holds h SET status = 'expired' FROM s, e \
                     WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= {now3} \
                       AND s.remaining + e.units >= $5 \
                     RETURNING h.quantity), \
                 u AS (SELECT coalesce(sum(quantity), 0)::int4 AS units FROM r), \
                 dec AS ( \
                     UPDATE {s}.slots sl \
                     SET remaining = sl.remaining + u.units \
                         - CASE WHEN sl.remaining + u.units >= $5 THEN $5 ELSE 0 END \
                     FROM s, u WHERE sl.id = s.id AND (u.units > 0 OR sl.remaining >= $5) \
                     RETURNING sl.id, s.remaining + u.units >= $5 AS took), \
                 {insert_hold}"
            ),
            // After a hold statement changed nothing: the key's hold, if any, and the slot's
            // start, in one read, with the instant it was read at.
            explain_hold: format!(
                "SELECT {now3} AS decided_at, sl.starts_at AS slot_starts_at, \
                        sl.capacity AS slot_capacity, {H_COLUMNS} \
                 FROM (SELECT 1) AS one \
                 LEFT JOIN {s}.hold_keys k ON k.idempotency_key = $2 \
                 LEFT JOIN {s}.holds h ON h.id = k.hold_id \
                 LEFT JOIN {s}.slots sl ON sl.id = $1"
            ),
            confirm: format!(
                "UPDATE {s}.holds h SET status = 'confirmed', confirmed_at = {now2} \
                 WHERE id = $1 AND status = 'held' AND expires_at > {now2} AND {IN_SCOPE} \
                 RETURNING {H_COLUMNS}, {now2} AS decided_at"
            ),
            // A conditional update of the hold alone: now + lifetime, capped at creation plus
            // the maximum life, never earlier than it was.
            renew: format!(
                "UPDATE {s}.holds h \
                 SET expires_at = greatest(expires_at, least({now2} + $5, created_at + $6)) \
                 WHERE id = $1 AND status = 'held' AND expires_at > {now2} AND {IN_SCOPE} \
                 RETURNING {H_COLUMNS}, {now2} AS decided_at"
            ),
            // One statement: lock the hold's slot row (slot before hold, as everywhere), flip
            // a confirmed or still active held hold to cancelled, and give its unit back.
            cancel: format!(
                "WITH target AS ( \
                     SELECT sl.id FROM {s}.holds h JOIN {s}.slots sl ON sl.id = h.slot_id \
                     WHERE h.id = $1 AND {IN_SCOPE} FOR NO KEY UPDATE OF sl), \
                 c AS ( \
                     UPDATE {s}.holds h SET status = 'cancelled', cancelled_at = {now2} \
                     FROM target t \
                     WHERE h.id = $1 AND h.slot_id = t.id \
                       AND (h.status = 'confirmed' \
                            OR (h.status = 'held' AND h.expires_at > {now2})) \
                     RETURNING {H_COLUMNS}), \
                 inc AS ( \
                     UPDATE {s}.slots sl SET remaining = sl.remaining + c.quantity \
                     FROM c WHERE sl.id = c.slot_id \
                     RETURNING sl.id) \
                 SELECT {HOLD_COLUMNS}, {now2} AS decided_at FROM c"
            ),
        }
    }
}
