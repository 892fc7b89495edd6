//! Bookings of several lines in [`MemoryStore`], and the one transition path every change of
//! an existing hold takes: a hold is a booking of one line, a line of a bigger booking changes
//! with all its lines.
//!
//! A booking's slots are locked by slot id ascending (after the key shard, like a hold's one
//! slot), so two bookings over the same slots never deadlock.

use async_trait::async_trait;

use std::collections::BTreeMap;

use super::*;
use crate::model::{Booking, BookingLine};
use crate::store::{BookingOutcome, BookingRequest, BookingStore, HoldChange, LineState};

/// Makes `change` (the core's rule, which applies to the line) of the line `hold_id` of
/// `row`, keeping the row's expiry index and units with it: whether the line moved.
fn apply(change: HoldChange<'_>, row: &mut SlotRow, hold_id: HoldId, now: Timestamp) -> bool {
    let Some(hold) = row.holds.get_mut(&hold_id) else {
        return false;
    };
    let (was_held, expiry) = (hold.status == HoldStatus::Held, (hold.expires_at, hold_id));
    if !change.apply(hold, now) {
        return false;
    }
    let (quantity, held, renewed) = (
        hold.quantity,
        hold.status == HoldStatus::Held,
        hold.expires_at,
    );
    if was_held {
        row.held_by_expiry.remove(&expiry);
    }
    if held {
        row.held_by_expiry.insert((renewed, hold_id));
    }
    if change.gives_back() {
        row.slot.stored_remaining += quantity;
    }
    true
}

impl MemoryStore {
    /// The lines of the booking `hold_id` belongs to: its own when it is a plain hold.
    fn lines_of(&self, hold_id: HoldId) -> Option<Lines> {
        if let Some(lines) = lock(&self.bookings).get(&hold_id) {
            return Some(Arc::clone(lines));
        }
        let slot_id = *lock(self.hold_shard(hold_id)).get(&hold_id)?;
        Some(Arc::from([(hold_id, slot_id)]))
    }

    /// The booking `lines` make, read under their slots' locks (lines purged since are left
    /// out).
    fn read_lines(&self, lines: &Lines) -> Option<Booking> {
        let rows = self.rows_of(lines)?;
        let guards: Vec<_> = rows.iter().map(|row| lock(row)).collect();
        let holds = lines
            .iter()
            .zip(&guards)
            .filter_map(|((id, _), row)| row.holds.get(id).cloned())
            .collect();
        Booking::of_lines(holds)
    }

    fn rows_of(&self, lines: &Lines) -> Option<Vec<Arc<Mutex<SlotRow>>>> {
        lines.iter().map(|(_, slot)| self.slot_row(*slot)).collect()
    }

    /// The booking (or hold) whose key `request`'s key is, as stored; `None` when the key is
    /// a waitlist entry's, still waiting in `slot_id`'s line.
    pub(super) fn key_holder(
        &self,
        hold_id: HoldId,
        slot_id: SlotId,
    ) -> Result<Option<Booking>, StoreError> {
        if let Some(booking) = self.lines_of(hold_id).and_then(|l| self.read_lines(&l)) {
            return Ok(Some(booking));
        }
        let waiting = self.slot_row(slot_id).is_some_and(|row| {
            lock(&row)
                .waiting
                .iter()
                .any(|(entry, _)| entry.entry_id.0 == hold_id.0)
        });
        if waiting {
            Ok(None)
        } else {
            Err(StoreError::failed(
                "idempotency key points at a missing hold",
            ))
        }
    }

