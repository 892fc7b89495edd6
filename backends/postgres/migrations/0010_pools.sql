-- slot_booking (PostgreSQL), migration 10: pools, capacities several slots draw from.
--
-- Additive: two new tables and one column with a constant default (no row is rewritten);
-- every row is kept, and every existing slot belongs to no pool.
--
-- A pool keeps `remaining` beside its `capacity`, as a slot does, under the same invariant
-- over the holds of its slots: remaining + units held (expired ones included until
-- reclaimed) + units confirmed = capacity, remaining >= 0.
--
-- `slot_pools` says which slots draw from which pool (read by pool, for a pool's usage and
-- to reclaim its slots' expired holds). The same list is kept on the slot's own row
-- (`slots.pools`, the pool ids), written together with `slot_pools` under the slot row's
-- lock: every statement that moves a slot's units decides which pools to move with it on the
-- slot row it locked, re-read at its latest version, never on `slot_pools` read at the
-- statement's snapshot (which can predate an attach that committed while it waited for the
-- lock). No index covers `slots.pools`, so the updates of a slot row stay HOT.

ALTER TABLE slots ADD COLUMN pools BIGINT[] NOT NULL DEFAULT '{}';

CREATE TABLE pools (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    capacity   INT NOT NULL CHECK (capacity >= 0),
    remaining  INT NOT NULL CHECK (remaining >= 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE slot_pools (
    slot_id BIGINT NOT NULL REFERENCES slots (id),
    pool_id BIGINT NOT NULL REFERENCES pools (id),
    PRIMARY KEY (slot_id, pool_id)
);

-- A pool's slots.
CREATE INDEX slot_pools_by_pool ON slot_pools (pool_id, slot_id);
