-- slot_booking (PostgreSQL), migration 6: change notifications.
--
-- Every commit that can change what an availability listing shows notifies the channel
-- `slot_booking:<schema>` (cut to 63 bytes, PostgreSQL's longest channel name) with the slot's
-- id, so every instance following the schema (PostgresStore::follow_changes) drops its cached
-- listing. PostgreSQL delivers a notification when the transaction that sent it commits, and
-- never when it rolls back: invalidation always follows the commit, also for a change made in a
-- caller's own transaction or by an operator's SQL. The channel names the schema, so stores in
-- other schemas of the same database are not woken.
--
-- Additive: one function and row triggers; no row is rewritten.
--
-- What notifies: an insert or a delete of a slot, and an update that gives units back
-- (`remaining` rose: a cancel, a reclaim) or changes anything else the listing shows or filters
-- on. A hold's decrement does not: holds do not invalidate listings (a listing is advisory for
-- holds, and a hold re-checks the slot row), and the hot path must not pay for a NOTIFY, which
-- takes an instance-wide lock at commit. The WHEN clause is evaluated on the row before the
-- function is called, so an update it rejects costs a comparison and no call. Confirms do not
-- touch the slot row.
--
-- Functions are qualified with pg_catalog so a caller's search_path cannot redirect them.

CREATE FUNCTION notify_slot_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Schema names of this crate are ASCII, so 63 characters are 63 bytes.
    PERFORM pg_catalog.pg_notify(
        pg_catalog.left('slot_booking:' || TG_TABLE_SCHEMA, 63),
        CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER slots_notify_insert_delete
    AFTER INSERT OR DELETE ON slots
    FOR EACH ROW EXECUTE FUNCTION notify_slot_change();

CREATE TRIGGER slots_notify_update
    AFTER UPDATE ON slots
    FOR EACH ROW
    WHEN (NEW.remaining > OLD.remaining
          OR (NEW.capacity, NEW.closed, NEW.removed_at, NEW.starts_at, NEW.ends_at, NEW.resource)
             IS DISTINCT FROM
             (OLD.capacity, OLD.closed, OLD.removed_at, OLD.starts_at, OLD.ends_at, OLD.resource))
    EXECUTE FUNCTION notify_slot_change();

-- TRUNCATE fires no row trigger: one notification for the table, with an empty payload.
CREATE FUNCTION notify_slots_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.pg_notify(pg_catalog.left('slot_booking:' || TG_TABLE_SCHEMA, 63), '');
    RETURN NULL;
END
$$;

CREATE TRIGGER slots_notify_truncate
    AFTER TRUNCATE ON slots
    FOR EACH STATEMENT EXECUTE FUNCTION notify_slots_truncated();
