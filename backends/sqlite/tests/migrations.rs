//! Embedded migrations: idempotent, coexisting with a host application's sqlx migrations, and
//! data surviving a restart.

mod common;

use std::path::Path;

use common::*;
use slot_booking::{HoldOutcome, Store};
use slot_booking_sqlite::SqliteStore;
use sqlx::migrate::Migrator;

async fn host_migrator() -> Migrator {
    Migrator::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/host_migrations"))
        .await
        .unwrap()
}

async fn tables(pool: &sqlx::SqlitePool) -> Vec<String> {
    sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn migrations_coexist_with_host_sqlx_migrations() {
    let db = TempDb::new("coexist");
    let store = SqliteStore::connect(&db.url()).await.unwrap();
    let host = host_migrator().await;

    // Host first, then ours, then both again (idempotent), then ours once more.
    host.run(store.pool()).await.unwrap();
    store.migrate().await.unwrap();
    host.run(store.pool()).await.unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    let names = tables(store.pool()).await;
    for table in [
        "_sqlx_migrations",
        "customers",
        "orders",
        "slot_booking_migrations",
        "slots",
        "holds",
    ] {
        assert!(
            names.iter().any(|n| n == table),
            "{table} missing in {names:?}"
        );
    }
    let ours: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, description FROM slot_booking_migrations ORDER BY version")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(
        ours,
        vec![
            (1, "create slots and holds".to_owned()),
            (2, "holds take a unit".to_owned())
        ]
    );
    let theirs: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(theirs, vec![20240101000000, 20240102000000]);

    // Ours first on a fresh database, then the host's.
    let db2 = TempDb::new("coexist2");
    let store2 = SqliteStore::connect(&db2.url()).await.unwrap();
    store2.migrate().await.unwrap();
    host.run(store2.pool()).await.unwrap();
    store2.migrate().await.unwrap();
    let slot_id = slot(&store2, 1).await;
    assert!(matches!(
        hold(&store2, slot_id, "a", at(0)).await,
        HoldOutcome::Created(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_apply_once() {
    let db = TempDb::new("concurrentmigrate");
    let url = db.url();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let store = SqliteStore::connect(&url).await.unwrap();
                store.migrate().await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let store = db.store().await;
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM slot_booking_migrations")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(n, 2, "each of the two migrations applied once");
}

#[tokio::test]
async fn data_survives_a_restart() {
    let db = TempDb::new("restart");
    let (slot_id, hold) = {
        let store = db.store().await;
        let slot_id = slot(&store, 3).await;
        let hold = match hold(&store, slot_id, "a", at(0)).await {
            HoldOutcome::Created(h) => h,
            other => panic!("{other:?}"),
        };
        store.confirm_hold(hold.hold_id, at(1)).await.unwrap();
        store.pool().close().await;
        (slot_id, hold.hold_id)
    };
    let store = db.store().await;
    let slot = store.get_slot(slot_id).await.unwrap().unwrap();
    assert_eq!((slot.capacity, slot.remaining), (3, 2));
    let stored = store.get_hold(hold, at(2)).await.unwrap().outcome.unwrap();
    assert_eq!(stored.status, slot_booking::HoldStatus::Confirmed);
    assert_eq!(stored.confirmed_at, Some(at(1)));
    assert_invariant(store.pool(), slot_id).await;
}
