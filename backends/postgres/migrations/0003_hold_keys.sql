-- slot_booking (PostgreSQL), migration 3: idempotency keys in a table of their own.
--
-- A unique constraint on holds.idempotency_key made every non-HOT update of a hold (a reclaim
-- setting status = 'expired' is one: status is in the partial indexes' predicates) write a new
-- entry into the unique index. A hold insert with the same key then waits for the updating
-- transaction, and two reclaims on two slots, each rewriting the key the other was about to
-- insert, waited for each other: a deadlock. Keys now live in hold_keys, which is only ever
-- inserted into: no update writes a key, so an insert waits on a key only while another
-- statement inserts that same key, as the last thing it does.
--
-- Upgrading: stop instances of slot_booking_postgres 0.1 before migrating; they would insert
-- holds without a key row.

CREATE TABLE hold_keys (
    idempotency_key TEXT PRIMARY KEY,
    hold_id         BIGINT NOT NULL REFERENCES holds (id)
);

INSERT INTO hold_keys (idempotency_key, hold_id)
SELECT idempotency_key, id FROM holds;

ALTER TABLE holds DROP CONSTRAINT holds_idempotency_key_unique;

-- Availability now counts expired held holds per future slot through the per-slot index of
-- migration 1 (holds_held_by_slot_expiry): its cost follows the future slots, not the history
-- of past ones. The expiry-first index of migration 2 read every expired held hold of every
-- slot, past ones included, and nothing else uses it.
DROP INDEX holds_held_by_expiry;
