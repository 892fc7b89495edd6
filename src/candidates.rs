//! "Any one of these" holds on the engine: a hold that names several candidate slots (the same
//! hour in other rooms, with other practitioners) and takes the first that fits, in the order
//! a [`Strategy`] picks.
//!
//! ```
//! use std::time::Duration;
//! use slot_booking::candidates::NewAnyHold;
//! use slot_booking::{BookingEngine, MemoryStore, NewSlot, Strategy};
//!
//! # tokio_test::block_on(async {
//! let engine = BookingEngine::new(MemoryStore::new());
//! let nine = chrono::Utc::now() + chrono::Duration::days(1);
//! let mut rooms = Vec::new();
//! for _ in 0..3 {
//!     let room = engine.create_slot(NewSlot::new(nine, nine + chrono::Duration::hours(1), 1)).await?;
//!     rooms.push(room.slot_id);
//! }
//! // Three customers ask for "any room at nine", spread round robin.
//! let mut taken = Vec::new();
//! for customer in ["a", "b", "c"] {
//!     let placed = engine
//!         .hold_any(NewAnyHold::new(rooms.clone(), customer).strategy(Strategy::RoundRobin))
//!         .await?;
//!     taken.push(placed.hold.slot_id);
//! }
//! taken.sort();
//! assert_eq!(taken, rooms);
//! // A fourth finds every room taken: each candidate is named with its reason.
//! let refused = engine.hold_any(NewAnyHold::new(rooms.clone(), "d")).await.unwrap_err();
//! assert_eq!(refused.code(), "no_candidate_available");
//! // The same key again is the same hold, whichever room it took.
//! let again = engine.hold_any(NewAnyHold::new(rooms.clone(), "b")).await?;
//! assert!(again.replayed);
//! # Ok::<(), slot_booking::BookingError>(())
//! # }).unwrap();
//! ```

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::answers::any_hold_placed;
use crate::engine::{detached, BookingEngine, HoldPlaced, NewHold};
use crate::error::BookingError;
use crate::model::{check_candidates, AvailabilityQuery, OwnerId, SlotId, Strategy};
use crate::observe::{Op, Operation};
use crate::store::{AnyHoldOutcome, AnyHoldRequest, Decided, HoldStore};

/// A hold on any one of several slots, as a client asks for it: built with
/// [`NewAnyHold::new`] and refined like [`NewHold`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAnyHold {
    /// The candidate slots, 1 to [`MAX_CANDIDATES`](crate::model::MAX_CANDIDATES), each at
    /// most once, in order of preference.
    pub candidates: Vec<SlotId>,
    /// The order to try them in (default: as listed).
    pub strategy: Strategy,
    /// The idempotency key, as for any hold.
    pub key: String,
    /// Units to take of the one slot taken, all or none (default 1).
    pub quantity: i32,
    /// Who the hold belongs to (default: nobody).
    pub owner: Option<OwnerId>,
    /// How long the hold lasts (default: the engine's hold lifetime).
    pub lifetime: Option<Duration>,
}

impl NewAnyHold {
    /// One unit of any one of `candidates`, tried in the listed order, anonymous, for the
    /// engine's hold lifetime.
    pub fn new(candidates: Vec<SlotId>, key: impl Into<String>) -> Self {
        NewAnyHold {
            candidates,
            strategy: Strategy::Listed,
            key: key.into(),
            quantity: 1,
            owner: None,
            lifetime: None,
        }
    }

    /// Tries the candidates in the order `strategy` picks.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Takes `quantity` units of the one slot taken.
    pub fn quantity(mut self, quantity: i32) -> Self {
        self.quantity = quantity;
        self
    }

    /// Makes the hold `owner`'s.
    pub fn owner(mut self, owner: OwnerId) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Asks for a lifetime of its own.
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = Some(lifetime);
        self
    }
}

impl<S: HoldStore> BookingEngine<S> {
    /// Places a hold on any one of `request.candidates`: the first, in the order of
    /// `request.strategy`, that has the units free (each candidate decided by its own
    /// conditional decrement, so no unit is ever taken twice). The hold is an ordinary hold
    /// of the slot taken: confirm, cancel and renew it as any other.
    ///
    /// Idempotent by key: the same key with the same candidates (in any order, any strategy),
    /// quantity and owner returns the same hold, on the slot the first call took, with
    /// `replayed: true`. When no candidate can be had, `no_candidate_available` names each
    /// with its reason; nothing was taken.
    pub async fn hold_any(&self, request: NewAnyHold) -> Result<HoldPlaced, BookingError> {
        let op = Op::new(Operation::HoldAny);
        op.run(async {
            check_candidates(&request.candidates)?;
            let prepared = self.prepare_hold(NewHold {
                slot_id: request.candidates[0],
                key: request.key,
                quantity: request.quantity,
                owner: request.owner,
                lifetime: request.lifetime,
            })?;
            let order = self
                .candidate_order(request.candidates, request.strategy)
                .await?;
            let first = order[0];
            let inner = Arc::clone(&self.inner);
            let outcome = op
                .store(detached(async move {
                    let request = AnyHoldRequest {
                        candidates: &order,
                        key: &prepared.key,
                        owner: prepared.owner.as_ref(),
                        quantity: prepared.quantity,
                        now: prepared.now,
                        expires_at: prepared.expires_at,
                    };
                    let outcome = inner.store.create_hold_any(request).await;
                    if let Ok(Decided {
                        outcome: AnyHoldOutcome::Created(hold),
                        ..
                    }) = &outcome
                    {
                        inner.show_taken(&[(hold.slot_id, hold.quantity)]);
                    }
                    outcome
                }))
                .await?;
            any_hold_placed(&op, outcome, first)
        })
        .await
    }

    /// The candidates in the order `strategy` tries them.
    async fn candidate_order(
        &self,
        mut candidates: Vec<SlotId>,
        strategy: Strategy,
    ) -> Result<Vec<SlotId>, BookingError> {
        match strategy {
            Strategy::Listed => {}
            Strategy::RoundRobin => {
                let turn = self.inner.turn.fetch_add(1, Ordering::Relaxed);
                let start = turn % candidates.len();
                candidates.rotate_left(start);
            }
            Strategy::LeastBooked => {
                let listing = self.availability(AvailabilityQuery::all()).await?;
                let mut taken: Vec<(SlotId, i64)> =
                    candidates.iter().map(|&id| (id, i64::MAX)).collect();
                for entry in listing.entries() {
                    if let Some(candidate) = taken.iter_mut().find(|(id, _)| *id == entry.slot_id) {
                        candidate.1 = i64::from(entry.capacity) - i64::from(entry.remaining);
                    }
                }
                // A stable sort: ties keep the listed order.
                taken.sort_by_key(|&(_, units)| units);
                candidates = taken.into_iter().map(|(id, _)| id).collect();
            }
        }
        Ok(candidates)
    }
}
