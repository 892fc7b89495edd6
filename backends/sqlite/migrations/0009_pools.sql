-- slot_booking (SQLite), migration 9: pools, capacities several slots draw from.
--
-- Additive: two new tables and an index, and the `holds_take_a_unit` trigger recreated with
-- one more step; no existing table or row is touched, and a database of migration 8 upgrades
-- in place with every slot, hold and event kept (no slot belongs to a pool until one is
-- attached).
--
-- A pool keeps a `remaining` beside each slot's, under the pool invariant
-- `remaining + Σ quantity(stored held) + Σ quantity(confirmed) == capacity` over the holds of
-- its slots. A slot belongs to at most 4 pools (`MAX_POOLS_PER_SLOT`, checked by the store's
-- attach, which is one conditional statement under the write lock).
CREATE TABLE {p}pools (
    id         INTEGER PRIMARY KEY,
    capacity   INTEGER NOT NULL CHECK (capacity >= 0),
    remaining  INTEGER NOT NULL CHECK (remaining >= 0 AND remaining <= capacity),
    -- microseconds since the Unix epoch, like every timestamp of this crate
    created_at INTEGER NOT NULL
);

CREATE TABLE {p}slot_pools (
    slot_id INTEGER NOT NULL REFERENCES {p}slots (id),
    pool_id INTEGER NOT NULL REFERENCES {p}pools (id),
    PRIMARY KEY (slot_id, pool_id)
) WITHOUT ROWID;

-- A pool's slots (its usage, its reclaim), as the primary key serves a slot's pools.
CREATE INDEX {p}slot_pools_by_pool ON {p}slot_pools (pool_id, slot_id);

-- The trigger of migration 6, with the pools' step after the slot's: once the slot's
-- conditional decrement changed its row, one conditional decrement of every pool of the slot
-- (`remaining >= quantity`), decided by the rows it changed: fewer than the slot's pools and
-- the statement aborts, the slot's decrement with it. A pool short with no held hold expired
-- on any slot of the slot's pools (and the key free) is settled here as sold out, as the
-- slot's own refusal is; otherwise it aborts with a message of its own, and the store
-- reclaims the slot's expired holds and inserts once more, then (a pool still short) those of
-- the short pools' slots and once more. A slot of no pool pays one lookup of the (empty) range of
-- `slot_pools`' primary key, twice.
DROP TRIGGER {p}holds_take_a_unit;
CREATE TRIGGER {p}holds_take_a_unit BEFORE INSERT ON {p}holds
WHEN NEW.status = 'held'
BEGIN
    UPDATE {p}slots SET remaining = remaining - NEW.quantity
    WHERE id = NEW.slot_id AND remaining >= NEW.quantity AND starts_at > NEW.created_at
      AND closed = 0 AND removed_at IS NULL;
    SELECT RAISE(ABORT, 'slot_booking: sold out')
    WHERE changes() = 0
      AND NOT EXISTS (SELECT 1 FROM {p}holds WHERE idempotency_key = NEW.idempotency_key)
      AND EXISTS (SELECT 1 FROM {p}slots
                  WHERE id = NEW.slot_id AND starts_at > NEW.created_at AND closed = 0
                    AND removed_at IS NULL AND capacity >= NEW.quantity)
      AND NOT EXISTS (SELECT 1 FROM {p}holds
                      WHERE slot_id = NEW.slot_id AND status = 'held'
                        AND expires_at <= NEW.created_at);
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
