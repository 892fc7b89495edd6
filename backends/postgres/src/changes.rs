//! Following the commits of every instance: a [`ChangeFeed`] over PostgreSQL `LISTEN`.
//!
//! Migration 6 installs row triggers on the schema's `slots` table that `NOTIFY` the schema's
//! channel ([`PostgresStore::change_channel`]) when a commit can change what a listing shows;
//! [`PostgresChangeFeed`] listens on that channel on a connection of its own and
//! [`PostgresStore::follow_changes`] hands it to the core's
//! [`follow_changes`](slot_booking::changes::follow_changes). See [`PostgresChangeFeed`] for
//! how it works, what a lost connection does and what it costs.

use std::time::Duration;

use async_trait::async_trait;
use slot_booking::changes::{
    follow_changes, merge, ChangeFeed, Follower, Following, Invalidator, Notice,
    DEFAULT_POLL_INTERVAL,
};
use slot_booking::StoreError;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};

use sqlx::AssertSqlSafe;

use crate::{map_err, PostgresStore};

/// The start of every change channel's name: the channel of a schema is this prefix followed
/// by the schema's name, cut to PostgreSQL's longest channel name (63 bytes). Migration 6's trigger functions build
/// the same name from `TG_TABLE_SCHEMA`.
pub const CHANGE_CHANNEL_PREFIX: &str = "slot_booking:";

/// PostgreSQL's longest channel name (`NAMEDATALEN - 1`): `pg_notify` refuses a longer one,
/// while `LISTEN` would silently cut it, so both sides cut it here first.
const MAX_CHANNEL_BYTES: usize = 63;

/// The first pause after the listener's connection failed, doubled on every further failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The longest pause between two attempts to listen again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long one attempt to open the listener's connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The change channel of `schema`.
fn channel_for(schema: &str) -> String {
    let mut channel = format!("{CHANGE_CHANNEL_PREFIX}{schema}");
    // Schema names are validated as ASCII, so this cut is the trigger's `left(..., 63)`; the
    // boundary check only keeps a cut from ever splitting a character.
    let mut end = channel.len().min(MAX_CHANNEL_BYTES);
    while !channel.is_char_boundary(end) {
        end -= 1;
    }
    channel.truncate(end);
    channel
}

/// Sleeps between two attempts to listen again (tokio: the follower runs on it anyway).
async fn pause(duration: Duration) {
    tokio::time::sleep(duration).await;
}

