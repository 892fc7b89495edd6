//! Commit-time conflicts: which errors are one, and the error a step that lost one reports.
//!
//! On one server, InnoDB ends a transaction it chose as a deadlock victim (error 1213) or whose
//! lock wait timed out (1205). On a Galera cluster, a transaction that ran on one node can
//! still fail when it commits: certification finds that a transaction committed on another
//! node first wrote the same rows, and the loser gets 1213 at `COMMIT` (or at its next
//! statement, if it was aborted meanwhile). Rows affected inside such a transaction decided
//! nothing, so the store answers only once its commit succeeded, and retries the whole atomic
//! step on a conflict: a fresh transaction that decides again on fresh rows. A conflict is
//! retried (`retry.rs`); when the retries run out the caller gets
//! [`StoreError::unavailable`], whose source is the last conflict.

use slot_booking::StoreError;

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
