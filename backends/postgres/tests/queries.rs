//! An owner's holds and a slot's roster are read through their indexes (`holds_by_owner`,
//! `holds_by_slot`), and a page of the operator's slot listing through `slots_starts_at_id` or
//! `slots_by_resource` (each listed slot's held units through the partial index of held holds),
//! never by scanning a table; and a booking's placing statement, in its generic plan, reads
//! only its lines' slots and held holds: PostgreSQL's statistics count what each read.

mod common;

use chrono::Utc;
use common::*;
use slot_booking::{
    AvailabilityQuery, OwnerId, PageRequest, ResourceId, SlotCursor, SlotId, Timestamp,
};
use slot_booking::{HoldQueries, SlotAdmin};
use sqlx::AssertSqlSafe;

/// Holds in the fixture: spread over `SLOTS` slots and `OWNERS` owners.
const HOLDS: i64 = 20_000;
const SLOTS: i64 = 40;
const OWNERS: i64 = 400;
const PAGE: u32 = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_an_owner_and_a_roster_read_their_index_only() {
    let Some(ctx) = setup("keyset_pages").await else {
        return;
    };
    let s = ctx.schema();
    let writer = fixture(
        &ctx.url,
        [
        format!(
            "INSERT INTO \"{s}\".slots (starts_at, ends_at, capacity, remaining) \
             SELECT now() + g * interval '1 day', now() + g * interval '1 day' + interval '1 hour', \
                    1000, 1000 - {HOLDS} / {SLOTS} \
             FROM generate_series(1, {SLOTS}) g"
        ),
        format!(
            "INSERT INTO \"{s}\".holds (slot_id, idempotency_key, status, expires_at, created_at, \
                                        quantity, owner) \
             SELECT 1 + g % {SLOTS}, 'k-' || g, 'confirmed', now(), now(), 1, 'o-' || g % {OWNERS} \
             FROM generate_series(1, {HOLDS}) g"
        ),
            format!("ANALYZE \"{s}\".holds"),
        ],
    )
    .await;
    flush_statistics(writer).await;

    let store = one_connection_store(&ctx).await;
    let before = index_scans(&ctx, s, "holds").await;
    let owner = OwnerId::new("o-7").unwrap();
    let page = store
        .owner_holds(&owner, PageRequest::first(PAGE), Utc::now())
        .await
        .unwrap()
        .outcome;
    assert_eq!(page.len(), PAGE as usize);
    assert!(page.iter().all(|h| h.owner.as_ref() == Some(&owner)));
    let roster = store
        .slot_holds(
            SlotId(3),
            PageRequest::after(page[0].hold_id, PAGE),
            Utc::now(),
        )
        .await
        .unwrap()
        .outcome;
    assert_eq!(roster.len(), PAGE as usize);
    assert!(roster.iter().all(|h| h.slot_id == SlotId(3)));
    flush_statistics(store.pool().clone()).await;
    let after = index_scans(&ctx, s, "holds").await;

    let read = |name: &str| scans_between(&before, &after, name);
    let (owner_scans, owner_entries) = read("holds_by_owner");
    let (slot_scans, slot_entries) = read("holds_by_slot");
    assert_eq!((owner_scans, slot_scans), (1, 1), "{after:?}");
    for entries in [owner_entries, slot_entries] {
        assert!(
            entries <= i64::from(PAGE) + 1,
            "a page of {PAGE} read {entries} index entries of {HOLDS} holds"
        );
    }
    assert_eq!(read("$seq").1, 0, "the holds table was scanned");
}

/// Per index of a table: (scans, entries returned); `$seq` holds the table's sequential scans
/// and rows read by them.
type Scans = std::collections::HashMap<String, (i64, i64)>;

