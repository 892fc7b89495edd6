//! Writes inside a database transaction the application shares with the engine.
//!
//! A team confirming a hold usually has a row of its own to write in the same breath (an order,
//! a payment intent). [`BookingEngine::transaction`] opens a transaction of the store
//! ([`TransactionalStore`]) as an [`EngineTransaction`]: the engine's writes on it — holds,
//! bookings, confirms, cancels, renewals, slot administration — keep their validation, their
//! rules decided by rows affected and unique keys and their [`BookingError`]s, the
//! application's own statements run on it with [`EngineTransaction::run`], and everything
//! commits or rolls back together.
//!
//! ```no_run
//! # async fn demo(
//! #     engine: slot_booking::BookingEngine<slot_booking_postgres::PostgresStore>,
//! #     hold_id: slot_booking::HoldId,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use slot_booking::Scope;
//! use slot_booking_postgres::sqlx;
//!
//! let mut tx = engine.transaction().await?;
//! let booked = tx.confirm(&Scope::Anonymous, hold_id).await?;
//! let order = tx
//!     .run(move |tx| {
//!         Box::pin(async move {
//!             sqlx::query("INSERT INTO orders (hold_id) VALUES ($1)")
//!                 .bind(booked.hold_id.get())
//!                 .execute(&mut **tx)
//!                 .await
//!         })
//!     })
//!     .await?;
//! order?;
//! tx.commit().await?; // both, or neither; the engine's listing shows it at once
//! # Ok(()) }
//! ```
//!
//! What the transaction guarantees:
//!
//! - **The engine sees its own commit.** What the calls changed (units a hold or booking took,
//!   a confirm, a cancel, a slot change) reaches the engine's cached availability when
//!   [`commit`](EngineTransaction::commit) succeeds, and only then: a rollback, or a
//!   transaction dropped uncommitted, shows nothing. Other instances learn of it by following
//!   changes (each store's `follow_changes`).
//! - **A call cut midway leaves nothing behind.** A web framework drops a request's future when
//!   its client hangs up, at whatever await point it had reached; sqlx's connections are not
//!   safe to stop midway (a result half read leaves the connection out of step with the
//!   server). Each call (and [`run`](EngineTransaction::run)) goes on to its end on a task of
//!   its own when its future is dropped, and hands the transaction back: the next call on the
//!   same transaction finds it usable, exactly as if the answer had only been lost; a
//!   transaction dropped meanwhile is rolled back once the call ends, and its connection goes
//!   back to the pool clean. The same holds for `commit` and `rollback`.
//! - **Locks last until the commit.** A cancel or a slot change locks its slot's row until
//!   then. Two transactions that each touch several slots should touch them in the same order
//!   (by slot id, say), as with any rows; a hold or confirm in a transaction of its own needs
//!   no such care.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::bookings::{BookingPlaced, NewBooking};
use crate::engine::{detached, BookingEngine, HoldPlaced, NewHold};
use crate::error::BookingError;
use crate::model::{
    Booking, CapacityChange, ConsumerId, EventPosition, Hold, HoldId, LeaseHolder, NewSlot, PoolId,
    PoolSummary, Slot, SlotId, SlotSummary,
};
use crate::scope::Scope;
use crate::store::{BookingStore, StoreError, TransactionPools};

mod within;

pub use crate::store::{TransactionBookings, TransactionWrites, TransactionalStore};
pub(crate) use within::Within;

/// A transaction of the store the engine runs on, opened by [`BookingEngine::transaction`]:
/// the engine's writes and the application's own statements ([`run`](Self::run)) in it commit
/// or roll back together. See the [module docs](self) for what it guarantees.
///
/// Every method takes `&mut self`: one call at a time. Dropped uncommitted, the transaction
/// rolls back.
pub struct EngineTransaction<S: TransactionalStore> {
    engine: BookingEngine<S>,
    state: State<S::Transaction>,
    /// What the calls changed, for the engine's cached availability after the commit.
    learned: Arc<Mutex<Learned>>,
}

impl<S: TransactionalStore> std::fmt::Debug for EngineTransaction<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Open(_) => "open",
            State::Busy(_) => "busy",
            State::Ended => "ended",
        };
        f.debug_struct("EngineTransaction")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// Where the store's transaction is.
enum State<T> {
    /// Here, between calls.
    Open(T),
    /// With a call, which sends it back when it ends (its caller may have gone).
    Busy(oneshot::Receiver<T>),
    /// Committed, rolled back, or lost with a call that failed to give it back.
    Ended,
}

