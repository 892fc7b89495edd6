//! The server's event consumer and reclaimer. Every change committed to the database — through
//! this server, another one, or a caller's own transaction — is logged once it commits, from
//! the database's event log: at least once, resuming after a restart where the previous run
//! acknowledged (the cursor is stored in the database under [`CONSUMER`]). Expired holds are
//! swept every [`RECLAIM_PERIOD`], so their `hold_expired` events come soon after the expiry.
//!
//! Each process consumes under the same name, through its lease: of several servers on one
//! database one logs at a time (the holder of the lease, renewed before every read), and
//! another takes over when it stops (it releases the lease) or dies (its lease lapses after
//! [`LEASE`]). An event is logged again only when a holder died between logging a batch and
//! acknowledging it. An application would give each consumer (mailer, payments, analytics)
//! its own name.

use std::time::Duration;

use slot_booking::events::{Event, EventStore};
use slot_booking::reclaimer::{ReclaimStats, Reclaimer};
use slot_booking::{BookingEngine, BookingError, ConsumerId, LeaseHolder};
use tokio::sync::watch;

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

/// Reads `engine`'s events as `consumer` while `holder` holds its lease (taken or renewed
/// before every read), hands each to `handle` in order and acknowledges each batch after
/// handling it (fenced by the lease); waits `poll` when nothing new came, another holder has
/// the lease, or the store failed. Returns, releasing the lease, once `stop` turns true.
pub async fn consume<S: EventStore>(
    engine: BookingEngine<S>,
    consumer: ConsumerId,
    holder: LeaseHolder,
    poll: Duration,
    mut stop: watch::Receiver<bool>,
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
                    Ok(()) => continue,
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

/// The running consumer and reclaimer; dropping it stops both (without releasing the lease,
/// which then lapses): call [`stop`](Self::stop) to hand the log over at once.
#[derive(Debug)]
#[must_use = "dropping EventTasks stops the event log and the reclaimer"]
pub struct EventTasks {
    consumer: tokio::task::JoinHandle<()>,
    stop: watch::Sender<bool>,
    reclaimer: Reclaimer,
}

impl EventTasks {
    /// Starts logging `engine`'s events with `handle` (under a lease of its own, see the
    /// module docs) and reclaiming its expired holds.
    pub fn start<S: EventStore>(
        engine: BookingEngine<S>,
        handle: impl FnMut(&Event) + Send + 'static,
    ) -> Result<EventTasks, BookingError> {
        let reclaimer = engine.reclaim_expired_every(RECLAIM_PERIOD, BATCH)?;
        // A constant: never fails (a unit test checks it).
        let consumer = ConsumerId::new(CONSUMER).expect("CONSUMER is a valid consumer id");
        let (stop, stopped) = watch::channel(false);
        let holder = LeaseHolder::unique();
        let consumer = tokio::spawn(consume(
            engine,
            consumer,
            holder,
            POLL_PERIOD,
            stopped,
            handle,
        ));
        Ok(EventTasks {
            consumer,
            stop,
            reclaimer,
        })
    }

    /// What the reclaimer has done so far.
    pub fn reclaims(&self) -> ReclaimStats {
        self.reclaimer.stats()
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
