//! The embedded migrations and their ledger.
//!
//! sqlx's own migrator keeps one `_sqlx_migrations` ledger per database, which a host
//! application using sqlx migrations already owns; sharing it would make each migrator see
//! the other's versions as unknown. So this crate records its versions in a table of its own,
//! `<prefix>migrations`, and leaves `_sqlx_migrations` alone.
//!
//! Version 0.1 of this crate created its tables without a prefix (`slots`, `holds`) and kept
//! its ledger in `slot_booking_migrations`. Such a database is upgraded in place the first
//! time a store migrates it: its tables are renamed to the store's prefix, rows untouched.

use sqlx::sqlite::SqlitePool;
use sqlx::{AssertSqlSafe, Executor, Sqlite, Transaction};

use slot_booking::StoreError;

use crate::map_err;
use slot_booking::store::{Migration, TablePrefix};

/// Every migration, in version order. Their SQL writes `{p}` where the table prefix goes.
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
    Migration {
        version: 3,
        description: "owners and quantities",
        sql: include_str!("../migrations/0003_owners_quantities.sql"),
    },
    Migration {
        version: 4,
        description: "slot administration",
        sql: include_str!("../migrations/0004_slot_administration.sql"),
    },
    Migration {
        version: 5,
        description: "events",
        sql: include_str!("../migrations/0005_events.sql"),
    },
    Migration {
        version: 6,
        description: "sold out in one statement",
        sql: include_str!("../migrations/0006_sold_out_in_one_statement.sql"),
    },
    Migration {
        version: 7,
        description: "consumer leases",
        sql: include_str!("../migrations/0007_consumer_leases.sql"),
    },
    Migration {
        version: 8,
        description: "bookings",
        sql: include_str!("../migrations/0008_bookings.sql"),
    },
    Migration {
        version: 9,
        description: "pools",
        sql: include_str!("../migrations/0009_pools.sql"),
    },
    Migration {
        version: 10,
        description: "waitlists",
        sql: include_str!("../migrations/0010_waitlists.sql"),
    },
    Migration {
        version: 11,
        description: "pool waitlists",
        sql: include_str!("../migrations/0011_pool_waitlists.sql"),
    },
    Migration {
        version: 12,
        description: "events by hold",
        sql: include_str!("../migrations/0012_events_by_hold.sql"),
    },
];

/// The ledger 0.1 kept for its unprefixed tables.
const LEGACY_LEDGER: &str = "slot_booking_migrations";

/// Moves 0.1's unprefixed tables under the prefix. Renaming keeps every row, and SQLite
/// rewrites the foreign key of `holds` and the trigger body to the new names; the indexes and
/// the trigger are recreated so that their names carry the prefix too.
const ADOPT_UNPREFIXED: &str = "
DROP TRIGGER IF EXISTS holds_take_a_unit;
DROP INDEX IF EXISTS slots_starts_at_id;
DROP INDEX IF EXISTS holds_held_by_slot_expiry;
ALTER TABLE slots RENAME TO {p}slots;
ALTER TABLE holds RENAME TO {p}holds;
CREATE INDEX {p}slots_starts_at_id ON {p}slots (starts_at, id);
CREATE INDEX {p}holds_held_by_slot_expiry ON {p}holds (slot_id, expires_at) WHERE status = 'held';
";