/// The [`ChangeFeed`] of one schema: PostgreSQL notifications on the schema's change channel,
/// received on a connection of its own. Made by [`PostgresStore::change_feed`]; usually
/// followed through [`PostgresStore::follow_changes`].
///
/// # Every instance sees every commit
///
/// Each engine caches the availability listing for its cache period. Without help, a cancel
/// committed through another instance (or inside a caller's own transaction, or by an
/// operator's SQL) shows here only when that period ends. Following changes drops the cached
/// listing soon after any such commit:
///
/// * **The trigger.** Migration 6 adds row triggers to `<schema>.slots` that call
///   `pg_notify('slot_booking:<schema>', <slot id>)` after an insert, a delete or a
///   `TRUNCATE`, and after an update that gives units back (`remaining` rose: a cancel, a
///   reclaim) or changes `capacity`, `closed`, `removed_at`, `starts_at`, `ends_at` or
///   `resource`. A hold's decrement does not notify, so the hot path pays one comparison in the
///   trigger's `WHEN` clause and no `NOTIFY` (whose commit takes an instance-wide lock);
///   [`PostgresStore::follow_changes`] sees holds and bookings through the event log instead
///   ([`EventCommitFeed`]). Confirms do not touch the slot
///   row. The channel names the schema (cut to 63 bytes), so stores in other
///   schemas of the same database are not woken.
/// * **After commit, by construction.** PostgreSQL delivers a notification when the
///   transaction that sent it commits, and drops it when it rolls back; identical
///   notifications of one transaction fold into one. So a listing is never invalidated before
///   the change is visible, wherever the change was made.
/// * **The listener.** The feed `LISTEN`s on a connection of its own, opened with the store's
///   connection options (its own one-connection pool: sqlx's `PgListener::connect_with`
///   would otherwise keep one of the store's pool connections for as long as it listens).
///   Every notification is a [`Notice::Changed`]; the payload is not used, as the engine
///   reloads the whole listing. [`PostgresStore::follow_changes`] starts listening before it
///   returns, so every change committed after it returns is seen, and invalidates once more
///   after that, for changes committed before.
/// * **A lost connection.** Notifications sent while the listener is disconnected are lost,
///   so a reconnection is a [`Notice::Unsure`]: the engine invalidates as if everything had
///   changed. When sqlx re-established the connection itself (`try_recv` returned `Ok(None)`,
///   having issued `LISTEN` again) that is reported at once; on any error the feed drops the
///   connection, waits (50 ms, doubling up to 5 s while attempts keep failing), connects and
///   listens anew, and reports [`Notice::Unsure`] once it listens again. While the database
///   cannot be reached the engine keeps serving its listing for at most its cache period. A
///   half-open TCP connection (a peer that vanished without a reset) is noticed only by the
///   operating system's keepalives; the cache period bounds the staleness meanwhile.
/// * **Connection poolers.** `LISTEN` needs a session: behind PgBouncer in transaction pooling
///   mode notifications are sent but never received. Point the store's pool at the database or
///   at a session-mode pooler, or build the feed from a store whose pool connects directly.
/// * **Stopping.** The follower stops when its engine is dropped (or the [`Follower`] is
///   stopped or dropped); the feed is dropped with it and its connection closes.
///
/// # Cost at scale
///
/// Every notifying commit wakes every listening instance of the schema (one notification per
/// listener), and each instance's follower coalesces: invalidations are at least one window
/// apart, so an instance reloads at most `min(notifying commits/s, 1 s / window)` times a second,
/// and only if something reads its listing meanwhile. Each reload is one indexed read of the
/// future slots. With the default 20 ms window, 100 instances and 50 cancels/s, each instance
/// reloads at most `min(50, 50) = 50` times a second: at most 5,000 reloads/s across the fleet.
/// With 500 cancels/s it is still `min(500, 50) = 50` per instance, 5,000 in all: the bound
/// follows the number of instances and the window, not the commit rate. A wider window
/// ([`Following::with_coalesce_within`] for [`PostgresStore::follow_changes_with`]) trades
/// freshness for fewer reloads.
///
/// What the notification costs the write that sends it: PostgreSQL serializes the commits of
/// notifying transactions (a database-wide lock from queueing the notification until the
/// commit record is flushed), so notifying cancels stop sharing WAL flushes. Measured on a
/// 2-core machine, 8 tasks placing and cancelling holds: the median cancel took 2.3x as long
/// as without the triggers (2.81 ms against 1.23 ms) and pairs/s fell to 0.65x; three
/// listening engines changed that by about 1 %. Holds that take units do not notify and were
/// not slowed.
#[derive(Debug)]
pub struct PostgresChangeFeed {
    options: PgConnectOptions,
    channel: String,
    /// `None` after an error, until a new connection listens.
    listener: Option<PgListener>,
    backoff: Duration,
}

impl PostgresChangeFeed {
    /// Opens a connection with `options` and listens on `channel`.
    async fn listen(options: &PgConnectOptions, channel: &str) -> Result<PgListener, sqlx::Error> {
        // A pool of one, so the listener never takes a connection from the store's pool; no
        // lifetime or idle limit, as the connection is always in use; sqlx reconnects through
        // it when the connection is lost.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_lazy_with(options.clone());
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(channel).await?;
        Ok(listener)
    }

    /// The channel this feed listens on.
    pub fn channel(&self) -> &str {
        &self.channel
    }
}

