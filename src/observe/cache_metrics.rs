//! The availability cache's static metric keys.

use metrics::{Key, Label};

use super::catalogue::{
    CACHE_HITS, CACHE_LOADS, CACHE_MISSES, CACHE_STALE_SERVES, OK, OUTCOME_LABEL,
};
use crate::error::{STORE_FAILED, STORE_UNAVAILABLE};

pub(super) static CACHE_HIT_KEY: Key = Key::from_static_name(CACHE_HITS);
pub(super) static CACHE_STALE_KEY: Key = Key::from_static_name(CACHE_STALE_SERVES);
pub(super) static CACHE_MISS_KEY: Key = Key::from_static_name(CACHE_MISSES);
/// [`CACHE_LOADS`] by outcome: ok, store_unavailable, store_failed.
pub(super) static CACHE_LOAD_KEYS: [Key; 3] = [
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
