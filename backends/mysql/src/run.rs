//! The one write path: every operation of the store written once, as a method of [`Run`], and
//! run either on the store's pool or on a connection the caller owns. Only the unit of work a
//! step runs in differs ([`in_unit!`]):
//!
//! - **on the pool**, a transaction of its own, committed before the answer and run again whole
//!   on a commit-time conflict ([`in_transaction!`](crate::retry::in_transaction));
//! - **on the caller's connection**, a `SAVEPOINT` inside the caller's transaction, released
//!   when the step keeps its writes and rolled back when it undoes them (a refusal leaves the
//!   caller's transaction usable and unchanged); or, on a connection outside any transaction, a
//!   transaction of its own, committed (and retried on a conflict) as on the pool. A conflict
//!   inside the caller's transaction is never retried: the server ended (InnoDB's deadlock
//!   victim) or will fail (Galera's certification) the caller's whole transaction, so it is
//!   answered [`StoreError::unavailable`] with its [`Conflict`](crate::Conflict) for the
//!   caller to run its own transaction again.
//!
//! Reads made outside a step (the key's hold after a refused insert, a hold or booking asked
//! for, availability and the pages) use the caller's connection, which sees its transaction's
//! writes, or a connection of the pool, run again after a conflict as a step is
//! ([`reading!`](crate::retry::reading)).

use async_trait::async_trait;
use slot_booking::store::{
    first_that_fits, hold_key_answer, join_key_answer, join_line, leave_line, place_hold, Joining,
    KeyHolder, PlaceKernel as _, PlaceOne, Placing,
};
use slot_booking::{
    AnyHoldOutcome, AnyHoldRequest, AvailabilityEntry, AvailabilityQuery, ConsumerId, Decided,
    EntryId, EventPosition, Hold, HoldId, HoldOutcome, HoldRequest, IdempotencyKey, JoinOutcome,
    JoinRequest, LeaseHolder, NewPool, NewSlot, OwnerId, PageRequest, Pool, PoolId, PoolUsage,
    RenewRequest, Scope, Slot, SlotCursor, SlotId, SlotUsage, StoreError, Timestamp, Transition,
    WaitlistEntry,
};
use sqlx::mysql::MySqlConnection;

use crate::kernel::Kernel;
use crate::retry::reading;
use crate::sql::Statements;
use crate::{events, pools, reads, waitlists, writes, MySqlStore};

/// Where an operation runs: on the store's pool (`caller` `None`), or on the caller's
/// connection.
pub(crate) struct Run<'a> {
    pub(crate) store: &'a MySqlStore,
    pub(crate) caller: Option<&'a mut MySqlConnection>,
}

/// Runs `$step` (an expression using `$conn`, a `&mut MySqlConnection` inside the unit of work,
/// yielding `Result<Step<T>, StoreError>`) in the unit of work of `$run` (a `&mut Run`), and
/// ends the unit as the step says: see the module's docs.
macro_rules! in_unit {
    ($run:expr, |$conn:ident| $step:expr) => {{
        let run: &mut $crate::run::Run<'_> = $run;
        let store: &$crate::MySqlStore = run.store;
        match run.caller.as_deref_mut() {
            None => $crate::retry::in_transaction!(store, |$conn| $step),
            Some(caller) => {
                // Outside any transaction the unit is a transaction of its own: retried as on
                // the pool. Inside the caller's, a conflict ended the caller's transaction.
                let own = !sqlx::Connection::is_in_transaction(&*caller);
                let mut retry = $crate::retry::Retry::new(store.retry_policy(), store.retried());
                loop {
                    let outcome = async {
                        let mut unit = sqlx::Connection::begin(&mut *caller)
                            .await
                            .map_err($crate::map_err)?;
                        let step = {
                            let $conn: &mut sqlx::mysql::MySqlConnection = &mut unit;
                            $step.await
                        };
                        $crate::units::finish_unit(unit, step).await
                    }
                    .await;
                    match outcome {
                        Err(error) if own && retry.again(&error).await => continue,
                        other => break other,
                    }
                }
            }
        }
    }};
}

pub(crate) use in_unit;

impl MySqlStore {
    /// The store's operations on its pool.
    pub(crate) fn run(&self) -> Run<'_> {
        Run {
            store: self,
            caller: None,
        }
    }
}

