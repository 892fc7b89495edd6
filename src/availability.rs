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
    /// Where each slot's entry is: its index in `entries` and, for a slot with a resource, its
    /// group's index and its index there. Built by the first patch (a load does not pay for
    /// it), so each patch after finds its entries at once.
    places: Option<Places>,
}

/// Each slot's index in a snapshot's `entries`, and its group and index there if it has a
/// resource.
type Places = std::collections::HashMap<SlotId, (usize, Option<(usize, usize)>)>;

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
            places: None,
        }
    }

    /// Where each slot's entry is, built now if it was not.
    fn places(&mut self) -> &Places {
        let (entries, groups) = (&self.entries, &self.by_resource);
        self.places.get_or_insert_with(|| {
            let mut places: Places = entries
                .iter()
                .enumerate()
                .map(|(i, entry)| (entry.slot_id, (i, None)))
                .collect();
            for (g, (_, group)) in groups.iter().enumerate() {
                for (j, entry) in group.iter().enumerate() {
                    if let Some(place) = places.get_mut(&entry.slot_id) {
                        place.1 = Some((g, j));
                    }
                }
            }
            places
        })
    }

    /// Takes `units` of each slot named (negative: gives them back), in place, for a change
    /// this process committed: the cache's patch for its own holds and bookings, so they show
    /// at once. Entries not listed are left alone; none goes below zero.
    pub fn take(&mut self, units: &[(SlotId, i32)]) {
        let take = |entry: Option<&mut AvailabilityEntry>, taken: i32| {
            if let Some(entry) = entry {
                entry.remaining = entry.remaining.saturating_sub(taken).max(0);
            }
        };
        for &(slot_id, taken) in units {
            let Some(&(i, group)) = self.places().get(&slot_id) else {
                continue;
            };
            take(self.entries.get_mut(i), taken);
            if let Some((g, j)) = group {
                let group = self.by_resource.get_mut(g);
                take(group.and_then(|(_, entries)| entries.get_mut(j)), taken);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn taking_units_changes_the_entry_and_its_resource_group_in_place() {
        let at = chrono::Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap();
        let entry = |id: i64, remaining, resource: Option<&str>| AvailabilityEntry {
            slot_id: SlotId(id),
            starts_at: at + chrono::Duration::hours(id),
            ends_at: at + chrono::Duration::hours(id + 1),
            capacity: 5,
            remaining,
            resource: resource.map(|r| r.parse().unwrap()),
        };
        let mut snapshot = AvailabilitySnapshot::new(
            at,
            vec![
                entry(1, 5, Some("room")),
                entry(2, 3, None),
                entry(3, 1, Some("room")),
            ],
        );
        snapshot.take(&[(SlotId(3), 1), (SlotId(2), 2), (SlotId(9), 4)]);
        snapshot.take(&[(SlotId(1), 7), (SlotId(2), -1)]);
        let remaining: Vec<i32> = snapshot.entries.iter().map(|e| e.remaining).collect();
        assert_eq!(
            remaining,
            vec![0, 2, 0],
            "never below zero; unknown slots ignored"
        );
        let (_, group) = &snapshot.by_resource[0];
        let in_group: Vec<(i64, i32)> = group.iter().map(|e| (e.slot_id.0, e.remaining)).collect();
        assert_eq!(
            in_group,
            vec![(1, 0), (3, 0)],
            "the resource's window agrees"
        );
    }
}
