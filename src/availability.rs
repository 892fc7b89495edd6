//! The availability listing: one store read shared by every reader
//! ([`AvailabilitySnapshot`]), and each reader's window onto it ([`Availability`]).

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;
use std::time::Duration;

use serde::ser::{Serialize, Serializer};

use crate::model::{AvailabilityEntry, AvailabilityQuery, ResourceId, SlotId, Timestamp};

/// One store read of availability, as the cache shares it between readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvailabilitySnapshot {
    /// The engine's clock when the read was made: the `now` the store was asked about.
    pub read_at: Timestamp,
    /// Every slot that had not started at `read_at` and is selling, by `starts_at` then
    /// `slot_id`.
    pub entries: Vec<AvailabilityEntry>,
    /// The same entries grouped by resource (sorted by resource id), each group in the order
    /// of `entries`: a query for one resource is a window onto its group, so it costs no store
    /// read and copies nothing.
    pub by_resource: Vec<(ResourceId, Vec<AvailabilityEntry>)>,
}

impl AvailabilitySnapshot {
    /// A snapshot of `entries` (in listing order) read at `read_at`, grouped by resource.
    pub fn new(read_at: Timestamp, entries: Vec<AvailabilityEntry>) -> Self {
        let mut groups: std::collections::BTreeMap<&ResourceId, Vec<AvailabilityEntry>> =
            std::collections::BTreeMap::new();
        for entry in &entries {
            if let Some(resource) = &entry.resource {
                groups.entry(resource).or_default().push(entry.clone());
            }
        }
        let by_resource = groups
            .into_iter()
            .map(|(resource, group)| (resource.clone(), group))
            .collect();
        AvailabilitySnapshot {
            read_at,
            entries,
            by_resource,
        }
    }

    /// This snapshot after `units` of each slot named were taken (negative: given back) by a
    /// change this process committed: the cache's patch for its own holds and bookings, so
    /// they show at once (entries not listed are left alone; no entry goes below zero).
    pub fn taking(&self, units: &[(SlotId, i32)]) -> AvailabilitySnapshot {
        let mut entries = self.entries.clone();
        for entry in &mut entries {
            for &(slot_id, taken) in units {
                if entry.slot_id == slot_id {
                    entry.remaining = entry.remaining.saturating_sub(taken).max(0);
                }
            }
        }
        AvailabilitySnapshot::new(self.read_at, entries)
    }

    /// The entries a query of `resource` (or of every resource) looks through.
    fn list(&self, group: Option<usize>) -> &[AvailabilityEntry] {
        match group.and_then(|i| self.by_resource.get(i)) {
            Some((_, entries)) => entries,
            None => &self.entries,
        }
    }
}

/// An availability listing: a window onto the shared cached snapshot (no entries are copied).
///
/// Dereferences to `[AvailabilityEntry]` and serializes as a JSON array.
#[derive(Clone)]
pub struct Availability {
    pub(crate) snapshot: Arc<AvailabilitySnapshot>,
    /// The resource group the window is over; `None` for every slot.
    pub(crate) group: Option<usize>,
    pub(crate) range: Range<usize>,
    pub(crate) fresh_for: Duration,
    pub(crate) age: Duration,
}

impl Availability {
    /// The entries, ordered by `starts_at` then `slot_id`.
    pub fn entries(&self) -> &[AvailabilityEntry] {
        &self.snapshot.list(self.group)[self.range.clone()]
    }

    /// The entry of `slot_id` in this listing, if it is listed (a linear search: entries are
    /// ordered by start, not by id).
    pub fn entry(&self, slot_id: SlotId) -> Option<&AvailabilityEntry> {
        self.entries().iter().find(|entry| entry.slot_id == slot_id)
    }

    /// How much longer the underlying snapshot is fresh (for `Cache-Control: max-age`).
    pub fn fresh_for(&self) -> Duration {
        self.fresh_for
    }

    /// How long before this read the store read behind it began: never more than the engine's
    /// [`max_age`](crate::EngineBuilder::max_age).
    pub fn age(&self) -> Duration {
        self.age
    }

    /// The whole snapshot this listing is a window of.
    pub fn snapshot(&self) -> &Arc<AvailabilitySnapshot> {
        &self.snapshot
    }
}

impl Deref for Availability {
    type Target = [AvailabilityEntry];

    fn deref(&self) -> &[AvailabilityEntry] {
        self.entries()
    }
}

impl fmt::Debug for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Availability")
            .field("entries", &self.entries())
            .field("fresh_for", &self.fresh_for)
            .field("age", &self.age)
            .finish()
    }
}

impl Serialize for Availability {
    fn serialize<Ser: Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        serializer.collect_seq(self.entries())
    }
}

/// The part of a snapshot (sorted by `starts_at`) a reader at `now` asking `query` may see.
pub(crate) fn window(
    entries: &[AvailabilityEntry],
    now: Timestamp,
    query: &AvailabilityQuery,
) -> Range<usize> {
    // The snapshot was taken up to one cache period ago: drop slots that have started since.
    // Usually none has, and the first entry says so without a search.
    let mut start = match entries.first() {
        Some(first) if first.starts_at <= now => entries.partition_point(|e| e.starts_at <= now),
        _ => 0,
    };
    if let Some(from) = query.from {
        start = start.max(entries.partition_point(|e| e.starts_at < from));
    }
    let end = match query.to {
        Some(to) => entries.partition_point(|e| e.starts_at < to),
        None => entries.len(),
    };
    start..end.max(start)
}
