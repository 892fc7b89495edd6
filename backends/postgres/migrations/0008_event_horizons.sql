-- slot_booking (PostgreSQL), migration 8: events delivered without waiting for transactions
-- that wrote no event here, and consumers leased to one reader at a time.
--
-- Additive: one new table, two new nullable columns; no row is rewritten and every row is
-- kept, cursors included.
--
-- Until now a reader returned only events of transactions below the xmin of its snapshot,
-- which is cluster-wide: any transaction left open anywhere on the server held every consumer
-- back. Readers now compare snapshots instead. A horizon is a snapshot a reader took
-- (`pg_current_snapshot()`, under this table's lock, so horizons are taken one at a time and
-- each sees everything the one before saw), numbered in the order taken. The events of
-- horizon `n` are those of transactions visible in its snapshot and not in the previous one:
-- their `tx` is at or above the previous snapshot's xmax (`lo`), or one of the transactions
-- that snapshot saw running (`pending`). An event of a transaction still running belongs to no
-- horizon yet: it is delivered with the first horizon taken after it commits, however low its
-- id or tx, so a reader never skips it and never waits for it, nor for any other transaction.
-- An event's position is `(n, id)`.
--
-- The events committed before this migration keep their positions `(tx, id)`: they are the
-- events visible in the first horizon (`legacy`, taken here), numbered with the snapshot's
-- xmax, which is above every one of their `tx`; every later horizon's number is above it.

CREATE TABLE event_horizons (
    n       BIGINT PRIMARY KEY,
    snap    pg_catalog.pg_snapshot NOT NULL,
    lo      XID8 NOT NULL,
    pending XID8[] NOT NULL,
    legacy  BOOLEAN NOT NULL DEFAULT false
);

INSERT INTO event_horizons (n, snap, lo, pending, legacy)
SELECT pg_catalog.pg_snapshot_xmax(c.snap)::text::int8, c.snap, '0'::xid8, '{}', true
FROM (SELECT pg_catalog.pg_current_snapshot() AS snap) c;

-- A consumer's lease: the one reader (`holder`) that may acknowledge for it until
-- `lease_until`, or NULL when nobody holds it.
ALTER TABLE event_consumers
    ADD COLUMN holder TEXT,
    ADD COLUMN lease_until TIMESTAMPTZ;
