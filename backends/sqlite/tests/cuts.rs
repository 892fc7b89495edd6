//! Calls cut midway (their futures dropped at each await point, as a web framework drops a
//! request the client left) leave nothing behind, on the pool and in the caller's
//! transaction: the application's own next write on the same connection works (a store of one
//! connection), and no step is half written; with the fast path and without it.

mod common;

use common::TempDb;
use slot_booking::conformance::cuts::Application;
use slot_booking::conformance::kit::Owned;
use slot_booking_sqlite::sqlx::sqlite::SqlitePoolOptions;
use slot_booking_sqlite::sqlx::{self, Connection, SqliteConnection};
use slot_booking_sqlite::{SqliteStore, SqliteTransaction};

type Store = Owned<SqliteStore, TempDb>;

/// A migrated store on a fresh file, its pool of one connection, with the application's own
/// table beside its tables.
async fn one_connection_store() -> Option<Store> {
    store_of_one(false).await
}

/// [`one_connection_store`], without its fast path (every hold by the core's rule, in a unit of
/// work of its own).
async fn one_connection_store_composed() -> Option<Store> {
    store_of_one(true).await
}

async fn store_of_one(composed: bool) -> Option<Store> {
    let db = TempDb::new("cuts");
    let options = SqliteStore::configure(db.url().parse().unwrap());
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options)
        .await
        .unwrap();
    let mut store = SqliteStore::new(pool);
    if composed {
        store = store.without_fast_paths();
    }
    store.migrate().await.unwrap();
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)")
        .execute(store.pool())
        .await
        .unwrap();
    Some(Owned { store, guard: db })
}

/// The application: an `INSERT` into its own table.
#[derive(Clone)]
struct Orders;

/// What the application's write answers.
type Answer<'t> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 't>>;

async fn insert(conn: &mut SqliteConnection) -> Result<(), String> {
    sqlx::query("INSERT INTO orders (note) VALUES ('after a cut')")
        .execute(conn)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

#[slot_booking::async_trait]
impl Application<Store> for Orders {
    fn write_in<'t>(&self, _store: &Store, transaction: &'t mut SqliteTransaction) -> Answer<'t> {
        Box::pin(insert(transaction.connection()))
    }

    async fn write_on_pool(&self, store: &Store) -> Result<(), String> {
        let mut conn = store
            .store
            .pool()
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        let mut tx = conn
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|e| e.to_string())?;
        insert(&mut tx).await?;
        tx.commit().await.map_err(|e| e.to_string())
    }
}

slot_booking::cut_conformance_tests!(optional: one_connection_store, Orders);

mod composed {
    use super::*;

    slot_booking::cut_conformance_tests!(optional: one_connection_store_composed, Orders);
}
