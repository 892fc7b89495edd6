-- slot_booking (SQLite), migration 5: the event log (a transactional outbox), its consumers'
-- cursors, and what sweeping expired holds and purging old history need.
--
-- Additive: two new tables, one trigger and two indexes; no row is rewritten and every row is
-- kept. Holds and slot changes made before the upgrade have no event (the log starts here).

-- One row per committed change, appended by the write that makes the change, in its
-- transaction. `id` is the reader's cursor (the position `0_<id>`): SQLite admits one writer at
-- a time and a writer holds the write lock from its first write to its commit, so ids are
-- handed out in commit order and a reader never sees an id while a lower one may still commit.
-- AUTOINCREMENT: without it SQLite hands out max(id) + 1, so once a purge deleted the newest
-- rows (or all of them) it would hand out ids consumers have already acknowledged, and they
-- would skip those events. With it an id is never handed out twice once committed (the counter
-- in sqlite_sequence commits with the row; an id rolled back is reused, but no reader ever saw
-- it). `occurred_at` is the engine's `now` in microseconds, like every timestamp here. No
-- foreign keys: a purge deletes ended holds whose events a consumer may not have read yet.
CREATE TABLE {p}events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL,
    slot_id     INTEGER NOT NULL,
    hold_id     INTEGER,
    owner       TEXT,
    quantity    INTEGER NOT NULL,
    occurred_at INTEGER NOT NULL,
    CONSTRAINT events_kind_valid CHECK (kind IN (
        'hold_placed', 'hold_confirmed', 'hold_cancelled', 'hold_renewed', 'hold_expired',
        'slot_created', 'slot_capacity_changed', 'slot_closed', 'slot_reopened',
        'slot_removed'))
) STRICT;

-- A consumer's cursor: the id of the last event it acknowledged. Only ever moved forward.
CREATE TABLE {p}event_consumers (
    name         TEXT PRIMARY KEY,
    acknowledged INTEGER NOT NULL
) STRICT;

-- A hold that finds a unit is one autocommit INSERT (migration 2): its `hold_placed` event is
-- appended by this trigger inside that same statement, so it is there exactly when the hold
-- is, and a hold aborted by `holds_take_a_unit` or by the unique key appends nothing. The
-- event's time is the hold's `created_at`, which is the engine's `now` of the request. Every
-- other event is inserted by the write itself (its time is not in the row it changes).
CREATE TRIGGER {p}holds_placed_event AFTER INSERT ON {p}holds
WHEN NEW.status = 'held'
BEGIN
    INSERT INTO {p}events (kind, slot_id, hold_id, owner, quantity, occurred_at)
    VALUES ('hold_placed', NEW.slot_id, NEW.id, NEW.owner, NEW.quantity, NEW.created_at);
END;

-- The sweeper (`reclaim_expired`) takes the held holds that expired first, across all slots,
-- reading one range of this index instead of every held hold.
CREATE INDEX {p}holds_held_by_expiry ON {p}holds (expires_at) WHERE status = 'held';

-- Purge finds ended holds (cancelled, or expired and reclaimed) by the instant they ended,
-- without reading confirmed or held ones. Deleting a hold deletes its index entries, its
-- idempotency key (a column of the row, under the unique constraint) with it; nothing
-- references holds (no foreign key points at them, no trigger fires on delete).
CREATE INDEX {p}holds_ended
    ON {p}holds ((CASE WHEN status = 'cancelled' THEN cancelled_at ELSE expires_at END))
    WHERE status IN ('cancelled', 'expired');
