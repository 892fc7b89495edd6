//! What the MariaDB/MySQL store relies on from the server and the driver, and how it answers
//! when the server ends a transaction: found rows, a conflict retried whole, a conflict that
//! outlasts the retries, a permanent failure, prefixes.

mod common;

use std::time::Duration;

use common::{at, key, slot, t0};
use slot_booking::{
    EventKind, EventStore, HoldOutcome, HoldRequest, HoldStore, RenewRequest, Scope, SlotAdmin,
    SlotChange, StoreErrorKind, Transition,
};
use slot_booking_mysql::sqlx::{self, Connection, Executor};
use slot_booking_mysql::{Conflict, MySqlStore, RetryPolicy};

fn request<'a>(
    slot_id: slot_booking::SlotId,
    key: &'a slot_booking::IdempotencyKey,
) -> HoldRequest<'a> {
    HoldRequest {
        slot_id,
        key,
        owner: None,
        quantity: 1,
        now: t0(),
        expires_at: at(60),
    }
}

/// sqlx connects with `CLIENT_FOUND_ROWS`: an `UPDATE` reports the rows its `WHERE` matched,
/// changed or not. Every conditional update of the store states "the value moves" in its
/// `WHERE` because of this; if the driver ever reported changed rows instead, this fails first.
#[tokio::test]
async fn rows_affected_are_found_rows() {
    let db = common::database(&common::server_url(), "found").await;
    let mut conn = sqlx::MySqlConnection::connect(&db.url()).await.unwrap();
    conn.execute("CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL)")
        .await
        .unwrap();
    conn.execute("INSERT INTO t VALUES (1, 5)").await.unwrap();
    let same = conn
        .execute("UPDATE t SET n = 5 WHERE id = 1")
        .await
        .unwrap();
    assert_eq!(same.rows_affected(), 1, "a matched, unchanged row counts");
    let none = conn
        .execute("UPDATE t SET n = 5 WHERE id = 2")
        .await
        .unwrap();
    assert_eq!(none.rows_affected(), 0);
}

/// Writes that change nothing append nothing, although their rows match: closing a closed
/// slot, setting the capacity a slot has, renewing a hold already at its maximum life.
#[tokio::test]
async fn writes_that_change_nothing_append_no_event() {
    let owned = common::owned_store("noop").await;
    let store = &owned.store;
    let slot_id = slot(store, 3).await;
    let end = store.event_log_end().await.unwrap();
    let closed = store.set_closed(slot_id, true, t0()).await.unwrap().outcome;
    assert!(matches!(closed, SlotChange::Applied(ref s) if s.closed));
    let again = store.set_closed(slot_id, true, t0()).await.unwrap().outcome;
    assert!(matches!(again, SlotChange::Applied(ref s) if s.closed));
    store.set_closed(slot_id, false, t0()).await.unwrap();
    let same = store
        .change_capacity(slot_id, 3.into(), t0())
        .await
        .unwrap()
        .outcome;
    assert!(matches!(same, SlotChange::Applied(ref s) if s.capacity == 3));
    let k = key("renew-at-max");
    let HoldOutcome::Created(hold) = store
        .create_hold(request(slot_id, &k))
        .await
        .unwrap()
        .outcome
    else {
        panic!("the hold was refused");
    };
    // The maximum life is the hold's whole life: nothing to move.
    let renew = RenewRequest {
        hold_id: hold.hold_id,
        scope: &Scope::Anonymous,
        now: at(1),
        lifetime: chrono::Duration::seconds(600),
        max_life: chrono::Duration::seconds(60),
    };
    let renewed = store.renew_hold(renew).await.unwrap().outcome;
    assert_eq!(renewed, Transition::Applied(hold.clone()));
    let kinds: Vec<EventKind> = store
        .read_events_after(end, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|event| event.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            EventKind::SlotClosed,
            EventKind::SlotReopened,
            EventKind::HoldPlaced
        ]
    );
}

/// A store on `url` whose lock waits give up after a second (error 1205, a conflict).
async fn impatient_store(url: &str, policy: RetryPolicy) -> MySqlStore {
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(4)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET SESSION innodb_lock_wait_timeout = 1")
                    .await?;
                Ok(())
            })
        })
        .connect(url)
        .await
        .unwrap();
    MySqlStore::new(pool).with_retry_policy(policy)
}

