-- slot_booking (PostgreSQL), migration 8: events delivered without waiting for transactions
-- that wrote no event here, and consumers leased to one reader at a time.
--
-- Additive: one new table, one function, two new nullable columns; no row is rewritten and
-- every row is kept, cursors included.
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
    n        BIGINT PRIMARY KEY,
    snap     pg_catalog.pg_snapshot NOT NULL,
    lo       XID8 NOT NULL,
    pending  XID8[] NOT NULL,
    legacy   BOOLEAN NOT NULL DEFAULT false,
    taken_at TIMESTAMPTZ NOT NULL DEFAULT pg_catalog.clock_timestamp()
);

INSERT INTO event_horizons (n, snap, lo, pending, legacy)
SELECT pg_catalog.pg_snapshot_xmax(c.snap)::text::int8, c.snap, '0'::xid8, '{}', true
FROM (SELECT pg_catalog.pg_current_snapshot() AS snap) c;

-- Takes a horizon after the newest `p` when events exist that `p` does not see: the table's
-- lock first (horizons are taken one at a time; readers are not blocked), then the snapshot,
-- taken by the INSERT after the lock was granted (each statement of a volatile PL/pgSQL
-- function runs on a fresh snapshot), so it sees everything `p` saw. `lo` is `p`'s xmax and
-- `pending` the transactions `p` saw running. Numbered above `p` and at least its own xmax.
-- One round trip for the reader; its tables are found through the schema it was created in.
CREATE FUNCTION take_event_horizon() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    LOCK TABLE event_horizons IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO event_horizons (n, snap, lo, pending)
    SELECT greatest(p.n + 1, pg_catalog.pg_snapshot_xmax(c.snap)::text::int8),
           c.snap, p.xmax, p.running
    FROM (SELECT pg_catalog.pg_current_snapshot() AS snap) c,
         (SELECT z.n, pg_catalog.pg_snapshot_xmax(z.snap) AS xmax,
                 ARRAY(SELECT pg_catalog.pg_snapshot_xip(z.snap)) AS running
          FROM event_horizons z ORDER BY z.n DESC LIMIT 1) p
    -- The newest event's tx (one step of the primary key from its end), and one probe per
    -- transaction `p` saw running: never a scan of the log.
    WHERE coalesce((SELECT e.tx FROM events e ORDER BY e.tx DESC LIMIT 1) >= p.xmax, false)
       OR EXISTS (SELECT 1 FROM unnest(p.running) r(x)
                  CROSS JOIN LATERAL (SELECT 1 FROM events e WHERE e.tx = r.x LIMIT 1) hit);
END
$$;

-- A consumer's lease: the one reader (`holder`) that may acknowledge for it until
-- `lease_until`, or NULL when nobody holds it.
ALTER TABLE event_consumers
    ADD COLUMN holder TEXT,
    ADD COLUMN lease_until TIMESTAMPTZ;
