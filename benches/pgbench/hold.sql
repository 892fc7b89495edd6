-- The statement PostgresStore runs for a hold (its one-round-trip fast path), for pgbench.
-- benches/postgres.rs substitutes {schema} and passes -D first=<id> -D last=<id>; with
-- first = last every client hits one hot slot.
\set slot random(:first, :last)
WITH dec AS (
    UPDATE {schema}.slots SET remaining = remaining - 1
    WHERE id = :slot AND remaining > 0 AND starts_at > now()
    RETURNING id)
INSERT INTO {schema}.holds (slot_id, idempotency_key, status, expires_at, created_at)
SELECT id, 'pgbench-' || :client_id || '-' || random()::text, 'held',
       now() + interval '5 minutes', now()
FROM dec
RETURNING id, slot_id, status, expires_at, confirmed_at, cancelled_at;
