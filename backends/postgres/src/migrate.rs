//! The embedded migrations and their ledger.
//!
//! sqlx's own migrator keeps one `_sqlx_migrations` ledger per search path, which a host
//! application using sqlx migrations already owns; sharing it would make each migrator see the
//! other's versions as unknown. So this crate records its versions in
//! `<schema>.slot_booking_migrations` and leaves `_sqlx_migrations` alone.

use sqlx::postgres::PgPool;
use sqlx::{AssertSqlSafe, Executor};

use slot_booking::StoreError;

use crate::fragments::quote;
use crate::map_err;
use slot_booking::store::Migration;

/// Every migration, in version order. The SQL names tables without a schema: it runs with
/// `search_path` set to the store's schema.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "create slots and holds",
        sql: include_str!("../migrations/0001_create_slots_and_holds.sql"),
    },
    Migration {
        version: 2,
        description: "held holds by expiry",
        sql: include_str!("../migrations/0002_held_holds_by_expiry.sql"),
    },
    Migration {
        version: 3,
        description: "hold keys",
        sql: include_str!("../migrations/0003_hold_keys.sql"),
    },
    Migration {
        version: 4,
        description: "owners and quantities",
        sql: include_str!("../migrations/0004_owners_quantities.sql"),
    },
    Migration {
        version: 5,
        description: "slot administration",
        sql: include_str!("../migrations/0005_slot_administration.sql"),
    },
    Migration {
        version: 6,
        description: "change notifications",
        sql: include_str!("../migrations/0006_change_notifications.sql"),
    },
    Migration {
        version: 7,
        description: "events",
        sql: include_str!("../migrations/0007_events.sql"),
    },
    Migration {
        version: 8,
        description: "event horizons and consumer leases",
        sql: include_str!("../migrations/0008_event_horizons.sql"),
    },
    Migration {
        version: 9,
        description: "bookings",
        sql: include_str!("../migrations/0009_bookings.sql"),
    },
    Migration {
        version: 10,
        description: "pools",
        sql: include_str!("../migrations/0010_pools.sql"),
    },
    Migration {
        version: 11,
        description: "waitlists",
        sql: include_str!("../migrations/0011_waitlists.sql"),
    },
    Migration {
        version: 12,
        description: "pool waitlists",
        sql: include_str!("../migrations/0012_pool_waitlists.sql"),
    },
    Migration {
        version: 13,
        description: "events by hold",
        sql: include_str!("../migrations/0013_events_by_hold.sql"),
    },
];

/// The advisory lock key of a schema's migrations: FNV-1a (64 bit) of a fixed prefix and the
/// schema name, stable across versions and processes.
fn lock_key(schema: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in "slot_booking_migrations:".bytes().chain(schema.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // The same 64 bits read as signed (PostgreSQL's advisory keys are bigint), on every
    // platform: `to_le`/`from_le` round-trip the bits whatever the byte order.
    i64::from_le_bytes(hash.to_le_bytes())
}

/// Applies every migration not yet in the ledger, each in one transaction with its ledger
/// row, holding a transaction-scoped advisory lock on the schema's key.
pub(crate) async fn run(pool: &PgPool, schema: &str) -> Result<(), StoreError> {
    let s = quote(schema);
    let create_schema = format!("CREATE SCHEMA IF NOT EXISTS {s}");
    let create_ledger = format!(
        "CREATE TABLE IF NOT EXISTS {s}.slot_booking_migrations ( \
             version     BIGINT PRIMARY KEY, \
             description TEXT NOT NULL, \
             applied_at  TIMESTAMPTZ NOT NULL DEFAULT now())"
    );
    let is_applied =
        format!("SELECT EXISTS (SELECT 1 FROM {s}.slot_booking_migrations WHERE version = $1)");
    let record =
        format!("INSERT INTO {s}.slot_booking_migrations (version, description) VALUES ($1, $2)");
    let search_path = format!("SET LOCAL search_path TO {s}");

    for migration in MIGRATIONS {
        let mut tx = pool.begin().await.map_err(map_err)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(schema))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        // CREATE SCHEMA IF NOT EXISTS checks the CREATE privilege on the database even when
        // the schema exists: only run it when needed (race-free under the advisory lock).
        let schema_exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(schema)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
        if !schema_exists {
            (&mut *tx)
                .execute(AssertSqlSafe(create_schema.as_str()))
                .await
                .map_err(map_err)?;
        }
        (&mut *tx)
            .execute(AssertSqlSafe(create_ledger.as_str()))
            .await
            .map_err(map_err)?;
        let applied: bool = sqlx::query_scalar(AssertSqlSafe(is_applied.as_str()))
            .bind(migration.version)
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
        if applied {
            tx.commit().await.map_err(map_err)?;
            continue;
        }
        (&mut *tx)
            .execute(AssertSqlSafe(search_path.as_str()))
            .await
            .map_err(map_err)?;
        // A plain string runs with the simple query protocol: every statement in the file.
        (&mut *tx).execute(migration.sql).await.map_err(map_err)?;
        sqlx::query(AssertSqlSafe(record.as_str()))
            .bind(migration.version)
            .bind(migration.description)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Processes running different versions of this crate must take the same lock to migrate
    /// one schema in turn: the key of a schema can never change. These values are what 0.1
    /// computed; a change to the hash, its prefix or the byte order fails here.
    #[test]
    fn lock_keys_are_the_ones_every_version_uses() {
        assert_eq!(super::lock_key("slot_booking"), 4_429_956_775_116_885_635);
        assert_eq!(super::lock_key("other"), -3_161_884_735_602_486_713);
    }
}
