-- slot_booking (SQLite), migration 10: waitlists.
--
-- Additive: two new tables (the entries waiting in slots' lines, and the highest entry id ever
-- drawn), a `waiting` counter on the slots (0 for every existing slot), the event log rebuilt
-- to admit the kind 'waitlist_offered' (every event kept with its id, and its id counter), and
-- the `holds_take_a_unit` trigger recreated with two more conditions. A database of migration 9
-- upgrades in place with every slot, hold, pool, event and consumer kept.

-- The event log admits 'waitlist_offered'. SQLite cannot change a CHECK constraint in place,
-- so the table is rebuilt with the same columns: every row copied with its id, and the
-- AUTOINCREMENT counter carried over, so that no id a consumer may have seen (even one purged
-- since) is handed out again. The trigger that appends `hold_placed` names the table, so it is
-- dropped first (renaming a table checks every trigger of the schema) and made again after,
-- as migration 5 made it. No index, view or foreign key names the event log.
DROP TRIGGER {p}holds_placed_event;
CREATE TABLE {p}events_new (
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
        'slot_removed', 'waitlist_offered'))
) STRICT;
INSERT INTO {p}events_new (id, kind, slot_id, hold_id, owner, quantity, occurred_at)
    SELECT id, kind, slot_id, hold_id, owner, quantity, occurred_at FROM {p}events ORDER BY id;
DELETE FROM sqlite_sequence WHERE name = '{p}events_new';
INSERT INTO sqlite_sequence (name, seq)
    SELECT '{p}events_new', seq FROM sqlite_sequence WHERE name = '{p}events';
-- Dropping the table drops its row of sqlite_sequence; renaming renames the new one's.
DROP TABLE {p}events;
ALTER TABLE {p}events_new RENAME TO {p}events;
CREATE TRIGGER {p}holds_placed_event AFTER INSERT ON {p}holds
WHEN NEW.status = 'held'
BEGIN
    INSERT INTO {p}events (kind, slot_id, hold_id, owner, quantity, occurred_at)
    VALUES ('hold_placed', NEW.slot_id, NEW.id, NEW.owner, NEW.quantity, NEW.created_at);
END;

-- How many entries wait in the slot's line, kept by the triggers below with every insert and
-- delete of an entry: the conditional decrement of `holds_take_a_unit` requires 0, so no
-- newcomer takes a unit while anyone waits, decided in the same statement.
ALTER TABLE {p}slots ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0
    CONSTRAINT slots_waiting_nonnegative CHECK (waiting >= 0);

