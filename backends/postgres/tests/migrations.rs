//! Embedded migrations: idempotent, safe to run concurrently, coexisting with a host
//! application's sqlx migrations in the same database, upgrading a 0.1 schema in place, and
//! data surviving a restart.

mod common;

use slot_booking::{HoldStore, SlotAdmin};
use std::path::Path;

use common::*;
use slot_booking::conformance::kit::check_previous_release_sells_on;
use slot_booking::{
    AvailabilityQuery, HoldId, HoldOutcome, HoldStatus, PageRequest, SlotChange, SlotId, Timestamp,
};
use slot_booking_postgres::PostgresStore;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Executor};

async fn host_migrator() -> Migrator {
    Migrator::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/host_migrations"))
        .await
        .unwrap()
}

/// A host application's schema, created, with a pool of its own whose `search_path` is it
/// (standing in for `public`, which parallel tests must not share), and beside it the name
/// of a schema for our store; both schemas are dropped with the guards.
struct Host {
    schema: String,
    ours: String,
    pool: PgPool,
    _guards: [SchemaGuard; 2],
}

impl Host {
    async fn new(url: &str, admin: &PgPool, connections: u32) -> Host {
        let (schema, ours) = (unique_schema("sbhost"), unique_schema("sbtest"));
        let guards = [SchemaGuard::new(url, &schema), SchemaGuard::new(url, &ours)];
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .execute(admin)
            .await
            .unwrap();
        let options: PgConnectOptions = url.parse().unwrap();
        let pool = PgPoolOptions::new()
            .idle_timeout(None)
            .max_lifetime(None)
            .max_connections(connections)
            .connect_with(options.options([("search_path", schema.as_str())]))
            .await
            .unwrap();
        Host {
            schema,
            ours,
            pool,
            _guards: guards,
        }
    }

    /// Our store on its pool, in our schema.
    fn our_store(&self) -> PostgresStore {
        PostgresStore::with_schema(self.pool.clone(), &self.ours).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_coexist_with_host_sqlx_migrations() {
    let Some(url) = database_url("migrations_coexist_with_host_sqlx_migrations") else {
        return;
    };
    // The host application: its own schema as search_path, its own sqlx migrations and
    // `_sqlx_migrations` ledger, even a table of its own named `slots`. One pool, shared with
    // our store.
    let admin = pool(&url).await;
    let first = Host::new(&url, &admin, 4).await;
    let (host_schema, ours, shared) = (&first.schema, &first.ours, &first.pool);
    let store = first.our_store();
    let host = host_migrator().await;

    // Host first, then ours, then both again (idempotent), then ours once more.
    host.run(shared).await.unwrap();
    store.migrate().await.unwrap();
    host.run(shared).await.unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    assert_eq!(
        tables(&admin, host_schema).await,
        ["_sqlx_migrations", "customers", "orders", "slots"]
    );
    assert_eq!(
        tables(&admin, ours).await,
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
    let applied: Vec<(i64, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT version, description FROM \"{ours}\".slot_booking_migrations ORDER BY version"
    )))
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(
        applied,
        vec![
            (1, "create slots and holds".to_owned()),
            (2, "held holds by expiry".to_owned()),
            (3, "hold keys".to_owned()),
            (4, "owners and quantities".to_owned()),
            (5, "slot administration".to_owned()),
            (6, "change notifications".to_owned()),
            (7, "events".to_owned()),
            (8, "event horizons and consumer leases".to_owned()),
            (9, "bookings".to_owned()),
            (10, "pools".to_owned()),
            (11, "waitlists".to_owned()),
            (12, "pool waitlists".to_owned()),
            (13, "events by hold".to_owned()),
        ]
    );
    let theirs: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM \"{host_schema}\"._sqlx_migrations ORDER BY version"
    )))
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
        .fetch_one(shared)
        .await
        .unwrap();
    assert_eq!(host_slots, 0);

    // Ours first on a fresh pair of schemas, then the host's.
    let second = Host::new(&url, &admin, 2).await;
    let store2 = second.our_store();
    store2.migrate().await.unwrap();
    host.run(&second.pool).await.unwrap();
    store2.migrate().await.unwrap();
    assert_eq!(
        tables(&admin, &second.schema).await,
        ["_sqlx_migrations", "customers", "orders", "slots"]
    );
    shared.close().await;
    second.pool.close().await;
    admin.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_apply_once() {
    let Some(url) = database_url("concurrent_migrations_apply_once") else {
        return;
    };
    let schema = unique_schema("sbtest");
    let _guard = SchemaGuard::new(&url, &schema);
    // Separate pools, as separate processes would have, all migrating a new schema at once.
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move {
                let pool = PgPoolOptions::new()
                    .idle_timeout(None)
                    .max_lifetime(None)
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
    let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{schema}\".slot_booking_migrations"
    )))
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(n, 13, "each of the thirteen migrations applied once");
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
        store
            .confirm_hold(hold.hold_id, &slot_booking::Scope::BackOffice, at(1))
            .await
            .unwrap();
        store.pool().close().await;
        (slot_id, hold.hold_id)
    };
    let store = ctx.second_store().await;
    let slot = store.get_slot(slot_id).await.unwrap().unwrap();
    assert_eq!((slot.capacity, slot.stored_remaining), (3, 2));
    let stored = store
        .get_hold(hold_id, &slot_booking::Scope::BackOffice, at(2))
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!(stored.status, HoldStatus::Confirmed);
    assert_eq!(stored.confirmed_at, Some(at(1)));
    assert_invariant(&store, slot_id).await;
    store.pool().close().await;
}

/// A schema as an older release left it, to upgrade: with a pool of its own, and dropped with
/// the guard.
struct OldSchema {
    admin: PgPool,
    name: String,
    _guard: SchemaGuard,
}

impl OldSchema {
    /// A new schema with this crate's first `through` migrations applied and recorded, as the
    /// release that shipped them left it, and `rows` written by that release's statements;
    /// `None` (skipped) without a usable server.
    async fn new(test: &str, through: usize, rows: &str) -> Option<OldSchema> {
        let url = database_url(test)?;
        let name = unique_schema("sbtest");
        let guard = SchemaGuard::new(&url, &name);
        let admin = pool(&url).await;
        let mut tx = recorded_schema(&admin, &name, through).await;
        tx.execute(AssertSqlSafe(rows)).await.unwrap();
        tx.commit().await.unwrap();
        Some(OldSchema {
            admin,
            name,
            _guard: guard,
        })
    }

