//! Embedded migrations: idempotent, coexisting with a host application's sqlx migrations, and
//! data surviving a restart.

mod common;

use slot_booking::{HoldStore, JoinOutcome, JoinRequest, SlotAdmin, WaitlistStore};
use std::path::Path;

use common::*;
use slot_booking::conformance::kit::check_previous_release_sells_on;
use slot_booking::{
    AvailabilityQuery, Booking, BookingLine, BookingOutcome, BookingRequest, BookingStore,
    ConsumerId, EventKind, EventStore, HoldId, HoldOutcome, PageRequest, Purged, Scope, SlotChange,
    SlotId, Transition,
};
use slot_booking_sqlite::SqliteStore;
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, FromRow, SqlitePool};

async fn host_migrator() -> Migrator {
    Migrator::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/host_migrations"))
        .await
        .unwrap()
}

/// Every row `sql` selects, each as a `T`.
async fn rows<T>(pool: &SqlitePool, sql: &str) -> Vec<T>
where
    T: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
{
    sqlx::query_as(AssertSqlSafe(sql))
        .fetch_all(pool)
        .await
        .unwrap()
}

/// The one column `sql` selects, row by row.
async fn column<T>(pool: &SqlitePool, sql: &str) -> Vec<T>
where
    (T,): for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
{
    rows::<(T,)>(pool, sql)
        .await
        .into_iter()
        .map(|(v,)| v)
        .collect()
}

async fn tables(pool: &SqlitePool) -> Vec<String> {
    column(
        pool,
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
    )
    .await
}

/// Asserts that each of `expected` is among the database's tables.
async fn assert_tables(pool: &SqlitePool, expected: &[&str]) {
    let names = tables(pool).await;
    for table in expected {
        assert!(
            names.iter().any(|n| n == table),
            "{table} missing in {names:?}"
        );
    }
}

/// Runs `sql`, one statement or several.
async fn execute(pool: &SqlitePool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(pool)
        .await
        .unwrap();
}

/// A pool on the database file, with nothing migrated.
async fn bare_pool(db: &TempDb) -> SqlitePool {
    SqliteStore::connect(&db.url())
        .await
        .unwrap()
        .pool()
        .clone()
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

    assert_tables(
        store.pool(),
        &[
            "_sqlx_migrations",
            "customers",
            "orders",
            "slot_booking_migrations",
            "slot_booking_slots",
            "slot_booking_holds",
        ],
    )
    .await;
    let ours: Vec<(i64, String)> = rows(
        store.pool(),
        "SELECT version, description FROM slot_booking_migrations ORDER BY version",
    )
    .await;
    assert_eq!(
        ours,
        vec![
            (1, "create slots and holds".to_owned()),
            (2, "holds take a unit".to_owned()),
            (3, "owners and quantities".to_owned()),
            (4, "slot administration".to_owned()),
            (5, "events".to_owned()),
            (6, "sold out in one statement".to_owned()),
            (7, "consumer leases".to_owned()),
            (8, "bookings".to_owned()),
            (9, "pools".to_owned()),
            (10, "waitlists".to_owned()),
            (11, "pool waitlists".to_owned()),
            (12, "events by hold".to_owned()),
        ]
    );
    let theirs: Vec<i64> = column(
        store.pool(),
        "SELECT version FROM _sqlx_migrations ORDER BY version",
    )
    .await;
    assert_eq!(theirs, vec![20240101000000, 20240102000000]);

    // Ours first on a fresh database, then the host's.
    let db2 = TempDb::new("coexist2");
    let store2 = SqliteStore::connect(&db2.url()).await.unwrap();
    store2.migrate().await.unwrap();
    host.run(store2.pool()).await.unwrap();
    store2.migrate().await.unwrap();
    let slot_id = slot(&store2, 1).await;
    created(hold(&store2, slot_id, "a", at(0)).await);
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
    assert_eq!(n, 12, "each of the twelve migrations applied once");
}

#[tokio::test]
async fn data_survives_a_restart() {
    let db = TempDb::new("restart");
    let (slot_id, hold) = {
        let store = db.store().await;
        let slot_id = slot(&store, 3).await;
        let hold = created(hold(&store, slot_id, "a", at(0)).await);
        store
            .confirm_hold(hold.hold_id, &slot_booking::Scope::BackOffice, at(1))
            .await
            .unwrap();
        store.pool().close().await;
        (slot_id, hold.hold_id)
    };
    let store = db.store().await;
    let slot = store.get_slot(slot_id).await.unwrap().unwrap();
    assert_eq!((slot.capacity, slot.stored_remaining), (3, 2));
    let stored = store
        .get_hold(hold, &slot_booking::Scope::BackOffice, at(2))
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert_eq!(stored.status, slot_booking::HoldStatus::Confirmed);
    assert_eq!(stored.confirmed_at, Some(at(1)));
    assert_invariant(store.pool(), slot_id).await;
}

/// The schema version 0.1 of this crate created: bare `slots` and `holds`, ledger
/// `slot_booking_migrations`.
async fn create_0_1_schema(pool: &SqlitePool) {
    create_recorded_schema(pool, "tests/legacy_0_1", 2).await;
}

