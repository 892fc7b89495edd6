//! Expiry notices without a job scheduler: a task that reclaims expired holds periodically.
//!
//! Correctness never needs it — an expired hold stops counting the moment its `expires_at`
//! passes, and its units come back lazily when a slot looks full. What the reclaimer adds is a
//! `hold_expired` [event](crate::events) soon after each expiry (for "your hold lapsed"
//! emails, releasing a payment authorisation) and exact stored counts. Each round calls
//! [`BookingEngine::reclaim_expired`] until a batch comes back short, so one round touches at
//! most `batch` holds per store call; several reclaimers on several instances may run at once,
//! and each expired hold is still reported once (the store decides by the rows its update
//! changed).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use crate::engine::BookingEngine;
use crate::error::BookingError;
use crate::events::{EventStore, MAX_BATCH};

/// The shortest period a reclaimer accepts; shorter ones are raised to it.
pub const MIN_RECLAIM_PERIOD: Duration = Duration::from_millis(1);

/// What a [`Reclaimer`] has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimStats {
    /// Rounds finished (each one or more `reclaim_expired` calls, until a batch came back
    /// short).
    pub rounds: u64,
    /// Holds this reclaimer reclaimed.
    pub reclaimed: u64,
    /// Rounds that ended on a store error (retried at the next period).
    pub failures: u64,
}

/// A running reclaimer from [`BookingEngine::reclaim_expired_every`]. Dropping it stops the task; so
/// does dropping the engine (at the next period). Keep it for as long as expired holds should
/// be reclaimed, and [`stop`](Reclaimer::stop) it, or drop it, to end it.
///
/// A reclaimer dropped where it is made would stop at once; the compiler says so (doc tests
/// deny the warning, so this one fails to compile, unlike the example of
/// [`reclaim_expired_every`](BookingEngine::reclaim_expired_every) that keeps it):
///
/// ```compile_fail
/// # tokio_test::block_on(async {
/// use std::time::Duration;
/// use slot_booking::{BookingEngine, MemoryStore};
///
/// let engine = BookingEngine::new(MemoryStore::new());
/// engine.reclaim_expired_every(Duration::from_secs(30), 500)?; // error: unused `Reclaimer`
/// # Ok::<(), slot_booking::BookingError>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
#[must_use = "dropping a Reclaimer stops it at once: keep it for as long as expired holds should be swept"]
pub struct Reclaimer {
    task: tokio::task::JoinHandle<()>,
    stats: watch::Receiver<ReclaimStats>,
}

impl Reclaimer {
    /// Counts so far.
    pub fn stats(&self) -> ReclaimStats {
        *self.stats.borrow()
    }

    /// Waits until at least `rounds` rounds have finished; returns the counts then, or `None`
    /// if the reclaimer ended first (its engine was dropped).
    pub async fn wait_for_rounds(&mut self, rounds: u64) -> Option<ReclaimStats> {
        self.stats
            .wait_for(|stats| stats.rounds >= rounds)
            .await
            .ok()
            .map(|stats| *stats)
    }

    /// Whether the task has ended (its engine was dropped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the task and waits until it has ended. A reclaim in flight finishes first: the
    /// engine runs store writes on tasks of their own.
    pub async fn stop(self) {
        self.task.abort();
        let _ = (&mut { self }.task).await;
    }
}

