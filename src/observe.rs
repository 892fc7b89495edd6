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
//!   [`Within`](crate::Within)); and one `cache_load` span per availability load, a child of
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
//! allocates and hashes nothing (only an outcome code added to [`BookingError`] after this
//! module would build its key on the spot). The clock is read for latency around store calls
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

use std::future::Future;
use std::time::Instant;

use metrics::{Key, KeyName, Label, Metadata, Unit};
use tracing::field::Empty;
use tracing::{Level, Span};

use crate::error::BookingError;
use crate::model::{HoldId, SlotId};
use crate::store::StoreError;

/// Counter of engine operations, labelled `operation` and `outcome`.
pub const OPERATIONS: &str = "slot_booking_operations_total";
/// Histogram of store call latencies in seconds, labelled `operation`.
pub const STORE_SECONDS: &str = "slot_booking_store_seconds";
/// Counter of availability reads served from a fresh cached listing.
pub const CACHE_HITS: &str = "slot_booking_cache_hits_total";
/// Counter of availability reads served a stale listing while a refresh runs or after it
/// failed.
pub const CACHE_STALE_SERVES: &str = "slot_booking_cache_stale_serves_total";
/// Counter of availability reads that waited for a load.
pub const CACHE_MISSES: &str = "slot_booking_cache_misses_total";
/// Counter of availability loads from the store, labelled `outcome` ([`OK`],
/// `store_unavailable` or `store_failed`).
pub const CACHE_LOADS: &str = "slot_booking_cache_loads_total";

/// The label naming the [`Operation`].
pub const OPERATION_LABEL: &str = "operation";
/// The label naming the outcome: [`OK`] or a [`BookingError::code`].
pub const OUTCOME_LABEL: &str = "outcome";
/// The outcome of a call that succeeded.
pub const OK: &str = "ok";
/// The target of the engine's spans (and of the metrics' metadata).
pub const TARGET: &str = "slot_booking";

/// The static key of `name` with `operation` and `outcome` labels.
macro_rules! outcome_keys {
    ($name:expr, $operation:literal, [$($outcome:literal),*]) => {
        [$(Key::from_static_parts($name, {
            const LABELS: &[Label] = &[
                Label::from_static_parts(OPERATION_LABEL, $operation),
                Label::from_static_parts(OUTCOME_LABEL, $outcome),
            ];
            LABELS
        })),*]
    };
}

/// Declares [`Operation`], its names and spans, the outcomes with static keys, and every key
/// labelled with an operation.
macro_rules! operations {
    (
        outcomes: $outcomes:tt;
        $($(#[doc = $doc:literal])* $variant:ident => $name:literal,)*
    ) => {
        /// Every outcome with keys of their own: [`OK`] and each [`BookingError::code`]. An
        /// outcome not listed (a code added later) is still recorded, through a key built on
        /// the spot.
        const OUTCOMES: &[&str] = &$outcomes;

        /// An engine operation, as spans and metrics name it. Calls on the caller's
        /// transaction ([`Within`](crate::Within)) are the operation of the same name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Operation {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Operation {
            /// Every operation.
            pub const ALL: &'static [Operation] = &[$(Operation::$variant),*];

            /// The operation's name: its span's name and its `operation` label.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Operation::$variant => $name,)*
                }
            }

            /// A new span for one call of this operation (disabled unless a subscriber wants
            /// `slot_booking` at `DEBUG`).
            fn span(self) -> Span {
                match self {
                    $(Operation::$variant => tracing::debug_span!(
                        target: "slot_booking",
                        $name,
                        slot_id = Empty,
                        hold_id = Empty,
                        outcome = Empty,
                        store_us = Empty,
                        replayed = Empty,
                        cache = Empty,
                        transaction = Empty,
                    ),)*
                }
            }
        }

        /// [`STORE_SECONDS`] of each operation, by [`Operation`] index.
        static STORE_KEYS: [Key; Operation::ALL.len()] = [$(Key::from_static_parts(STORE_SECONDS, {
            const LABELS: &[Label] = &[Label::from_static_parts(OPERATION_LABEL, $name)];
            LABELS
        })),*];

        /// [`OPERATIONS`] of each operation and outcome, by [`Operation`] and [`OUTCOMES`]
        /// index.
        static OPERATION_KEYS: [[Key; OUTCOMES.len()]; Operation::ALL.len()] =
            [$(outcome_keys!(OPERATIONS, $name, $outcomes)),*];
    };
}

