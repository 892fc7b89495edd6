//! An administrative change of a pool, the one rule a store follows: [`edit_pool`] over the
//! store's [`PoolKernel`], in a unit of work per attempt ([`EditPools`] runs them).
//!
//! 1. On the second attempt only ([`PoolAttempt::Reclaiming`]), the expired holds of the
//!    pool's slots (and of the slot to attach) are reclaimed first: those slots locked by
//!    ascending id, then their pools, the store's lock order. The first attempt reclaims
//!    nothing, so it never locks a slot after the pool.
//! 2. The change's conditional update runs ([`PoolKernel::update_pool`]). Attaching takes the
//!    slot's taken units from the pool, only if it has them free; lowering a capacity takes
//!    free units only; detaching gives the slot's taken units back.
//! 3. Changed: the answer is the pool as the change left it, then the lines its freed units
//!    may serve are served: the detached slot's (and its other pools'), the pool's when its
//!    capacity changed or a slot left it. Attaching frees nothing; nor does a reclaim make a
//!    head ready by itself (readiness counts expired units free).
//! 4. Not changed: reads in the unit of work say why, in the order every store answers: no
//!    such slot, no such pool, a removed slot, attached already (applied, unchanged), too many
//!    pools; for a capacity, no such pool or already at it (applied, unchanged).
//! 5. Otherwise the pool is short of free units. On the first attempt, when its slots'
//!    expired holds would make it fit, the answer is [`PoolEdited::Short`] (and nothing of the
//!    attempt stays): the second attempt reclaims them. Else, and on the second attempt, the
//!    pool in use, read in the unit of work, which is then undone, reclaim included.

use async_trait::async_trait;

use super::error::StoreError;
use super::kernel::Kernel;
use super::outcome::Decided;
use super::pools::PoolChange;
use super::serve::Lines;
use super::step::Step;
use crate::model::{
    CapacityChange, Hold, PoolId, PoolUsage, SlotId, SlotUsage, Timestamp, MAX_POOLS_PER_SLOT,
};

/// An administrative change of one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolEdit {
    /// The slot joins the pool, which takes the slot's taken units.
    Attach(SlotId),
    /// The slot leaves the pool, which gets the slot's taken units back.
    Detach(SlotId),
    /// The pool's capacity changes, taking free units only.
    Capacity(CapacityChange),
}

impl PoolEdit {
    /// The slot the change is about, if any.
    pub fn slot(&self) -> Option<SlotId> {
        match self {
            PoolEdit::Attach(slot) | PoolEdit::Detach(slot) => Some(*slot),
            PoolEdit::Capacity(_) => None,
        }
    }

    /// Whether the change, refused for units, would fit were the expired holds of the pool's
    /// slots (and of `slot`, the slot to attach, as read) given back.
    pub fn fits_after_reclaim(&self, pool: &PoolUsage, slot: Option<&SlotUsage>) -> bool {
        let expired = pool.expired + slot.map_or(0, |slot| slot.expired);
        if expired <= 0 {
            return false;
        }
        let free = i64::from(pool.available());
        match self {
            PoolEdit::Attach(_) => slot.is_some_and(|slot| {
                let taken = slot.slot.capacity - slot.slot.stored_remaining - slot.expired;
                i64::from(taken) <= free
            }),
            PoolEdit::Detach(_) => false,
            PoolEdit::Capacity(change) => change
                .applied_to(pool.pool.capacity)
                .filter(|capacity| (0..=i64::from(i32::MAX)).contains(capacity))
                .is_some_and(|capacity| free + capacity - i64::from(pool.pool.capacity) >= 0),
        }
    }
}

/// Which attempt of a pool's change a unit of work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolAttempt {
    /// The change alone.
    First,
    /// The expired holds of the pool's slots reclaimed first, then the change.
    Reclaiming,
}

