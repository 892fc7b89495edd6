//! The retry of a step that lost a commit-time conflict ([`Conflict`](crate::conflict::Conflict),
//! `conflict.rs`): the whole atomic step runs again in a fresh transaction that decides again
//! on fresh rows. Retries are bounded, with exponential back-off and full jitter; when they
//! run out the caller gets [`StoreError::unavailable`], whose source is the last conflict.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use slot_booking::StoreError;

use crate::conflict::is_conflict;

/// How a store retries a step that lost a commit-time conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub attempts: u32,
    /// The pause before the first retry is drawn from zero to this; each retry doubles it.
    pub base: Duration,
    /// The longest pause drawn.
    pub cap: Duration,
}

/// Thirty-two attempts, pauses drawn up to 4 ms doubling to at most 250 ms: enough for
/// bookings of overlapping slots raced from every node of a three-node cluster at once (the
/// cluster's booking conformance suite, on a loaded 2-core machine: 16 attempts ran out there),
/// at most about 7 s of pauses in all, which only a slot fought over from every node nears.
pub const DEFAULT_RETRY_POLICY: RetryPolicy = RetryPolicy {
    attempts: 32,
    base: Duration::from_millis(4),
    cap: Duration::from_millis(250),
};

impl Default for RetryPolicy {
    fn default() -> Self {
        DEFAULT_RETRY_POLICY
    }
}

/// One step's attempts.
pub(crate) struct Retry<'a> {
    policy: RetryPolicy,
    attempt: u32,
    /// The store's count of conflicts retried.
    retried: &'a AtomicU64,
}

impl<'a> Retry<'a> {
    pub(crate) fn new(policy: RetryPolicy, retried: &'a AtomicU64) -> Self {
        Retry {
            policy,
            attempt: 1,
            retried,
        }
    }

    /// Whether to run the step again after `error`: a conflict with attempts left, after a
    /// jittered pause.
    pub(crate) async fn again(&mut self, error: &StoreError) -> bool {
        if !is_conflict(error) || self.attempt >= self.policy.attempts {
            return false;
        }
        let ceiling = self
            .policy
            .base
            .saturating_mul(1 << (self.attempt - 1).min(16))
            .min(self.policy.cap);
        self.attempt += 1;
        self.retried.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(jitter(ceiling)).await;
        true
    }
}

/// A pause drawn evenly from zero to `ceiling` (full jitter), from a per-process xorshift
/// sequence: contenders that collided draw different pauses.
fn jitter(ceiling: Duration) -> Duration {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        x = u64::from(nanos) ^ (u64::from(std::process::id()) << 32) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    let micros = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(x % micros.saturating_add(1))
}

/// Runs `$step` (an expression using `$conn`, a `&mut MySqlConnection` inside a transaction
/// begun on `$store`'s pool, yielding `Result<Step<T>, StoreError>`), then commits or rolls
/// back as the step says, and answers only then; a commit-time conflict runs the whole step
/// again in a new transaction, as the store's [`RetryPolicy`] allows.
macro_rules! in_transaction {
    ($store:expr, |$conn:ident| $step:expr) => {{
        let store: &$crate::MySqlStore = $store;
        let mut retry = $crate::retry::Retry::new(store.retry_policy(), store.retried());
        loop {
            let outcome = async {
                let mut pooled = $crate::pooled::Pooled::acquire(store).await?;
                let mut tx = sqlx::Connection::begin(&mut *pooled)
                    .await
                    .map_err($crate::map_err)?;
                let step = {
                    let $conn: &mut sqlx::mysql::MySqlConnection = &mut tx;
                    $step.await
                };
                let outcome = $crate::units::finish_unit(tx, step).await;
                pooled.done();
                outcome
            }
            .await;
            match outcome {
                Err(error) if retry.again(&error).await => continue,
                other => break other,
            }
        }
    }};
}

pub(crate) use in_transaction;

/// Runs the read `$read` (an expression using `$conn`, a `&mut MySqlConnection`, yielding
/// `Result<T, StoreError>`) for `$run` (a `&mut Run`, `run.rs`): once on the caller's connection, which
/// sees the caller's transaction; on a connection of the pool otherwise, and again after a
/// conflict, with the store's retry policy. A read changes nothing, so running it again is
/// always safe, and on Galera a read can lose as a write does: a causal read
/// (`wsrep_sync_wait`) that waited too long for its node to apply the cluster's writes answers
/// 1205 (seen here once in the cluster's booking model under load), and a node rejoining
/// answers 1047.
macro_rules! reading {
    ($run:expr, |$conn:ident| $read:expr) => {{
        let run = $run;
        let store: &$crate::MySqlStore = run.store;
        match run.caller.as_deref_mut() {
            Some($conn) => $read.await,
            None => {
                let mut retry = $crate::retry::Retry::new(store.retry_policy(), store.retried());
                loop {
                    let outcome = async {
                        let mut pooled = $crate::pooled::Pooled::acquire(store).await?;
                        let read = {
                            let $conn: &mut sqlx::mysql::MySqlConnection = &mut pooled;
                            $read.await
                        };
                        pooled.done();
                        read
                    }
                    .await;
                    match outcome {
                        Err(error) if retry.again(&error).await => continue,
                        other => break other,
                    }
                }
            }
        }
    }};
}

pub(crate) use reading;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_under_its_ceiling() {
        for _ in 0..1000 {
            assert!(jitter(Duration::from_millis(3)) <= Duration::from_millis(3));
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn only_conflicts_are_retried() {
        let failed = StoreError::failed("a permanent failure");
        assert!(!is_conflict(&failed));
        let unavailable = StoreError::unavailable(sqlx::Error::PoolTimedOut);
        assert!(!is_conflict(&unavailable));
    }
}
