//! What every store's tests share: the capacity invariant, stated once, and a store that owns
//! the temporary resource (a database file, a schema) it lives in.

use crate::engine::{BookingEngine, NewHold};
use crate::events::EventStore;
use crate::model::{AvailabilityQuery, Hold, HoldId, HoldStatus, OwnerId, Slot, SlotId, Timestamp};
use crate::scope::Scope;
use crate::store::{HoldQueries, HoldStore, SlotAdmin, Store, StoreError};
use crate::transaction::TransactionalStore;

/// A slot's units, counted one way or another (from its holds through the [`Store`], or with
/// SQL straight from the tables), to check the capacity invariant on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotTally {
    /// The slot's capacity.
    pub capacity: i64,
    /// Its stored `remaining`.
    pub remaining: i64,
    /// Units of holds stored as held (active or expired but not reclaimed), quantities summed.
    pub held: i64,
    /// Units of confirmed holds.
    pub confirmed: i64,
    /// Units of holds still active at the time of the count; `None` when not counted.
    pub active: Option<i64>,
}

impl SlotTally {
    /// Tallies `holds` (all of one slot, as stored) against `slot`, resolving activity at
    /// `now`. Every count is in units: a hold counts its `quantity`.
    pub fn of(slot: &Slot, holds: &[Hold], now: Timestamp) -> SlotTally {
        let units = |keep: &dyn Fn(&Hold) -> bool| -> i64 {
            holds
                .iter()
                .filter(|h| keep(h))
                .map(|h| i64::from(h.quantity))
                .sum()
        };
        SlotTally {
            capacity: i64::from(slot.capacity),
            remaining: i64::from(slot.stored_remaining),
            held: units(&|h| h.status == HoldStatus::Held),
            confirmed: units(&|h| h.status == HoldStatus::Confirmed),
            active: Some(units(&|h| h.is_active_at(now))),
        }
    }

    /// The invariant: `remaining + held + confirmed == capacity`, `0 <= remaining <=
    /// capacity`, and confirmed plus active units never exceed the capacity (no oversell).
    pub fn check(&self) -> Result<(), String> {
        let SlotTally {
            capacity,
            remaining,
            held,
            confirmed,
            active,
        } = *self;
        if remaining < 0 || remaining > capacity {
            return Err(format!("remaining {remaining} outside 0..={capacity}"));
        }
        if remaining + held + confirmed != capacity {
            return Err(format!(
                "remaining {remaining} + held {held} + confirmed {confirmed} != capacity {capacity}"
            ));
        }
        if let Some(active) = active {
            if confirmed + active > capacity {
                return Err(format!(
                    "oversold: confirmed {confirmed} + active {active} > capacity {capacity}"
                ));
            }
        }
        Ok(())
    }

    /// [`check`](SlotTally::check), panicking with the broken part.
    ///
    /// # Panics
    ///
    /// When the invariant does not hold: this is a test helper.
    #[track_caller]
    pub fn assert(&self) {
        if let Err(broken) = self.check() {
            panic!("capacity invariant broken: {broken}");
        }
    }
}

/// Checks, through an engine whose clock reads `now`, a store whose migrations have just
/// upgraded a database of the previous release holding slot 1 (capacity 5) with hold 1, an
/// active anonymous one-unit hold keyed `held-key`, and one expired but unreclaimed unit:
/// hold 1 reads as an anonymous single unit, its key replays it, the expired unit counts as
/// free (3 available), and an owned 3-unit hold then takes them all, reclaiming the expired
/// one.
///
/// # Panics
///
/// When any of that does not hold: this is a test helper.
pub async fn check_previous_release_sells_on<S: Store>(store: S, now: Timestamp) {
    let engine = BookingEngine::builder(store)
        .clock(crate::ManualClock::new(now))
        .cache_period(std::time::Duration::ZERO)
        .build();
    let old = engine
        .get_hold(&Scope::Anonymous, HoldId(1))
        .await
        .expect("hold 1 reads");
    assert_eq!((old.quantity, old.owner.clone()), (1, None));
    let replay = engine.hold(SlotId(1), "held-key").await.expect("a replay");
    assert!(replay.replayed);
    assert_eq!(replay.hold, old);
    let listing = engine
        .availability(AvailabilityQuery::all())
        .await
        .expect("availability");
    assert_eq!(listing[0].remaining, 3);
    let owner = OwnerId::new("cart-1").expect("a valid owner");
    let placed = engine
        .place_hold(
            NewHold::new(SlotId(1), "three")
                .quantity(3)
                .owner(owner.clone()),
        )
        .await
        .expect("the three free units");
    assert_eq!((placed.hold.quantity, placed.hold.owner), (3, Some(owner)));
}

/// A store together with what must outlive it and go away after it: a temporary database
/// file, a schema dropped on drop. Fields drop in order, the store (and its pool) first.
/// Forwards every call of each store trait `S` has to the store.
#[derive(Debug)]
pub struct Owned<S, G> {
    /// The store.
    pub store: S,
    /// Dropped after the store.
    pub guard: G,
}

crate::forward_store!(impl[S: HoldStore, G: Send + Sync + 'static] HoldStore for Owned<S, G>, |this| &this.store);
crate::forward_store!(impl[S: crate::store::BookingStore, G: Send + Sync + 'static] BookingStore for Owned<S, G>, |this| &this.store);
crate::forward_store!(impl[S: crate::store::PoolStore, G: Send + Sync + 'static] PoolStore for Owned<S, G>, |this| &this.store);
crate::forward_store!(impl[S: crate::store::WaitlistStore, G: Send + Sync + 'static] WaitlistStore for Owned<S, G>, |this| &this.store);
crate::forward_store!(impl[S: SlotAdmin, G: Send + Sync + 'static] SlotAdmin for Owned<S, G>, |this| &this.store);
crate::forward_store!(impl[S: HoldQueries, G: Send + Sync + 'static] HoldQueries for Owned<S, G>, |this| &this.store);
crate::forward_store!(impl[S: crate::Store + EventStore, G: Send + Sync + 'static] EventStore for Owned<S, G>, |this| &this.store);

#[async_trait::async_trait]
impl<S: crate::Store + TransactionalStore, G: Send + Sync + 'static> TransactionalStore
    for Owned<S, G>
{
    type Transaction = S::Transaction;
    type Writes<'t>
        = S::Writes<'t>
    where
        Self: 't;

    async fn begin(&self) -> Result<Self::Transaction, StoreError> {
        self.store.begin().await
    }

    fn writes<'t>(&'t self, transaction: &'t mut Self::Transaction) -> Self::Writes<'t> {
        self.store.writes(transaction)
    }

    async fn commit(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        self.store.commit(transaction).await
    }

    async fn rollback(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        self.store.rollback(transaction).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(capacity: i64, remaining: i64, held: i64, confirmed: i64, active: i64) -> SlotTally {
        SlotTally {
            capacity,
            remaining,
            held,
            confirmed,
            active: Some(active),
        }
    }

    #[test]
    fn the_invariant_names_what_broke() {
        assert_eq!(tally(5, 1, 2, 2, 2).check(), Ok(()));
        assert!(tally(5, -1, 4, 2, 4)
            .check()
            .unwrap_err()
            .contains("outside"));
        assert!(tally(5, 6, 0, 0, 0)
            .check()
            .unwrap_err()
            .contains("outside"));
        assert!(tally(5, 1, 1, 2, 1)
            .check()
            .unwrap_err()
            .contains("!= capacity"));
        assert!(tally(5, 0, 3, 2, 4)
            .check()
            .unwrap_err()
            .contains("oversold"));
    }
}
