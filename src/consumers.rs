//! Event consumers shared by several instances: one reader at a time, and acknowledgements
//! that commit with the application's own writes.
//!
//! A consumer name read by several instances hands every event to each of them. Two tools make
//! "every event handled once" hold across instances:
//!
//! - **A lease.** [`BookingEngine::lease_consumer`] gives the consumer to one
//!   [`LeaseHolder`] for a time (taken when free or lapsed, extended by its holder); the other
//!   instances get `false` and wait. An instance that stops passes the lease on when it lapses,
//!   or at once with [`BookingEngine::release_consumer`].
//! - **A fenced acknowledgement.** [`BookingEngine::acknowledge_leased`] moves the cursor only
//!   while the caller still holds the lease, decided in the same atomic step as the move, and
//!   [`EngineTransaction::acknowledge_leased`](crate::EngineTransaction::acknowledge_leased) does so inside the caller's transaction: the effect of the
//!   handled events (a row "email sent", a payment released) commits with the
//!   acknowledgement, or neither does. A holder whose lease was taken over gets
//!   [`BookingError::LeaseLost`] and rolls its transaction back; the new holder reads the same
//!   events again from the cursor and handles them.
//!
//! ```
//! # use std::time::Duration;
//! # use slot_booking::{BookingEngine, ConsumerId, LeaseHolder, MemoryStore};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = BookingEngine::new(MemoryStore::new());
//! let mailer = ConsumerId::new("mailer")?;
//! let me = LeaseHolder::unique();
//! if engine.lease_consumer(&mailer, &me, Duration::from_secs(30)).await? {
//!     let batch = engine.read_events(&mailer, 100).await?;
//!     // ... handle the batch, well within the lease ...
//!     if let Some(last) = batch.last() {
//!         engine.acknowledge_leased(&mailer, &me, last.position).await?;
//!     }
//! }
//! engine.release_consumer(&mailer, &me).await?; // on shutdown
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::engine::{detached, guarded, BookingEngine};
use crate::error::BookingError;
use crate::events::{EventPosition, EventStore};
use crate::model::{ConsumerId, LeaseHolder, Timestamp};
use crate::observe::{Op, Operation};
use crate::store::HoldStore;
use crate::transaction::{TransactionWrites, Within};

/// The longest lease [`BookingEngine::lease_consumer`] grants: a day.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// The instant a lease of `lease` taken at `now` ends: 1 ms to [`MAX_LEASE`].
fn lease_end(now: Timestamp, lease: Duration) -> Result<Timestamp, BookingError> {
    let invalid = || BookingError::InvalidLifetime {
        requested: lease,
        min: Duration::from_millis(1),
        max: MAX_LEASE,
    };
    if lease < Duration::from_millis(1) || lease > MAX_LEASE {
        return Err(invalid());
    }
    chrono::Duration::from_std(lease)
        .ok()
        .and_then(|lease| now.checked_add_signed(lease))
        .ok_or_else(invalid)
}

impl<S: EventStore> BookingEngine<S> {
    /// Takes or extends `consumer`'s lease for `holder` for `lease` (1 ms to a day) from the
    /// engine's clock: `true` when `holder` now holds it, `false` while another holder's lease
    /// lasts. Call it before each read and keep each batch's handling well within `lease`.
    pub async fn lease_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        lease: Duration,
    ) -> Result<bool, BookingError> {
        let op = Op::new(Operation::LeaseConsumer);
        op.run(async {
            let now = self.clock().now();
            let until = lease_end(now, lease)?;
            let store = self.store_handle();
            let (consumer, holder) = (consumer.clone(), holder.clone());
            let write =
                detached(async move { store.lease_consumer(&consumer, &holder, now, until).await });
            Ok(op.store(write).await?)
        })
        .await
    }

    /// Ends `holder`'s lease of `consumer` (when it still holds it), so another instance
    /// takes the consumer over at once instead of when the lease lapses.
    pub async fn release_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
    ) -> Result<(), BookingError> {
        let op = Op::new(Operation::ReleaseConsumer);
        op.run(async {
            let store = self.store_handle();
            let (consumer, holder) = (consumer.clone(), holder.clone());
            let write = detached(async move { store.release_consumer(&consumer, &holder).await });
            Ok(op.store(write).await?)
        })
        .await
    }

    /// As [`acknowledge_events`](Self::acknowledge_events), only while `holder` holds
    /// `consumer`'s lease: [`BookingError::LeaseLost`] (and nothing moved) once another holder
    /// took it over.
    pub async fn acknowledge_leased(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<(), BookingError> {
        let op = Op::new(Operation::AcknowledgeEvents);
        op.run(async {
            let store = self.store_handle();
            let (owned, holder) = (consumer.clone(), holder.clone());
            let write =
                detached(async move { store.acknowledge_leased(&owned, &holder, through).await });
            acknowledged(op.store(write).await?, consumer)
        })
        .await
    }
}

fn acknowledged(moved: bool, consumer: &ConsumerId) -> Result<(), BookingError> {
    if moved {
        Ok(())
    } else {
        Err(BookingError::LeaseLost {
            consumer: consumer.clone(),
        })
    }
}

impl<S: HoldStore, W: TransactionWrites> Within<'_, S, W> {
    /// As [`BookingEngine::acknowledge_events`], in the caller's transaction: the cursor moves
    /// when, and only if, the transaction commits.
    pub async fn acknowledge_events(
        &mut self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), BookingError> {
        self.acknowledge(consumer, None, through).await
    }

    /// As [`BookingEngine::acknowledge_leased`], in the caller's transaction: commit it only
    /// when this answers `Ok`; on [`BookingError::LeaseLost`] roll it back, and with it what
    /// the transaction recorded for the events.
    pub async fn acknowledge_leased(
        &mut self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<(), BookingError> {
        self.acknowledge(consumer, Some(holder), through).await
    }

    async fn acknowledge(
        &mut self,
        consumer: &ConsumerId,
        holder: Option<&LeaseHolder>,
        through: EventPosition,
    ) -> Result<(), BookingError> {
        let op = Op::new(Operation::AcknowledgeEvents).in_transaction();
        op.run(async {
            let writes = self.writes();
            let moved = op
                .store(guarded(writes.acknowledge(consumer, holder, through)))
                .await?;
            acknowledged(moved, consumer)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_holders_differ_and_are_valid() {
        let (a, b) = (LeaseHolder::unique(), LeaseHolder::unique());
        assert_ne!(a, b);
        assert!(LeaseHolder::new(a.as_str()).is_ok());
        assert!(a.as_str().starts_with("holder-"));
    }

    #[test]
    fn leases_are_bounded() {
        let now = chrono::Utc::now();
        assert!(lease_end(now, Duration::ZERO).is_err());
        assert!(lease_end(now, Duration::from_micros(999)).is_err());
        assert!(lease_end(now, MAX_LEASE + Duration::from_secs(1)).is_err());
        assert_eq!(
            lease_end(now, Duration::from_secs(30)).ok(),
            Some(now + chrono::Duration::seconds(30))
        );
    }
}