    /// Every row `select` reads, `{s}` standing for the schema.
    async fn rows<R>(&self, select: &str) -> Vec<R>
    where
        R: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        sqlx::query_as(AssertSqlSafe(
            select.replace("{s}", &format!("\"{}\"", self.name)),
        ))
        .fetch_all(&self.admin)
        .await
        .unwrap()
    }

    /// This crate's store on the schema, migrated: the upgrade.
    async fn upgrade(&self) -> PostgresStore {
        let store = PostgresStore::with_schema(self.admin.clone(), &self.name).unwrap();
        store.migrate().await.unwrap();
        store
    }
}

/// A new `schema` with this crate's first `through` migrations applied and recorded, as the
/// release that shipped them left it; the transaction stays open with `search_path` on it.
async fn recorded_schema(
    pool: &PgPool,
    schema: &str,
    through: usize,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let migrations = [
        (
            "create slots and holds",
            include_str!("../migrations/0001_create_slots_and_holds.sql"),
        ),
        (
            "held holds by expiry",
            include_str!("../migrations/0002_held_holds_by_expiry.sql"),
        ),
        (
            "hold keys",
            include_str!("../migrations/0003_hold_keys.sql"),
        ),
        (
            "owners and quantities",
            include_str!("../migrations/0004_owners_quantities.sql"),
        ),
        (
            "slot administration",
            include_str!("../migrations/0005_slot_administration.sql"),
        ),
        (
            "change notifications",
            include_str!("../migrations/0006_change_notifications.sql"),
        ),
        ("events", include_str!("../migrations/0007_events.sql")),
        (
            "event horizons and consumer leases",
            include_str!("../migrations/0008_event_horizons.sql"),
        ),
        ("bookings", include_str!("../migrations/0009_bookings.sql")),
        ("pools", include_str!("../migrations/0010_pools.sql")),
        (
            "waitlists",
            include_str!("../migrations/0011_waitlists.sql"),
        ),
    ];
    let mut tx = pool.begin().await.unwrap();
    tx.execute(AssertSqlSafe(format!(
        "CREATE SCHEMA \"{schema}\"; SET LOCAL search_path TO \"{schema}\"; \
         CREATE TABLE slot_booking_migrations ( \
             version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now());"
    )))
    .await
    .unwrap();
    for (version, (description, sql)) in (1_i64..).zip(&migrations[..through]) {
        tx.execute(*sql).await.unwrap();
        sqlx::query("INSERT INTO slot_booking_migrations (version, description) VALUES ($1, $2)")
            .bind(version)
            .bind(*description)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx
}

/// A schema as version 0.1 of this crate left it: migrations 1 and 2 applied and recorded,
/// holds written by its statements (the key on the hold row, unique there).
async fn version_0_1_schema(test: &str) -> Option<OldSchema> {
    // Slot 1 (capacity 2): a confirmed hold and a held one; slot 2 (capacity 1): a cancelled.
    OldSchema::new(
        test,
        2,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining) VALUES \
           ('2030-03-17 10:00:00.123456+00', '2030-03-17 11:00:00+00', 2, 0), \
           ('2030-03-17 12:00:00+00', '2030-03-17 13:00:00+00', 1, 1); \
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at) VALUES \
           (1, 'confirmed-key', 'confirmed', '2030-03-17 09:05:00+00', \
            '2030-03-17 09:01:00+00', NULL, '2030-03-17 09:00:00+00'), \
           (1, 'held-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00'), \
           (2, 'cancelled-key', 'cancelled', '2030-03-17 09:05:00+00', NULL, \
            '2030-03-17 09:02:00+00', '2030-03-17 09:00:00+00');",
    )
    .await
}

/// A database made by version 0.1 upgrades in place: its rows are kept, every key it stored
/// still names its hold (a replay finds it, another slot is refused), and the constraint
/// whose index was a lock path is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_0_1_schema_upgrades_in_place() {
    let Some(old) = version_0_1_schema("a_version_0_1_schema_upgrades_in_place").await else {
        return;
    };
    let store = old.upgrade().await;

    let keys: Vec<(String, i64)> = old
        .rows("SELECT idempotency_key, hold_id FROM {s}.hold_keys ORDER BY hold_id")
        .await;
    assert_eq!(
        keys,
        [
            ("confirmed-key".to_owned(), 1),
            ("held-key".to_owned(), 2),
            ("cancelled-key".to_owned(), 3)
        ]
    );
    let unique_on_holds: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace \
         WHERE n.nspname = $1 AND c.conname = 'holds_idempotency_key_unique'",
    )
    .bind(&old.name)
    .fetch_one(&old.admin)
    .await
    .unwrap();
    assert_eq!(unique_on_holds, 0);

    let now: Timestamp = "2030-03-17T09:03:00Z".parse().unwrap();
    let (one, two) = (SlotId(1), SlotId(2));
    match hold(&store, one, "held-key", now).await {
        HoldOutcome::Replayed(h) => {
            assert_eq!((h.hold_id, h.status), (HoldId(2), HoldStatus::Held))
        }
        other => panic!("{other:?}"),
    }
    match hold(&store, two, "confirmed-key", now).await {
        HoldOutcome::KeyReused(h) => assert_eq!(h.map(|h| h.hold_id), Some(HoldId(1))),
        other => panic!("{other:?}"),
    }
    // New holds get keys of their own; the old rows still count against capacity.
    assert!(matches!(
        hold(&store, two, "new-key", now).await,
        HoldOutcome::Created(_)
    ));
    assert!(matches!(
        hold(&store, one, "another-key", now).await,
        HoldOutcome::SoldOut
    ));
    for slot in [one, two] {
        assert_invariant(&store, slot).await;
    }
    let confirmed = store
        .get_hold(HoldId(1), &slot_booking::Scope::BackOffice, now)
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!(confirmed.status, HoldStatus::Confirmed);
    old.admin.close().await;
}

/// A schema as the previous release left it: migrations 1 to 3 applied and recorded, and a
/// slot of 5 with a held, a confirmed, a cancelled and an expired-but-unreclaimed hold, each
/// with its key in `hold_keys`, written as that release's statements wrote them.
async fn previous_release_schema(test: &str) -> Option<OldSchema> {
    OldSchema::new(
        test,
        3,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining) VALUES \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 5, 2); \
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at) VALUES \
           (1, 'held-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00'), \
           (1, 'confirmed-key', 'confirmed', '2030-03-17 09:05:00+00', \
            '2030-03-17 09:01:00+00', NULL, '2030-03-17 09:00:00+00'), \
           (1, 'cancelled-key', 'cancelled', '2030-03-17 09:05:00+00', NULL, \
            '2030-03-17 09:02:00+00', '2030-03-17 09:00:00+00'), \
           (1, 'short-key', 'held', '2030-03-17 09:00:01+00', NULL, NULL, \
            '2030-03-17 09:00:00+00'); \
         INSERT INTO hold_keys (idempotency_key, hold_id) \
           SELECT idempotency_key, id FROM holds;",
    )
    .await
}

