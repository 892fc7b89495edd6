-- Slots and holds. Every name carries the store's table prefix ({p}).
--
-- Timestamps are BIGINT microseconds since the Unix epoch (UTC), the precision the core keeps,
-- with no time zone for the server or the session to apply. Identifiers and keys are visible
-- ASCII of at most 255 characters (the core checks them), compared byte for byte (`ascii_bin`):
-- "Key" and "key" are two keys.

CREATE TABLE IF NOT EXISTS {p}slots (
    id         BIGINT NOT NULL AUTO_INCREMENT,
    starts_at  BIGINT NOT NULL,
    ends_at    BIGINT NOT NULL,
    capacity   INT NOT NULL,
    remaining  INT NOT NULL,
    resource   VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    closed     BOOLEAN NOT NULL DEFAULT FALSE,
    removed_at BIGINT NULL,
    PRIMARY KEY (id),
    -- Availability and the operator's listing read slots in (starts_at, id) order.
    KEY {p}slots_starts_at_id (starts_at, id),
    KEY {p}slots_by_resource (resource, starts_at, id),
    CONSTRAINT {p}slots_capacity_positive CHECK (capacity > 0),
    CONSTRAINT {p}slots_ends_after_start CHECK (ends_at > starts_at),
    CONSTRAINT {p}slots_remaining_within_capacity CHECK (remaining >= 0 AND remaining <= capacity)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS {p}holds (
    id              BIGINT NOT NULL AUTO_INCREMENT,
    slot_id         BIGINT NOT NULL,
    idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status          VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    expires_at      BIGINT NOT NULL,
    confirmed_at    BIGINT NULL,
    cancelled_at    BIGINT NULL,
    created_at      BIGINT NOT NULL,
    quantity        INT NOT NULL,
    owner           VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    PRIMARY KEY (id),
    -- The idempotency key: a second hold with it is refused by the constraint.
    UNIQUE KEY {p}holds_idempotency_key (idempotency_key),
    -- Availability, a hold's reclaim and the sweeper read held holds by slot and expiry.
    KEY {p}holds_by_slot_status_expiry (slot_id, status, expires_at),
    KEY {p}holds_by_status_expiry (status, expires_at),
    KEY {p}holds_by_owner (owner, id),
    CONSTRAINT {p}holds_slot FOREIGN KEY (slot_id) REFERENCES {p}slots (id),
    CONSTRAINT {p}holds_status_valid
        CHECK (status IN ('held', 'confirmed', 'cancelled', 'expired')),
    CONSTRAINT {p}holds_quantity_positive CHECK (quantity > 0)
) ENGINE = InnoDB;