/// Migrations 1 to `up_to` from `dir` (under the crate), with the default prefix for `{p}`,
/// recorded in `slot_booking_migrations` as the release that shipped them recorded them.
async fn create_recorded_schema(pool: &SqlitePool, dir: &str, up_to: i64) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    execute(
        pool,
        "CREATE TABLE slot_booking_migrations (version INTEGER PRIMARY KEY, \
         description TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )
    .await;
    for (version, file, description) in [
        (
            1,
            "0001_create_slots_and_holds.sql",
            "create slots and holds",
        ),
        (2, "0002_holds_take_a_unit.sql", "holds take a unit"),
        (3, "0003_owners_quantities.sql", "owners and quantities"),
        (4, "0004_slot_administration.sql", "slot administration"),
        (5, "0005_events.sql", "events"),
        (
            6,
            "0006_sold_out_in_one_statement.sql",
            "sold out in one statement",
        ),
        (7, "0007_consumer_leases.sql", "consumer leases"),
        (8, "0008_bookings.sql", "bookings"),
        (9, "0009_pools.sql", "pools"),
        (10, "0010_waitlists.sql", "waitlists"),
    ]
    .into_iter()
    .filter(|(version, _, _)| *version <= up_to)
    {
        let sql = std::fs::read_to_string(dir.join(file))
            .unwrap()
            .replace("{p}", "slot_booking_");
        execute(pool, &sql).await;
        sqlx::query("INSERT INTO slot_booking_migrations VALUES (?1, ?2, 0)")
            .bind(version)
            .bind(description)
            .execute(pool)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_database_made_by_0_1_upgrades_in_place_keeping_every_row() {
    let db = TempDb::new("legacy");
    let pool = bare_pool(&db).await;
    create_0_1_schema(&pool).await;
    // 0.1's rows: a slot of 3 with a held, a confirmed and a cancelled hold (its trigger takes
    // the units, the cancel gives one back).
    let (t, later) = (at(0).timestamp_micros(), at(3600).timestamp_micros());
    let sql = format!(
        "INSERT INTO slots (starts_at, ends_at, capacity, remaining) VALUES ({later}, {}, 3, 3);
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, created_at)
             VALUES (1, 'held-key', 'held', {}, {t});
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, created_at)
             VALUES (1, 'confirmed-key', 'held', {}, {t});
         UPDATE holds SET status = 'confirmed', confirmed_at = {t} WHERE id = 2;
         INSERT INTO holds (slot_id, idempotency_key, status, expires_at, created_at)
             VALUES (1, 'cancelled-key', 'held', {}, {t});
         UPDATE holds SET status = 'cancelled', cancelled_at = {t} WHERE id = 3;
         UPDATE slots SET remaining = remaining + 1 WHERE id = 1;",
        later + 3_600_000_000,
        t + 300_000_000,
        t + 300_000_000,
        t + 300_000_000,
    );
    execute(&pool, &sql).await;
    let before: Vec<(i64, String, String)> = rows(
        &pool,
        "SELECT id, idempotency_key, status FROM holds ORDER BY id",
    )
    .await;

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    let names = tables(&pool).await;
    assert!(
        !names.iter().any(|n| n == "slots" || n == "holds"),
        "{names:?}"
    );
    let after: Vec<(i64, String, String)> = rows(
        &pool,
        "SELECT id, idempotency_key, status FROM slot_booking_holds ORDER BY id",
    )
    .await;
    assert_eq!(after, before, "every hold kept, ids included");
    assert_counts(&pool, SlotId(1), (3, 1, 1, 1)).await;
    // The renamed schema still enforces the rules: the trigger takes a unit, the unique key
    // replays, and the last unit goes once.
    assert!(matches!(
        hold(&store, SlotId(1), "held-key", at(1)).await,
        HoldOutcome::Replayed(h) if h.hold_id.get() == 1
    ));
    created(hold(&store, SlotId(1), "new", at(1)).await);
    assert!(matches!(
        hold(&store, SlotId(1), "more", at(1)).await,
        HoldOutcome::SoldOut
    ));
    assert_invariant(&pool, SlotId(1)).await;
    let objects: Vec<String> = column(
        &pool,
        "SELECT name FROM sqlite_master WHERE type IN ('index', 'trigger') \
         AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .await;
    assert!(
        objects.iter().all(|n| n.starts_with("slot_booking_")),
        "indexes and trigger carry the prefix: {objects:?}"
    );
}

#[tokio::test]
async fn a_host_table_named_holds_is_left_alone() {
    let db = TempDb::new("hostholds");
    let store = SqliteStore::connect(&db.url()).await.unwrap();
    let pool = store.pool().clone();
    execute(
        &pool,
        "CREATE TABLE holds (id INTEGER PRIMARY KEY, note TEXT NOT NULL);
         CREATE TABLE slots (id INTEGER PRIMARY KEY, room TEXT NOT NULL);
         INSERT INTO holds (note) VALUES ('the host''s own row');",
    )
    .await;
    store.migrate().await.unwrap();
    let slot_id = slot(&store, 1).await;
    created(hold(&store, slot_id, "a", at(0)).await);
    let host_rows: Vec<(i64, String)> = rows(&pool, "SELECT id, note FROM holds").await;
    assert_eq!(host_rows, vec![(1, "the host's own row".to_owned())]);
    assert_invariant(&pool, slot_id).await;
}

#[tokio::test]
async fn stores_with_different_prefixes_share_a_database_independently() {
    let db = TempDb::new("prefixes");
    let store = SqliteStore::connect(&db.url()).await.unwrap();
    let other = store.clone().with_table_prefix("booking_").unwrap();
    assert!(store.clone().with_table_prefix("Booking").is_err());
    store.migrate().await.unwrap();
    other.migrate().await.unwrap();
    assert_tables(
        store.pool(),
        &["booking_slots", "booking_holds", "booking_migrations"],
    )
    .await;
    let a = slot(&store, 1).await;
    let b = slot(&other, 1).await;
    assert_eq!(a, b, "each prefix numbers its own slots");
    created(hold(&store, a, "k", at(0)).await);
    assert!(
        matches!(hold(&other, b, "k", at(0)).await, HoldOutcome::Created(_)),
        "keys are unique per prefix, the units are separate"
    );
    assert_eq!(
        store.get_slot(a).await.unwrap().unwrap().stored_remaining,
        0
    );
    assert_eq!(
        other.get_slot(b).await.unwrap().unwrap().stored_remaining,
        0
    );
}

/// Slot 1 (capacity 5, starting an hour after `at(0)`) with a held, a confirmed, a cancelled
/// and an expired-but-unreclaimed hold, inserted as a release before owners and quantities did
/// (its trigger takes one unit per hold, the cancel gives one back): the rows
/// `check_previous_release_sells_on` expects.
async fn insert_previous_release_rows(pool: &SqlitePool) {
    let (t, start) = (at(0).timestamp_micros(), at(3600).timestamp_micros());
    let insert = |key: &str, expires: i64| {
        format!(
            "INSERT INTO slot_booking_holds (slot_id, idempotency_key, status, expires_at, created_at) \
             VALUES (1, '{key}', 'held', {expires}, {t});"
        )
    };
    let sql = format!(
        "INSERT INTO slot_booking_slots (starts_at, ends_at, capacity, remaining) \
             VALUES ({start}, {}, 5, 5);
         {} {} {} {}
         UPDATE slot_booking_holds SET status = 'confirmed', confirmed_at = {t} WHERE id = 2;
         UPDATE slot_booking_holds SET status = 'cancelled', cancelled_at = {t} WHERE id = 3;
         UPDATE slot_booking_slots SET remaining = remaining + 1 WHERE id = 1;",
        start + 3_600_000_000,
        insert("held-key", t + 300_000_000),
        insert("confirmed-key", t + 300_000_000),
        insert("cancelled-key", t + 300_000_000),
        insert("short-key", t + 1),
    );
    execute(pool, &sql).await;
}

/// A database as the release that shipped migrations 1 to `up_to` left it, holding
/// `insert_previous_release_rows`'s rows.
async fn previous_release_database(db: &TempDb, up_to: i64) -> SqlitePool {
    let pool = bare_pool(db).await;
    create_recorded_schema(&pool, "migrations", up_to).await;
    insert_previous_release_rows(&pool).await;
    pool
}

/// Through the engine: slot 1's old rows keep selling, multi-unit holds included.
async fn assert_previous_release_sells_on(store: &SqliteStore) {
    check_previous_release_sells_on(store.clone(), at(1)).await;
    assert_counts(store.pool(), SlotId(1), (5, 0, 4, 1)).await;
}

/// Owners and quantities arrive by an additive migration: a database with holds made by the
/// previous migrations keeps every row (as anonymous one-unit holds) and the invariant, and
/// then takes owned multi-unit holds.
#[tokio::test]
async fn a_database_made_by_the_previous_migrations_upgrades_in_place() {
    let db = TempDb::new("previous");
    // The release before owners and quantities: migrations 1 and 2 as this crate ships them.
    let pool = previous_release_database(&db, 2).await;
    let hold_rows = "SELECT id, idempotency_key, status, expires_at, confirmed_at, \
                     cancelled_at, created_at FROM slot_booking_holds ORDER BY id";
    type Row = (i64, String, String, i64, Option<i64>, Option<i64>, i64);
    let before: Vec<Row> = rows(&pool, hold_rows).await;

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();

    let after: Vec<Row> = rows(&pool, hold_rows).await;
    assert_eq!(after, before, "every hold kept as it was");
    let added: Vec<(i64, Option<String>)> = rows(
        &pool,
        "SELECT quantity, owner FROM slot_booking_holds ORDER BY id",
    )
    .await;
    assert_eq!(
        added,
        vec![(1, None); 4],
        "old holds are anonymous single units"
    );
    assert_counts(&pool, SlotId(1), (5, 2, 2, 1)).await;
    assert_previous_release_sells_on(&store).await;
}

/// Slot administration arrives by an additive migration: a database made by migrations 1 to 3
/// keeps every slot and hold as it was, its slots come out open, not removed and of no
/// resource, they keep selling, and the new trigger refuses holds on closed and removed slots.
#[tokio::test]
async fn a_database_made_by_migrations_1_to_3_upgrades_in_place() {
    let db = TempDb::new("before_admin");
    let pool = previous_release_database(&db, 3).await;
    // Migration 3's rows too: slot 2 (capacity 4) with an owned hold of 3 units, slot 3 long
    // past with a confirmed hold, both inserted through migration 3's trigger.
    let (t, start) = (at(0).timestamp_micros(), at(3600).timestamp_micros());
    let (past, end) = (at(-7200).timestamp_micros(), start + 3_600_000_000);
    let sql = format!(
        "INSERT INTO slot_booking_slots (starts_at, ends_at, capacity, remaining) \
             VALUES ({start}, {end}, 4, 4), ({past}, {}, 2, 2);
         INSERT INTO slot_booking_holds \
             (slot_id, idempotency_key, status, expires_at, created_at, quantity, owner) \
             VALUES (2, 'owned-key', 'held', {}, {t}, 3, 'cart-9'), \
                    (3, 'past-key', 'held', {}, {}, 1, NULL);
         UPDATE slot_booking_holds SET status = 'confirmed', confirmed_at = {t} WHERE id = 6;",
        past + 3_600_000_000,
        t + 300_000_000,
        past,
        past - 1,
    );
    execute(&pool, &sql).await;
    let slot_rows = "SELECT id, starts_at, ends_at, capacity, remaining \
                     FROM slot_booking_slots ORDER BY id";
    let hold_rows = "SELECT id, slot_id, idempotency_key, status, expires_at, confirmed_at, \
                     cancelled_at, created_at, quantity, owner FROM slot_booking_holds ORDER BY id";
    type SlotRow = (i64, i64, i64, i64, i64);
    type HoldRow = (
        i64,
        i64,
        String,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        i64,
        i64,
        Option<String>,
    );
    let slots_before: Vec<SlotRow> = rows(&pool, slot_rows).await;
    let holds_before: Vec<HoldRow> = rows(&pool, hold_rows).await;
    assert_eq!((slots_before.len(), holds_before.len()), (3, 6));

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    let slots_after: Vec<SlotRow> = rows(&pool, slot_rows).await;
    let holds_after: Vec<HoldRow> = rows(&pool, hold_rows).await;
    assert_eq!(slots_after, slots_before, "every slot kept as it was");
    assert_eq!(holds_after, holds_before, "every hold kept as it was");
    let added: Vec<(Option<String>, i64, Option<i64>)> = rows(
        &pool,
        "SELECT resource, closed, removed_at FROM slot_booking_slots ORDER BY id",
    )
    .await;
    assert_eq!(
        added,
        vec![(None, 0, None); 3],
        "old slots are open, kept, of no resource"
    );
    let versions: Vec<i64> = column(
        &pool,
        "SELECT version FROM slot_booking_migrations ORDER BY version",
    )
    .await;
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    for id in 1..=3 {
        let slot = store.get_slot(SlotId(id)).await.unwrap().unwrap();
        assert_eq!(
            (slot.resource, slot.closed, slot.removed_at),
            (None, false, None)
        );
        assert_invariant(&pool, SlotId(id)).await;
    }
    assert_eq!(counts(&pool, SlotId(2)).await, (4, 1, 3, 0));

    // The operator's listing reads the old rows: slot 3 (past) first, then 1 and 2.
    let listed = store
        .list_slots(&AvailabilityQuery::all(), PageRequest::first(10), at(1))
        .await
        .unwrap()
        .outcome;
    let units: Vec<(i64, i32, i32, i32)> = listed
        .iter()
        .map(|u| {
            (
                u.slot.slot_id.get(),
                u.slot.stored_remaining,
                u.held,
                u.expired,
            )
        })
        .collect();
    assert_eq!(units, vec![(3, 1, 0, 0), (1, 2, 1, 1), (2, 1, 3, 0)]);

    // The new trigger on the old rows: a closed slot takes no hold, and reopened it does.
    let change = store
        .set_closed(SlotId(2), true, at(1))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(change, SlotChange::Applied(ref s) if s.closed));
    assert!(matches!(
        hold(&store, SlotId(2), "while-closed", at(1)).await,
        HoldOutcome::SlotClosed
    ));
    store.set_closed(SlotId(2), false, at(1)).await.unwrap();
    created(hold(&store, SlotId(2), "reopened", at(1)).await);
    assert!(matches!(
        store.remove_slot(SlotId(2), at(1)).await.unwrap().outcome,
        SlotChange::InUse(u) if u.held == 4
    ));
    assert_invariant(&pool, SlotId(2)).await;

    assert_previous_release_sells_on(&store).await;
}