/// Owners and quantities arrive by an additive migration: a schema with holds made by the
/// previous migrations keeps every row (as anonymous one-unit holds) and the invariant, and
/// then takes owned multi-unit holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_made_by_the_previous_migrations_upgrades_in_place() {
    let Some(old) =
        previous_release_schema("a_schema_made_by_the_previous_migrations_upgrades_in_place").await
    else {
        return;
    };
    let rows = "SELECT id, idempotency_key, status, expires_at, confirmed_at, cancelled_at, \
                       created_at \
                FROM {s}.holds ORDER BY id";
    type Row = (
        i64,
        String,
        String,
        Timestamp,
        Option<Timestamp>,
        Option<Timestamp>,
        Timestamp,
    );
    let before: Vec<Row> = old.rows(rows).await;

    let store = old.upgrade().await;

    let after: Vec<Row> = old.rows(rows).await;
    assert_eq!(after, before, "every hold kept as it was");
    let added: Vec<(i32, Option<String>)> = old
        .rows("SELECT quantity, owner FROM {s}.holds ORDER BY id")
        .await;
    assert_eq!(
        added,
        vec![(1, None); 4],
        "old holds are anonymous single units"
    );
    assert_eq!(counts(&store, SlotId(1)).await, (5, 2, 2, 1));
    assert_invariant(&store, SlotId(1)).await;

    // Through the engine: the old rows keep selling, multi-unit holds included.
    let now: Timestamp = "2030-03-17T09:03:00Z".parse().unwrap();
    check_previous_release_sells_on(store.clone(), now).await;
    assert_eq!(counts(&store, SlotId(1)).await, (5, 0, 4, 1));
    assert_invariant(&store, SlotId(1)).await;
    old.admin.close().await;
}

/// A schema as the release before slot administration left it: migrations 1 to 4 applied and
/// recorded. Slot 1 (capacity 5) has what [`check_previous_release_sells_on`] expects: hold 1
/// active, anonymous, one unit, keyed `held-key`; a confirmed and a cancelled hold; and one
/// expired but unreclaimed unit. Slot 2 (capacity 4, later) has an owned confirmed hold of 3.
async fn before_administration_schema(test: &str) -> Option<OldSchema> {
    OldSchema::new(
        test,
        4,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining) VALUES \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 5, 2), \
           ('2030-03-17 12:00:00+00', '2030-03-17 13:00:00+00', 4, 1); \
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at, quantity, owner) VALUES \
           (1, 'held-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL), \
           (1, 'confirmed-key', 'confirmed', '2030-03-17 09:05:00+00', \
            '2030-03-17 09:01:00+00', NULL, '2030-03-17 09:00:00+00', 1, NULL), \
           (1, 'cancelled-key', 'cancelled', '2030-03-17 09:05:00+00', NULL, \
            '2030-03-17 09:02:00+00', '2030-03-17 09:00:00+00', 2, 'cart-2'), \
           (1, 'short-key', 'held', '2030-03-17 09:00:01+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL), \
           (2, 'owned-key', 'confirmed', '2030-03-17 09:05:00+00', \
            '2030-03-17 09:01:00+00', NULL, '2030-03-17 09:00:00+00', 3, 'cart-9'); \
         INSERT INTO hold_keys (idempotency_key, hold_id) \
           SELECT idempotency_key, id FROM holds;",
    )
    .await
}

/// Slot administration arrives by an additive migration: a schema made by migrations 1 to 4,
/// holding slots and holds, upgrades in place with every row kept; its slots come out open,
/// not removed and of no resource, keep selling, and can then be administered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_slot_administration_upgrades_in_place() {
    let Some(old) =
        before_administration_schema("a_schema_from_before_slot_administration_upgrades_in_place")
            .await
    else {
        return;
    };
    let slot_rows = "SELECT id, starts_at, ends_at, capacity, remaining FROM {s}.slots ORDER BY id";
    let hold_rows = "SELECT id, slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at, quantity, owner \
                     FROM {s}.holds ORDER BY id";
    let key_rows = "SELECT idempotency_key, hold_id FROM {s}.hold_keys ORDER BY hold_id";
    type SlotRow = (i64, Timestamp, Timestamp, i32, i32);
    type HoldRow = (
        i64,
        i64,
        String,
        String,
        Timestamp,
        Option<Timestamp>,
        Option<Timestamp>,
        Timestamp,
        i32,
        Option<String>,
    );
    let slots_before: Vec<SlotRow> = old.rows(slot_rows).await;
    let holds_before: Vec<HoldRow> = old.rows(hold_rows).await;
    let keys_before: Vec<(String, i64)> = old.rows(key_rows).await;
    assert_eq!((slots_before.len(), holds_before.len()), (2, 5));

    let store = old.upgrade().await;

    let versions: Vec<(i64,)> = old
        .rows("SELECT version FROM {s}.slot_booking_migrations ORDER BY version")
        .await;
    assert_eq!(
        versions,
        [
            (1,),
            (2,),
            (3,),
            (4,),
            (5,),
            (6,),
            (7,),
            (8,),
            (9,),
            (10,),
            (11,),
            (12,),
            (13,)
        ]
    );
    let slots_after: Vec<SlotRow> = old.rows(slot_rows).await;
    let holds_after: Vec<HoldRow> = old.rows(hold_rows).await;
    let keys_after: Vec<(String, i64)> = old.rows(key_rows).await;
    assert_eq!(slots_after, slots_before, "every slot kept as it was");
    assert_eq!(holds_after, holds_before, "every hold kept as it was");
    assert_eq!(keys_after, keys_before, "every key kept");
    let added: Vec<(Option<String>, bool, Option<Timestamp>)> = old
        .rows("SELECT resource, closed, removed_at FROM {s}.slots ORDER BY id")
        .await;
    assert_eq!(
        added,
        vec![(None, false, None); 2],
        "old slots: open, kept, no resource"
    );
    for slot_id in [SlotId(1), SlotId(2)] {
        let slot = store.get_slot(slot_id).await.unwrap().unwrap();
        assert_eq!(
            (slot.resource, slot.closed, slot.removed_at),
            (None, false, None)
        );
        assert_invariant(&store, slot_id).await;
    }
    assert_eq!(counts(&store, SlotId(1)).await, (5, 2, 2, 1));
    assert_eq!(counts(&store, SlotId(2)).await, (4, 1, 0, 3));

    // Through the engine: the old rows keep selling, reclaiming the expired unit.
    let now: Timestamp = "2030-03-17T09:03:00Z".parse().unwrap();
    check_previous_release_sells_on(store.clone(), now).await;
    assert_eq!(counts(&store, SlotId(1)).await, (5, 0, 4, 1));
    assert_invariant(&store, SlotId(1)).await;

    // And the old slots can be administered: slot 2's confirmed units keep it from being
    // removed or shrunk below them, while its free unit can go and its sales can close.
    match store.remove_slot(SlotId(2), now).await.unwrap().outcome {
        SlotChange::InUse(usage) => {
            assert_eq!((usage.held, usage.expired, usage.confirmed()), (0, 0, 3))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store
            .change_capacity(SlotId(2), 2.into(), now)
            .await
            .unwrap()
            .outcome,
        SlotChange::InUse(_)
    ));
    match store
        .change_capacity(SlotId(2), 3.into(), now)
        .await
        .unwrap()
        .outcome
    {
        SlotChange::Applied(slot) => assert_eq!((slot.capacity, slot.stored_remaining), (3, 0)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.set_closed(SlotId(2), true, now).await.unwrap().outcome,
        SlotChange::Applied(slot) if slot.closed
    ));
    let listed: Vec<i64> = store
        .availability(now)
        .await
        .unwrap()
        .outcome
        .iter()
        .map(|entry| entry.slot_id.get())
        .collect();
    assert_eq!(listed, [1], "a closed slot leaves availability");
    let page = store
        .list_slots(&AvailabilityQuery::all(), PageRequest::first(10), now)
        .await
        .unwrap()
        .outcome;
    let units: Vec<(i64, i32, i32, i32, bool)> = page
        .iter()
        .map(|u| {
            (
                u.slot.slot_id.get(),
                u.held,
                u.expired,
                u.confirmed(),
                u.slot.closed,
            )
        })
        .collect();
    assert_eq!(units, [(1, 4, 0, 1, false), (2, 0, 0, 3, true)]);
    for slot_id in [SlotId(1), SlotId(2)] {
        assert_invariant(&store, slot_id).await;
    }
    old.admin.close().await;
}

