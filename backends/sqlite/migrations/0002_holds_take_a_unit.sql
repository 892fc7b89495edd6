-- slot_booking (SQLite), migration 2: a held hold can only be stored by taking a unit.
--
-- Inserting a hold as 'held' runs the conditional decrement (remaining > 0) in the same statement:
-- if it changes no row (no unit left, or the slot has started by the hold's created_at, or no
-- such slot) the statement is aborted with SQLITE_CONSTRAINT_TRIGGER and nothing is stored. A
-- unique violation on the idempotency key aborts the statement too, decrement included. So a
-- hold is one autocommit statement — one call to SQLite — and atomic by itself.

CREATE TRIGGER {p}holds_take_a_unit BEFORE INSERT ON {p}holds
WHEN NEW.status = 'held'
BEGIN
    UPDATE {p}slots SET remaining = remaining - 1
    WHERE id = NEW.slot_id AND remaining > 0 AND starts_at > NEW.created_at;
    SELECT RAISE(ABORT, 'slot_booking: no unit to hold') WHERE changes() = 0;
END;
