//! Every instance sees every commit: following changes made through other engines.
//!
//! Each engine's availability cache lives in its own process. A cancel committed through
//! another application server (or inside a caller's transaction, or by an operator's SQL)
//! changes availability without this engine knowing. A store that can tell — PostgreSQL
//! notifies cancels and slot changes, every store with an event log appends an event for each
//! committed change ([`EventLogFeed`] reads it) — offers a [`ChangeFeed`] (two of them
//! [`merge`]d are one), and [`follow_changes`] turns it into invalidations of this engine's
//! cache:
//!
//! - a notice invalidates at once when the previous invalidation is older than the coalescing
//!   window; notices arriving within the window are folded into one more invalidation at its
//!   end, so an instance reloads its listing at most about twice per window however many
//!   changes commit;
//! - a feed that cannot be sure it saw everything (its connection was lost and came back, a
//!   queue overflowed) says [`Notice::Unsure`], which invalidates like a change: "everything
//!   may have changed";
//! - the follower stops by itself when the engine is dropped, or when its
//!   [`Follower`] is stopped.
//!
//! Invalidation drops the whole listing and the next read reloads it (one store read, shared
//! by every concurrent reader). A notice names no slot the engine patches: the reload is one
//! indexed read of the future slots, and the window bounds how often it happens.
//!
//! Each SQL store starts a follower in one call: `follow_changes(invalidator)` with the
//! defaults, or `follow_changes_with(invalidator, following)` with a [`Following`] (how often
//! the store polls, and the coalescing window).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::availability::AvailabilitySnapshot;
use crate::cache::SingleFlightCache;
use crate::model::EventPosition;
use crate::store::{EventStore, StoreError};

/// The default coalescing window of [`follow_changes`]: well inside the 100 ms in which a
/// change should show everywhere.
pub const DEFAULT_COALESCING_WINDOW: Duration = Duration::from_millis(20);

/// What a [`ChangeFeed`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A change that may alter availability committed somewhere.
    Changed,
    /// The feed may have missed changes (it lost its connection and came back, say): treat
    /// everything as changed.
    Unsure,
}

/// A source of change notices: what a store offers for [`follow_changes`].
#[async_trait]
pub trait ChangeFeed: Send + 'static {
    /// Waits for the next notice. A feed that fails reports [`Notice::Unsure`] and keeps
    /// trying (pausing between attempts as it sees fit), so a follower never stops on an error.
    async fn next(&mut self) -> Notice;
}

/// A handle that invalidates one engine's cached availability, and knows when the engine is
/// gone. From [`BookingEngine::invalidator`](crate::BookingEngine::invalidator).
#[derive(Debug, Clone)]
pub struct Invalidator {
    cache: SingleFlightCache<AvailabilitySnapshot, StoreError>,
    alive: watch::Receiver<()>,
}

impl Invalidator {
    pub(crate) fn new(
        cache: SingleFlightCache<AvailabilitySnapshot, StoreError>,
        alive: watch::Receiver<()>,
    ) -> Self {
        Invalidator { cache, alive }
    }

    /// Drops the engine's cached availability: the next read loads it again.
    pub fn invalidate(&self) {
        self.cache.invalidate();
    }

    /// Whether the engine has been dropped.
    pub fn is_closed(&self) -> bool {
        self.alive.has_changed().is_err()
    }

    /// Completes when the engine has been dropped (every clone of it).
    pub async fn closed(&self) {
        let mut alive = self.alive.clone();
        // The engine never sends; `changed` returns only when its sender is dropped with it.
        while alive.changed().await.is_ok() {}
    }
}

/// What a follower has done so far.
#[derive(Debug, Default)]
struct Counters {
    notices: AtomicU64,
    unsure: AtomicU64,
    invalidations: AtomicU64,
}