/// What one attempt of a pool's change came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolEdited {
    /// The answer.
    Done(PoolChange),
    /// Refused for units that the expired holds of the pool's slots would free: nothing of the
    /// attempt stays, and the next one reclaims them ([`PoolAttempt::Reclaiming`]).
    Short,
}

/// What a unit of work reads of a slot and a pool when attaching or detaching changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Membership {
    /// A slot has the id, removed or not.
    pub slot_stored: bool,
    /// The slot is stored and not removed.
    pub slot_live: bool,
    /// A pool has the id.
    pub pool: bool,
    /// The slot belongs to the pool.
    pub attached: bool,
    /// How many pools the slot belongs to.
    pub pools_of_slot: usize,
}

/// The primitives of a unit of work that a pool's change is composed on, beside the
/// [`Kernel`]'s.
#[async_trait]
pub trait PoolKernel: Kernel {
    /// The pool with its slots and units at `now`; `None` when there is none.
    async fn pool_usage(
        &mut self,
        pool_id: PoolId,
        now: Timestamp,
    ) -> Result<Option<PoolUsage>, StoreError>;

    /// What the unit of work reads of slot `slot_id` and pool `pool_id` (see [`Membership`]).
    async fn membership(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
    ) -> Result<Membership, StoreError>;

    /// Runs `edit`'s conditional update of the pool (its row and its slots') at `now`:
    /// whether it changed them. When it did not, it wrote nothing: a live slot not attached,
    /// in fewer than [`MAX_POOLS_PER_SLOT`] pools, whose taken units the pool has free, is
    /// attached; an attached slot detached, its taken units back in the pool; a capacity set
    /// that is not the pool's already, taking free units only.
    async fn update_pool(
        &mut self,
        pool_id: PoolId,
        edit: PoolEdit,
        now: Timestamp,
    ) -> Result<bool, StoreError>;

    /// Reclaims the held holds expired by `now` of every slot of pool `pool_id` and of `also`:
    /// those slots' rows locked by ascending id, then their pools' (the store's lock order),
    /// `hold_expired` each, their units back to their slots and pools. The holds reclaimed.
    async fn reclaim_pool(
        &mut self,
        pool_id: PoolId,
        also: Option<SlotId>,
        now: Timestamp,
    ) -> Result<Vec<Hold>, StoreError>;
}

/// A store's write path that runs one attempt of a pool's change in a unit of work of its own
/// ([`edit_pool_once`](Self::edit_pool_once), usually the core's [`edit_pool`]); the three
/// administrative writes of [`PoolStore`](super::PoolStore) follow from it, for
/// [`forward_store!`](crate::forward_store) to forward to.
#[async_trait]
pub trait EditPools: Send {
    /// Runs `attempt` of `edit` of pool `pool_id` at `now` in a unit of work of its own,
    /// ended as its [`Step`] says.
    async fn edit_pool_once(
        &mut self,
        pool_id: PoolId,
        edit: PoolEdit,
        attempt: PoolAttempt,
        now: Timestamp,
    ) -> Result<PoolEdited, StoreError>;

    /// The instant a change asked at `now` is decided at, and each of its attempts runs at:
    /// `now`, unless the store decides by a clock of its own (PostgreSQL's database clock).
    async fn decided_at(&mut self, now: Timestamp) -> Result<Timestamp, StoreError> {
        Ok(now)
    }

    /// Applies `edit` to pool `pool_id` at `now` ([`decided_at`](Self::decided_at)): the first
    /// attempt, then, if the pool was short for units that expired holds would free, the
    /// reclaiming one.
    async fn edit_pool(
        &mut self,
        pool_id: PoolId,
        edit: PoolEdit,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        let now = self.decided_at(now).await?;
        for attempt in [PoolAttempt::First, PoolAttempt::Reclaiming] {
            if let PoolEdited::Done(change) =
                self.edit_pool_once(pool_id, edit, attempt, now).await?
            {
                return Ok(Decided::new(now, change));
            }
        }
        Err(StoreError::failed(
            "a pool's reclaiming attempt answered short, which only a first attempt does",
        ))
    }

