//! The server's event consumer, reclaimer and purger. Every change committed to the database —
//! through this server, another one, or a caller's own transaction — is logged once it commits,
//! from the database's event log: at least once, resuming after a restart where the previous
//! run acknowledged (the cursor is stored in the database under [`CONSUMER`]). Expired holds
//! are swept every [`RECLAIM_PERIOD`], so their `hold_expired` events come soon after the
//! expiry.
//!
//! Each process consumes under the same name, through its lease: of several servers on one
//! database one logs at a time (the holder of the lease, renewed before every read), and
//! another takes over when it stops (it releases the lease) or dies (its lease lapses after
//! [`LEASE`]). An event is logged again only when a holder died between logging a batch and
//! acknowledging it. An application would give each consumer (mailer, payments, analytics)
//! its own name.
//!
//! With a retention ([`Purging`], `HISTORY_RETENTION_SECONDS`), a [`Purger`] deletes history
//! older than it at least every [`PURGE_PERIOD`] ([`BookingEngine::purge`]): holds cancelled or
//! expired that long ago (their idempotency keys with them) and the events of the log. The
//! core deletes an event only once every consumer registered in the database has
//! acknowledged it. The server's own consumer acknowledges each batch as it logs it, and the
//! change stream (`GET /changes`) reads by position without registering anything, so on a
//! database only servers use, the log holds no more than the retention plus one period of
//! events. A consumer of the application's that falls behind (or was abandoned) keeps every
//! event after its cursor: the purger then reports the oldest event it had to keep
//! ([`PurgeStats::held_back`]) and logs a warning each round, naming whether it is the
//! server's own consumer or another one.

use std::time::Duration;

use slot_booking::events::{Event, EventPosition, EventStore, Purged};
use slot_booking::reclaimer::{ReclaimStats, Reclaimer};
use slot_booking::{BookingEngine, BookingError, ConsumerId, LeaseHolder, Timestamp};
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

/// The name the server's log consumer keeps its cursor under.
pub const CONSUMER: &str = "server-log";

/// How long the consumer waits when it found no new event (or the database failed).
pub const POLL_PERIOD: Duration = Duration::from_millis(500);

/// How often expired holds are swept.
pub const RECLAIM_PERIOD: Duration = Duration::from_secs(5);

/// Events read, and expired holds reclaimed, per store call.
pub const BATCH: u32 = 500;

/// How long a server's lease of the log consumer lasts unless renewed: how long the other
/// servers wait before taking over from one that died.
pub const LEASE: Duration = Duration::from_secs(15);

/// The longest wait between two purges ([`Purging::keeping`]): with a retention longer than
/// this, the log holds at most the retention plus this much history.
pub const PURGE_PERIOD: Duration = Duration::from_secs(3600);

/// How long history is kept, and how often what is older is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Purging {
    /// Holds cancelled or expired longer ago than this, and events older than this that every
    /// consumer has acknowledged, are deleted.
    pub keep: Duration,
    /// How often a purge runs (the first at once). What it leaves is younger than `keep` plus
    /// this.
    pub every: Duration,
}

impl Purging {
    /// The server's purging under a retention of `keep`: every `keep`, at most every
    /// [`PURGE_PERIOD`] (at least every second), so that the log never holds more than twice
    /// the retention, nor more than the retention and an hour.
    pub fn keeping(keep: Duration) -> Purging {
        Purging {
            keep,
            every: keep.clamp(Duration::from_secs(1), PURGE_PERIOD),
        }
    }
}

/// What a [`Purger`] has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeStats {
    /// Rounds finished (each one or more purges of up to [`BATCH`] holds and events, until
    /// one came back short).
    pub rounds: u64,
    /// Holds deleted.
    pub holds: u64,
    /// Events deleted.
    pub events: u64,
    /// Rounds that ended on a store error (retried at the next period).
    pub failures: u64,
    /// After the last round that finished: the oldest event the log kept though it is older
    /// than the retention, because a consumer has not acknowledged it (`None`: the log holds
    /// nothing older than the retention).
    pub held_back: Option<EventPosition>,
}

