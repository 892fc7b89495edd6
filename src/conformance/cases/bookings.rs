//! Booking cases: several lines taken all or none, refusals naming every line, whole-booking
//! changes, replays, expiry, and a race of overlapping bookings.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;

use crate::bookings::NewBooking;
use crate::conformance::support::{hours, owner};
use crate::conformance::Fixture;
use crate::engine::BookingEngine;
use crate::error::BookingError;
use crate::model::{
    AvailabilityQuery, Booking, HoldId, HoldStatus, LineProblem, LineShortfall, NewSlot, SlotId,
};
use crate::scope::Scope;
use crate::store::{BookingStore, SlotAdmin};

const ANY: Scope = Scope::Anonymous;

impl<S: BookingStore> Fixture<S> {
    /// Places `lines` (slot, quantity) under `key`, anonymous.
    async fn book(&self, key: &str, lines: &[(SlotId, i32)]) -> Result<Booking, BookingError> {
        let request = lines
            .iter()
            .fold(NewBooking::new(key), |r, (slot, q)| r.line(*slot, *q));
        self.engine.book(request).await.map(|placed| placed.booking)
    }

    /// Each slot's stored `remaining`, in order.
    pub(super) async fn remainders(&self, slots: &[SlotId]) -> Vec<i32> {
        let mut left = Vec::new();
        for slot in slots {
            left.push(self.remaining(*slot).await);
        }
        left
    }

    /// Checks every slot's capacity invariant, given every booking ever placed on them.
    async fn assert_booked(&self, slots: &[SlotId], bookings: &[Booking]) {
        let mut by_slot: BTreeMap<SlotId, Vec<HoldId>> =
            slots.iter().map(|s| (*s, vec![])).collect();
        for line in bookings.iter().flat_map(|b| &b.lines) {
            by_slot.entry(line.slot_id).or_default().push(line.hold_id);
        }
        for (slot, holds) in by_slot {
            self.assert_invariant(slot, &holds).await;
        }
    }
}

fn lines_of(error: BookingError) -> Vec<LineShortfall> {
    match error {
        BookingError::LinesUnavailable { lines } => lines,
        other => panic!("expected lines_unavailable, got {other:?}"),
    }
}

/// Every line is taken by its conditional decrement, or none is: a booking with one short line
/// takes nothing from the others.
pub(super) async fn booking_takes_every_line_or_none<S: BookingStore>(store: S) {
    let f = Fixture::new(store);
    let (a, b, c) = (
        f.slot(3, hours(1)).await,
        f.slot(2, hours(2)).await,
        f.slot(4, hours(3)).await,
    );
    let first = f.book("first", &[(c, 1), (a, 2), (b, 2)]).await.unwrap();
    assert_eq!(first.lines.len(), 3);
    assert_eq!(
        first
            .lines
            .iter()
            .map(|h| (h.slot_id, h.quantity))
            .collect::<Vec<_>>(),
        vec![(a, 2), (b, 2), (c, 1)],
        "lines by slot id"
    );
    assert!(first.lines.iter().all(|h| h.status == HoldStatus::Held));
    assert_eq!(first.booking_id, first.lines[0].hold_id);

    assert_eq!(f.remainders(&[a, b, c]).await, vec![1, 0, 3]);

    let error = f
        .book("second", &[(a, 1), (b, 1), (c, 1)])
        .await
        .unwrap_err();
    assert_eq!(error.code(), "lines_unavailable");
    assert_eq!(
        lines_of(error),
        vec![LineShortfall {
            slot_id: b,
            quantity: 1,
            problem: LineProblem::SoldOut { free: 0 }
        }]
    );
    assert_eq!(
        f.remainders(&[a, b, c]).await,
        vec![1, 0, 3],
        "a refused booking takes nothing"
    );
    let fits = f.book("third", &[(a, 1), (c, 3)]).await.unwrap();
    assert_eq!(f.remainders(&[a, b, c]).await, vec![0, 0, 0]);
    f.assert_booked(&[a, b, c], &[first, fits]).await;
}