/// The event log arrives by an additive migration: a database made by migrations 1 to 4 keeps
/// every slot and hold as it was, starts with an empty log (old rows have no events), and from
/// then on every change appends its event, the lazy reclaim of an old expired hold included;
/// a purge deletes old ended holds and frees their keys.
#[tokio::test]
async fn a_database_made_by_migrations_1_to_4_upgrades_in_place() {
    let db = TempDb::new("before_events");
    let pool = previous_release_database(&db, 4).await;
    execute(
        &pool,
        "UPDATE slot_booking_slots SET resource = 'room-1' WHERE id = 1",
    )
    .await;
    let slot_rows = "SELECT id, starts_at, ends_at, capacity, remaining, resource, closed, \
                     removed_at FROM slot_booking_slots ORDER BY id";
    let hold_rows = "SELECT id, slot_id, idempotency_key, status, expires_at, confirmed_at, \
                     cancelled_at, created_at, quantity, owner FROM slot_booking_holds ORDER BY id";
    type SlotRow = (i64, i64, i64, i64, i64, Option<String>, i64, Option<i64>);
    type HoldRow = (
        i64,
        i64,
        String,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        i64,
        i64,
        Option<String>,
    );
    let slots_before: Vec<SlotRow> = rows(&pool, slot_rows).await;
    let holds_before: Vec<HoldRow> = rows(&pool, hold_rows).await;
    assert_eq!((slots_before.len(), holds_before.len()), (1, 4));

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    assert_eq!(rows::<SlotRow>(&pool, slot_rows).await, slots_before);
    assert_eq!(rows::<HoldRow>(&pool, hold_rows).await, holds_before);
    assert_tables(
        &pool,
        &["slot_booking_events", "slot_booking_event_consumers"],
    )
    .await;
    let versions: Vec<i64> = column(
        &pool,
        "SELECT version FROM slot_booking_migrations ORDER BY version",
    )
    .await;
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    let reader = ConsumerId::new("reader").unwrap();
    assert!(store.read_events(&reader, 100).await.unwrap().is_empty());

    // The old rows sell on: the three units include the old expired hold 4, reclaimed lazily.
    assert_previous_release_sells_on(&store).await;
    let events = store.read_events(&reader, 100).await.unwrap();
    let seen: Vec<(EventKind, Option<HoldId>, i32)> = events
        .iter()
        .map(|e| (e.kind, e.hold_id, e.quantity))
        .collect();
    assert_eq!(
        seen,
        vec![
            (EventKind::HoldExpired, Some(HoldId(4)), 1),
            (EventKind::HoldPlaced, Some(HoldId(5)), 3)
        ]
    );
    assert!(events.iter().all(|e| e.at == at(1)));

    // The old cancelled hold (3) and the reclaimed one (4) are history a purge deletes; their
    // keys are free again (the slot is full now, so the old key no longer replays).
    assert!(matches!(
        hold(&store, SlotId(1), "cancelled-key", at(2)).await,
        HoldOutcome::Replayed(h) if h.hold_id == HoldId(3)
    ));
    store
        .acknowledge(&reader, events[1].position)
        .await
        .unwrap();
    assert_eq!(
        store.purge(at(10), 100).await.unwrap(),
        Purged {
            holds: 2,
            events: 2
        }
    );
    assert!(matches!(
        hold(&store, SlotId(1), "cancelled-key", at(2)).await,
        HoldOutcome::SoldOut
    ));
    let left: Vec<i64> = column(&pool, "SELECT id FROM slot_booking_holds ORDER BY id").await;
    assert_eq!(left, vec![1, 2, 5]);
    assert_counts(&pool, SlotId(1), (5, 0, 4, 1)).await;
}