/// Counts of a [`Follower`]'s work, for tests, metrics and tuning the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowerStats {
    /// Notices received.
    pub notices: u64,
    /// Of them, [`Notice::Unsure`].
    pub unsure: u64,
    /// Invalidations made (at most about two per window, whatever the notices).
    pub invalidations: u64,
}

/// A running [`follow_changes`] task. Dropping it stops the task: keep it for as long as the
/// engine should follow other instances' commits (in the struct that holds the engine, say),
/// and [`stop`](Follower::stop) it, or drop it, to end following.
#[derive(Debug)]
#[must_use = "dropping a Follower stops it at once: keep it for as long as the engine should follow changes"]
pub struct Follower {
    task: tokio::task::JoinHandle<()>,
    counters: Arc<Counters>,
}

impl Follower {
    /// Counts so far.
    pub fn stats(&self) -> FollowerStats {
        FollowerStats {
            notices: self.counters.notices.load(Ordering::Relaxed),
            unsure: self.counters.unsure.load(Ordering::Relaxed),
            invalidations: self.counters.invalidations.load(Ordering::Relaxed),
        }
    }

    /// Whether the task has ended (its engine was dropped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the task and waits until it has ended, its feed dropped (a listener's connection
    /// closed with it).
    pub async fn stop(self) {
        self.task.abort();
        let _ = (&mut { self }.task).await;
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Follows `feed` on a task of its own, invalidating `invalidator`'s engine for every notice,
/// coalesced within `window` (see the [module docs](self)). Ends when the engine is dropped or
/// the returned [`Follower`] is stopped or dropped. Needs a tokio runtime.
pub fn follow_changes(
    feed: impl ChangeFeed,
    invalidator: Invalidator,
    window: Duration,
) -> Follower {
    let counters = Arc::new(Counters::default());
    let task = tokio::spawn(follow(feed, invalidator, window, Arc::clone(&counters)));
    Follower { task, counters }
}

async fn follow(
    mut feed: impl ChangeFeed,
    invalidator: Invalidator,
    window: Duration,
    counters: Arc<Counters>,
) {
    // The feed is read on a task of its own, so that a notice is never lost to a cancelled
    // `next()`. A channel of one is enough: a notice waiting in it already asks for the
    // invalidation any further one would.
    let (sender, mut notices) = mpsc::channel::<Notice>(1);
    let reader_counters = Arc::clone(&counters);
    let reader = tokio::spawn(async move {
        loop {
            let notice = feed.next().await;
            reader_counters.notices.fetch_add(1, Ordering::Relaxed);
            if notice == Notice::Unsure {
                reader_counters.unsure.fetch_add(1, Ordering::Relaxed);
            }
            match sender.try_send(notice) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => {}
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
    });
    let _stop_reader = AbortOnDrop(reader);
    let invalidate = || {
        invalidator.invalidate();
        counters.invalidations.fetch_add(1, Ordering::Relaxed);
        Instant::now()
    };
    let mut last: Option<Instant> = None;
    let mut pending = false;
    loop {
        let window_end = last.map_or_else(Instant::now, |at| at + window);
        tokio::select! {
            () = invalidator.closed() => return,
            notice = notices.recv() => {
                if notice.is_none() {
                    return;
                }
                if last.is_some_and(|at| Instant::now() < at + window) {
                    pending = true;
                } else {
                    last = Some(invalidate());
                }
            }
            () = tokio::time::sleep_until(window_end), if pending => {
                pending = false;
                last = Some(invalidate());
            }
        }
    }
}

/// How often an [`EventLogFeed`] reads the log by default: a change made anywhere shows within
/// about this long (plus the coalescing window).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How a store follows changes: how often it polls, and the coalescing window. Every SQL
/// store has the same two calls: `follow_changes(invalidator)` follows with
/// [`Following::default()`], and `follow_changes_with(invalidator, following)` with the
/// settings given.
///
/// - **Poll interval** ([`with_poll_every`](Following::with_poll_every)): how often the store
///   looks for commits made elsewhere — SQLite reads `PRAGMA data_version`, MySQL reads its
///   event log, PostgreSQL reads its event log's commits (its `EventCommitFeed`, beside the
///   notifications, which need no polling). A change made elsewhere shows within about one
///   interval plus the coalescing window; each poll is one cheap read per following engine.
///   By default each store's own interval: [`DEFAULT_POLL_INTERVAL`] (20 ms) for PostgreSQL
///   and MySQL, `slot_booking_sqlite::DEFAULT_POLL_INTERVAL` (50 ms) for SQLite.
/// - **Coalescing window** ([`with_coalesce_within`](Following::with_coalesce_within)): the
///   window [`follow_changes`] folds notices into, so an engine reloads its listing at most
///   about twice per window however many changes commit. By default
///   [`DEFAULT_COALESCING_WINDOW`] (20 ms). A wider window trades freshness for fewer reloads.
///
/// ```
/// use std::time::Duration;
/// use slot_booking::changes::{Following, DEFAULT_COALESCING_WINDOW};
///
/// let following = Following::default()
///     .with_poll_every(Duration::from_millis(100))
///     .with_coalesce_within(Duration::from_millis(50));
/// assert_eq!(following.poll_every(), Some(Duration::from_millis(100)));
/// assert_eq!(following.coalesce_within(), Duration::from_millis(50));
///
/// // The default: each store's own poll interval, the default window.
/// assert_eq!(Following::default().poll_every(), None);
/// assert_eq!(Following::default().coalesce_within(), DEFAULT_COALESCING_WINDOW);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Following {
    poll_every: Option<Duration>,
    coalesce_within: Duration,
}

impl Default for Following {
    /// Each store's own poll interval and a coalescing window of [`DEFAULT_COALESCING_WINDOW`]:
    /// what `follow_changes(invalidator)` uses.
    fn default() -> Self {
        Following {
            poll_every: None,
            coalesce_within: DEFAULT_COALESCING_WINDOW,
        }
    }
}

impl Following {
    /// Polls every `interval` instead of the store's default.
    #[must_use]
    pub fn with_poll_every(mut self, interval: Duration) -> Self {
        self.poll_every = Some(interval);
        self
    }

    /// Coalesces notices within `window`.
    #[must_use]
    pub fn with_coalesce_within(mut self, window: Duration) -> Self {
        self.coalesce_within = window;
        self
    }

    /// The poll interval asked for; `None` for the store's own default.
    pub fn poll_every(&self) -> Option<Duration> {
        self.poll_every
    }

    /// The coalescing window.
    pub fn coalesce_within(&self) -> Duration {
        self.coalesce_within
    }
}

/// Most events one poll of an [`EventLogFeed`] reads; more only mean "changed" sooner.
const POLL_LIMIT: u32 = 256;

/// A [`ChangeFeed`] over any [`EventStore`]: it reads the event log by position every interval,
/// and a poll that finds events reports [`Notice::Changed`]. Every write that changes what a
/// listing shows appends its events in its own transaction, holds and bookings included, so
/// this sees every committed change of every instance, the caller's transactions and other
/// nodes of a cluster included; a poll that fails reports [`Notice::Unsure`], and the next one
/// goes on from the same position. Each poll is one read of the log past the last position
/// seen.
#[derive(Debug)]
pub struct EventLogFeed<S> {
    store: S,
    interval: Duration,
    after: EventPosition,
}

impl<S: EventStore> EventLogFeed<S> {
    /// A feed of `store`'s changes committed from now on (after the log's end as of this
    /// call), read every `interval`.
    pub async fn new(store: S, interval: Duration) -> Result<Self, StoreError> {
        let after = store.event_log_end().await?;
        Ok(EventLogFeed {
            store,
            interval,
            after,
        })
    }

    /// How often the feed reads the log.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

#[async_trait]
impl<S: EventStore> ChangeFeed for EventLogFeed<S> {
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

/// Two feeds read as one: a notice of either is a notice. Each is read on a task of its own
/// (from the first call of [`next`](ChangeFeed::next) on), so neither waits for the other and
/// no notice is lost to a cancelled read; both stop when this is dropped.
pub struct Merged<A, B> {
    feeds: Option<(A, B)>,
    notices: Option<mpsc::Receiver<Notice>>,
    _readers: Vec<AbortOnDrop>,
}

impl<A, B> std::fmt::Debug for Merged<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merged").finish_non_exhaustive()
    }
}

/// `a` and `b` as one [`ChangeFeed`] (see [`Merged`]).
pub fn merge<A: ChangeFeed, B: ChangeFeed>(a: A, b: B) -> Merged<A, B> {
    Merged {
        feeds: Some((a, b)),
        notices: None,
        _readers: Vec::new(),
    }
}

/// Reads `feed` into `sender`, every notice, until the receiver is gone.
fn read_into(mut feed: impl ChangeFeed, sender: mpsc::Sender<Notice>) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(async move {
        loop {
            let notice = feed.next().await;
            if sender.send(notice).await.is_err() {
                return;
            }
        }
    }))
}