#[async_trait]
impl ChangeFeed for PostgresChangeFeed {
    async fn next(&mut self) -> Notice {
        loop {
            let Some(listener) = self.listener.as_mut() else {
                match PostgresChangeFeed::listen(&self.options, &self.channel).await {
                    Ok(listener) => {
                        self.listener = Some(listener);
                        self.backoff = FIRST_BACKOFF;
                        // Listening again: whatever committed while nobody listened is lost.
                        return Notice::Unsure;
                    }
                    Err(_) => {
                        pause(self.backoff).await;
                        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                }
            };
            match listener.try_recv().await {
                Ok(Some(_)) => return Notice::Changed,
                // sqlx lost the connection, opened a new one and listened again before
                // returning: notifications in between are lost.
                Ok(None) => return Notice::Unsure,
                Err(_) => {
                    // sqlx reconnects only on some I/O errors; after any other error the
                    // connection may be dead, or may come back silently on the next call
                    // (losing notifications without an `Ok(None)`). Start over on a fresh
                    // connection and report the gap once it listens.
                    self.listener = None;
                    pause(self.backoff).await;
                }
            }
        }
    }
}

/// A [`ChangeFeed`] of the commits that appended events to this schema's log: every interval,
/// one read says whether a transaction that appended events committed since the previous read,
/// comparing the two reads' snapshots — an event whose transaction started after the older
/// snapshot (`tx` at or above its xmax) or was running then (in its `xip`), and is visible now,
/// committed in between. Every write of the store appends events, holds and bookings included
/// (which the notifications leave out), so this sees them; it writes nothing (no event
/// horizon is taken), so its cost to the writers is one indexed read per interval. A read that
/// fails reports [`Notice::Unsure`]; the next compares with the last snapshot read.
#[derive(Debug)]
pub struct EventCommitFeed {
    pool: sqlx::PgPool,
    statement: String,
    interval: Duration,
    snapshot: String,
}

impl EventCommitFeed {
    /// How often the feed reads.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

#[async_trait]
impl ChangeFeed for EventCommitFeed {
    async fn next(&mut self) -> Notice {
        loop {
            tokio::time::sleep(self.interval).await;
            let read = sqlx::query_as::<_, (String, bool)>(AssertSqlSafe(self.statement.as_str()))
                .bind(self.snapshot.as_str())
                .fetch_one(&self.pool)
                .await;
            match read {
                Ok((snapshot, changed)) => {
                    self.snapshot = snapshot;
                    if changed {
                        return Notice::Changed;
                    }
                }
                Err(_) => return Notice::Unsure,
            }
        }
    }
}

impl PostgresStore {
    /// A feed of the commits that append events to this store's log from now on, read every
    /// `interval` (see [`EventCommitFeed`]).
    pub async fn event_commit_feed(
        &self,
        interval: Duration,
    ) -> Result<EventCommitFeed, StoreError> {
        let snapshot: String = sqlx::query_scalar("SELECT pg_catalog.pg_current_snapshot()::text")
            .fetch_one(self.pool())
            .await
            .map_err(map_err)?;
        let s = crate::fragments::quote(self.schema());
        // The newest visible event's transaction (one backward step of the primary key), and
        // one probe of the key per transaction running at the older snapshot: a plain range or
        // `= ANY` over `tx` is planned as a scan of the whole log (36 ms on 128,000 events,
        // against 0.2 ms).
        let statement = format!(
            "SELECT pg_catalog.pg_current_snapshot()::text, \
                    coalesce((SELECT e.tx FROM {s}.events e ORDER BY e.tx DESC LIMIT 1) \
                             >= pg_catalog.pg_snapshot_xmax($1::text::pg_snapshot), false) \
                    OR EXISTS ( \
                        SELECT 1 FROM unnest(ARRAY( \
                            SELECT pg_catalog.pg_snapshot_xip($1::text::pg_snapshot))) r(x) \
                        CROSS JOIN LATERAL ( \
                            SELECT 1 FROM {s}.events e WHERE e.tx = r.x LIMIT 1) hit)"
        );
        Ok(EventCommitFeed {
            pool: self.pool().clone(),
            statement,
            interval,
            snapshot,
        })
    }

    /// The channel migration 6's triggers notify for this store's schema:
    /// [`CHANGE_CHANNEL_PREFIX`] followed by the schema's name, cut to 63 bytes.
    pub fn change_channel(&self) -> String {
        channel_for(self.schema())
    }