/// The sold-out abort arrives by a migration that only recreates the trigger: a database made
/// by migrations 1 to 5 keeps every slot, hold and event as it was, sells on, and from then on
/// a hold on its full slot is refused by the insert's own abort (migration 6's message), while
/// a replay of an old key on that full slot still answers with the old hold.
#[tokio::test]
async fn a_database_made_by_migrations_1_to_5_upgrades_in_place() {
    let db = TempDb::new("before_sold_out");
    let pool = previous_release_database(&db, 5).await;
    let slot_rows = "SELECT id, starts_at, ends_at, capacity, remaining, resource, closed, \
                     removed_at FROM slot_booking_slots ORDER BY id";
    let hold_rows = "SELECT id, slot_id, idempotency_key, status, expires_at, confirmed_at, \
                     cancelled_at, created_at, quantity, owner FROM slot_booking_holds ORDER BY id";
    let event_rows = "SELECT id, kind, slot_id, hold_id, quantity, occurred_at \
                      FROM slot_booking_events ORDER BY id";
    type SlotRow = (i64, i64, i64, i64, i64, Option<String>, i64, Option<i64>);
    type HoldRow = (
        i64,
        i64,
        String,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        i64,
        i64,
        Option<String>,
    );
    type EventRow = (i64, String, i64, Option<i64>, i64, i64);
    let slots_before: Vec<SlotRow> = rows(&pool, slot_rows).await;
    let holds_before: Vec<HoldRow> = rows(&pool, hold_rows).await;
    let events_before: Vec<EventRow> = rows(&pool, event_rows).await;
    // Migration 5's trigger appended one `hold_placed` per hold inserted.
    assert_eq!(
        (slots_before.len(), holds_before.len(), events_before.len()),
        (1, 4, 4)
    );

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    assert_eq!(rows::<SlotRow>(&pool, slot_rows).await, slots_before);
    assert_eq!(rows::<HoldRow>(&pool, hold_rows).await, holds_before);
    assert_eq!(rows::<EventRow>(&pool, event_rows).await, events_before);
    let versions: Vec<i64> = column(
        &pool,
        "SELECT version FROM slot_booking_migrations ORDER BY version",
    )
    .await;
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);

    // The old rows sell on (the old expired hold reclaimed lazily), filling slot 1.
    assert_previous_release_sells_on(&store).await;
    // Full, nothing expired at `at(2)`: the insert itself says sold out.
    let refused = sqlx::query(
        "INSERT INTO slot_booking_holds \
             (slot_id, idempotency_key, status, expires_at, created_at, quantity) \
         VALUES (1, 'raw-key', 'held', ?1, ?2, 1)",
    )
    .bind(at(300).timestamp_micros())
    .bind(at(2).timestamp_micros())
    .execute(&pool)
    .await
    .unwrap_err();
    let message = refused.as_database_error().map(|e| e.message().to_owned());
    assert_eq!(message.as_deref(), Some("slot_booking: sold out"));
    assert!(matches!(
        hold(&store, SlotId(1), "after-upgrade", at(2)).await,
        HoldOutcome::SoldOut
    ));
    // An old key on the full slot is answered by its hold, not by the sold-out abort.
    assert!(matches!(
        hold(&store, SlotId(1), "held-key", at(2)).await,
        HoldOutcome::Replayed(h) if h.hold_id == HoldId(1)
    ));
    assert_counts(&pool, SlotId(1), (5, 0, 4, 1)).await;
}

