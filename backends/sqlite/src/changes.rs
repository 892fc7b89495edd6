//! Changes committed by other connections and processes, seen through `PRAGMA data_version`:
//! see [`DataVersionFeed`].

use std::time::Duration;

use async_trait::async_trait;
use slot_booking::changes::{follow_changes, ChangeFeed, Follower, Following, Invalidator, Notice};
use slot_booking::StoreError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};

use crate::{map_err, SqliteStore};

/// How often [`SqliteStore::follow_changes`] reads `PRAGMA data_version`: a change made
/// elsewhere shows within this (plus the coalescing window), well inside 100 ms.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How long a feed waits before reconnecting after an error: long enough not to spin on a
/// database that stays unreachable.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// A [`ChangeFeed`] polling `PRAGMA data_version` on a connection of its own; made by
/// [`SqliteStore::change_feed`], followed by [`SqliteStore::follow_changes`]. Its connection
/// closes when it is dropped.
///
/// SQLite has no notifications between processes. What it offers instead is
/// `PRAGMA data_version`: a number that, read twice on the same connection, differs when
/// another connection (of this process or any other) committed a change to the database in
/// between, and stays the same otherwise — a rolled-back transaction moves nothing, and the
/// connection's own commits do not count. [`DataVersionFeed`] reads it on one dedicated
/// connection every poll interval and reports [`Notice::Changed`] when it moved.
///
/// The decision, and its costs:
///
/// - **Cost**: one `PRAGMA data_version` per interval per following engine, on a connection of
///   its own (not one of the pool's). The pragma reads the WAL index in shared memory; it
///   touches no table and takes no lock a writer waits for.
/// - **Delay**: a commit shows up to one interval later ([`DEFAULT_POLL_INTERVAL`], 50 ms),
///   plus the follower's coalescing window.
/// - **What it catches**: every commit to the file by any connection of any process —
///   another application server, a caller's own transaction, an operator's plain SQL —
///   including those that change nothing availability shows (the cost is then one extra
///   reload at most per coalescing window). Commits through the following engine's own store
///   count too, since the pool's connections are other connections to the poller: the engine
///   already invalidated for those, so they cost one extra reload at most.
/// - **Errors**: a failed poll reports [`Notice::Unsure`], drops the connection and reconnects
///   after a pause; once it has read a new baseline it reports [`Notice::Unsure`] again, for
///   the commits it could not see in between.
///
/// An in-memory database is private to its connection: the poller would see another database.
/// Follow changes of a database file.
pub struct DataVersionFeed {
    options: SqliteConnectOptions,
    interval: Duration,
    /// The connection and the version last read on it; `None` after an error, until it has
    /// reconnected.
    polled: Option<(SqliteConnection, i64)>,
}

impl std::fmt::Debug for DataVersionFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataVersionFeed")
            .field("interval", &self.interval)
            .field("connected", &self.polled.is_some())
            .finish_non_exhaustive()
    }
}

impl DataVersionFeed {
    /// Opens the feed's connection with `options` and reads the baseline: every commit after
    /// this returns is reported.
    async fn open(options: SqliteConnectOptions, interval: Duration) -> Result<Self, StoreError> {
        let polled = Some(connect(&options).await?);
        Ok(DataVersionFeed {
            options,
            interval,
            polled,
        })
    }

    /// The poll interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

async fn connect(options: &SqliteConnectOptions) -> Result<(SqliteConnection, i64), StoreError> {
    let mut conn = options.connect().await.map_err(map_err)?;
    let version = data_version(&mut conn).await?;
    Ok((conn, version))
}

async fn data_version(conn: &mut SqliteConnection) -> Result<i64, StoreError> {
    // `fetch_all` steps the statement to its end, which ends its read transaction; a statement
    // left after its first row would keep a read snapshot open between polls and hold back
    // every checkpoint of the WAL.
    let rows: Vec<i64> = sqlx::query_scalar("PRAGMA data_version")
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    rows.first()
        .copied()
        .ok_or_else(|| StoreError::failed("PRAGMA data_version returned no row"))
}

#[async_trait]
impl ChangeFeed for DataVersionFeed {
    async fn next(&mut self) -> Notice {
        loop {
            let Some((conn, version)) = &mut self.polled else {
                tokio::time::sleep(RECONNECT_PAUSE).await;
                if let Ok(polled) = connect(&self.options).await {
                    self.polled = Some(polled);
                    // Commits between the error and this baseline went unseen.
                    return Notice::Unsure;
                }
                continue;
            };
            tokio::time::sleep(self.interval).await;
            match data_version(conn).await {
                Ok(now) if now == *version => {}
                Ok(now) => {
                    *version = now;
                    return Notice::Changed;
                }
                Err(_) => {
                    // The next call reconnects, after a pause.
                    if let Some((conn, _)) = self.polled.take() {
                        // The connection failed already: a failure to close it says nothing new.
                        let _ = conn.close().await;
                    }
                    return Notice::Unsure;
                }
            }
        }
    }
}

impl SqliteStore {
    /// A [`DataVersionFeed`] on this store's database, polling every `interval`, on a
    /// connection of its own opened with the pool's connect options. Every commit by another
    /// connection after this returns is reported.
    pub async fn change_feed(&self, interval: Duration) -> Result<DataVersionFeed, StoreError> {
        let options = (*self.pool().connect_options()).clone();
        DataVersionFeed::open(options, interval).await
    }

    /// Invalidates `invalidator`'s engine whenever any connection of any process commits to
    /// this store's database file: a [`DataVersionFeed`] polling every
    /// [`DEFAULT_POLL_INTERVAL`], followed with the
    /// [`DEFAULT_COALESCING_WINDOW`](slot_booking::changes::DEFAULT_COALESCING_WINDOW) (see
    /// [`follow_changes`] and the [feed's costs](DataVersionFeed)); other settings with
    /// [`follow_changes_with`](Self::follow_changes_with). Commits after this returns are
    /// seen. The follower ends when the engine is dropped, or when the returned [`Follower`] is
    /// stopped or dropped.
    ///
    /// ```no_run
    /// # async fn demo(store: slot_booking_sqlite::SqliteStore) -> Result<(), slot_booking::StoreError> {
    /// let engine = slot_booking::BookingEngine::new(store.clone());
    /// let follower = store.follow_changes(engine.invalidator()).await?;
    /// // ... serve requests; keep `follower` as long as the engine ...
    /// # drop(follower);
    /// # Ok(()) }
    /// ```
    pub async fn follow_changes(&self, invalidator: Invalidator) -> Result<Follower, StoreError> {
        self.follow_changes_with(invalidator, Following::default())
            .await
    }

    /// As [`follow_changes`](Self::follow_changes), polling `PRAGMA data_version` every
    /// [`Following::poll_every`] (by default [`DEFAULT_POLL_INTERVAL`]) and coalescing within
    /// [`Following::coalesce_within`].
    ///
    /// ```no_run
    /// # async fn demo(store: slot_booking_sqlite::SqliteStore) -> Result<(), slot_booking::StoreError> {
    /// use std::time::Duration;
    /// use slot_booking::changes::Following;
    ///
    /// let engine = slot_booking::BookingEngine::new(store.clone());
    /// let following = Following::default().with_poll_every(Duration::from_millis(200));
    /// let follower = store.follow_changes_with(engine.invalidator(), following).await?;
    /// # drop(follower);
    /// # Ok(()) }
    /// ```
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
