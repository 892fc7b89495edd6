//! The query plans of the store's statements: each reads the index it should, never a scan.

use super::*;

/// A parameter of a statement whose plan is asked for.
enum Param {
    Int(i64),
    Text(&'static str),
}

/// The steps of SQLite's plan for `sql` with `params` bound.
async fn query_plan(store: &SqliteStore, sql: &str, params: &[Param]) -> Vec<String> {
    let explain = format!("EXPLAIN QUERY PLAN {sql}");
    // The rows are (id, parent, notused, detail).
    let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(AssertSqlSafe(explain));
    for param in params {
        query = match param {
            Param::Int(value) => query.bind(*value),
            Param::Text(value) => query.bind(*value),
        };
    }
    let rows = query.fetch_all(store.pool()).await.unwrap();
    rows.into_iter().map(|row| row.3).collect()
}

/// An owner's page and a slot's roster read one range of their own index, with the
/// statistics of a table where the rowid would also do: never a scan of the holds.
#[tokio::test]
async fn pages_read_their_index() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO slot_booking_slots (starts_at, ends_at, capacity, remaining) \
             VALUES (10, 20, 1000, 1000), (30, 40, 1000, 1000); \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2000) \
         INSERT INTO slot_booking_holds \
             (slot_id, idempotency_key, status, expires_at, created_at, quantity, owner) \
         SELECT 1 + n % 2, 'k' || n, 'confirmed', 0, 0, 1, 'o' || n % 50 FROM g; \
         ANALYZE;",
    )
    .execute(store.pool())
    .await
    .unwrap();
    for (sql, index) in [
        (&store.sql.owner_holds, "slot_booking_holds_by_owner"),
        (&store.sql.slot_holds, "slot_booking_holds_by_slot"),
    ] {
        let plan = query_plan(
            &store,
            sql,
            &[Param::Text("o7"), Param::Int(5_i64), Param::Int(25_i64)],
        )
        .await;
        assert!(
            plan.iter().any(|step| step.contains(index)),
            "{sql}: {plan:?}"
        );
        assert!(
            !plan
                .iter()
                .any(|step| step.starts_with("SCAN") || step.contains("TEMP B-TREE")),
            "{sql}: {plan:?}"
        );
    }
}

/// A change of a hold and a read of a booking find the lines through the rowid and
/// `holds_by_booking` (migration 8), a key through its unique index: never a scan of the
/// holds, however many there are.
#[tokio::test]
async fn booking_lines_are_found_through_their_index() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO slot_booking_slots (starts_at, ends_at, capacity, remaining) \
             VALUES (10, 20, 1000000, 1000000); \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 4000) \
         INSERT INTO slot_booking_holds \
             (slot_id, idempotency_key, status, expires_at, created_at, quantity, \
              booking_id) \
         SELECT 1, 'k' || n, 'confirmed', 0, 0, 1, CASE WHEN n % 4 > 0 THEN n - n % 4 + 1 END \
         FROM g; \
         ANALYZE;",
    )
    .execute(store.pool())
    .await
    .unwrap();
    for sql in [
        &store.sql.confirm,
        &store.sql.cancel,
        &store.sql.renew,
        &store.sql.confirm_booking,
        &store.sql.cancel_booking,
        &store.sql.renew_booking,
        &store.sql.renew_booking_unmoved,
        &store.sql.booking_lines,
        &store.sql.booking_by_key,
    ] {
        let plan = query_plan(
            &store,
            sql,
            &[
                Param::Int(100_i64),
                Param::Int(5_i64),
                Param::Int(0_i64),
                Param::Int(0_i64),
                Param::Int(0_i64),
                Param::Int(0_i64),
            ],
        )
        .await;
        assert!(
            plan.iter()
                .all(|step| !step.starts_with("SCAN") && !step.contains("holds_held_by_expiry")),
            "{sql}: {plan:?}"
        );
    }
}

/// The reclaimer reads held holds by expiry and the purge ended holds by when they ended,
/// each through its own index (migration 5), never a scan of the holds: confirmed history
/// is not read. Readers and the event purge read a range of the events' primary key.
#[tokio::test]
async fn sweeps_and_purges_read_their_index() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO slot_booking_slots (starts_at, ends_at, capacity, remaining) \
             VALUES (10, 20, 1000000, 1000000); \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 4000) \
         INSERT INTO slot_booking_holds \
             (slot_id, idempotency_key, status, expires_at, created_at, quantity, \
              cancelled_at) \
         SELECT 1, 'k' || n, CASE n % 8 WHEN 0 THEN 'held' WHEN 1 THEN 'cancelled' \
                              WHEN 2 THEN 'expired' ELSE 'confirmed' END, \
                n, 0, 1, CASE WHEN n % 8 = 1 THEN n END FROM g; \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 4000) \
         INSERT INTO slot_booking_events (kind, slot_id, quantity, occurred_at) \
         SELECT 'slot_created', 1, 1, n FROM g; \
         ANALYZE;",
    )
    .execute(store.pool())
    .await
    .unwrap();
    for (sql, index) in [
        (
            &store.sql.reclaim_expired_every,
            "slot_booking_holds_held_by_expiry",
        ),
        (&store.sql.purge_holds, "slot_booking_holds_ended"),
        (&store.sql.read_events, "INTEGER PRIMARY KEY"),
        (&store.sql.read_events_after, "INTEGER PRIMARY KEY"),
        (&store.sql.purge_events, "INTEGER PRIMARY KEY"),
    ] {
        let plan = query_plan(&store, sql, &[Param::Int(100_i64), Param::Int(10_i64)]).await;
        assert!(
            plan.iter().any(|step| step.contains(index)),
            "{sql}: {plan:?}"
        );
        assert!(
            !plan
                .iter()
                .any(|step| step.starts_with("SCAN slot_booking_holds")),
            "{sql}: {plan:?}"
        );
    }
}