/// Applies every migration not yet in the ledger, each in one `BEGIN IMMEDIATE` transaction
/// with its ledger row, so concurrent migrators serialize on SQLite's write lock and a version
/// is applied exactly once.
pub(crate) async fn run(pool: &SqlitePool, prefix: &TablePrefix) -> Result<(), StoreError> {
    let ledger = format!("{prefix}migrations");
    let create_ledger = format!(
        "CREATE TABLE IF NOT EXISTS {ledger} (
             version     INTEGER PRIMARY KEY,
             description TEXT NOT NULL,
             -- microseconds since the Unix epoch, like every timestamp of this crate
             applied_at  INTEGER NOT NULL
         )"
    );
    {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
        adopt_unprefixed_tables(&mut tx, prefix, &ledger, &create_ledger).await?;
        tx.commit().await.map_err(map_err)?;
    }
    for migration in MIGRATIONS {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
        tx.execute(AssertSqlSafe(create_ledger.as_str()))
            .await
            .map_err(map_err)?;
        if is_applied(&mut tx, &ledger, migration.version).await? {
            tx.rollback().await.map_err(map_err)?;
            continue;
        }
        // A plain string runs unprepared, every statement in it.
        tx.execute(AssertSqlSafe(prefix.apply(migration.sql)))
            .await
            .map_err(map_err)?;
        record(&mut tx, &ledger, migration).await?;
        tx.commit().await.map_err(map_err)?;
    }
    Ok(())
}

async fn table_exists(
    tx: &mut Transaction<'static, Sqlite>,
    name: &str,
) -> Result<bool, StoreError> {
    let found: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")
            .bind(name)
            .fetch_optional(&mut **tx)
            .await
            .map_err(map_err)?;
    Ok(found.is_some())
}

async fn is_applied(
    tx: &mut Transaction<'static, Sqlite>,
    ledger: &str,
    version: i64,
) -> Result<bool, StoreError> {
    let found: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT 1 FROM {ledger} WHERE version = ?1"
    )))
    .bind(version)
    .fetch_optional(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(found.is_some())
}

async fn record(
    tx: &mut Transaction<'static, Sqlite>,
    ledger: &str,
    migration: &Migration,
) -> Result<(), StoreError> {
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {ledger} (version, description, applied_at) VALUES (?1, ?2, ?3)"
    )))
    .bind(migration.version)
    .bind(migration.description)
    .bind(chrono::Utc::now().timestamp_micros())
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}

/// Upgrades a database made by 0.1 in place, if this is one: 0.1's ledger records its first
/// migration, and neither the default-prefixed tables nor this prefix's tables exist yet. A
/// host's own `slots` or `holds` table is never touched: without 0.1's ledger nothing is
/// adopted.
async fn adopt_unprefixed_tables(
    tx: &mut Transaction<'static, Sqlite>,
    prefix: &TablePrefix,
    ledger: &str,
    create_ledger: &str,
) -> Result<(), StoreError> {
    if !table_exists(tx, LEGACY_LEDGER).await?
        || !is_applied(tx, LEGACY_LEDGER, 1).await?
        || table_exists(tx, &TablePrefix::default().apply("{p}slots")).await?
        || table_exists(tx, &prefix.apply("{p}slots")).await?
        || !table_exists(tx, "slots").await?
        || !table_exists(tx, "holds").await?
    {
        return Ok(());
    }
    let legacy_versions: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM {LEGACY_LEDGER} ORDER BY version"
    )))
    .fetch_all(&mut **tx)
    .await
    .map_err(map_err)?;
    tx.execute(AssertSqlSafe(prefix.apply(ADOPT_UNPREFIXED)))
        .await
        .map_err(map_err)?;
    // The trigger of migration 2, under its prefixed name, if 0.1 had it.
    if let Some(take_a_unit) = MIGRATIONS.iter().find(|m| m.version == 2) {
        if legacy_versions.contains(&take_a_unit.version) {
            tx.execute(AssertSqlSafe(prefix.apply(take_a_unit.sql)))
                .await
                .map_err(map_err)?;
        }
    }
    // The versions move to this prefix's ledger (the same table under the default prefix).
    if ledger != LEGACY_LEDGER {
        tx.execute(AssertSqlSafe(create_ledger))
            .await
            .map_err(map_err)?;
        tx.execute(AssertSqlSafe(format!(
            "INSERT INTO {ledger} (version, description, applied_at) \
                 SELECT version, description, applied_at FROM {LEGACY_LEDGER}; \
                 DROP TABLE {LEGACY_LEDGER};"
        )))
        .await
        .map_err(map_err)?;
    }
    Ok(())
}
