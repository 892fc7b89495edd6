mod capture;
mod direct;

use std::time::Duration;

use chrono::TimeZone;

use self::capture::{labels_of, observed, TestRecorder};
use self::direct::Direct;
use super::operation::{operation_key, OPERATION_KEYS};
use super::outcome::OUTCOMES;
use super::{Operation, CACHE_HITS, CACHE_LOADS, CACHE_MISSES, CACHE_STALE_SERVES, OK};
use crate::model::SlotId;
use crate::store::StoreError;
use crate::{
    AvailabilityQuery, BookingEngine, BookingError, ManualClock, MemoryStore, NewSlot, Scope,
};

fn engine() -> BookingEngine<MemoryStore> {
    let clock = ManualClock::new(chrono::Utc.with_ymd_and_hms(2030, 1, 1, 9, 0, 0).unwrap());
    BookingEngine::builder(MemoryStore::new())
        .clock(clock)
        .cache_period(Duration::from_secs(10))
        .build()
}

/// Asserts that each `(operation, outcome)` was counted once.
fn assert_counted_once(recorder: &TestRecorder, calls: &[(&str, &str)]) {
    for (operation, outcome) in calls {
        assert_eq!(
            recorder.operations(operation, outcome),
            1,
            "{operation} {outcome}"
        );
    }
}

async fn slot(engine: &BookingEngine<MemoryStore>, capacity: i32) -> SlotId {
    let start = engine.clock().now() + chrono::Duration::hours(1);
    engine
        .create_slot(NewSlot::new(
            start,
            start + chrono::Duration::hours(1),
            capacity,
        ))
        .await
        .unwrap()
        .slot_id
}

#[test]
fn a_hold_placed_is_counted_timed_and_spanned_with_its_ids() {
    let (recorder, spans) = observed(|| async {
        let engine = engine();
        let slot = slot(&engine, 1).await;
        let placed = engine.hold(slot, "k-1").await.unwrap();
        assert_eq!(placed.hold.hold_id.get(), 1);
        assert!(engine.hold(slot, "k-1").await.unwrap().replayed);
    });
    assert_eq!(recorder.operations("hold", "ok"), 2);
    assert_eq!(recorder.operations("create_slot", "ok"), 1);
    let samples = recorder.store_samples("hold");
    assert_eq!(samples.len(), 2, "one store latency sample per hold");
    assert!(samples.iter().all(|s| s.is_finite() && *s >= 0.0));

    let holds = spans.named("hold");
    assert_eq!(holds.len(), 2);
    for (span, replayed) in holds.iter().zip(["false", "true"]) {
        assert_eq!(span.fields["slot_id"], "1");
        assert_eq!(span.fields["hold_id"], "1");
        assert_eq!(span.fields["outcome"], "ok");
        assert_eq!(span.fields["replayed"], replayed);
        assert!(span.fields["store_us"].parse::<u64>().is_ok());
    }
}

#[test]
fn a_sold_out_refusal_is_counted_under_its_code() {
    let (recorder, spans) = observed(|| async {
        let engine = engine();
        let slot = slot(&engine, 1).await;
        engine.hold(slot, "a").await.unwrap();
        let refused = engine.hold(slot, "b").await.unwrap_err();
        assert!(matches!(refused, BookingError::SoldOut { .. }));
        // Refused before any store call: counted all the same, with no latency sample.
        engine.hold(slot, "").await.unwrap_err();
    });
    assert_eq!(recorder.operations("hold", "ok"), 1);
    assert_eq!(recorder.operations("hold", "sold_out"), 1);
    assert_eq!(recorder.operations("hold", "invalid_idempotency_key"), 1);
    assert_eq!(recorder.store_samples("hold").len(), 2);
    assert_eq!(
        spans.field("hold", "outcome"),
        ["ok", "sold_out", "invalid_idempotency_key"]
    );
}

#[test]
fn cache_hits_misses_stale_serves_and_loads_are_told_apart() {
    let (recorder, spans) = observed(|| async {
        let engine = engine();
        slot(&engine, 3).await;
        // Nothing cached: a miss, which waits for a load.
        engine.availability(AvailabilityQuery::all()).await.unwrap();
        // Fresh: two hits, no store read.
        engine.availability(AvailabilityQuery::all()).await.unwrap();
        engine.availability(AvailabilityQuery::all()).await.unwrap();
        // Past the period: the stale listing at once, while a refresh loads.
        tokio::time::advance(Duration::from_secs(11)).await;
        engine.availability(AvailabilityQuery::all()).await.unwrap();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    });
    assert_eq!(recorder.counter(CACHE_MISSES, &[]), 1);
    assert_eq!(recorder.counter(CACHE_HITS, &[]), 2);
    assert_eq!(recorder.counter(CACHE_STALE_SERVES, &[]), 1);
    assert_eq!(recorder.counter(CACHE_LOADS, &[("outcome", "ok")]), 2);
    assert_eq!(recorder.operations("availability", "ok"), 4);
    assert_eq!(
        recorder.store_samples("availability").len(),
        2,
        "one store latency sample per load, none per hit"
    );

    assert_eq!(
        spans.field("availability", "cache"),
        ["loaded", "fresh", "fresh", "stale"]
    );
    let loads = spans.named("cache_load");
    assert_eq!(loads.len(), 2);
    for load in &loads {
        assert_eq!(load.parent, Some("availability"), "{load:?}");
        assert_eq!(load.fields["outcome"], "ok");
        assert!(load.fields["store_us"].parse::<u64>().is_ok());
    }
}