#[async_trait]
impl<A: ChangeFeed, B: ChangeFeed> ChangeFeed for Merged<A, B> {
    async fn next(&mut self) -> Notice {
        if let Some((a, b)) = self.feeds.take() {
            let (sender, notices) = mpsc::channel(2);
            self._readers = vec![read_into(a, sender.clone()), read_into(b, sender)];
            self.notices = Some(notices);
        }
        match self.notices.as_mut() {
            Some(notices) => match notices.recv().await {
                Some(notice) => notice,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BookingEngine, MemoryStore};

    /// A feed fed by the test, notice by notice.
    struct Scripted(mpsc::UnboundedReceiver<Notice>);

    #[async_trait]
    impl ChangeFeed for Scripted {
        async fn next(&mut self) -> Notice {
            match self.0.recv().await {
                Some(notice) => notice,
                None => std::future::pending().await,
            }
        }
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn notices_in_a_window_fold_into_one_more_invalidation() {
        let engine = BookingEngine::new(MemoryStore::new());
        let (send, receive) = mpsc::unbounded_channel();
        let follower = follow_changes(
            Scripted(receive),
            engine.invalidator(),
            Duration::from_millis(20),
        );
        send.send(Notice::Changed).unwrap();
        settle().await;
        assert_eq!(follower.stats().invalidations, 1, "the first at once");
        for _ in 0..50 {
            send.send(Notice::Changed).unwrap();
            settle().await;
        }
        assert_eq!(
            follower.stats().invalidations,
            1,
            "the rest wait for the window"
        );
        tokio::time::advance(Duration::from_millis(20)).await;
        settle().await;
        assert_eq!(follower.stats().invalidations, 2, "one at the window's end");
        tokio::time::advance(Duration::from_millis(100)).await;
        settle().await;
        assert_eq!(
            follower.stats().invalidations,
            2,
            "nothing pending, nothing more"
        );
        send.send(Notice::Unsure).unwrap();
        settle().await;
        let stats = follower.stats();
        assert_eq!(
            (stats.invalidations, stats.unsure),
            (3, 1),
            "unsure invalidates too"
        );
        assert_eq!(stats.notices, 52);
    }

    #[tokio::test(start_paused = true)]
    async fn the_follower_ends_with_its_engine() {
        let engine = BookingEngine::new(MemoryStore::new());
        let (_send, receive) = mpsc::unbounded_channel();
        let invalidator = engine.invalidator();
        let follower = follow_changes(
            Scripted(receive),
            invalidator.clone(),
            DEFAULT_COALESCING_WINDOW,
        );
        settle().await;
        assert!(!follower.is_finished() && !invalidator.is_closed());
        drop(engine);
        settle().await;
        assert!(invalidator.is_closed());
        assert!(follower.is_finished(), "no engine, no follower");
    }
}
