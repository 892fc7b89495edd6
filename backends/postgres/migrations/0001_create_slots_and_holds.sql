-- slot_booking (PostgreSQL), migration 1: slots and holds.
--
-- Applied by PostgresStore::migrate() with `search_path` set to the store's schema (default
-- `slot_booking`), so the names below land in that schema.

CREATE TABLE slots (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    starts_at TIMESTAMPTZ NOT NULL,
    ends_at   TIMESTAMPTZ NOT NULL,
    capacity  INTEGER NOT NULL,
    remaining INTEGER NOT NULL,
    CONSTRAINT slots_capacity_positive CHECK (capacity > 0),
    CONSTRAINT slots_ends_after_start CHECK (ends_at > starts_at),
    CONSTRAINT slots_remaining_nonnegative CHECK (remaining >= 0),
    CONSTRAINT slots_remaining_within_capacity CHECK (remaining <= capacity)
);

-- Availability lists future slots ordered by (starts_at, id).
CREATE INDEX slots_starts_at_id ON slots (starts_at, id);

CREATE TABLE holds (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slot_id         BIGINT NOT NULL REFERENCES slots (id),
    idempotency_key TEXT NOT NULL,
    status          TEXT NOT NULL,
    expires_at      TIMESTAMPTZ NOT NULL,
    confirmed_at    TIMESTAMPTZ,
    cancelled_at    TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL,
    CONSTRAINT holds_idempotency_key_unique UNIQUE (idempotency_key),
    CONSTRAINT holds_status_valid
        CHECK (status IN ('held', 'confirmed', 'cancelled', 'expired'))
);

-- Availability and reclaim only ever look at holds still stored as held, by slot and expiry:
-- confirmed and cancelled history is never scanned.
CREATE INDEX holds_held_by_slot_expiry ON holds (slot_id, expires_at) WHERE status = 'held';
