//! Embedded migrations: idempotent, safe to run concurrently, coexisting with a host
//! application's sqlx migrations in the same database, and data surviving a restart.

mod common;

use std::path::Path;

use common::*;
use slot_booking::{HoldOutcome, HoldStatus, Store};
use slot_booking_postgres::PostgresStore;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

async fn host_migrator() -> Migrator {
    Migrator::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/host_migrations"))
        .await
        .unwrap()
}

async fn tables(pool: &sqlx::PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = $1 ORDER BY table_name",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_coexist_with_host_sqlx_migrations() {
    let Some(url) = database_url("migrations_coexist_with_host_sqlx_migrations") else {
        return;
    };
    // The host application: its own schema as search_path (standing in for `public`, which
    // parallel tests must not share), its own sqlx migrations and `_sqlx_migrations` ledger,
    // even a table of its own named `slots`. One pool, shared with our store.
    let host_schema = unique_schema("sbhost");
    let ours = unique_schema("sbtest");
    let _host_guard = SchemaGuard {
        url: url.clone(),
        schema: host_schema.clone(),
    };
    let _our_guard = SchemaGuard {
        url: url.clone(),
        schema: ours.clone(),
    };
    let admin = pool(&url).await;
    sqlx::query(&format!("CREATE SCHEMA \"{host_schema}\""))
        .execute(&admin)
        .await
        .unwrap();
    let options: PgConnectOptions = url.parse().unwrap();
    let shared = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(
            options
                .clone()
                .options([("search_path", host_schema.as_str())]),
        )
        .await
        .unwrap();
    let store = PostgresStore::with_schema(shared.clone(), &ours).unwrap();
    let host = host_migrator().await;

    // Host first, then ours, then both again (idempotent), then ours once more.
    host.run(&shared).await.unwrap();
    store.migrate().await.unwrap();
    host.run(&shared).await.unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    assert_eq!(
        tables(&admin, &host_schema).await,
        ["_sqlx_migrations", "customers", "orders", "slots"]
    );
    assert_eq!(
        tables(&admin, &ours).await,
        ["holds", "slot_booking_migrations", "slots"]
    );
    let applied: Vec<(i64, String)> = sqlx::query_as(&format!(
        "SELECT version, description FROM \"{ours}\".slot_booking_migrations ORDER BY version"
    ))
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(
        applied,
        vec![
            (1, "create slots and holds".to_owned()),
            (2, "held holds by expiry".to_owned())
        ]
    );
    let theirs: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT version FROM \"{host_schema}\"._sqlx_migrations ORDER BY version"
    ))
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(theirs, vec![20240101000000, 20240102000000]);

    // The shared pool's search_path points at the host's `slots`; ours are still used.
    let slot_id = slot(&store, 1).await;
    assert!(matches!(
        hold(&store, slot_id, "a", at(0)).await,
        HoldOutcome::Created(_)
    ));
    let host_slots: i64 = sqlx::query_scalar("SELECT count(*) FROM slots")
        .fetch_one(&shared)
        .await
        .unwrap();
    assert_eq!(host_slots, 0);

    // Ours first on a fresh pair of schemas, then the host's.
    let host_schema2 = unique_schema("sbhost");
    let ours2 = unique_schema("sbtest");
    let _guards = (
        SchemaGuard {
            url: url.clone(),
            schema: host_schema2.clone(),
        },
        SchemaGuard {
            url: url.clone(),
            schema: ours2.clone(),
        },
    );
    sqlx::query(&format!("CREATE SCHEMA \"{host_schema2}\""))
        .execute(&admin)
        .await
        .unwrap();
    let shared2 = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.options([("search_path", host_schema2.as_str())]))
        .await
        .unwrap();
    let store2 = PostgresStore::with_schema(shared2.clone(), &ours2).unwrap();
    store2.migrate().await.unwrap();
    host.run(&shared2).await.unwrap();
    store2.migrate().await.unwrap();
    assert_eq!(
        tables(&admin, &host_schema2).await,
        ["_sqlx_migrations", "customers", "orders", "slots"]
    );
    shared.close().await;
    shared2.close().await;
    admin.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_apply_once() {
    let Some(url) = database_url("concurrent_migrations_apply_once") else {
        return;
    };
    let schema = unique_schema("sbtest");
    let _guard = SchemaGuard {
        url: url.clone(),
        schema: schema.clone(),
    };
    // Separate pools, as separate processes would have, all migrating a new schema at once.
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move {
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&url)
                    .await
                    .unwrap();
                let store = PostgresStore::with_schema(pool.clone(), &schema).unwrap();
                store.migrate().await.unwrap();
                pool.close().await;
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let admin = pool(&url).await;
    let n: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{schema}\".slot_booking_migrations"
    ))
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(n, 2, "each of the two migrations applied once");
    admin.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_survives_a_restart() {
    let Some(ctx) = setup("data_survives_a_restart").await else {
        return;
    };
    let (slot_id, hold_id) = {
        let store = ctx.second_store().await;
        let slot_id = slot(&store, 3).await;
        let hold = match hold(&store, slot_id, "a", at(0)).await {
            HoldOutcome::Created(h) => h,
            other => panic!("{other:?}"),
        };
        store.confirm_hold(hold.hold_id, at(1)).await.unwrap();
        store.pool().close().await;
        (slot_id, hold.hold_id)
    };
    let store = ctx.second_store().await;
    let slot = store.get_slot(slot_id).await.unwrap().unwrap();
    assert_eq!((slot.capacity, slot.remaining), (3, 2));
    let stored = store
        .get_hold(hold_id, at(2))
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!(stored.status, HoldStatus::Confirmed);
    assert_eq!(stored.confirmed_at, Some(at(1)));
    assert_invariant(&store, slot_id).await;
    store.pool().close().await;
}