    /// Applies `change` to every line of the booking `lines` make, in one step under all their
    /// slots' locks (by slot id), if the booking is in `scope` and the rule applies to every
    /// line; logs each line's event if it really changed (a renewal already at its maximum
    /// life moves nothing and logs nothing).
    fn change_lines(
        &self,
        lines: &Lines,
        scope: &Scope,
        now: Timestamp,
        change: HoldChange<'_>,
    ) -> Transition<Booking> {
        let Some(rows) = self.rows_of(lines) else {
            return Transition::NotFound;
        };
        let mut guards: Vec<_> = rows.iter().map(|row| lock(row)).collect();
        let present: Vec<(HoldId, usize)> = lines
            .iter()
            .enumerate()
            .filter(|(i, (id, _))| guards[*i].holds.contains_key(id))
            .map(|(i, (id, _))| (*id, i))
            .collect();
        let holds = |guards: &[MutexGuard<'_, SlotRow>]| {
            let holds = present
                .iter()
                .filter_map(|(id, i)| guards[*i].holds.get(id).cloned())
                .collect();
            Booking::of_lines(holds)
        };
        let Some(before) = holds(&guards) else {
            return Transition::NotFound;
        };
        if !scope.admits(before.lead()) {
            return Transition::NotFound;
        }
        if !before.lines.iter().all(|hold| change.applies(hold, now)) {
            return Transition::NotApplied(before);
        }
        let mut events = Vec::new();
        let mut table = change.gives_back().then(|| lock(&self.pools));
        for (id, i) in &present {
            if !apply(change, &mut guards[*i], *id, now) {
                continue;
            }
            let Some(hold) = guards[*i].holds.get(id) else {
                continue;
            };
            // Given back to its slot's pools too.
            if let Some(table) = table.as_mut() {
                table.give_back(&guards[*i].pools, hold.quantity);
            }
            events.push(NewEvent::of_hold(change.event(), hold, now));
        }
        drop(table);
        let mut log = lock(&self.log);
        for event in events {
            log.append(event);
        }
        drop(log);
        // Units a cancel gave back go to the slots' lines in the same step.
        let (mut slots, mut pools) = (Vec::new(), Vec::new());
        if change.gives_back() {
            for (_, i) in &present {
                self.serve(&mut guards[*i], now);
                slots.push(guards[*i].slot.slot_id);
                pools.extend_from_slice(&guards[*i].pools);
            }
        }
        let after = holds(&guards).map_or(Transition::NotFound, Transition::Applied);
        drop(guards);
        pools.sort_unstable();
        pools.dedup();
        self.serve_lines(&slots, &pools, now);
        after
    }

    /// A change of one hold: of the whole booking when the hold is a line of one.
    pub(super) fn change_hold(
        &self,
        hold_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        change: HoldChange<'_>,
    ) -> Transition {
        let Some(lines) = self.lines_of(hold_id) else {
            return Transition::NotFound;
        };
        let line = |booking: Booking| booking.lines.into_iter().find(|h| h.hold_id == hold_id);
        match self.change_lines(&lines, scope, now, change) {
            Transition::Applied(booking) => {
                line(booking).map_or(Transition::NotFound, Transition::Applied)
            }
            Transition::NotApplied(booking) => {
                line(booking).map_or(Transition::NotFound, Transition::NotApplied)
            }
            Transition::NotFound => Transition::NotFound,
        }
    }

    /// A change of a whole booking by its id (its first line's hold id).
    fn change_booking(
        &self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
        change: HoldChange<'_>,
    ) -> Transition<Booking> {
        match self.lines_of(booking_id) {
            Some(lines) if lines.first().is_some_and(|(id, _)| *id == booking_id) => {
                self.change_lines(&lines, scope, now, change)
            }
            _ => Transition::NotFound,
        }
    }

    /// [`BookingStore::create_booking`]: placed, or tried once more after giving back the
    /// expired holds of the pools that were short.
    fn create_booking_now(
        &self,
        request: &BookingRequest<'_>,
    ) -> Result<BookingOutcome, StoreError> {
        match self.place_booking(request, false)? {
            Placed::Decided(outcome) => Ok(outcome),
            Placed::PoolShort(short) => {
                self.reclaim_pools(&short, request.now);
                match self.place_booking(request, true)? {
                    Placed::Decided(outcome) => Ok(outcome),
                    Placed::PoolShort(_) => Err(StoreError::failed("a last try left undecided")),
                }
            }
        }
    }

