//! Taking units once more after a reclaim, the one rule every store follows for a hold and a
//! booking's line: [`take_with_refill`] over a store's [`RefillOps`].
//!
//! An attempt that finds its slot or a pool of it short *as stored* (its `remaining`, the
//! expired holds not yet given back) reclaims the slot's expired holds and tries again; if a
//! pool is still short then, it reclaims the expired holds of the short pools' slots (the
//! pool refill) and tries once more. The last attempt is the answer: the store's unit of
//! work keeps the reclaims only if the write it made room for stays.
//!
//! The pool refill locks the pools' other slots, which may come before the slot this unit of
//! work holds in the lock order (slots by id, then pools by id). A store that writes alone
//! (SQLite) refills in place ([`Refill::InPlace`]); one whose writers run side by side refills
//! in a unit of work of its own ([`Refill::InOwnStep`]): the rule answers
//! [`Attempt::RefillApart`], the store undoes its unit of work, refills, and runs the write
//! again, whose ops then answer [`Refill::Nothing`] so that the write is tried once more
//! only once.

use async_trait::async_trait;

use super::error::StoreError;

/// What one attempt to take units found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt<T> {
    /// Settled: the units taken, or an answer no reclaim can change (sold out as decided by
    /// the statement, a key in use, ...).
    Done(T),
    /// Short as stored: the slot (`pool` false) or a pool of it (`pool` true).
    Short {
        /// A pool of the slot was short, the slot itself not.
        pool: bool,
    },
    /// Only [`take_with_refill`] answers this, never an attempt: a pool is short and the store
    /// refills pools in a unit of work of their own ([`Refill::InOwnStep`]). Undo this unit of
    /// work, refill, and run the write again.
    RefillApart,
}

/// Where a store refills short pools (see the module's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refill {
    /// Refilled in this unit of work: the rule tries once more.
    InPlace,
    /// Not done: the store refills in a unit of work of its own, before this write runs again
    /// (the rule answers [`Attempt::RefillApart`]).
    InOwnStep,
    /// Nothing to refill (an earlier unit of work of this write refilled already, or no refill
    /// could serve this write: anyone waits in the short pool's line, and nobody takes units
    /// past a waiting line): the attempt stands.
    Nothing,
}

/// The primitives [`take_with_refill`] needs of a store, in the unit of work of one write.
#[async_trait]
pub trait RefillOps: Send {
    /// What a settled attempt answers.
    type Done: Send;

    /// Tries to take the units, by rows affected.
    async fn attempt(&mut self) -> Result<Attempt<Self::Done>, StoreError>;

    /// Reclaims the slot's expired held holds: `hold_expired` each, units back to the slot and
    /// its pools. Whether an attempt now may find what the last did not: a store whose unit of
    /// work holds the slot's lock answers whether it reclaimed any; one whose writes may have
    /// reclaimed beside it, `true`.
    async fn reclaim_slot(&mut self) -> Result<bool, StoreError>;

    /// Reclaims the expired held holds of the slots of the slot's pools that are short, or
    /// says why not here.
    async fn refill_pools(&mut self) -> Result<Refill, StoreError>;
}