/// The event log arrives by an additive migration: a schema made by migrations 1 to 6, with
/// slots and holds, upgrades in place with every row and key kept and an empty log; from then
/// on every write appends its event, the old expired hold is swept with its event, and an old
/// cancelled hold can be purged with its key, which is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_events_upgrades_in_place() {
    use slot_booking::{ConsumerId, EventKind, EventStore, Scope};
    let Some(old) = OldSchema::new(
        "a_schema_from_before_events_upgrades_in_place",
        6,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining, resource) VALUES \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 5, 2, 'room-1'); \
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at, quantity, owner) VALUES \
           (1, 'held-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL), \
           (1, 'confirmed-key', 'confirmed', '2030-03-17 09:05:00+00', \
            '2030-03-17 09:01:00+00', NULL, '2030-03-17 09:00:00+00', 1, NULL), \
           (1, 'cancelled-key', 'cancelled', '2030-03-17 09:05:00+00', NULL, \
            '2030-03-17 09:02:00+00', '2030-03-17 09:00:00+00', 2, 'cart-2'), \
           (1, 'short-key', 'held', '2030-03-17 09:00:01+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, 'cart-3'); \
         INSERT INTO hold_keys (idempotency_key, hold_id) \
           SELECT idempotency_key, id FROM holds;",
    )
    .await
    else {
        return;
    };
    let slot_rows = "SELECT id, capacity, remaining, resource, closed FROM {s}.slots ORDER BY id";
    let hold_rows = "SELECT id, status, expires_at, quantity, owner FROM {s}.holds ORDER BY id";
    let key_rows = "SELECT idempotency_key, hold_id FROM {s}.hold_keys ORDER BY hold_id";
    type SlotRow = (i64, i32, i32, Option<String>, bool);
    type HoldRow = (i64, String, Timestamp, i32, Option<String>);
    let slots_before: Vec<SlotRow> = old.rows(slot_rows).await;
    let holds_before: Vec<HoldRow> = old.rows(hold_rows).await;
    let keys_before: Vec<(String, i64)> = old.rows(key_rows).await;

    let store = old.upgrade().await;

    let versions: Vec<(i64,)> = old
        .rows("SELECT version FROM {s}.slot_booking_migrations ORDER BY version")
        .await;
    assert_eq!(versions.last(), Some(&(13,)));
    assert_eq!(old.rows::<SlotRow>(slot_rows).await, slots_before);
    assert_eq!(old.rows::<HoldRow>(hold_rows).await, holds_before);
    assert_eq!(old.rows::<(String, i64)>(key_rows).await, keys_before);
    let log = ConsumerId::new("log").unwrap();
    assert_eq!(store.read_events(&log, 100).await.unwrap(), []);
    assert_eq!(store.consumer_position(&log).await.unwrap(), None);

    // The old expired hold is swept, with its event; then a confirm appends its own.
    let now: Timestamp = "2030-03-17T09:03:00Z".parse().unwrap();
    let swept = store.reclaim_expired(now, 10).await.unwrap();
    assert_eq!(
        swept.iter().map(|h| h.hold_id).collect::<Vec<_>>(),
        [HoldId(4)]
    );
    assert_eq!(counts(&store, SlotId(1)).await, (5, 3, 1, 1));
    store
        .confirm_hold(HoldId(1), &Scope::BackOffice, now)
        .await
        .unwrap();
    let events = store.read_events(&log, 100).await.unwrap();
    let seen: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.kind,
                e.hold_id,
                e.owner.as_ref().map(|o| o.as_str().to_owned()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                EventKind::HoldExpired,
                Some(HoldId(4)),
                Some("cart-3".to_owned())
            ),
            (EventKind::HoldConfirmed, Some(HoldId(1)), None),
        ]
    );
    assert!(events.iter().all(|e| e.at == now && e.slot_id == SlotId(1)));

    // The old cancelled hold and the swept one are purged with their keys; the rest stay.
    let later: Timestamp = "2030-03-18T00:00:00Z".parse().unwrap();
    let purged = store.purge(later, 10).await.unwrap();
    assert_eq!(purged.holds, 2);
    let keys: Vec<(String, i64)> = old.rows(key_rows).await;
    assert_eq!(
        keys,
        [("held-key".to_owned(), 1), ("confirmed-key".to_owned(), 2)]
    );
    assert_invariant(&store, SlotId(1)).await;
    old.admin.close().await;
}

