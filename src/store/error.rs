//! [`StoreError`]: a store's failure, with its kind (may a retry work?) and its source chain.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// Whether retrying the same call later may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreErrorKind {
    /// The store could not be reached or did not answer in time (connection refused or lost,
    /// pool exhausted, timeout, database busy). Retrying later may work.
    Unavailable,
    /// Anything else: a constraint the store did not expect, data it cannot decode, a bug.
    Failed,
}

/// A failure inside a store. Cheap to clone, so one failed availability load can be handed to
/// every waiting reader.
#[derive(Clone)]
pub struct StoreError {
    kind: StoreErrorKind,
    source: Arc<dyn StdError + Send + Sync>,
}

impl StoreError {
    /// A failure that may go away on retry.
    pub fn unavailable(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        StoreError {
            kind: StoreErrorKind::Unavailable,
            source: Arc::from(source.into()),
        }
    }

    /// Any other failure.
    pub fn failed(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        StoreError {
            kind: StoreErrorKind::Failed,
            source: Arc::from(source.into()),
        }
    }

    /// Which kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Whether retrying later may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind == StoreErrorKind::Unavailable
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreError")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            StoreErrorKind::Unavailable => write!(f, "store unavailable: {}", self.source),
            StoreErrorKind::Failed => write!(f, "store failed: {}", self.source),
        }
    }
}

impl StdError for StoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}
