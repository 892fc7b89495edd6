//! Waitlists on the engine: a request for units that are short waits in the slot's line and
//! is offered them (a hold of its owner, for its offer window) in the same atomic step that
//! frees them: a cancel, an expiry reclaim, a capacity raise, another entry leaving. Lines are
//! served by priority, then arrival, in strict order: the head waits until its whole quantity
//! is free, nobody behind it is served first, and no newcomer's hold takes units while anyone
//! waits (availability lists such a slot with 0 units).
//!
//! ```
//! use chrono::{Duration, Utc};
//! use slot_booking::waitlists::Joined;
//! use slot_booking::{BookingEngine, MemoryStore, NewHold, NewSlot, Scope};
//!
//! # tokio_test::block_on(async {
//! let engine = BookingEngine::new(MemoryStore::new());
//! let start = Utc::now() + Duration::days(1);
//! let class = engine.create_slot(NewSlot::new(start, start + Duration::hours(1), 1)).await?;
//! let seat = engine.hold(class.slot_id, "first").await?.hold;
//! // The class is full: the next customer waits in line.
//! let Joined::Waiting { entry, position, .. } =
//!     engine.join_waitlist(NewHold::new(class.slot_id, "second"), 0).await?
//! else { unreachable!() };
//! assert_eq!(position, 1);
//! // A cancel offers the seat to the head of the line in the same step.
//! engine.cancel(&Scope::Anonymous, seat.hold_id).await?;
//! let offer = engine.get_hold(&Scope::Anonymous, entry.offer_id()).await?;
//! assert_eq!(offer.slot_id, class.slot_id);
//! engine.confirm(&Scope::Anonymous, offer.hold_id).await?;
//! # Ok::<(), slot_booking::BookingError>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;

use crate::engine::{detached, guarded, BookingEngine, NewHold};
use crate::error::BookingError;
use crate::model::{EntryId, Hold, WaitlistEntry};
use crate::observe::{Op, Operation};
use crate::scope::Scope;
use crate::store::{Decided, JoinOutcome, JoinRequest, WaitlistStore};

/// What [`BookingEngine::join_waitlist`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joined {
    /// Nobody waited and the units were free: held at once, as a hold would have been.
    Held {
        /// The hold, its status resolved at the time of the call.
        hold: Hold,
        /// Whether an earlier call with this key placed it (or it was offered since).
        replayed: bool,
    },
    /// Waiting in line.
    Waiting {
        /// The entry.
        entry: WaitlistEntry,
        /// Its place in line: 1 is the head.
        position: u32,
        /// Whether an earlier call with this key made it.
        replayed: bool,
    },
}

impl WaitlistEntry {
    /// The id the hold offered to this entry will have.
    pub fn offer_id(&self) -> crate::model::HoldId {
        crate::model::HoldId(self.entry_id.0)
    }
}

impl<S: WaitlistStore> BookingEngine<S> {
    /// Holds `request`'s units if nobody waits for the slot and they are free, or else joins
    /// the slot's line with `priority` (higher is served first; equal priorities by arrival).
    /// When the units free up the entry is offered them: a hold with the entry's number
    /// ([`WaitlistEntry::offer_id`]), owned by the request's owner, lasting the request's
    /// lifetime from the moment it is offered (the offer window); confirm it as any hold. An
    /// offer not confirmed in time expires, and its units go to the next in line.
    ///
    /// Idempotent by key: the same request again answers its entry (with its place now) or,
    /// once offered, its hold, with `replayed`. Refused as a hold would be when the slot is
    /// not selling or the quantity exceeds its capacity or one of its pools' capacities.
    ///
    /// A slot in pools has a line too: its entries also wait in line for each pool (with the
    /// entries of the pool's other selling slots), and are offered only as the head of every
    /// line they are in.
    pub async fn join_waitlist(
        &self,
        request: NewHold,
        priority: i32,
    ) -> Result<Joined, BookingError> {
        let op = Op::new(Operation::JoinWaitlist).slot(request.slot_id);
        op.run(async {
            let prepared = self.prepare_hold(request)?;
            let (slot_id, quantity) = (prepared.slot_id, prepared.quantity);
            let inner = Arc::clone(&self.inner);
            let decided = op
                .store(detached(async move {
                    let request = JoinRequest {
                        hold: prepared.request(),
                        priority,
                    };
                    let joined = inner.store.join_waitlist(request).await;
                    if let Ok(Decided {
                        outcome: JoinOutcome::Held { .. } | JoinOutcome::Waiting { .. },
                        ..
                    }) = &joined
                    {
                        // A hold took units, or a waiting line now shows the slot empty.
                        inner.cache.invalidate();
                    }
                    joined
                }))
                .await?;
            let at = decided.at;
            match decided.outcome {
                JoinOutcome::Held { hold, replayed } => {
                    op.record_hold(hold.hold_id);
                    op.record_replayed(replayed);
                    Ok(Joined::Held {
                        hold: hold.at(at),
                        replayed,
                    })
                }
                JoinOutcome::Waiting {
                    entry,
                    position,
                    replayed,
                } => {
                    op.record_replayed(replayed);
                    Ok(Joined::Waiting {
                        entry,
                        position,
                        replayed,
                    })
                }
                JoinOutcome::Refused(refused) => {
                    match crate::answers::hold_refused(refused, slot_id, quantity) {
                        Some(error) => Err(error),
                        None => Err(BookingError::Store(crate::store::StoreError::failed(
                            "the store refused a waitlist entry with an answer that is no refusal",
                        ))),
                    }
                }
            }
        })
        .await
    }

    /// Leaves the line: the entry in `scope` that still waits is removed, its key freed, and
    /// the line served again (leaving the head may let the next be offered its units).
    /// `entry_not_found` when no entry with this id waits in `scope`.
    pub async fn leave_waitlist(
        &self,
        scope: &Scope,
        entry_id: EntryId,
    ) -> Result<WaitlistEntry, BookingError> {
        let op = Op::new(Operation::LeaveWaitlist);
        op.run(async {
            let inner = Arc::clone(&self.inner);
            let scope = scope.clone();
            let now = self.clock().now();
            let left = op
                .store(detached(async move {
                    let left = inner.store.leave_waitlist(entry_id, &scope, now).await;
                    if let Ok(Decided {
                        outcome: Some(_), ..
                    }) = &left
                    {
                        inner.cache.invalidate();
                    }
                    left
                }))
                .await?;
            left.outcome.ok_or(BookingError::EntryNotFound { entry_id })
        })
        .await
    }

    /// The entry in `scope` that still waits, with its place in line (1 is the head).
    /// `entry_not_found` when none waits with this id in `scope`: it left, or it was offered
    /// its units (read the offer as the hold [`WaitlistEntry::offer_id`]).
    pub async fn waitlist_entry(
        &self,
        scope: &Scope,
        entry_id: EntryId,
    ) -> Result<(WaitlistEntry, u32), BookingError> {
        let op = Op::new(Operation::WaitlistEntry);
        op.run(async {
            let now = self.clock().now();
            op.store(guarded(self.store().waitlist_entry(entry_id, scope, now)))
                .await?
                .outcome
                .ok_or(BookingError::EntryNotFound { entry_id })
        })
        .await
    }
}