/// Events read without waiting arrive by an additive migration (8): a schema made by
/// migrations 1 to 7, with events and a consumer halfway through them, upgrades in place. The
/// consumer resumes after its cursor: the old events it had not acknowledged come with the
/// positions they had (`<tx>_<id>`), then the new ones above them, none skipped or repeated;
/// a new consumer reads all of them in the same positions; purging the acknowledged old events
/// works across the upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_event_horizons_upgrades_in_place() {
    use slot_booking::{ConsumerId, EventKind, EventStore};
    let Some(old) = OldSchema::new(
        "a_schema_from_before_event_horizons_upgrades_in_place",
        7,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining) VALUES \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 5, 5); \
         INSERT INTO events (kind, slot_id, hold_id, owner, quantity, occurred_at) VALUES \
           ('slot_created', 1, NULL, NULL, 5, '2030-03-17 08:00:00+00'), \
           ('slot_closed', 1, NULL, NULL, 5, '2030-03-17 08:01:00+00'), \
           ('slot_reopened', 1, NULL, NULL, 5, '2030-03-17 08:02:00+00'), \
           ('slot_capacity_changed', 1, NULL, NULL, 5, '2030-03-17 08:03:00+00'); \
         INSERT INTO event_consumers (name, tx, id) \
           SELECT 'mailer', tx, id FROM events ORDER BY id LIMIT 1 OFFSET 1;",
    )
    .await
    else {
        return;
    };
    let before: Vec<(i64, i64)> = old
        .rows("SELECT tx::text::int8, id FROM {s}.events ORDER BY tx, id")
        .await;
    let store = old.upgrade().await;
    let mailer = ConsumerId::new("mailer").unwrap();
    assert_eq!(
        store.consumer_position(&mailer).await.unwrap(),
        Some(slot_booking::EventPosition::new(before[1].0, before[1].1)),
        "the cursor is kept"
    );
    let now: Timestamp = "2030-03-17T09:00:00Z".parse().unwrap();
    store.set_closed(SlotId(1), true, now).await.unwrap();
    let read = store.read_events(&mailer, 100).await.unwrap();
    let seen: Vec<_> = read
        .iter()
        .map(|e| (e.kind, e.position.epoch(), e.position.sequence()))
        .collect();
    assert_eq!(
        seen[..2],
        [
            (EventKind::SlotReopened, before[2].0, before[2].1),
            (EventKind::SlotCapacityChanged, before[3].0, before[3].1),
        ],
        "the old events keep their positions"
    );
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2].0, EventKind::SlotClosed);
    assert!(read[2].position > read[1].position);
    store.acknowledge(&mailer, read[2].position).await.unwrap();
    assert_eq!(store.read_events(&mailer, 100).await.unwrap(), []);
    let fresh = store
        .read_events(&ConsumerId::new("fresh").unwrap(), 100)
        .await
        .unwrap();
    assert_eq!(fresh.len(), 5);
    assert_eq!(&fresh[2..], &read[..]);
    // Every event acknowledged by both consumers is purged, old and new alike.
    store
        .acknowledge(&ConsumerId::new("fresh").unwrap(), fresh[4].position)
        .await
        .unwrap();
    let later: Timestamp = "2030-03-18T00:00:00Z".parse().unwrap();
    assert_eq!(store.purge(later, 100).await.unwrap().events, 5);
    old.admin.close().await;
}

/// Bookings of several lines arrive by an additive migration (9): a schema made by migrations
/// 1 to 8, with slots, holds and keys, upgrades in place with every row and key kept and no
/// hold a line of a booking. An old hold is then a booking of one line (read as one, its key
/// refusing a booking), a booking placed across old slots takes every line, and a hold change
/// of its second line changes all of it; the old hold still changes alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_bookings_upgrades_in_place() {
    use slot_booking::{
        Booking, BookingLine, BookingOutcome, BookingRequest, BookingStore, IdempotencyKey, Scope,
        Transition,
    };
    let Some(old) = OldSchema::new(
        "a_schema_from_before_bookings_upgrades_in_place",
        8,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining, resource) VALUES \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 5, 3, 'room-1'), \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 4, 4, NULL); \
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at, quantity, owner) VALUES \
           (1, 'held-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL), \
           (1, 'confirmed-key', 'confirmed', '2030-03-17 09:05:00+00', \
            '2030-03-17 09:01:00+00', NULL, '2030-03-17 09:00:00+00', 1, 'cart-2'); \
         INSERT INTO hold_keys (idempotency_key, hold_id) \
           SELECT idempotency_key, id FROM holds;",
    )
    .await
    else {
        return;
    };
    let slot_rows = "SELECT id, capacity, remaining, resource, closed FROM {s}.slots ORDER BY id";
    let hold_rows = "SELECT id, status, expires_at, quantity, owner FROM {s}.holds ORDER BY id";
    let key_rows = "SELECT idempotency_key, hold_id FROM {s}.hold_keys ORDER BY hold_id";
    type SlotRow = (i64, i32, i32, Option<String>, bool);
    type HoldRow = (i64, String, Timestamp, i32, Option<String>);
    let slots_before: Vec<SlotRow> = old.rows(slot_rows).await;
    let holds_before: Vec<HoldRow> = old.rows(hold_rows).await;
    let keys_before: Vec<(String, i64)> = old.rows(key_rows).await;

    let store = old.upgrade().await;

    let versions: Vec<(i64,)> = old
        .rows("SELECT version FROM {s}.slot_booking_migrations ORDER BY version")
        .await;
    assert_eq!(versions.last(), Some(&(13,)));
    assert_eq!(old.rows::<SlotRow>(slot_rows).await, slots_before);
    assert_eq!(old.rows::<HoldRow>(hold_rows).await, holds_before);
    assert_eq!(old.rows::<(String, i64)>(key_rows).await, keys_before);
    let lines: Vec<(i64,)> = old
        .rows("SELECT id FROM {s}.holds WHERE booking_id IS NOT NULL")
        .await;
    assert_eq!(lines, []);

    let now: Timestamp = "2030-03-17T09:02:00Z".parse().unwrap();
    let back_office = Scope::BackOffice;
    let old_hold = store
        .get_hold(HoldId(1), &back_office, now)
        .await
        .unwrap()
        .outcome
        .unwrap();
    let read = store
        .get_booking(HoldId(1), &back_office, now)
        .await
        .unwrap();
    assert_eq!(read.outcome, Some(Booking::of_hold(old_hold.clone())));

    let booking_lines = [
        BookingLine::new(SlotId(1), 2),
        BookingLine::new(SlotId(2), 4),
    ];
    let request = |key| BookingRequest {
        key,
        owner: None,
        lines: &booking_lines,
        now,
        expires_at: now + chrono::Duration::minutes(5),
    };
    let held_key = IdempotencyKey::new("held-key").unwrap();
    assert_eq!(
        store
            .create_booking(request(&held_key))
            .await
            .unwrap()
            .outcome,
        BookingOutcome::KeyReused(Some(Booking::of_hold(old_hold))),
        "an old hold's key is a booking's of one line"
    );
    let cart = IdempotencyKey::new("cart").unwrap();
    let booking = match store.create_booking(request(&cart)).await.unwrap().outcome {
        BookingOutcome::Created(booking) => booking,
        other => panic!("expected a booking, got {other:?}"),
    };
    // Ids after the old ones (the refused attempt drew two that are left unused), the
    // first line's the lowest: the booking's.
    let (first, second) = (booking.lines[0].hold_id, booking.lines[1].hold_id);
    assert_eq!(booking.booking_id, first);
    assert!(HoldId(2) < first && first < second);
    assert_eq!(
        booking.lines.iter().map(|h| h.slot_id).collect::<Vec<_>>(),
        [SlotId(1), SlotId(2)]
    );
    assert_eq!(counts(&store, SlotId(1)).await, (5, 1, 3, 1));
    assert_eq!(counts(&store, SlotId(2)).await, (4, 0, 4, 0));

    // The second line's confirm confirms the booking; the old hold still changes alone.
    let confirmed = store
        .confirm_hold(second, &Scope::Anonymous, now)
        .await
        .unwrap();
    assert!(matches!(confirmed.outcome, Transition::Applied(h) if h.hold_id == second));
    let whole = store
        .get_booking(first, &Scope::Anonymous, now)
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert!(whole
        .lines
        .iter()
        .all(|h| h.status == HoldStatus::Confirmed));
    let alone = store
        .confirm_hold(HoldId(1), &Scope::Anonymous, now)
        .await
        .unwrap();
    assert!(matches!(alone.outcome, Transition::Applied(h) if h.hold_id == HoldId(1)));
    assert_eq!(counts(&store, SlotId(1)).await, (5, 1, 0, 4));
    for slot_id in [SlotId(1), SlotId(2)] {
        assert_invariant(&store, slot_id).await;
    }
    old.admin.close().await;
}

