//! Outcome-by-outcome behaviour of the PostgreSQL store, through the `Store` trait.

mod common;

use chrono::Duration;
use common::*;
use slot_booking::{
    HoldId, HoldOutcome, HoldStatus, NewSlot, SlotId, Store, StoreErrorKind, Transition,
};
use slot_booking_postgres::PostgresStore;

fn created(outcome: HoldOutcome) -> slot_booking::Hold {
    match outcome {
        HoldOutcome::Created(h) => h,
        other => panic!("expected Created, got {other:?}"),
    }
}

#[tokio::test]
async fn timestamps_round_trip_to_the_microsecond() {
    let Some(ctx) = setup("roundtrip").await else {
        return;
    };
    let store = ctx.store.clone();
    let starts = at(3600) + Duration::microseconds(7);
    let new = NewSlot::new(starts, starts + Duration::microseconds(1), 3);
    let slot = store.create_slot(&new).await.unwrap();
    assert_eq!((slot.starts_at, slot.ends_at), (new.starts_at, new.ends_at));
    assert_eq!(slot.remaining, 3);
    assert_eq!(
        store.get_slot(slot.slot_id).await.unwrap(),
        Some(slot.clone())
    );

    let k = key("rt");
    let now = at(1) + Duration::microseconds(999_999);
    let mut req = request(slot.slot_id, &k, now);
    req.expires_at = now + Duration::microseconds(1);
    let hold = created(store.create_hold(req).await.unwrap());
    assert_eq!(hold.expires_at, req.expires_at);
    assert_eq!(hold.status, HoldStatus::Held);
    assert_eq!(
        store.get_hold(hold.hold_id).await.unwrap(),
        Some(hold.clone())
    );
    let confirmed = match store.confirm_hold(hold.hold_id, now).await.unwrap() {
        Transition::Applied(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(confirmed.confirmed_at, Some(now));
}

#[tokio::test]
async fn slot_not_found_closed_and_sold_out() {
    let Some(ctx) = setup("outcomes").await else {
        return;
    };
    let store = ctx.store.clone();
    assert_eq!(
        hold(&store, SlotId(999), "a", at(0)).await,
        HoldOutcome::SlotNotFound
    );

    let slot_id = slot(&store, 1).await;
    // The slot starts at at(3600): at exactly that instant it is closed.
    assert_eq!(
        hold(&store, slot_id, "b", at(3600)).await,
        HoldOutcome::SlotClosed
    );
    created(hold(&store, slot_id, "c", at(0)).await);
    assert_eq!(
        hold(&store, slot_id, "d", at(0)).await,
        HoldOutcome::SoldOut
    );
    assert_eq!(store.get_slot(slot_id).await.unwrap().unwrap().remaining, 0);
    assert_invariant(&store, slot_id).await;
}

#[tokio::test]
async fn replay_and_key_reuse_never_consume_capacity() {
    let Some(ctx) = setup("replay").await else {
        return;
    };
    let store = ctx.store.clone();
    let a = slot(&store, 2).await;
    let b = slot(&store, 2).await;
    let first = created(hold(&store, a, "k", at(0)).await);

    // The replay passes the decrement, hits the unique key and must undo the decrement.
    assert_eq!(
        hold(&store, a, "k", at(1)).await,
        HoldOutcome::Replayed(first.clone())
    );
    assert_eq!(store.get_slot(a).await.unwrap().unwrap().remaining, 1);
    assert_eq!(
        hold(&store, b, "k", at(1)).await,
        HoldOutcome::KeyReused(first.clone())
    );
    assert_eq!(store.get_slot(b).await.unwrap().unwrap().remaining, 2);

    // A replay wins over sold out and over closed, and shows the current state.
    created(hold(&store, a, "other", at(0)).await);
    assert_eq!(
        hold(&store, a, "k", at(2)).await,
        HoldOutcome::Replayed(first.clone())
    );
    let confirmed = match store.confirm_hold(first.hold_id, at(3)).await.unwrap() {
        Transition::Applied(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        hold(&store, a, "k", at(4000)).await,
        HoldOutcome::Replayed(confirmed)
    );
    assert_eq!(store.get_slot(a).await.unwrap().unwrap().remaining, 0);
    assert_invariant(&store, a).await;
    assert_invariant(&store, b).await;
}

#[tokio::test]
async fn expired_hold_is_reclaimed_for_a_new_hold_on_a_full_slot() {
    let Some(ctx) = setup("reclaim").await else {
        return;
    };
    let store = ctx.store.clone();
    let slot_id = slot(&store, 1).await;
    let old = created(hold(&store, slot_id, "old", at(0)).await);
    assert_eq!(
        hold(&store, slot_id, "x", at(10)).await,
        HoldOutcome::SoldOut
    );

    // Availability counts the expired hold as free before any reclaim.
    let later = old.expires_at;
    let avail = store.availability(later).await.unwrap();
    assert_eq!(avail.len(), 1);
    assert_eq!(avail[0].remaining, 1);
    assert_eq!(store.get_slot(slot_id).await.unwrap().unwrap().remaining, 0);

    let new = created(hold(&store, slot_id, "new", later).await);
    assert_eq!(new.slot_id, slot_id);
    let old_now = store.get_hold(old.hold_id).await.unwrap().unwrap();
    assert_eq!(old_now.status, HoldStatus::Expired);
    assert_eq!(counts(&store, slot_id).await, (1, 0, 1, 0));
    // The old hold can no longer be confirmed or cancelled.
    assert!(matches!(
        store.confirm_hold(old.hold_id, later).await.unwrap(),
        Transition::NotApplied(h) if h.status == HoldStatus::Expired
    ));
    assert!(matches!(
        store.cancel_hold(old.hold_id, later).await.unwrap(),
        Transition::NotApplied(_)
    ));
    assert_invariant(&store, slot_id).await;
}

#[tokio::test]
async fn confirm_outcomes() {
    let Some(ctx) = setup("confirm").await else {
        return;
    };
    let store = ctx.store.clone();
    let slot_id = slot(&store, 3).await;
    assert_eq!(
        store.confirm_hold(HoldId(42), at(0)).await.unwrap(),
        Transition::NotFound
    );

    let h = created(hold(&store, slot_id, "a", at(0)).await);
    let applied = match store.confirm_hold(h.hold_id, at(1)).await.unwrap() {
        Transition::Applied(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(applied.status, HoldStatus::Confirmed);
    assert_eq!(applied.confirmed_at, Some(at(1)));
    // Confirming again changes nothing.
    assert_eq!(
        store.confirm_hold(h.hold_id, at(2)).await.unwrap(),
        Transition::NotApplied(applied.clone())
    );
    // Confirm exactly at expires_at fails.
    let e = created(hold(&store, slot_id, "b", at(0)).await);
    assert_eq!(
        store.confirm_hold(e.hold_id, e.expires_at).await.unwrap(),
        Transition::NotApplied(e.clone())
    );
    // Confirm of a cancelled hold fails.
    let c = created(hold(&store, slot_id, "c", at(0)).await);
    assert!(matches!(
        store.cancel_hold(c.hold_id, at(1)).await.unwrap(),
        Transition::Applied(_)
    ));
    assert!(matches!(
        store.confirm_hold(c.hold_id, at(2)).await.unwrap(),
        Transition::NotApplied(h) if h.status == HoldStatus::Cancelled
    ));
    assert_eq!(store.get_slot(slot_id).await.unwrap().unwrap().remaining, 1);
    assert_invariant(&store, slot_id).await;
}

#[tokio::test]
async fn cancel_outcomes() {
    let Some(ctx) = setup("cancel").await else {
        return;
    };
    let store = ctx.store.clone();
    let slot_id = slot(&store, 2).await;
    assert_eq!(
        store.cancel_hold(HoldId(42), at(0)).await.unwrap(),
        Transition::NotFound
    );

    let held = created(hold(&store, slot_id, "a", at(0)).await);
    let confirmed = created(hold(&store, slot_id, "b", at(0)).await);
    store.confirm_hold(confirmed.hold_id, at(1)).await.unwrap();
    assert_eq!(store.get_slot(slot_id).await.unwrap().unwrap().remaining, 0);

    let cancelled = match store.cancel_hold(held.hold_id, at(2)).await.unwrap() {
        Transition::Applied(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(cancelled.status, HoldStatus::Cancelled);
    assert_eq!(cancelled.cancelled_at, Some(at(2)));
    assert_eq!(store.get_slot(slot_id).await.unwrap().unwrap().remaining, 1);
    // Cancelling again returns nothing more.
    assert_eq!(
        store.cancel_hold(held.hold_id, at(3)).await.unwrap(),
        Transition::NotApplied(cancelled)
    );
    assert_eq!(store.get_slot(slot_id).await.unwrap().unwrap().remaining, 1);

    // A confirmed hold can be cancelled, even after its expires_at.
    let late = confirmed.expires_at + Duration::minutes(1);
    assert!(matches!(
        store.cancel_hold(confirmed.hold_id, late).await.unwrap(),
        Transition::Applied(h) if h.status == HoldStatus::Cancelled && h.cancelled_at == Some(late)
    ));
    assert_eq!(store.get_slot(slot_id).await.unwrap().unwrap().remaining, 2);

    // An expired held hold cannot be cancelled.
    let e = created(hold(&store, slot_id, "c", at(0)).await);
    assert_eq!(
        store.cancel_hold(e.hold_id, e.expires_at).await.unwrap(),
        Transition::NotApplied(e)
    );
    assert_invariant(&store, slot_id).await;
}

#[tokio::test]
async fn availability_lists_future_slots_in_order() {
    let Some(ctx) = setup("avail").await else {
        return;
    };
    let store = ctx.store.clone();
    let late = store
        .create_slot(&NewSlot::new(at(200), at(300), 2))
        .await
        .unwrap();
    let early_b = store
        .create_slot(&NewSlot::new(at(100), at(300), 1))
        .await
        .unwrap();
    let early_a = store
        .create_slot(&NewSlot::new(at(100), at(200), 1))
        .await
        .unwrap();
    let past = store
        .create_slot(&NewSlot::new(at(-100), at(300), 1))
        .await
        .unwrap();
    created(hold(&store, early_b.slot_id, "x", at(0)).await);

    let listed = store.availability(at(0)).await.unwrap();
    let ids: Vec<_> = listed.iter().map(|e| e.slot_id).collect();
    assert!(early_b.slot_id < early_a.slot_id);
    assert_eq!(ids, vec![early_b.slot_id, early_a.slot_id, late.slot_id]);
    assert!(!ids.contains(&past.slot_id));
    assert_eq!(listed[0].remaining, 0, "sold-out slots are listed");
    assert_eq!(listed[2].capacity, 2);
    assert_eq!(listed[2].starts_at, at(200));
    // At a slot's starts_at it is no longer listed.
    let ids: Vec<_> = store
        .availability(at(100))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.slot_id)
        .collect();
    assert_eq!(ids, vec![late.slot_id]);
}

#[tokio::test]
async fn check_constraints_back_the_invariant() {
    let Some(ctx) = setup("checks").await else {
        return;
    };
    let store = ctx.store.clone();
    let slot_id = slot(&store, 1).await;
    let s = ctx.schema();
    for sql in [
        format!("UPDATE \"{s}\".slots SET remaining = -1 WHERE id = $1"),
        format!("UPDATE \"{s}\".slots SET remaining = capacity + 1 WHERE id = $1"),
        format!("UPDATE \"{s}\".slots SET ends_at = starts_at WHERE id = $1"),
        format!("UPDATE \"{s}\".slots SET capacity = 0, remaining = 0 WHERE id = $1"),
    ] {
        let err = sqlx::query(&sql)
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
    let err = sqlx::query(&format!(
        "UPDATE \"{s}\".holds SET status = 'lost' WHERE id = $1"
    ))
    .bind(h.hold_id.get())
    .execute(store.pool())
    .await
    .unwrap_err();
    assert!(
        matches!(&err, sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::CheckViolation)
    );
}

#[tokio::test]
async fn store_errors_are_mapped() {
    let Some(ctx) = setup("store_errors_are_mapped").await else {
        return;
    };
    // A store whose schema was never migrated fails (not transient).
    let other = unique_schema("sbtest_unmigrated");
    let store = PostgresStore::with_schema(ctx.pool().clone(), &other).unwrap();
    let err = store.get_slot(SlotId(1)).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Failed, "{err}");

    // A closed pool is unavailable.
    let store = ctx.second_store().await;
    store.pool().close().await;
    let err = store.get_slot(SlotId(1)).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");

    // Nothing listens on this port: unavailable.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(std::time::Duration::from_secs(2))
        .connect_lazy("postgres://postgres@127.0.0.1:1/postgres")
        .unwrap();
    let err = PostgresStore::new(pool)
        .get_slot(SlotId(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn schema_names_must_be_plain_identifiers() {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://localhost/none")
        .unwrap();
    for good in ["slot_booking", "x", "_a1", "a_b_c", &"s".repeat(63)] {
        let store = PostgresStore::with_schema(pool.clone(), good).unwrap();
        assert_eq!(store.schema(), good);
    }
    for bad in [
        "",
        "1abc",
        "Upper",
        "with space",
        "quo\"te",
        "semi;colon",
        "pg_catalog",
        "dash-ed",
        "é",
        &"s".repeat(64),
    ] {
        assert!(
            PostgresStore::with_schema(pool.clone(), bad).is_err(),
            "{bad:?}"
        );
    }
    assert_eq!(PostgresStore::new(pool).schema(), "slot_booking");
}

#[tokio::test]
async fn tables_live_in_the_configured_schema() {
    let Some(ctx) = setup("tables_live_in_the_configured_schema").await else {
        return;
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = $1 ORDER BY table_name",
    )
    .bind(ctx.schema())
    .fetch_all(ctx.pool())
    .await
    .unwrap();
    assert_eq!(tables, ["holds", "slot_booking_migrations", "slots"]);
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname",
    )
    .bind(ctx.schema())
    .fetch_all(ctx.pool())
    .await
    .unwrap();
    assert!(
        indexes
            .iter()
            .any(|d| d.contains("(slot_id, expires_at) WHERE (status = 'held'::text)")),
        "{indexes:?}"
    );
}
