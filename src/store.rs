//! The store contract: what a backend must do, capability by capability, operation by
//! operation.
//!
//! | trait | what it covers | needed by |
//! |---|---|---|
//! | [`HoldStore`] | create and read a slot, availability, hold, confirm, cancel, renew, read a hold | every store; the seed's four operations |
//! | [`BookingStore`] | bookings of several lines: all or nothing, confirmed, cancelled and renewed whole | [`crate::bookings`] |
//! | [`WaitlistStore`] | waitlists of slots: join, leave, position; offers in the step that frees units | [`crate::waitlists`] |
//! | [`PoolStore`] | capacities shared by several slots: pools, their slots, their capacity | [`crate::pools`] |
//! | [`SlotAdmin`] | change capacity, close and reopen sales, remove, list every slot | the engine's administration ([`crate::admin`]) |
//! | [`HoldQueries`] | an owner's holds, a slot's roster, by page | [`BookingEngine::owner_holds`](crate::BookingEngine::owner_holds), [`slot_holds`](crate::BookingEngine::slot_holds) |
//! | [`EventStore`] | the event log, consumers' cursors and leases, reclaiming, purging | [`crate::events`], [`crate::consumers`], [`crate::reclaimer`] |
//! | [`TransactionalStore`], [`TransactionWrites`] (with [`TransactionBookings`], [`TransactionPools`]) | transactions of the store and the writes on one | [`BookingEngine::transaction`](crate::BookingEngine::transaction) |
//!
//! A store implements [`HoldStore`] and whichever others it can; the engine offers each
//! operation where its store has the capability. [`Store`] names the three every SQL store
//! here has (what the example server asks of a store, as `Arc<dyn Store>`); it is implemented
//! for every type that has them. [`forward_store!`](crate::forward_store) writes a wrapper
//! store's traits in one line each.
//!
//! Each method is one atomic operation in the store. A backend decides every outcome by the
//! rows its conditional writes affected and by its unique constraint on the idempotency key,
//! never by a read made before the write. Reads after a write that changed nothing
//! are fine: they only say *why* nothing changed.
//!
//! Time is passed in: the engine reads its [`Clock`](crate::Clock) once per operation and hands
//! that instant to the store as `now`. A store decides by it and says so: every answer that
//! depends on time comes back as a [`Decided`] carrying the instant the store decided at, and
//! the engine resolves hold statuses against that same instant. A store may instead keep time
//! itself (the PostgreSQL store can use the database server's clock, so application servers
//! whose clocks disagree still agree on what has expired); it then ignores `now` and reports
//! its own instant in [`Decided::at`].
//!
//! Cancellation: the engine runs every write (`create_hold`, `confirm_hold`, `cancel_hold`,
//! `create_slot`, the administrative changes) to its end even if the engine's caller goes
//! away: on the caller's task while the caller waits, and, once the caller's future is
//! dropped, on a task of its own that finishes it. A store used directly, without the engine, gets no such
//! guarantee: dropping one of its futures mid-way is as safe as the database driver makes it.
//!
//! # Writing a store
//!
//! A store translates each operation into one atomic step of its storage; the rules stay in
//! the engine. The smallest complete store keeps everything under one lock, so each method is
//! atomic by construction, and implements [`HoldStore`] alone: eight methods. It passes the
//! hold-lifecycle conformance cases (in a test file,
//! `slot_booking::hold_store_conformance_tests!(|| async { TinyStore::default() });` makes a
//! `#[test]` of each; here they run from the doc test):
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//!
//! use slot_booking::{
//!     async_trait, AvailabilityEntry, BookingEngine, Decided, Hold, HoldId, HoldOutcome,
//!     HoldRequest, HoldStatus, HoldStore, IdempotencyKey, NewSlot, RenewRequest, Scope, Slot,
//!     SlotId, SlotLimits, StoreError, Timestamp, Transition,
//! };
//!
//! #[derive(Default)]
//! struct TinyStore(Mutex<Tables>);
//!
//! #[derive(Default)]
//! struct Tables {
//!     slots: Vec<Slot>,                 // slot `n` has id `n + 1`
//!     holds: Vec<Hold>,                 // hold `n` has id `n + 1`
//!     keys: HashMap<IdempotencyKey, HoldId>,
//! }
//!
//! impl Tables {
//!     fn slot(&mut self, id: SlotId) -> Option<&mut Slot> {
//!         let index = usize::try_from(id.get()).ok()?.checked_sub(1)?;
//!         self.slots.get_mut(index)
//!     }
//!
//!     fn hold(&mut self, id: HoldId, scope: &Scope) -> Option<&mut Hold> {
//!         let index = usize::try_from(id.get()).ok()?.checked_sub(1)?;
//!         self.holds.get_mut(index).filter(|hold| scope.admits(hold))
//!     }
//!
//!     /// Units of `slot`'s held holds that have expired at `now`: free, not yet given back.
//!     fn expired(&self, slot: SlotId, now: Timestamp) -> i32 {
//!         let expired = |h: &&Hold| h.slot_id == slot && h.status == HoldStatus::Held && h.expires_at <= now;
//!         self.holds.iter().filter(expired).map(|h| h.quantity).sum()
//!     }
//!
//!     /// A transition of the hold `id` in `scope`: applied by `change` when `applies` says so.
//!     fn transition(
//!         &mut self,
//!         id: HoldId,
//!         scope: &Scope,
//!         applies: impl Fn(&Hold) -> bool,
//!         change: impl FnOnce(&mut Hold),
//!     ) -> Transition {
//!         let Some(hold) = self.hold(id, scope) else { return Transition::NotFound };
//!         if !applies(hold) {
//!             return Transition::NotApplied(hold.clone());
//!         }
//!         change(hold);
//!         Transition::Applied(hold.clone())
//!     }
//! }
//!
//! fn live(hold: &Hold, now: Timestamp) -> bool {
//!     hold.status == HoldStatus::Held && hold.expires_at > now
//! }
//!
//! #[async_trait]
//! impl HoldStore for TinyStore {
//!     async fn create_slot(&self, new: &NewSlot, _now: Timestamp) -> Result<Slot, StoreError> {
//!         let mut t = self.0.lock().map_err(|_| StoreError::failed("poisoned"))?;
//!         let slot = Slot {
//!             slot_id: SlotId(t.slots.len() as i64 + 1),
//!             starts_at: new.starts_at,
//!             ends_at: new.ends_at,
//!             capacity: new.capacity,
//!             stored_remaining: new.capacity,
//!             resource: new.resource.clone(),
//!             closed: false,
//!             removed_at: None,
//!         };
//!         t.slots.push(slot.clone());
//!         Ok(slot)
//!     }
//!
//!     async fn get_slot(&self, id: SlotId) -> Result<Option<Slot>, StoreError> {
//!         let mut t = self.0.lock().map_err(|_| StoreError::failed("poisoned"))?;
//!         Ok(t.slot(id).cloned())
//!     }
//!
//!     async fn availability(
//!         &self,
//!         now: Timestamp,
//!     ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
//!         let t = self.0.lock().map_err(|_| StoreError::failed("poisoned"))?;
//!         let mut entries: Vec<AvailabilityEntry> = t
//!             .slots
//!             .iter()
//!             .filter(|slot| slot.is_selling_at(now))
//!             .map(|slot| AvailabilityEntry {
//!                 slot_id: slot.slot_id,
//!                 starts_at: slot.starts_at,
//!                 ends_at: slot.ends_at,
//!                 capacity: slot.capacity,
//!                 remaining: slot.stored_remaining + t.expired(slot.slot_id, now),
//!                 resource: slot.resource.clone(),
//!             })
//!             .collect();
//!         entries.sort_by_key(|e| (e.starts_at, e.slot_id));
//!         Ok(Decided::new(now, entries))
//!     }
//!
//!     async fn create_hold(
//!         &self,
//!         request: HoldRequest<'_>,
//!     ) -> Result<Decided<HoldOutcome>, StoreError> {
//!         let mut t = self.0.lock().map_err(|_| StoreError::failed("poisoned"))?;
//!         let (now, quantity) = (request.now, request.quantity);
//!         let refused = |key_holder, slot| Ok(Decided::new(now, HoldOutcome::refused(&request, key_holder, slot)));
//!         if let Some(&id) = t.keys.get(request.key) {
//!             let holder = t.hold(id, &Scope::BackOffice).cloned();
//!             return refused(holder, None);
//!         }
//!         let expired = t.expired(request.slot_id, now);
//!         let Some(slot) = t.slot(request.slot_id) else { return refused(None, None) };
//!         let selling = slot.is_selling_at(now);
//!         // Expired holds are given back only when that makes the hold fit.
//!         if !selling || slot.stored_remaining + expired < quantity {
//!             return refused(None, Some(SlotLimits::of(slot)));
//!         }
//!         if slot.stored_remaining < quantity {
//!             slot.stored_remaining += expired;
//!             for hold in t.holds.iter_mut().filter(|h| h.slot_id == request.slot_id) {
//!                 if hold.status == HoldStatus::Held && hold.expires_at <= now {
//!                     hold.status = HoldStatus::Expired;
//!                 }
//!             }
//!         }
//!         let slot = t.slot(request.slot_id).expect("found above");
//!         slot.stored_remaining -= quantity;
//!         let hold = Hold {
//!             hold_id: HoldId(t.holds.len() as i64 + 1),
//!             slot_id: request.slot_id,
//!             status: HoldStatus::Held,
//!             expires_at: request.expires_at,
//!             confirmed_at: None,
//!             cancelled_at: None,
//!             quantity,
//!             owner: request.owner.cloned(),
//!             created_at: now,
//!         };
//!         t.keys.insert(request.key.clone(), hold.hold_id);
//!         t.holds.push(hold.clone());
//!         Ok(Decided::new(now, HoldOutcome::Created(hold)))
//!     }
//!
//!     async fn confirm_hold(
//!         &self,
//!         id: HoldId,
//!         scope: &Scope,
//!         now: Timestamp,
//!     ) -> Result<Decided<Transition>, StoreError> {
//!         let mut t = self.0.lock().map_err(|_| StoreError::failed("poisoned"))?;
//!         let done = t.transition(id, scope, |h| live(h, now), |h| {
//!             h.status = HoldStatus::Confirmed;
//!             h.confirmed_at = Some(now);
//!         });
//!         Ok(Decided::new(now, done))
//!     }
//!
//!     async fn cancel_hold(
//!         &self,
//!         id: HoldId,
//!         scope: &Scope,
//!         now: Timestamp,
//!     ) -> Result<Decided<Transition>, StoreError> {
//!         let mut t = self.0.lock().map_err(|_| StoreError::failed("poisoned"))?;
//!         let applies = |h: &Hold| live(h, now) || h.status == HoldStatus::Confirmed;
//!         let done = t.transition(id, scope, applies, |h| {
//!             h.status = HoldStatus::Cancelled;
//!             h.cancelled_at = Some(now);
//!         });
//!         if let Transition::Applied(hold) = &done {
//!             // The units go back in the same step.
//!             t.slot(hold.slot_id).expect("a hold's slot exists").stored_remaining += hold.quantity;
//!         }
//!         Ok(Decided::new(now, done))
//!     }
//!
//!     async fn renew_hold(
//!         &self,
//!         request: RenewRequest<'_>,
//!     ) -> Result<Decided<Transition>, StoreError> {
//!         let mut t = self.0.lock().map_err(|_| StoreError::failed("poisoned"))?;
//!         let now = request.now;
//!         let done = t.transition(request.hold_id, request.scope, |h| live(h, now), |h| {
//!             h.expires_at = request.renewed_expiry(h);
//!         });
//!         Ok(Decided::new(now, done))
//!     }
//!
//!     async fn get_hold(
//!         &self,
//!         id: HoldId,
//!         scope: &Scope,
//!         now: Timestamp,
//!     ) -> Result<Decided<Option<Hold>>, StoreError> {
//!         let mut t = self.0.lock().map_err(|_| StoreError::failed("poisoned"))?;
//!         Ok(Decided::new(now, t.hold(id, scope).cloned()))
//!     }
//! }
//!
//! // The engine takes it as it takes any store.
//! # tokio_test::block_on(async {
//! let engine = BookingEngine::new(TinyStore::default());
//! let start = chrono::Utc::now() + chrono::Duration::days(1);
//! let slot = engine.create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 1)).await?;
//! engine.hold(slot.slot_id, "k").await?;
//! assert_eq!(engine.hold(slot.slot_id, "other").await.unwrap_err().code(), "sold_out");
//! # Ok::<(), slot_booking::BookingError>(())
//! # }).unwrap();
//!
//! // Every hold-lifecycle conformance case, races and injected faults included.
//! # #[cfg(feature = "conformance")]
//! slot_booking::conformance::check_hold_store(|| async { TinyStore::default() });
//! ```
//!
//! A store that can do more implements more traits ([`SlotAdmin`], [`HoldQueries`], …) and
//! runs their cases too (`conformance_tests!` runs every case of the three).
//!
//! # Rules a store composes instead of writing them
//!
//! A store on a database offers primitives and lets the core decide; each rule below is
//! written once, here, over a small trait the store implements on its unit of work:
//!
//! | rule | over | the store's part |
//! |---|---|---|
//! | "any one of these": the first candidate that fits ([`first_that_fits`]) | [`PlaceOne`] | place one hold |
//! | place a hold or a booking's lines, all or none, and say why not ([`place_hold`], [`place_booking`]) | [`PlaceKernel`] | lock the accounts, place one row, mark a booking, the reads that explain a refusal |
//! | join a slot's line and leave it, served in the same unit ([`join_line`], [`leave_line`]) | [`WaitKernel`] | the entry's guarded insert and delete, its limits and place in line |
//! | take units again after the slot's reclaim and the short pools' refill ([`take_with_refill`]) | [`RefillOps`] | the take, the reclaims |
//! | serve waiting lines to a fixpoint ([`serve_lines`]) | [`LineOps`] | heads, a head's units, the offer |
//! | a change of a hold and of its booking's lines ([`HoldChange`]) | — | the conditional update |
//! | an administrative change of a slot ([`edit_slot`]) | [`Kernel`], [`EditSlots`] | a slot's conditional update, its reclaim, events, serving |
//! | an administrative change of a pool ([`edit_pool`]) | [`PoolKernel`], [`EditPools`] | a pool's conditional update, its slots' reclaim in the lock order |
//! | concurrent writes committed as one ([`GroupCommit`]) | — | one statement for a group |
//!
//! The conformance suite holds a store to each rule whichever way it gets there.

