-- Waitlists. A waiting entry is a row of {p}holds with status 'waiting': its key is taken in
-- the key space of holds and bookings, and its id is the id of the hold it will be offered
-- (the row becomes that hold, held, when its units free up). `priority` and `offer_micros` (the
-- offer window) are set on entries only. `waiting` counts the entries of a slot, and of a
-- pool's slots: a newcomer's take is refused while its slot's count is not 0, or while a pool
-- of its slot has an entry on a selling slot; joining and leaving write those rows, so on a
-- Galera cluster a newcomer and a join on two nodes conflict at certification.

ALTER TABLE {p}holds
    DROP CONSTRAINT IF EXISTS {p}holds_status_valid,
    ADD CONSTRAINT {p}holds_status_valid
        CHECK (status IN ('held', 'confirmed', 'cancelled', 'expired', 'waiting'));

ALTER TABLE {p}holds
    ADD COLUMN IF NOT EXISTS priority INT NULL,
    ADD COLUMN IF NOT EXISTS offer_micros BIGINT NULL;

ALTER TABLE {p}slots ADD COLUMN IF NOT EXISTS waiting INT NOT NULL DEFAULT 0;

ALTER TABLE {p}pools ADD COLUMN IF NOT EXISTS waiting INT NOT NULL DEFAULT 0;

-- A slot's line: its waiting entries by priority, then arrival.
CREATE INDEX IF NOT EXISTS {p}holds_waitlist_line ON {p}holds (slot_id, status, priority, id);
