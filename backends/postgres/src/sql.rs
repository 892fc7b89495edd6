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
//! Of the slot's usage: `$1` slot id, `$2` now; of the slot changes, see each. Of the operator's listing: `$1` and `$2` the exclusive lower bound on
//! `(starts_at, id)` (`$1` NULL: from the start), `$3` the exclusive upper bound on `starts_at`
//! (NULL: none), `$4` limit, `$5` now, and `$6` the resource in the resource's listing.
//!
//! # Lock paths
//!
//! What a statement can wait for, in the order it takes it:
//!
//! 1. **A slot row.** A hold's decrement (`UPDATE slots`), the reclaim's and the cancel's
//!    `FOR NO KEY UPDATE`, and every slot change (capacity, closing, removal: a conditional
//!    `UPDATE slots`, then in the same unit of work the slot's reclaim and the serving of its
//!    lines, which take that row again) lock exactly one slot row, always first, and each
//!    runs in a transaction of its own, so none holds one slot row while waiting for another. None of them changes the
//!    slot's key, so each takes the row's `FOR NO KEY UPDATE` lock; a hold insert's foreign
//!    key takes `FOR KEY SHARE` on the slot, which conflicts with none of these.
//! 2. **Hold rows**, after the slot row: the reclaims' (of a hold, a capacity change or a
//!    removal) and the cancel's updates touch holds of the slot they locked; a confirm or a
//!    renewal locks only its hold and nothing before or after it. A hold row is locked only by
//!    a statement that has the hold's slot row or takes no other lock, so two statements never
//!    wait for each other's hold rows in a cycle. A slot change that finds the slot row locked
//!    by a hold in flight waits for that hold's statement to end (it needs nothing the change
//!    holds) and then decides on the row as that statement left it; a hold that finds the row
//!    locked by a change waits likewise: `tests/lock_paths.rs` replays both orders.
//! 3. **Unique index entries.** The primary keys are identities: an update of a slot or a
//!    hold that is not HOT writes the same id again (its own row version, no wait) and an
//!    insert a fresh one. Idempotency keys are unique in `hold_keys`, which is only ever
//!    inserted into, as the last step of a hold statement: an insert waits on a key only
//!    while another statement is inserting the same key, and that statement has nothing left
//!    to wait for. (The key row of a waitlist entry is updated when the entry is served and
//!    deleted when it leaves, both under its slot row's lock, which every other writer of
//!    that key row holds first: no one waits on it but for the same key, `waitlists.rs`.) (When the key was unique on
//!    `holds` itself, a reclaim's update rewrote the index entries of the keys of the holds it
//!    expired, and two reclaims on two slots, each about to insert the key the other had
//!    rewritten, waited for each other: `tests/lock_paths.rs` replays that interleaving.)
//!
//! Pools (`pools.rs`) come after slot rows: a statement moving units of a slot with pools
//! locks the pool rows its locked slot rows name, by id, after every slot row it locks.
//!
//! Bookings of several lines (`bookings.rs`) and the reclaim (`reclaim_expired`, in
//! `events.rs`) lock several slot rows, always by id ascending and before any hold row: see
//! their lock paths there. A plain hold's confirm, cancel and renewal above touch only holds
//! with no `booking_id`; a line of a booking is changed with its whole booking instead. The
//! purge locks ended holds only (cancelled or expired: no other statement updates or locks
//! those), with `SKIP LOCKED`, then deletes their keys: a hold inserting the same key waits for
//! the purge, which waits for nothing. Appending an event inserts a new primary key `(tx, id)`
//! unique to the transaction: no statement waits on it.
//!
//! Inside a caller's transaction ([`PostgresStore::on`](crate::PostgresStore::on)) the locks
//! a statement takes last until the caller ends the transaction, and the caller's own
//! statements take locks of their own: the order above holds within each statement, and the
//! caller keeps its transactions' slots in one order (see `on`). A hold's fast statement
//! refused locks nothing; its reclaiming statements run under a savepoint ([`HOLD_SAVEPOINT`])
//! whose rollback releases what they locked.
//!
//! Reads (availability, the pages, the operator's listing, the explaining reads) take no row
//! lock. On the pool, every wait is for a statement that holds at most one slot row and waits
//! only for locks further down this list, so the waits-for graph has no cycle: a deadlock is a
//! bug here, never an expected retry.
//!
//! # Deciding on the locked row
//!
//! In READ COMMITTED an `UPDATE` or `SELECT ... FOR NO KEY UPDATE` that finds its row changed
//! by a transaction that committed after the statement's snapshot re-evaluates its `WHERE`
//! against the row's latest version (EvalPlanQual), but reads every *other* table, and the
//! other rows of a join, as of the snapshot; and a row whose snapshot version fails the
//! `WHERE` is skipped without a look at its latest version. So each decision here is a
//! condition on the locked row's own columns (`remaining`, `capacity`, `closed`, `removed_at`,
//! a hold's `status` and `expires_at`), as the lock returned them, plus the rows a write in
//! the same statement actually affected, never a count of holds read in a subquery. (The
//! reclaiming statements decide on the values their `FOR NO KEY UPDATE` returned, which
//! nobody can change while they hold the lock, rather than on the updated row's columns,
//! whose snapshot version may predate a unit freed while they waited for it.)
//!
//! A removal is `remaining = capacity` on the slot row: a hold in flight has already
//! decremented `remaining` (and locked the row) before it inserts, so the removal either waits
//! and then sees it, or commits first and the hold's re-evaluated `removed_at IS NULL` refuses
//! it.

