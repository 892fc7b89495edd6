-- slot_booking (PostgreSQL), migration 2: held holds by expiry.
--
-- Availability counts, per slot, the holds still stored as held whose expires_at has passed.
-- Reading them through an index that starts with expires_at touches only those holds (however
-- many slots there are), where the per-slot index of migration 1 (kept for reclaim, which
-- works one slot at a time) costs one probe per slot.

CREATE INDEX holds_held_by_expiry ON holds (expires_at, slot_id) WHERE status = 'held';
