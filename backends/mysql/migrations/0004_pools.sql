-- Pools: capacities several slots draw from. A pool keeps its own `remaining` under the pool
-- invariant: remaining + units of its slots' holds stored as held or confirmed = capacity.
-- Every write that takes or gives back units of a slot takes or gives them back to each of the
-- slot's pools in the same transaction, locking slots by ascending id, then pools by ascending
-- id, then holds.

CREATE TABLE IF NOT EXISTS {p}pools (
    id        BIGINT NOT NULL AUTO_INCREMENT,
    capacity  INT NOT NULL,
    remaining INT NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT {p}pools_capacity_valid CHECK (capacity >= 0),
    CONSTRAINT {p}pools_remaining_within_capacity CHECK (remaining >= 0 AND remaining <= capacity)
) ENGINE = InnoDB;

-- Which slots draw from which pools.
CREATE TABLE IF NOT EXISTS {p}pool_slots (
    pool_id BIGINT NOT NULL,
    slot_id BIGINT NOT NULL,
    PRIMARY KEY (pool_id, slot_id),
    KEY {p}pool_slots_by_slot (slot_id, pool_id),
    CONSTRAINT {p}pool_slots_pool FOREIGN KEY (pool_id) REFERENCES {p}pools (id),
    CONSTRAINT {p}pool_slots_slot FOREIGN KEY (slot_id) REFERENCES {p}slots (id)
) ENGINE = InnoDB;

-- The number of pools a slot draws from, kept on the slot's row: attaching and detaching
-- write the row every take of the slot's units writes, so on a Galera cluster a take and a
-- change of the slot's pools on two nodes conflict at certification, and one is retried.
ALTER TABLE {p}slots ADD COLUMN IF NOT EXISTS pool_count INT NOT NULL DEFAULT 0;
