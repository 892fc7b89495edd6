//! Changes committed through other instances, on this node or another node of a cluster, seen
//! by reading the event log: MySQL has no `NOTIFY`, and every change that alters availability
//! appends an event in its own transaction. See [`EventLogFeed`].

use std::time::Duration;

use slot_booking::changes::{
    follow_changes, Follower, Following, Invalidator, DEFAULT_POLL_INTERVAL,
};
use slot_booking::StoreError;

use crate::MySqlStore;

/// The [`ChangeFeed`](slot_booking::changes::ChangeFeed) of a MySQL store: the core's, reading
/// the event log by position.
pub type EventLogFeed = slot_booking::changes::EventLogFeed<MySqlStore>;

impl MySqlStore {
    /// A feed of this store's changes from now on, read every `interval`.
    pub async fn change_feed(&self, interval: Duration) -> Result<EventLogFeed, StoreError> {
        EventLogFeed::new(self.clone(), interval).await
    }

    /// Keeps `invalidator`'s engine fresh with changes committed anywhere else — other
    /// instances on this server or on other nodes of a Galera cluster, a caller's transaction
    /// — by reading the event log every [`DEFAULT_POLL_INTERVAL`], coalesced within
    /// [`DEFAULT_COALESCING_WINDOW`](slot_booking::changes::DEFAULT_COALESCING_WINDOW); other
    /// settings with [`follow_changes_with`](Self::follow_changes_with). Keep the returned
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
        self.follow_changes_with(invalidator, Following::default())
            .await
    }

    /// As [`follow_changes`](Self::follow_changes), reading the log every
    /// [`Following::poll_every`] (by default [`DEFAULT_POLL_INTERVAL`]) and coalescing within
    /// [`Following::coalesce_within`].
    pub async fn follow_changes_with(
        &self,
        invalidator: Invalidator,
        following: Following,
    ) -> Result<Follower, StoreError> {
        let interval = following.poll_every().unwrap_or(DEFAULT_POLL_INTERVAL);
        let feed = self.change_feed(interval).await?;
        Ok(follow_changes(
            feed,
            invalidator,
            following.coalesce_within(),
        ))
    }
}