operations! {
    outcomes: [
        "ok",
        "slot_not_found",
        "slot_closed",
        "sold_out",
        "idempotency_key_reused",
        "quantity_exceeds_capacity",
        "capacity_taken",
        "slot_in_use",
        "invalid_quantity",
        "invalid_lifetime",
        "invalid_owner",
        "invalid_page",
        "invalid_idempotency_key",
        "invalid_slot",
        "invalid_query",
        "hold_not_found",
        "hold_cancelled",
        "hold_expired",
        "lease_lost",
        "store_unavailable",
        "store_failed"
    ];
    /// [`BookingEngine::availability`](crate::BookingEngine::availability).
    Availability => "availability",
    /// [`BookingEngine::place_hold`](crate::BookingEngine::place_hold) (and `hold`).
    Hold => "hold",
    /// [`BookingEngine::confirm_as`](crate::BookingEngine::confirm_as) (and `confirm`).
    Confirm => "confirm",
    /// [`BookingEngine::cancel_as`](crate::BookingEngine::cancel_as) (and `cancel`).
    Cancel => "cancel",
    /// [`BookingEngine::renew_as`](crate::BookingEngine::renew_as) (and `renew`).
    Renew => "renew",
    /// [`BookingEngine::get_hold_as`](crate::BookingEngine::get_hold_as) (and `get_hold`).
    GetHold => "get_hold",
    /// [`BookingEngine::owner_holds`](crate::BookingEngine::owner_holds).
    OwnerHolds => "owner_holds",
    /// [`BookingEngine::slot_holds`](crate::BookingEngine::slot_holds).
    SlotHolds => "slot_holds",
    /// [`BookingEngine::create_slot`](crate::BookingEngine::create_slot).
    CreateSlot => "create_slot",
    /// [`BookingEngine::change_capacity`](crate::BookingEngine::change_capacity).
    ChangeCapacity => "change_capacity",
    /// [`BookingEngine::close_sales`](crate::BookingEngine::close_sales).
    CloseSales => "close_sales",
    /// [`BookingEngine::reopen_sales`](crate::BookingEngine::reopen_sales).
    ReopenSales => "reopen_sales",
    /// [`BookingEngine::remove_slot`](crate::BookingEngine::remove_slot).
    RemoveSlot => "remove_slot",
    /// [`BookingEngine::get_slot`](crate::BookingEngine::get_slot).
    GetSlot => "get_slot",
    /// [`BookingEngine::list_slots`](crate::BookingEngine::list_slots).
    ListSlots => "list_slots",
    /// [`BookingEngine::read_events`](crate::BookingEngine::read_events).
    ReadEvents => "read_events",
    /// [`BookingEngine::acknowledge_events`](crate::BookingEngine::acknowledge_events).
    AcknowledgeEvents => "acknowledge_events",
    /// [`BookingEngine::lease_consumer`](crate::BookingEngine::lease_consumer).
    LeaseConsumer => "lease_consumer",
    /// [`BookingEngine::release_consumer`](crate::BookingEngine::release_consumer).
    ReleaseConsumer => "release_consumer",
    /// [`BookingEngine::reclaim_expired`](crate::BookingEngine::reclaim_expired).
    ReclaimExpired => "reclaim_expired",
    /// [`BookingEngine::purge`](crate::BookingEngine::purge).
    Purge => "purge",
}

static CACHE_HIT_KEY: Key = Key::from_static_name(CACHE_HITS);
static CACHE_STALE_KEY: Key = Key::from_static_name(CACHE_STALE_SERVES);
static CACHE_MISS_KEY: Key = Key::from_static_name(CACHE_MISSES);
/// [`CACHE_LOADS`] by outcome: ok, store_unavailable, store_failed.
static CACHE_LOAD_KEYS: [Key; 3] = [
    Key::from_static_parts(CACHE_LOADS, {
        const LABELS: &[Label] = &[Label::from_static_parts(OUTCOME_LABEL, OK)];
        LABELS
    }),
    Key::from_static_parts(CACHE_LOADS, {
        const LABELS: &[Label] = &[Label::from_static_parts(OUTCOME_LABEL, "store_unavailable")];
        LABELS
    }),
    Key::from_static_parts(CACHE_LOADS, {
        const LABELS: &[Label] = &[Label::from_static_parts(OUTCOME_LABEL, "store_failed")];
        LABELS
    }),
];

