//! Lock paths of the hold statements, forced into the interleavings that used to deadlock.
//!
//! Each test pauses every hold `INSERT` at a row trigger that waits on an advisory lock this
//! test holds, waits (through `pg_locks`) until both requests are parked there, and then lets
//! them go together. Which locks each request holds at that point is then fixed, not a matter
//! of scheduling, so a cycle shows up as `deadlock detected` on every run.

mod common;

use std::time::Duration as StdDuration;

use common::*;
use slot_booking::{HoldOutcome, Store};
use slot_booking_postgres::PostgresStore;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor};

/// Holds an advisory lock that every hold `INSERT` in the store's schema waits for, until
/// [`InsertGate::open`].
struct InsertGate {
    control: PgConnection,
    key: i64,
}

impl InsertGate {
    /// Closes the gate: takes the lock on a connection of its own, then installs the trigger.
    async fn close(ctx: &Ctx) -> InsertGate {
        let s = ctx.schema();
        // Advisory locks are per database and tests share it: a key of this schema's own.
        let key = i64::from(
            s.bytes()
                .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
                & 0x7fff_ffff,
        );
        let mut control = PgConnection::connect(&ctx.url).await.unwrap();
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(key)
            .execute(&mut control)
            .await
            .unwrap();
        ctx.pool()
            .execute(&*format!(
                "CREATE FUNCTION \"{s}\".pause_hold_insert() RETURNS trigger \
                 LANGUAGE plpgsql AS $$ BEGIN \
                     PERFORM pg_advisory_xact_lock_shared({key}); RETURN NEW; \
                 END $$; \
                 CREATE TRIGGER pause_hold_insert BEFORE INSERT ON \"{s}\".holds \
                 FOR EACH ROW EXECUTE FUNCTION \"{s}\".pause_hold_insert()"
            ))
            .await
            .unwrap();
        InsertGate { control, key }
    }

    /// Waits until `n` statements are parked at the gate.
    async fn until_waiting(&mut self, n: i64) {
        for _ in 0..20_000 {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks \
                 WHERE locktype = 'advisory' AND NOT granted AND classid = 0 AND objid = $1 \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .bind(self.key)
            .fetch_one(&mut self.control)
            .await
            .unwrap();
            if waiting == n {
                return;
            }
            assert!(
                waiting < n,
                "{waiting} statements at the gate, expected {n}"
            );
            tokio::time::sleep(StdDuration::from_millis(2)).await;
        }
        panic!("{n} statements never reached the gate");
    }

    /// Lets every parked statement go at once.
    async fn open(mut self) {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(self.key)
            .execute(&mut self.control)
            .await
            .unwrap();
        self.control.close().await.unwrap();
    }
}

async fn hold_at(store: PostgresStore, slot: slot_booking::SlotId, k: &'static str) -> HoldOutcome {
    let k = key(k);
    store
        .create_hold(request(slot, &k, at(600)))
        .await
        .unwrap_or_else(|error| panic!("hold {k:?} failed: {error}"))
        .outcome
}

/// Request A takes slot X with key `a`, request B slot Y with key `b`; both slots are full with
/// an expired hold whose key is the *other* request's (`b` on X, `a` on Y). Both run the
/// reclaim statement, so each rewrites the expired hold of its own slot, whose key the other
/// request is about to insert. With the keys' uniqueness enforced by an index on the holds
/// themselves, each reclaim wrote a new index entry for the other's key, and each insert then
/// waited for the other transaction: a cycle, `deadlock detected`. Keys live in a table that
/// is only ever inserted into, so a reclaim writes no key and the two requests never wait for
/// each other: both are told their key is in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaims_on_two_slots_with_crossed_keys_do_not_deadlock() {
    let Some(ctx) = setup("crossed_reclaims").await else {
        return;
    };
    let store = &ctx.store;
    let (x, y) = (slot(store, 1).await, slot(store, 1).await);
    // Expire at(300); the requests come at(600), before the slots start at(3600).
    assert!(matches!(
        hold(store, x, "b", at(0)).await,
        HoldOutcome::Created(_)
    ));
    assert!(matches!(
        hold(store, y, "a", at(0)).await,
        HoldOutcome::Created(_)
    ));

    let mut gate = InsertGate::close(&ctx).await;
    let a = tokio::spawn(hold_at(store.clone(), x, "a"));
    let b = tokio::spawn(hold_at(store.clone(), y, "b"));
    gate.until_waiting(2).await;
    gate.open().await;

    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert!(
        matches!(&a, HoldOutcome::KeyReused(Some(hold)) if hold.slot_id == y),
        "A: {a:?}"
    );
    assert!(
        matches!(&b, HoldOutcome::KeyReused(Some(hold)) if hold.slot_id == x),
        "B: {b:?}"
    );
    // The refused reclaims were rolled back with their inserts: both expired holds are still
    // there, still taking their unit.
    for slot in [x, y] {
        assert_eq!(counts(store, slot).await, (1, 0, 1, 0));
    }
}

/// The same crossing on the fast path: two new keys, each about to be inserted by the other
/// request on the other slot, after each request took a unit of its own slot. The second key
/// insert waits for the first request's statement to end; that statement holds its own slot's
/// row but waits for nothing, so the wait ends. Both holds are created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_path_inserts_on_two_slots_do_not_wait_on_each_other() {
    let Some(ctx) = setup("crossed_fast_holds").await else {
        return;
    };
    let store = &ctx.store;
    let (x, y) = (slot(store, 1).await, slot(store, 1).await);
    let mut gate = InsertGate::close(&ctx).await;
    let a = tokio::spawn(hold_at(store.clone(), x, "a"));
    let b = tokio::spawn(hold_at(store.clone(), y, "b"));
    gate.until_waiting(2).await;
    gate.open().await;
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert!(
        matches!(&a, HoldOutcome::Created(h) if h.slot_id == x),
        "A: {a:?}"
    );
    assert!(
        matches!(&b, HoldOutcome::Created(h) if h.slot_id == y),
        "B: {b:?}"
    );
}

/// One key, two slots, both requests past their decrement when they meet at the key: the
/// later insert waits for the earlier statement, which waits for nothing; then it fails on
/// the key, its decrement is undone, and it is told the key is in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_on_two_slots_at_once_creates_one_hold() {
    let Some(ctx) = setup("same_key_two_slots").await else {
        return;
    };
    let store = &ctx.store;
    let (x, y) = (slot(store, 1).await, slot(store, 1).await);
    let mut gate = InsertGate::close(&ctx).await;
    let a = tokio::spawn(hold_at(store.clone(), x, "k"));
    let b = tokio::spawn(hold_at(store.clone(), y, "k"));
    gate.until_waiting(2).await;
    gate.open().await;
    let outcomes = [a.await.unwrap(), b.await.unwrap()];
    let created: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            HoldOutcome::Created(h) => Some(h.slot_id),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, HoldOutcome::KeyReused(Some(h)) if h.slot_id == created[0])),
        "{outcomes:?}"
    );
    for slot in [x, y] {
        let expected = if slot == created[0] {
            (1, 0, 1, 0)
        } else {
            (1, 1, 0, 0)
        };
        assert_eq!(counts(store, slot).await, expected);
    }
}