/// After `first`, an attempt as stored: when it was short, the slot's reclaim and a second
/// attempt, and when a pool is still short then, the pool refill and a third (see the
/// module's docs). Returns the last attempt, or [`Attempt::RefillApart`].
pub async fn take_with_refill<O: RefillOps + ?Sized>(
    ops: &mut O,
    first: Attempt<O::Done>,
) -> Result<Attempt<O::Done>, StoreError> {
    let Attempt::Short { pool } = first else {
        return Ok(first);
    };
    let second = match ops.reclaim_slot().await? {
        true => ops.attempt().await?,
        false => Attempt::Short { pool },
    };
    if !matches!(second, Attempt::Short { pool: true }) {
        return Ok(second);
    }
    match ops.refill_pools().await? {
        Refill::InPlace => ops.attempt().await,
        Refill::InOwnStep => Ok(Attempt::RefillApart),
        Refill::Nothing => Ok(second),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attempts answered from a script; what was done, in order.
    struct Script {
        answers: Vec<Attempt<u8>>,
        reclaimed: bool,
        refill: Refill,
        done: Vec<&'static str>,
    }

    #[async_trait]
    impl RefillOps for Script {
        type Done = u8;

        async fn attempt(&mut self) -> Result<Attempt<u8>, StoreError> {
            self.done.push("attempt");
            Ok(self.answers.remove(0))
        }

        async fn reclaim_slot(&mut self) -> Result<bool, StoreError> {
            self.done.push("reclaim");
            Ok(self.reclaimed)
        }

        async fn refill_pools(&mut self) -> Result<Refill, StoreError> {
            self.done.push("refill");
            Ok(self.refill)
        }
    }

    async fn run(
        first: Attempt<u8>,
        answers: Vec<Attempt<u8>>,
    ) -> (Attempt<u8>, Vec<&'static str>) {
        run_with(first, answers, true, Refill::InPlace).await
    }

    async fn run_with(
        first: Attempt<u8>,
        answers: Vec<Attempt<u8>>,
        reclaimed: bool,
        refill: Refill,
    ) -> (Attempt<u8>, Vec<&'static str>) {
        let mut script = Script {
            answers,
            reclaimed,
            refill,
            done: Vec::new(),
        };
        match take_with_refill(&mut script, first).await {
            Ok(last) => (last, script.done),
            Err(error) => panic!("{error}"),
        }
    }

    #[tokio::test]
    async fn a_settled_first_attempt_reclaims_nothing() {
        assert_eq!(
            run(Attempt::Done(1), vec![]).await,
            (Attempt::Done(1), vec![])
        );
    }

    #[tokio::test]
    async fn a_short_slot_is_reclaimed_and_tried_once_more() {
        let short = Attempt::Short { pool: false };
        let (last, done) = run(short.clone(), vec![short.clone()]).await;
        assert_eq!((last, done), (short, vec!["reclaim", "attempt"]));
    }

    #[tokio::test]
    async fn a_pool_still_short_is_refilled_and_tried_a_last_time() {
        let pool = Attempt::Short { pool: true };
        let (last, done) = run(pool.clone(), vec![pool, Attempt::Done(7)]).await;
        let expected = vec!["reclaim", "attempt", "refill", "attempt"];
        assert_eq!((last, done), (Attempt::Done(7), expected));
    }

    #[tokio::test]
    async fn nothing_reclaimed_under_the_slots_lock_is_not_tried_again() {
        let short = Attempt::Short { pool: false };
        let (last, done) = run_with(short.clone(), vec![], false, Refill::InPlace).await;
        assert_eq!((last, done), (short, vec!["reclaim"]));
        // A pool short as the first attempt found it goes on to the refill.
        let pool = Attempt::Short { pool: true };
        let (last, done) = run_with(pool, vec![Attempt::Done(3)], false, Refill::InPlace).await;
        assert_eq!(
            (last, done),
            (Attempt::Done(3), vec!["reclaim", "refill", "attempt"])
        );
    }

    #[tokio::test]
    async fn a_refill_in_its_own_step_undoes_this_one_and_then_stands() {
        let pool = Attempt::Short { pool: true };
        let first = vec![pool.clone()];
        let (last, done) = run_with(pool.clone(), first, true, Refill::InOwnStep).await;
        let expected = vec!["reclaim", "attempt", "refill"];
        assert_eq!((last, done), (Attempt::RefillApart, expected));
        // Run again after the refill: a pool still short is the answer, tried no more.
        let again = vec![pool.clone()];
        let (last, done) = run_with(pool.clone(), again, true, Refill::Nothing).await;
        let expected = vec!["reclaim", "attempt", "refill"];
        assert_eq!((last, done), (pool, expected));
    }
}
