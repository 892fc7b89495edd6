-- slot_booking (PostgreSQL), migration 13: events of a hold, found by its id.
--
-- Additive: one partial index, no row rewritten. A hold event's booking is read from its hold
-- when the event is read (`booking_id` of the hold row), and a purge keeps every ended hold
-- that an event still kept names, so that a consumer reading late still finds each line's
-- booking: the purge looks for such events through this index.

CREATE INDEX events_by_hold ON events (hold_id) WHERE hold_id IS NOT NULL;