    /// [`PoolStore::attach_slot`](super::PoolStore::attach_slot).
    async fn attach_slot(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        self.edit_pool(pool_id, PoolEdit::Attach(slot_id), now)
            .await
    }

    /// [`PoolStore::detach_slot`](super::PoolStore::detach_slot).
    async fn detach_slot(
        &mut self,
        pool_id: PoolId,
        slot_id: SlotId,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        self.edit_pool(pool_id, PoolEdit::Detach(slot_id), now)
            .await
    }

    /// [`PoolStore::change_pool_capacity`](super::PoolStore::change_pool_capacity).
    async fn change_pool_capacity(
        &mut self,
        pool_id: PoolId,
        change: CapacityChange,
        now: Timestamp,
    ) -> Result<Decided<PoolChange>, StoreError> {
        self.edit_pool(pool_id, PoolEdit::Capacity(change), now)
            .await
    }
}

/// Runs `attempt` of `edit` of pool `pool_id` at `now` on a store's [`PoolKernel`] (see the
/// module's docs): its answer, and whether to keep the unit of work's writes.
pub async fn edit_pool<K: PoolKernel + ?Sized>(
    kernel: &mut K,
    pool_id: PoolId,
    edit: PoolEdit,
    attempt: PoolAttempt,
    now: Timestamp,
) -> Result<Step<PoolEdited>, StoreError> {
    if attempt == PoolAttempt::Reclaiming {
        kernel.reclaim_pool(pool_id, edit.slot(), now).await?;
    }
    if kernel.update_pool(pool_id, edit, now).await? {
        let usage = pool_now(kernel, pool_id, now).await?;
        let mut lines = Lines::new();
        match edit {
            PoolEdit::Attach(_) => {}
            PoolEdit::Detach(slot) => {
                lines.slots.insert(slot);
                lines.pools.insert(pool_id);
            }
            PoolEdit::Capacity(_) => {
                lines.pools.insert(pool_id);
            }
        }
        if !lines.is_empty() {
            kernel.serve(&lines, now).await?;
        }
        return Ok(done(Step::keep, PoolChange::Applied(usage)));
    }
    let (usage, slot) = match edit {
        PoolEdit::Attach(slot_id) | PoolEdit::Detach(slot_id) => {
            let facts = kernel.membership(pool_id, slot_id).await?;
            if !facts.slot_stored {
                return Ok(done(Step::undo, PoolChange::SlotNotFound));
            }
            if !facts.pool {
                return Ok(done(Step::undo, PoolChange::PoolNotFound));
            }
            let attach = matches!(edit, PoolEdit::Attach(_));
            if attach && !facts.slot_live {
                return Ok(done(Step::undo, PoolChange::SlotNotFound));
            }
            if facts.attached == attach {
                let usage = pool_now(kernel, pool_id, now).await?;
                return Ok(done(Step::keep, PoolChange::Applied(usage)));
            }
            if !attach {
                return Err(StoreError::failed(format!(
                    "detaching slot {} from pool {} changed nothing, yet it is the pool's",
                    slot_id.get(),
                    pool_id.get()
                )));
            }
            if facts.pools_of_slot >= MAX_POOLS_PER_SLOT {
                return Ok(done(Step::undo, PoolChange::TooManyPools));
            }
            let slot = kernel.slot_usage(slot_id, now).await?;
            (pool_now(kernel, pool_id, now).await?, slot)
        }
        PoolEdit::Capacity(change) => match kernel.pool_usage(pool_id, now).await? {
            None => return Ok(done(Step::undo, PoolChange::PoolNotFound)),
            Some(usage) if change.leaves(usage.pool.capacity) => {
                return Ok(done(Step::keep, PoolChange::Applied(usage)));
            }
            Some(usage) => (usage, None),
        },
    };
    if attempt == PoolAttempt::First && edit.fits_after_reclaim(&usage, slot.as_ref()) {
        return Ok(Step::undo(PoolEdited::Short));
    }
    Ok(done(Step::undo, PoolChange::InUse(usage)))
}

