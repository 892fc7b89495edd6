//! Several processes on one file: an engine follows commits made through another store (its
//! own pool: another process, as far as SQLite can tell) by polling `PRAGMA data_version`.

mod common;

use std::future::Future;
use std::time::Duration;

use chrono::Utc;
use common::TempDb;
use slot_booking::changes::{ChangeFeed, Following, Notice};
use slot_booking::{AvailabilityQuery, BookingEngine, NewSlot, Scope, SlotId};
use slot_booking_sqlite::SqliteStore;

/// The poll interval of these tests.
const POLL: Duration = Duration::from_millis(20);

/// How many polls a commit may take to show: generous, for a loaded machine.
const POLLS: u32 = 250;

/// Waits until `check` holds, checking every few milliseconds; fails after `POLLS` polls.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let waited = tokio::time::timeout(POLL * POLLS, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what}: not within {POLLS} polls");
}

/// The units engine B lists for `slot_id` (`None` when the slot is not listed).
async fn listed(engine: &BookingEngine<SqliteStore>, slot_id: SlotId) -> Option<i32> {
    engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap()
        .entry(slot_id)
        .map(|entry| entry.remaining)
}

/// A cancel committed through store A shows on engine B (cache period of an hour) within a
/// bounded number of polls; a rolled-back transaction on A moves nothing; dropping engine B
/// ends its follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_through_another_store_show_on_a_following_engine() {
    let db = TempDb::new("changes");
    let a = db.store().await;
    let b = db.store().await;
    let engine_a = BookingEngine::new(a.clone());
    let start = Utc::now() + chrono::Duration::days(1);
    let slot_id = engine_a
        .create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 3))
        .await
        .unwrap()
        .slot_id;
    let placed = engine_a.hold(slot_id, "booked").await.unwrap().hold;
    engine_a
        .confirm(&Scope::Anonymous, placed.hold_id)
        .await
        .unwrap();

    let engine_b = BookingEngine::builder(b.clone())
        .cache_period(Duration::from_secs(3600))
        .build();
    let follower = b
        .follow_changes_with(
            engine_b.invalidator(),
            Following::default().with_poll_every(POLL),
        )
        .await
        .unwrap();
    assert_eq!(listed(&engine_b, slot_id).await, Some(2));

    // A cancel through store A, which engine B's cache knows nothing of.
    engine_a
        .cancel(&Scope::Anonymous, placed.hold_id)
        .await
        .unwrap();
    eventually("the cancel on engine B", || async {
        listed(&engine_b, slot_id).await == Some(3)
    })
    .await;
    let seen = follower.stats();
    assert!(seen.notices >= 1 && seen.invalidations >= 1, "{seen:?}");

    // A transaction on A that writes and rolls back: nothing committed, nothing reported.
    let mut feed = b.change_feed(POLL).await.unwrap();
    let mut tx = engine_a.transaction().await.unwrap();
    tx.hold(slot_id, "rolled-back").await.unwrap();
    tx.rollback().await.unwrap();
    // Here the timeout is the assertion: several polls pass without a notice.
    assert!(
        tokio::time::timeout(POLL * 10, feed.next()).await.is_err(),
        "a rollback moved data_version"
    );

    // A committed marker: a new slot, which the follower (and the feed) see.
    let marker = engine_a
        .create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 7))
        .await
        .unwrap()
        .slot_id;
    let noticed = tokio::time::timeout(POLL * POLLS, feed.next()).await;
    assert_eq!(noticed.ok(), Some(Notice::Changed));
    eventually("the marker on engine B", || async {
        listed(&engine_b, marker).await == Some(7)
    })
    .await;
    assert_eq!(listed(&engine_b, slot_id).await, Some(3));
    let after = follower.stats();
    assert_eq!(
        after.notices,
        seen.notices + 1,
        "one commit since, one notice: the rollback moved nothing"
    );
    assert_eq!(after.unsure, 0);

    drop(engine_b);
    eventually("the follower's end", || async { follower.is_finished() }).await;
}

/// A feed reports each commit by another connection once, and none of its own connection's
/// reads.
#[tokio::test]
async fn a_feed_reports_each_commit_once() {
    let db = TempDb::new("changes_feed");
    let a = db.store().await;
    let b = db.store().await;
    let mut feed = b.change_feed(POLL).await.unwrap();
    assert_eq!(feed.interval(), POLL);
    let engine = BookingEngine::new(a.clone());
    let start = Utc::now() + chrono::Duration::days(1);
    engine
        .create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 1))
        .await
        .unwrap();
    let noticed = tokio::time::timeout(POLL * POLLS, feed.next()).await;
    assert_eq!(noticed.ok(), Some(Notice::Changed));
    // Reads through either store commit nothing.
    BookingEngine::new(b.clone())
        .availability(AvailabilityQuery::all())
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(POLL * 10, feed.next()).await.is_err(),
        "one commit, one notice"
    );
}

/// `follow_changes_with` polls every `poll_every` and coalesces within `coalesce_within`: a
/// follower polling once an hour sees no commit, and one whose window is an hour invalidates
/// once for two commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_honours_its_poll_interval_and_window() {
    let db = TempDb::new("changes_following");
    let a = db.store().await;
    let b = db.store().await;
    let engine_a = BookingEngine::new(a.clone());
    let engine_b = BookingEngine::new(b.clone());
    let hour = Duration::from_secs(3600);
    let hourly = b
        .follow_changes_with(
            engine_b.invalidator(),
            Following::default().with_poll_every(hour),
        )
        .await
        .unwrap();
    let windowed = b
        .follow_changes_with(
            engine_b.invalidator(),
            Following::default()
                .with_poll_every(POLL)
                .with_coalesce_within(hour),
        )
        .await
        .unwrap();
    let start = Utc::now() + chrono::Duration::days(1);
    for commit in 1..=2 {
        engine_a
            .create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 1))
            .await
            .unwrap();
        eventually(&format!("commit {commit}"), || async {
            windowed.stats().notices >= commit
        })
        .await;
    }
    assert_eq!(
        windowed.stats().invalidations,
        1,
        "the second commit waits for the window's end, an hour away"
    );
    assert_eq!(hourly.stats().notices, 0, "no poll within the hour");
}
