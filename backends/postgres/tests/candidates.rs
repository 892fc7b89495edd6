//! "Any one of these" holds on PostgreSQL: a candidate whose slot row another transaction has
//! locked is passed over without waiting (`SKIP LOCKED`) for the next that fits; only when no
//! candidate is both free and unlocked does the hold wait for a lock, as any hold does.

mod common;

use std::time::Duration;

use common::*;
use slot_booking::candidates::NewAnyHold;
use slot_booking::{BookingEngine, NewSlot};
use sqlx::{AssertSqlSafe, Connection};

/// Bounds each call: a hold that queued behind the open transaction's lock would wait for as
/// long as it stays open, which is until after the call.
const HANG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_candidate_is_passed_over_without_waiting() {
    let Some(ctx) = setup("candidates_skip_locked").await else {
        return;
    };
    let engine = BookingEngine::new(ctx.store.clone());
    let start = chrono::Utc::now() + chrono::Duration::days(1);
    let mut rooms = Vec::new();
    for _ in 0..3 {
        let slot = NewSlot::new(start, start + chrono::Duration::hours(1), 2);
        rooms.push(engine.create_slot(slot).await.unwrap().slot_id);
    }
    // Another transaction holds the first room's row (as a hold on it would, mid-commit).
    let mut other = sqlx::PgConnection::connect(&ctx.url).await.unwrap();
    let mut locker = other.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT id FROM \"{}\".slots WHERE id = $1 FOR NO KEY UPDATE",
        ctx.schema()
    )))
    .bind(rooms[0].get())
    .fetch_one(&mut *locker)
    .await
    .unwrap();

    let placed = tokio::time::timeout(HANG, engine.hold_any(NewAnyHold::new(rooms.clone(), "a")))
        .await
        .expect("the hold waited for the locked row")
        .unwrap();
    assert_eq!(
        placed.hold.slot_id, rooms[1],
        "the next candidate, unlocked"
    );
    // The second room full, the third closed: only the locked room has units, so the hold
    // waits for its lock and takes it once the other transaction ends.
    engine
        .hold_any(NewAnyHold::new(vec![rooms[1]], "b"))
        .await
        .unwrap();
    engine.close_sales(rooms[2]).await.unwrap();
    let hold = tokio::spawn({
        let (engine, rooms) = (engine.clone(), rooms.clone());
        async move { engine.hold_any(NewAnyHold::new(rooms, "c")).await }
    });
    // Until the hold waits for the lock: a backend of this schema's statements waiting.
    loop {
        let (waiters,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND position($1 in query) > 0",
        )
        .bind(ctx.schema())
        .fetch_one(ctx.pool())
        .await
        .unwrap();
        assert!(
            !hold.is_finished(),
            "the hold ended before the lock was released"
        );
        if waiters > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    locker.rollback().await.unwrap();
    let placed = tokio::time::timeout(HANG, hold)
        .await
        .expect("the hold finished once the lock was released")
        .unwrap()
        .unwrap();
    assert_eq!(placed.hold.slot_id, rooms[0]);
    let left: Vec<i32> = {
        let mut left = Vec::new();
        for &room in &rooms {
            left.push(engine.get_slot(room).await.unwrap().stored_remaining);
        }
        left
    };
    assert_eq!(left, vec![1, 0, 2]);
}