/// The pool as the unit of work has it, which the change has seen.
async fn pool_now<K: PoolKernel + ?Sized>(
    kernel: &mut K,
    pool_id: PoolId,
    now: Timestamp,
) -> Result<PoolUsage, StoreError> {
    kernel
        .pool_usage(pool_id, now)
        .await?
        .ok_or_else(|| StoreError::failed(format!("pool {} is gone", pool_id.get())))
}

fn done(step: fn(PoolEdited) -> Step<PoolEdited>, change: PoolChange) -> Step<PoolEdited> {
    step(PoolEdited::Done(change))
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::*;
    use crate::model::{NewEvent, Pool, Slot};
    use crate::store::kernel::SlotEdit;

    /// A pool as a store would hold it, with a script of what its updates do.
    struct Script {
        /// The pool: capacity, stored remaining, held and expired units of its slots.
        pool: Option<(i32, i32, i32, i32)>,
        /// The slot to attach or detach: taken units, expired among them.
        slot: (i32, i32),
        membership: Membership,
        /// What the update does on each attempt's try.
        updates: Vec<bool>,
        done: Vec<String>,
    }

    fn at(seconds: i64) -> Timestamp {
        DateTime::from_timestamp(seconds, 0).unwrap()
    }

    fn member(attached: bool) -> Membership {
        Membership {
            slot_stored: true,
            slot_live: true,
            pool: true,
            attached,
            pools_of_slot: 1,
        }
    }

    fn script(pool: (i32, i32, i32, i32), updates: &[bool]) -> Script {
        Script {
            pool: Some(pool),
            slot: (2, 1),
            membership: member(false),
            updates: updates.to_vec(),
            done: Vec::new(),
        }
    }

    #[async_trait]
    impl Kernel for Script {
        async fn slot_usage(
            &mut self,
            slot_id: SlotId,
            _: Timestamp,
        ) -> Result<Option<SlotUsage>, StoreError> {
            self.done.push("slot".into());
            let (taken, expired) = self.slot;
            let slot = Slot {
                slot_id,
                starts_at: at(1_000),
                ends_at: at(2_000),
                capacity: 5,
                stored_remaining: 5 - taken,
                resource: None,
                closed: false,
                removed_at: None,
            };
            Ok(Some(SlotUsage {
                slot,
                held: 0,
                expired,
            }))
        }
        async fn update_slot(
            &mut self,
            _: SlotId,
            _: SlotEdit,
            _: Timestamp,
        ) -> Result<Option<Slot>, StoreError> {
            unreachable!("a pool's rule updates no slot")
        }
        async fn reclaim_slot(&mut self, _: SlotId, _: Timestamp) -> Result<Vec<Hold>, StoreError> {
            unreachable!("a pool's rule reclaims its slots together")
        }
        async fn append(&mut self, _: &NewEvent) -> Result<(), StoreError> {
            unreachable!("a pool's change appends no event")
        }
        async fn serve(&mut self, lines: &Lines, _: Timestamp) -> Result<Vec<Hold>, StoreError> {
            let slots: Vec<i64> = lines.slots.iter().map(|s| s.get()).collect();
            let pools: Vec<i64> = lines.pools.iter().map(|p| p.get()).collect();
            self.done.push(format!("serve {slots:?} {pools:?}"));
            Ok(Vec::new())
        }
        async fn begin_nested(&mut self) -> Result<(), StoreError> {
            unreachable!("an attempt is a unit of its own")
        }
        async fn end_nested(&mut self, _: bool) -> Result<(), StoreError> {
            unreachable!("an attempt is a unit of its own")
        }
    }

    #[async_trait]
    impl PoolKernel for Script {
        async fn pool_usage(
            &mut self,
            pool_id: PoolId,
            _: Timestamp,
        ) -> Result<Option<PoolUsage>, StoreError> {
            self.done.push("pool".into());
            Ok(self
                .pool
                .map(|(capacity, stored_remaining, held, expired)| PoolUsage {
                    pool: Pool {
                        pool_id,
                        capacity,
                        stored_remaining,
                        slots: Vec::new(),
                    },
                    held,
                    expired,
                }))
        }
        async fn membership(&mut self, _: PoolId, _: SlotId) -> Result<Membership, StoreError> {
            self.done.push("membership".into());
            Ok(self.membership)
        }
        async fn update_pool(
            &mut self,
            _: PoolId,
            _: PoolEdit,
            _: Timestamp,
        ) -> Result<bool, StoreError> {
            self.done.push("update".into());
            Ok(!self.updates.is_empty() && self.updates.remove(0))
        }
        async fn reclaim_pool(
            &mut self,
            _: PoolId,
            also: Option<SlotId>,
            _: Timestamp,
        ) -> Result<Vec<Hold>, StoreError> {
            self.done
                .push(format!("reclaim {:?}", also.map(SlotId::get)));
            Ok(Vec::new())
        }
    }

    async fn run(script: &mut Script, edit: PoolEdit, attempt: PoolAttempt) -> Step<PoolEdited> {
        edit_pool(script, PoolId(7), edit, attempt, at(0))
            .await
            .unwrap()
    }

    fn answer(step: &Step<PoolEdited>) -> &PoolChange {
        match step.value() {
            PoolEdited::Done(change) => change,
            PoolEdited::Short => panic!("short"),
        }
    }

    #[tokio::test]
    async fn a_detach_serves_the_slots_lines_and_the_pools_after_its_answer() {
        let mut s = script((5, 3, 0, 0), &[true]);
        let step = run(&mut s, PoolEdit::Detach(SlotId(4)), PoolAttempt::First).await;
        assert!(step.keep && matches!(answer(&step), PoolChange::Applied(_)));
        assert_eq!(s.done, ["update", "pool", "serve [4] [7]"]);
        let mut s = script((5, 3, 0, 0), &[true]);
        run(&mut s, PoolEdit::Attach(SlotId(4)), PoolAttempt::First).await;
        assert_eq!(s.done, ["update", "pool"], "attaching frees nothing");
        let mut s = script((5, 3, 0, 0), &[true]);
        run(
            &mut s,
            PoolEdit::Capacity(CapacityChange::To(9)),
            PoolAttempt::First,
        )
        .await;
        assert_eq!(s.done, ["update", "pool", "serve [] [7]"]);
    }

    #[tokio::test]
    async fn a_refusal_is_explained_in_the_order_every_store_answers() {
        let cases = [
            (
                Membership {
                    slot_stored: false,
                    pool: false,
                    ..member(false)
                },
                PoolChange::SlotNotFound,
            ),
            (
                Membership {
                    pool: false,
                    slot_live: false,
                    ..member(false)
                },
                PoolChange::PoolNotFound,
            ),
            (
                Membership {
                    slot_live: false,
                    ..member(false)
                },
                PoolChange::SlotNotFound,
            ),
            (
                Membership {
                    pools_of_slot: MAX_POOLS_PER_SLOT,
                    ..member(false)
                },
                PoolChange::TooManyPools,
            ),
        ];
        for (membership, expected) in cases {
            let mut s = script((5, 3, 0, 0), &[false]);
            s.membership = membership;
            let step = run(&mut s, PoolEdit::Attach(SlotId(4)), PoolAttempt::First).await;
            assert!(!step.keep);
            assert_eq!(answer(&step), &expected, "{membership:?}");
        }
        let mut s = script((5, 3, 0, 0), &[false]);
        s.membership = member(true);
        let step = run(&mut s, PoolEdit::Attach(SlotId(4)), PoolAttempt::First).await;
        assert!(
            step.keep && matches!(answer(&step), PoolChange::Applied(_)),
            "attached already"
        );
        let detach = PoolEdit::Detach(SlotId(4));
        let inconsistent = edit_pool(&mut s, PoolId(7), detach, PoolAttempt::First, at(0)).await;
        assert!(
            inconsistent.is_err(),
            "a detach of an attached slot that changed nothing"
        );
        s.membership = member(false);
        let step = run(&mut s, PoolEdit::Detach(SlotId(4)), PoolAttempt::First).await;
        assert!(
            step.keep && matches!(answer(&step), PoolChange::Applied(_)),
            "detached already"
        );
        let mut s = script((5, 3, 0, 0), &[false]);
        s.pool = None;
        let step = run(
            &mut s,
            PoolEdit::Capacity(CapacityChange::To(1)),
            PoolAttempt::First,
        )
        .await;
        assert_eq!(answer(&step), &PoolChange::PoolNotFound);
        let mut s = script((5, 3, 0, 0), &[false]);
        let step = run(
            &mut s,
            PoolEdit::Capacity(CapacityChange::To(5)),
            PoolAttempt::First,
        )
        .await;
        assert!(
            step.keep && matches!(answer(&step), PoolChange::Applied(_)),
            "already at 5"
        );
    }

    #[tokio::test]
    async fn short_for_expired_units_the_second_attempt_reclaims_first() {
        // Capacity 5, 1 stored free, 2 more expired: down to 2 takes 3 free units.
        let mut s = script((5, 1, 0, 2), &[false]);
        let lower = PoolEdit::Capacity(CapacityChange::To(2));
        let step = run(&mut s, lower, PoolAttempt::First).await;
        assert_eq!((step.value(), step.keep), (&PoolEdited::Short, false));
        assert_eq!(s.done, ["update", "pool"], "nothing reclaimed on the first");
        let mut s = script((5, 1, 0, 2), &[true]);
        let step = run(&mut s, lower, PoolAttempt::Reclaiming).await;
        assert!(step.keep && matches!(answer(&step), PoolChange::Applied(_)));
        assert_eq!(s.done, ["reclaim None", "update", "pool", "serve [] [7]"]);
        // Down to 1 takes 4: even the expired units would not do.
        let mut s = script((5, 1, 0, 2), &[false]);
        let step = run(
            &mut s,
            PoolEdit::Capacity(CapacityChange::To(1)),
            PoolAttempt::First,
        )
        .await;
        assert!(!step.keep && matches!(answer(&step), PoolChange::InUse(_)));
        // Refused on the second attempt too, the pool is in use (and the unit undone).
        let mut s = script((5, 1, 0, 2), &[false]);
        let step = run(&mut s, lower, PoolAttempt::Reclaiming).await;
        assert!(!step.keep && matches!(answer(&step), PoolChange::InUse(_)));
    }

    #[tokio::test]
    async fn an_attach_counts_the_slots_expired_units_free() {
        // The slot takes 2 units, 1 of them expired; the pool has 1 free.
        let mut s = script((3, 1, 2, 0), &[false]);
        let step = run(&mut s, PoolEdit::Attach(SlotId(4)), PoolAttempt::First).await;
        assert_eq!(step.value(), &PoolEdited::Short);
        assert_eq!(s.done, ["update", "membership", "slot", "pool"]);
        let mut s = script((3, 1, 2, 0), &[true]);
        run(&mut s, PoolEdit::Attach(SlotId(4)), PoolAttempt::Reclaiming).await;
        assert_eq!(s.done[0], "reclaim Some(4)");
        // None free: the slot's unit held stays taken.
        let mut s = script((3, 0, 3, 0), &[false]);
        let step = run(&mut s, PoolEdit::Attach(SlotId(4)), PoolAttempt::First).await;
        assert!(matches!(answer(&step), PoolChange::InUse(_)));
    }
}