impl Drop for Reclaimer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<S: EventStore> BookingEngine<S> {
    /// Starts a task that reclaims expired holds every `every` (the first round at once),
    /// reclaiming them `batch` (1–1000) per store call until a call comes back short. A
    /// failed round is counted and retried at the next period. The task holds the engine
    /// only while it reclaims, so it ends when the engine is dropped. Needs a tokio runtime.
    ///
    /// ```
    /// # tokio_test::block_on(async {
    /// use std::time::Duration;
    /// use slot_booking::{BookingEngine, MemoryStore};
    ///
    /// let engine = BookingEngine::new(MemoryStore::new());
    /// let mut reclaimer = engine.reclaim_expired_every(Duration::from_secs(30), 500)?;
    /// let first = reclaimer.wait_for_rounds(1).await;
    /// assert_eq!(first.map(|stats| stats.reclaimed), Some(0));
    /// # Ok::<(), slot_booking::BookingError>(())
    /// # }).unwrap();
    /// ```
    pub fn reclaim_expired_every(
        &self,
        every: Duration,
        batch: u32,
    ) -> Result<Reclaimer, BookingError> {
        if !(1..=MAX_BATCH).contains(&batch) {
            return Err(BookingError::InvalidPage { limit: batch });
        }
        let engine = self.downgrade();
        let (report, stats) = watch::channel(ReclaimStats::default());
        let report = Arc::new(report);
        let mut ticks = tokio::time::interval(every.max(MIN_RECLAIM_PERIOD));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let task = tokio::spawn(async move {
            loop {
                ticks.tick().await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                let (reclaimed, failed) = reclaim_round(&engine, batch).await;
                drop(engine);
                report.send_modify(|stats| {
                    stats.rounds += 1;
                    stats.reclaimed += reclaimed;
                    stats.failures += u64::from(failed);
                });
            }
        });
        Ok(Reclaimer { task, stats })
    }
}

/// One round: reclaims until a batch comes back short. Returns the holds reclaimed and
/// whether it ended on an error.
async fn reclaim_round<S: EventStore>(engine: &BookingEngine<S>, batch: u32) -> (u64, bool) {
    let mut reclaimed = 0;
    loop {
        match engine.reclaim_expired(batch).await {
            Ok(holds) => {
                reclaimed += holds.len() as u64;
                if holds.len() < batch as usize {
                    return (reclaimed, false);
                }
            }
            Err(_) => return (reclaimed, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;
    use crate::{ConsumerId, ManualClock, MemoryStore, NewHold, NewSlot};
    use chrono::TimeZone;

    #[tokio::test(start_paused = true)]
    async fn reclaims_each_period_in_batches_and_ends_with_its_engine() {
        let t0 = chrono::Utc
            .with_ymd_and_hms(2030, 1, 1, 9, 0, 0)
            .single()
            .unwrap();
        let clock = ManualClock::new(t0);
        let engine = BookingEngine::builder(MemoryStore::new())
            .clock(clock.clone())
            .build();
        let slot = engine
            .create_slot(NewSlot::new(
                t0 + chrono::Duration::hours(2),
                t0 + chrono::Duration::hours(3),
                10,
            ))
            .await
            .unwrap()
            .slot_id;
        for key in ["a", "b", "c", "d", "e"] {
            let request = NewHold::new(slot, key).lifetime(Duration::from_secs(60));
            engine.place_hold(request).await.unwrap();
        }
        let mut reclaimer = engine
            .reclaim_expired_every(Duration::from_secs(10), 2)
            .unwrap();
        let first = reclaimer.wait_for_rounds(1).await.unwrap();
        assert_eq!(
            (first.rounds, first.reclaimed),
            (1, 0),
            "nothing expired yet"
        );

        clock.advance(chrono::Duration::seconds(61));
        let second = reclaimer.wait_for_rounds(2).await.unwrap();
        assert_eq!(
            second.reclaimed, 5,
            "three batches of at most two in one round"
        );
        let log = ConsumerId::new("log").unwrap();
        let events = engine.read_events(&log, 100).await.unwrap();
        let expired = events
            .iter()
            .filter(|e| e.kind == EventKind::HoldExpired)
            .count();
        assert_eq!(expired, 5);
        assert_eq!(engine.get_slot(slot).await.unwrap().stored_remaining, 10);

        // The task holds the engine only while reclaiming: dropping it ends the task.
        drop(engine);
        let ended = tokio::time::timeout(
            Duration::from_secs(3600),
            reclaimer.wait_for_rounds(u64::MAX),
        );
        assert_eq!(ended.await, Ok(None), "the reclaimer outlived its engine");
        assert!(reclaimer.is_finished());
        assert_eq!(reclaimer.stats().failures, 0);
    }

    #[tokio::test]
    async fn batch_sizes_outside_the_bounds_are_refused() {
        let engine = BookingEngine::new(MemoryStore::new());
        for batch in [0, MAX_BATCH + 1] {
            let refused = engine.reclaim_expired_every(Duration::from_secs(1), batch);
            assert!(matches!(refused, Err(BookingError::InvalidPage { .. })));
        }
    }
}