/// The [`Scans`] of `table` as counted so far.
async fn index_scans(ctx: &Ctx, schema: &str, table: &str) -> Scans {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT indexrelname::text, coalesce(idx_scan, 0)::int8, coalesce(idx_tup_read, 0)::int8 \
         FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = $2 \
         UNION ALL \
         SELECT '$seq', coalesce(seq_scan, 0)::int8, coalesce(seq_tup_read, 0)::int8 \
         FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2",
    )
    .bind(schema)
    .bind(table)
    .fetch_all(ctx.pool())
    .await
    .unwrap();
    rows.into_iter().map(|(n, a, b)| (n, (a, b))).collect()
}

/// What `name` (an index, or `$seq`) counted from `before` to `after`.
fn scans_between(before: &Scans, after: &Scans, name: &str) -> (i64, i64) {
    match (after.get(name), before.get(name)) {
        (Some(a), Some(b)) => (a.0 - b.0, a.1 - b.1),
        _ => panic!("no statistics for {name}: {after:?}"),
    }
}

/// Slots in the listing fixture: `RESOURCES` resources take turns, every fifth slot has none.
const LISTED_SLOTS: i64 = 20_000;
const RESOURCES: i64 = 40;

/// A page of the operator's listing, with or without a resource and started deep inside the
/// slots, reads one range of its index (`slots_starts_at_id` or `slots_by_resource`): about a
/// page of entries, never the slots table; and each listed slot's held units through the
/// partial index of held holds, one probe per listed slot, never the holds table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_the_slot_listing_reads_one_index_range() {
    let Some(ctx) = setup("slot_listing_pages").await else {
        return;
    };
    let s = ctx.schema();
    let writer = fixture(
        &ctx.url,
        [
        format!(
            "INSERT INTO \"{s}\".slots (starts_at, ends_at, capacity, remaining, resource) \
             SELECT now() + g * interval '1 hour', now() + g * interval '1 hour' + interval '30 minutes', \
                    10, 7, CASE WHEN g % 5 = 0 THEN NULL ELSE 'r-' || g % {RESOURCES} END \
             FROM generate_series(1, {LISTED_SLOTS}) g"
        ),
        // Two held units per slot, one expired and one active, and confirmed history.
        format!(
            "INSERT INTO \"{s}\".holds (slot_id, idempotency_key, status, expires_at, created_at, \
                                        quantity) \
             SELECT 1 + g % {LISTED_SLOTS}, 'k-' || g, \
                    CASE WHEN g < 2 * {LISTED_SLOTS} THEN 'held' ELSE 'confirmed' END, \
                    now() + CASE WHEN g < {LISTED_SLOTS} THEN interval '-1 hour' ELSE interval '1 day' END, \
                    now(), 1 \
             FROM generate_series(0, 3 * {LISTED_SLOTS} - 1) g"
        ),
            format!("ANALYZE \"{s}\".slots"),
            format!("ANALYZE \"{s}\".holds"),
        ],
    )
    .await;
    // Cursors in the middle: after slot 10000, and after a slot of r-7 near it; the pages end
    // before slot 18000. (A bound past the ends of the planner's histogram of `starts_at`, as
    // no bound is, makes the planner read the index's actual first or last entry while
    // planning, which the statistics would count as one more scan: it reads nothing else.)
    let cursor = |id: i64| {
        let writer = writer.clone();
        async move {
            let (starts_at, id): (Timestamp, i64) = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT starts_at, id FROM \"{s}\".slots WHERE id = $1"
            )))
            .bind(id)
            .fetch_one(&writer)
            .await
            .unwrap();
            SlotCursor {
                starts_at,
                slot_id: SlotId(id),
            }
        }
    };
    let (middle, middle_of_r7) = (cursor(10_000).await, cursor(10_007).await);
    let to = cursor(18_000).await.starts_at;
    flush_statistics(writer).await;

    let store = one_connection_store(&ctx).await;
    let (slots_before, holds_before) = (
        index_scans(&ctx, s, "slots").await,
        index_scans(&ctx, s, "holds").await,
    );
    let all = store
        .list_slots(
            &AvailabilityQuery::all().to(to),
            PageRequest::after(middle, PAGE),
            Utc::now(),
        )
        .await
        .unwrap()
        .outcome;
    let r7 = ResourceId::new("r-7").unwrap();
    let of_r7 = store
        .list_slots(
            &AvailabilityQuery::all().resource(r7.clone()).to(to),
            PageRequest::after(middle_of_r7, PAGE),
            Utc::now(),
        )
        .await
        .unwrap()
        .outcome;
    flush_statistics(store.pool().clone()).await;
    let (slots_after, holds_after) = (
        index_scans(&ctx, s, "slots").await,
        index_scans(&ctx, s, "holds").await,
    );

    assert_eq!(all.len(), PAGE as usize);
    assert_eq!(all[0].slot.slot_id, SlotId(10_001));
    assert_eq!(of_r7.len(), PAGE as usize);
    assert!(of_r7.iter().all(|u| u.slot.resource.as_ref() == Some(&r7)));
    assert_eq!(of_r7[0].slot.slot_id, SlotId(10_047));
    for usage in all.iter().chain(&of_r7) {
        assert_eq!((usage.held, usage.expired, usage.confirmed()), (1, 1, 1));
    }

    let by_start = scans_between(&slots_before, &slots_after, "slots_starts_at_id");
    let by_resource = scans_between(&slots_before, &slots_after, "slots_by_resource");
    assert_eq!((by_start.0, by_resource.0), (1, 1), "{slots_after:?}");
    for (index, entries) in [
        ("slots_starts_at_id", by_start.1),
        ("slots_by_resource", by_resource.1),
    ] {
        assert!(
            entries <= i64::from(PAGE) + 1,
            "a page of {PAGE} read {entries} entries of {index} ({LISTED_SLOTS} slots)"
        );
    }
    assert_eq!(
        scans_between(&slots_before, &slots_after, "$seq").1,
        0,
        "the slots table was scanned"
    );
    // Held units: one probe of the held holds' index per listed slot, two entries each.
    let held = scans_between(&holds_before, &holds_after, "holds_held_by_slot_expiry");
    assert_eq!(held.0, 2 * i64::from(PAGE), "{holds_after:?}");
    assert!(held.1 <= 2 * 2 * i64::from(PAGE), "{held:?}");
    assert_eq!(
        scans_between(&holds_before, &holds_after, "$seq").1,
        0,
        "the holds table was scanned"
    );
}

