//! Pieces of SQL text that several statement builders share (`sql.rs`, `events.rs`,
//! `bookings.rs`, `pool_sql.rs`, `waitlists.rs`, `group.rs`): the instant, the event insert, the
//! hold columns, the give-back to pools, the schema's quoting. It imports none of them.

/// `"schema"`: the name is validated as `[a-z_][a-z0-9_]*`, quoting only guards reserved words.
pub(crate) fn quote(schema: &str) -> String {
    format!("\"{schema}\"")
}

/// The columns [`hold_from_row`](crate::hold_from_row) reads.
pub(crate) const HOLD_COLUMNS: &str =
    "id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity, owner, created_at";

/// [`HOLD_COLUMNS`] of the table or CTE aliased `h`.
pub(crate) const H_COLUMNS: &str = "h.id, h.slot_id, h.status, h.expires_at, h.confirmed_at, \
                         h.cancelled_at, h.quantity, h.owner, h.created_at";

/// The statement's instant: the bound `now`, or the database's when it is NULL.
pub(crate) fn now(param: u8) -> String {
    format!("coalesce(${param}::timestamptz, statement_timestamp())")
}

/// `INSERT INTO events` of what `select` returns: kind, slot id, hold id, owner, units (or
/// capacity), instant; the transaction id and the sequence number come from the defaults.
pub(crate) fn append_events(s: &str, select: &str) -> String {
    format!(
        "INSERT INTO {s}.events (kind, slot_id, hold_id, owner, quantity, occurred_at) {select}"
    )
}

/// The events of holds returned by the CTE `from` (with `id`, `slot_id`, `owner`,
/// `quantity`), of `kind`, as rows of [`append_events`]'s select with an `ord` column first.
pub(crate) fn hold_event_rows(ord: u8, kind: &str, from: &str) -> String {
    format!(
        "SELECT {ord} AS ord, '{kind}'::text AS kind, slot_id, id AS hold_id, owner, quantity          FROM {from}"
    )
}

/// The columns [`event_from_row`](crate::events) reads besides `epoch`, of the events
/// aliased `ev`.
pub(crate) const EV_COLUMNS: &str =
    "ev.id AS sequence, ev.kind, ev.slot_id, ev.hold_id, ev.owner, \
                          ev.quantity, ev.occurred_at";

/// Gives back units to the pools of the slots they were given back to, in the statement
/// that gives them back: `moved` is a select of `(pools int8[], units int4)`, the pools of
/// each slot as its locked row has them and the units given back to it. CTEs `pm` (units per
/// pool), `pl` (the pool rows, locked by id once `moved` is known, so after the slot rows
/// `moved` reads) and `pg` (the update). A slot without pools touches no pool row. Both name
/// the pools by `= ANY` of an array, so even a generic plan finds them through the primary
/// key (a join with `pm` read every pool: 1,000 rows per cancel with 1,000 pools).
pub(crate) fn give_back(s: &str, moved: &str) -> String {
    format!(
        "pm AS ( \
             SELECT x.pool_id, sum(m.units)::int4 AS units FROM ({moved}) m \
             CROSS JOIN LATERAL unnest(m.pools) AS x(pool_id) GROUP BY x.pool_id), \
         pl AS ( \
             SELECT p.id, p.remaining FROM {s}.pools p \
             WHERE p.id = ANY (ARRAY(SELECT pool_id FROM pm)) ORDER BY p.id FOR NO KEY UPDATE), \
         pg AS ( \
             UPDATE {s}.pools p SET remaining = pl.remaining + pm.units \
             FROM pl JOIN pm ON pm.pool_id = pl.id \
             WHERE p.id = pl.id AND p.id = ANY (ARRAY(SELECT id FROM pl)) RETURNING p.id)"
    )
}

/// The capacity a change gives a row whose capacity is `capacity`, from the change's terms
/// ([`CapacityChange::terms`](slot_booking::CapacityChange::terms)) bound at `$keep` (keep)
/// and the next parameter (add), in int8.
pub(crate) fn capacity_after(keep: u8, capacity: &str) -> String {
    format!("(${keep}::int8 * {capacity} + ${}::int8)", keep + 1)
}

/// Whether a row whose capacity is `capacity` is the one a change expects, the expected
/// capacity bound at `$expected` (NULL: any).
pub(crate) fn capacity_expected(expected: u8, capacity: &str) -> String {
    format!("(${expected}::int4 IS NULL OR {capacity} = ${expected}::int4)")
}
