//! Availability reads the future: holds abandoned on slots that have started (held, long
//! expired, never reclaimed, because reclaim only runs on open slots) are never read, so its
//! cost does not grow with history. `benches/postgres.rs` times the same thing with 300,000
//! such holds; this test counts, through PostgreSQL's statistics, the index entries one
//! availability read returned.

mod common;

use chrono::Utc;
use common::*;
use slot_booking::HoldStore;
use sqlx::AssertSqlSafe;

/// Future slots in the fixture, and expired held holds on each.
const FUTURE_SLOTS: i64 = 3;
const EXPIRED_PER_FUTURE_SLOT: i64 = 2;
/// Started slots, and abandoned holds on each.
const PAST_SLOTS: i64 = 200;
const ABANDONED_PER_PAST_SLOT: i64 = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn availability_reads_no_hold_of_a_started_slot() {
    let Some(ctx) = setup("abandoned_history").await else {
        return;
    };
    let s = ctx.schema();
    // The fixture on a connection of its own, whose statistics are flushed before counting.
    let writer = fixture(
        &ctx.url,
        [
        format!(
            "INSERT INTO \"{s}\".slots (starts_at, ends_at, capacity, remaining) \
             SELECT now() + g * interval '1 day', now() + g * interval '1 day' + interval '1 hour', \
                    10, 10 - {EXPIRED_PER_FUTURE_SLOT} \
             FROM generate_series(1, {FUTURE_SLOTS}) g"
        ),
        format!(
            "INSERT INTO \"{s}\".slots (starts_at, ends_at, capacity, remaining) \
             SELECT now() - interval '30 days' + g * interval '1 hour', \
                    now() - interval '30 days' + g * interval '1 hour' + interval '1 hour', \
                    {ABANDONED_PER_PAST_SLOT}, 0 \
             FROM generate_series(1, {PAST_SLOTS}) g"
        ),
        format!(
            "INSERT INTO \"{s}\".holds (slot_id, idempotency_key, status, expires_at, created_at) \
             SELECT sl.id, sl.id || '-' || g, 'held', \
                    least(sl.starts_at, now()) - interval '1 hour', \
                    least(sl.starts_at, now()) - interval '2 hours' \
             FROM \"{s}\".slots sl, generate_series(1, sl.capacity - sl.remaining) g"
        ),
        format!(
            "INSERT INTO \"{s}\".hold_keys (idempotency_key, hold_id) \
             SELECT idempotency_key, id FROM \"{s}\".holds"
        ),
            format!("ANALYZE \"{s}\".slots, \"{s}\".holds"),
        ],
    )
    .await;
    let abandoned: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{s}\".holds h JOIN \"{s}\".slots sl ON sl.id = h.slot_id \
         WHERE sl.starts_at < now() AND h.status = 'held' AND h.expires_at < now()"
    )))
    .fetch_one(&writer)
    .await
    .unwrap();
    assert_eq!(abandoned, PAST_SLOTS * ABANDONED_PER_PAST_SLOT);
    flush_statistics(writer).await;
    let before = hold_reads(&ctx, s).await;

    // One availability read on a connection of its own.
    let store = one_connection_store(&ctx).await;
    let entries = store.availability(Utc::now()).await.unwrap().outcome;
    assert_eq!(entries.len() as i64, FUTURE_SLOTS);
    assert!(entries.iter().all(|e| e.remaining == 10), "{entries:?}");
    flush_statistics(store.pool().clone()).await;
    let after = hold_reads(&ctx, s).await;
    let (scans, entries_read, rows_scanned) =
        (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    assert_eq!(rows_scanned, 0, "availability scanned the holds table");
    assert!(
        scans > 0,
        "no index read of holds was counted: the statistics never arrived"
    );
    let expired_in_future = FUTURE_SLOTS * EXPIRED_PER_FUTURE_SLOT;
    assert!(
        entries_read <= 2 * expired_in_future,
        "availability read {entries_read} hold index entries; the future slots have \
         {expired_in_future} expired holds and {abandoned} abandoned ones are in the past"
    );
}