/// The running purger of [`EventTasks`] (or of [`Purger::start`]); dropping it stops it.
#[derive(Debug)]
#[must_use = "dropping a Purger stops it"]
pub struct Purger {
    task: tokio::task::JoinHandle<()>,
    stats: watch::Receiver<PurgeStats>,
}

impl Purger {
    /// Starts deleting `engine`'s history older than `purging.keep`, every `purging.every`
    /// (the first round at once), [`BATCH`] holds and events per store call until a call
    /// comes back short. A failed round is logged, counted and retried at the next period.
    pub fn start<S: EventStore>(engine: BookingEngine<S>, purging: Purging) -> Purger {
        let (report, stats) = watch::channel(PurgeStats::default());
        let mut ticks = tokio::time::interval(purging.every.max(Duration::from_millis(1)));
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let task = tokio::spawn(async move {
            loop {
                ticks.tick().await;
                let round = purge_round(&engine, purging.keep).await;
                report.send_modify(|stats| {
                    stats.rounds += 1;
                    match round {
                        Ok(round) => {
                            stats.holds += round.purged.holds;
                            stats.events += round.purged.events;
                            stats.held_back = round.held_back;
                        }
                        Err(_) => stats.failures += 1,
                    }
                });
            }
        });
        Purger { task, stats }
    }

    /// Counts so far.
    pub fn stats(&self) -> PurgeStats {
        *self.stats.borrow()
    }

