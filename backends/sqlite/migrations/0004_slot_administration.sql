-- slot_booking (SQLite), migration 4: slot administration (resources, closed sales, removal).
--
-- Additive: existing slots become open, not removed and of no resource (the only kind there
-- was), every row is kept, and the capacity invariant is untouched.

-- What the slot is a time of; NULL for none.
ALTER TABLE {p}slots ADD COLUMN resource TEXT;
-- 1 while sales are closed: the trigger below then takes no unit, so no hold can be stored.
ALTER TABLE {p}slots ADD COLUMN closed INTEGER NOT NULL DEFAULT 0
    CONSTRAINT slots_closed_boolean CHECK (closed IN (0, 1));
-- When the slot was removed (archived), in microseconds like every timestamp; the row and its
-- holds are kept so hold reads and key replays keep answering.
ALTER TABLE {p}slots ADD COLUMN removed_at INTEGER;

-- Availability and the operator's listing narrowed to one resource, in (starts_at, id) order.
-- Partial: slots of no resource are never looked up by it.
CREATE INDEX {p}slots_by_resource ON {p}slots (resource, starts_at, id)
    WHERE resource IS NOT NULL;

-- A held hold is stored only on a slot that is selling: the conditional decrement now also
-- requires open sales and no removal, so closing or removing a slot races no hold. Otherwise
-- as in migration 3.
DROP TRIGGER {p}holds_take_a_unit;
CREATE TRIGGER {p}holds_take_a_unit BEFORE INSERT ON {p}holds
WHEN NEW.status = 'held'
BEGIN
    UPDATE {p}slots SET remaining = remaining - NEW.quantity
    WHERE id = NEW.slot_id AND remaining >= NEW.quantity AND starts_at > NEW.created_at
      AND closed = 0 AND removed_at IS NULL;
    SELECT RAISE(ABORT, 'slot_booking: no unit to hold') WHERE changes() = 0;
END;
