//! The write-ahead log stays bounded under a stream of holds: SQLite's automatic checkpoint
//! must keep running, which it only does for statements stepped to their end.

mod common;

use common::{at, hold, slot, TempDb};
use slot_booking::HoldOutcome;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_checkpointed_under_a_stream_of_holds() {
    let db = TempDb::new("wal");
    let store = db.store().await;
    let slot_id = slot(&store, i32::MAX).await;
    for i in 0..3_000 {
        let outcome = hold(&store, slot_id, &format!("k{i}"), at(0)).await;
        assert!(matches!(outcome, HoldOutcome::Created(_)), "{outcome:?}");
    }
    let mut wal = db.path.clone().into_os_string();
    wal.push("-wal");
    let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    // 3,000 holds write about 50 MB of WAL frames; the default automatic checkpoint (every
    // 1,000 pages) keeps the file near 4 MB by restarting it.
    assert!(
        size < 16 * 1024 * 1024,
        "the WAL grew to {size} bytes: no checkpoint ran"
    );
}
