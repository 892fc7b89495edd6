//! The availability cache's static metric keys.

use metrics::{Key, Label};

use super::catalogue::{
    CACHE_HITS, CACHE_LOADS, CACHE_MISSES, CACHE_STALE_SERVES, OK, OUTCOME_LABEL,
};
use super::Served;
use crate::error::{STORE_FAILED, STORE_UNAVAILABLE};

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
        const LABELS: &[Label] = &[Label::from_static_parts(OUTCOME_LABEL, STORE_UNAVAILABLE)];
        LABELS
    }),
    Key::from_static_parts(CACHE_LOADS, {
        const LABELS: &[Label] = &[Label::from_static_parts(OUTCOME_LABEL, STORE_FAILED)];
        LABELS
    }),
];

/// The [`CACHE_LOADS`] key of a load ending in `outcome`.
pub(super) fn cache_load_key(outcome: &str) -> &'static Key {
    match outcome {
        OK => &CACHE_LOAD_KEYS[0],
        STORE_UNAVAILABLE => &CACHE_LOAD_KEYS[1],
        _ => &CACHE_LOAD_KEYS[2],
    }
}

/// The counter of a read served `served`: [`CACHE_HITS`], [`CACHE_STALE_SERVES`] or
/// [`CACHE_MISSES`].
#[inline]
pub(super) fn served_key(served: Served) -> &'static Key {
    match served {
        Served::Fresh => &CACHE_HIT_KEY,
        Served::Stale => &CACHE_STALE_KEY,
        Served::Loaded => &CACHE_MISS_KEY,
    }
}