    /// A [`ChangeFeed`] of this store's schema, already listening on a connection of its own
    /// (opened with the pool's connection options, outside the pool). See
    /// [`PostgresChangeFeed`].
    ///
    /// Fails with [`StoreError::unavailable`] when the connection cannot be opened, and with
    /// [`StoreError::failed`] when the schema lacks the triggers of migration 6 (run
    /// [`PostgresStore::migrate`]): without them nothing would ever be notified.
    pub async fn change_feed(&self) -> Result<PostgresChangeFeed, StoreError> {
        let schema = self.schema();
        let triggers: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_trigger t \
             JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = 'slots' \
               AND t.tgname IN ('slots_notify_insert_delete', 'slots_notify_update')",
        )
        .bind(schema)
        .fetch_one(self.pool())
        .await
        .map_err(map_err)?;
        if triggers < 2 {
            return Err(StoreError::failed(format!(
                "schema {schema:?} has no change notifications: run PostgresStore::migrate"
            )));
        }
        let options = (*self.pool().connect_options()).clone();
        let channel = self.change_channel();
        let listener = PostgresChangeFeed::listen(&options, &channel)
            .await
            .map_err(map_err)?;
        Ok(PostgresChangeFeed {
            options,
            channel,
            listener: Some(listener),
            backoff: FIRST_BACKOFF,
        })
    }

    /// Invalidates `invalidator`'s engine after every commit that changes availability in this
    /// store's schema, from any instance, transaction or SQL session, coalesced within
    /// [`DEFAULT_COALESCING_WINDOW`](slot_booking::changes::DEFAULT_COALESCING_WINDOW):
    /// cancels, reclaims and slot changes as soon as their notification arrives
    /// ([`PostgresChangeFeed`], listening before this returns), and every change the store's
    /// writes make, holds and bookings included (which notify nobody: their commits stay off
    /// the notification lock), when the event log's commits are next read, every
    /// [`DEFAULT_POLL_INTERVAL`] ([`EventCommitFeed`]). A change written by plain SQL outside
    /// the store shows through its notification only. Other settings with
    /// [`follow_changes_with`](Self::follow_changes_with). Needs a tokio runtime; the follower
    /// stops when the engine is dropped.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), slot_booking::StoreError> {
    /// use slot_booking::BookingEngine;
    /// use slot_booking_postgres::PostgresStore;
    ///
    /// let store = PostgresStore::connect("postgres://postgres@localhost/app").await?;
    /// store.migrate().await?;
    /// let engine = BookingEngine::new(store.clone());
    /// let follower = store.follow_changes(engine.invalidator()).await?;
    /// # drop(follower);
    /// # Ok(()) }
    /// ```
    pub async fn follow_changes(&self, invalidator: Invalidator) -> Result<Follower, StoreError> {
        self.follow_changes_with(invalidator, Following::default())
            .await
    }

    /// As [`PostgresStore::follow_changes`], reading the event log's commits
    /// ([`EventCommitFeed`]) every [`Following::poll_every`] (by default
    /// [`DEFAULT_POLL_INTERVAL`]) and coalescing within [`Following::coalesce_within`]: an
    /// instance invalidates at most about twice per window however many changes commit.
    /// Notifications need no polling: they arrive as they are sent.
    ///
    /// ```no_run
    /// # async fn demo(store: slot_booking_postgres::PostgresStore) -> Result<(), slot_booking::StoreError> {
    /// use std::time::Duration;
    /// use slot_booking::changes::Following;
    ///
    /// let engine = slot_booking::BookingEngine::new(store.clone());
    /// let following = Following::default().with_coalesce_within(Duration::from_millis(100));
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
        let notified = self.change_feed().await?;
        let logged = self.event_commit_feed(interval).await?;
        // The engine may have cached a listing before the feeds started; a change committed in
        // between was seen by neither.
        invalidator.invalidate();
        Ok(follow_changes(
            merge(notified, logged),
            invalidator,
            following.coalesce_within(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::channel_for;

    /// The trigger computes `left('slot_booking:' || schema, 63)`: the same name, cut the same.
    #[test]
    fn channels_are_the_prefix_and_schema_cut_to_63_bytes() {
        assert_eq!(channel_for("slot_booking"), "slot_booking:slot_booking");
        let long = "s".repeat(63);
        let channel = channel_for(&long);
        assert_eq!(channel.len(), 63);
        assert_eq!(channel, format!("slot_booking:{}", "s".repeat(50)));
    }
}
