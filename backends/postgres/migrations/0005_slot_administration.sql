-- slot_booking (PostgreSQL), migration 5: slot administration.
--
-- Additive: existing slots belong to no resource, are open and not removed, and every row is
-- kept. Adding a nullable column, or one with a constant default, rewrites no row.
--
-- A slot's row is updated by every hold, cancel and administrative change. Those updates
-- stay HOT (no new index entries) only while no index covers, includes or filters on a column
-- they write: `closed` and `removed_at` (like `capacity` and `remaining`) are therefore in no
-- index and no index predicate. `resource` is written once, by the insert.

ALTER TABLE slots ADD COLUMN resource TEXT;
ALTER TABLE slots ADD COLUMN closed BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE slots ADD COLUMN removed_at TIMESTAMPTZ;

-- The operator's listing of one resource's slots: a keyset page in (starts_at, id) order is
-- one range of this index. Slots without a resource are listed through slots_starts_at_id.
CREATE INDEX slots_by_resource ON slots (resource, starts_at, id) WHERE resource IS NOT NULL;