/// A refusal names every line that cannot be had, each with the code a hold on it alone
/// would get, by slot id; the lines that could be had are not named and keep their units.
pub(super) async fn booking_refusal_names_every_line<S: BookingStore + SlotAdmin>(store: S) {
    let f = Fixture::new(store);
    let fine = f.slot(5, hours(1)).await;
    let short = f.slot(2, hours(1)).await;
    let closed = f.slot(5, hours(1)).await;
    let removed = f.slot(5, hours(1)).await;
    let started = f.slot(5, Duration::minutes(1)).await;
    let small = f.slot(2, hours(1)).await;
    f.engine.hold(short, "taken").await.unwrap();
    f.engine.close_sales(closed).await.unwrap();
    f.engine.remove_slot(removed).await.unwrap();
    f.advance(Duration::minutes(2));
    let unknown = SlotId(small.0 + 1000);

    let lines = [
        (unknown, 1),
        (small, 3),
        (started, 1),
        (removed, 1),
        (closed, 1),
        (short, 2),
        (fine, 5),
    ];
    let error = f.book("everything", &lines).await.unwrap_err();
    let shortfall = |slot_id, quantity, problem| LineShortfall {
        slot_id,
        quantity,
        problem,
    };
    assert_eq!(
        lines_of(error),
        vec![
            shortfall(short, 2, LineProblem::SoldOut { free: 1 }),
            shortfall(closed, 1, LineProblem::SlotClosed),
            shortfall(removed, 1, LineProblem::SlotNotFound),
            shortfall(started, 1, LineProblem::SlotClosed),
            shortfall(small, 3, LineProblem::ExceedsCapacity { capacity: 2 }),
            shortfall(unknown, 1, LineProblem::SlotNotFound),
        ]
    );
    assert_eq!(f.remaining(fine).await, 5);
    assert_eq!(f.remaining(short).await, 1);
    assert!(f.book("fine", &[(fine, 5), (short, 1)]).await.is_ok());
}

/// Confirm, cancel and renew act on every line at once, by the booking's id or (for the hold
/// operations) by any line's id; reads show every line.
pub(super) async fn booking_lines_change_together<S: BookingStore>(store: S) {
    let f = Fixture::new(store);
    let (a, b) = (f.slot(4, hours(1)).await, f.slot(4, hours(2)).await);
    let one = f.book("one", &[(a, 1), (b, 2)]).await.unwrap();
    let id = one.booking_id;
    let second_line = one.lines[1].hold_id;

    let read = f.engine.get_booking(&ANY, id).await.unwrap();
    assert_eq!(read, one);
    assert_err!(
        f.engine.get_booking(&ANY, second_line).await,
        BookingError::HoldNotFound { .. }
    );
    let line = f.engine.get_hold(&ANY, second_line).await.unwrap();
    assert_eq!((line.slot_id, line.quantity), (b, 2));

    f.advance(Duration::minutes(1));
    let renewed = f.engine.renew_booking(&ANY, id, None).await.unwrap();
    let expiry = renewed.lines[0].expires_at;
    assert!(expiry > one.lines[0].expires_at);
    assert!(renewed.lines.iter().all(|h| h.expires_at == expiry));

    let confirmed = f.engine.confirm_booking(&ANY, id).await.unwrap();
    assert!(confirmed
        .lines
        .iter()
        .all(|h| h.status == HoldStatus::Confirmed));
    assert_eq!(f.engine.confirm_booking(&ANY, id).await.unwrap(), confirmed);
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (3, 2));

    // A hold operation on the second line cancels the whole booking.
    let cancelled = f.engine.cancel(&ANY, second_line).await.unwrap();
    assert_eq!(cancelled.status, HoldStatus::Cancelled);
    let whole = f.engine.get_booking(&ANY, id).await.unwrap();
    assert!(whole
        .lines
        .iter()
        .all(|h| h.status == HoldStatus::Cancelled));
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (4, 4));
    assert_err!(
        f.engine.confirm_booking(&ANY, id).await,
        BookingError::HoldCancelled { .. }
    );
    assert_eq!(f.engine.cancel_booking(&ANY, id).await.unwrap(), whole);

    // Confirming one line of another booking confirms all of it.
    let two = f.book("two", &[(a, 1), (b, 1)]).await.unwrap();
    f.engine.confirm(&ANY, two.lines[1].hold_id).await.unwrap();
    let both = f.engine.get_booking(&ANY, two.booking_id).await.unwrap();
    assert!(both.lines.iter().all(|h| h.status == HoldStatus::Confirmed));
    f.assert_booked(&[a, b], &[one, two]).await;
}

