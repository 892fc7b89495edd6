//! What is particular to the SQLite store (the shared behaviour is the conformance suite).

mod common;

use chrono::Duration;
use common::*;
use slot_booking::HoldStore;
use slot_booking::{HoldStatus, NewSlot, SlotId, StoreErrorKind, Transition};
use slot_booking_sqlite::SqliteStore;

#[tokio::test]
async fn timestamps_round_trip_to_the_microsecond() {
    let db = TempDb::new("roundtrip");
    let store = db.store().await;
    let starts = at(3600) + Duration::microseconds(7);
    let new = NewSlot::new(starts, starts + Duration::microseconds(1), 3);
    let slot = store.create_slot(&new, chrono::Utc::now()).await.unwrap();
    assert_eq!((slot.starts_at, slot.ends_at), (new.starts_at, new.ends_at));
    assert_eq!(slot.stored_remaining, 3);
    assert_eq!(
        store.get_slot(slot.slot_id).await.unwrap(),
        Some(slot.clone())
    );

    let k = key("rt");
    let now = at(1) + Duration::microseconds(999_999);
    let mut req = request(slot.slot_id, &k, now);
    req.expires_at = now + Duration::microseconds(1);
    let hold = created(store.create_hold(req).await.unwrap().outcome);
    assert_eq!(hold.expires_at, req.expires_at);
    assert_eq!(hold.status, HoldStatus::Held);
    assert_eq!(
        store
            .get_hold(hold.hold_id, &slot_booking::Scope::BackOffice, now)
            .await
            .unwrap()
            .outcome,
        Some(hold.clone())
    );
    let confirmed = match store
        .confirm_hold(hold.hold_id, &slot_booking::Scope::BackOffice, now)
        .await
        .unwrap()
        .outcome
    {
        Transition::Applied(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(confirmed.confirmed_at, Some(now));
}

#[tokio::test]
async fn check_constraints_back_the_invariant() {
    let db = TempDb::new("checks");
    let store = db.store().await;
    let slot_id = slot(&store, 1).await;
    for sql in [
        "UPDATE slot_booking_slots SET remaining = -1 WHERE id = ?1",
        "UPDATE slot_booking_slots SET remaining = capacity + 1 WHERE id = ?1",
        "UPDATE slot_booking_slots SET ends_at = starts_at WHERE id = ?1",
        "UPDATE slot_booking_slots SET capacity = 0, remaining = 0 WHERE id = ?1",
    ] {
        let err = sqlx::query(sql)
            .bind(slot_id.get())
            .execute(store.pool())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::CheckViolation),
            "{sql}: {err}"
        );
    }
    let h = created(hold(&store, slot_id, "a", at(0)).await);
    let err = sqlx::query("UPDATE slot_booking_holds SET status = 'lost' WHERE id = ?1")
        .bind(h.hold_id.get())
        .execute(store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::CheckViolation)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_mode_works() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    let slot_id = slot(&store, 2).await;
    created(hold(&store, slot_id, "a", at(0)).await);
    // An in-memory database lives only as long as its connection: the pool must hold exactly
    // one, never closed for idleness or age. A second connection would open an empty
    // database, so many concurrent calls (which a larger pool would spread over several
    // connections) must all see the same data.
    let options = store.pool().options();
    assert_eq!(options.get_max_connections(), 1);
    assert_eq!(options.get_min_connections(), 1);
    assert_eq!(options.get_idle_timeout(), None);
    assert_eq!(options.get_max_lifetime(), None);
    let mut reads = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let store = store.clone();
        reads.spawn(async move { store.get_slot(slot_id).await });
    }
    while let Some(slot) = reads.join_next().await {
        assert_eq!(slot.unwrap().unwrap().unwrap().stored_remaining, 1);
    }
    assert_eq!(store.availability(at(0)).await.unwrap().outcome.len(), 1);
}

#[tokio::test]
async fn store_errors_are_mapped() {
    let db = TempDb::new("closed");
    let store = db.store().await;
    store.pool().close().await;
    let err = store.get_slot(SlotId(1)).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable);

    // A store whose tables were never created fails (not transient).
    let db = TempDb::new("unmigrated");
    let store = SqliteStore::connect(&db.url()).await.unwrap();
    let err = store.get_slot(SlotId(1)).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Failed);
}

/// The pool of `connect` keeps its connections (no idle timeout, no maximum lifetime): with
/// either, sqlx 0.9.0 runs a reaper task that can spin on one core for good
/// (launchbadge/sqlx#3645).
#[tokio::test]
async fn connect_runs_no_pool_reaper() {
    let db = TempDb::new("reaper");
    let store = db.store().await;
    let options = store.pool().options();
    assert_eq!(options.get_idle_timeout(), None);
    assert_eq!(options.get_max_lifetime(), None);
}
