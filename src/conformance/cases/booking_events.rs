//! Booking cases that read the event log: a consumer rebuilds every slot's units from the
//! events alone.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration as StdDuration;

use chrono::Duration;

use crate::bookings::NewBooking;
use crate::conformance::support::{consumer, hours};
use crate::conformance::Fixture;
use crate::error::BookingError;
use crate::events::{EventKind, EventStore};
use crate::model::{AvailabilityQuery, Event, SlotId};
use crate::scope::Scope;
use crate::store::{BookingStore, SlotAdmin};

/// A slot's units as a consumer of the event log sees them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Units {
    capacity: i32,
    held: i32,
    confirmed: i32,
}

/// Folds the event log into each slot's capacity and units held (every hold stored as held,
/// expired or not, until its `hold_expired`) and confirmed. The events of a cancel do not say
/// whether the hold was held or confirmed: the consumer remembers the holds it saw confirmed.
fn rebuild(events: &[Event]) -> BTreeMap<SlotId, Units> {
    let mut slots: BTreeMap<SlotId, Units> = BTreeMap::new();
    let mut confirmed = HashSet::new();
    for event in events {
        let units = slots.entry(event.slot_id).or_default();
        let q = event.quantity;
        match (event.kind, event.hold_id) {
            (EventKind::SlotCreated | EventKind::SlotCapacityChanged, _) => units.capacity = q,
            (EventKind::HoldPlaced, _) => units.held += q,
            (EventKind::HoldConfirmed, Some(hold)) => {
                confirmed.insert(hold);
                units.held -= q;
                units.confirmed += q;
            }
            (EventKind::HoldCancelled, Some(hold)) if confirmed.contains(&hold) => {
                units.confirmed -= q;
            }
            (EventKind::HoldCancelled | EventKind::HoldExpired, _) => units.held -= q,
            _ => {}
        }
    }
    slots
}

/// Every slot's units after bookings of several lines, holds, confirms, cancels, a capacity
/// change and reclaimed expiries, rebuilt from the event log alone, equal the store's.
pub(super) async fn a_consumer_rebuilds_every_slots_units_from_events<
    S: BookingStore + SlotAdmin + EventStore,
>(
    store: S,
) {
    let f = Fixture::new(store);
    let (a, b, c) = (
        f.slot(5, hours(1)).await,
        f.slot(3, hours(1)).await,
        f.slot(2, hours(1)).await,
    );
    let any = Scope::Anonymous;
    let pair = NewBooking::new("pair").line(a, 2).line(b, 1);
    let pair = f.engine.book(pair).await.unwrap().booking;
    let single = f.engine.hold(c, "single").await.unwrap().hold;
    let brief = NewBooking::new("brief")
        .line(a, 1)
        .line(c, 1)
        .lifetime(StdDuration::from_secs(60));
    f.engine.book(brief).await.unwrap();
    let other = NewBooking::new("other").line(b, 2).line(c, 0);
    assert!(f.engine.book(other).await.is_err());
    f.engine
        .confirm_booking(&any, pair.booking_id)
        .await
        .unwrap();
    f.engine.cancel(&any, single.hold_id).await.unwrap();
    f.engine.change_capacity(a, 6).await.unwrap();
    f.advance(Duration::minutes(2));
    assert_eq!(f.engine.reclaim_expired(100).await.unwrap().len(), 2);
    let refused = NewBooking::new("refused").line(a, 1).line(b, 3);
    assert!(matches!(
        f.engine.book(refused).await,
        Err(BookingError::LinesUnavailable { .. })
    ));
    let last = NewBooking::new("last").line(b, 2).line(c, 2);
    let last = f.engine.book(last).await.unwrap().booking;
    f.engine
        .cancel_booking(&any, last.booking_id)
        .await
        .unwrap();

    let reader = consumer("rebuild");
    let mut events = Vec::new();
    loop {
        let batch = f.engine.read_events(&reader, 100).await.unwrap();
        let Some(last) = batch.last() else {
            break;
        };
        f.engine
            .acknowledge_events(&reader, last.position)
            .await
            .unwrap();
        events.extend(batch);
    }
    let units = rebuild(&events);
    let listed = f.list_all(&AvailabilityQuery::all(), 10).await;
    assert_eq!(listed.len(), 3);
    for summary in listed {
        let rebuilt = units[&summary.slot_id];
        assert_eq!(
            rebuilt,
            Units {
                capacity: summary.capacity,
                held: summary.held,
                confirmed: summary.confirmed,
            },
            "slot {} rebuilt from {} events",
            summary.slot_id,
            events.len()
        );
        let stored = f.stored_slot(summary.slot_id).await;
        assert_eq!(
            stored.stored_remaining,
            rebuilt.capacity - rebuilt.held - rebuilt.confirmed
        );
    }
}

