//! The embedded migrations and their ledger.
//!
//! sqlx's own migrator keeps one `_sqlx_migrations` ledger per database, which a host
//! application using sqlx migrations already owns; sharing it would make each migrator see
//! the other's versions as unknown. So this crate records its versions in a table of its own,
//! `slot_booking_migrations`, and leaves `_sqlx_migrations` alone.

use sqlx::sqlite::SqlitePool;
use sqlx::{Executor, Row};

use slot_booking::StoreError;

use crate::map_err;

/// One embedded migration.
pub(crate) struct Migration {
    pub(crate) version: i64,
    pub(crate) description: &'static str,
    pub(crate) sql: &'static str,
}

/// Every migration, in version order.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "create slots and holds",
        sql: include_str!("../migrations/0001_create_slots_and_holds.sql"),
    },
    Migration {
        version: 2,
        description: "holds take a unit",
        sql: include_str!("../migrations/0002_holds_take_a_unit.sql"),
    },
];

const CREATE_LEDGER: &str = "CREATE TABLE IF NOT EXISTS slot_booking_migrations (
    version     INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    -- microseconds since the Unix epoch, like every timestamp of this crate
    applied_at  INTEGER NOT NULL
)";

/// Applies every migration not yet in the ledger, each in one `BEGIN IMMEDIATE` transaction
/// with its ledger row, so concurrent migrators serialize on SQLite's write lock and a version
/// is applied exactly once.
pub(crate) async fn run(pool: &SqlitePool) -> Result<(), StoreError> {
    for migration in MIGRATIONS {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
        sqlx::query(CREATE_LEDGER)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let applied =
            sqlx::query("SELECT 1 AS applied FROM slot_booking_migrations WHERE version = ?1")
                .bind(migration.version)
                .fetch_optional(&mut *tx)
                .await
                .map_err(map_err)?
                .map(|row| row.try_get::<i64, _>("applied"))
                .transpose()
                .map_err(map_err)?
                .is_some();
        if applied {
            tx.rollback().await.map_err(map_err)?;
            continue;
        }
        // A plain string runs unprepared, every statement in it.
        (&mut *tx).execute(migration.sql).await.map_err(map_err)?;
        sqlx::query(
            "INSERT INTO slot_booking_migrations (version, description, applied_at) \
             VALUES (?1, ?2, ?3)",
        )
        .bind(migration.version)
        .bind(migration.description)
        .bind(chrono::Utc::now().timestamp_micros())
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
    }
    Ok(())
}
