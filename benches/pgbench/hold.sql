-- The statement PostgresStore runs for a hold (its one-round-trip fast path), for pgbench.
-- benches/postgres.rs substitutes {schema} and passes -D first=<id> -D last=<id>; with
-- first = last every client hits one hot slot. Like the store's statement, it appends the
-- hold's `hold_placed` event in the same statement, and on a full slot (the refusal bench runs
-- it with first = last = a full slot) it returns the refusal's reasons instead.
\set slot random(:first, :last)
WITH dec AS (
    UPDATE {schema}.slots SET remaining = remaining - 1
    WHERE id = :slot AND remaining >= 1 AND starts_at > statement_timestamp()
      AND NOT closed AND removed_at IS NULL AND cardinality(pools) = 0 AND waiting = 0
      AND NOT EXISTS (SELECT 1 FROM {schema}.hold_keys
                      WHERE idempotency_key = 'pgbench-' || :client_id || '-' || :slot)
    RETURNING id, true AS took),
ins AS (
    INSERT INTO {schema}.holds (slot_id, idempotency_key, status, expires_at, created_at)
    SELECT id, 'pgbench-' || :client_id || '-' || random()::text, 'held',
           statement_timestamp() + interval '5 minutes', statement_timestamp()
    FROM dec WHERE dec.took
    RETURNING id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity, owner,
              created_at),
ev AS (
    INSERT INTO {schema}.events (kind, slot_id, hold_id, owner, quantity, occurred_at)
    SELECT 'hold_placed', slot_id, id, owner, quantity, statement_timestamp() FROM ins),
k AS (
    INSERT INTO {schema}.hold_keys (idempotency_key, hold_id)
    SELECT 'pgbench-' || id, id FROM ins)
SELECT true AS took, id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity,
       owner, created_at, statement_timestamp() AS decided_at,
       NULL::timestamptz AS slot_starts_at, NULL::int4 AS slot_capacity,
       NULL::bool AS slot_closed, NULL::timestamptz AS slot_removed_at,
       NULL::int4 AS slot_remaining, NULL::bool AS slot_has_expired
FROM ins
UNION ALL
-- No unit: the refusal's reasons, in the same round trip, as the store's statement reads them.
SELECT false, h.id, h.slot_id, h.status, h.expires_at, h.confirmed_at, h.cancelled_at,
       h.quantity, h.owner, h.created_at, statement_timestamp(), sl.starts_at, sl.capacity,
       sl.closed, sl.removed_at, sl.remaining,
       EXISTS (SELECT 1 FROM {schema}.holds x
               WHERE x.slot_id = :slot AND x.status = 'held'
                 AND x.expires_at <= statement_timestamp())
FROM (SELECT 1) AS one
LEFT JOIN {schema}.hold_keys hk ON hk.idempotency_key = 'pgbench-' || :client_id || '-refused'
LEFT JOIN {schema}.holds h ON h.id = hk.hold_id
LEFT JOIN {schema}.slots sl ON sl.id = :slot
WHERE NOT EXISTS (SELECT 1 FROM dec);
