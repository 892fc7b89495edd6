-- slot_booking (SQLite), migration 1: slots and holds.
--
-- `{p}` stands for the store's table prefix (default `slot_booking_`), so the crate's tables sit
-- beside a host application's own, whatever they are called.
--
-- Timestamps are stored as INTEGER microseconds since the Unix epoch (UTC). That is the
-- precision the core crate keeps, so every value round-trips exactly, and comparisons and
-- indexes work on plain integers. Tables are STRICT so a value of the wrong type is refused.

CREATE TABLE {p}slots (
    id        INTEGER PRIMARY KEY,
    starts_at INTEGER NOT NULL,
    ends_at   INTEGER NOT NULL,
    capacity  INTEGER NOT NULL,
    remaining INTEGER NOT NULL,
    CONSTRAINT slots_capacity_positive CHECK (capacity > 0 AND capacity <= 2147483647),
    CONSTRAINT slots_ends_after_start CHECK (ends_at > starts_at),
    CONSTRAINT slots_remaining_nonnegative CHECK (remaining >= 0),
    CONSTRAINT slots_remaining_within_capacity CHECK (remaining <= capacity)
) STRICT;

-- Availability lists future slots ordered by (starts_at, id).
CREATE INDEX {p}slots_starts_at_id ON {p}slots (starts_at, id);

CREATE TABLE {p}holds (
    id              INTEGER PRIMARY KEY,
    slot_id         INTEGER NOT NULL REFERENCES {p}slots (id),
    idempotency_key TEXT NOT NULL,
    status          TEXT NOT NULL,
    expires_at      INTEGER NOT NULL,
    confirmed_at    INTEGER,
    cancelled_at    INTEGER,
    created_at      INTEGER NOT NULL,
    CONSTRAINT holds_idempotency_key_unique UNIQUE (idempotency_key),
    CONSTRAINT holds_status_valid
        CHECK (status IN ('held', 'confirmed', 'cancelled', 'expired'))
) STRICT;

-- Availability and reclaim only ever look at holds still stored as held, by slot and expiry:
-- confirmed and cancelled history is never scanned.
CREATE INDEX {p}holds_held_by_slot_expiry ON {p}holds (slot_id, expires_at) WHERE status = 'held';