/// The same key with the same lines, in any order, and the same owner is the same booking;
/// anything else is `idempotency_key_reused`. Holds and bookings share one key space; a
/// booking of one line is a hold.
pub(super) async fn booking_replays_by_key_in_any_order<S: BookingStore>(store: S) {
    let f = Fixture::new(store);
    let (a, b, c) = (
        f.slot(5, hours(1)).await,
        f.slot(5, hours(1)).await,
        f.slot(5, hours(1)).await,
    );
    let placed = f
        .engine
        .book(NewBooking::new("cart").line(a, 1).line(b, 2))
        .await
        .unwrap();
    assert!(!placed.replayed);
    let again = f
        .engine
        .book(NewBooking::new("cart").line(b, 2).line(a, 1))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.booking, placed.booking);
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (4, 3));

    for other in [
        NewBooking::new("cart").line(a, 1).line(b, 1),
        NewBooking::new("cart").line(a, 1).line(c, 2),
        NewBooking::new("cart").line(a, 1).line(b, 2).line(c, 1),
        NewBooking::new("cart").line(a, 1),
        NewBooking::new("cart")
            .line(a, 1)
            .line(b, 2)
            .owner(owner("alice")),
    ] {
        let error = f.engine.book(other.clone()).await.unwrap_err();
        assert_eq!(error.code(), "idempotency_key_reused", "{other:?}");
    }
    assert_err!(
        f.engine.hold(a, "cart").await,
        BookingError::IdempotencyKeyReused { .. }
    );

    // A booking of one line is a hold: the same key replays it either way.
    let single = f.engine.hold(c, "single").await.unwrap().hold;
    let as_booking = f
        .engine
        .book(NewBooking::new("single").line(c, 1))
        .await
        .unwrap();
    assert!(as_booking.replayed);
    assert_eq!(as_booking.booking, Booking::of_hold(single.clone()));
    assert_eq!(
        f.engine.get_booking(&ANY, single.hold_id).await.unwrap(),
        Booking::of_hold(single)
    );
    assert_err!(
        f.book("single", &[(c, 1), (a, 1)]).await,
        BookingError::IdempotencyKeyReused { .. }
    );
    assert_err!(
        f.book("solo", &[(a, 6)]).await,
        BookingError::QuantityExceedsCapacity { .. }
    );
    assert_eq!(
        (
            f.remaining(a).await,
            f.remaining(b).await,
            f.remaining(c).await
        ),
        (4, 3, 4)
    );
}

/// A booking is its owner's: outside the owner's scope it does not exist.
pub(super) async fn booking_belongs_to_its_owner<S: BookingStore>(store: S) {
    let f = Fixture::new(store);
    let (a, b) = (f.slot(5, hours(1)).await, f.slot(5, hours(1)).await);
    let alice = Scope::Owner(owner("alice"));
    let request = NewBooking::new("k")
        .line(a, 1)
        .line(b, 1)
        .owner(owner("alice"));
    let booking = f.engine.book(request).await.unwrap().booking;
    let id = booking.booking_id;
    for scope in [Scope::Anonymous, Scope::Owner(owner("bob"))] {
        assert_err!(
            f.engine.get_booking(&scope, id).await,
            BookingError::HoldNotFound { .. }
        );
        assert_err!(
            f.engine.confirm_booking(&scope, id).await,
            BookingError::HoldNotFound { .. }
        );
        assert_err!(
            f.engine.cancel_booking(&scope, id).await,
            BookingError::HoldNotFound { .. }
        );
        assert_err!(
            f.engine.cancel(&scope, booking.lines[1].hold_id).await,
            BookingError::HoldNotFound { .. }
        );
    }
    let other = NewBooking::new("k")
        .line(a, 1)
        .line(b, 1)
        .owner(owner("bob"));
    match f.engine.book(other).await {
        Err(BookingError::IdempotencyKeyReused {
            existing_hold_id: None,
            ..
        }) => {}
        unexpected => panic!("somebody else's booking must not be revealed: {unexpected:?}"),
    }
    let confirmed = f.engine.confirm_booking(&alice, id).await.unwrap();
    assert_eq!(confirmed.owner(), Some(&owner("alice")));
    assert!(f.engine.get_booking(&Scope::BackOffice, id).await.is_ok());
}

