//! The SQL text of every statement, built once per store with its schema name.
//!
//! Parameters of the hold statements: `$1` slot id, `$2` idempotency key, `$3` now,
//! `$4` expires_at.

/// The columns [`hold_from_row`](crate::hold_from_row) reads.
const HOLD_COLUMNS: &str = "id, slot_id, status, expires_at, confirmed_at, cancelled_at";

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
}

/// `"schema"`: the name is validated as `[a-z_][a-z0-9_]*`, quoting only guards reserved words.
pub(crate) fn quote(schema: &str) -> String {
    format!("\"{schema}\"")
}

impl Statements {
    pub(crate) fn new(schema: &str) -> Self {
        let s = quote(schema);
        Statements {
            create_slot: format!(
                "INSERT INTO {s}.slots (starts_at, ends_at, capacity, remaining) \
                 VALUES ($1, $2, $3, $3) \
                 RETURNING id, starts_at, ends_at, capacity, remaining"
            ),
            slot_by_id: format!(
                "SELECT id, starts_at, ends_at, capacity, remaining FROM {s}.slots WHERE id = $1"
            ),
            hold_by_id: format!("SELECT {HOLD_COLUMNS} FROM {s}.holds WHERE id = $1"),
            // Expired but unreclaimed holds count as free. They are read through the
            // expiry-first partial index (migration 2), so the cost follows their number, not
            // the number of slots or of holds in history.
            availability: format!(
                "SELECT sl.id, sl.starts_at, sl.ends_at, sl.capacity, \
                        (sl.remaining + coalesce(expired.n, 0))::int4 AS available \
                 FROM {s}.slots sl \
                 LEFT JOIN (SELECT slot_id, count(*) AS n FROM {s}.holds \
                            WHERE status = 'held' AND expires_at <= $1 \
                            GROUP BY slot_id) expired ON expired.slot_id = sl.id \
                 WHERE sl.starts_at > $1 \
                 ORDER BY sl.starts_at, sl.id"
            ),
            // One statement: the conditional decrement (SPEC R4) and the insert under the
            // unique key (R5). No unit: no row from `dec`, nothing inserted, nothing changed.
            // Key taken: the unique violation aborts the statement, decrement included.
            hold_fast: format!(
                "WITH dec AS ( \
                     UPDATE {s}.slots SET remaining = remaining - 1 \
                     WHERE id = $1 AND remaining > 0 AND starts_at > $3 \
                     RETURNING id) \
                 INSERT INTO {s}.holds (slot_id, idempotency_key, status, expires_at, created_at) \
                 SELECT id, $2, 'held', $4, $3 FROM dec \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // The slow path, also one statement: lock the open slot's row first (the lock
            // order every statement follows: slot, then holds), mark its held holds that
            // expired by now as expired, add their count back while taking one unit, and
            // insert. If even then there is no unit, `r` is empty too (a reclaimed hold always
            // makes room), so nothing changes. Rows affected decide everything: two racing
            // reclaims serialize on the slot lock and the second finds the holds no longer
            // `held`.
            hold_reclaim: format!(
                "WITH s AS ( \
                     SELECT id FROM {s}.slots WHERE id = $1 AND starts_at > $3 \
                     FOR NO KEY UPDATE), \
                 r AS ( \
                     UPDATE {s}.holds h SET status = 'expired' FROM s \
                     WHERE h.slot_id = s.id AND h.status = 'held' AND h.expires_at <= $3 \
                     RETURNING h.id), \
                 dec AS ( \
                     UPDATE {s}.slots sl \
                     SET remaining = sl.remaining + (SELECT count(*) FROM r)::int4 - 1 \
                     FROM s WHERE sl.id = s.id \
                       AND sl.remaining + (SELECT count(*) FROM r)::int4 > 0 \
                     RETURNING sl.id) \
                 INSERT INTO {s}.holds (slot_id, idempotency_key, status, expires_at, created_at) \
                 SELECT id, $2, 'held', $4, $3 FROM dec \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // After a hold statement changed nothing: the key's hold, if any, and the slot's
            // start, in one read.
            explain_hold: format!(
                "SELECT sl.starts_at AS slot_starts_at, \
                        h.id, h.slot_id, h.status, h.expires_at, h.confirmed_at, h.cancelled_at \
                 FROM (SELECT 1) AS one \
                 LEFT JOIN {s}.holds h ON h.idempotency_key = $2 \
                 LEFT JOIN {s}.slots sl ON sl.id = $1"
            ),
            confirm: format!(
                "UPDATE {s}.holds SET status = 'confirmed', confirmed_at = $2 \
                 WHERE id = $1 AND status = 'held' AND expires_at > $2 \
                 RETURNING {HOLD_COLUMNS}"
            ),
            // One statement: lock the hold's slot row (slot before hold, as everywhere), flip
            // a confirmed or still active held hold to cancelled, and give its unit back.
            cancel: format!(
                "WITH target AS ( \
                     SELECT sl.id FROM {s}.holds h JOIN {s}.slots sl ON sl.id = h.slot_id \
                     WHERE h.id = $1 FOR NO KEY UPDATE OF sl), \
                 c AS ( \
                     UPDATE {s}.holds h SET status = 'cancelled', cancelled_at = $2 \
                     FROM target t \
                     WHERE h.id = $1 AND h.slot_id = t.id \
                       AND (h.status = 'confirmed' OR (h.status = 'held' AND h.expires_at > $2)) \
                     RETURNING h.id, h.slot_id, h.status, h.expires_at, h.confirmed_at, \
                               h.cancelled_at), \
                 inc AS ( \
                     UPDATE {s}.slots sl SET remaining = sl.remaining + 1 \
                     FROM c WHERE sl.id = c.slot_id \
                     RETURNING sl.id) \
                 SELECT c.id, c.slot_id, c.status, c.expires_at, c.confirmed_at, c.cancelled_at \
                 FROM c"
            ),
        }
    }
}
