-- slot_booking (SQLite), migration 6: a hold refused on a sold-out slot is answered by its own
-- insert.
--
-- Additive: the trigger is recreated, no table or row is touched. It takes units exactly as
-- migration 4's did (the same conditional decrement, decided by the rows it changed); only the
-- abort of a hold that found no unit changes. When everything else about the refusal is
-- already known inside the statement, it aborts with its own message, 'slot_booking: sold out':
--
--   * no hold has the key (a key in use is answered by its hold: replayed or refused),
--   * the slot exists and is selling at the hold's `created_at` (the request's `now`): not
--     started, sales open, not removed,
--   * the request asks for no more units than the slot's capacity,
--   * no held hold of the slot has expired by `created_at` (so reclaiming would free nothing
--     and inserting again would change no row either).
--
-- Those are the facts for which the store would answer SoldOut after reclaiming, inserting
-- again and reading the key and the slot, so the store answers SoldOut at once. Otherwise it
-- aborts with migration 2's message, and the store reclaims, retries and explains as before.
--
-- Cost: the checks sit behind `changes() = 0`, the first term of the AND, which SQLite codes
-- as a jump: a hold that took its units skips them without running a subquery. A refusal runs
-- three lookups, each one of an index (the key's unique index, the slot's rowid, and the
-- partial index over held holds by (slot_id, expires_at)), in the statement it already runs.
-- `changes()` is still the decrement's count in the second SELECT: a SELECT changes no row and
-- does not reset it.
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
END;