use std::sync::Arc;

mod admin;
mod bookings;
mod candidates;
mod change;
mod error;
mod events;
mod forward;
mod group;
mod holds;
mod join;
mod kernel;
mod migration;
mod outcome;
mod place;
mod pool_edit;
mod pools;
mod prefix;
mod queries;
mod refill;
mod rows;
mod serve;
mod slot_edit;
mod step;
mod transaction;
mod waitlists;

pub use admin::SlotAdmin;
pub use bookings::{BookingOutcome, BookingRequest, BookingStore, LineState};
pub use candidates::{
    candidate_outcome, first_that_fits, try_candidate, AnyHoldOutcome, AnyHoldRequest, PlaceOne,
};
pub use change::HoldChange;
pub use error::{StoreError, StoreErrorKind};
pub use events::EventStore;
pub use group::{GroupCommit, GroupStats};
pub use holds::HoldStore;
pub use join::{join_key_answer, join_line, leave_line, Enqueued, Joining, WaitKernel};
pub use kernel::{nested_end, Kernel, SlotEdit, NESTED_BEGIN};
pub use migration::Migration;
pub use outcome::{
    Decided, HoldOutcome, HoldRequest, RenewRequest, SlotChange, SlotLimits, Transition,
};
pub use place::{
    booking_key_answer, hold_key_answer, line_key, place_booking, place_hold, KeyHolder, NewLine,
    PlaceKernel, Placed, Placing,
};
pub use pool_edit::{
    edit_pool, EditPools, Membership, PoolAttempt, PoolEdit, PoolEdited, PoolKernel,
};
pub use pools::{PoolChange, PoolStore, TransactionPools};
pub use prefix::{InvalidTablePrefix, TablePrefix, DEFAULT_TABLE_PREFIX};
pub use queries::HoldQueries;
pub use refill::{take_with_refill, Attempt, Refill, RefillOps};
pub use rows::{
    entry_of, event_of, from_micros, hold_of, join_limits_of, limits_of, owner_of, placed_entry_of,
    pool_usage_of, resource_of, slot_of, slot_state_of, usage_of, Columns,
};
pub use serve::{serve_lines, HeadState, LineOps, Lines, OfferPlan, Units};
pub use slot_edit::{edit_slot, EditSlots};
pub use step::Step;
pub use transaction::{TransactionBookings, TransactionWrites, TransactionalStore};
pub use waitlists::{JoinOutcome, JoinRequest, WaitlistStore};