/// A cancel whose hold the test's own transaction holds until the cancel has answered: the
/// store's step waits for the row and gives up after a second (1205, a conflict) as often as
/// its policy tries. Returns the cancel's outcome and the conflicts the store retried.
async fn cancel_behind_a_lock(store: MySqlStore, url: &str) -> (Result<Transition, String>, u64) {
    let slot_id = slot(&store, 2).await;
    let k = key("behind-a-lock");
    let HoldOutcome::Created(hold) = store
        .create_hold(request(slot_id, &k))
        .await
        .unwrap()
        .outcome
    else {
        panic!("the hold was refused");
    };
    let mut other = sqlx::MySqlConnection::connect(url).await.unwrap();
    let mut tx = other.begin().await.unwrap();
    sqlx::query("UPDATE slot_booking_holds SET expires_at = expires_at + 1 WHERE id = ?")
        .bind(hold.hold_id.get())
        .execute(&mut *tx)
        .await
        .unwrap();
    let counted = store.clone();
    let cancel = tokio::spawn(async move {
        store
            .cancel_hold(hold.hold_id, &Scope::Anonymous, at(1))
            .await
            .map(|d| d.outcome)
            .map_err(|e| {
                let conflict = std::error::Error::source(&e).is_some_and(|s| s.is::<Conflict>());
                format!("{:?} conflict={conflict}", e.kind())
            })
    });
    let outcome = cancel.await.unwrap();
    tx.commit().await.unwrap();
    (outcome, counted.conflicts_retried())
}

#[tokio::test]
async fn a_step_that_loses_a_conflict_runs_again_whole() {
    let owned = common::owned_store("conflict").await;
    let url = owned.guard.url();
    let store = impatient_store(&url, RetryPolicy::default()).await;
    // The commit comes after the retry: the lock is released from this task, so the store's
    // cancel is awaited only after the test's transaction commits.
    let (outcome, retried) = {
        let slot_id = slot(&store, 2).await;
        let k = key("behind-a-lock");
        let HoldOutcome::Created(hold) = store
            .create_hold(request(slot_id, &k))
            .await
            .unwrap()
            .outcome
        else {
            panic!("the hold was refused");
        };
        let mut other = sqlx::MySqlConnection::connect(&url).await.unwrap();
        let mut tx = other.begin().await.unwrap();
        sqlx::query("UPDATE slot_booking_holds SET expires_at = expires_at + 1 WHERE id = ?")
            .bind(hold.hold_id.get())
            .execute(&mut *tx)
            .await
            .unwrap();
        let runner = store.clone();
        let cancel = tokio::spawn(async move {
            runner
                .cancel_hold(hold.hold_id, &Scope::Anonymous, at(1))
                .await
                .map(|d| d.outcome)
                .map_err(|e| format!("{e:?}"))
        });
        while store.conflicts_retried() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tx.commit().await.unwrap();
        (cancel.await.unwrap(), store.conflicts_retried())
    };
    let Ok(Transition::Applied(hold)) = outcome else {
        panic!("the cancel was not applied: {outcome:?}");
    };
    assert_eq!(hold.status, slot_booking::HoldStatus::Cancelled);
    assert!(retried >= 1, "the conflict was not retried");
    // Its unit went back once.
    let slot = store.get_slot(hold.slot_id).await.unwrap().unwrap();
    assert_eq!(slot.stored_remaining, 2);
}

#[tokio::test]
async fn a_conflict_past_the_last_attempt_is_unavailable() {
    let owned = common::owned_store("exhausted").await;
    let url = owned.guard.url();
    let once = RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    };
    let store = impatient_store(&url, once).await;
    let (outcome, retried) = cancel_behind_a_lock(store, &url).await;
    assert_eq!(outcome, Err("Unavailable conflict=true".to_owned()));
    assert_eq!(retried, 0);
}

/// A missing table is a permanent failure, never "unavailable".
#[tokio::test]
async fn a_permanent_failure_is_not_unavailable() {
    let db = common::database(&common::server_url(), "unmigrated").await;
    let store = MySqlStore::connect(&db.url()).await.unwrap();
    let error = store
        .create_slot(&slot_booking::NewSlot::new(at(3600), at(7200), 1), t0())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Failed);
}