/// Slots in the booking fixture: each has 50 active held holds and 1 expired one.
const BOOKED_SLOTS: i64 = 1_000;

/// A booking's placing statement as a prepared statement's generic plan runs it (the plan
/// PostgreSQL settles on after five executions, forced here from the first), on tables never
/// analyzed (as right after a bulk load, or with autovacuum off) and then analyzed: it reads
/// only its lines' held holds, never every expired hold through the held holds' index; and,
/// with statistics, only its lines' slot rows. (A generic plan once reclaimed through a scan of
/// every expired hold and updated the slots through a scan of the whole table: bookings on
/// 1,000 slots ran at 0.72x of `pgbench`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_reads_its_lines_only_in_the_generic_plan() {
    use slot_booking::{BookingEngine, NewBooking};
    use sqlx::Executor;
    let Some(ctx) = setup("booking_generic_plan").await else {
        return;
    };
    let s = ctx.schema();
    let writer = fixture(
        &ctx.url,
        [
            format!("ALTER TABLE \"{s}\".slots SET (autovacuum_enabled = false)"),
            format!("ALTER TABLE \"{s}\".holds SET (autovacuum_enabled = false)"),
            format!(
                "INSERT INTO \"{s}\".slots (starts_at, ends_at, capacity, remaining) \
                 SELECT now() + g * interval '1 hour', \
                        now() + g * interval '1 hour' + interval '30 minutes', 60, 9 \
                 FROM generate_series(1, {BOOKED_SLOTS}) g"
            ),
            format!(
                "INSERT INTO \"{s}\".holds (slot_id, idempotency_key, status, expires_at, \
                                            created_at, quantity) \
                 SELECT 1 + g % {BOOKED_SLOTS}, 'k-' || g, 'held', \
                        now() + CASE WHEN g < {BOOKED_SLOTS} THEN interval '-1 hour' \
                                     ELSE interval '1 hour' END, now() - interval '2 hours', 1 \
                 FROM generate_series(0, 51 * {BOOKED_SLOTS} - 1) g"
            ),
        ],
    )
    .await;
    let connection = sqlx::postgres::PgPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(1)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET plan_cache_mode = force_generic_plan")
                    .await
                    .map(drop)
            })
        })
        .connect(&ctx.url)
        .await
        .unwrap();
    let store = slot_booking_postgres::PostgresStore::with_schema(connection, s).unwrap();
    let engine = BookingEngine::new(store.clone());
    for (analyzed, first) in [(false, 100_i64), (true, 500)] {
        if analyzed {
            for table in ["slots", "holds"] {
                sqlx::query(AssertSqlSafe(format!("ANALYZE \"{s}\".{table}")))
                    .execute(&writer)
                    .await
                    .unwrap();
            }
        }
        for connection in [&writer, store.pool()] {
            sqlx::query("SELECT pg_stat_force_next_flush()")
                .execute(connection)
                .await
                .unwrap();
        }
        let (slots_before, holds_before) = (
            index_scans(&ctx, s, "slots").await,
            index_scans(&ctx, s, "holds").await,
        );
        // Three bookings of 5 lines that fit, and one of 2 lines whose 10-unit line fits
        // only once its slot's expired hold is reclaimed.
        for n in 0..3 {
            let from = first + 100 * n;
            let booking = (from..from + 5)
                .fold(NewBooking::new(format!("b{analyzed}{n}")), |b, id| {
                    b.line(SlotId(id), 1)
                });
            let placed = engine.book(booking).await.unwrap();
            assert_eq!(placed.booking.lines.len(), 5);
        }
        let reclaiming = NewBooking::new(format!("r{analyzed}"))
            .line(SlotId(first + 390), 10)
            .line(SlotId(first + 391), 1);
        assert_eq!(
            engine.book(reclaiming).await.unwrap().booking.lines.len(),
            2
        );
        for connection in [&writer, store.pool()] {
            sqlx::query("SELECT pg_stat_force_next_flush()")
                .execute(connection)
                .await
                .unwrap();
            sqlx::query("SELECT 1").execute(connection).await.unwrap();
        }
        let (slots_after, holds_after) = (
            index_scans(&ctx, s, "slots").await,
            index_scans(&ctx, s, "holds").await,
        );
        assert_eq!(
            scans_between(&holds_before, &holds_after, "$seq"),
            (0, 0),
            "the holds table was scanned (analyzed: {analyzed})"
        );
        // Each line's expired held units are counted through the index, then the short
        // line's expired hold is reclaimed: a few entries per line, never every slot's.
        let held = scans_between(&holds_before, &holds_after, "holds_held_by_slot_expiry");
        assert!(
            held.1 <= 3 * 17,
            "bookings of 17 lines read {held:?} (scans, entries) of the held holds' index, \
             {BOOKED_SLOTS} expired (analyzed: {analyzed})"
        );
        if analyzed {
            assert_eq!(
                scans_between(&slots_before, &slots_after, "$seq"),
                (0, 0),
                "the slots table was scanned: {slots_after:?}"
            );
        }
    }
    flush_statistics(writer).await;
}

