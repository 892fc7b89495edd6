-- slot_booking (SQLite), migration 3: owners, several units per hold, keyset queries.
--
-- Additive: existing holds become anonymous one-unit holds (the only kind there was), every
-- row is kept, and the capacity invariant holds as it did, now counted in units:
-- remaining + Σ quantity(held) + Σ quantity(confirmed) = capacity.

ALTER TABLE {p}holds ADD COLUMN quantity INTEGER NOT NULL DEFAULT 1
    CONSTRAINT holds_quantity_valid CHECK (quantity BETWEEN 1 AND 1000);
ALTER TABLE {p}holds ADD COLUMN owner TEXT;

-- A held hold takes all of its units by one conditional decrement (remaining >= quantity), or
-- the insert is aborted and nothing is stored.
DROP TRIGGER {p}holds_take_a_unit;
CREATE TRIGGER {p}holds_take_a_unit BEFORE INSERT ON {p}holds
WHEN NEW.status = 'held'
BEGIN
    UPDATE {p}slots SET remaining = remaining - NEW.quantity
    WHERE id = NEW.slot_id AND remaining >= NEW.quantity AND starts_at > NEW.created_at;
    SELECT RAISE(ABORT, 'slot_booking: no unit to hold') WHERE changes() = 0;
END;

-- Availability and reclaim sum the quantities of held holds per slot: the index covers them.
DROP INDEX {p}holds_held_by_slot_expiry;
CREATE INDEX {p}holds_held_by_slot_expiry
    ON {p}holds (slot_id, expires_at, quantity) WHERE status = 'held';

-- Keyset pages: an owner's holds and a slot's roster, by id.
CREATE INDEX {p}holds_by_owner ON {p}holds (owner, id) WHERE owner IS NOT NULL;
CREATE INDEX {p}holds_by_slot ON {p}holds (slot_id, id);
