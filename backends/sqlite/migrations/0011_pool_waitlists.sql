-- slot_booking (SQLite), migration 11: waitlists on slots that belong to pools.
--
-- Additive: the `holds_take_a_unit` trigger recreated with one more condition, and a partial
-- index over the slots with a line; no table, column or row is touched, and a database of
-- migration 10 upgrades in place with every slot, hold, pool, entry, event and consumer kept.
--
-- A slot in a pool now has a line like any other, and its entries also wait in the line of
-- each of its pools: the waiting entries of the pool's slots that sell at the time (not
-- closed, not removed, not started). A newcomer (a hold, a booking's line, a group commit's
-- insert; not an offer) on a slot is refused as sold out when its slot's own line is not empty
-- (migration 10) or when the line of any pool of the slot is not: some slot of one of its
-- pools, selling at the hold's `created_at`, has `waiting > 0`. For a slot of no pool that is
-- one lookup of the (empty) range of `slot_pools`' primary key; for a pooled slot, one range of
-- `slot_pools_by_pool` per pool and the primary-key lookup of each slot of it.
--
-- Otherwise as migration 10 made it.
--
-- The slots anyone waits for, for the sweeper's pass over every pool's line (the pools of the
-- selling slots among them): as small as the lines are, and empty without any.
CREATE INDEX {p}slots_lined ON {p}slots (id) WHERE waiting > 0;

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
      AND ((waiting = 0
            AND NOT EXISTS (SELECT 1 FROM {p}slot_pools m
                            JOIN {p}slot_pools o ON o.pool_id = m.pool_id
                            JOIN {p}slots t ON t.id = o.slot_id
                            WHERE m.slot_id = NEW.slot_id AND t.waiting > 0
                              AND t.starts_at > NEW.created_at AND t.closed = 0
                              AND t.removed_at IS NULL))
           OR EXISTS (SELECT 1 FROM {p}waitlist_entries
                      WHERE id = NEW.id AND slot_id = NEW.slot_id));
    SELECT RAISE(ABORT, 'slot_booking: sold out')
    WHERE changes() = 0
      AND NOT EXISTS (SELECT 1 FROM {p}holds WHERE idempotency_key = NEW.idempotency_key)
      AND EXISTS (SELECT 1 FROM {p}slots
                  WHERE id = NEW.slot_id AND starts_at > NEW.created_at AND closed = 0
                    AND removed_at IS NULL AND capacity >= NEW.quantity
                    AND (waiting > 0
                         OR EXISTS (SELECT 1 FROM {p}slot_pools m
                                    JOIN {p}slot_pools o ON o.pool_id = m.pool_id
                                    JOIN {p}slots t ON t.id = o.slot_id
                                    WHERE m.slot_id = NEW.slot_id AND t.waiting > 0
                                      AND t.starts_at > NEW.created_at AND t.closed = 0
                                      AND t.removed_at IS NULL)
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