static METADATA: Metadata<'static> =
    Metadata::new(TARGET, metrics::Level::INFO, Some(module_path!()));

/// Describes every metric named here (help text and unit) to the current recorder, for
/// exporters that show descriptions (Prometheus' `# HELP` lines). Call it once, after
/// installing the recorder.
pub fn describe() {
    metrics::with_recorder(|recorder| {
        let counters = [
            (
                OPERATIONS,
                "Engine operations by operation and outcome (ok or the error code).",
            ),
            (
                CACHE_HITS,
                "Availability reads served a fresh cached listing.",
            ),
            (
                CACHE_STALE_SERVES,
                "Availability reads served the previous listing while a refresh runs.",
            ),
            (CACHE_MISSES, "Availability reads that waited for a load."),
            (
                CACHE_LOADS,
                "Availability loads from the store, by outcome.",
            ),
        ];
        for (name, help) in counters {
            recorder.describe_counter(
                KeyName::from_const_str(name),
                Some(Unit::Count),
                help.into(),
            );
        }
        recorder.describe_histogram(
            KeyName::from_const_str(STORE_SECONDS),
            Some(Unit::Seconds),
            "Time the engine awaited each store call, by operation.".into(),
        );
    });
}

/// The outcome label of a result: [`OK`] or the error's code.
pub fn outcome<T>(result: &Result<T, BookingError>) -> &'static str {
    match result {
        Ok(_) => OK,
        Err(error) => error.code(),
    }
}

/// How an availability read was served by the cache, as [`CACHE_HITS`],
/// [`CACHE_STALE_SERVES`] and [`CACHE_MISSES`] count it.
pub use crate::cache::Served;

impl Operation {
    #[inline]
    fn index(self) -> usize {
        self as usize
    }
}

/// Whether any `tracing` subscriber may want the engine's (`DEBUG`) spans: tracing's global
/// level filter, one atomic load. Otherwise an operation makes no span at all: not even a
/// disabled one, which tracing's `log` feature (on as soon as any crate in the build asks for
/// it, sqlx does) would check against the `log` crate's level on every enter and exit.
#[inline]
fn listening() -> bool {
    Level::DEBUG <= tracing::level_filters::STATIC_MAX_LEVEL
        && Level::DEBUG <= tracing::level_filters::LevelFilter::current()
}

/// The [`OPERATIONS`] key of `operation` ending in `outcome`; `None` for an outcome without a
/// static key.
fn operation_key(operation: Operation, outcome: &str) -> Option<&'static Key> {
    let keys = &OPERATION_KEYS[operation.index()];
    if outcome == OK {
        return Some(&keys[0]);
    }
    let i = OUTCOMES.iter().position(|known| *known == outcome)?;
    Some(&keys[i])
}

/// The [`CACHE_LOADS`] key of a load ending in `outcome`.
fn cache_load_key(outcome: &str) -> &'static Key {
    match outcome {
        OK => &CACHE_LOAD_KEYS[0],
        "store_unavailable" => &CACHE_LOAD_KEYS[1],
        _ => &CACHE_LOAD_KEYS[2],
    }
}

/// Records one store call of `operation` that took `seconds`.
fn store_latency(operation: Operation, seconds: f64) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_histogram(&STORE_KEYS[operation.index()], &METADATA)
            .record(seconds)
    });
}

/// What a run's result says about its outcome.
pub(crate) trait Outcome {
    /// Whether the call succeeded.
    fn is_ok(&self) -> bool;

    /// [`OK`] or the error's code.
    fn outcome(&self) -> &'static str;
}

impl<T> Outcome for Result<T, BookingError> {
    fn is_ok(&self) -> bool {
        self.is_ok()
    }

    fn outcome(&self) -> &'static str {
        outcome(self)
    }
}

impl<T> Outcome for Result<T, StoreError> {
    fn is_ok(&self) -> bool {
        self.is_ok()
    }

    fn outcome(&self) -> &'static str {
        match self {
            Ok(_) => OK,
            Err(error) if error.is_transient() => "store_unavailable",
            Err(_) => "store_failed",
        }
    }
}

/// What is being observed: an engine operation, or an availability load.
#[derive(Clone, Copy)]
enum Kind {
    Operation,
    CacheLoad,
}

