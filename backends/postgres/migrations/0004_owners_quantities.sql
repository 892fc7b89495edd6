-- slot_booking (PostgreSQL), migration 4: owners, several units per hold, keyset queries.
--
-- Additive: existing holds become anonymous one-unit holds (the only kind there was), every
-- row is kept, and the capacity invariant holds as it did, now counted in units:
-- remaining + Σ quantity(held) + Σ quantity(confirmed) = capacity. Adding a column with a
-- constant default rewrites no row; the CHECK reads the table once.

ALTER TABLE holds ADD COLUMN quantity INTEGER NOT NULL DEFAULT 1
    CONSTRAINT holds_quantity_valid CHECK (quantity BETWEEN 1 AND 1000);
ALTER TABLE holds ADD COLUMN owner TEXT;

-- Availability and reclaim sum the quantities of a slot's held holds: the per-slot index
-- carries them, so the sum stays an index-only read.
CREATE INDEX holds_held_by_slot_expiry_units
    ON holds (slot_id, expires_at) INCLUDE (quantity) WHERE status = 'held';
DROP INDEX holds_held_by_slot_expiry;
ALTER INDEX holds_held_by_slot_expiry_units RENAME TO holds_held_by_slot_expiry;

-- Keyset pages: an owner's holds and a slot's roster, by id.
CREATE INDEX holds_by_owner ON holds (owner, id) WHERE owner IS NOT NULL;
CREATE INDEX holds_by_slot ON holds (slot_id, id);