/// The operator's listing, with and without a resource, reads one range of its own slots
/// index in `(starts_at, id)` order (no scan of the slots, no sort), and sums each slot's
/// held units through the partial index over held holds.
#[tokio::test]
async fn slot_listings_read_their_index() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    sqlx::raw_sql(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2000) \
         INSERT INTO slot_booking_slots \
             (starts_at, ends_at, capacity, remaining, resource, closed, removed_at) \
         SELECT n * 10, n * 10 + 5, 10, 9, CASE WHEN n % 4 > 0 THEN 'r' || n % 4 END, \
                n % 7 = 0, CASE WHEN n % 11 = 0 THEN n END FROM g; \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2000) \
         INSERT INTO slot_booking_holds \
             (slot_id, idempotency_key, status, expires_at, created_at, quantity) \
         SELECT n, 'k' || n, 'confirmed', 0, 0, 1 FROM g; \
         ANALYZE;",
    )
    .execute(store.pool())
    .await
    .unwrap();
    for (sql, index) in [
        (&store.sql.slots_page, "slot_booking_slots_starts_at_id"),
        (
            &store.sql.resource_slots_page,
            "slot_booking_slots_by_resource",
        ),
        (&store.sql.availability, "slot_booking_slots_starts_at_id"),
    ] {
        let plan = query_plan(
            &store,
            sql,
            &[
                Param::Int(5_000_i64),
                Param::Int(100_i64),
                Param::Int(15_000_i64),
                Param::Int(1_000_i64),
                Param::Int(100_i64),
                Param::Int(50_i64),
                Param::Text("r1"),
            ],
        )
        .await;
        assert!(
            plan.iter().any(|step| step.contains(index)),
            "{sql}: {plan:?}"
        );
        assert!(
            plan.iter()
                .filter(|step| step.contains(" h "))
                .all(|step| step.contains("slot_booking_holds_held_by_slot_expiry")),
            "{sql}: {plan:?}"
        );
        assert!(
            !plan
                .iter()
                .any(|step| step.starts_with("SCAN") || step.contains("TEMP B-TREE")),
            "{sql}: {plan:?}"
        );
    }
}

/// The statements that serve lines read ranges of their indexes, never a scan of the slots,
/// the holds or the entries: the offer's and the reclaim's conditions (the entry's slot's line
/// through `waitlist_line`, its pools through `slot_pools`' keys, their slots by id), a slot's
/// and a pool's head.
#[tokio::test]
async fn serving_reads_its_indexes() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    sqlx::raw_sql(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2000) \
         INSERT INTO slot_booking_slots (starts_at, ends_at, capacity, remaining) \
         SELECT 1000000 + n, 2000000 + n, 10, 9 FROM g; \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 200) \
         INSERT INTO slot_booking_pools (capacity, remaining, created_at) SELECT 50, 40, 0 FROM g; \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2000) \
         INSERT INTO slot_booking_slot_pools (slot_id, pool_id) SELECT n, 1 + n % 200 FROM g; \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2000) \
         INSERT INTO slot_booking_holds \
             (slot_id, idempotency_key, status, expires_at, created_at, quantity) \
         SELECT n, 'k' || n, 'held', 500, 0, 1 FROM g; \
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 2000) \
         INSERT INTO slot_booking_waitlist_entries \
             (id, slot_id, idempotency_key, quantity, priority, joined_at, offer_micros) \
         SELECT 10000 + n, 1 + (n % 20) * 97, 'w' || n, 1, n % 3, 0, 60 FROM g; \
         ANALYZE;",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let w = &store.sql.waitlists;
    for sql in [
        &w.offer_entry,
        &w.entry_state,
        &w.slot_pools_state,
        &w.slot_head,
        &w.pool_head,
    ] {
        let plan = query_plan(&store, sql, &[Param::Int(10_005_i64), Param::Int(100_i64)]).await;
        for table in ["slots", "holds", "waitlist_entries"] {
            let scan = format!("SCAN slot_booking_{table}");
            assert!(
                !plan.iter().any(|step| step.starts_with(&scan)),
                "{sql}: {plan:?}"
            );
        }
    }
    // The sweeper's pass: the slots with a line through their partial index, their pools by
    // key.
    let plan = query_plan(&store, &w.pools_lined, &[Param::Int(100_i64)]).await;
    assert!(
        plan.iter()
            .any(|step| step.contains("slot_booking_slots_lined")),
        "{plan:?}"
    );
    assert!(
        !plan
            .iter()
            .any(|step| step.starts_with("SCAN") && !step.contains("slot_booking_slots_lined")),
        "{plan:?}"
    );
}