#[test]
fn confirm_cancel_and_administration_are_spanned_with_their_ids() {
    let (recorder, spans) = observed(|| async {
        let engine = engine();
        let slot = slot(&engine, 2).await;
        let hold = engine.hold(slot, "k").await.unwrap().hold.hold_id;
        engine.confirm(&Scope::Anonymous, hold).await.unwrap();
        engine.cancel(&Scope::Anonymous, hold).await.unwrap();
        engine.confirm(&Scope::Anonymous, hold).await.unwrap_err();
        engine.change_capacity(slot, 5).await.unwrap();
        engine.remove_slot(slot).await.unwrap();
    });
    assert_counted_once(
        &recorder,
        &[
            ("confirm", "ok"),
            ("cancel", "ok"),
            ("confirm", "hold_cancelled"),
            ("change_capacity", "ok"),
            ("remove_slot", "ok"),
        ],
    );
    let confirms = spans.named("confirm");
    assert_eq!(confirms[0].fields["hold_id"], "1");
    assert_eq!(confirms[1].fields["outcome"], "hold_cancelled");
    assert_eq!(spans.named("remove_slot")[0].fields["slot_id"], "1");
}

#[test]
fn writes_in_the_callers_transaction_are_the_same_operations_marked_as_such() {
    let (recorder, spans) = observed(|| async {
        let engine = engine();
        let slot = slot(&engine, 1).await;
        let mut within = engine.within(Direct(engine.store()));
        let hold = within
            .place_hold(crate::NewHold::new(slot, "t-1"))
            .await
            .unwrap()
            .hold
            .hold_id;
        within
            .place_hold(crate::NewHold::new(slot, "t-2"))
            .await
            .unwrap_err();
        within.confirm(&Scope::Anonymous, hold).await.unwrap();
        within.close_sales(slot).await.unwrap();
    });
    assert_counted_once(
        &recorder,
        &[
            ("hold", "ok"),
            ("hold", "sold_out"),
            ("confirm", "ok"),
            ("close_sales", "ok"),
        ],
    );
    assert_eq!(recorder.store_samples("confirm").len(), 1);
    let holds = spans.named("hold");
    assert_eq!(holds.len(), 2);
    assert!(holds.iter().all(|s| s.fields["transaction"] == "true"));
    assert_eq!(holds[0].fields["hold_id"], "1");
    assert_eq!(spans.named("confirm")[0].fields["slot_id"], "1");
    assert_eq!(spans.named("close_sales")[0].fields["transaction"], "true");
}

#[test]
fn every_error_code_has_a_static_key() {
    let codes = [
        BookingError::SlotNotFound { slot_id: SlotId(1) }.code(),
        BookingError::InvalidQuery.code(),
        BookingError::Store(StoreError::unavailable("down")).code(),
        BookingError::Store(StoreError::failed("broken")).code(),
    ];
    for code in codes {
        assert!(OUTCOMES.contains(&code), "{code}");
    }
    for (i, operation) in Operation::ALL.iter().enumerate() {
        assert_eq!(operation.index(), i);
        let key = &OPERATION_KEYS[i][3];
        assert_eq!(
            labels_of(key),
            [("operation", operation.name()), ("outcome", "sold_out")]
        );
    }
}

#[test]
fn each_static_key_is_labelled_with_its_operation_and_the_outcome_at_its_index() {
    assert_eq!(OUTCOMES[0], OK);
    assert_eq!(OUTCOMES[1..], *BookingError::CODES);
    for operation in Operation::ALL {
        for (key, outcome) in OPERATION_KEYS[operation.index()].iter().zip(OUTCOMES) {
            assert_eq!(
                labels_of(key),
                [("operation", operation.name()), ("outcome", outcome)]
            );
            assert_eq!(operation_key(*operation, outcome), Some(key));
        }
        assert_eq!(operation_key(*operation, "not_a_code"), None);
    }
}
