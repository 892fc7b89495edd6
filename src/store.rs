//! The store contract: what a backend must do, capability by capability, operation by
//! operation.
//!
//! | trait | what it covers | needed by |
//! |---|---|---|
//! | [`HoldStore`] | create and read a slot, availability, hold, confirm, cancel, renew, read a hold | every store; the seed's four operations |
//! | [`SlotAdmin`] | change capacity, close and reopen sales, remove, list every slot | the engine's administration ([`crate::admin`]) |
//! | [`HoldQueries`] | an owner's holds, a slot's roster, by page | [`BookingEngine::owner_holds`](crate::BookingEngine::owner_holds), [`slot_holds`](crate::BookingEngine::slot_holds) |
//! | [`EventStore`] | the event log, consumers' cursors and leases, reclaiming, purging | [`crate::events`], [`crate::consumers`], [`crate::sweeper`] |
//! | [`TransactionWrites`], [`TransactionalStore`] | the writes on a connection the caller owns | [`BookingEngine::within`](crate::BookingEngine::within) |
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
//! `create_slot`, the administrative changes) on a task of its own, so a write it starts always runs to the end even if
//! the engine's caller goes away. A store used directly, without the engine, gets no such
//! guarantee: dropping one of its futures mid-way is as safe as the database driver makes it.

use std::sync::Arc;

mod admin;
mod error;
mod events;
mod forward;
mod holds;
mod outcome;
mod queries;
mod transaction;

pub use admin::SlotAdmin;
pub use error::{StoreError, StoreErrorKind};
pub use events::EventStore;
pub use holds::HoldStore;
pub use outcome::{
    Decided, HoldOutcome, HoldRequest, RenewRequest, SlotChange, SlotLimits, Transition,
};
pub use queries::HoldQueries;
pub use transaction::{TransactionWrites, TransactionalStore};

/// A store with the hold lifecycle, slot administration and hold queries: every operation of
/// [`BookingEngine`](crate::BookingEngine) but the event log's. Implemented for every type that
/// implements the three; object safe, so `Arc<dyn Store>` is one (the example server keeps
/// its store so).
pub trait Store: HoldStore + SlotAdmin + HoldQueries {}

impl<T: HoldStore + SlotAdmin + HoldQueries + ?Sized> Store for T {}

crate::forward_store!(impl[T: HoldStore + ?Sized] HoldStore for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: SlotAdmin + ?Sized] SlotAdmin for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: HoldQueries + ?Sized] HoldQueries for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: EventStore + ?Sized] EventStore for Arc<T>, |this| &**this);
crate::forward_store!(impl[T: HoldStore + ?Sized] HoldStore for Box<T>, |this| &**this);
crate::forward_store!(impl[T: SlotAdmin + ?Sized] SlotAdmin for Box<T>, |this| &**this);
crate::forward_store!(impl[T: HoldQueries + ?Sized] HoldQueries for Box<T>, |this| &**this);
crate::forward_store!(impl[T: EventStore + ?Sized] EventStore for Box<T>, |this| &**this);
