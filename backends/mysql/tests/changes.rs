//! Following changes on a single server: an engine learns of commits made through another
//! store (a pool of its own: another instance) by reading the event log.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use chrono::Utc;
use common::{database, server_url};
use slot_booking::changes::{Follower, Following, DEFAULT_POLL_INTERVAL};
use slot_booking::{BookingEngine, NewSlot};
use slot_booking_mysql::MySqlStore;

/// Long enough that a wait times out only when a change never arrives.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Waits until `condition` holds; panics with `what` after [`TIMEOUT`].
async fn wait_for<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !condition().await {
        assert!(started.elapsed() < TIMEOUT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `follower` has received `notices` notices.
async fn wait_for_notices(follower: &Follower, notices: u64) {
    wait_for(&format!("notice {notices}"), || async {
        follower.stats().notices >= notices
    })
    .await;
}

/// A slot starting tomorrow, created through `engine`: one commit, one event.
async fn create_slot(engine: &BookingEngine<MySqlStore>) {
    let start = Utc::now() + chrono::Duration::days(1);
    engine
        .create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 1))
        .await
        .unwrap();
}

/// `follow_changes` sees commits made through another store; `follow_changes_with` reads the
/// log every `poll_every` and coalesces within `coalesce_within`: a follower reading once an
/// hour sees no commit, and one whose window is an hour invalidates once for two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_honours_its_poll_interval_and_window() {
    let guard = database(&server_url(), "changes").await;
    let a = BookingEngine::new(guard.store().await);
    let b = BookingEngine::new(guard.store().await);
    let hour = Duration::from_secs(3600);
    let default = b.store().follow_changes(b.invalidator()).await.unwrap();
    let hourly = b
        .store()
        .follow_changes_with(b.invalidator(), Following::default().with_poll_every(hour))
        .await
        .unwrap();
    let windowed = b
        .store()
        .follow_changes_with(
            b.invalidator(),
            Following::default()
                .with_poll_every(DEFAULT_POLL_INTERVAL)
                .with_coalesce_within(hour),
        )
        .await
        .unwrap();
    for n in 1..=2 {
        create_slot(&a).await;
        wait_for_notices(&windowed, n).await;
        wait_for_notices(&default, n).await;
    }
    assert_eq!(
        windowed.stats().invalidations,
        1,
        "the second commit waits for the window's end, an hour away"
    );
    assert_eq!(
        hourly.stats().notices,
        0,
        "no read of the log within the hour"
    );
    // The default window is 20 ms: the second commit invalidates within it.
    wait_for("the default follower's second invalidation", || async {
        default.stats().invalidations >= 2
    })
    .await;
}