/// One engine operation (or availability load) being observed: its span, the store time
/// around its store call, and its outcome when it ends. The engine's one choke point for
/// observability: every operation runs in [`Op::run`] and awaits its store through
/// [`Op::store`].
pub(crate) struct Op {
    operation: Operation,
    kind: Kind,
    /// `None` when nothing would record it: no subscriber, or one that does not want it.
    span: Option<Span>,
}

/// `span` if a subscriber records it.
fn enabled(span: Span) -> Option<Span> {
    Some(span).filter(|span| !span.is_disabled())
}

impl Operation {
    /// The operation's span, if a subscriber records it.
    #[cold]
    #[inline(never)]
    fn enabled_span(self) -> Option<Span> {
        enabled(self.span())
    }
}

impl Op {
    /// An operation about to run.
    #[inline]
    pub(crate) fn new(operation: Operation) -> Op {
        Op {
            operation,
            kind: Kind::Operation,
            span: if listening() {
                operation.enabled_span()
            } else {
                None
            },
        }
    }

    /// An availability load about to start for the read `parent`, its span that read's child.
    pub(crate) fn cache_load(parent: &Op) -> Op {
        let span = if listening() {
            enabled(tracing::debug_span!(
                target: "slot_booking",
                parent: parent.span.as_ref().and_then(Span::id),
                "cache_load",
                outcome = Empty,
                store_us = Empty,
            ))
        } else {
            None
        };
        Op {
            operation: Operation::Availability,
            kind: Kind::CacheLoad,
            span,
        }
    }

    /// The operation observed.
    pub(crate) fn operation(&self) -> Operation {
        self.operation
    }

    /// Names the slot the operation is about.
    pub(crate) fn slot(self, slot_id: SlotId) -> Op {
        self.record_slot(slot_id);
        self
    }

    /// Records the slot the operation turned out to be about (a hold's, a new slot's).
    pub(crate) fn record_slot(&self, slot_id: SlotId) {
        if let Some(span) = &self.span {
            span.record("slot_id", slot_id.get());
        }
    }

    /// Names the hold the operation is about.
    pub(crate) fn hold(self, hold_id: HoldId) -> Op {
        self.record_hold(hold_id);
        self
    }

    /// Marks an operation run on the caller's transaction.
    pub(crate) fn in_transaction(self) -> Op {
        if let Some(span) = &self.span {
            span.record("transaction", true);
        }
        self
    }

    /// Records the hold the operation turned out to be about (a new hold's id).
    pub(crate) fn record_hold(&self, hold_id: HoldId) {
        if let Some(span) = &self.span {
            span.record("hold_id", hold_id.get());
        }
    }

    /// Records whether a hold was an idempotent replay.
    pub(crate) fn record_replayed(&self, replayed: bool) {
        if let Some(span) = &self.span {
            span.record("replayed", replayed);
        }
    }

    /// Awaits the operation's store call, recording how long that took.
    pub(crate) async fn store<T>(&self, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let result = call.await;
        let elapsed = started.elapsed();
        store_latency(self.operation, elapsed.as_secs_f64());
        if let Some(span) = &self.span {
            span.record(
                "store_us",
                u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            );
        }
        result
    }

    /// Runs the operation inside its span, then records and counts its outcome.
    pub(crate) async fn run<R: Outcome>(&self, body: impl Future<Output = R>) -> R {
        let mut body = std::pin::pin!(body);
        let result = std::future::poll_fn(|cx| {
            let _entered = self.span.as_ref().map(Span::enter);
            body.as_mut().poll(cx)
        })
        .await;
        self.finish(&result, None);
        result
    }