/// Two prefixes in one database are two independent stores.
#[tokio::test]
async fn prefixes_keep_stores_apart() {
    let db = common::database(&common::server_url(), "prefixes").await;
    let a = db.store().await;
    let b = MySqlStore::connect(&db.url())
        .await
        .unwrap()
        .with_table_prefix("other_")
        .unwrap();
    b.migrate().await.unwrap();
    assert_eq!(b.table_prefix(), "other_");
    let slot_a = slot(&a, 1).await;
    assert!(b.get_slot(slot_a).await.unwrap().is_none());
    let slot_b = slot(&b, 1).await;
    let k = key("same-key");
    let held_a = a.create_hold(request(slot_a, &k)).await.unwrap().outcome;
    let held_b = b.create_hold(request(slot_b, &k)).await.unwrap().outcome;
    assert!(matches!(held_a, HoldOutcome::Created(_)));
    assert!(matches!(held_b, HoldOutcome::Created(_)));
    assert!(MySqlStore::connect(&db.url())
        .await
        .unwrap()
        .with_table_prefix("Bad")
        .is_err());
}

/// A step cancelled while it waits (its future dropped, as a timeout or a closed request
/// does) leaves its connection's session read-only by default (the unit guard's setting,
/// restored only when a step ends): no write of the store may then run outside a step. Here
/// the pool has one connection, so the write after the cancel gets that one.
#[tokio::test]
async fn a_cancelled_step_leaves_no_write_refused() {
    let owned = common::owned_store("cancelled").await;
    let url = owned.guard.url();
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let store = MySqlStore::new(pool);
    let slot_id = slot(&store, 2).await;
    let k = key("cancelled");
    let HoldOutcome::Created(hold) = store
        .create_hold(request(slot_id, &k))
        .await
        .unwrap()
        .outcome
    else {
        panic!("the hold was refused");
    };
    let mut other = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let mut tx = other.begin().await.unwrap();
    sqlx::query("UPDATE slot_booking_holds SET expires_at = expires_at + 1 WHERE id = ?")
        .bind(hold.hold_id.get())
        .execute(&mut *tx)
        .await
        .unwrap();
    let runner = store.clone();
    let cancel = tokio::spawn(async move {
        runner
            .cancel_hold(hold.hold_id, &Scope::Anonymous, at(1))
            .await
    });
    // The store's step waits for a row `other` locked: its locking read shows in the process
    // list, and cannot finish while `other` is open. (`INNODB_TRX` is no signal: MariaDB 10.11
    // can list such a transaction as `RUNNING` with id 0 for as long as it waits, which hung
    // this test in CI.)
    let mut watcher = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let mut polls = 0;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND INFO LIKE '%FOR UPDATE%'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        polls += 1;
        assert!(polls < 2_000, "the step never reached its locking read");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    cancel.abort();
    assert!(cancel.await.unwrap_err().is_cancelled());
    tx.commit().await.unwrap();
    // The cancelled step kept nothing, and the store's one connection takes writes of every
    // kind: a pool, a slot, a hold.
    let stored = store
        .get_hold(hold.hold_id, &Scope::BackOffice, t0())
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!(stored.status, slot_booking::HoldStatus::Held);
    slot_booking::PoolStore::create_pool(&store, &slot_booking::NewPool { capacity: 3 }, t0())
        .await
        .unwrap();
    let other_slot = slot(&store, 1).await;
    let again = store
        .create_hold(request(other_slot, &key("after")))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(again, HoldOutcome::Created(_)), "{again:?}");
}

/// The pool of `connect` keeps its connections (no idle timeout, no maximum lifetime): with
/// either, sqlx 0.9.0 runs a reaper task that can spin on one core for good and keep its
/// runtime from shutting down (launchbadge/sqlx#3645: it hung a cluster suite in CI).
#[test]
fn connect_runs_no_pool_reaper() {
    let options = MySqlStore::pool_options();
    assert_eq!(options.get_idle_timeout(), None);
    assert_eq!(options.get_max_lifetime(), None);
}
