//! How long a cache serves a value, and why a read produced none.

use std::time::Duration;

/// How long a cached value is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// How long after its load began a value is fresh (served without any load).
    pub fresh_for: Duration,
    /// How long after it stops being fresh a value may still be served while a refresh runs
    /// or after a refresh failed. Past that, readers wait for a load.
    pub serve_stale_for: Duration,
}

impl Default for CacheConfig {
    /// Fresh for 10 seconds, then served stale for up to 60 more.
    fn default() -> Self {
        CacheConfig {
            fresh_for: Duration::from_secs(10),
            serve_stale_for: Duration::from_secs(60),
        }
    }
}

/// Why a read produced no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError<E> {
    /// The loader returned an error (not cached).
    #[error("load failed: {0}")]
    Load(E),
    /// The loader panicked, or its task was cancelled by a runtime shutting down, or there was
    /// no tokio runtime to run it on.
    #[error("load aborted before it produced a value")]
    LoadAborted,
}