use crate::fragments::{
    append_events, capacity_after, capacity_expected, give_back, hold_event_rows, now, quote,
    HOLD_COLUMNS, H_COLUMNS,
};

/// Opens the savepoint a hold's reclaiming statements run under on the caller's connection,
/// inside the caller's transaction: they may give expired units back and still refuse (or
/// fail on a key a concurrent transaction inserted, which would otherwise abort the caller's
/// whole transaction). Not used on the pool's connections, where each statement is a
/// transaction of its own, nor for the fast statement, which refuses by changing nothing.
pub(crate) const HOLD_SAVEPOINT: &str = "SAVEPOINT slot_booking_hold";

/// Keeps what the hold's statements stored and drops the savepoint.
pub(crate) const RELEASE_HOLD_SAVEPOINT: &str = "RELEASE SAVEPOINT slot_booking_hold";

/// Undoes everything since the savepoint (a refused hold's statements, and the locks they
/// took), making an aborted transaction usable again, and drops the savepoint: one round trip
/// (two statements in one simple query).
pub(crate) const UNDO_HOLD_SAVEPOINT: &str =
    "ROLLBACK TO SAVEPOINT slot_booking_hold; RELEASE SAVEPOINT slot_booking_hold";

/// The columns [`slot_from_row`](crate::slot_from_row) reads.
const SLOT_COLUMNS: &str =
    "id, starts_at, ends_at, capacity, remaining, resource, closed, removed_at";

/// [`SLOT_COLUMNS`] of the table or CTE aliased `sl`.
const SL_COLUMNS: &str = "sl.id, sl.starts_at, sl.ends_at, sl.capacity, sl.remaining, \
                          sl.resource, sl.closed, sl.removed_at";

/// Whether the hold `h` is in the caller's scope (`$3` any, `$4` owner).
const IN_SCOPE: &str = "($3 OR h.owner IS NOT DISTINCT FROM $4)";

/// `held` and `expired`: the units of the holds of the slot `sl` still stored as held, split at
/// `c.now` (expired: `expires_at <= c.now`). Read through the partial index of held holds by
/// slot, which includes `quantity` (an index-only scan): confirmed and cancelled history is
/// never read. Zeros when `sl` is NULL.
fn usage_of_sl(s: &str) -> String {
    format!(
        "LEFT JOIN LATERAL ( \
             SELECT coalesce(sum(h.quantity) FILTER (WHERE h.expires_at > c.now), 0)::int4 \
                        AS held, \
                    coalesce(sum(h.quantity) FILTER (WHERE h.expires_at <= c.now), 0)::int4 \
                        AS expired \
             FROM {s}.holds h WHERE h.slot_id = sl.id AND h.status = 'held') u ON true"
    )
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
    pub(crate) change_capacity: String,
    pub(crate) set_closed: String,
    pub(crate) remove_slot: String,
    pub(crate) append_event: String,
    pub(crate) serve_slot: String,
    pub(crate) holds_by_ids: String,
    pub(crate) slot_usage: String,
    pub(crate) list_slots: String,
    pub(crate) list_resource_slots: String,
}

