//! The event log of [`MemoryStore`].

use std::collections::HashSet;

use async_trait::async_trait;

use super::*;

#[async_trait]
impl EventStore for MemoryStore {
    async fn read_events(
        &self,
        consumer: &ConsumerId,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let events = {
            let log = lock(&self.log);
            let after = log
                .consumers
                .get(consumer)
                .map_or(EventPosition::START, |cursor| cursor.position);
            log.read_after(after, limit)
        };
        Ok(self.with_bookings(events))
    }

    async fn read_events_after(
        &self,
        after: EventPosition,
        limit: u32,
    ) -> Result<Vec<Event>, StoreError> {
        let events = lock(&self.log).read_after(after, limit);
        Ok(self.with_bookings(events))
    }

    async fn event_log_end(&self) -> Result<EventPosition, StoreError> {
        // Positions are handed out in sequence under the log's lock: the last one handed out
        // is at or after every event a read can have returned.
        Ok(EventPosition::new(0, lock(&self.log).last_sequence))
    }

    async fn acknowledge(
        &self,
        consumer: &ConsumerId,
        through: EventPosition,
    ) -> Result<(), StoreError> {
        let mut log = lock(&self.log);
        let cursor = log.consumers.entry(consumer.clone()).or_default();
        cursor.position = cursor.position.max(through);
        Ok(())
    }

    async fn consumer_position(
        &self,
        consumer: &ConsumerId,
    ) -> Result<Option<EventPosition>, StoreError> {
        Ok(lock(&self.log)
            .consumers
            .get(consumer)
            .map(|cursor| cursor.position))
    }

    async fn lease_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut log = lock(&self.log);
        let cursor = log.consumers.entry(consumer.clone()).or_default();
        let free = match &cursor.lease {
            None => true,
            Some((held, ends)) => held == holder || *ends <= now,
        };
        if free {
            cursor.lease = Some((holder.clone(), until));
        }
        Ok(free)
    }

    async fn release_consumer(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
    ) -> Result<(), StoreError> {
        let mut log = lock(&self.log);
        if let Some(cursor) = log.consumers.get_mut(consumer) {
            if cursor.held_by(holder) {
                cursor.lease = None;
            }
        }
        Ok(())
    }

    async fn acknowledge_leased(
        &self,
        consumer: &ConsumerId,
        holder: &LeaseHolder,
        through: EventPosition,
    ) -> Result<bool, StoreError> {
        let mut log = lock(&self.log);
        match log.consumers.get_mut(consumer) {
            Some(cursor) if cursor.held_by(holder) => {
                cursor.position = cursor.position.max(through);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn reclaim_expired(&self, now: Timestamp, limit: u32) -> Result<Vec<Hold>, StoreError> {
        let rows: Vec<Arc<Mutex<SlotRow>>> = {
            let table = self.slots.read().unwrap_or_else(PoisonError::into_inner);
            table.by_id.values().cloned().collect()
        };
        let mut reclaimed = Vec::new();
        for row in rows {
            let left = limit as usize - reclaimed.len();
            if left == 0 {
                break;
            }
            let mut row = lock(&row);
            reclaimed.extend(row.reclaim(now, left, &self.log, &self.pools));
            // Units given back go to the slot's line in the same step.
            self.serve(&mut row, now);
        }
        // And every pool's line, whose heads also wait for units of other slots.
        let pools: Vec<PoolId> = lock(&self.pools).by_id.keys().copied().collect();
        self.serve_lines(&[], &pools, now);
        Ok(reclaimed)
    }

    async fn purge(&self, before: Timestamp, limit: u32) -> Result<Purged, StoreError> {
        let mut purged = Purged::default();
        // The events first; a line of a booking that an event still kept names stays, so that
        // every event read finds its line's booking.
        let named: HashSet<HoldId> = {
            let mut log = lock(&self.log);
            let delivered = log.consumers.values().map(|cursor| cursor.position).min();
            while purged.events < u64::from(limit) {
                let Some(first) = log.events.front() else {
                    break;
                };
                let acknowledged = delivered.is_none_or(|through| first.position <= through);
                if !acknowledged || first.at >= before {
                    break;
                }
                log.events.pop_front();
                purged.events += 1;
            }
            let bookings = lock(&self.bookings);
            log.events
                .iter()
                .filter_map(|event| event.hold_id)
                .filter(|hold| bookings.contains_key(hold))
                .collect()
        };
        // Ended holds never change again, so candidates picked under each slot's lock are
        // deleted afterwards in lock order: key shard, then slot, then the indexes.
        let rows: Vec<Arc<Mutex<SlotRow>>> = {
            let table = self.slots.read().unwrap_or_else(PoisonError::into_inner);
            table.by_id.values().cloned().collect()
        };
        let mut candidates = Vec::new();
        for row in &rows {
            let left = limit as usize - candidates.len();
            if left == 0 {
                break;
            }
            let row_guard = lock(row);
            candidates.extend(
                row_guard
                    .holds
                    .values()
                    .filter(|hold| ended_before(hold, before) && !named.contains(&hold.hold_id))
                    .take(left)
                    .map(|hold| {
                        // Only a booking's first line carries its key.
                        let key = row_guard.keys.get(&hold.hold_id).cloned();
                        (Arc::clone(row), hold.hold_id, key)
                    }),
            );
        }
        for (row, hold_id, key) in candidates {
            let mut keys = key.as_ref().map(|key| lock(self.key_shard(key)));
            let mut row = lock(&row);
            let Some(hold) = row.holds.remove(&hold_id) else {
                continue;
            };
            row.keys.remove(&hold_id);
            if let (Some(keys), Some(key)) = (keys.as_mut(), key.as_ref()) {
                if keys.get(key).is_some_and(|(id, _)| *id == hold_id) {
                    keys.remove(key);
                }
            }
            lock(self.hold_shard(hold_id)).remove(&hold_id);
            lock(&self.bookings).remove(&hold_id);
            if let Some(owner) = hold.owner {
                lock(&self.owners).remove(&(owner, hold_id));
            }
            purged.holds += 1;
        }

        Ok(purged)
    }
}

impl MemoryStore {
    /// `events` with each hold event's booking, for lines of a booking of several lines.
    fn with_bookings(&self, mut events: Vec<Event>) -> Vec<Event> {
        let bookings = lock(&self.bookings);
        for event in &mut events {
            event.booking_id = event
                .hold_id
                .and_then(|hold| bookings.get(&hold))
                .and_then(|lines| lines.first().map(|(first, _)| *first));
        }
        events
    }
}
