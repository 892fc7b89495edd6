//! Commit-time conflicts and their retry.
//!
//! On one server, InnoDB ends a transaction it chose as a deadlock victim (error 1213) or whose
//! lock wait timed out (1205). On a Galera cluster, a transaction that ran on one node can
//! still fail when it commits: certification finds that a transaction committed on another
//! node first wrote the same rows, and the loser gets 1213 at `COMMIT` (or at its next
//! statement, if it was aborted meanwhile). Rows affected inside such a transaction decided
//! nothing, so the store answers only once its commit succeeded, and retries the whole atomic
//! step on a conflict: a fresh transaction that decides again on fresh rows. Retries are
//! bounded, with exponential back-off and full jitter; when they run out the caller gets
//! [`StoreError::unavailable`], whose source is the last conflict.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use slot_booking::StoreError;

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

/// A commit-time conflict: the database ended the transaction so that another could go on.
/// It is [`StoreError::unavailable`]'s source when the retries ran out.
#[derive(Debug, thiserror::Error)]
#[error("the transaction lost a conflict (MySQL error {code}) and was rolled back")]
pub struct Conflict {
    /// The server's error number: 1213 (deadlock or Galera certification failure), 1205
    /// (lock wait timeout), a Galera error (1047, 1180), 1305 (the step's savepoint gone
    /// with its aborted transaction) or 1792 (a write after the transaction was gone: see
    /// the crate docs, "No step commits in pieces"). A transaction found gone without any
    /// error is reported as 1213.
    pub code: u16,
    #[source]
    source: Option<sqlx::Error>,
}

impl Conflict {
    /// A transaction the server ended (on Galera, aborted for a transaction another node
    /// committed) without any statement of the step reporting it.
    pub(crate) fn lost() -> Self {
        Conflict {
            code: 1213,
            source: None,
        }
    }
}

/// MySQL error numbers that end a transaction which would succeed if run again: deadlock and
/// Galera certification failure (1213), lock wait timeout (1205), a node not ready for
/// queries while it rejoins (1047, `WSREP has not yet prepared node`), a commit the
/// provider refused (1180, `Got error ... during COMMIT`), a savepoint of the store's own
/// that no longer exists (1305: on Galera, when a transaction committed on another node
/// aborts this one between two statements, a `ROLLBACK TO SAVEPOINT` is the statement that
/// finds it gone), and a write refused as outside any read-write transaction (1792: the
/// step's transaction was ended under it, and the session's default is read-only while a
/// step runs, so the write did not run on its own).
const CONFLICTS: [u16; 6] = [1213, 1205, 1047, 1180, 1305, 1792];

/// The conflict `error` is, if it is one.
pub(crate) fn conflict(error: sqlx::Error) -> Result<Conflict, sqlx::Error> {
    let code = match &error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number()),
        _ => None,
    };
    match code {
        Some(code) if CONFLICTS.contains(&code) => Ok(Conflict {
            code,
            source: Some(error),
        }),
        _ => Err(error),
    }
}

/// Whether `error` is a conflict worth another attempt.
pub(crate) fn is_conflict(error: &StoreError) -> bool {
    std::error::Error::source(error).is_some_and(|source| source.is::<Conflict>())
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