/// A candidate of "any one of these" is an ordinary hold: the core's rule
/// ([`first_that_fits`]) over this store's one placement.
#[async_trait]
impl PlaceOne for Run<'_> {
    async fn place_one(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        self.create_hold(request).await
    }
}

impl<'a> Run<'a> {
    /// The store's statements, for as long as the run.
    pub(crate) fn statements(&self) -> &'a Statements {
        &self.store.sql
    }

    pub(crate) async fn create_slot(
        &mut self,
        slot: &NewSlot,
        now: Timestamp,
    ) -> Result<Slot, StoreError> {
        let sql = self.statements();
        in_unit!(self, |conn| writes::create_slot(sql, conn, slot, now))
    }

    /// A hold, placed by the core's rule ([`place_hold`]) in a unit of work; when a pool of its
    /// slot is short, the pools' reclaim in a unit of its own and the hold once more.
    pub(crate) async fn create_hold(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        let sql = self.statements();
        let request = &request;
        let mut refilled = false;
        loop {
            let placing = in_unit!(self, |conn| async move {
                place_hold(&mut Kernel { sql, conn }, request, refilled).await
            })?;
            let outcome = match placing {
                Placing::Done(outcome) => outcome,
                Placing::KeyTaken => hold_key_answer(request, self.key_holder(request.key).await?),
                Placing::Refill(pools) => {
                    self.refill(&pools, request.now).await?;
                    refilled = true;
                    continue;
                }
            };
            return Ok(Decided::new(request.now, outcome));
        }
    }

    /// Who has the idempotency `key`, read after the unit of work its unique constraint
    /// refused was undone.
    pub(crate) async fn key_holder(
        &mut self,
        key: &IdempotencyKey,
    ) -> Result<KeyHolder, StoreError> {
        let sql = self.statements();
        let key = key.as_str();
        reading!(self, |conn| async move {
            Kernel { sql, conn }.key_holder(key).await
        })
    }

    /// Gives back the expired holds of every slot of `pools` in a unit of its own: the refill
    /// a placement asked for ([`Placing::Refill`]).
    pub(crate) async fn refill(
        &mut self,
        pools: &[PoolId],
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let pool_ids: Vec<i64> = pools.iter().map(|pool| pool.get()).collect();
        self.reclaim(&pool_ids, None, now).await?;
        Ok(())
    }

    /// Gives back the expired holds of every slot of `pools` (and of `slot`) in a step of its
    /// own: how many.
    pub(crate) async fn reclaim(
        &mut self,
        pool_ids: &[i64],
        slot: Option<SlotId>,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        let sql = self.statements();
        in_unit!(self, |conn| pools::reclaim_pools(
            sql, conn, pool_ids, slot, now
        ))
    }

    pub(crate) async fn create_hold_any(
        &mut self,
        request: AnyHoldRequest<'_>,
    ) -> Result<Decided<AnyHoldOutcome>, StoreError> {
        first_that_fits(self, request).await
    }

    pub(crate) async fn confirm_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = self.statements();
        let done = in_unit!(self, |conn| writes::confirm(sql, conn, hold_id, scope, now))?;
        Ok(Decided::new(now, done))
    }

    pub(crate) async fn cancel_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = self.statements();
        let done = in_unit!(self, |conn| writes::cancel(sql, conn, hold_id, scope, now))?;
        Ok(Decided::new(now, done))
    }

    pub(crate) async fn renew_hold(
        &mut self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition>, StoreError> {
        let sql = self.statements();
        let request = &request;
        let done = in_unit!(self, |conn| writes::renew(sql, conn, request))?;
        Ok(Decided::new(request.now, done))
    }

    pub(crate) async fn get_hold(
        &mut self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Hold>>, StoreError> {
        let sql = self.statements();
        let hold = reading!(self, |conn| writes::hold_by_id(sql, conn, hold_id, scope))?;
        Ok(Decided::new(now, hold))
    }

    pub(crate) async fn get_slot(&mut self, slot_id: SlotId) -> Result<Option<Slot>, StoreError> {
        let sql = self.statements();
        reading!(self, |conn| reads::get_slot(sql, conn, slot_id))
    }

    pub(crate) async fn availability(
        &mut self,
        now: Timestamp,
    ) -> Result<Decided<Vec<AvailabilityEntry>>, StoreError> {
        let sql = self.statements();
        let entries = reading!(self, |conn| reads::availability(sql, conn, now))?;
        Ok(Decided::new(now, entries))
    }

    pub(crate) async fn pools(
        &mut self,
        now: Timestamp,
    ) -> Result<Decided<Vec<PoolUsage>>, StoreError> {
        pools::all_pools(self.store, now).await
    }

    pub(crate) async fn list_slots(
        &mut self,
        filter: &AvailabilityQuery,
        page: PageRequest<SlotCursor>,
        now: Timestamp,
    ) -> Result<Decided<Vec<SlotUsage>>, StoreError> {
        let sql = self.statements();
        let listed = reading!(self, |conn| reads::list_slots(sql, conn, filter, page, now))?;
        Ok(Decided::new(now, listed))
    }

    pub(crate) async fn owner_holds(
        &mut self,
        owner: &OwnerId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let sql = self.statements();
        let holds = reading!(self, |conn| reads::owner_holds(sql, conn, owner, page))?;
        Ok(Decided::new(now, holds))
    }

    pub(crate) async fn slot_holds(
        &mut self,
        slot_id: SlotId,
        page: PageRequest,
        now: Timestamp,
    ) -> Result<Decided<Vec<Hold>>, StoreError> {
        let sql = self.statements();
        let holds = reading!(self, |conn| reads::slot_holds(sql, conn, slot_id, page))?;
        Ok(Decided::new(now, holds))
    }

    /// Moves a consumer's cursor: any holder's (`holder` `None`, always `true`) or only while
    /// `holder` has the lease.
    pub(crate) async fn acknowledge(
        &mut self,
        consumer: &ConsumerId,
        holder: Option<&LeaseHolder>,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        let sql = self.statements();
        in_unit!(self, |conn| events::acknowledge(
            sql, conn, consumer, holder, through
        ))
    }

    /// The slot with its units at `now`, removed or not.
    pub(crate) async fn slot_usage(
        &mut self,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Option<SlotUsage>, StoreError> {
        let sql = self.statements();
        reading!(self, |conn| reads::slot_usage(sql, conn, slot_id, now))
    }
}

impl Run<'_> {
    /// The pool with its units at `now`, if it exists.
    pub(crate) async fn get_pool(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Decided<Option<PoolUsage>>, StoreError> {
        let sql = self.statements();
        let usage = reading!(self, |conn| pools::pool_usage(
            sql,
            conn,
            pool_id.get(),
            now
        ))?;
        Ok(Decided::new(now, usage))
    }

    pub(crate) async fn create_pool(
        &mut self,
        pool: &NewPool,
        _now: Timestamp,
    ) -> Result<Pool, StoreError> {
        let sql = self.statements();
        in_unit!(self, |conn| pools::create(sql, conn, pool.capacity))
    }
}

// The store's waitlist operations, which `forward_store!` forwards `WaitlistStore` to.
impl Run<'_> {
    /// A join, by the core's rule ([`join_line`]) in a unit of work.
    pub(crate) async fn join_waitlist(
        &mut self,
        request: JoinRequest<'_>,
    ) -> Result<Decided<JoinOutcome>, StoreError> {
        let sql = self.statements();
        let request = &request;
        let joining = in_unit!(self, |conn| async move {
            join_line(&mut Kernel { sql, conn }, request).await
        })?;
        let outcome = match joining {
            Joining::Done(outcome) => outcome,
            Joining::KeyTaken => join_key_answer(request, self.key_holder(request.hold.key).await?),
        };
        Ok(Decided::new(request.hold.now, outcome))
    }

    /// A leave, by the core's rule ([`leave_line`]) in a unit of work.
    pub(crate) async fn leave_waitlist(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<WaitlistEntry>>, StoreError> {
        let sql = self.statements();
        let left = in_unit!(self, |conn| async move {
            leave_line(&mut Kernel { sql, conn }, entry_id, scope, now).await
        })?;
        Ok(Decided::new(now, left))
    }

    pub(crate) async fn waitlist_entry(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<(WaitlistEntry, u32)>>, StoreError> {
        let sql = self.statements();
        let entry = reading!(self, |conn| waitlists::entry_in_scope(
            sql, conn, entry_id, scope
        ))?;
        Ok(Decided::new(now, entry))
    }
}
