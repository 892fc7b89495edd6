-- slot_booking (PostgreSQL), migration 11: waitlists, served in the step that frees units.
--
-- Additive: one new table, one column with a constant default on `slots` and one nullable
-- column on `hold_keys` (no row is rewritten), one wider CHECK on `events`, two functions and
-- two row triggers; every row is kept, and every existing slot has an empty line.
--
-- A request that finds its units short waits in its slot's line (`waitlist_entries`), served
-- by priority, then arrival (entry id), in strict order: the head waits until its whole
-- quantity is free, and nobody behind it is served first. An entry's id is drawn from the
-- holds' id sequence, so the hold offered to it takes the same number.
--
-- `slots.waiting` counts the entries in the slot's line, maintained with the line under the
-- slot row's lock. Every statement that takes units for a newcomer (a hold, a booking line,
-- an "any one of these" pick) requires `waiting = 0` on the row it locked, in its own
-- conditional write: nobody jumps the line. Availability lists a slot whose line waits with
-- no unit. No index covers `waiting`, so the updates of a slot row stay HOT.
--
-- An entry's idempotency key is taken in `hold_keys`, the key space of holds and bookings:
-- its row names the entry (`entry_id`, `hold_id` NULL) while it waits, and the offer (its
-- `hold_id`, `entry_id` NULL) once served; leaving deletes it.

ALTER TABLE slots ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0
    CONSTRAINT slots_waiting_nonnegative CHECK (waiting >= 0);

CREATE TABLE waitlist_entries (
    id              BIGINT PRIMARY KEY,
    slot_id         BIGINT NOT NULL REFERENCES slots (id),
    idempotency_key TEXT NOT NULL,
    quantity        INTEGER NOT NULL
        CONSTRAINT waitlist_entries_quantity_valid CHECK (quantity BETWEEN 1 AND 1000),
    owner           TEXT,
    priority        INTEGER NOT NULL,
    joined_at       TIMESTAMPTZ NOT NULL,
    offer_micros    BIGINT NOT NULL
);

-- A slot's line in the order it is served; a place in line is counted along it.
CREATE INDEX waitlist_entries_line ON waitlist_entries (slot_id, priority DESC, id);

ALTER TABLE hold_keys
    ALTER COLUMN hold_id DROP NOT NULL,
    ADD COLUMN entry_id BIGINT,
    ADD CONSTRAINT hold_keys_hold_or_entry CHECK ((hold_id IS NULL) <> (entry_id IS NULL));

ALTER TABLE events
    DROP CONSTRAINT events_kind_valid,
    ADD CONSTRAINT events_kind_valid CHECK (kind IN (
        'hold_placed', 'hold_confirmed', 'hold_cancelled', 'hold_renewed', 'hold_expired',
        'slot_created', 'slot_capacity_changed', 'slot_closed', 'slot_reopened',
        'slot_removed', 'waitlist_offered'));

-- Serves the line of slot `p_slot` at `p_now`, in strict order, and returns the ids of the
-- entries offered. The slot row is locked first (the caller's statement usually holds it
-- already), then its pools by id, then hold rows of the slot (the reclaim), as everywhere.
-- While the slot is selling and the head's whole quantity fits in the slot's free units
-- (after reclaiming the slot's held holds expired by `p_now`, once, when only that makes it
-- fit) and in every pool of the slot, the head becomes its offer: a hold with the entry's
-- id, key, owner and quantity, created at `p_now` and expiring after its offer window,
-- logged `hold_placed` then `waitlist_offered`; the entry is deleted and its key names the
-- hold. Decided on the locked rows; the units move in one update of the pools and then one
-- of the slot at the end. Its tables are found through the schema it was created in.
CREATE FUNCTION serve_waitlist(p_slot BIGINT, p_now TIMESTAMPTZ) RETURNS BIGINT[]
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    sl RECORD;
    head RECORD;
    v_remaining INTEGER;
    v_waiting INTEGER;
    v_pool_least BIGINT;
    v_units INTEGER;
    v_reclaimed INTEGER := 0;
    v_taken INTEGER := 0;
    v_offered BIGINT[] := '{}';