    /// Records and counts the outcome of an operation that ran outside [`Op::run`], with how
    /// the cache served it (availability): one visit to the recorder for both counters.
    #[inline]
    pub(crate) fn finish<R: Outcome>(&self, result: &R, served: Option<Served>) {
        let outcome = result.outcome();
        if let Some(span) = &self.span {
            span.record("outcome", outcome);
            if let Some(served) = served {
                span.record("cache", served.name());
            }
        }
        let key = match self.kind {
            Kind::Operation if result.is_ok() => Some(&OPERATION_KEYS[self.operation.index()][0]),
            Kind::Operation => operation_key(self.operation, outcome),
            Kind::CacheLoad => Some(cache_load_key(outcome)),
        };
        let served = served.map(|served| match served {
            Served::Fresh => &CACHE_HIT_KEY,
            Served::Stale => &CACHE_STALE_KEY,
            Served::Loaded => &CACHE_MISS_KEY,
        });
        metrics::with_recorder(|recorder| {
            match key {
                Some(key) => recorder.register_counter(key, &METADATA).increment(1),
                None => {
                    let labels = vec![
                        Label::new(OPERATION_LABEL, self.operation.name()),
                        Label::new(OUTCOME_LABEL, outcome),
                    ];
                    let key = Key::from_parts(OPERATIONS, labels);
                    recorder.register_counter(&key, &METADATA).increment(1);
                }
            }
            if let Some(key) = served {
                recorder.register_counter(key, &METADATA).increment(1);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use chrono::TimeZone;
    use metrics::{
        Counter, CounterFn, Gauge, Histogram, HistogramFn, KeyName, Recorder, SharedString, Unit,
    };
    use tracing::span::{Attributes, Id, Record};
    use tracing::subscriber::Subscriber;
    use tracing::{Event, Metadata as SpanMetadata};

    use crate::{
        AvailabilityQuery, BookingEngine, BookingError, ManualClock, MemoryStore, NewSlot, Store,
    };

    /// A metric as the test recorder names it: `name{label=value,...}`.
    fn metric(name: &str, labels: &[(&str, &str)]) -> String {
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{name}{{{}}}", labels.join(","))
    }

    /// Counters and histograms by name and labels.
    #[derive(Default)]
    struct TestRecorder {
        counters: Mutex<BTreeMap<String, Arc<TestCounter>>>,
        histograms: Mutex<BTreeMap<String, Arc<TestHistogram>>>,
    }

    #[derive(Default)]
    struct TestCounter(AtomicU64);

    impl CounterFn for TestCounter {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::Relaxed);
        }
        fn absolute(&self, value: u64) {
            self.0.fetch_max(value, Ordering::Relaxed);
        }
    }

    #[derive(Default)]
    struct TestHistogram(Mutex<Vec<f64>>);

    impl HistogramFn for TestHistogram {
        fn record(&self, value: f64) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(value);
        }
    }

    fn name_of(key: &Key) -> String {
        let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        metric(key.name(), &labels)
    }

    impl TestRecorder {
        fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
            self.counters
                .lock()
                .unwrap()
                .get(&metric(name, labels))
                .map_or(0, |c| c.0.load(Ordering::Relaxed))
        }

        fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
            self.histograms
                .lock()
                .unwrap()
                .get(&metric(name, labels))
                .map_or_else(Vec::new, |h| h.0.lock().unwrap().clone())
        }
    }

    impl Recorder for TestRecorder {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let counter = Arc::clone(
                self.counters
                    .lock()
                    .unwrap()
                    .entry(name_of(key))
                    .or_default(),
            );
            Counter::from_arc(counter)
        }

        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }

        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            let histogram = Arc::clone(
                self.histograms
                    .lock()
                    .unwrap()
                    .entry(name_of(key))
                    .or_default(),
            );
            Histogram::from_arc(histogram)
        }
    }

    /// A span as the test subscriber saw it: name, parent's name, and fields as text.
    #[derive(Debug, Clone, Default)]
    struct SeenSpan {
        name: &'static str,
        parent: Option<&'static str>,
        fields: BTreeMap<&'static str, String>,
    }

    impl tracing::field::Visit for SeenSpan {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.fields.insert(field.name(), format!("{value:?}"));
        }
        fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
            self.fields.insert(field.name(), value.to_owned());
        }
    }

    /// Every span created while it is the default subscriber, with its recorded fields.
    #[derive(Clone, Default)]
    struct SpanLog {
        spans: Arc<Mutex<Vec<SeenSpan>>>,
        /// The entered spans, innermost last (ids are indexes + 1).
        stack: Arc<Mutex<Vec<u64>>>,
    }

    impl SpanLog {
        fn named(&self, name: &str) -> Vec<SeenSpan> {
            self.spans
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.name == name)
                .cloned()
                .collect()
        }
    }

    impl Subscriber for SpanLog {
        fn enabled(&self, _: &SpanMetadata<'_>) -> bool {
            true
        }

        fn new_span(&self, attributes: &Attributes<'_>) -> Id {
            let mut spans = self.spans.lock().unwrap();
            let parent = match attributes.parent() {
                Some(parent) => Some(parent.into_u64()),
                None if attributes.is_contextual() => self.stack.lock().unwrap().last().copied(),
                None => None,
            };
            let mut span = SeenSpan {
                name: attributes.metadata().name(),
                parent: parent.map(|p| spans[p as usize - 1].name),
                ..SeenSpan::default()
            };
            attributes.record(&mut span);
            spans.push(span);
            Id::from_u64(spans.len() as u64)
        }

        fn record(&self, span: &Id, values: &Record<'_>) {
            let mut spans = self.spans.lock().unwrap();
            values.record(&mut spans[span.into_u64() as usize - 1]);
        }

        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}

        fn enter(&self, span: &Id) {
            self.stack.lock().unwrap().push(span.into_u64());
        }

        fn exit(&self, span: &Id) {
            let mut stack = self.stack.lock().unwrap();
            if let Some(i) = stack.iter().rposition(|s| *s == span.into_u64()) {
                stack.remove(i);
            }
        }
    }

    /// Runs `test` on a current-thread runtime (so every task stays on this thread) with the
    /// test recorder and span log as this thread's defaults.
    fn observed<F: Future<Output = ()>>(test: impl FnOnce() -> F) -> (TestRecorder, SpanLog) {
        let recorder = TestRecorder::default();
        let spans = SpanLog::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        {
            let _spans = tracing::subscriber::set_default(spans.clone());
            metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
        }
        (recorder, spans)
    }

    fn engine() -> BookingEngine<MemoryStore> {
        let clock = ManualClock::new(chrono::Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap());
        BookingEngine::builder(MemoryStore::new())
            .clock(clock)
            .cache_period(Duration::from_secs(10))
            .build()
    }

    async fn slot(engine: &BookingEngine<MemoryStore>, capacity: i32) -> SlotId {
        let start = engine.clock().now() + chrono::Duration::hours(1);
        engine
            .create_slot(NewSlot::new(
                start,
                start + chrono::Duration::hours(1),
                capacity,
            ))
            .await
            .unwrap()
            .slot_id
    }

    const HOLD_OK: [(&str, &str); 2] = [("operation", "hold"), ("outcome", "ok")];

    #[test]
    fn a_hold_placed_is_counted_timed_and_spanned_with_its_ids() {
        let (recorder, spans) = observed(|| async {
            let engine = engine();
            let slot = slot(&engine, 1).await;
            let placed = engine.hold(slot, "k-1").await.unwrap();
            assert_eq!(placed.hold.hold_id.get(), 1);
            assert!(engine.hold(slot, "k-1").await.unwrap().replayed);
        });
        assert_eq!(recorder.counter(OPERATIONS, &HOLD_OK), 2);
        assert_eq!(
            recorder.counter(
                OPERATIONS,
                &[("operation", "create_slot"), ("outcome", "ok")]
            ),
            1
        );
        let samples = recorder.samples(STORE_SECONDS, &[("operation", "hold")]);
        assert_eq!(samples.len(), 2, "one store latency sample per hold");
        assert!(samples.iter().all(|s| s.is_finite() && *s >= 0.0));

        let holds = spans.named("hold");
        assert_eq!(holds.len(), 2);
        for (span, replayed) in holds.iter().zip(["false", "true"]) {
            assert_eq!(span.fields["slot_id"], "1");
            assert_eq!(span.fields["hold_id"], "1");
            assert_eq!(span.fields["outcome"], "ok");
            assert_eq!(span.fields["replayed"], replayed);
            assert!(span.fields["store_us"].parse::<u64>().is_ok());
        }
    }

    #[test]
    fn a_sold_out_refusal_is_counted_under_its_code() {
        let (recorder, spans) = observed(|| async {
            let engine = engine();
            let slot = slot(&engine, 1).await;
            engine.hold(slot, "a").await.unwrap();
            let refused = engine.hold(slot, "b").await.unwrap_err();
            assert!(matches!(refused, BookingError::SoldOut { .. }));
            // Refused before any store call: counted all the same, with no latency sample.
            engine.hold(slot, "").await.unwrap_err();
        });
        assert_eq!(recorder.counter(OPERATIONS, &HOLD_OK), 1);
        assert_eq!(
            recorder.counter(
                OPERATIONS,
                &[("operation", "hold"), ("outcome", "sold_out")]
            ),
            1
        );
        assert_eq!(
            recorder.counter(
                OPERATIONS,
                &[
                    ("operation", "hold"),
                    ("outcome", "invalid_idempotency_key")
                ]
            ),
            1
        );
        assert_eq!(
            recorder
                .samples(STORE_SECONDS, &[("operation", "hold")])
                .len(),
            2
        );
        let outcomes: Vec<String> = spans
            .named("hold")
            .iter()
            .map(|s| s.fields["outcome"].clone())
            .collect();
        assert_eq!(outcomes, ["ok", "sold_out", "invalid_idempotency_key"]);
    }

    #[test]
    fn cache_hits_misses_stale_serves_and_loads_are_told_apart() {
        let (recorder, spans) = observed(|| async {
            let engine = engine();
            slot(&engine, 3).await;
            // Nothing cached: a miss, which waits for a load.
            engine.availability(AvailabilityQuery::all()).await.unwrap();
            // Fresh: two hits, no store read.
            engine.availability(AvailabilityQuery::all()).await.unwrap();
            engine.availability(AvailabilityQuery::all()).await.unwrap();
            // Past the period: the stale listing at once, while a refresh loads.
            tokio::time::advance(Duration::from_secs(11)).await;
            engine.availability(AvailabilityQuery::all()).await.unwrap();
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        });
        assert_eq!(recorder.counter(CACHE_MISSES, &[]), 1);
        assert_eq!(recorder.counter(CACHE_HITS, &[]), 2);
        assert_eq!(recorder.counter(CACHE_STALE_SERVES, &[]), 1);
        assert_eq!(recorder.counter(CACHE_LOADS, &[("outcome", "ok")]), 2);
        assert_eq!(
            recorder.counter(
                OPERATIONS,
                &[("operation", "availability"), ("outcome", "ok")]
            ),
            4
        );
        assert_eq!(
            recorder
                .samples(STORE_SECONDS, &[("operation", "availability")])
                .len(),
            2,
            "one store latency sample per load, none per hit"
        );

        let reads: Vec<String> = spans
            .named("availability")
            .iter()
            .map(|s| s.fields["cache"].clone())
            .collect();
        assert_eq!(reads, ["loaded", "fresh", "fresh", "stale"]);
        let loads = spans.named("cache_load");
        assert_eq!(loads.len(), 2);
        for load in &loads {
            assert_eq!(load.parent, Some("availability"), "{load:?}");
            assert_eq!(load.fields["outcome"], "ok");
            assert!(load.fields["store_us"].parse::<u64>().is_ok());
        }
    }

    #[test]
    fn confirm_cancel_and_administration_are_spanned_with_their_ids() {
        let (recorder, spans) = observed(|| async {
            let engine = engine();
            let slot = slot(&engine, 2).await;
            let hold = engine.hold(slot, "k").await.unwrap().hold.hold_id;
            engine.confirm(hold).await.unwrap();
            engine.cancel(hold).await.unwrap();
            engine.confirm(hold).await.unwrap_err();
            engine.change_capacity(slot, 5).await.unwrap();
            engine.remove_slot(slot).await.unwrap();
        });
        for (operation, outcome) in [
            ("confirm", "ok"),
            ("cancel", "ok"),
            ("confirm", "hold_cancelled"),
            ("change_capacity", "ok"),
            ("remove_slot", "ok"),
        ] {
            assert_eq!(
                recorder.counter(
                    OPERATIONS,
                    &[("operation", operation), ("outcome", outcome)]
                ),
                1,
                "{operation} {outcome}"
            );
        }
        let confirms = spans.named("confirm");
        assert_eq!(confirms[0].fields["hold_id"], "1");
        assert_eq!(confirms[1].fields["outcome"], "hold_cancelled");
        assert_eq!(spans.named("remove_slot")[0].fields["slot_id"], "1");
    }

    /// The memory store's writes, as if on a transaction of the caller's.
    struct Direct<'s>(&'s MemoryStore);

    #[async_trait::async_trait]
    impl crate::TransactionWrites for Direct<'_> {
        async fn create_hold(
            &mut self,
            request: crate::HoldRequest<'_>,
        ) -> Result<crate::Decided<crate::HoldOutcome>, StoreError> {
            self.0.create_hold(request).await
        }
        async fn confirm_hold(
            &mut self,
            hold_id: HoldId,
            scope: &crate::Scope,
            now: crate::Timestamp,
        ) -> Result<crate::Decided<crate::Transition>, StoreError> {
            self.0.confirm_hold(hold_id, scope, now).await
        }
        async fn cancel_hold(
            &mut self,
            hold_id: HoldId,
            scope: &crate::Scope,
            now: crate::Timestamp,
        ) -> Result<crate::Decided<crate::Transition>, StoreError> {
            self.0.cancel_hold(hold_id, scope, now).await
        }
        async fn renew_hold(
            &mut self,
            request: crate::RenewRequest<'_>,
        ) -> Result<crate::Decided<crate::Transition>, StoreError> {
            self.0.renew_hold(request).await
        }
        async fn get_hold(
            &mut self,
            hold_id: HoldId,
            scope: &crate::Scope,
            now: crate::Timestamp,
        ) -> Result<crate::Decided<Option<crate::Hold>>, StoreError> {
            self.0.get_hold(hold_id, scope, now).await
        }
        async fn create_slot(
            &mut self,
            slot: &NewSlot,
            now: crate::Timestamp,
        ) -> Result<crate::Slot, StoreError> {
            self.0.create_slot(slot, now).await
        }
        async fn change_capacity(
            &mut self,
            slot_id: SlotId,
            capacity: i32,
            now: crate::Timestamp,
        ) -> Result<crate::Decided<crate::SlotChange>, StoreError> {
            self.0.change_capacity(slot_id, capacity, now).await
        }
        async fn set_closed(
            &mut self,
            slot_id: SlotId,
            closed: bool,
            now: crate::Timestamp,
        ) -> Result<crate::Decided<crate::SlotChange>, StoreError> {
            self.0.set_closed(slot_id, closed, now).await
        }
        async fn remove_slot(
            &mut self,
            slot_id: SlotId,
            now: crate::Timestamp,
        ) -> Result<crate::Decided<crate::SlotChange>, StoreError> {
            self.0.remove_slot(slot_id, now).await
        }
        async fn acknowledge(
            &mut self,
            consumer: &crate::ConsumerId,
            holder: Option<&crate::LeaseHolder>,
            through: crate::EventPosition,
        ) -> Result<bool, StoreError> {
            use crate::EventStore;
            match holder {
                Some(holder) => self.0.acknowledge_leased(consumer, holder, through).await,
                None => self.0.acknowledge(consumer, through).await.map(|()| true),
            }
        }
    }

    #[test]
    fn writes_in_the_callers_transaction_are_the_same_operations_marked_as_such() {
        let (recorder, spans) = observed(|| async {
            let engine = engine();
            let slot = slot(&engine, 1).await;
            let mut within = engine.within(Direct(engine.store()));
            let hold = within.hold(slot, "t-1").await.unwrap().hold.hold_id;
            within.hold(slot, "t-2").await.unwrap_err();
            within.confirm(hold).await.unwrap();
            within.close_sales(slot).await.unwrap();
        });
        for (operation, outcome) in [
            ("hold", "ok"),
            ("hold", "sold_out"),
            ("confirm", "ok"),
            ("close_sales", "ok"),
        ] {
            assert_eq!(
                recorder.counter(
                    OPERATIONS,
                    &[("operation", operation), ("outcome", outcome)]
                ),
                1,
                "{operation} {outcome}"
            );
        }
        assert_eq!(
            recorder
                .samples(STORE_SECONDS, &[("operation", "confirm")])
                .len(),
            1
        );
        let holds = spans.named("hold");
        assert_eq!(holds.len(), 2);
        assert!(holds.iter().all(|s| s.fields["transaction"] == "true"));
        assert_eq!(holds[0].fields["hold_id"], "1");
        assert_eq!(spans.named("confirm")[0].fields["slot_id"], "1");
        assert_eq!(spans.named("close_sales")[0].fields["transaction"], "true");
    }

    #[test]
    fn every_error_code_has_a_static_key() {
        let codes = [
            BookingError::SlotNotFound { slot_id: SlotId(1) }.code(),
            BookingError::InvalidQuery.code(),
            BookingError::Store(StoreError::unavailable("down")).code(),
            BookingError::Store(StoreError::failed("broken")).code(),
        ];
        for code in codes {
            assert!(OUTCOMES.contains(&code), "{code}");
        }
        for (i, operation) in Operation::ALL.iter().enumerate() {
            assert_eq!(operation.index(), i);
            let key = &OPERATION_KEYS[i][3];
            let labels: Vec<_> = key.labels().map(|l| (l.key(), l.value())).collect();
            assert_eq!(
                labels,
                [("operation", operation.name()), ("outcome", "sold_out")]
            );
        }
    }
}
