-- Bookings of several lines. A booking is one hold per line, inserted in slot id order in one
-- transaction; `booking_id` is the booking's id (its first line's hold id) on every line, the
-- first included, and NULL on a plain hold (a booking of one line). Only the first line holds
-- the client's idempotency key; each later line holds a key of the store's own, which starts
-- with a space (no client key does).

ALTER TABLE {p}holds ADD COLUMN IF NOT EXISTS booking_id BIGINT NULL;

-- A booking's lines, from its id.
CREATE INDEX IF NOT EXISTS {p}holds_by_booking ON {p}holds (booking_id, id);
