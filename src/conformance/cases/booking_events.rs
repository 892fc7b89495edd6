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
        .confirm_booking_as(&any, pair.booking_id)
        .await
        .unwrap();
    f.engine.cancel_as(&any, single.hold_id).await.unwrap();
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
        .cancel_booking_as(&any, last.booking_id)
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
