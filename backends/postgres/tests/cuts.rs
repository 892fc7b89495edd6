//! Calls cut midway (their futures dropped at each await point, as a web framework drops a
//! request the client left) leave nothing behind, on the pool and in the caller's
//! transaction: the application's own next write on the same connection works (a store of one
//! connection), and no step is half written; with the fast paths and without them. Each run on
//! a fresh schema of `DATABASE_URL`.

mod common;

use common::*;
use slot_booking::conformance::cuts::Application;
use slot_booking::conformance::kit::Owned;
use slot_booking_postgres::sqlx::{self, AssertSqlSafe, Connection, PgConnection, Postgres};
use slot_booking_postgres::PostgresStore;

type Store = Owned<PostgresStore, SchemaGuard>;

/// A migrated store on a fresh schema, its pool of one connection, with the application's
/// own table in its schema.
async fn store_of_one_connection() -> Option<Store> {
    store_of_one(false).await
}

/// [`store_of_one_connection`], without its fast paths (every hold and booking by the core's
/// rules, in units of work of their own).
async fn store_of_one_connection_composed() -> Option<Store> {
    store_of_one(true).await
}

async fn store_of_one(composed: bool) -> Option<Store> {
    let ctx = setup("cuts").await?;
    let mut store = one_connection_store(&ctx).await;
    if composed {
        store = store.without_fast_paths();
    }
    store.migrate().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {}.orders (id BIGSERIAL PRIMARY KEY, note TEXT)",
        ctx.schema()
    )))
    .execute(store.pool())
    .await
    .unwrap();
    Some(Owned {
        store,
        guard: ctx.guard,
    })
}

/// The application: an `INSERT` into its own table.
#[derive(Clone)]
struct Orders;

/// What the application's write answers.
type Answer<'t> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 't>>;

async fn insert(conn: &mut PgConnection, schema: &str) -> Result<(), String> {
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {schema}.orders (note) VALUES ('after a cut')"
    )))
    .execute(conn)
    .await
    .map(drop)
    .map_err(|e| e.to_string())
}

#[slot_booking::async_trait]
impl Application<Store> for Orders {
    fn write_in<'t>(
        &self,
        store: &Store,
        transaction: &'t mut sqlx::Transaction<'static, Postgres>,
    ) -> Answer<'t> {
        let schema = store.store.schema().to_owned();
        Box::pin(async move { insert(transaction, &schema).await })
    }

    async fn write_on_pool(&self, store: &Store) -> Result<(), String> {
        let mut conn = store
            .store
            .pool()
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        let mut tx = conn.begin().await.map_err(|e| e.to_string())?;
        insert(&mut tx, store.store.schema()).await?;
        tx.commit().await.map_err(|e| e.to_string())
    }
}

slot_booking::cut_conformance_tests!(optional: store_of_one_connection, Orders);

mod composed {
    use super::*;

    slot_booking::cut_conformance_tests!(optional: store_of_one_connection_composed, Orders);
}
