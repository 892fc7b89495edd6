//! How many statements a hold costs: counted from the event sqlx emits for every statement it
//! runs (target `sqlx::query`), on this thread while the test's future runs, so other tests'
//! statements are not counted, and only those naming the store's schema. Each statement is
//! one round trip.
//!
//! A sale refuses most requests: a hold on a full slot with no expired holds, or on a slot that
//! is not selling, or whose key is in use, is answered by the fast statement alone, which reads
//! why in the same round trip. Only a slot with expired holds still held takes the reclaiming
//! statement (and, if that still finds no room, the explaining read).

mod common;

use slot_booking::SlotAdmin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use slot_booking::{HoldOutcome, SlotId, Timestamp};
use slot_booking_postgres::PostgresStore;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A subscriber that counts sqlx's statement events naming the store's schema (the store's
/// own statements: a connection the pool opens meanwhile on this thread runs statements of its
/// own) and ignores everything else.
struct StatementCounter {
    count: Arc<AtomicUsize>,
    schema: String,
}

/// Whether any text field of an event names the schema.
struct Names<'a> {
    schema: &'a str,
    found: bool,
}

impl Names<'_> {
    /// The schema's statements, and the savepoints the store opens in a caller's transaction
    /// (which name no table).
    fn see(&mut self, text: &str) {
        self.found |= text.contains(self.schema) || text.contains("SAVEPOINT slot_booking_hold");
    }
}

impl Visit for Names<'_> {
    fn record_str(&mut self, _: &Field, value: &str) {
        self.see(value);
    }
    fn record_debug(&mut self, _: &Field, value: &dyn std::fmt::Debug) {
        self.see(&format!("{value:?}"));
    }
}