/// An unconfirmed booking expires whole at its `expires_at`; each short line of a later
/// booking reclaims its slot's expired holds and fits.
pub(super) async fn booking_expires_whole<S: BookingStore>(store: S) {
    let f = Fixture::new(store);
    let (a, b) = (f.slot(2, hours(1)).await, f.slot(1, hours(1)).await);
    let request = NewBooking::new("brief")
        .line(a, 2)
        .line(b, 1)
        .lifetime(StdDuration::from_secs(60));
    let brief = f.engine.book(request).await.unwrap().booking;
    assert_err!(
        f.book("blocked", &[(a, 1), (b, 1)]).await,
        BookingError::LinesUnavailable { .. }
    );
    f.advance(Duration::seconds(60));
    let read = f.engine.get_booking(&ANY, brief.booking_id).await.unwrap();
    assert!(read.lines.iter().all(|h| h.status == HoldStatus::Expired));
    assert_err!(
        f.engine.confirm_booking(&ANY, brief.booking_id).await,
        BookingError::HoldExpired { .. }
    );
    assert_err!(
        f.engine.renew_booking(&ANY, brief.booking_id, None).await,
        BookingError::HoldExpired { .. }
    );
    assert_eq!(
        (f.available(a).await, f.available(b).await),
        (Some(2), Some(1))
    );
    // A refused booking changes nothing, not even by reclaiming the expired lines its other
    // lines would have needed.
    let full = f.slot(1, hours(1)).await;
    f.engine.hold(full, "full").await.unwrap();
    assert_err!(
        f.book("refused", &[(a, 2), (full, 1)]).await,
        BookingError::LinesUnavailable { .. }
    );
    assert_eq!(
        f.stored_status(brief.lines[0].hold_id).await,
        Some(HoldStatus::Held),
        "a refused booking reclaimed an expired hold"
    );
    let next = f.book("next", &[(a, 2), (b, 1)]).await.unwrap();
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (0, 0));
    f.assert_booked(&[a, b], &[brief, next]).await;
}

/// Lines are checked before any store sees them: none, more than 50, a slot twice or a
/// quantity out of bounds is `invalid_booking` and changes nothing.
pub(super) async fn invalid_bookings_change_nothing<S: BookingStore>(store: S) {
    let f = Fixture::new(store);
    let a = f.slot(5, hours(1)).await;
    let b = f.slot(5, hours(1)).await;
    let many = (0..51).fold(NewBooking::new("many"), |r, i| r.line(SlotId(a.0 + i), 1));
    for bad in [
        NewBooking::new("none"),
        many,
        NewBooking::new("twice").line(a, 1).line(b, 1).line(a, 2),
        NewBooking::new("zero").line(a, 1).line(b, 0),
        NewBooking::new("huge").line(a, 1001).line(b, 1),
    ] {
        let error = f.engine.book(bad.clone()).await.unwrap_err();
        assert_eq!(error.code(), "invalid_booking", "{bad:?}");
    }
    assert_err!(
        f.book("", &[(a, 1), (b, 1)]).await,
        BookingError::InvalidIdempotencyKey(_)
    );
    assert_eq!((f.remaining(a).await, f.remaining(b).await), (5, 5));
}

/// 16 tasks place 200 bookings of 1 to 5 lines over 10 slots in random orders, cancelling some
/// at once: every booking is all or nothing, no slot sells more than its capacity, and every
/// slot's invariant holds at the end. A deadlock would time the case out.
pub(super) async fn race_overlapping_bookings_never_oversell<S: BookingStore>(store: S) {
    let f = Arc::new(Fixture::new(store));
    let mut slots = Vec::new();
    for i in 0..10 {
        slots.push(f.slot(30, hours(1 + i)).await);
    }
    let slots = Arc::new(slots);
    let tasks: Vec<_> = (0..16u64)
        .map(|task| {
            let (f, slots) = (Arc::clone(&f), Arc::clone(&slots));
            tokio::spawn(async move {
                let mut seed = task.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = |n: u64| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % n
                };
                let mut placed = Vec::new();
                let (mut refused, mut cancelled) = (0usize, 0usize);
                for i in 0..(200 / 16 + u64::from(task < 200 % 16)) {
                    let count = 1 + next(5) as usize;
                    let mut request = NewBooking::new(format!("t{task}-{i}"));
                    let mut used = Vec::new();
                    while used.len() < count {
                        let slot = slots[next(slots.len() as u64) as usize];
                        if !used.contains(&slot) {
                            used.push(slot);
                            request = request.line(slot, 1 + next(2) as i32);
                        }
                    }
                    match f.engine.book(request).await {
                        Ok(done) if next(3) == 0 => {
                            let id = done.booking.booking_id;
                            let gone = f.engine.cancel_booking(&ANY, id).await.unwrap();
                            assert!(gone.lines.iter().all(|h| h.status == HoldStatus::Cancelled));
                            cancelled += 1;
                            placed.push(gone);
                        }
                        Ok(done) => placed.push(done.booking),
                        Err(
                            BookingError::LinesUnavailable { .. } | BookingError::SoldOut { .. },
                        ) => refused += 1,
                        Err(other) => panic!("task {task}: unexpected {other:?}"),
                    }
                }
                (placed, refused, cancelled)
            })
        })
        .collect();
    let mut bookings = Vec::new();
    let (mut refused, mut cancelled) = (0, 0);
    for task in tasks {
        let (placed, r, c) = task.await.expect("booking task");
        bookings.extend(placed);
        refused += r;
        cancelled += c;
    }
    assert_eq!(bookings.len() + refused, 200);
    assert!(refused > 0, "the race should sell out some slots");
    for booking in &bookings {
        let stored = f
            .engine
            .get_booking(&ANY, booking.booking_id)
            .await
            .unwrap();
        assert_eq!(stored.lines.len(), booking.lines.len(), "all or nothing");
    }
    f.assert_booked(&slots, &bookings).await;
    // Shown with `--nocapture`: the race's figures.
    println!(
        "booking race: 16 tasks, 200 bookings of 1 to 5 lines over 10 slots: {} placed ({} \
         of them cancelled at once), {refused} refused, {} lines; every booking whole, {} \
         slots' invariants hold",
        bookings.len(),
        cancelled,
        bookings.iter().map(|b| b.lines.len()).sum::<usize>(),
        slots.len()
    );
}

