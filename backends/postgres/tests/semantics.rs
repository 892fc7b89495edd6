//! What is particular to the PostgreSQL store (the shared behaviour is the conformance suite).

mod common;

use chrono::Duration;
use common::*;
use slot_booking::HoldStore;
use slot_booking::{HoldOutcome, HoldStatus, NewSlot, SlotId, StoreErrorKind, Transition};
use slot_booking_postgres::PostgresStore;
use sqlx::AssertSqlSafe;

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
        let err = sqlx::query(AssertSqlSafe(sql.as_str()))
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
    let err = sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{s}\".holds SET status = 'lost' WHERE id = $1"
    )))
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
        .idle_timeout(None)
        .max_lifetime(None)
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
        .idle_timeout(None)
        .max_lifetime(None)
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
    assert_eq!(
        tables(ctx.pool(), ctx.schema()).await,
        [
            "event_consumers",
            "event_horizons",
            "events",
            "hold_keys",
            "holds",
            "pools",
            "slot_booking_migrations",
            "slot_pools",
            "slots",
            "waitlist_entries"
        ]
    );
    let ctx = &ctx;
    let index_definitions = |sql: &'static str| async move {
        sqlx::query_scalar::<_, String>(sql)
            .bind(ctx.schema())
            .fetch_all(ctx.pool())
            .await
            .unwrap()
    };
    let indexes = index_definitions(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname",
    )
    .await;
    for wanted in [
        "holds_held_by_slot_expiry ON",
        "(slot_id, expires_at) INCLUDE (quantity) WHERE (status = 'held'::text)",
        "holds_by_owner ON",
        "(owner, id) WHERE (owner IS NOT NULL)",
        "holds_by_slot ON",
        "slots_by_resource ON",
        "(resource, starts_at, id) WHERE (resource IS NOT NULL)",
        "slot_pools_by_pool ON",
        "(pool_id, slot_id)",
    ] {
        assert!(
            indexes.iter().any(|d| d.contains(wanted)),
            "{wanted}: {indexes:?}"
        );
    }
    // Every hold, cancel and slot change updates a slot row: it stays a HOT update (no new
    // index entries) only while no index of slots keys, includes or filters on what they write.
    let slot_indexes = index_definitions(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'slots'",
    )
    .await;
    for written in ["capacity", "remaining", "closed", "removed_at", "pools"] {
        assert!(
            slot_indexes.iter().all(|d| !d.contains(written)),
            "{written}: {slot_indexes:?}"
        );
    }
}

/// The pool of `connect` keeps its connections (no idle timeout, no maximum lifetime): with
/// either, sqlx 0.9.0 runs a reaper task that can spin on one core for good
/// (launchbadge/sqlx#3645).
#[tokio::test]
async fn connect_runs_no_pool_reaper() {
    let Some(ctx) = setup("connect_runs_no_pool_reaper").await else {
        return;
    };
    let store = PostgresStore::connect(&ctx.url).await.unwrap();
    let options = store.pool().options();
    assert_eq!(options.get_idle_timeout(), None);
    assert_eq!(options.get_max_lifetime(), None);
}
