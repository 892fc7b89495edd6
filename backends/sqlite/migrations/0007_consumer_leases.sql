-- slot_booking (SQLite), migration 7: consumers leased to one reader at a time.
--
-- Additive: two nullable columns; every row is kept, cursors included. `holder` is the one
-- reader that may acknowledge for the consumer, until `lease_until` (microseconds, like every
-- timestamp here); both NULL when nobody holds the lease.
ALTER TABLE {p}event_consumers ADD COLUMN holder TEXT;
ALTER TABLE {p}event_consumers ADD COLUMN lease_until INTEGER;