/// The engine's own bookings and holds show in its cached listing at once, without a reload;
/// a refusal or a replay changes nothing there; a cancel shows at the next read.
pub(super) async fn bookings_show_in_the_cached_listing_at_once<S: BookingStore>(store: S) {
    let (engine, start) = crate::conformance::fixture::cached_engine(store);
    let mut slots = Vec::new();
    for capacity in [3, 2] {
        let slot = NewSlot::new(start, start + hours(1), capacity);
        slots.push(engine.create_slot(slot).await.unwrap().slot_id);
    }
    let (a, b) = (slots[0], slots[1]);
    let read = |engine: BookingEngine<S>| async move {
        let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
        listing.iter().map(|e| e.remaining).collect::<Vec<_>>()
    };
    assert_eq!(read(engine.clone()).await, vec![3, 2]);
    let request = NewBooking::new("pair").line(a, 2).line(b, 1);
    let booking = engine.book(request.clone()).await.unwrap().booking;
    assert_eq!(
        read(engine.clone()).await,
        vec![1, 1],
        "the booking, at once"
    );
    engine.book(request).await.unwrap();
    assert!(engine
        .book(NewBooking::new("too-many").line(a, 2).line(b, 1))
        .await
        .is_err());
    assert_eq!(
        read(engine.clone()).await,
        vec![1, 1],
        "a replay and a refusal take nothing"
    );
    engine.hold(b, "one").await.unwrap();
    assert_eq!(read(engine.clone()).await, vec![1, 0], "a hold, at once");
    engine
        .cancel_booking(&ANY, booking.booking_id)
        .await
        .unwrap();
    assert_eq!(
        read(engine.clone()).await,
        vec![3, 1],
        "a cancel, at the next read"
    );
}

/// With keys scoped to their owner, two owners' bookings under one key are two bookings, each
/// replayed only by its owner, and a hold of a third owner under that key is a hold of its own.
pub(super) async fn booking_keys_scoped_to_their_owner<S: BookingStore>(store: S) {
    let start = crate::conformance::fixture::epoch() + hours(1);
    let engine = BookingEngine::builder(store)
        .cache_period(StdDuration::ZERO)
        .keys_per_owner(true)
        .clock(crate::clock::ManualClock::new(
            crate::conformance::fixture::epoch(),
        ))
        .build();
    let mut slots = Vec::new();
    for _ in 0..2 {
        let slot = NewSlot::new(start, start + hours(1), 5);
        slots.push(engine.create_slot(slot).await.unwrap().slot_id);
    }
    let request = |who: &str| {
        NewBooking::new("cart-1")
            .line(slots[0], 1)
            .line(slots[1], 1)
            .owner(owner(who))
    };
    let alice = engine.book(request("alice")).await.unwrap();
    let bob = engine.book(request("bob")).await.unwrap();
    assert!(!alice.replayed && !bob.replayed);
    assert_ne!(alice.booking.booking_id, bob.booking.booking_id);
    let again = engine.book(request("alice")).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.booking.booking_id, alice.booking.booking_id);
    let carol = crate::NewHold::new(slots[0], "cart-1").owner(owner("carol"));
    assert!(!engine.place_hold(carol).await.unwrap().replayed);
    let left = engine.store().get_slot(slots[0]).await.unwrap().unwrap();
    assert_eq!(left.stored_remaining, 2);
}
