//! Tracing spans and metrics: what the engine records about every operation and about its
//! availability cache.
//!
//! The engine records through two facades and never installs anything itself:
//!
//! - **[`tracing`]** spans, at `DEBUG` level with target `slot_booking`: one per engine
//!   operation, named after the [`Operation`] (`hold`, `confirm`, …), with the fields
//!   `slot_id`, `hold_id` (when known: a new hold's id is recorded once the store created it),
//!   `outcome` (`ok` or the error's [`code`](BookingError::code)), `store_us` (microseconds
//!   spent awaiting the store), `replayed` (a hold), `cache` (`fresh`, `stale` or `loaded`,
//!   for availability) and `transaction` (`true` for writes in the caller's transaction,
//!   [`EngineTransaction`](crate::EngineTransaction)); and one `cache_load` span per availability load, a child of
//!   the read that started it, with `outcome` and `store_us`. A store's own spans and events
//!   (sqlx's queries, say) nest inside the operation's span.
//! - **[`metrics`]**: the counters and histogram named by the constants below. Labels are
//!   static strings: `operation` is an [`Operation::name`], `outcome` is [`OK`] or a
//!   [`BookingError::code`].
//!
//! | metric | kind | labels | counts |
//! |---|---|---|---|
//! | [`OPERATIONS`] | counter | `operation`, `outcome` | every call of an engine operation, refusals and validation errors included |
//! | [`STORE_SECONDS`] | histogram (seconds) | `operation` | each store call's latency: the time the engine awaited it |
//! | [`CACHE_HITS`] | counter | | availability reads served a fresh cached listing, with no store read |
//! | [`CACHE_STALE_SERVES`] | counter | | reads served the previous listing while a refresh runs (or after one failed) |
//! | [`CACHE_MISSES`] | counter | | reads that waited for a load (nothing cached, expired, or invalidated) |
//! | [`CACHE_LOADS`] | counter | `outcome` | availability loads from the store, however many readers shared each |
//!
//! # Cost when nothing listens
//!
//! Both are always compiled in (no cargo feature to forget) and cost next to nothing without
//! a subscriber or recorder. Unless tracing's global level filter admits `DEBUG` (one atomic
//! load), an operation makes no span at all. Without a recorder, an operation's counters are
//! one visit to `metrics`' no-op recorder (a thread-local and an atomic load). Every metric key
//! is a `static` built at compile time, operation and outcome labels included, so recording
//! allocates and hashes nothing (only a code missing from [`BookingError::CODES`], which a unit
//! test rules out, would build its key on the spot). The clock is read for latency around store calls
//! only: a cache hit reads none. The cache-hit benchmark (`benches/cache.rs`, with
//! `CACHE_HIT_LOOP`) compares the cached read with the engine before observability: the same
//! within noise with nothing installed.
//!
//! # Seeing it
//!
//! Install any `metrics` recorder (the example server uses `metrics-exporter-prometheus` and
//! serves `GET /metrics`) and any `tracing` subscriber that enables `slot_booking=debug`.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
//! use slot_booking::{observe, BookingEngine, MemoryStore, NewSlot};
//!
//! /// Counts holds placed: the `operations` counter of `hold`, `ok`.
//! #[derive(Default)]
//! struct HoldsPlaced(Arc<AtomicU64>);
//!
//! impl Recorder for HoldsPlaced {
//!     fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
//!     fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
//!     fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
//!     fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
//!         let labels: Vec<_> = key.labels().map(|l| (l.key(), l.value())).collect();
//!         if key.name() == observe::OPERATIONS
//!             && labels == [("operation", "hold"), ("outcome", observe::OK)]
//!         {
//!             Counter::from_arc(Arc::clone(&self.0))
//!         } else {
//!             Counter::noop()
//!         }
//!     }
//!     fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
//!         Gauge::noop()
//!     }
//!     fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
//!         Histogram::noop()
//!     }
//! }
//!
//! let recorder = HoldsPlaced::default();
//! let placed = Arc::clone(&recorder.0);
//! let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! // A local recorder covers this thread only: the current-thread runtime keeps every task here.
//! metrics::with_local_recorder(&recorder, || {
//!     runtime.block_on(async {
//!         let engine = BookingEngine::new(MemoryStore::new());
//!         let start = chrono::Utc::now() + chrono::Duration::days(1);
//!         let slot = engine
//!             .create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 2))
//!             .await?;
//!         engine.hold(slot.slot_id, "order-1").await?;
//!         Ok::<_, slot_booking::BookingError>(())
//!     })
//! })?;
//! assert_eq!(placed.load(Ordering::Relaxed), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cache_metrics;
mod catalogue;
mod op;
mod operation;
mod outcome;
#[cfg(test)]
mod tests;

pub use catalogue::{
    describe, CACHE_HITS, CACHE_LOADS, CACHE_MISSES, CACHE_STALE_SERVES, OK, OPERATIONS,
    OPERATION_LABEL, OUTCOME_LABEL, STORE_SECONDS, TARGET,
};
pub(crate) use op::Op;
pub use operation::Operation;
pub use outcome::outcome;

#[cfg(doc)]
use crate::error::BookingError;

/// The metadata of every metric recorded; defined here so that its module path stays
/// `slot_booking::observe`.
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(TARGET, metrics::Level::INFO, Some(module_path!()));

/// How an availability read was served by the cache, as [`CACHE_HITS`],
/// [`CACHE_STALE_SERVES`] and [`CACHE_MISSES`] count it.
pub use crate::cache::Served;
