//! A single-flight cache for one value, with stale-while-revalidate and generation-checked
//! invalidation. It knows nothing about bookings; the engine keeps its availability snapshot in
//! one.
//!
//! Why not an existing crate: `moka` runs a merged load inside the first caller's future (if that
//! caller is dropped the others wait) and has no stale-while-revalidate; `futures`' `Shared`
//! caches errors and poisons on panic; tokio's `OnceCell` never expires. Here every load runs
//! as its own spawned task, so callers can give up without cancelling it.
//!
//! The rules:
//!
//! - **Fresh hit** (C1): while the value is younger than `fresh_for`, a read returns the shared
//!   `Arc` without calling the loader and without copying the value.
//! - **Single flight** (C2): however many readers find the value missing, expired or
//!   invalidated, one load is in flight at a time.
//! - **Stale while revalidate** (C3): once `fresh_for` has passed (but not `fresh_for +
//!   serve_stale_for`), readers get the old value at once while one refresh runs in the
//!   background. The refresh completes even if every reader goes away.
//! - **Invalidation** (C4): [`SingleFlightCache::invalidate`] bumps a generation counter: it is
//!   synchronous and O(1). A read that starts after it returns never receives a value whose load
//!   started before it; a load that started before it is never stored.
//! - **Errors** (C5): a failed load is not cached. Readers that had a usable stale copy were
//!   already given it; the next read tries again.
//! - **Cancellation and panics** (C6): dropping any reader, or a loader that panics, never leaves
//!   other readers waiting or the cache stuck: waiters get [`CacheError::LoadAborted`] and the
//!   next read starts a new load.

mod config;
mod single_flight;
mod snapshot;
#[cfg(test)]
mod tests;

pub use config::{CacheConfig, CacheError};
pub use single_flight::{Patched, SingleFlightCache};
pub use snapshot::{Served, Snapshot};