/// Slots (and pools of `PER_POOL` slots) in the pool line fixture.
const POOLED_SLOTS: i64 = 10_000;
const PER_POOL: i64 = 10;

/// A cancel on a slot of a full pool, which gives the unit back to the pool and offers it to
/// the pool's head on another slot, reads the slots, the pools' members and the pools through
/// their keys and `slot_pools_by_pool`, never by a scan, with 10,000 slots in 1,000 pools.
/// (The pools were once named by a join with the units given back: every cancel on a pooled
/// slot read all 1,000 pools, twice.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_a_pools_line_reads_its_indexes_only() {
    use slot_booking::waitlists::Joined;
    use slot_booking::{BookingEngine, NewHold, Scope};
    let Some(ctx) = setup("pool_line_plan").await else {
        return;
    };
    let s = ctx.schema();
    let pools = POOLED_SLOTS / PER_POOL;
    let mut statements: Vec<String> = ["slots", "holds", "pools", "slot_pools", "waitlist_entries"]
        .iter()
        .map(|t| format!("ALTER TABLE \"{s}\".{t} SET (autovacuum_enabled = false)"))
        .collect();
    statements.extend([
        format!(
            "INSERT INTO \"{s}\".pools (capacity, remaining) \
             SELECT 5, 5 FROM generate_series(1, {pools})"
        ),
        format!(
            "INSERT INTO \"{s}\".slots (starts_at, ends_at, capacity, remaining, pools) \
             SELECT now() + g * interval '1 hour', \
                    now() + g * interval '1 hour' + interval '30 minutes', 1, 1, \
                    ARRAY[1 + (g - 1) / {PER_POOL}]::int8[] \
             FROM generate_series(1, {POOLED_SLOTS}) g"
        ),
        format!(
            "INSERT INTO \"{s}\".slot_pools (slot_id, pool_id) \
             SELECT id, pools[1] FROM \"{s}\".slots"
        ),
    ]);
    for table in ["slots", "pools", "slot_pools"] {
        statements.push(format!("ANALYZE \"{s}\".{table}"));
    }
    let writer = fixture(&ctx.url, statements).await;
    flush_statistics(writer).await;
    let store = one_connection_store(&ctx).await;
    let engine = BookingEngine::new(store.clone());
    // Pool 1 (slots 1 to 10) full; entries wait on slots 6 to 10.
    let mut held = Vec::new();
    for id in 1..=5 {
        held.push(
            engine
                .hold(SlotId(id), &format!("h{id}"))
                .await
                .unwrap()
                .hold,
        );
    }
    let mut entries = Vec::new();
    for id in 6..=10 {
        match engine
            .join_waitlist(NewHold::new(SlotId(id), format!("w{id}")), 0)
            .await
        {
            Ok(Joined::Waiting { entry, .. }) => entries.push(entry),
            other => panic!("slot {id} should wait: {other:?}"),
        }
    }
    for table in ["holds", "waitlist_entries"] {
        sqlx::query(AssertSqlSafe(format!("ANALYZE \"{s}\".{table}")))
            .execute(ctx.pool())
            .await
            .unwrap();
    }
    send_pending_statistics(ctx.pool()).await;
    send_pending_statistics(store.pool()).await;
    let tables = ["slots", "pools", "slot_pools"];
    let mut before = Vec::new();
    for table in tables {
        before.push(index_scans(&ctx, s, table).await);
    }
    engine
        .cancel(&Scope::Anonymous, held[0].hold_id)
        .await
        .unwrap();
    send_pending_statistics(store.pool()).await;
    let offered = engine
        .get_hold(&Scope::Anonymous, entries[0].offer_id())
        .await;
    assert!(
        offered.is_ok(),
        "the pool's head was offered the unit: {offered:?}"
    );
    for (table, before) in tables.iter().zip(&before) {
        let after = index_scans(&ctx, s, table).await;
        assert_eq!(
            scans_between(before, &after, "$seq"),
            (0, 0),
            "{table} was scanned: {after:?}"
        );
    }
}