impl Subscriber for StatementCounter {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "sqlx::query"
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut names = Names {
            schema: &self.schema,
            found: false,
        };
        event.record(&mut names);
        if names.found {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The outcome of a one-unit hold (`quantity` units) at `now`, and how many statements it ran.
async fn counted(
    store: &PostgresStore,
    slot: SlotId,
    k: &str,
    quantity: i32,
    now: Timestamp,
) -> (HoldOutcome, usize) {
    let count = Arc::new(AtomicUsize::new(0));
    let _counting = tracing::subscriber::set_default(StatementCounter {
        count: Arc::clone(&count),
        schema: format!("\"{}\".", store.schema()),
    });
    let outcome = hold_units(store, slot, k, quantity, now).await;
    (outcome, count.load(Ordering::SeqCst))
}

/// The same for a hold inside the caller's transaction `tx` (`PostgresStore::on`).
async fn counted_in(
    store: &PostgresStore,
    tx: &mut sqlx::PgConnection,
    slot: SlotId,
    k: &str,
    quantity: i32,
    now: Timestamp,
) -> (HoldOutcome, usize) {
    use slot_booking::TransactionWrites;
    let count = Arc::new(AtomicUsize::new(0));
    let _counting = tracing::subscriber::set_default(StatementCounter {
        count: Arc::clone(&count),
        schema: format!("\"{}\".", store.schema()),
    });
    let k = key(k);
    let mut wanted = request(slot, &k, now);
    wanted.quantity = quantity;
    let outcome = store.on(tx).create_hold(wanted).await.unwrap().outcome;
    (outcome, count.load(Ordering::SeqCst))
}

// One test in this binary, on the current-thread runtime: the store's statements run on the
// thread whose default subscriber counts them, and no other test's thread registers a
// subscriber of its own meanwhile (tracing caches which subscribers want an event per call
// site, process-wide).
#[tokio::test]
async fn hold_round_trips() {
    a_refusal_without_expired_holds_costs_one_round_trip().await;
    expired_holds_still_take_the_reclaiming_statement().await;
    a_waiting_line_refuses_in_one_round_trip().await;
    a_hold_in_the_callers_transaction_costs_one_round_trip().await;
}

async fn a_refusal_without_expired_holds_costs_one_round_trip() {
    let Some(ctx) = setup("round_trips").await else {
        return;
    };
    let store = &ctx.store;
    let full = slot(store, 2).await;

    let (created, statements) = counted(store, full, "a", 2, at(0)).await;
    assert!(matches!(created, HoldOutcome::Created(_)), "{created:?}");
    assert_eq!(statements, 1, "a hold that finds its units");

    // Full, nothing expired: sold out, in the fast statement's round trip.
    let (sold_out, statements) = counted(store, full, "b", 1, at(10)).await;
    assert_eq!(sold_out, HoldOutcome::SoldOut);
    assert_eq!(statements, 1, "a sold-out refusal");

    // The key in use wins over the full slot, in the same round trip.
    let (replayed, statements) = counted(store, full, "a", 2, at(20)).await;
    assert!(matches!(replayed, HoldOutcome::Replayed(_)), "{replayed:?}");
    assert_eq!(statements, 1, "a replay on a full slot");
    let (reused, statements) = counted(store, full, "a", 1, at(20)).await;
    assert!(
        matches!(reused, HoldOutcome::KeyReused(Some(_))),
        "{reused:?}"
    );
    assert_eq!(statements, 1, "a reused key on a full slot");
    // And where units are left: the key is checked before any unit is taken.
    let roomy = slot(store, 5).await;
    let (elsewhere, statements) = counted(store, roomy, "a", 2, at(20)).await;
    assert!(
        matches!(elsewhere, HoldOutcome::KeyReused(Some(_))),
        "{elsewhere:?}"
    );
    assert_eq!(statements, 1, "a key in use on a slot with units left");
    assert_eq!(counts(store, roomy).await, (5, 5, 0, 0));

    // More than the slot's capacity, a missing slot, a closed one and a started one.
    let (too_many, statements) = counted(store, full, "c", 3, at(30)).await;
    assert_eq!(too_many, HoldOutcome::ExceedsCapacity { capacity: 2 });
    assert_eq!(statements, 1, "more than the capacity");
    let (missing, statements) = counted(store, SlotId(i64::MAX), "d", 1, at(30)).await;
    assert_eq!(missing, HoldOutcome::SlotNotFound);
    assert_eq!(statements, 1, "a missing slot");
    let closed = slot(store, 2).await;
    store.set_closed(closed, true, at(30)).await.unwrap();
    let (refused, statements) = counted(store, closed, "e", 1, at(40)).await;
    assert_eq!(refused, HoldOutcome::SlotClosed);
    assert_eq!(statements, 1, "a closed slot");
    let (started, statements) = counted(store, full, "f", 1, at(3600)).await;
    assert_eq!(started, HoldOutcome::SlotClosed);
    assert_eq!(statements, 1, "a started slot");
}

async fn expired_holds_still_take_the_reclaiming_statement() {
    let Some(ctx) = setup("round_trips_expired").await else {
        return;
    };
    let store = &ctx.store;
    let slot_id = slot(store, 1).await;
    // Expires at(300).
    assert!(matches!(
        hold(store, slot_id, "a", at(0)).await,
        HoldOutcome::Created(_)
    ));

    // Full at the snapshot, but its hold has expired: the fast statement cannot settle it; the
    // reclaiming one gives the unit back and takes it.
    let (created, statements) = counted(store, slot_id, "b", 1, at(600)).await;
    assert!(matches!(created, HoldOutcome::Created(_)), "{created:?}");
    assert_eq!(statements, 2, "fast, then reclaiming");
    assert_eq!(counts(store, slot_id).await, (1, 0, 1, 0));

    // And full again with nothing expired: one round trip.
    let (sold_out, statements) = counted(store, slot_id, "c", 1, at(610)).await;
    assert_eq!(sold_out, HoldOutcome::SoldOut);
    assert_eq!(statements, 1);
}

async fn a_waiting_line_refuses_in_one_round_trip() {
    use slot_booking::{JoinOutcome, JoinRequest, WaitlistStore};
    let Some(ctx) = setup("round_trips_waiting").await else {
        return;
    };
    let store = &ctx.store;
    let slot_id = slot(store, 2).await;
    assert!(matches!(
        hold(store, slot_id, "a", at(0)).await,
        HoldOutcome::Created(_)
    ));
    // One unit free, but the head of the line wants two: it waits, and so does the unit.
    let waits = key("w");
    let mut wanted = request(slot_id, &waits, at(0));
    wanted.quantity = 2;
    let joined = store
        .join_waitlist(JoinRequest {
            hold: wanted,
            priority: 0,
        })
        .await
        .unwrap()
        .outcome;
    assert!(matches!(joined, JoinOutcome::Waiting { .. }), "{joined:?}");

    // A newcomer is refused in the fast statement's round trip, though a unit is free.
    let (sold_out, statements) = counted(store, slot_id, "b", 1, at(10)).await;
    assert_eq!(sold_out, HoldOutcome::SoldOut);
    assert_eq!(statements, 1, "a hold on a slot whose line waits");
    // The entry's key: reused, in the same round trip.
    let (reused, statements) = counted(store, slot_id, "w", 2, at(10)).await;
    assert_eq!(reused, HoldOutcome::KeyReused(None));
    assert_eq!(statements, 1, "the key of a waiting entry");
    assert_eq!(counts(store, slot_id).await, (2, 1, 1, 0));
}

/// Inside the caller's transaction a hold costs what it costs on the pool: one statement
/// whether it is created, replayed or refused, and no savepoint, since the statement checks
/// its key before it takes anything and refuses by changing nothing; the transaction stays
/// usable and commits what it placed.
async fn a_hold_in_the_callers_transaction_costs_one_round_trip() {
    let Some(ctx) = setup("round_trips_in_tx").await else {
        return;
    };
    let store = &ctx.store;
    let roomy = slot(store, 3).await;
    let mut tx = ctx.pool().begin().await.unwrap();
    let (created, statements) = counted_in(store, &mut tx, roomy, "a", 2, at(0)).await;
    assert!(matches!(created, HoldOutcome::Created(_)), "{created:?}");
    assert_eq!(statements, 1, "a hold placed in the caller's transaction");
    let (replayed, statements) = counted_in(store, &mut tx, roomy, "a", 2, at(5)).await;
    assert!(matches!(replayed, HoldOutcome::Replayed(_)), "{replayed:?}");
    assert_eq!(statements, 1, "a replay in the caller's transaction");
    let (reused, statements) = counted_in(store, &mut tx, roomy, "a", 1, at(5)).await;
    assert!(
        matches!(reused, HoldOutcome::KeyReused(Some(_))),
        "{reused:?}"
    );
    assert_eq!(statements, 1, "a reused key in the caller's transaction");
    let (sold_out, statements) = counted_in(store, &mut tx, roomy, "b", 2, at(5)).await;
    assert_eq!(sold_out, HoldOutcome::SoldOut);
    assert_eq!(
        statements, 1,
        "a sold-out refusal in the caller's transaction"
    );
    let (last, statements) = counted_in(store, &mut tx, roomy, "c", 1, at(10)).await;
    assert!(matches!(last, HoldOutcome::Created(_)), "{last:?}");
    assert_eq!(statements, 1, "still usable after the refusals");
    tx.commit().await.unwrap();
    assert_eq!(counts(store, roomy).await, (3, 0, 3, 0));
}