    /// The booking's decision, under the key shard's lock, then every line's slot lock by
    /// slot id, then the pool table's. On the `last` try a short pool refuses the booking.
    fn place_booking(
        &self,
        request: &BookingRequest<'_>,
        last: bool,
    ) -> Result<Placed<BookingOutcome>, StoreError> {
        let decided = |outcome| Ok(Placed::Decided(outcome));
        let mut keys = lock(self.key_shard(request.key));
        let vacant = match keys.entry(request.key.clone()) {
            Entry::Occupied(taken) => {
                let (id, slot_id) = *taken.get();
                return decided(match self.key_holder(id, slot_id)? {
                    Some(holder) => BookingOutcome::refused(request, Some(holder), &[]),
                    None => BookingOutcome::KeyReused(None),
                });
            }
            Entry::Vacant(vacant) => vacant,
        };
        let rows: Vec<Option<Arc<Mutex<SlotRow>>>> = request
            .lines
            .iter()
            .map(|line| self.slot_row(line.slot_id))
            .collect();
        let mut guards: Vec<Option<MutexGuard<'_, SlotRow>>> = rows
            .iter()
            .map(|row| row.as_ref().map(|row| lock(row)))
            .collect();
        let now = request.now;
        // Nobody takes units past a waiting line, the slot's or a pool's.
        let free = |row: &SlotRow| match self.line_waits(row, now) {
            false => row.slot.stored_remaining + row.expired_units(now),
            true => 0,
        };
        // Whether each line fits, counting its slot's expired holds as free; they are reclaimed
        // below only when every line fits: a refused booking changes nothing.
        let fits: Vec<bool> = request
            .lines
            .iter()
            .zip(&guards)
            .map(|(line, row)| {
                row.as_ref()
                    .is_some_and(|row| row.slot.is_selling_at(now) && free(row) >= line.quantity)
            })
            .collect();
        // Each pool's units over the lines on its slots, and the expired units of those
        // slots (theirs too).
        let mut needs: BTreeMap<PoolId, (i32, i32)> = BTreeMap::new();
        for (line, row) in request.lines.iter().zip(&guards) {
            let Some(row) = row else { continue };
            for pool_id in &row.pools {
                let need = needs.entry(*pool_id).or_default();
                need.0 += line.quantity;
                need.1 += row.expired_units(now);
            }
        }
        let needs: Vec<(PoolId, i32, i32)> =
            needs.into_iter().map(|(p, (n, e))| (p, n, e)).collect();
        let units: Vec<(PoolId, i32)> = needs.iter().map(|&(p, n, _)| (p, n)).collect();
        let (short, tight) = lock(&self.pools).short_of(&units, |pool_id| {
            needs.iter().find(|n| n.0 == pool_id).map_or(0, |n| n.2)
        });
        // A pool short as stored may have room in its other slots' expired holds: give those
        // back and decide once more, even when another line fails anyway, so the refusal
        // names only the lines that truly have no room.
        if !short.is_empty() && !last {
            return Ok(Placed::PoolShort(short));
        }
        if !short.is_empty() || fits.contains(&false) {
            return decided(self.refusal(request, guards, fits, &short, keys));
        }
        for (line, row) in request.lines.iter().zip(guards.iter_mut().flatten()) {
            if row.slot.stored_remaining < line.quantity || tight {
                row.reclaim(now, usize::MAX, &self.log, &self.pools);
            }
        }
        if let Err(short) = lock(&self.pools).take(&units) {
            // A hold on another slot of the pool took its units since the check above.
            return match last {
                true => decided(self.refusal(request, guards, fits, &short, keys)),
                false => Ok(Placed::PoolShort(short)),
            };
        }
        let mut lines = Vec::with_capacity(request.lines.len());
        let mut holds = Vec::with_capacity(request.lines.len());
        let mut key = Some(vacant);
        for (line, row) in request.lines.iter().zip(guards.iter_mut().flatten()) {
            let hold = self.take_line(row, line, request);
            // The first line's hold carries the key: the unique constraint is the booking's.
            if let Some(vacant) = key.take() {
                row.keys.insert(hold.hold_id, request.key.clone());
                vacant.insert((hold.hold_id, line.slot_id));
            }
            lines.push((hold.hold_id, line.slot_id));
            holds.push(hold);
        }
        let lines: Lines = Arc::from(lines);
        let mut bookings = lock(&self.bookings);
        for (hold_id, _) in lines.iter() {
            bookings.insert(*hold_id, Arc::clone(&lines));
        }
        drop(bookings);
        let mut log = lock(&self.log);
        for hold in &holds {
            log.append(NewEvent::of_hold(EventKind::HoldPlaced, hold, now));
        }
        drop(log);
        Booking::of_lines(holds)
            .map(|booking| Placed::Decided(BookingOutcome::Created(booking)))
            .ok_or_else(|| StoreError::failed("a booking of no lines"))
    }