/// Bookings arrive by an additive migration (a nullable `booking_id` and its index): a database
/// made by migrations 1 to 7 keeps every slot, hold, event and consumer as it was, its holds
/// come out as plain holds (bookings of one line), their keys still answer for them, and it
/// then takes bookings of several lines, changed whole by any line.
#[tokio::test]
async fn a_database_made_by_migrations_1_to_7_upgrades_in_place() {
    let db = TempDb::new("before_bookings");
    let pool = previous_release_database(&db, 7).await;
    execute(
        &pool,
        "INSERT INTO slot_booking_event_consumers (name, acknowledged, holder, lease_until) \
         VALUES ('reader', 2, 'worker-1', 5)",
    )
    .await;
    let slot_rows = "SELECT id, starts_at, ends_at, capacity, remaining, resource, closed, \
                     removed_at FROM slot_booking_slots ORDER BY id";
    let hold_rows = "SELECT id, slot_id, idempotency_key, status, expires_at, confirmed_at, \
                     cancelled_at, created_at, quantity, owner FROM slot_booking_holds ORDER BY id";
    let event_rows = "SELECT id, kind, slot_id, hold_id, quantity, occurred_at \
                      FROM slot_booking_events ORDER BY id";
    let consumer_rows = "SELECT name, acknowledged, holder, lease_until \
                         FROM slot_booking_event_consumers ORDER BY name";
    type SlotRow = (i64, i64, i64, i64, i64, Option<String>, i64, Option<i64>);
    type HoldRow = (
        i64,
        i64,
        String,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        i64,
        i64,
        Option<String>,
    );
    type EventRow = (i64, String, i64, Option<i64>, i64, i64);
    type ConsumerRow = (String, i64, Option<String>, Option<i64>);
    let slots_before: Vec<SlotRow> = rows(&pool, slot_rows).await;
    let holds_before: Vec<HoldRow> = rows(&pool, hold_rows).await;
    let events_before: Vec<EventRow> = rows(&pool, event_rows).await;
    let consumers_before: Vec<ConsumerRow> = rows(&pool, consumer_rows).await;
    assert_eq!(
        (slots_before.len(), holds_before.len(), events_before.len()),
        (1, 4, 4)
    );

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    assert_eq!(rows::<SlotRow>(&pool, slot_rows).await, slots_before);
    assert_eq!(rows::<HoldRow>(&pool, hold_rows).await, holds_before);
    assert_eq!(rows::<EventRow>(&pool, event_rows).await, events_before);
    assert_eq!(
        rows::<ConsumerRow>(&pool, consumer_rows).await,
        consumers_before
    );
    let versions: Vec<i64> = column(
        &pool,
        "SELECT version FROM slot_booking_migrations ORDER BY version",
    )
    .await;
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    let marked: Vec<Option<i64>> = column(
        &pool,
        "SELECT booking_id FROM slot_booking_holds ORDER BY id",
    )
    .await;
    assert_eq!(marked, vec![None; 4], "old holds are plain holds");
    assert_counts(&pool, SlotId(1), (5, 2, 2, 1)).await;

    // An old hold is a booking of one line, and its key still answers for it.
    let anyone = Scope::Anonymous;
    let old = store
        .get_hold(HoldId(1), &anyone, at(1))
        .await
        .unwrap()
        .outcome
        .unwrap();
    let as_booking = store
        .get_booking(HoldId(1), &anyone, at(1))
        .await
        .unwrap()
        .outcome;
    assert_eq!(as_booking, Some(Booking::of_hold(old.clone())));
    let b = slot(&store, 3).await;
    let lines = [BookingLine::new(SlotId(1), 2), BookingLine::new(b, 1)];
    let book = |k| BookingRequest {
        key: k,
        owner: None,
        lines: &lines,
        now: at(1),
        expires_at: at(301),
    };
    let old_key = key("held-key");
    assert_eq!(
        store.create_booking(book(&old_key)).await.unwrap().outcome,
        BookingOutcome::KeyReused(Some(Booking::of_hold(old)))
    );

    // A booking of two lines on the old slot and a new one.
    let cart = key("cart");
    let booking = match store.create_booking(book(&cart)).await.unwrap().outcome {
        BookingOutcome::Created(booking) => booking,
        other => panic!("expected a booking, got {other:?}"),
    };
    assert_eq!(booking.booking_id, HoldId(5));
    assert_eq!(booking.booked_lines(), lines.to_vec());
    let marked: Vec<Option<i64>> = column(
        &pool,
        "SELECT booking_id FROM slot_booking_holds WHERE id > 4 ORDER BY id",
    )
    .await;
    assert_eq!(marked, vec![Some(5), Some(5)]);
    // Confirming its second line confirms it whole.
    let second = booking.lines[1].hold_id;
    let confirmed = store
        .confirm_hold(second, &anyone, at(2))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(confirmed, Transition::Applied(ref h) if h.hold_id == second));
    let whole = store
        .get_booking(booking.booking_id, &anyone, at(2))
        .await
        .unwrap()
        .outcome
        .unwrap();
    assert!(whole
        .lines
        .iter()
        .all(|h| h.status == slot_booking::HoldStatus::Confirmed));
    assert_counts(&pool, SlotId(1), (5, 0, 2, 3)).await;
    assert_counts(&pool, b, (3, 2, 0, 1)).await;
}

