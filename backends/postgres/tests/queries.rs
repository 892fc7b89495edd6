//! An owner's holds and a slot's roster are read through their indexes (`holds_by_owner`,
//! `holds_by_slot`), never by scanning the holds: PostgreSQL's statistics count what one page
//! of each read.

mod common;

use chrono::Utc;
use common::*;
use slot_booking::{OwnerId, PageRequest, SlotId, Store};
use slot_booking_postgres::PostgresStore;

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
    let writer = one_connection(&ctx.url).await;
    for statement in [
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
    ] {
        sqlx::query(&statement).execute(&writer).await.unwrap();
    }
    flush_statistics(writer).await;

    let reader = one_connection(&ctx.url).await;
    let store = PostgresStore::with_schema(reader.clone(), s).unwrap();
    let before = index_scans(&ctx, s).await;
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
    flush_statistics(reader).await;
    let after = index_scans(&ctx, s).await;

    let read = |name: &str| {
        let (scans, entries) = (after.get(name), before.get(name));
        match (scans, entries) {
            (Some(a), Some(b)) => (a.0 - b.0, a.1 - b.1),
            _ => panic!("no statistics for {name}: {after:?}"),
        }
    };
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

/// Per index of holds: (scans, entries returned); `$seq` holds the table's sequential reads.
async fn index_scans(ctx: &Ctx, schema: &str) -> std::collections::HashMap<String, (i64, i64)> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT indexrelname::text, coalesce(idx_scan, 0)::int8, coalesce(idx_tup_read, 0)::int8 \
         FROM pg_stat_user_indexes WHERE schemaname = $1 AND relname = 'holds' \
         UNION ALL \
         SELECT '$seq', coalesce(seq_scan, 0)::int8, coalesce(seq_tup_read, 0)::int8 \
         FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'holds'",
    )
    .bind(schema)
    .fetch_all(ctx.pool())
    .await
    .unwrap();
    rows.into_iter().map(|(n, a, b)| (n, (a, b))).collect()
}
