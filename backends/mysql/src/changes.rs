//! Changes committed through other instances, on this node or another node of a cluster, seen
//! by reading the event log: MySQL has no `NOTIFY`, and every change that alters availability
//! appends an event in its own transaction. See [`EventLogFeed`].

use std::time::Duration;

use async_trait::async_trait;
use slot_booking::changes::{
    follow_changes, ChangeFeed, Follower, Invalidator, Notice, DEFAULT_COALESCING_WINDOW,
};
use slot_booking::{EventPosition, EventStore, StoreError};

use crate::MySqlStore;

/// How often [`MySqlStore::follow_changes`] reads the log: a change made anywhere shows within
/// about this long (plus the coalescing window).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Most events one poll reads; more only mean "changed" sooner.
const POLL_LIMIT: u32 = 256;

/// A [`ChangeFeed`] that reads the event log by position every interval: a poll that finds
/// events (of any node) reports [`Notice::Changed`]; one that fails reports
/// [`Notice::Unsure`] and the next poll goes on from the same position. Each poll is one
/// indexed read of the log past the last position seen, and places the committed events not
/// yet placed when that came up short.
#[derive(Debug)]
pub struct EventLogFeed {
    store: MySqlStore,
    interval: Duration,
    after: EventPosition,
}

impl EventLogFeed {
    /// How often the feed reads the log.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

#[async_trait]
impl ChangeFeed for EventLogFeed {
    async fn next(&mut self) -> Notice {
        loop {
            tokio::time::sleep(self.interval).await;
            match self.store.read_events_after(self.after, POLL_LIMIT).await {
                Ok(events) => {
                    if let Some(last) = events.last() {
                        self.after = last.position;
                        return Notice::Changed;
                    }
                }
                Err(_) => return Notice::Unsure,
            }
        }
    }
}

impl MySqlStore {
    /// A feed of this store's changes from now on, read every `interval`.
    pub async fn change_feed(&self, interval: Duration) -> Result<EventLogFeed, StoreError> {
        let after = self.event_log_end().await?;
        Ok(EventLogFeed {
            store: self.clone(),
            interval,
            after,
        })
    }

    /// Keeps `invalidator`'s engine fresh with changes committed anywhere else — other
    /// instances on this server or on other nodes of a Galera cluster, a caller's transaction
    /// — by reading the event log every [`DEFAULT_POLL_INTERVAL`]. Keep the returned
    /// [`Follower`] as long as the engine; dropping it stops following.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), slot_booking::StoreError> {
    /// use slot_booking::BookingEngine;
    /// use slot_booking_mysql::MySqlStore;
    ///
    /// let store = MySqlStore::connect("mysql://root@127.0.0.1/app").await?;
    /// store.migrate().await?;
    /// let engine = BookingEngine::new(store.clone());
    /// let follower = store.follow_changes(engine.invalidator()).await?;
    /// // ... serve requests; keep `follower` as long as the engine ...
    /// # drop(follower);
    /// # Ok(()) }
    /// ```
    pub async fn follow_changes(&self, invalidator: Invalidator) -> Result<Follower, StoreError> {
        self.follow_changes_every(invalidator, DEFAULT_POLL_INTERVAL)
            .await
    }

    /// As [`follow_changes`](Self::follow_changes), reading the log every `interval`.
    pub async fn follow_changes_every(
        &self,
        invalidator: Invalidator,
        interval: Duration,
    ) -> Result<Follower, StoreError> {
        let feed = self.change_feed(interval).await?;
        Ok(follow_changes(feed, invalidator, DEFAULT_COALESCING_WINDOW))
    }
}