BEGIN
    SELECT id, remaining, starts_at, closed, removed_at, pools, waiting INTO sl
    FROM slots WHERE id = p_slot FOR NO KEY UPDATE;
    IF NOT FOUND OR sl.waiting = 0 OR sl.starts_at <= p_now OR sl.closed
       OR sl.removed_at IS NOT NULL THEN
        RETURN v_offered;
    END IF;
    v_remaining := sl.remaining;
    v_waiting := sl.waiting;
    IF pg_catalog.cardinality(sl.pools) > 0 THEN
        SELECT pg_catalog.min(p.remaining) INTO v_pool_least
        FROM (SELECT remaining FROM pools WHERE id = ANY (sl.pools)
              ORDER BY id FOR NO KEY UPDATE) p;
    END IF;
    LOOP
        SELECT id, idempotency_key, quantity, owner, offer_micros INTO head
        FROM waitlist_entries WHERE slot_id = p_slot ORDER BY priority DESC, id LIMIT 1;
        EXIT WHEN NOT FOUND;
        IF v_remaining < head.quantity THEN
            SELECT coalesce(pg_catalog.sum(quantity), 0)::int4 INTO v_units
            FROM holds WHERE slot_id = p_slot AND status = 'held' AND expires_at <= p_now;
            EXIT WHEN v_units = 0 OR v_remaining + v_units < head.quantity;
            WITH r AS (
                UPDATE holds SET status = 'expired'
                WHERE slot_id = p_slot AND status = 'held' AND expires_at <= p_now
                RETURNING id, slot_id, owner, quantity),
            ev AS (
                INSERT INTO events (kind, slot_id, hold_id, owner, quantity, occurred_at)
                SELECT 'hold_expired', slot_id, id, owner, quantity, p_now FROM r ORDER BY id)
            SELECT coalesce(pg_catalog.sum(quantity), 0)::int4 INTO v_units FROM r;
            v_remaining := v_remaining + v_units;
            v_reclaimed := v_reclaimed + v_units;
            v_pool_least := v_pool_least + v_units;
            EXIT WHEN v_remaining < head.quantity;
        END IF;
        EXIT WHEN v_pool_least IS NOT NULL AND v_pool_least < head.quantity;
        INSERT INTO holds (id, slot_id, idempotency_key, status, expires_at, created_at,
                           quantity, owner)
        OVERRIDING SYSTEM VALUE
        VALUES (head.id, p_slot, head.idempotency_key, 'held',
                p_now + head.offer_micros * interval '1 microsecond', p_now, head.quantity,
                head.owner);
        DELETE FROM waitlist_entries WHERE id = head.id;
        UPDATE hold_keys SET hold_id = head.id, entry_id = NULL
        WHERE idempotency_key = head.idempotency_key AND entry_id = head.id;
        INSERT INTO events (kind, slot_id, hold_id, owner, quantity, occurred_at)
        VALUES ('hold_placed', p_slot, head.id, head.owner, head.quantity, p_now);
        INSERT INTO events (kind, slot_id, hold_id, owner, quantity, occurred_at)
        VALUES ('waitlist_offered', p_slot, head.id, head.owner, head.quantity, p_now);
        v_remaining := v_remaining - head.quantity;
        v_waiting := v_waiting - 1;
        v_taken := v_taken + head.quantity;
        v_pool_least := v_pool_least - head.quantity;
        v_offered := v_offered || head.id;
    END LOOP;
    IF v_reclaimed > 0 OR v_taken > 0 THEN
        IF pg_catalog.cardinality(sl.pools) > 0 THEN
            UPDATE pools SET remaining = remaining + v_reclaimed - v_taken
            WHERE id = ANY (sl.pools);
        END IF;
        UPDATE slots SET remaining = v_remaining, waiting = v_waiting WHERE id = p_slot;
    END IF;
    RETURN v_offered;
END
$$;

-- The trigger that serves a line in the statement that frees its units, whichever it is: a
-- cancel (of a hold or of a booking's lines), a reclaim of expired holds (the sweeper's, a
-- hold's, a booking's, a slot change's, a pool's), a capacity change, reopening sales. A
-- row-level AFTER trigger fires at the end of the statement, after every data-modifying CTE
-- of it, in its transaction: its offers and events commit or roll back with the change. The
-- instant it serves at is the statement's own: that of the newest event the transaction
-- appended for the slot (every statement that gives a slot units back or reopens it appends
-- one, with the instant it decided at), or the statement's timestamp when there is none.
CREATE FUNCTION serve_waitlist_on_slot_change() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM serve_waitlist(NEW.id, coalesce(
        (SELECT e.occurred_at FROM events e
         WHERE e.tx = pg_catalog.pg_current_xact_id() AND e.slot_id = NEW.id
         ORDER BY e.tx DESC, e.id DESC LIMIT 1),
        pg_catalog.statement_timestamp()));
    RETURN NULL;
END
$$;

-- Only when the line is not empty and units came back, the capacity changed (a lower one may
-- have reclaimed expired holds) or sales reopened; never for the serving function's own
-- update (a trigger depth of 1), which would serve the line again from inside itself.
CREATE TRIGGER slots_serve_waitlist
    AFTER UPDATE ON slots
    FOR EACH ROW
    WHEN (NEW.waiting > 0 AND pg_catalog.pg_trigger_depth() = 0
          AND (NEW.remaining > OLD.remaining OR NEW.capacity <> OLD.capacity
               OR (OLD.closed AND NOT NEW.closed)))
    EXECUTE FUNCTION serve_waitlist_on_slot_change();

-- Change notifications (migration 6) when a line forms or empties: availability lists a slot
-- whose line waits with no unit, so another instance's cached listing changes then too. One
-- more trigger of migration 6's function; PostgreSQL folds the notifications of one
-- transaction with the same channel and payload into one.
CREATE TRIGGER slots_notify_line
    AFTER UPDATE ON slots
    FOR EACH ROW
    WHEN ((NEW.waiting = 0) <> (OLD.waiting = 0))
    EXECUTE FUNCTION notify_slot_change();