/// Pools arrive by an additive migration (10): a schema made by migrations 1 to 9, with
/// slots, holds, keys and a booking, upgrades in place with every row kept and every slot in
/// no pool. Its slots then join a pool, which takes their units held and confirmed; a hold
/// takes from both and a cancel of the old hold gives back to both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_pools_upgrades_in_place() {
    use slot_booking::{
        BookingEngine, HoldStatus, ManualClock, NewHold, NewPool, PoolStore, Scope,
    };
    let Some(old) = OldSchema::new(
        "a_schema_from_before_pools_upgrades_in_place",
        9,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining, resource) VALUES \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 5, 2, 'room-1'), \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 4, 3, NULL); \
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at, quantity, owner, booking_id) VALUES \
           (1, 'held-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL, NULL), \
           (1, 'confirmed-key', 'confirmed', '2030-03-17 09:05:00+00', \
            '2030-03-17 09:01:00+00', NULL, '2030-03-17 09:00:00+00', 1, 'cart-2', NULL), \
           (1, 'line-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL, 3), \
           (2, 'line-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL, 3); \
         INSERT INTO hold_keys (idempotency_key, hold_id) VALUES \
           ('held-key', 1), ('confirmed-key', 2), ('line-key', 3);",
    )
    .await
    else {
        return;
    };
    let slot_rows = "SELECT id, capacity, remaining, resource, closed FROM {s}.slots ORDER BY id";
    let hold_rows =
        "SELECT id, status, expires_at, quantity, owner, booking_id FROM {s}.holds ORDER BY id";
    let key_rows = "SELECT idempotency_key, hold_id FROM {s}.hold_keys ORDER BY hold_id";
    type SlotRow = (i64, i32, i32, Option<String>, bool);
    type HoldRow = (i64, String, Timestamp, i32, Option<String>, Option<i64>);
    let slots_before: Vec<SlotRow> = old.rows(slot_rows).await;
    let holds_before: Vec<HoldRow> = old.rows(hold_rows).await;
    let keys_before: Vec<(String, i64)> = old.rows(key_rows).await;

    let store = old.upgrade().await;

    let versions: Vec<(i64,)> = old
        .rows("SELECT version FROM {s}.slot_booking_migrations ORDER BY version")
        .await;
    assert_eq!(versions.last(), Some(&(13,)));
    assert_eq!(old.rows::<SlotRow>(slot_rows).await, slots_before);
    assert_eq!(old.rows::<HoldRow>(hold_rows).await, holds_before);
    assert_eq!(old.rows::<(String, i64)>(key_rows).await, keys_before);
    let pooled: Vec<(i64,)> = old
        .rows("SELECT id FROM {s}.slots WHERE cardinality(pools) > 0")
        .await;
    assert_eq!(pooled, []);

    let now: Timestamp = "2030-03-17T09:02:00Z".parse().unwrap();
    let engine = BookingEngine::builder(store.clone())
        .clock(ManualClock::new(now))
        .cache_period(std::time::Duration::ZERO)
        .build();
    let pool = engine.create_pool(NewPool::new(8)).await.unwrap();
    engine.attach_slot(pool.pool_id, SlotId(1)).await.unwrap();
    let both = engine.attach_slot(pool.pool_id, SlotId(2)).await.unwrap();
    assert_eq!((both.remaining, both.held, both.confirmed), (4, 3, 1));
    engine
        .place_hold(NewHold::new(SlotId(2), "new").quantity(3))
        .await
        .unwrap();
    let cancelled = engine.cancel(&Scope::Anonymous, HoldId(1)).await.unwrap();
    assert_eq!(cancelled.status, HoldStatus::Cancelled);
    let read = store
        .get_pool(pool.pool_id, now)
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!((read.pool.stored_remaining, read.held), (2, 5));
    assert_eq!(counts(&store, SlotId(1)).await, (5, 3, 1, 1));
    assert_eq!(counts(&store, SlotId(2)).await, (4, 0, 4, 0));
    for slot_id in [SlotId(1), SlotId(2)] {
        assert_invariant(&store, slot_id).await;
    }
    old.admin.close().await;
}

