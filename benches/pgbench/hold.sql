-- The statement PostgresStore runs for a hold (its one-round-trip fast path), for pgbench.
-- benches/postgres.rs substitutes {schema} and passes -D first=<id> -D last=<id>; with
-- first = last every client hits one hot slot. Like the store's statement, it appends the
-- hold's `hold_placed` event in the same statement.
\set slot random(:first, :last)
WITH dec AS (
    UPDATE {schema}.slots SET remaining = remaining - 1
    WHERE id = :slot AND remaining > 0 AND starts_at > statement_timestamp()
    RETURNING id),
ins AS (
    INSERT INTO {schema}.holds (slot_id, idempotency_key, status, expires_at, created_at)
    SELECT id, 'pgbench-' || :client_id || '-' || random()::text, 'held',
           statement_timestamp() + interval '5 minutes', statement_timestamp()
    FROM dec
    RETURNING id, slot_id, status, expires_at, confirmed_at, cancelled_at, quantity, owner),
ev AS (
    INSERT INTO {schema}.events (kind, slot_id, hold_id, owner, quantity, occurred_at)
    SELECT 'hold_placed', slot_id, id, owner, quantity, statement_timestamp() FROM ins),
k AS (
    INSERT INTO {schema}.hold_keys (idempotency_key, hold_id)
    SELECT 'pgbench-' || id, id FROM ins)
SELECT id, slot_id, status, expires_at, confirmed_at, cancelled_at,
       statement_timestamp() AS decided_at
FROM ins;
