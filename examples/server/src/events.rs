//! The server's event consumer and sweeper. Every change committed to the database — through
//! this server, another one, or a caller's own transaction — is logged once it commits, from
//! the database's event log: at least once, resuming after a restart where the previous run
//! acknowledged (the cursor is stored in the database under [`CONSUMER`]). Expired holds are
//! swept every [`SWEEP_PERIOD`], so their `hold_expired` events come soon after the expiry.
//!
//! Each process consumes under the same name: several servers on one database share one
//! cursor, and an event may be logged by more than one of them (at least once, never lost).
//! An application would give each consumer (mailer, payments, analytics) its own name.

use std::time::Duration;

use slot_booking::events::{Event, EventStore};
use slot_booking::sweeper::{SweepStats, Sweeper};
use slot_booking::{BookingEngine, BookingError, ConsumerId};

/// The name the server's log consumer keeps its cursor under.
pub const CONSUMER: &str = "server-log";

/// How long the consumer waits when it found no new event (or the database failed).
pub const POLL_PERIOD: Duration = Duration::from_millis(500);

/// How often expired holds are swept.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(5);

/// Events read, and expired holds reclaimed, per store call.
pub const BATCH: u32 = 500;

/// Reads `engine`'s events as `consumer`, hands each to `handle` in order and acknowledges
/// each batch after handling it; waits `poll` when nothing new came or the store failed.
/// Runs until the future is dropped.
pub async fn consume<S: EventStore>(
    engine: BookingEngine<S>,
    consumer: ConsumerId,
    poll: Duration,
    mut handle: impl FnMut(&Event) + Send,
) {
    loop {
        let batch = match engine.read_events(&consumer, BATCH).await {
            Ok(batch) => batch,
            Err(error) => {
                tracing::warn!(%error, "cannot read events; retrying");
                tokio::time::sleep(poll).await;
                continue;
            }
        };
        let Some(last) = batch.last().map(|event| event.position) else {
            tokio::time::sleep(poll).await;
            continue;
        };
        for event in &batch {
            handle(event);
        }
        if let Err(error) = engine.acknowledge_events(&consumer, last).await {
            // The batch comes again: at least once.
            tracing::warn!(%error, "cannot acknowledge events; they will be logged again");
            tokio::time::sleep(poll).await;
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

/// The running consumer and sweeper; dropping it stops both.
#[derive(Debug)]
pub struct EventTasks {
    consumer: tokio::task::JoinHandle<()>,
    sweeper: Sweeper,
}

impl EventTasks {
    /// Starts logging `engine`'s events with `handle` and sweeping its expired holds.
    pub fn start<S: EventStore>(
        engine: BookingEngine<S>,
        handle: impl FnMut(&Event) + Send + 'static,
    ) -> Result<EventTasks, BookingError> {
        let sweeper = engine.sweep_expired(SWEEP_PERIOD, BATCH)?;
        // A constant: never fails (a unit test checks it).
        let consumer = ConsumerId::new(CONSUMER).expect("CONSUMER is a valid consumer id");
        let consumer = tokio::spawn(consume(engine, consumer, POLL_PERIOD, handle));
        Ok(EventTasks { consumer, sweeper })
    }

    /// What the sweeper has done so far.
    pub fn sweeps(&self) -> SweepStats {
        self.sweeper.stats()
    }

    /// Stops the consumer and waits for it to end (the sweeper stops with it: a reclaim in
    /// flight finishes on its own task), logging the sweeper's counts.
    pub async fn stop(mut self) {
        self.consumer.abort();
        let _ = (&mut self.consumer).await;
        let SweepStats {
            sweeps,
            reclaimed,
            failures,
        } = self.sweeps();
        tracing::info!(sweeps, reclaimed, failures, "event log stopped");
    }
}

impl Drop for EventTasks {
    fn drop(&mut self) {
        self.consumer.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consumer_name_is_valid() {
        assert!(ConsumerId::new(CONSUMER).is_ok());
    }
}