/// Waitlists arrive by a migration that rebuilds the event log (to admit `waitlist_offered`)
/// and adds a table, a counter and triggers: a database made by migrations 1 to 9, its log
/// purged of its newest event, keeps every slot, hold, event, consumer and pool as it was and
/// the log's id counter (no id handed out twice), its slots come out with nobody waiting, and
/// its old slot then takes a line, served when its units free up.
#[tokio::test]
async fn a_database_made_by_migrations_1_to_9_upgrades_in_place() {
    let db = TempDb::new("before_waitlists");
    let pool = previous_release_database(&db, 9).await;
    execute(
        &pool,
        "INSERT INTO slot_booking_event_consumers (name, acknowledged, holder, lease_until) \
             VALUES ('reader', 2, 'worker-1', 5); \
         INSERT INTO slot_booking_pools (capacity, remaining, created_at) VALUES (7, 7, 0); \
         DELETE FROM slot_booking_events WHERE id = 4;",
    )
    .await;
    let slot_rows = "SELECT id, starts_at, ends_at, capacity, remaining, resource, closed, \
                     removed_at FROM slot_booking_slots ORDER BY id";
    let hold_rows = "SELECT id, slot_id, idempotency_key, status, expires_at, confirmed_at, \
                     cancelled_at, created_at, quantity, owner, booking_id \
                     FROM slot_booking_holds ORDER BY id";
    let event_rows = "SELECT id, kind, slot_id, hold_id, owner, quantity, occurred_at \
                      FROM slot_booking_events ORDER BY id";
    let other_rows = "SELECT name, acknowledged, holder, lease_until, \
                         (SELECT group_concat(id || ':' || capacity || ':' || remaining) \
                          FROM slot_booking_pools) \
                      FROM slot_booking_event_consumers ORDER BY name";
    type SlotRow = (i64, i64, i64, i64, i64, Option<String>, i64, Option<i64>);
    type HoldRow = (
        i64,
        i64,
        String,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        i64,
        i64,
        Option<String>,
        Option<i64>,
    );
    type EventRow = (i64, String, i64, Option<i64>, Option<String>, i64, i64);
    type OtherRow = (String, i64, Option<String>, Option<i64>, Option<String>);
    let slots_before: Vec<SlotRow> = rows(&pool, slot_rows).await;
    let holds_before: Vec<HoldRow> = rows(&pool, hold_rows).await;
    let events_before: Vec<EventRow> = rows(&pool, event_rows).await;
    let others_before: Vec<OtherRow> = rows(&pool, other_rows).await;
    assert_eq!(
        (slots_before.len(), holds_before.len(), events_before.len()),
        (1, 4, 3)
    );
    let sequence = "SELECT name, seq FROM sqlite_sequence ORDER BY name";
    let sequence_before: Vec<(String, i64)> = rows(&pool, sequence).await;
    assert_eq!(sequence_before, vec![("slot_booking_events".to_owned(), 4)]);

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    assert_eq!(rows::<SlotRow>(&pool, slot_rows).await, slots_before);
    assert_eq!(rows::<HoldRow>(&pool, hold_rows).await, holds_before);
    assert_eq!(rows::<EventRow>(&pool, event_rows).await, events_before);
    assert_eq!(rows::<OtherRow>(&pool, other_rows).await, others_before);
    assert_eq!(
        rows::<(String, i64)>(&pool, sequence).await,
        sequence_before,
        "the log's id counter is carried over, and the rebuild left no table behind"
    );
    assert!(!tables(&pool).await.iter().any(|t| t.ends_with("_new")));
    let versions: Vec<i64> = column(
        &pool,
        "SELECT version FROM slot_booking_migrations ORDER BY version",
    )
    .await;
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    let waiting: Vec<i64> = column(&pool, "SELECT waiting FROM slot_booking_slots").await;
    assert_eq!(waiting, vec![0], "nobody waits in an old slot's line");
    assert_counts(&pool, SlotId(1), (5, 2, 2, 1)).await;

    // The old slot (2 units free, 1 more in an expired hold) takes a line: 4 units wait.
    let line_key = key("line");
    let join = JoinRequest {
        hold: slot_booking::HoldRequest {
            quantity: 4,
            ..request(SlotId(1), &line_key, at(1))
        },
        priority: 0,
    };
    let entry = match store.join_waitlist(join).await.unwrap().outcome {
        JoinOutcome::Waiting {
            entry, position: 1, ..
        } => entry,
        other => panic!("expected to wait, got {other:?}"),
    };
    assert_eq!(entry.entry_id.0, 5, "drawn after the old holds' ids");
    // A cancel frees 1 unit: with the expired hold's, the head's 4 fit and it is offered.
    let cancelled = store
        .cancel_hold(HoldId(1), &Scope::Anonymous, at(2))
        .await
        .unwrap()
        .outcome;
    assert!(matches!(cancelled, Transition::Applied(_)));
    let offer = store
        .get_hold(entry.offer_id(), &Scope::Anonymous, at(2))
        .await
        .unwrap()
        .outcome
        .expect("the head was offered its units");
    assert_eq!(offer.quantity, 4);
    assert_counts(&pool, SlotId(1), (5, 0, 4, 1)).await;
    // The new events follow the old ones' highest id ever handed out (4, purged).
    let new_events: Vec<(i64, String, Option<i64>)> = rows(
        &pool,
        "SELECT id, kind, hold_id FROM slot_booking_events WHERE id > 3 ORDER BY id",
    )
    .await;
    assert_eq!(
        new_events,
        vec![
            (5, "hold_cancelled".to_owned(), Some(1)),
            (6, "hold_expired".to_owned(), Some(4)),
            (7, "hold_placed".to_owned(), Some(5)),
            (8, "waitlist_offered".to_owned(), Some(5)),
        ]
    );
    let events = store
        .read_events(&ConsumerId::new("reader").unwrap(), 10)
        .await
        .unwrap();
    assert_eq!(
        events.last().map(|e| e.kind),
        Some(EventKind::WaitlistOffered)
    );
}

