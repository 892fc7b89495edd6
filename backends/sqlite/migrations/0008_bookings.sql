-- slot_booking (SQLite), migration 8: bookings of several lines.
--
-- Additive: one nullable column and one partial index; every row is kept, and every hold made
-- before the upgrade is a plain hold (a booking of one line, `booking_id` NULL).
--
-- A booking of several lines is stored as one hold per line, placed in one write transaction
-- in slot id order, so its first line has the lowest id; that id is the booking's id and
-- `booking_id` of every line, the first included. The first line carries the client's
-- idempotency key. `idempotency_key` is NOT NULL and unique (migration 1), and SQLite cannot
-- relax that without rebuilding the table, so every other line carries a key of the store's
-- own, made of the booking's id and the line's slot id behind a leading space: no stored client
-- key can be one (a client's key is visible ASCII, and one scoped to its owner starts with the
-- owner's id), so it never answers a client's request.
--
-- Confirm, cancel and renew of any line change every line of its booking in one statement,
-- finding the lines through this index; so do `get_booking` and a key's booking.
ALTER TABLE {p}holds ADD COLUMN booking_id INTEGER;
CREATE INDEX {p}holds_by_booking ON {p}holds (booking_id) WHERE booking_id IS NOT NULL;
