-- slot_booking (PostgreSQL), migration 9: bookings of several lines.
--
-- Additive: one new nullable column and one partial index; no row is rewritten and every row
-- is kept. A booking of several lines is stored as one hold per line, inserted in slot-id
-- order in one statement; `booking_id` is the booking's id (its first line's hold id) on every
-- line of it, the first included, and NULL on a plain hold (a booking of one line). Only the
-- first line's key is in `hold_keys`. The column is written once, when the line is inserted,
-- and never updated, so no hold update loses its HOT update for it. No foreign key: a purge
-- may delete a booking's lines in more than one batch.

ALTER TABLE holds ADD COLUMN booking_id BIGINT;

-- A booking's lines, from the id of any of them.
CREATE INDEX holds_by_booking ON holds (booking_id, id) WHERE booking_id IS NOT NULL;