/// Pool waitlists arrive by a migration that only recreates the hold trigger: a database made
/// by migrations 1 to 10, with a pool of two slots, a held hold on one and an entry waiting in
/// the line of a slot of no pool, keeps every slot, hold, pool, membership and entry as it was;
/// then a slot of the pool takes a line, a newcomer on the pool's other slot is refused while
/// the pool's line waits (availability 0), and a cancel on that other slot offers the pool's
/// units to the line.
#[tokio::test]
async fn a_database_made_by_migrations_1_to_10_upgrades_in_place() {
    let db = TempDb::new("before_pool_waitlists");
    let pool = previous_release_database(&db, 10).await;
    let (t, start) = (at(0).timestamp_micros(), at(3600).timestamp_micros());
    let end = start + 3_600_000_000;
    // Slots 2 and 3 in pool 1 (capacity 4); a hold of 3 units on slot 2 (through migration
    // 10's trigger: slot 2 has 2 left, the pool 1); entry 11 waits for 4 units of slot 1.
    execute(
        &pool,
        &format!(
            "INSERT INTO slot_booking_slots (starts_at, ends_at, capacity, remaining) \
                 VALUES ({start}, {end}, 5, 5), ({start}, {end}, 3, 3); \
             INSERT INTO slot_booking_pools (capacity, remaining, created_at) VALUES (4, 4, 0); \
             INSERT INTO slot_booking_slot_pools (slot_id, pool_id) VALUES (2, 1), (3, 1); \
             INSERT INTO slot_booking_holds \
                 (id, slot_id, idempotency_key, status, expires_at, created_at, quantity, owner) \
                 VALUES (10, 2, 'pooled-key', 'held', {}, {t}, 3, 'ann'); \
             INSERT INTO slot_booking_waitlist_entries \
                 (id, slot_id, idempotency_key, quantity, owner, priority, joined_at, \
                  offer_micros) \
                 VALUES (11, 1, 'waiting-key', 4, NULL, 0, {t}, 60000000);",
            t + 3_000_000_000
        ),
    )
    .await;
    let slot_rows = "SELECT id, capacity, remaining, waiting FROM slot_booking_slots ORDER BY id";
    let hold_rows = "SELECT id, slot_id, idempotency_key, status, quantity, owner \
                     FROM slot_booking_holds ORDER BY id";
    let pool_rows = "SELECT p.id, p.capacity, p.remaining, \
                            (SELECT group_concat(slot_id) FROM slot_booking_slot_pools) \
                     FROM slot_booking_pools p ORDER BY p.id";
    let entry_rows = "SELECT id, slot_id, idempotency_key, quantity, priority, offer_micros \
                      FROM slot_booking_waitlist_entries ORDER BY id";
    type HoldRow = (i64, i64, String, String, i64, Option<String>);
    type EntryRow = (i64, i64, String, i64, i64, i64);
    let slots_before: Vec<(i64, i64, i64, i64)> = rows(&pool, slot_rows).await;
    let holds_before: Vec<HoldRow> = rows(&pool, hold_rows).await;
    let pools_before: Vec<(i64, i64, i64, String)> = rows(&pool, pool_rows).await;
    let entries_before: Vec<EntryRow> = rows(&pool, entry_rows).await;
    assert_eq!(
        slots_before,
        vec![(1, 5, 2, 1), (2, 5, 2, 0), (3, 3, 3, 0)],
        "the rows as migration 10 keeps them"
    );
    assert_eq!(pools_before, vec![(1, 4, 1, "2,3".to_owned())]);

    let store = SqliteStore::new(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();

    assert_eq!(
        rows::<(i64, i64, i64, i64)>(&pool, slot_rows).await,
        slots_before
    );
    assert_eq!(rows::<HoldRow>(&pool, hold_rows).await, holds_before);
    assert_eq!(
        rows::<(i64, i64, i64, String)>(&pool, pool_rows).await,
        pools_before
    );
    assert_eq!(rows::<EntryRow>(&pool, entry_rows).await, entries_before);
    let versions: Vec<i64> = column(
        &pool,
        "SELECT version FROM slot_booking_migrations ORDER BY version",
    )
    .await;
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    let lined: Vec<i64> = column(
        &pool,
        "SELECT id FROM slot_booking_slots INDEXED BY slot_booking_slots_lined \
         WHERE waiting > 0",
    )
    .await;
    assert_eq!(lined, vec![1], "the new index has the old line's slot");

    // Slot 3 of the pool takes a line: 2 units, the pool has 1.
    let line_key = key("pool-line");
    let join = JoinRequest {
        hold: slot_booking::HoldRequest {
            quantity: 2,
            ..request(SlotId(3), &line_key, at(1))
        },
        priority: 0,
    };
    let entry = match store.join_waitlist(join).await.unwrap().outcome {
        JoinOutcome::Waiting {
            entry, position: 1, ..
        } => entry,
        other => panic!("expected to wait, got {other:?}"),
    };
    assert_eq!(entry.entry_id.0, 12, "drawn after the old entry's id");
    // Slot 2 has 2 units and the pool 1: a newcomer's one would fit, but the pool's line
    // waits.
    let newcomer = key("newcomer");
    let refused = store
        .create_hold(request(SlotId(2), &newcomer, at(1)))
        .await
        .unwrap()
        .outcome;
    assert_eq!(refused, HoldOutcome::SoldOut);
    let available = store.availability(at(1)).await.unwrap().outcome;
    let of = |id: i64| {
        available
            .iter()
            .find(|a| a.slot_id == SlotId(id))
            .map(|a| a.remaining)
    };
    assert_eq!((of(1), of(2), of(3)), (Some(0), Some(0), Some(0)));
    // The old hold on slot 2 is cancelled: the pool's 4 units go to its line's head on slot 3.
    let cancelled = store
        .cancel_hold(
            HoldId(10),
            &Scope::Owner(slot_booking::OwnerId::new("ann").unwrap()),
            at(2),
        )
        .await
        .unwrap()
        .outcome;
    assert!(matches!(cancelled, Transition::Applied(_)), "{cancelled:?}");
    let offer = store
        .get_hold(entry.offer_id(), &Scope::Anonymous, at(2))
        .await
        .unwrap()
        .outcome
        .expect("the pool's head was offered its units");
    assert_eq!((offer.slot_id, offer.quantity), (SlotId(3), 2));
    assert_eq!(
        rows::<(i64, i64, i64, String)>(&pool, pool_rows).await,
        vec![(1, 4, 2, "2,3".to_owned())]
    );
}
