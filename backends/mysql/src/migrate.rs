//! The embedded migrations and their ledger.
//!
//! The versions applied are recorded in `<prefix>migrations`, not in sqlx's
//! `_sqlx_migrations`, so a host application's own sqlx migrations coexist in the same
//! database. MySQL commits each DDL statement on its own, so a migration cannot be one
//! transaction, and Galera does not replicate `GET_LOCK`, so migrators cannot take turns by a
//! lock either. Instead every statement of every migration is idempotent (`CREATE TABLE IF NOT
//! EXISTS`, `ADD COLUMN IF NOT EXISTS`, `INSERT IGNORE`, ...): a migration interrupted half-way
//! is run again whole, and migrators racing (on one server or on several nodes, where DDL runs
//! in total order) apply each statement once in effect. The ledger row is written last.
//! Migrations only ever add: a database made by an earlier version upgrades in place.

use slot_booking::StoreError;
use sqlx::mysql::MySqlPool;
use sqlx::{AssertSqlSafe, Executor};

use crate::map_err;
use slot_booking::store::{Migration, TablePrefix};

/// Every migration, in version order. Their SQL writes `{p}` where the table prefix goes, and
/// ends each statement with `;` at the end of a line.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "create slots and holds",
        sql: include_str!("../migrations/0001_create_slots_and_holds.sql"),
    },
    Migration {
        version: 2,
        description: "events",
        sql: include_str!("../migrations/0002_events.sql"),
    },
    Migration {
        version: 3,
        description: "bookings",
        sql: include_str!("../migrations/0003_bookings.sql"),
    },
    Migration {
        version: 4,
        description: "pools",
        sql: include_str!("../migrations/0004_pools.sql"),
    },
    Migration {
        version: 5,
        description: "waitlists",
        sql: include_str!("../migrations/0005_waitlists.sql"),
    },
    Migration {
        version: 6,
        description: "events by hold",
        sql: include_str!("../migrations/0006_events_by_hold.sql"),
    },
];

/// The statements of a migration's text: split where a line ends with `;`, comment lines
/// dropped.
pub(crate) fn statements(sql: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("--") {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(';') {
            let statement = current.trim().trim_end_matches(';').to_owned();
            statements.push(statement);
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        statements.push(current.trim().to_owned());
    }
    statements
}

/// Applies every migration the ledger does not record, statement by statement, then records it.
pub(crate) async fn run(pool: &MySqlPool, prefix: &TablePrefix) -> Result<(), StoreError> {
    let ledger = format!("{prefix}migrations");
    pool.execute(AssertSqlSafe(format!(
        "CREATE TABLE IF NOT EXISTS {ledger} (
             version     BIGINT NOT NULL PRIMARY KEY,
             description VARCHAR(255) NOT NULL,
             -- microseconds since the Unix epoch, like every timestamp of this crate
             applied_at  BIGINT NOT NULL
         ) ENGINE = InnoDB"
    )))
    .await
    .map_err(map_err)?;
    let applied: Vec<i64> =
        sqlx::query_scalar(AssertSqlSafe(format!("SELECT version FROM {ledger}")))
            .fetch_all(pool)
            .await
            .map_err(map_err)?;
    for migration in MIGRATIONS {
        if applied.contains(&migration.version) {
            continue;
        }
        for statement in statements(&prefix.apply(migration.sql)) {
            pool.execute(AssertSqlSafe(statement))
                .await
                .map_err(map_err)?;
        }
        sqlx::query(AssertSqlSafe(format!(
            "INSERT IGNORE INTO {ledger} (version, description, applied_at) VALUES (?, ?, ?)"
        )))
        .bind(migration.version)
        .bind(migration.description)
        .bind(chrono::Utc::now().timestamp_micros())
        .execute(pool)
        .await
        .map_err(map_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_split_into_idempotent_statements() {
        for migration in MIGRATIONS {
            let statements = statements(migration.sql);
            assert!(!statements.is_empty(), "{}", migration.description);
            for statement in statements {
                let idempotent = statement.starts_with("CREATE TABLE IF NOT EXISTS")
                    || statement.starts_with("INSERT IGNORE")
                    || statement.starts_with("CREATE INDEX IF NOT EXISTS")
                    || (statement.starts_with("ALTER TABLE")
                        // Columns added if missing; a constraint only replaced by one of
                        // the same name, in the same statement.
                        && statement.matches("ADD ").count()
                            == statement.matches("ADD COLUMN IF NOT EXISTS ").count()
                                + statement.matches("ADD CONSTRAINT ").count()
                        && statement.matches("DROP ").count()
                            == statement.matches("DROP CONSTRAINT IF EXISTS ").count()
                        && statement.matches("ADD CONSTRAINT ").count()
                            == statement.matches("DROP CONSTRAINT IF EXISTS ").count()
                        && !["MODIFY", "CHANGE", "RENAME"]
                            .iter()
                            .any(|word| statement.contains(word)));
                assert!(idempotent, "not idempotent: {statement}");
                assert!(!statement.contains(';'), "{statement}");
            }
        }
    }
}
