//! The catalogue: every metric's name, the labels, and their descriptions for exporters.

use metrics::{KeyName, Unit};

#[cfg(doc)]
use super::Operation;
#[cfg(doc)]
use crate::error::BookingError;

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
