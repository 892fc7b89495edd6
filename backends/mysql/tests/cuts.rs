//! Calls cut midway (their futures dropped at each await point, as a web framework drops a
//! request the client left) leave nothing behind, on the pool and in the caller's
//! transaction: the application's own next write on the same connection works (a store of one
//! connection), and no step is half written. Run on a fresh database of the server `MYSQL_URL`
//! names.

mod common;

use common::*;
use slot_booking::conformance::cuts::Application;
use slot_booking::conformance::kit::Owned;
use slot_booking_mysql::sqlx::{self, Connection, MySql};
use slot_booking_mysql::MySqlStore;

type Store = Owned<MySqlStore, DatabaseGuard>;

/// A migrated store on a fresh database, its pool of one connection, with the application's
/// own table beside its tables.
async fn one_connection_store() -> Option<Store> {
    let guard = database(&server_url(), "cuts").await;
    let pool = MySqlStore::pool_options()
        .max_connections(1)
        .connect(&guard.url())
        .await
        .unwrap();
    let store = MySqlStore::new(pool);
    store.migrate().await.unwrap();
    sqlx::query(
        "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT) ENGINE = InnoDB",
    )
    .execute(store.pool())
    .await
    .unwrap();
    Some(Owned { store, guard })
}

/// The application: an `INSERT` into its own table.
#[derive(Clone)]
struct Orders;

/// What the application's write answers.
type Answer<'t> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 't>>;

async fn insert(conn: &mut sqlx::MySqlConnection) -> Result<(), String> {
    sqlx::query("INSERT INTO orders (note) VALUES ('after a cut')")
        .execute(conn)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

#[slot_booking::async_trait]
impl Application<Store> for Orders {
    fn write_in<'t>(
        &self,
        _store: &Store,
        transaction: &'t mut sqlx::Transaction<'static, MySql>,
    ) -> Answer<'t> {
        Box::pin(insert(transaction))
    }

    async fn write_on_pool(&self, store: &Store) -> Result<(), String> {
        let mut conn = store
            .store
            .pool()
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        let mut tx = conn.begin().await.map_err(|e| e.to_string())?;
        insert(&mut tx).await?;
        tx.commit().await.map_err(|e| e.to_string())
    }
}

slot_booking::cut_conformance_tests!(optional: one_connection_store, Orders);