    /// The refusal of a booking whose lines `fits` says fit (or not) by their slots: the
    /// slots read under their locks, which are released here, then the pools of their slots
    /// read (each slot's free units, expired holds included), as
    /// [`PoolStore`](crate::PoolStore) says.
    fn refusal(
        &self,
        request: &BookingRequest<'_>,
        guards: Vec<Option<MutexGuard<'_, SlotRow>>>,
        fits: Vec<bool>,
        short: &[PoolId],
        keys: MutexGuard<'_, HashMap<IdempotencyKey, (HoldId, SlotId)>>,
    ) -> BookingOutcome {
        let now = request.now;
        let slots: Vec<Option<(SlotLimits, i32, Vec<PoolId>)>> = guards
            .iter()
            .map(|row| {
                let row = row.as_ref()?;
                // Nobody takes units past a waiting line: none are free for the booking.
                let free = match self.line_waits(row, now) {
                    false => row.slot.stored_remaining + row.expired_units(now),
                    true => 0,
                };
                Some((row.limits(), free, row.pools.clone()))
            })
            .collect();
        drop(guards);
        drop(keys);
        let mut pool_ids: Vec<PoolId> = slots.iter().flatten().flat_map(|s| s.2.clone()).collect();
        pool_ids.sort_unstable();
        pool_ids.dedup();
        let pools = self.usage_of(Some(&pool_ids), now);
        let states: Vec<LineState> = request
            .lines
            .iter()
            .zip(slots)
            .zip(fits)
            .map(|((line, slot), fit)| match slot {
                None => LineState {
                    line: *line,
                    slot: None,
                    free: 0,
                    failed: true,
                },
                // A line on a slot of a pool found short at the decision failed there, even
                // if the pool's units read since (the slots' locks released) look enough.
                Some((limits, free, slot_pools)) => LineState {
                    line: *line,
                    slot: Some(limits),
                    free,
                    failed: !fit || slot_pools.iter().any(|p| short.contains(p)),
                }
                .within_pools(request, &pools),
            })
            .collect();
        BookingOutcome::refused(request, None, &states)
    }

    /// Takes `line`'s units of `row` (they fit) and stores its hold.
    fn take_line(
        &self,
        row: &mut SlotRow,
        line: &BookingLine,
        request: &BookingRequest<'_>,
    ) -> Hold {
        row.slot.stored_remaining -= line.quantity;
        let hold_id = HoldId(self.last_hold_id.fetch_add(1, Ordering::Relaxed) + 1);
        let hold = Hold {
            hold_id,
            slot_id: line.slot_id,
            status: HoldStatus::Held,
            expires_at: request.expires_at,
            confirmed_at: None,
            cancelled_at: None,
            quantity: line.quantity,
            owner: request.owner.cloned(),
            created_at: request.now,
        };
        row.holds.insert(hold_id, hold.clone());
        row.held_by_expiry.insert((hold.expires_at, hold_id));
        lock(self.hold_shard(hold_id)).insert(hold_id, line.slot_id);
        if let Some(owner) = request.owner {
            lock(&self.owners).insert((owner.clone(), hold_id));
        }
        hold
    }
}

#[async_trait]
impl BookingStore for MemoryStore {
    async fn create_booking(
        &self,
        request: BookingRequest<'_>,
    ) -> Result<Decided<BookingOutcome>, StoreError> {
        let outcome = self.create_booking_now(&request)?;
        Ok(Decided::new(request.now, outcome))
    }

    async fn get_booking(
        &self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Option<Booking>>, StoreError> {
        let booking = self
            .lines_of(booking_id)
            .filter(|lines| lines.first().is_some_and(|(id, _)| *id == booking_id))
            .and_then(|lines| self.read_lines(&lines))
            .filter(|booking| scope.admits(booking.lead()));
        Ok(Decided::new(now, booking))
    }

    async fn confirm_booking(
        &self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let change = self.change_booking(booking_id, scope, now, HoldChange::Confirm);
        Ok(Decided::new(now, change))
    }

    async fn cancel_booking(
        &self,
        booking_id: HoldId,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let change = self.change_booking(booking_id, scope, now, HoldChange::Cancel);
        Ok(Decided::new(now, change))
    }

    async fn renew_booking(
        &self,
        request: RenewRequest<'_>,
    ) -> Result<Decided<Transition<Booking>>, StoreError> {
        let change = self.change_booking(
            request.hold_id,
            request.scope,
            request.now,
            HoldChange::Renew(&request),
        );
        Ok(Decided::new(request.now, change))
    }
}
