-- slot_booking (PostgreSQL), migration 12: waitlists on slots that draw from pools.
--
-- Additive: one column with a constant default on `pools` (set from the slots' lines of a
-- database that has some), six new functions and two replaced (`serve_waitlist` and the
-- serving trigger's), the serving trigger of migration 11 made to fire for slots with pools
-- too and for closing and removal, and one notifying trigger on `pools`; every row is kept.
--
-- An entry waits on one slot. When that slot draws from pools, the entry is also in the line
-- of each of them: **a pool's line** is the waiting entries of the pool's slots that are
-- selling (not closed, not removed, not started), in line order (priority desc, then entry
-- id). Entries of a slot that stopped selling are not in it, so they never block the pool.
--
-- `pools.waiting` counts the entries of the pool's slots (selling or not), written with them
-- under the pool row's lock: by a join, a leave, an offer, attach and detach. It gates, on
-- the pool row a statement locked, the look at the pool's line (`pool_line_head`), which
-- reads the line afresh after that lock: every change of a pool's entries holds the pool's
-- row, so once a statement holds it, the line it reads is the line as it stands.
--
-- Newcomers (a hold, a booking line, an "any one of these" pick) on a slot are refused when
-- the slot's line or the line of any of its pools is not empty. An entry is offered when it
-- is ready (`offer_if_ready`): its slot sells, it is the head of its slot's line and of every
-- pool's line of the slot, its slot has its units with the slot's expired holds counted free,
-- and every pool of the slot has them with the expired holds of the pool's slots counted free
-- (those that make it fit are given back first: the slot's, then the pool refill).
--
-- Which step serves which lines: every statement that gives a slot units back (a cancel, a
-- reclaim of expired holds), changes its capacity, opens or closes its sales or removes it
-- serves the slot's line and its pools' lines (the trigger on `slots`); a join and a leave
-- the same, themselves; a pool capacity change the pool's line and a detach the pool's and
-- the slot's (`pools.rs`, after reading their answer); the sweeper every pool's line whose
-- head is ready. The reclaims a write makes only to make room for itself (a hold's or a
-- booking's pool refill, a pool capacity change's or an attach's) serve nothing, and neither
-- do serving's own writes (`slot_booking.defer_serving`, set for the transaction).
--
-- # Locks: never wait out of order
--
-- Slots by id, then pools by id, as everywhere. A step that frees units holds its own slot
-- rows and their pools; serving a pool's line may need another slot's row (the head's) and
-- that slot's other pools, which would come out of that order: those rows are taken with
-- `FOR NO KEY UPDATE SKIP LOCKED`, never waited for. A head whose rows another transaction
-- holds is not served by this step; its line waits (newcomers stay refused: nobody jumps it)
-- until the next step that frees units of its slot or pools serves it, or the sweeper's pass
-- (`serve_pool_head`, which takes the head's rows in order, in a transaction of its own).
-- A row this transaction already holds is never skipped.

ALTER TABLE pools ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0
    CONSTRAINT pools_waiting_nonnegative CHECK (waiting >= 0);

-- A slot attached to a pool after its line formed (migration 11 allowed that): its entries
-- count on the pool.
UPDATE pools p SET waiting = w.entries
FROM (SELECT sp.pool_id, sum(sl.waiting)::int4 AS entries
      FROM slot_pools sp JOIN slots sl ON sl.id = sp.slot_id
      GROUP BY sp.pool_id) w
WHERE p.id = w.pool_id AND w.entries > 0;

-- The head of pool `p_pool`'s line at `p_now` (an entry id), or NULL when its line is empty:
-- the first, in line order, of the heads of its selling slots' lines. VOLATILE, so it reads
-- the tables afresh when it is called, not at the calling statement's snapshot: called once
-- the pool's row is locked, it sees every entry of the pool as it stands.
CREATE FUNCTION pool_line_head(p_pool BIGINT, p_now TIMESTAMPTZ) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_head BIGINT;
BEGIN
    SELECT e.id INTO v_head
    FROM slot_pools sp
    JOIN slots b ON b.id = sp.slot_id
    CROSS JOIN LATERAL (
        SELECT w.id, w.priority FROM waitlist_entries w
        WHERE w.slot_id = b.id ORDER BY w.priority DESC, w.id LIMIT 1) e
    WHERE sp.pool_id = p_pool AND b.waiting > 0
      AND b.starts_at > p_now AND NOT b.closed AND b.removed_at IS NULL
    ORDER BY e.priority DESC, e.id
    LIMIT 1;
    RETURN v_head;
END
$$;

-- Gives back the held holds of slot `p_slot` expired by `p_now`: marks them expired, appends
-- one `hold_expired` each, and gives their units back to the slot and to its pools `p_pools`.
-- The caller holds the slot's row and its pools' rows. Returns the units given back.
CREATE FUNCTION reclaim_slot_expired(p_slot BIGINT, p_pools BIGINT[], p_now TIMESTAMPTZ)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_units INTEGER;
BEGIN
    WITH r AS (
        UPDATE holds SET status = 'expired'
        WHERE slot_id = p_slot AND status = 'held' AND expires_at <= p_now
        RETURNING id, slot_id, owner, quantity),
    ev AS (
        INSERT INTO events (kind, slot_id, hold_id, owner, quantity, occurred_at)
        SELECT 'hold_expired', slot_id, id, owner, quantity, p_now FROM r ORDER BY id)
    SELECT coalesce(pg_catalog.sum(quantity), 0)::int4 INTO v_units FROM r;
    IF v_units > 0 THEN
        UPDATE pools SET remaining = remaining + v_units WHERE id = ANY (p_pools);
        UPDATE slots SET remaining = remaining + v_units WHERE id = p_slot;
    END IF;
    RETURN v_units;
END
$$;

-- Offers entry `p_entry` at `p_now` if it is ready, and says whether it did. Its slot's row,
-- its pools' rows and the rows a pool refill needs are taken without waiting (`SKIP LOCKED`;
-- rows this transaction holds are never skipped): when another transaction holds one, the
-- entry is not ready here. Ready, checked on the rows as locked (every statement of a
-- VOLATILE function reads afresh): its slot sells; it heads its slot's line and every pool's
-- line of the slot; its quantity fits in the slot with the slot's expired holds counted free,
-- and in every pool with the expired holds of the pool's slots counted free. Then the expired
-- holds that make it fit are given back (`hold_expired` events, units back to their slots and
-- those slots' pools): the slot's when the slot is short, then those of the slots of each
-- pool still short (the pool refill, each such slot and its pools taken without waiting; one
-- that is busy keeps its holds). Decided on the units the rows then have: the offer, a hold
-- with the entry's id, key, owner and quantity, created at `p_now`, expiring after its offer
-- window, logged `hold_placed` then `waitlist_offered`; the entry leaves every line; the slot
-- and each pool lose its units.
CREATE FUNCTION offer_if_ready(p_entry BIGINT, p_now TIMESTAMPTZ) RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    e RECORD;
    sl RECORD;
    t RECORD;
    v_locked INTEGER;
    v_short BIGINT[];
BEGIN
    SELECT id, slot_id, idempotency_key, quantity, owner, offer_micros INTO e
    FROM waitlist_entries WHERE id = p_entry;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT id, remaining, starts_at, closed, removed_at, pools INTO sl
    FROM slots WHERE id = e.slot_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND OR sl.starts_at <= p_now OR sl.closed OR sl.removed_at IS NOT NULL THEN
        RETURN false;
    END IF;
    -- Read after the slot's lock: its line changes only under it.
    IF (SELECT w.id FROM waitlist_entries w WHERE w.slot_id = sl.id
        ORDER BY w.priority DESC, w.id LIMIT 1) IS DISTINCT FROM p_entry THEN
        RETURN false;
    END IF;
    SELECT pg_catalog.count(*) INTO v_locked
    FROM (SELECT id FROM pools WHERE id = ANY (sl.pools)
          ORDER BY id FOR NO KEY UPDATE SKIP LOCKED) p;
    IF v_locked < pg_catalog.cardinality(sl.pools) THEN
        RETURN false;
    END IF;
    -- Read after the pools' locks: a pool's entries change only under it.
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(sl.pools) AS x(pool_id)
               WHERE pool_line_head(x.pool_id, p_now) IS DISTINCT FROM p_entry) THEN
        RETURN false;
    END IF;
    IF sl.remaining + (SELECT coalesce(pg_catalog.sum(h.quantity), 0) FROM holds h
                       WHERE h.slot_id = sl.id AND h.status = 'held'
                         AND h.expires_at <= p_now) < e.quantity
       OR EXISTS (
           SELECT 1 FROM pools p
           WHERE p.id = ANY (sl.pools)
             AND p.remaining + (SELECT coalesce(pg_catalog.sum(h.quantity), 0)
                                FROM slot_pools sp JOIN holds h ON h.slot_id = sp.slot_id
                                WHERE sp.pool_id = p.id AND h.status = 'held'
                                  AND h.expires_at <= p_now) < e.quantity) THEN
        RETURN false;
    END IF;
    IF sl.remaining < e.quantity THEN
        PERFORM reclaim_slot_expired(sl.id, sl.pools, p_now);
    END IF;
    SELECT pg_catalog.array_agg(id) INTO v_short
    FROM pools WHERE id = ANY (sl.pools) AND remaining < e.quantity;
    IF v_short IS NOT NULL THEN
        FOR t IN
            SELECT b.id, b.pools FROM slots b
            WHERE b.id IN (SELECT sp.slot_id FROM slot_pools sp WHERE sp.pool_id = ANY (v_short))
              AND EXISTS (SELECT 1 FROM holds h WHERE h.slot_id = b.id AND h.status = 'held'
                            AND h.expires_at <= p_now)
            ORDER BY b.id
            FOR NO KEY UPDATE SKIP LOCKED
        LOOP
            SELECT pg_catalog.count(*) INTO v_locked
            FROM (SELECT id FROM pools WHERE id = ANY (t.pools)
                  ORDER BY id FOR NO KEY UPDATE SKIP LOCKED) p;
            CONTINUE WHEN v_locked < pg_catalog.cardinality(t.pools);
            PERFORM reclaim_slot_expired(t.id, t.pools, p_now);
        END LOOP;
    END IF;
    IF (SELECT remaining FROM slots WHERE id = sl.id) < e.quantity
       OR EXISTS (SELECT 1 FROM pools WHERE id = ANY (sl.pools) AND remaining < e.quantity) THEN
        RETURN false;
    END IF;
    INSERT INTO holds (id, slot_id, idempotency_key, status, expires_at, created_at, quantity,
                       owner)
    OVERRIDING SYSTEM VALUE
    VALUES (e.id, sl.id, e.idempotency_key, 'held',
            p_now + e.offer_micros * interval '1 microsecond', p_now, e.quantity, e.owner);
    DELETE FROM waitlist_entries WHERE id = e.id;
    UPDATE hold_keys SET hold_id = e.id, entry_id = NULL
    WHERE idempotency_key = e.idempotency_key AND entry_id = e.id;
    INSERT INTO events (kind, slot_id, hold_id, owner, quantity, occurred_at)
    VALUES ('hold_placed', sl.id, e.id, e.owner, e.quantity, p_now),
           ('waitlist_offered', sl.id, e.id, e.owner, e.quantity, p_now);
    UPDATE pools SET remaining = remaining - e.quantity, waiting = waiting - 1
    WHERE id = ANY (sl.pools);
    UPDATE slots SET remaining = remaining - e.quantity, waiting = waiting - 1 WHERE id = sl.id;
    RETURN true;
END
$$;

-- Serves a set of lines at `p_now`: the lines of the slots `p_slots` and of the pools
-- `p_pools`. Looks at the head of each line and offers any head that is ready, again and
-- again until no head of the set is ready (an offer can make the next head ready); an
-- offered entry's slot's line and its pools' lines join the set (the next in each may have
-- waited only behind it). The outcome does not depend on the order the heads are looked at.
-- Returns the entries offered.
-- Takes no lock it would wait for (`offer_if_ready`). While it serves, the serving trigger
-- stays out of its own writes (`slot_booking.defer_serving`): the units its reclaims give
-- back serve nothing more, and no line is served from inside another's serving.
CREATE FUNCTION serve_lines(p_slots BIGINT[], p_pools BIGINT[], p_now TIMESTAMPTZ)
RETURNS BIGINT[]
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_slots BIGINT[] := p_slots;
    v_pools BIGINT[] := p_pools;
    v_head BIGINT;
    v_progress BOOLEAN;
    v_offered BIGINT[] := '{}';
    v_deferred TEXT := coalesce(
        pg_catalog.current_setting('slot_booking.defer_serving', true), 'off');
BEGIN
    PERFORM pg_catalog.set_config('slot_booking.defer_serving', 'on', true);
    LOOP
        v_progress := false;
        FOR v_head IN
            SELECT DISTINCT h.id FROM (
                SELECT (SELECT w.id FROM waitlist_entries w WHERE w.slot_id = x.slot_id
                        ORDER BY w.priority DESC, w.id LIMIT 1) AS id
                FROM pg_catalog.unnest(v_slots) AS x(slot_id)
                UNION ALL
                SELECT pool_line_head(x.pool_id, p_now)
                FROM pg_catalog.unnest(v_pools) AS x(pool_id)) h
            WHERE h.id IS NOT NULL
            ORDER BY h.id
        LOOP
            IF offer_if_ready(v_head, p_now) THEN
                v_offered := v_offered || v_head;
                v_progress := true;
                -- The offered entry left its slot's line and its pools' lines: the next in
                -- each may have waited only behind it, so they are served too.
                SELECT ARRAY(SELECT DISTINCT x FROM pg_catalog.unnest(v_slots || sl.id) x),
                       ARRAY(SELECT DISTINCT x FROM pg_catalog.unnest(v_pools || sl.pools) x)
                INTO v_slots, v_pools
                FROM holds h JOIN slots sl ON sl.id = h.slot_id WHERE h.id = v_head;
            END IF;
        END LOOP;
        EXIT WHEN NOT v_progress;
    END LOOP;
    PERFORM pg_catalog.set_config('slot_booking.defer_serving', v_deferred, true);
    RETURN v_offered;
END
$$;

-- Serves slot `p_slot`'s line and the lines of its pools that have entries, at `p_now`, and
-- returns the entries offered. Locks the slot row, then its pools by id, waiting for them:
-- its callers hold that slot row already or nothing after it in the lock order (the serving
-- trigger, a join, a leave, the sweeper's pass). Replaces migration 11's, which served the
-- slot's line alone.
CREATE OR REPLACE FUNCTION serve_waitlist(p_slot BIGINT, p_now TIMESTAMPTZ) RETURNS BIGINT[]
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    sl RECORD;
    v_pools BIGINT[];
BEGIN
    SELECT id, pools, waiting INTO sl FROM slots WHERE id = p_slot FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN '{}';
    END IF;
    SELECT coalesce(pg_catalog.array_agg(p.id ORDER BY p.id) FILTER (WHERE p.waiting > 0),
                    '{}')
    INTO v_pools
    FROM (SELECT id, waiting FROM pools WHERE id = ANY (sl.pools)
          ORDER BY id FOR NO KEY UPDATE) p;
    IF sl.waiting = 0 AND pg_catalog.cardinality(v_pools) = 0 THEN
        RETURN '{}';
    END IF;
    RETURN serve_lines(ARRAY[p_slot], v_pools, p_now);
END
$$;

-- The sweeper's pass over pool `p_pool` at `p_now`, in a transaction of its own: the head of
-- its line (read before any lock), its slot's row, then that slot's pools by id, all waited
-- for in the lock order, then that slot's line and its pools' lines served. Returns the
-- entries offered (none when the head moved meanwhile and the new one's rows are busy).
CREATE FUNCTION serve_pool_head(p_pool BIGINT, p_now TIMESTAMPTZ) RETURNS BIGINT[]
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_slot BIGINT;
BEGIN
    SELECT slot_id INTO v_slot FROM waitlist_entries WHERE id = pool_line_head(p_pool, p_now);
    IF v_slot IS NULL THEN
        RETURN '{}';
    END IF;
    RETURN serve_waitlist(v_slot, p_now);
END
$$;

-- The trigger's function of migration 11, but for a transaction that defers serving: an
-- administrative pool change that must first give back expired holds of the pool's slots
-- (a statement of its own) decides the change on those units before any line takes them,
-- then serves the lines those units came back to, in the same transaction (`pools.rs`).
CREATE OR REPLACE FUNCTION serve_waitlist_on_slot_change() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF pg_catalog.current_setting('slot_booking.defer_serving', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM serve_waitlist(NEW.id, coalesce(
        (SELECT e.occurred_at FROM events e
         WHERE e.tx = pg_catalog.pg_current_xact_id() AND e.slot_id = NEW.id
         ORDER BY e.tx DESC, e.id DESC LIMIT 1),
        pg_catalog.statement_timestamp()));
    RETURN NULL;
END
$$;

-- The serving trigger of migration 11 fires for a slot with pools too, whether or not the
-- slot has a line of its own: units it gets back are its pools' too, and their lines may
-- wait for them (`serve_waitlist` looks at the pools' counts first). It also fires when
-- sales close or the slot is removed: its entries leave its pools' lines, whose next heads
-- may be ready.
DROP TRIGGER slots_serve_waitlist ON slots;

CREATE TRIGGER slots_serve_waitlist
    AFTER UPDATE ON slots
    FOR EACH ROW
    WHEN ((NEW.waiting > 0 OR pg_catalog.cardinality(NEW.pools) > 0)
          AND pg_catalog.pg_trigger_depth() = 0
          AND (NEW.remaining > OLD.remaining OR NEW.capacity <> OLD.capacity
               OR OLD.closed <> NEW.closed
               OR (OLD.removed_at IS NULL AND NEW.removed_at IS NOT NULL)))
    EXECUTE FUNCTION serve_waitlist_on_slot_change();

-- Change notifications (migration 6) when a pool's entries appear or are gone: availability
-- lists every slot of a pool whose line waits with no unit. The payload is empty (every
-- cached listing goes), as for a truncation.
CREATE FUNCTION notify_pool_line() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.pg_notify(pg_catalog.left('slot_booking:' || TG_TABLE_SCHEMA, 63), '');
    RETURN NULL;
END
$$;

CREATE TRIGGER pools_notify_line
    AFTER UPDATE ON pools
    FOR EACH ROW
    WHEN ((NEW.waiting = 0) <> (OLD.waiting = 0))
    EXECUTE FUNCTION notify_pool_line();