/// What the calls of a transaction changed of the availability listing.
#[derive(Debug, Default)]
struct Learned {
    /// Units taken by holds and bookings placed (replays take none).
    taken: Vec<(SlotId, i32)>,
    /// A change a patch cannot show (units given back, a slot changed): reload the listing.
    reload: bool,
}

/// A call's record of what it changed, shared with its transaction.
#[derive(Clone)]
struct Learner(Arc<Mutex<Learned>>);

impl Learner {
    fn with(&self, change: impl FnOnce(&mut Learned)) {
        // A poisoned lock only means a panic elsewhere mid-record: the record is still a Vec
        // and a flag, whole.
        let mut learned = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        change(&mut learned);
    }

    fn took(&self, units: impl IntoIterator<Item = (SlotId, i32)>) {
        self.with(|learned| learned.taken.extend(units));
    }

    fn changed(&self) {
        self.with(|learned| learned.reload = true);
    }
}

/// A call the listing does not show: a read, a renewal, an acknowledgement.
fn unchanged<T>(_: &T, _: &Learner) {}

/// A change a patch cannot show: the listing reloads after the commit.
fn changed<T>(_: &T, learner: &Learner) {
    learner.changed();
}

/// Units a hold or booking took, unless it was a replay.
fn took_units<T: Placed>(placed: &T, learner: &Learner) {
    if !placed.replayed() {
        learner.took(placed.units());
    }
}

/// A hold or booking placed: whether it replayed, and the units it took.
trait Placed {
    fn replayed(&self) -> bool;
    fn units(&self) -> Vec<(SlotId, i32)>;
}

impl Placed for HoldPlaced {
    fn replayed(&self) -> bool {
        self.replayed
    }

    fn units(&self) -> Vec<(SlotId, i32)> {
        vec![(self.hold.slot_id, self.hold.quantity)]
    }
}

impl Placed for BookingPlaced {
    fn replayed(&self) -> bool {
        self.replayed
    }

    fn units(&self) -> Vec<(SlotId, i32)> {
        self.booking
            .lines
            .iter()
            .map(|line| (line.slot_id, line.quantity))
            .collect()
    }
}

/// The ended transaction's error.
fn ended() -> BookingError {
    StoreError::failed(
        "the transaction has ended (committed, rolled back, or lost with a call that failed)",
    )
    .into()
}

impl<S> BookingEngine<S>
where
    S: TransactionalStore,
{
    /// Opens a transaction of the store for the engine's writes and the application's own
    /// statements: see [`EngineTransaction`].
    pub async fn transaction(&self) -> Result<EngineTransaction<S>, BookingError> {
        let store = self.store_handle();
        let transaction = detached(async move { store.begin().await }).await?;
        Ok(EngineTransaction {
            engine: self.clone(),
            state: State::Open(transaction),
            learned: Arc::default(),
        })
    }
}

