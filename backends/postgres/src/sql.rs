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
//! Of the slot changes and the slot's usage: `$1` slot id, `$2` now, `$3` the new capacity or
//! the `closed` flag. Of the operator's listing: `$1` and `$2` the exclusive lower bound on
//! `(starts_at, id)` (`$1` NULL: from the start), `$3` the exclusive upper bound on `starts_at`
//! (NULL: none), `$4` limit, `$5` now, and `$6` the resource in the resource's listing.
//!
//! # Lock paths
//!
//! What a statement can wait for, in the order it takes it:
//!
//! 1. **A slot row.** A hold's decrement (`UPDATE slots`), the reclaim's and the cancel's
//!    `FOR NO KEY UPDATE`, and every slot change (capacity, closing, removal: a conditional
//!    `UPDATE slots`, or the `FOR NO KEY UPDATE` of its reclaiming second statement) lock
//!    exactly one slot row, always first, and each statement runs in a transaction of its own,
//!    so no statement holds one slot row while waiting for another. None of them changes the
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

/// The second statement of a capacity change or a removal, in the style of `hold_reclaim`:
/// lock the slot row (not removed) first, then, only if the slot's expired held units would
/// make the change fit (`fits` of an expression of the free units and one of the capacity),
/// mark those holds expired; one update of the slot gives back the units actually reclaimed and,
/// if the change fits on the locked row with them, applies `set` (assignments computed from the
/// locked row `s`, never from `sl`: see below; `{fits}` stands for the condition and `{now}`
/// for the instant). Returns the slot as updated and whether the change was applied (`applied`,
/// read off the updated row), or no row when nothing changed.
///
/// The estimate `e` is read at the statement's snapshot, which may predate the lock: it only
/// gates the reclaim. What is reclaimed is the rows `r` affected (each hold re-checked on its
/// latest version), and whether the change applies is decided on the locked slot row's latest
/// version with those units. Should the estimate be off, the units reclaimed are still given
/// back and the invariant holds either way.
fn reclaim_then_change(
    s: &str,
    now: &str,
    fits: impl Fn(&str, &str) -> String,
    set: &str,
    applied: &str,
    event: (&str, &str),
) -> String {
    let fits_estimate = fits("s.remaining + e.units", "s.capacity");
    // On the values the lock returned (`s`), equal to the row's latest version while the
    // statement holds the lock. Not on `sl`: the update first tests its WHERE on the row as of
    // the statement's snapshot and skips a row that fails it there without looking at its
    // latest version (units freed while this statement waited for the lock).
    //
    // The new values come from `s` too. The update first projects the new row from the row as
    // of its snapshot and checks the table's CHECK constraints on that projection, before it
    // finds that the row has a newer version and projects again from that one. Written against
    // a row older than the lock (units given back since the snapshot), the first projection
    // can be negative and fail `remaining >= 0` although the change fits, and the caller would
    // get a constraint violation. `s` is the latest version and no one can change it while the
    // lock is held, so both projections are the same and correct. Every column a CHECK
    // relates (`remaining`, `capacity`) is written from `s`, even when unchanged: a projection
    // mixing `s.remaining` with the snapshot's `capacity` fails `remaining <= capacity` after a
    // concurrent raise of the capacity
    // (`tests/lock_paths.rs`, `a_change_waiting_behind_a_give_back_sees_the_units_returned`).
    let fits_locked = fits("s.remaining + u.units", "s.capacity");
    let set = set.replace("{fits}", &fits_locked).replace("{now}", now);
    // One `hold_expired` per reclaimed hold, then the slot's event if the change applied and
    // changed it (`event.1`, on `ch`, which also carries the locked row's capacity), in that
    // order (one insert, sorted before the sequence numbers are drawn).
    let (kind, changed) = event;
    let expired = hold_event_rows(1, "hold_expired", "r");
    let events = append_events(
        s,
        &format!(
            "SELECT kind, slot_id, hold_id, owner, quantity, {now} FROM ( \
                 {expired} \
                 UNION ALL \
                 SELECT 2, '{kind}', ch.id, NULL, NULL, ch.capacity FROM ch WHERE {changed}) x \
             ORDER BY ord, hold_id"
        ),
    );
    // The units reclaimed go back to the slot's pools too (`pools.rs`).
    let give = give_back(s, "SELECT s.pools, u.units FROM s, u WHERE u.units > 0");
    format!(
        "WITH s AS ( \
             SELECT id, remaining, capacity, pools FROM {s}.slots \
             WHERE id = $1 AND removed_at IS NULL FOR NO KEY UPDATE), \
         e AS ( \
             SELECT coalesce(sum(h.quantity), 0) AS units \
             FROM s JOIN {s}.holds h ON h.slot_id = s.id \
             WHERE h.status = 'held' AND h.expires_at <= {now}), \
         r AS ( \
             UPDATE {s}.holds h SET status = 'expired' FROM s, e \
             WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= {now} \
               AND {fits_estimate} \
             RETURNING h.id, h.slot_id, h.owner, h.quantity), \
         u AS (SELECT coalesce(sum(quantity), 0) AS units FROM r), \
         ch AS ( \
             UPDATE {s}.slots sl SET {set} \
             FROM s, u WHERE sl.id = s.id AND (u.units > 0 OR {fits_locked}) \
             RETURNING {SL_COLUMNS}, s.capacity AS old_capacity), {give}, \
         ev AS ({events}) \
         SELECT {SLOT_COLUMNS}, {applied} AS applied, {now} AS decided_at FROM ch"
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
    pub(crate) capacity_fast: String,
    pub(crate) capacity_reclaim: String,
    pub(crate) set_closed: String,
    pub(crate) remove_fast: String,
    pub(crate) remove_reclaim: String,
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
            // A capacity change in one conditional update of the slot row: the new capacity is
            // the change's terms (`$3` keep, `$4` add: `keep * capacity + add`) on the locked
            // row, in 1..=i32::MAX, and for a compare-and-set (`$5` expected) the capacity must
            // be the one expected; `remaining` moves by the same amount and must stay >= 0,
            // decided on the row itself (re-checked on its latest version). In int8: the new
            // capacity and the sum leave int4 near its maximum. Started and closed slots change
            // too; removed ones do not.
            //
            // The row is locked first (`o`) so the capacity it had is known exactly: a
            // `slot_capacity_changed` event only when it changed (setting the same capacity
            // is applied without a change and without an event). The decision and the new
            // values are computed from that locked version, never from a snapshot's (see
            // `reclaim_then_change` for why the two must not be mixed).
            capacity_fast: format!(
                "WITH o AS ( \
                     SELECT id, remaining, capacity FROM {s}.slots \
                     WHERE id = $1 AND removed_at IS NULL FOR NO KEY UPDATE), \
                 ch AS ( \
                     UPDATE {s}.slots sl \
                     SET capacity = ({new})::int4, \
                         remaining = (o.remaining::int8 + ({new} - o.capacity))::int4 \
                     FROM o WHERE sl.id = o.id AND {guard} \
                       AND {new} BETWEEN 1 AND 2147483647 \
                       AND o.remaining::int8 + ({new} - o.capacity) >= 0 \
                     RETURNING {SL_COLUMNS}, o.capacity AS old_capacity), \
                 ev AS ({}) \
                 SELECT {SLOT_COLUMNS}, {now2} AS decided_at FROM ch",
                append_events(
                    &s,
                    &format!(
                        "SELECT 'slot_capacity_changed', id, NULL, NULL, capacity, {now2} \
                         FROM ch WHERE capacity <> old_capacity"
                    )
                ),
                new = capacity_after(3, "o.capacity"),
                guard = capacity_expected(5, "o.capacity"),
            ),
            // When the free units alone are too few: reclaim the slot's expired holds if that
            // makes it fit, and give their units back and change the capacity in one update.
            capacity_reclaim: reclaim_then_change(
                &s,
                &now2,
                |free, capacity| {
                    let new = capacity_after(3, capacity);
                    format!(
                        "({} AND {new} BETWEEN 1 AND 2147483647 \
                          AND {free} + ({new} - {capacity}) >= 0)",
                        capacity_expected(5, capacity)
                    )
                },
                &format!(
                    "remaining = (s.remaining + u.units \
                         + CASE WHEN {{fits}} THEN {new} - s.capacity ELSE 0 END)::int4, \
                     capacity = CASE WHEN {{fits}} THEN ({new})::int4 ELSE s.capacity END",
                    new = capacity_after(3, "s.capacity")
                ),
                // Not applied leaves the capacity as it was, which was not the new one (a
                // change that leaves it takes no unit and always fits), or is not the one
                // expected.
                &format!(
                    "({} AND capacity = {})",
                    capacity_expected(5, "old_capacity"),
                    capacity_after(3, "old_capacity")
                ),
                ("slot_capacity_changed", "ch.capacity <> ch.old_capacity"),
            ),
            // One conditional update; the instant comes back even when no row changed.
            // The row is locked first (`o`) so the flag it had is known exactly: an event only
            // when it changed (closing a closed slot appends nothing).
            set_closed: format!(
                "WITH o AS ( \
                     SELECT id, closed FROM {s}.slots \
                     WHERE id = $1 AND removed_at IS NULL FOR NO KEY UPDATE), \
                 ch AS ( \
                     UPDATE {s}.slots sl SET closed = $3 FROM o WHERE sl.id = o.id \
                     RETURNING {SL_COLUMNS}, o.closed AS was_closed), \
                 ev AS ({}) \
                 SELECT c.now AS decided_at, {SL_COLUMNS} \
                 FROM (SELECT {now2} AS now) c LEFT JOIN ch sl ON true",
                append_events(
                    &s,
                    &format!(
                        "SELECT CASE WHEN $3 THEN 'slot_closed' ELSE 'slot_reopened' END, \
                                id, NULL, NULL, capacity, {now2} \
                         FROM ch WHERE was_closed <> $3"
                    )
                )
            ),
            // A removal takes no unit: no unit is held or confirmed exactly when the slot
            // row's own `remaining = capacity` (the capacity invariant), so that is the whole
            // condition, re-checked on the row's latest version. Counting holds here instead
            // would read them at the statement's snapshot and miss a hold committed since.
            remove_fast: format!(
                "WITH ch AS ( \
                     UPDATE {s}.slots SET removed_at = {now2} \
                     WHERE id = $1 AND removed_at IS NULL AND remaining = capacity \
                     RETURNING {SLOT_COLUMNS}), \
                 ev AS ({}) \
                 SELECT {SLOT_COLUMNS}, {now2} AS decided_at FROM ch",
                append_events(
                    &s,
                    &format!("SELECT 'slot_removed', id, NULL, NULL, capacity, {now2} FROM ch")
                )
            ),
            // When only expired holds stand in the way: reclaim them if that frees every unit,
            // and give their units back and remove the slot in one update.
            remove_reclaim: reclaim_then_change(
                &s,
                &now2,
                |free, capacity| format!("{free} = {capacity}"),
                "remaining = (s.remaining + u.units)::int4, capacity = s.capacity, \
                 removed_at = CASE WHEN {fits} THEN {now} ELSE NULL END",
                "removed_at IS NOT NULL",
                ("slot_removed", "ch.removed_at IS NOT NULL"),
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