/// Waitlists arrive by an additive migration (11): a schema made by migrations 1 to 10, with
/// slots, a pool, holds and keys, upgrades in place with every row kept, every line empty and
/// every key still a hold's. A full slot's line then waits, a newcomer is refused, and the
/// cancel of a hold stored before the upgrade offers its unit to the head in that statement
/// (the trigger of the migration), logged after the cancel; a slot in a pool has a line too
/// (migration 12): with its units free, a join on it is held at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_waitlists_upgrades_in_place() {
    use slot_booking::waitlists::Joined;
    use slot_booking::{
        BookingEngine, ConsumerId, EventKind, EventStore, ManualClock, NewHold, Scope,
    };
    let Some(old) = OldSchema::new(
        "a_schema_from_before_waitlists_upgrades_in_place",
        10,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining, resource, pools) VALUES \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 2, 0, 'room-1', '{}'), \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 3, 3, NULL, '{1}'); \
         INSERT INTO pools (capacity, remaining) VALUES (5, 5); \
         INSERT INTO slot_pools (slot_id, pool_id) VALUES (2, 1); \
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at, quantity, owner, booking_id) VALUES \
           (1, 'held-key', 'held', '2030-03-17 09:05:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL, NULL), \
           (1, 'confirmed-key', 'confirmed', '2030-03-17 09:05:00+00', \
            '2030-03-17 09:01:00+00', NULL, '2030-03-17 09:00:00+00', 1, 'cart-2', NULL); \
         INSERT INTO hold_keys (idempotency_key, hold_id) VALUES \
           ('held-key', 1), ('confirmed-key', 2);",
    )
    .await
    else {
        return;
    };
    let slot_rows =
        "SELECT id, capacity, remaining, resource, closed, pools FROM {s}.slots ORDER BY id";
    let hold_rows =
        "SELECT id, status, expires_at, quantity, owner, booking_id FROM {s}.holds ORDER BY id";
    let key_rows = "SELECT idempotency_key, hold_id FROM {s}.hold_keys ORDER BY hold_id";
    type SlotRow = (i64, i32, i32, Option<String>, bool, Vec<i64>);
    type HoldRow = (i64, String, Timestamp, i32, Option<String>, Option<i64>);
    let slots_before: Vec<SlotRow> = old.rows(slot_rows).await;
    let holds_before: Vec<HoldRow> = old.rows(hold_rows).await;
    let keys_before: Vec<(String, i64)> = old.rows(key_rows).await;

    let store = old.upgrade().await;

    let versions: Vec<(i64,)> = old
        .rows("SELECT version FROM {s}.slot_booking_migrations ORDER BY version")
        .await;
    assert_eq!(versions.last(), Some(&(13,)));
    assert_eq!(old.rows::<SlotRow>(slot_rows).await, slots_before);
    assert_eq!(old.rows::<HoldRow>(hold_rows).await, holds_before);
    assert_eq!(old.rows::<(String, i64)>(key_rows).await, keys_before);
    let waiting: Vec<(i64, i32)> = old
        .rows("SELECT id, waiting FROM {s}.slots ORDER BY id")
        .await;
    assert_eq!(waiting, [(1, 0), (2, 0)]);
    let entries: Vec<(i64,)> = old.rows("SELECT id FROM {s}.waitlist_entries").await;
    assert_eq!(entries, []);

    let now: Timestamp = "2030-03-17T09:02:00Z".parse().unwrap();
    let engine = BookingEngine::builder(store.clone())
        .clock(ManualClock::new(now))
        .cache_period(std::time::Duration::ZERO)
        .build();
    let log = ConsumerId::new("log").unwrap();
    let Ok(Joined::Waiting {
        entry, position: 1, ..
    }) = engine
        .join_waitlist(NewHold::new(SlotId(1), "waits"), 0)
        .await
    else {
        panic!("the full slot's line waits")
    };
    assert!(entry.entry_id.0 > 2, "an id after the old holds'");
    assert_eq!(
        engine.hold(SlotId(1), "newcomer").await.unwrap_err().code(),
        "sold_out"
    );
    let listed = store.availability(now).await.unwrap().outcome;
    let first = listed.iter().find(|e| e.slot_id == SlotId(1)).unwrap();
    assert_eq!(first.remaining, 0);
    let through = store.read_events(&log, 100).await.unwrap();
    if let Some(last) = through.last() {
        store.acknowledge(&log, last.position).await.unwrap();
    }

    engine.cancel(&Scope::Anonymous, HoldId(1)).await.unwrap();
    let offer = engine
        .get_hold(&Scope::Anonymous, entry.offer_id())
        .await
        .unwrap();
    assert_eq!(
        (offer.slot_id, offer.status, offer.created_at),
        (SlotId(1), HoldStatus::Held, now)
    );
    let events: Vec<(EventKind, Option<HoldId>)> = store
        .read_events(&log, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.hold_id))
        .collect();
    assert_eq!(
        events,
        [
            (EventKind::HoldCancelled, Some(HoldId(1))),
            (EventKind::HoldPlaced, Some(offer.hold_id)),
            (EventKind::WaitlistOffered, Some(offer.hold_id)),
        ]
    );
    // The entry's key is its offer's now: the same join replays it.
    let Ok(Joined::Held {
        hold,
        replayed: true,
    }) = engine
        .join_waitlist(NewHold::new(SlotId(1), "waits"), 0)
        .await
    else {
        panic!("the offer replayed")
    };
    assert_eq!(hold.hold_id, offer.hold_id);
    assert_eq!(counts(&store, SlotId(1)).await, (2, 0, 1, 1));
    assert_invariant(&store, SlotId(1)).await;
    let Ok(Joined::Held { hold, .. }) = engine
        .join_waitlist(NewHold::new(SlotId(2), "pooled"), 0)
        .await
    else {
        panic!("a pooled slot with its units free: held at once")
    };
    assert_eq!(hold.slot_id, SlotId(2));
    old.admin.close().await;
}