-- A request waiting in its slot's line. `id` is drawn from the holds' ids (see
-- `{p}waitlist_ids`): the hold offered to the entry takes the same number, and the entry's
-- row is deleted in the statement after. The idempotency key is taken as a hold's is: no hold
-- may have it (the join's insert checks, and the trigger below refuses a hold with it), and the
-- offer is stored under it. Timestamps and `offer_micros` (the offer window) are microseconds.
CREATE TABLE {p}waitlist_entries (
    id              INTEGER PRIMARY KEY,
    slot_id         INTEGER NOT NULL REFERENCES {p}slots (id),
    idempotency_key TEXT NOT NULL,
    quantity        INTEGER NOT NULL,
    owner           TEXT,
    priority        INTEGER NOT NULL,
    joined_at       INTEGER NOT NULL,
    offer_micros    INTEGER NOT NULL,
    CONSTRAINT waitlist_entries_key_unique UNIQUE (idempotency_key),
    CONSTRAINT waitlist_entries_quantity_valid CHECK (quantity BETWEEN 1 AND 1000),
    CONSTRAINT waitlist_entries_offer_valid CHECK (offer_micros > 0)
) STRICT;

-- A slot's line in the order it is served: priority first (higher first), then arrival.
CREATE INDEX {p}waitlist_line ON {p}waitlist_entries (slot_id, priority DESC, id);

-- The highest entry id ever drawn (one row). A hold's id is one more than the highest of the
-- holds' ids and this, and so is an entry's: no hold takes the number of an entry, waiting or
-- gone, and no entry the number of another.
CREATE TABLE {p}waitlist_ids (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    last_id INTEGER NOT NULL
) STRICT;
INSERT INTO {p}waitlist_ids (one, last_id) VALUES (1, 0);

CREATE TRIGGER {p}waitlist_joined AFTER INSERT ON {p}waitlist_entries
BEGIN
    UPDATE {p}slots SET waiting = waiting + 1 WHERE id = NEW.slot_id;
    UPDATE {p}waitlist_ids SET last_id = max(last_id, NEW.id);
END;

CREATE TRIGGER {p}waitlist_left AFTER DELETE ON {p}waitlist_entries
BEGIN
    UPDATE {p}slots SET waiting = waiting - 1 WHERE id = OLD.slot_id;
END;

-- The trigger of migration 9 with two more conditions:
--
--   * first, a hold whose key a waiting entry has is refused with a message of its own
--     (answered `KeyReused(None)`), except the entry's own offer (the hold of its id);
--   * the slot's conditional decrement also requires that nobody waits (`waiting = 0`), except
--     for an offer, and a refusal with anyone waiting is settled as sold out at once (the
--     line's head is served by the write that frees units, never by a newcomer's reclaim).
--
-- Otherwise as migration 9 made it.
DROP TRIGGER {p}holds_take_a_unit;
CREATE TRIGGER {p}holds_take_a_unit BEFORE INSERT ON {p}holds
WHEN NEW.status = 'held'
BEGIN
    SELECT RAISE(ABORT, 'slot_booking: key of a waiting entry')
    WHERE EXISTS (SELECT 1 FROM {p}waitlist_entries
                  WHERE idempotency_key = NEW.idempotency_key AND id IS NOT NEW.id);
    UPDATE {p}slots SET remaining = remaining - NEW.quantity
    WHERE id = NEW.slot_id AND remaining >= NEW.quantity AND starts_at > NEW.created_at
      AND closed = 0 AND removed_at IS NULL
      AND (waiting = 0
           OR EXISTS (SELECT 1 FROM {p}waitlist_entries
                      WHERE id = NEW.id AND slot_id = NEW.slot_id));
    SELECT RAISE(ABORT, 'slot_booking: sold out')
    WHERE changes() = 0
      AND NOT EXISTS (SELECT 1 FROM {p}holds WHERE idempotency_key = NEW.idempotency_key)
      AND EXISTS (SELECT 1 FROM {p}slots
                  WHERE id = NEW.slot_id AND starts_at > NEW.created_at AND closed = 0
                    AND removed_at IS NULL AND capacity >= NEW.quantity
                    AND (waiting > 0
                         OR NOT EXISTS (SELECT 1 FROM {p}holds
                                        WHERE slot_id = NEW.slot_id AND status = 'held'
                                          AND expires_at <= NEW.created_at)));
    SELECT RAISE(ABORT, 'slot_booking: no unit to hold') WHERE changes() = 0;
    UPDATE {p}pools SET remaining = remaining - NEW.quantity
    WHERE id IN (SELECT pool_id FROM {p}slot_pools WHERE slot_id = NEW.slot_id)
      AND remaining >= NEW.quantity;
    SELECT RAISE(ABORT, 'slot_booking: sold out')
    WHERE changes() < (SELECT count(*) FROM {p}slot_pools WHERE slot_id = NEW.slot_id)
      AND NOT EXISTS (SELECT 1 FROM {p}holds WHERE idempotency_key = NEW.idempotency_key)
      AND NOT EXISTS (SELECT 1 FROM {p}slot_pools m
                      JOIN {p}slot_pools o ON o.pool_id = m.pool_id
                      JOIN {p}holds h ON h.slot_id = o.slot_id
                      WHERE m.slot_id = NEW.slot_id AND h.status = 'held'
                        AND h.expires_at <= NEW.created_at);
    SELECT RAISE(ABORT, 'slot_booking: no unit in a pool')
    WHERE changes() < (SELECT count(*) FROM {p}slot_pools WHERE slot_id = NEW.slot_id);
END;