/// Every event of a line of a booking of several lines carries the booking's id (its first
/// line's hold id), for each of its changes (placed, confirmed, cancelled); a hold placed alone
/// carries none. A purge keeps an ended booking's lines while a consumer has not read their
/// events (so a late reader still finds each line's booking), and drops them once it has; a
/// hold placed alone goes as ever.
pub(super) async fn booking_line_events_carry_the_booking<
    S: BookingStore + SlotAdmin + EventStore,
>(
    store: S,
) {
    let f = Fixture::new(store);
    let (a, b, c) = (
        f.slot(5, hours(1)).await,
        f.slot(5, hours(1)).await,
        f.slot(5, hours(1)).await,
    );
    let mailer = consumer("mailer");
    let store = f.engine.store();
    store
        .acknowledge(&mailer, crate::EventPosition::START)
        .await
        .expect("register the consumer");
    let any = Scope::Anonymous;
    let stay = NewBooking::new("stay").line(a, 1).line(b, 2).line(c, 1);
    let stay = f.engine.book(stay).await.unwrap().booking;
    let single = f.engine.hold(a, "single").await.unwrap().hold;
    f.engine
        .confirm_booking(&any, stay.booking_id)
        .await
        .unwrap();
    f.engine
        .cancel_booking(&any, stay.booking_id)
        .await
        .unwrap();
    f.engine.cancel(&any, single.hold_id).await.unwrap();
    let lines: HashSet<_> = stay.lines.iter().map(|h| h.hold_id).collect();
    let check = |events: &[Event]| {
        let mut per_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for event in events.iter().filter(|e| e.hold_id.is_some()) {
            let hold = event.hold_id.expect("a hold event");
            if lines.contains(&hold) {
                assert_eq!(event.booking_id, Some(stay.booking_id), "{event:?}");
                *per_kind.entry(event.kind.as_str()).or_default() += 1;
            } else {
                assert_eq!(hold, single.hold_id);
                assert_eq!(event.booking_id, None, "a hold placed alone: {event:?}");
            }
        }
        assert_eq!(
            per_kind,
            BTreeMap::from([
                ("hold_cancelled", 3),
                ("hold_confirmed", 3),
                ("hold_placed", 3)
            ]),
            "one event per line and change"
        );
        // Acting once per booking: the events whose booking is their own hold or none.
        let once: Vec<_> = events
            .iter()
            .filter(|e| e.hold_id.is_some() && e.booking_id.is_none_or(|b| Some(b) == e.hold_id))
            .map(|e| (e.kind, e.hold_id))
            .collect();
        assert_eq!(
            once.len(),
            5,
            "three changes of the booking, two of the hold: {once:?}"
        );
    };
    check(
        &store
            .read_events_after(crate::EventPosition::START, 100)
            .await
            .unwrap(),
    );

    // A purge past every hold's end, the mailer behind: the booking's lines stay with their
    // events, the hold placed alone goes.
    f.advance(hours(24));
    let purged = f
        .engine
        .purge(StdDuration::from_secs(3600), 1000)
        .await
        .expect("purge");
    assert_eq!(
        purged.holds, 1,
        "the lines of unread events stay: {purged:?}"
    );
    let unread = store.read_events(&mailer, 100).await.unwrap();
    check(&unread);
    // Read and acknowledged: the events go, then their holds.
    let last = unread.last().expect("events").position;
    store.acknowledge(&mailer, last).await.unwrap();
    let mut holds = 0;
    for _ in 0..3 {
        holds += f
            .engine
            .purge(StdDuration::from_secs(3600), 1000)
            .await
            .expect("purge")
            .holds;
    }
    assert_eq!(holds, 3, "every line, once no event names it");
}
