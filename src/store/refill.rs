//! Taking units once more after a reclaim, the one rule every store follows for a hold and a
//! booking's line: [`take_with_refill`] over a store's [`RefillOps`].
//!
//! An attempt that finds its slot or a pool of it short *as stored* (its `remaining`, the
//! expired holds not yet given back) reclaims the slot's expired holds and tries again; if a
//! pool is still short then, it reclaims the expired holds of the short pools' slots (the
//! pool refill) and tries once more. The last attempt is the answer: the store's unit of
//! work keeps the reclaims only if the write it made room for stays.

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
}

/// The primitives [`take_with_refill`] needs of a store, in the unit of work of one write.
#[async_trait]
pub trait RefillOps: Send {
    /// What a settled attempt answers.
    type Done: Send;

    /// Tries to take the units, by rows affected.
    async fn attempt(&mut self) -> Result<Attempt<Self::Done>, StoreError>;

    /// Reclaims the slot's expired held holds: `hold_expired` each, units back to the slot and
    /// its pools.
    async fn reclaim_slot(&mut self) -> Result<(), StoreError>;

    /// Reclaims the expired held holds of the slots of the slot's pools that are short.
    async fn refill_pools(&mut self) -> Result<(), StoreError>;
}

/// After `first`, an attempt as stored: when it was short, the slot's reclaim and a second
/// attempt, and when a pool is still short then, the pool refill and a third (see the
/// module's docs). Returns the last attempt.
pub async fn take_with_refill<O: RefillOps + ?Sized>(
    ops: &mut O,
    first: Attempt<O::Done>,
) -> Result<Attempt<O::Done>, StoreError> {
    if let Attempt::Done(_) = first {
        return Ok(first);
    }
    ops.reclaim_slot().await?;
    match ops.attempt().await? {
        Attempt::Short { pool: true } => {
            ops.refill_pools().await?;
            ops.attempt().await
        }
        second => Ok(second),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attempts answered from a script; what was done, in order.
    struct Script {
        answers: Vec<Attempt<u8>>,
        done: Vec<&'static str>,
    }

    #[async_trait]
    impl RefillOps for Script {
        type Done = u8;

        async fn attempt(&mut self) -> Result<Attempt<u8>, StoreError> {
            self.done.push("attempt");
            Ok(self.answers.remove(0))
        }

        async fn reclaim_slot(&mut self) -> Result<(), StoreError> {
            self.done.push("reclaim");
            Ok(())
        }

        async fn refill_pools(&mut self) -> Result<(), StoreError> {
            self.done.push("refill");
            Ok(())
        }
    }

    async fn run(
        first: Attempt<u8>,
        answers: Vec<Attempt<u8>>,
    ) -> (Attempt<u8>, Vec<&'static str>) {
        let mut script = Script {
            answers,
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
}