impl Statements {
    pub(crate) fn new(schema: &str) -> Self {
        let s = quote(schema);
        let (now1, now2, now3, now4, now5) = (now(1), now(2), now(3), now(4), now(5));
        let usage = usage_of_sl(&s);
        // The operator's listing: a keyset page after `($1, $2)` and before `$3`, through the
        // index whose order is the listing's (`slots_starts_at_id`, or `slots_by_resource`
        // with the resource fixed by `resource = $6`), each listed slot with its held units.
        // The bounds are one row comparison and one upper bound on the index's columns, so a
        // page starts where the last one ended and reads one range of the index. At least one
        // row: the instant even for an empty page (`id` is then NULL).
        let list = |resource: &str| {
            format!(
                "SELECT c.now AS decided_at, {SL_COLUMNS}, u.held, u.expired \
                 FROM (SELECT {now5} AS now) c LEFT JOIN LATERAL ( \
                     SELECT {SLOT_COLUMNS} FROM {s}.slots \
                     WHERE {resource}(starts_at, id) \
                               > (coalesce($1::timestamptz, '-infinity'::timestamptz), $2) \
                       AND starts_at < coalesce($3::timestamptz, 'infinity'::timestamptz) \
                     ORDER BY starts_at, id LIMIT $4) sl ON true \
                 {usage} \
                 ORDER BY sl.starts_at, sl.id"
            )
        };
        // The new hold and its key, from the slot row `dec` returned if it took the units;
        // the key last, so a statement that waits on another's key holds no lock that one
        // could need.
        //
        // Its event (`hold_placed`), and before it one `hold_expired` per hold the statement
        // reclaimed (`r`, when `reclaimed`), in one insert sorted before the sequence numbers
        // are drawn, so a reader sees the units come back before they are taken again.
        let insert_hold = |reclaimed: bool, answer: &str| {
            let select = if reclaimed {
                let (expired, placed) = (
                    hold_event_rows(1, "hold_expired", "r"),
                    hold_event_rows(2, "hold_placed", "ins"),
                );
                format!(
                    "SELECT kind, slot_id, hold_id, owner, quantity, {now3} \
                     FROM ({expired} UNION ALL {placed}) x ORDER BY ord, hold_id"
                )
            } else {
                format!("SELECT 'hold_placed', slot_id, id, owner, quantity, {now3} FROM ins")
            };
            let events = append_events(&s, &select);
            format!(
                "ins AS ( \
                     INSERT INTO {s}.holds \
                         (slot_id, idempotency_key, status, expires_at, created_at, quantity, \
                          owner) \
                     SELECT id, $2, 'held', {now3} + $4, {now3}, $5, $6 FROM dec WHERE dec.took \
                     RETURNING {HOLD_COLUMNS}), \
                 ev AS ({events}), \
                 k AS ( \
                     INSERT INTO {s}.hold_keys (idempotency_key, hold_id) SELECT $2, id FROM ins) \
                 {answer}"
            )
        };
        // The fast path answers a refusal in the same round trip: when `dec` took no unit, one
        // row with what `HoldOutcome::refused` needs (the key's hold, the slot's limits, read
        // at the statement's snapshot) and what tells whether the refusal is final without
        // reclaiming: the slot's `remaining` at the snapshot and whether any of its held holds
        // has expired by now, and its line's length (`waiting`); and the waitlist entry the key
        // belongs to, if it does. A created hold comes back as before, `took` true. Exactly one
        // row either way: `dec` is empty exactly when `ins` is.
        let created_or_refusal = format!(
            "SELECT true AS took, {HOLD_COLUMNS}, {now3} AS decided_at, \
                    NULL::timestamptz AS slot_starts_at, NULL::int4 AS slot_capacity, \
                    NULL::bool AS slot_closed, NULL::timestamptz AS slot_removed_at, \
                    NULL::int4 AS slot_remaining, NULL::bool AS slot_has_expired, \
                    NULL::int8 AS key_booking_id, NULL::int4 AS slot_waiting, \
                    NULL::int8 AS key_entry_id \
             FROM ins \
             UNION ALL \
             SELECT false, {H_COLUMNS}, {now3}, sl.starts_at, sl.capacity, sl.closed, \
                    sl.removed_at, sl.remaining, \
                    EXISTS (SELECT 1 FROM {s}.holds x \
                            WHERE x.slot_id = $1 AND x.status = 'held' \
                              AND x.expires_at <= {now3}), \
                    h.booking_id, sl.waiting, hk.entry_id \
             FROM (SELECT 1) AS one \
             LEFT JOIN {s}.hold_keys hk ON hk.idempotency_key = $2 \
             LEFT JOIN {s}.holds h ON h.id = hk.hold_id \
             LEFT JOIN {s}.slots sl ON sl.id = $1 \
             WHERE NOT EXISTS (SELECT 1 FROM dec)"
        );
        let insert_fast = insert_hold(false, &created_or_refusal);
        Statements {
            // The slot and its `slot_created` event; `$5` is now.
            create_slot: format!(
                "WITH ins AS ( \
                     INSERT INTO {s}.slots (starts_at, ends_at, capacity, remaining, resource) \
                     VALUES ($1, $2, $3, $3, $4) \
                     RETURNING {SLOT_COLUMNS}), \
                 ev AS ({}) \
                 SELECT {SLOT_COLUMNS} FROM ins",
                append_events(
                    &s,
                    &format!("SELECT 'slot_created', id, NULL, NULL, capacity, {now5} FROM ins")
                )
            ),
            slot_by_id: format!("SELECT {SLOT_COLUMNS} FROM {s}.slots WHERE id = $1"),
            // Always one row: the instant even when there is no such hold.
            hold_by_id: format!(
                "SELECT {now2} AS decided_at, {H_COLUMNS}, h.booking_id \
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
            // that have started. A slot with every unit free has no held hold to count. Closed
            // and removed slots are filtered out of that same range (no index on those flags:
            // it would cost every slot update its HOT update). A slot whose waitlist is not empty
            // (`waiting`, migration 11), or one of whose pools' lines is (an entry waits on a
            // selling slot of the pool, migration 12), has no unit for anyone else: listed
            // with 0. At least one
            // row: the instant even when there is no slot (`id` is then NULL).
            availability: format!(
                "SELECT c.now AS decided_at, sl.id, sl.starts_at, sl.ends_at, sl.capacity, \
                        sl.resource, \
                        (CASE WHEN sl.waiting > 0 THEN 0 \
                              WHEN cardinality(sl.pools) > 0 AND EXISTS ( \
                                  SELECT 1 FROM {s}.pools p \
                                  JOIN {s}.slot_pools sp ON sp.pool_id = p.id \
                                  JOIN {s}.slots b ON b.id = sp.slot_id \
                                  WHERE p.id = ANY(sl.pools) AND p.waiting > 0 \
                                    AND b.waiting > 0 AND b.starts_at > c.now \
                                    AND NOT b.closed AND b.removed_at IS NULL) THEN 0 \
                              ELSE sl.remaining + CASE WHEN sl.remaining = sl.capacity THEN 0 \
                                  ELSE ( \
                            SELECT coalesce(sum(h.quantity), 0) FROM {s}.holds h \
                            WHERE h.slot_id = sl.id AND h.status = 'held' \
                              AND h.expires_at <= c.now) END END)::int4 AS available \
                 FROM (SELECT {now1} AS now) c \
                 LEFT JOIN {s}.slots sl \
                     ON sl.starts_at > c.now AND NOT sl.closed AND sl.removed_at IS NULL \
                 ORDER BY sl.starts_at, sl.id"
            ),
            // One statement: the conditional decrement (a unit is taken only if the update
            // affected the row, which must still be selling: not started, not closed, not
            // removed, drawing from no pool (`pools.rs` takes those), with nobody waiting in its
            // line (`waiting = 0`: nobody jumps the line, `waitlists.rs`), all re-checked on the
            // row's latest version), and whose key is not in use at the statement's snapshot
            // (a replay or a reused key is a refusal like a full slot: nothing locked, nothing
            // changed, answered from the refusal row, so the statement needs no savepoint in
            // the caller's transaction), the hold and its key. No unit: no row from `dec`,
            // nothing inserted, nothing changed, and the row returned is the refusal's (see
            // `created_or_refusal`). A key inserted by a concurrent transaction after the
            // snapshot: the unique violation aborts the statement, decrement included.
            hold_fast: format!(
                "WITH dec AS ( \
                     UPDATE {s}.slots SET remaining = remaining - $5 \
                     WHERE id = $1 AND remaining >= $5 AND starts_at > {now3} \
                       AND NOT closed AND removed_at IS NULL AND cardinality(pools) = 0 \
                       AND waiting = 0 \
                       AND NOT EXISTS ( \
                           SELECT 1 FROM {s}.hold_keys WHERE idempotency_key = $2) \
                     RETURNING id, true AS took), \
                 {insert_fast}"
            ),
            // The slow path, also one statement, and the path of a slot drawing from pools:
            // see `pool_sql::hold_reclaim`.
            hold_reclaim: crate::pool_sql::hold_reclaim(&s, &now3, |answer| insert_hold(true, answer)),
            // After a hold statement changed nothing: the key's hold, if any, and the slot's
            // limits, in one read, with the instant it was read at.
            explain_hold: format!(
                "SELECT {now3} AS decided_at, sl.starts_at AS slot_starts_at, \
                        sl.capacity AS slot_capacity, sl.closed AS slot_closed, \
                        sl.removed_at AS slot_removed_at, {H_COLUMNS}, \
                        h.booking_id AS key_booking_id, k.entry_id AS key_entry_id \
                 FROM (SELECT 1) AS one \
                 LEFT JOIN {s}.hold_keys k ON k.idempotency_key = $2 \
                 LEFT JOIN {s}.holds h ON h.id = k.hold_id \
                 LEFT JOIN {s}.slots sl ON sl.id = $1"
            ),
            // The update and its `hold_confirmed` event.
            confirm: format!(
                "WITH c AS ( \
                     UPDATE {s}.holds h SET status = 'confirmed', confirmed_at = {now2} \
                     WHERE id = $1 AND status = 'held' AND expires_at > {now2} AND {IN_SCOPE} \
                       AND h.booking_id IS NULL \
                     RETURNING {H_COLUMNS}), \
                 ev AS ({}) \
                 SELECT {HOLD_COLUMNS}, {now2} AS decided_at FROM c",
                append_events(
                    &s,
                    &format!(
                        "SELECT 'hold_confirmed', slot_id, id, owner, quantity, {now2} FROM c"
                    )
                )
            ),
            // A conditional update of the hold alone: now + lifetime, capped at creation plus
            // the maximum life, never earlier than it was.
            //
            // The hold row is locked first (`o`), so the expiry it had is known exactly (the
            // latest version, which nobody changes while the lock is held): a `hold_renewed`
            // event only when the expiry moved (a hold at its maximum life is renewed
            // without a change, and without an event). The new expiry is computed from that
            // same locked version.
            renew: format!(
                "WITH o AS ( \
                     SELECT h.id, h.expires_at, h.created_at FROM {s}.holds h \
                     WHERE h.id = $1 AND h.status = 'held' AND h.expires_at > {now2} \
                       AND {IN_SCOPE} AND h.booking_id IS NULL \
                     FOR NO KEY UPDATE), \
                 c AS ( \
                     UPDATE {s}.holds h \
                     SET expires_at = \
                         greatest(o.expires_at, least({now2} + $5, o.created_at + $6)) \
                     FROM o WHERE h.id = o.id \
                     RETURNING {H_COLUMNS}, o.expires_at AS old_expires_at), \
                 ev AS ({}) \
                 SELECT {HOLD_COLUMNS}, {now2} AS decided_at FROM c",
                append_events(
                    &s,
                    &format!(
                        "SELECT 'hold_renewed', slot_id, id, owner, quantity, {now2} FROM c \
                         WHERE expires_at <> old_expires_at"
                    )
                )
            ),
            // One statement: lock the hold's slot row (slot before hold, as everywhere), flip
            // a confirmed or still active held hold to cancelled, and give its unit back (to
            // the slot and to each pool its locked row names, locked after it: `pools.rs`).
            cancel: format!(
                "WITH target AS ( \
                     SELECT sl.id, sl.pools FROM {s}.holds h JOIN {s}.slots sl ON sl.id = h.slot_id \
                     WHERE h.id = $1 AND {IN_SCOPE} AND h.booking_id IS NULL \
                     FOR NO KEY UPDATE OF sl), \
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
                     RETURNING sl.id), {}, \
                 ev AS ({}) \
                 SELECT {HOLD_COLUMNS}, {now2} AS decided_at FROM c",
                give_back(&s, "SELECT t.pools, c.quantity AS units FROM c JOIN target t ON t.id = c.slot_id"),
                append_events(
                    &s,
                    &format!(
                        "SELECT 'hold_cancelled', slot_id, id, owner, quantity, {now2} FROM c"
                    )
                )
            ),
            // The kernel's conditional updates of a slot row (`Kernel::update_slot`), each
            // deciding on the row as its lock returned it ("Deciding on the locked row") and
            // returning the slot as changed, no row when it changed nothing: not there,
            // removed, already as asked, or short of free units.
            //
            // A capacity change (`$2` keep, `$3` add: `keep * capacity + add`, `$4` expected,
            // NULL for any) locks the row first (`o`) and computes both `capacity` and
            // `remaining` from it, in int8 (the sum leaves int4 near its maximum). The update
            // checks the CHECK constraints first on a projection from the row as of its
            // snapshot: a locked `remaining` beside a snapshot's `capacity` would fail
            // `remaining <= capacity` after a concurrent raise, and a snapshot's `remaining`
            // could be negative after units came back meanwhile (`tests/lock_paths.rs`,
            // `a_change_waiting_behind_a_give_back_sees_the_units_returned`).
            change_capacity: format!(
                "WITH o AS ( \
                     SELECT id, remaining, capacity FROM {s}.slots \
                     WHERE id = $1 AND removed_at IS NULL FOR NO KEY UPDATE) \
                 UPDATE {s}.slots sl \
                 SET capacity = ({new})::int4, \
                     remaining = (o.remaining::int8 + ({new} - o.capacity))::int4 \
                 FROM o WHERE sl.id = o.id AND {guard} AND {new} <> o.capacity \
                   AND {new} BETWEEN 1 AND 2147483647 \
                   AND o.remaining::int8 + ({new} - o.capacity) >= 0 \
                 RETURNING {SL_COLUMNS}",
                new = capacity_after(2, "o.capacity"),
                guard = capacity_expected(4, "o.capacity"),
            ),
            // `$2` the flag.
            set_closed: format!(
                "UPDATE {s}.slots sl SET closed = $2 \
                 WHERE id = $1 AND removed_at IS NULL AND closed <> $2 \
                 RETURNING {SL_COLUMNS}"
            ),
            // `$2` now. A removal takes no unit: no unit is held or confirmed exactly when the
            // slot row's own `remaining = capacity` (the capacity invariant), re-checked on
            // the row's latest version. Counting holds here instead would read them at the
            // statement's snapshot and miss a hold committed since.
            remove_slot: format!(
                "UPDATE {s}.slots sl SET removed_at = $2 \
                 WHERE id = $1 AND removed_at IS NULL AND remaining = capacity \
                 RETURNING {SL_COLUMNS}"
            ),
            // One event: `$1` kind, `$2` slot, `$3` hold, `$4` owner, `$5` units or capacity,
            // `$6` instant.
            append_event: append_events(&s, "VALUES ($1, $2, $3, $4, $5, $6)"),
            // Slot `$1`'s line and its pools' lines served at `$2` (`serve_waitlist`, migration
            // 12: the slot row, then its pools by id, waited for): the entries offered.
            serve_slot: format!("SELECT {s}.serve_waitlist($1, $2) AS offered"),
            // The holds of ids `$1`, in the order of the ids.
            holds_by_ids: format!(
                "SELECT {H_COLUMNS} FROM pg_catalog.unnest($1::int8[]) WITH ORDINALITY o(id, n) \
                 JOIN {s}.holds h ON h.id = o.id ORDER BY o.n"
            ),
            // After a change that changed nothing: the slot and its held units, in one read,
            // with the instant it was read at (`id` NULL: no such slot).
            slot_usage: format!(
                "SELECT c.now AS decided_at, {SL_COLUMNS}, u.held, u.expired \
                 FROM (SELECT {now2} AS now) c LEFT JOIN {s}.slots sl ON sl.id = $1 \
                 {usage}"
            ),
            list_slots: list(""),
            list_resource_slots: list("resource = $6 AND "),
        }
    }
}
