//! Transactions of writes that commit or roll back, checked against a draft of the model.

use std::future::Future;

use chrono::Duration;
use proptest::prelude::*;

use crate::conformance::{Fixture, HOLD_TTL};
use crate::transaction::TransactionalStore;
use crate::Clock;

use super::ops::ModelOp;
use super::reference::Model;
use super::runner::{check_state, run_property};
use super::strategies::op;
use super::writes::{is_write, write_step};
use super::Mismatch;

/// One transaction of a transactional sequence: writes run together in a caller's
/// transaction, which then commits or rolls back; then the clock moves.
#[derive(Clone, Debug)]
pub struct TransactionStep {
    /// The writes, in order (only the operations an [`EngineTransaction`](crate::EngineTransaction) offers).
    pub ops: Vec<ModelOp>,
    /// Commit (else roll back).
    pub commit: bool,
    /// Microseconds the clock moves afterwards.
    pub advance: i64,
}

fn transaction_step() -> impl Strategy<Value = TransactionStep> {
    let ttl = HOLD_TTL.as_micros() as i64;
    (
        proptest::collection::vec(op().prop_filter("a write", is_write), 1..=5),
        proptest::bool::weighted(0.6),
        prop_oneof![Just(0i64), Just(1_000_000), Just(ttl)],
    )
        .prop_map(|(ops, commit, advance)| TransactionStep {
            ops,
            commit,
            advance,
        })
}

/// Runs transactions against a fresh store; each step's writes are checked against a draft
/// of the model that becomes the model on commit and is dropped on rollback, and after each
/// transaction the store's rows (read outside it) must equal the model's.
async fn run_transactions<S: crate::Store + TransactionalStore>(
    store: S,
    steps: &[TransactionStep],
) -> Result<(), Mismatch> {
    let Fixture { engine, clock } = Fixture::new(store);
    let mut model = Model::default();
    for (capacity, starts_in) in [(4, 3600), (1, 600)] {
        let op = ModelOp::CreateSlot {
            capacity,
            starts_in,
            resource: 0,
        };
        let (expected, actual) = write_step(&mut &engine, &mut model, &op, clock.now()).await;
        ensure!(
            expected == actual,
            "setup {op:?}: {expected:?} != {actual:?}"
        );
    }
    let store = engine.store();
    for (number, step) in steps.iter().enumerate() {
        let now = clock.now();
        let mut transaction = store
            .begin()
            .await
            .map_err(|e| Mismatch(format!("begin: {e}")))?;
        let mut draft = model.clone();
        {
            let mut within = engine.within(store.writes(&mut transaction));
            for op in &step.ops {
                let (expected, actual) = write_step(&mut within, &mut draft, op, now).await;
                ensure!(
                    expected == actual,
                    "transaction {number} {op:?}: model says {expected:?}, store gave {actual:?}"
                );
            }
        }
        if step.commit {
            store
                .commit(transaction)
                .await
                .map_err(|e| Mismatch(format!("commit: {e}")))?;
            model = draft;
        } else {
            store
                .rollback(transaction)
                .await
                .map_err(|e| Mismatch(format!("rollback: {e}")))?;
        }
        check_state(&engine, &model, now)
            .await
            .map_err(|Mismatch(m)| {
                let ended = if step.commit { "commit" } else { "rollback" };
                Mismatch(format!("after transaction {number} ({ended}): {m}"))
            })?;
        clock.advance(Duration::microseconds(step.advance));
    }
    Ok(())
}

/// Runs `cases` random sequences of transactions (more with `PROPTEST_CASES`), each against a
/// fresh store from `factory`, and panics with the shrunk failing sequence.
///
/// # Panics
///
/// When a transaction's outcomes, or the state after it commits or rolls back, differ from
/// the model's.
pub fn check_transactional<S, F, Fut>(factory: F, cases: u32)
where
    S: crate::Store + TransactionalStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    let transactions = proptest::collection::vec(transaction_step(), 1..=8);
    run_property(
        "transaction model check",
        cases,
        2,
        &transactions,
        factory,
        |store, steps| async move { run_transactions(store, &steps).await },
    );
}
