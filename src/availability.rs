//! The availability listing: one store read shared by every reader
//! ([`AvailabilitySnapshot`]), and each reader's window onto it ([`Availability`]).

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;
use std::time::Duration;

use serde::ser::{Serialize, Serializer};

use crate::model::{
    AvailabilityEntry, AvailabilityQuery, PoolId, PoolUsage, ResourceId, SlotId, Timestamp,
};

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
    /// The pools read with the entries, for the slots that draw from one: `None` when no
    /// slot does.
    pools: Option<Box<PoolLimits>>,
}

/// What a snapshot keeps of pools to serve each slot the least of its own and its pools'
/// free units, and to patch them all when one of their slots' units are taken.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PoolLimits {
    /// Each pool's free units (expired holds included) and its slots.
    pools: Vec<(PoolId, i32, Vec<SlotId>)>,
    /// For each slot drawing from a pool: its own free units and its pools' indices.
    slots: std::collections::HashMap<SlotId, (i32, Vec<usize>)>,
}

impl PoolLimits {
    /// The free units to show for `slot`: the least of its own and its pools'.
    fn shown(&self, slot: SlotId) -> Option<i32> {
        let (own, pools) = self.slots.get(&slot)?;
        let least = pools
            .iter()
            .filter_map(|&i| self.pools.get(i).map(|pool| pool.1))
            .fold(*own, i32::min);
        Some(least.max(0))
    }
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
            pools: None,
        }
    }

    /// The same snapshot with `pools` (read at the same time) applied: each slot that draws
    /// from a pool shows the least of its own free units and its pools'.
    pub fn with_pools(mut self, pools: Vec<PoolUsage>) -> Self {
        if pools.iter().all(|usage| usage.pool.slots.is_empty()) {
            return self;
        }
        let mut limits = PoolLimits {
            pools: Vec::with_capacity(pools.len()),
            slots: std::collections::HashMap::new(),
        };
        for (i, usage) in pools.into_iter().enumerate() {
            let free = usage.available();
            for &slot in &usage.pool.slots {
                limits
                    .slots
                    .entry(slot)
                    .or_insert((0, Vec::new()))
                    .1
                    .push(i);
            }
            limits
                .pools
                .push((usage.pool.pool_id, free, usage.pool.slots));
        }
        for entry in &self.entries {
            if let Some(own) = limits.slots.get_mut(&entry.slot_id) {
                own.0 = entry.remaining;
            }
        }
        // Slots not listed (started, closed) keep no units of their own here: none is shown.
        limits
            .slots
            .retain(|slot, _| self.entries.iter().any(|e| e.slot_id == *slot));
        let shown = |entry: &mut AvailabilityEntry| {
            if let Some(units) = limits.shown(entry.slot_id) {
                entry.remaining = units;
            }
        };
        self.entries.iter_mut().for_each(shown);
        for (_, group) in &mut self.by_resource {
            group.iter_mut().for_each(shown);
        }
        self.pools = Some(Box::new(limits));
        self
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
    /// at once. A slot drawing from pools takes the units from them too, and every slot of
    /// those pools shows their new least. Entries not listed are left alone; none goes below
    /// zero.
    pub fn take(&mut self, units: &[(SlotId, i32)]) {
        let mut touched = Vec::new();
        for &(slot_id, taken) in units {
            match self
                .pools
                .as_mut()
                .and_then(|p| p.slots.get_mut(&slot_id).map(|s| (s, &mut p.pools)))
            {
                Some(((own, of), pools)) => {
                    *own = own.saturating_sub(taken);
                    for &i in of.iter() {
                        if let Some(pool) = pools.get_mut(i) {
                            pool.1 = pool.1.saturating_sub(taken);
                            touched.extend_from_slice(&pool.2);
                        }
                    }
                    touched.push(slot_id);
                }
                None => {
                    let remaining = self.shown_now(slot_id).map(|r| r.saturating_sub(taken));
                    if let Some(remaining) = remaining {
                        self.show(slot_id, remaining);
                    }
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for slot_id in touched {
            if let Some(units) = self.pools.as_ref().and_then(|p| p.shown(slot_id)) {
                self.show(slot_id, units);
            }
        }
    }

    /// The units the snapshot shows now for `slot_id`, if it lists it.
    fn shown_now(&mut self, slot_id: SlotId) -> Option<i32> {
        let &(i, _) = self.places().get(&slot_id)?;
        self.entries.get(i).map(|entry| entry.remaining)
    }

    /// Shows `remaining` (at least zero) for `slot_id` in its entry and its resource group.
    fn show(&mut self, slot_id: SlotId, remaining: i32) {
        let Some(&(i, group)) = self.places().get(&slot_id) else {
            return;
        };
        let remaining = remaining.max(0);
        if let Some(entry) = self.entries.get_mut(i) {
            entry.remaining = remaining;
        }
        if let Some((g, j)) = group {
            let group = self.by_resource.get_mut(g);
            if let Some(entry) = group.and_then(|(_, entries)| entries.get_mut(j)) {
                entry.remaining = remaining;
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