/// A store with the hold lifecycle, slot administration and hold queries: every operation of
/// [`BookingEngine`](crate::BookingEngine) but the event log's. Implemented for every type that
/// implements the three; object safe, so `Arc<dyn Store>` is one (the example server keeps
/// its store so).
pub trait Store: HoldStore + SlotAdmin + HoldQueries {}

impl<T: HoldStore + SlotAdmin + HoldQueries + ?Sized> Store for T {}

crate::forward_store!(impl[T: HoldStore + ?Sized] HoldStore for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: BookingStore + ?Sized] BookingStore for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: PoolStore + ?Sized] PoolStore for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: WaitlistStore + ?Sized] WaitlistStore for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: SlotAdmin + ?Sized] SlotAdmin for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: HoldQueries + ?Sized] HoldQueries for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: EventStore + ?Sized] EventStore for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: HoldStore + ?Sized] HoldStore for Box<T>, |this| &**this);
crate::forward_store!(impl[T: BookingStore + ?Sized] BookingStore for Box<T>, |this| &**this);
crate::forward_store!(impl[T: PoolStore + ?Sized] PoolStore for Box<T>, |this| &**this);
crate::forward_store!(impl[T: WaitlistStore + ?Sized] WaitlistStore for Box<T>, |this| &**this);
crate::forward_store!(impl[T: SlotAdmin + ?Sized] SlotAdmin for Box<T>, |this| &**this);
crate::forward_store!(impl[T: HoldQueries + ?Sized] HoldQueries for Box<T>, |this| &**this);
crate::forward_store!(impl[T: EventStore + ?Sized] EventStore for Box<T>, |this| &**this);