impl<S> EngineTransaction<S>
where
    S: TransactionalStore,
{
    /// The engine this transaction writes for.
    pub fn engine(&self) -> &BookingEngine<S> {
        &self.engine
    }

    /// Waits for the call that has the store's transaction to give it back. The wait is on
    /// the receiver in place: dropped meanwhile, this leaves the transaction on its way back.
    async fn settle(&mut self) {
        if let State::Busy(returned) = &mut self.state {
            self.state = match returned.await {
                Ok(transaction) => State::Open(transaction),
                Err(_) => State::Ended,
            };
        }
    }

    /// The store's transaction, once the call that has it gave it back.
    async fn take(&mut self) -> Result<S::Transaction, BookingError> {
        self.settle().await;
        match std::mem::replace(&mut self.state, State::Ended) {
            State::Open(transaction) => Ok(transaction),
            State::Busy(_) | State::Ended => Err(ended()),
        }
    }

    /// Runs `work` on the store's transaction, to its end even if this call's future is
    /// dropped (on a task of its own then), and takes the transaction back.
    async fn with<T, F>(&mut self, work: F) -> Result<T, BookingError>
    where
        T: Send + 'static,
        F: for<'t> FnOnce(&'t BookingEngine<S>, &'t mut S::Transaction) -> BoxFuture<'t, T>
            + Send
            + 'static,
    {
        let mut transaction = self.take().await?;
        let (give_back, returned) = oneshot::channel();
        self.state = State::Busy(returned);
        let engine = self.engine.clone();
        let answer = detached(async move {
            let answer = work(&engine, &mut transaction).await;
            // Nobody to give it to (the transaction was dropped meanwhile): it rolls back here.
            let _ = give_back.send(transaction);
            Ok(answer)
        })
        .await;
        self.settle().await;
        Ok(answer?)
    }

    /// Runs `call` with the engine's writes on the transaction ([`Within`]); `learn` records
    /// what its answer changed of the listing (see [`unchanged`], [`changed`], [`took_units`]).
    async fn call<T, F>(&mut self, learn: fn(&T, &Learner), call: F) -> Result<T, BookingError>
    where
        T: Send + 'static,
        F: for<'t> FnOnce(Within<'t, S, S::Writes<'t>>) -> BoxFuture<'t, Result<T, BookingError>>
            + Send
            + 'static,
    {
        let learner = Learner(Arc::clone(&self.learned));
        self.with(move |engine, transaction| {
            let writes = engine.store().writes(transaction);
            Box::pin(async move {
                let answer = call(engine.within(writes)).await?;
                learn(&answer, &learner);
                Ok(answer)
            })
        })
        .await?
    }

    /// Runs the application's own statements on the transaction: `statements` gets the store's
    /// transaction (for sqlx stores, `&mut sqlx::Transaction`; `&mut **tx` is its connection)
    /// and its answer is returned. Like the engine's calls, it runs to its end, on a task of its
    /// own, if this future is dropped.
    pub async fn run<T, F>(&mut self, statements: F) -> Result<T, BookingError>
    where
        T: Send + 'static,
        F: for<'t> FnOnce(&'t mut S::Transaction) -> BoxFuture<'t, T> + Send + 'static,
    {
        self.with(move |_, transaction| statements(transaction))
            .await
    }

    /// Commits the transaction; then the engine's cached availability shows what its calls
    /// changed. A commit whose future is dropped still commits (or fails) and updates the
    /// listing.
    pub async fn commit(mut self) -> Result<(), BookingError> {
        let transaction = self.take().await?;
        let engine = self.engine.clone();
        let learned = std::mem::take(
            &mut *self
                .learned
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        detached(async move {
            engine.store().commit(transaction).await?;
            if learned.reload {
                engine.invalidate_availability();
            } else if !learned.taken.is_empty() {
                engine.show_taken(&learned.taken);
            }
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// Rolls the transaction back: nothing written in it stays, and the engine's listing is
    /// untouched. Dropping the transaction does the same.
    pub async fn rollback(mut self) -> Result<(), BookingError> {
        let transaction = self.take().await?;
        let store = self.engine.store_handle();
        detached(async move { store.rollback(transaction).await }).await?;
        Ok(())
    }

    /// As [`BookingEngine::hold`].
    pub async fn hold(&mut self, slot_id: SlotId, key: &str) -> Result<HoldPlaced, BookingError> {
        self.place_hold(NewHold::new(slot_id, key)).await
    }

    /// As [`BookingEngine::place_hold`].
    pub async fn place_hold(&mut self, request: NewHold) -> Result<HoldPlaced, BookingError> {
        self.call(took_units, move |mut within| {
            Box::pin(async move { within.place_hold(request).await })
        })
        .await
    }

    /// As [`BookingEngine::confirm`].
    pub async fn confirm(&mut self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let scope = scope.clone();
        self.call(changed, move |mut within| {
            Box::pin(async move { within.confirm(&scope, hold_id).await })
        })
        .await
    }

    /// As [`BookingEngine::cancel`].
    pub async fn cancel(&mut self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let scope = scope.clone();
        self.call(changed, move |mut within| {
            Box::pin(async move { within.cancel(&scope, hold_id).await })
        })
        .await
    }

    /// As [`BookingEngine::renew`].
    pub async fn renew(
        &mut self,
        scope: &Scope,
        hold_id: HoldId,
        lifetime: Option<std::time::Duration>,
    ) -> Result<Hold, BookingError> {
        let scope = scope.clone();
        self.call(unchanged, move |mut within| {
            Box::pin(async move { within.renew(&scope, hold_id, lifetime).await })
        })
        .await
    }

    /// As [`BookingEngine::get_hold`], seeing the transaction's own writes.
    pub async fn get_hold(&mut self, scope: &Scope, hold_id: HoldId) -> Result<Hold, BookingError> {
        let scope = scope.clone();
        self.call(unchanged, move |mut within| {
            Box::pin(async move { within.get_hold(&scope, hold_id).await })
        })
        .await
    }

    /// As [`BookingEngine::create_slot`].
    pub async fn create_slot(&mut self, slot: NewSlot) -> Result<Slot, BookingError> {
        self.call(changed, move |mut within| {
            Box::pin(async move { within.create_slot(slot).await })
        })
        .await
    }

    /// As [`BookingEngine::change_capacity`].
    pub async fn change_capacity(
        &mut self,
        slot_id: SlotId,
        change: impl Into<CapacityChange>,
    ) -> Result<Slot, BookingError> {
        let change = change.into();
        self.call(changed, move |mut within| {
            Box::pin(async move { within.change_capacity(slot_id, change).await })
        })
        .await
    }

    /// As [`BookingEngine::close_sales`].
    pub async fn close_sales(&mut self, slot_id: SlotId) -> Result<Slot, BookingError> {
        self.call(changed, move |mut within| {
            Box::pin(async move { within.close_sales(slot_id).await })
        })
        .await
    }

    /// As [`BookingEngine::reopen_sales`].
    pub async fn reopen_sales(&mut self, slot_id: SlotId) -> Result<Slot, BookingError> {
        self.call(changed, move |mut within| {
            Box::pin(async move { within.reopen_sales(slot_id).await })
        })
        .await
    }

    /// As [`BookingEngine::remove_slot`].
    pub async fn remove_slot(&mut self, slot_id: SlotId) -> Result<Slot, BookingError> {
        self.call(changed, move |mut within| {
            Box::pin(async move { within.remove_slot(slot_id).await })
        })
        .await
    }

    /// As [`BookingEngine::acknowledge_events`]: the cursor moves when, and only if, the
    /// transaction commits.
    pub async fn acknowledge_events(
        &mut self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), BookingError> {
        let consumer = consumer.clone();
        self.call(unchanged, move |mut within| {
            Box::pin(async move { within.acknowledge_events(&consumer, through).await })
        })
        .await
    }

    /// As [`BookingEngine::acknowledge_leased`]: commit the transaction only when this answers
    /// `Ok`; on [`BookingError::LeaseLost`] roll it back, and with it what the transaction
    /// recorded for the events.
    pub async fn acknowledge_leased(
        &mut self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<(), BookingError> {
        let (consumer, holder) = (consumer.clone(), holder.clone());
        self.call(unchanged, move |mut within| {
            Box::pin(async move { within.acknowledge_leased(&consumer, &holder, through).await })
        })
        .await
    }
}

/// Bookings of several lines in the transaction, for a store whose writes also have
/// [`TransactionBookings`].
impl<S> EngineTransaction<S>
where
    S: TransactionalStore + BookingStore,
    for<'t> S::Writes<'t>: TransactionBookings,
{
    /// As [`BookingEngine::book`].
    pub async fn book(&mut self, request: NewBooking) -> Result<BookingPlaced, BookingError> {
        self.call(took_units, move |mut within| {
            Box::pin(async move { within.book(request).await })
        })
        .await
    }

    /// As [`BookingEngine::get_booking`], seeing the transaction's own writes.
    pub async fn get_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        let scope = scope.clone();
        self.call(unchanged, move |mut within| {
            Box::pin(async move { within.get_booking(&scope, booking_id).await })
        })
        .await
    }

    /// As [`BookingEngine::confirm_booking`].
    pub async fn confirm_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        let scope = scope.clone();
        self.call(changed, move |mut within| {
            Box::pin(async move { within.confirm_booking(&scope, booking_id).await })
        })
        .await
    }

    /// As [`BookingEngine::cancel_booking`].
    pub async fn cancel_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
    ) -> Result<Booking, BookingError> {
        let scope = scope.clone();
        self.call(changed, move |mut within| {
            Box::pin(async move { within.cancel_booking(&scope, booking_id).await })
        })
        .await
    }

    /// As [`BookingEngine::renew_booking`].
    pub async fn renew_booking(
        &mut self,
        scope: &Scope,
        booking_id: HoldId,
        lifetime: Option<std::time::Duration>,
    ) -> Result<Booking, BookingError> {
        let scope = scope.clone();
        self.call(unchanged, move |mut within| {
            Box::pin(async move { within.renew_booking(&scope, booking_id, lifetime).await })
        })
        .await
    }
}

/// Units of slots and pools as the transaction sees them, for a store whose writes also have
/// [`TransactionPools`].
impl<S> EngineTransaction<S>
where
    S: TransactionalStore,
    for<'t> S::Writes<'t>: TransactionPools,
{
    /// As [`BookingEngine::get_pool`], seeing the transaction's own writes.
    pub async fn get_pool(&mut self, pool_id: PoolId) -> Result<PoolSummary, BookingError> {
        self.call(unchanged, move |mut within| {
            Box::pin(async move { within.get_pool(pool_id).await })
        })
        .await
    }

    /// The slot with its units free (expired holds included), held and confirmed, seeing the
    /// transaction's own writes; `slot_not_found` when no slot has this id.
    pub async fn slot_usage(&mut self, slot_id: SlotId) -> Result<SlotSummary, BookingError> {
        self.call(unchanged, move |mut within| {
            Box::pin(async move { within.slot_usage(slot_id).await })
        })
        .await
    }
}