/// Waitlists on pooled slots arrive by an additive migration (12): a schema made by migrations
/// 1 to 11 (two slots of one pool, holds, keys, and a line on one slot, attached to the pool
/// after its line formed, as 11 allowed) upgrades in place with every row kept and the pool
/// counting its slots' entries. The pool's line then refuses a newcomer on the other slot, and
/// the cancel of a hold stored before the upgrade on that other slot offers the pool's unit to
/// the head in that statement, logged after the cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_before_pool_waitlists_upgrades_in_place() {
    use slot_booking::{
        BookingEngine, ConsumerId, EventKind, EventStore, ManualClock, Scope, WaitlistStore,
    };
    let Some(old) = OldSchema::new(
        "a_schema_from_before_pool_waitlists_upgrades_in_place",
        11,
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining, resource, pools, waiting) \
         VALUES \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 2, 1, 'room-1', '{1}', 1), \
           ('2030-03-17 10:00:00+00', '2030-03-17 11:00:00+00', 2, 1, NULL, '{1}', 0); \
         INSERT INTO pools (capacity, remaining) VALUES (2, 0); \
         INSERT INTO slot_pools (slot_id, pool_id) VALUES (1, 1), (2, 1); \
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, confirmed_at, \
                            cancelled_at, created_at, quantity, owner, booking_id) VALUES \
           (1, 'first-key', 'held', '2030-03-17 09:50:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, NULL, NULL), \
           (2, 'second-key', 'held', '2030-03-17 09:50:00+00', NULL, NULL, \
            '2030-03-17 09:00:00+00', 1, 'cart-2', NULL); \
         INSERT INTO hold_keys (idempotency_key, hold_id) VALUES \
           ('first-key', 1), ('second-key', 2); \
         INSERT INTO waitlist_entries (id, slot_id, idempotency_key, quantity, owner, priority, \
                                       joined_at, offer_micros) \
         VALUES (nextval(pg_get_serial_sequence('holds', 'id')), 1, 'waits', 1, NULL, 0, \
                 '2030-03-17 09:01:00+00', 300000000); \
         INSERT INTO hold_keys (idempotency_key, entry_id) VALUES ('waits', 3);",
    )
    .await
    else {
        return;
    };
    let slot_rows = "SELECT id, capacity, remaining, pools, waiting FROM {s}.slots ORDER BY id";
    let hold_rows = "SELECT id, status, expires_at, quantity, owner FROM {s}.holds ORDER BY id";
    let entry_rows = "SELECT id, slot_id, idempotency_key, quantity, priority, offer_micros \
                      FROM {s}.waitlist_entries ORDER BY id";
    let key_rows = "SELECT idempotency_key, hold_id, entry_id FROM {s}.hold_keys \
                    ORDER BY idempotency_key";
    let pool_rows = "SELECT id, capacity, remaining FROM {s}.pools ORDER BY id";
    type SlotRow = (i64, i32, i32, Vec<i64>, i32);
    type HoldRow = (i64, String, Timestamp, i32, Option<String>);
    type EntryRow = (i64, i64, String, i32, i32, i64);
    type KeyRow = (String, Option<i64>, Option<i64>);
    let slots_before: Vec<SlotRow> = old.rows(slot_rows).await;
    let holds_before: Vec<HoldRow> = old.rows(hold_rows).await;
    let entries_before: Vec<EntryRow> = old.rows(entry_rows).await;
    let keys_before: Vec<KeyRow> = old.rows(key_rows).await;
    let pools_before: Vec<(i64, i32, i32)> = old.rows(pool_rows).await;
    assert_eq!(entries_before.len(), 1);

    let store = old.upgrade().await;

    let versions: Vec<(i64,)> = old
        .rows("SELECT version FROM {s}.slot_booking_migrations ORDER BY version")
        .await;
    assert_eq!(versions.last(), Some(&(13,)));
    assert_eq!(old.rows::<SlotRow>(slot_rows).await, slots_before);
    assert_eq!(old.rows::<HoldRow>(hold_rows).await, holds_before);
    assert_eq!(old.rows::<EntryRow>(entry_rows).await, entries_before);
    assert_eq!(old.rows::<KeyRow>(key_rows).await, keys_before);
    assert_eq!(old.rows::<(i64, i32, i32)>(pool_rows).await, pools_before);
    let waiting: Vec<(i64, i32)> = old
        .rows("SELECT id, waiting FROM {s}.pools ORDER BY id")
        .await;
    assert_eq!(waiting, [(1, 1)], "the pool counts its slots' entries");

    let now: Timestamp = "2030-03-17T09:02:00Z".parse().unwrap();
    let engine = BookingEngine::builder(store.clone())
        .clock(ManualClock::new(now))
        .cache_period(std::time::Duration::ZERO)
        .build();
    let (entry, position) = store
        .waitlist_entry(slot_booking::EntryId(3), &Scope::BackOffice, now)
        .await
        .unwrap()
        .outcome
        .expect("the entry waits");
    assert_eq!((entry.slot_id, position), (SlotId(1), 1));
    // The pool's line waits: a newcomer on the other slot is refused, listed with no unit.
    assert_eq!(
        engine.hold(SlotId(2), "newcomer").await.unwrap_err().code(),
        "sold_out"
    );
    let listed = store.availability(now).await.unwrap().outcome;
    let second = listed.iter().find(|e| e.slot_id == SlotId(2)).unwrap();
    assert_eq!(second.remaining, 0);
    let log = ConsumerId::new("log").unwrap();
    let through = store.read_events(&log, 100).await.unwrap();
    if let Some(last) = through.last() {
        store.acknowledge(&log, last.position).await.unwrap();
    }

    engine.cancel(&Scope::BackOffice, HoldId(2)).await.unwrap();
    let offer = engine
        .get_hold(&Scope::Anonymous, entry.offer_id())
        .await
        .unwrap();
    assert_eq!(
        (offer.slot_id, offer.status, offer.created_at),
        (SlotId(1), HoldStatus::Held, now)
    );
    let events: Vec<(EventKind, Option<HoldId>)> = store
        .read_events(&log, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.hold_id))
        .collect();
    assert_eq!(
        events,
        [
            (EventKind::HoldCancelled, Some(HoldId(2))),
            (EventKind::HoldPlaced, Some(HoldId(3))),
            (EventKind::WaitlistOffered, Some(HoldId(3))),
        ]
    );
    let pools_after: Vec<(i64, i32, i32)> = old
        .rows("SELECT id, remaining, waiting FROM {s}.pools ORDER BY id")
        .await;
    assert_eq!(pools_after, [(1, 0, 0)]);
    assert_eq!(counts(&store, SlotId(1)).await, (2, 0, 2, 0));
    for slot_id in [SlotId(1), SlotId(2)] {
        assert_invariant(&store, slot_id).await;
    }
    old.admin.close().await;
}
