-- slot_booking (PostgreSQL), migration 7: the event log (a transactional outbox), its
-- consumers' cursors, and what purging old history needs.
--
-- Additive: two new tables and two indexes; no row is rewritten and every row is kept. Holds
-- and slot changes made before the upgrade have no event (the log starts at the upgrade).
--
-- Each event row carries the id of the transaction that wrote it (`tx`, filled by the
-- default: every write appends its events in the same statement as its change, so in the same
-- transaction) and a sequence number (`id`). Sequence numbers are handed out when rows are
-- written, not when they commit, so a transaction that started first can commit after one that
-- took a higher number. A reader therefore orders and pages by (tx, id) and only returns events
-- whose `tx` is below the xmin of its snapshot: every transaction below it has ended, and one
-- that writes later gets a `tx` at or above it. PRIMARY KEY (tx, id) is the one index a reader
-- and a purge walk.

CREATE TABLE events (
    tx          XID8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    id          BIGINT GENERATED ALWAYS AS IDENTITY,
    kind        TEXT NOT NULL,
    slot_id     BIGINT NOT NULL,
    hold_id     BIGINT,
    owner       TEXT,
    quantity    INTEGER NOT NULL,
    occurred_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (tx, id),
    CONSTRAINT events_kind_valid CHECK (kind IN (
        'hold_placed', 'hold_confirmed', 'hold_cancelled', 'hold_renewed', 'hold_expired',
        'slot_created', 'slot_capacity_changed', 'slot_closed', 'slot_reopened',
        'slot_removed'))
);
-- No foreign key to slots or holds: a purge deletes ended holds whose events a consumer may
-- not have read yet, and an event outlives nothing it names by accident.

-- A consumer's cursor: the last (tx, id) it acknowledged. Only ever moved forward.
CREATE TABLE event_consumers (
    name            TEXT PRIMARY KEY,
    tx              XID8 NOT NULL,
    id              BIGINT NOT NULL,
    acknowledged_at TIMESTAMPTZ NOT NULL DEFAULT pg_catalog.now()
);

-- Purging a hold deletes its key first and then the hold: the foreign key of hold_keys is
-- checked by hold id, which needs an index (otherwise each deleted hold scans every key).
-- hold_keys is insert-only on the hot path: one more entry per hold, appended at the right
-- edge of the index (hold ids ascend).
CREATE INDEX hold_keys_by_hold ON hold_keys (hold_id);

-- Purge finds ended holds (cancelled, or expired and reclaimed) by the instant they ended,
-- without reading confirmed or held ones. Only updates that end a hold (already not HOT:
-- `status` is in the predicates of the held-hold index) add an entry here.
CREATE INDEX holds_ended
    ON holds ((CASE WHEN status = 'cancelled' THEN cancelled_at ELSE expires_at END))
    WHERE status IN ('cancelled', 'expired');