    /// Waits until at least `rounds` rounds have finished, and returns the counts then.
    pub async fn wait_for_rounds(&mut self, rounds: u64) -> PurgeStats {
        let reached = self
            .stats
            .wait_for(|stats| stats.rounds >= rounds)
            .await
            .map(|stats| *stats);
        // The task never ends by itself (it is aborted only by dropping `self`).
        reached.unwrap_or_else(|_| self.stats())
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What one purge round did.
struct Round {
    purged: Purged,
    held_back: Option<EventPosition>,
}

/// One round: purges until a call comes back short, then looks whether the oldest event left
/// is older than the retention (a consumer has not acknowledged it), and warns if so.
async fn purge_round<S: EventStore>(
    engine: &BookingEngine<S>,
    keep: Duration,
) -> Result<Round, BookingError> {
    // Every call of the round purges at least what is older than this.
    let before = chrono::Duration::from_std(keep)
        .ok()
        .and_then(|keep| engine.clock().now().checked_sub_signed(keep));
    let mut purged = Purged::default();
    loop {
        let batch = engine.purge(keep, BATCH).await.inspect_err(|error| {
            tracing::warn!(%error, "cannot purge history; retrying at the next period");
        })?;
        purged.holds += batch.holds;
        purged.events += batch.events;
        if batch.holds < u64::from(BATCH) && batch.events < u64::from(BATCH) {
            break;
        }
    }
    if purged != Purged::default() {
        tracing::info!(
            holds = purged.holds,
            events = purged.events,
            "purged history older than the retention"
        );
    }
    let held_back = match before {
        Some(before) => oldest_before(engine, before).await?,
        None => None,
    };
    if let Some(position) = held_back {
        warn_held_back(engine, position).await;
    }
    Ok(Round { purged, held_back })
}

/// The position of the oldest event in the log if it happened before `before`.
async fn oldest_before<S: EventStore>(
    engine: &BookingEngine<S>,
    before: Timestamp,
) -> Result<Option<EventPosition>, BookingError> {
    let oldest = engine.read_events_after(EventPosition::START, 1).await?;
    Ok(oldest
        .first()
        .filter(|event| event.at < before)
        .map(|event| event.position))
}

/// Says that the event at `position`, older than the retention, was kept, and which consumer
/// holds it back as far as the server can tell.
async fn warn_held_back<S: EventStore>(engine: &BookingEngine<S>, position: EventPosition) {
    let own = match ConsumerId::new(CONSUMER) {
        Ok(consumer) => engine
            .store()
            .consumer_position(&consumer)
            .await
            .ok()
            .flatten(),
        Err(_) => None,
    };
    if own.is_some_and(|own| own >= position) {
        tracing::warn!(
            %position,
            "the event log keeps events older than HISTORY_RETENTION_SECONDS: a consumer \
             other than {CONSUMER} is registered in this database and has not acknowledged \
             them; the log grows until it does (remove a consumer no longer used)"
        );
    } else {
        tracing::warn!(
            %position,
            "the event log keeps events older than HISTORY_RETENTION_SECONDS: the server's \
             own consumer {CONSUMER} has not acknowledged them yet"
        );
    }
}

/// Reads `engine`'s events as `consumer` while `holder` holds its lease (taken or renewed
/// before every read), hands each to `handle` in order and acknowledges each batch after
/// handling it (fenced by the lease), telling `acknowledged` the position; waits `poll` when
/// nothing new came, another holder has the lease, or the store failed. Returns, releasing
/// the lease, once `stop` turns true.
pub async fn consume<S: EventStore>(
    engine: BookingEngine<S>,
    consumer: ConsumerId,
    holder: LeaseHolder,
    poll: Duration,
    mut stop: watch::Receiver<bool>,
    acknowledged: watch::Sender<Option<EventPosition>>,
    mut handle: impl FnMut(&Event) + Send,
) {
    while !*stop.borrow() {
        if let Some(batch) = next_batch(&engine, &consumer, &holder).await {
            let last = batch.last().map(|event| event.position);
            for event in &batch {
                handle(event);
            }
            if let Some(last) = last {
                match engine.acknowledge_leased(&consumer, &holder, last).await {
                    Ok(()) => {
                        acknowledged.send_replace(Some(last));
                        continue;
                    }
                    Err(BookingError::LeaseLost { .. }) => {
                        tracing::info!("another server took the event log over");
                    }
                    // The batch comes again: at least once.
                    Err(error) => {
                        tracing::warn!(%error, "cannot acknowledge events; they will be logged again");
                    }
                }
            }
        }
        // Nothing new, not ours, or a failure: wait for the next poll or the stop.
        let _ = tokio::time::timeout(poll, stop.changed()).await;
    }
    if let Err(error) = engine.release_consumer(&consumer, &holder).await {
        tracing::warn!(%error, "cannot release the event log's lease; it lapses by itself");
    }
}

/// The next batch while `holder` holds the lease: `None` when another holder has it or the
/// store failed (logged).
async fn next_batch<S: EventStore>(
    engine: &BookingEngine<S>,
    consumer: &ConsumerId,
    holder: &LeaseHolder,
) -> Option<Vec<Event>> {
    match engine.lease_consumer(consumer, holder, LEASE).await {
        Ok(true) => {}
        Ok(false) => return None,
        Err(error) => {
            tracing::warn!(%error, "cannot take the event log's lease; retrying");
            return None;
        }
    }
    match engine.read_events(consumer, BATCH).await {
        Ok(batch) => Some(batch),
        Err(error) => {
            tracing::warn!(%error, "cannot read events; retrying");
            None
        }
    }
}

/// Logs one event as a line (target `slot_booking_server::events`).
pub fn log(event: &Event) {
    tracing::info!(
        target: "slot_booking_server::events",
        position = %event.position,
        kind = %event.kind,
        slot_id = %event.slot_id,
        hold_id = event.hold_id.map(|id| id.get()),
        owner = event.owner.as_ref().map(|owner| owner.as_str()),
        quantity = event.quantity,
        at = %event.at.to_rfc3339(),
        "event"
    );
}

/// The running consumer, reclaimer and purger (if any); dropping it stops them (without
/// releasing the lease, which then lapses): call [`stop`](Self::stop) to hand the log over at
/// once.
#[derive(Debug)]
#[must_use = "dropping EventTasks stops the event log, the reclaimer and the purger"]
pub struct EventTasks {
    consumer: tokio::task::JoinHandle<()>,
    stop: watch::Sender<bool>,
    acknowledged: watch::Receiver<Option<EventPosition>>,
    reclaimer: Reclaimer,
    purger: Option<Purger>,
}

impl EventTasks {
    /// Starts logging `engine`'s events with `handle` (under a lease of its own, see the
    /// module docs), reclaiming its expired holds and, with `purging`, deleting its history
    /// older than `purging.keep`.
    pub fn start<S: EventStore>(
        engine: BookingEngine<S>,
        purging: Option<Purging>,
        handle: impl FnMut(&Event) + Send + 'static,
    ) -> Result<EventTasks, BookingError> {
        let reclaimer = engine.reclaim_expired_every(RECLAIM_PERIOD, BATCH)?;
        let purger = purging.map(|purging| Purger::start(engine.clone(), purging));
        // A constant: never fails (a unit test checks it).
        let consumer = ConsumerId::new(CONSUMER).expect("CONSUMER is a valid consumer id");
        let (stop, stopped) = watch::channel(false);
        let (report, acknowledged) = watch::channel(None);
        let holder = LeaseHolder::unique();
        let consumer = tokio::spawn(consume(
            engine,
            consumer,
            holder,
            POLL_PERIOD,
            stopped,
            report,
            handle,
        ));
        Ok(EventTasks {
            consumer,
            stop,
            acknowledged,
            reclaimer,
            purger,
        })
    }

    /// What the reclaimer has done so far.
    pub fn reclaims(&self) -> ReclaimStats {
        self.reclaimer.stats()
    }

    /// The purger, when history is purged.
    pub fn purger(&mut self) -> Option<&mut Purger> {
        self.purger.as_mut()
    }

    /// The position this process's consumer last acknowledged (`None` before its first
    /// acknowledgement), changing as it acknowledges.
    pub fn acknowledged(&self) -> watch::Receiver<Option<EventPosition>> {
        self.acknowledged.clone()
    }

    /// Stops the consumer after the batch in hand (releasing its lease, so another server
    /// takes the log over at once; given up after [`STOP_WAIT`]) and the reclaimer, logging
    /// the reclaimer's counts.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(STOP_WAIT, &mut self.consumer)
            .await
            .is_err()
        {
            self.consumer.abort();
        }
        if let Some(purger) = self.purger.take() {
            let PurgeStats {
                rounds,
                holds,
                events,
                failures,
                ..
            } = purger.stats();
            tracing::info!(rounds, holds, events, failures, "purger stopped");
        }
        let ReclaimStats {
            rounds,
            reclaimed,
            failures,
        } = self.reclaims();
        tracing::info!(rounds, reclaimed, failures, "event log stopped");
    }
}

/// How long [`EventTasks::stop`] waits for the consumer to release its lease.
pub const STOP_WAIT: Duration = Duration::from_secs(2);

impl Drop for EventTasks {
    fn drop(&mut self) {
        self.consumer.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_is_purged_every_retention_at_most_every_hour() {
        let week = Duration::from_secs(7 * 24 * 3600);
        assert_eq!(Purging::keeping(week).every, PURGE_PERIOD);
        let minute = Duration::from_secs(60);
        assert_eq!(
            Purging::keeping(minute),
            Purging {
                keep: minute,
                every: minute
            }
        );
        assert_eq!(
            Purging::keeping(Duration::from_millis(10)).every,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn the_consumer_name_is_a_valid_consumer_id() {
        assert!(ConsumerId::new(CONSUMER).is_ok());
    }
}
