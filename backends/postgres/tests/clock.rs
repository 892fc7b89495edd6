//! Application servers whose clocks disagree, on one database. Each scenario runs twice: with
//! every engine deciding by its own clock (the anomaly happens, by the size of the skew: this is
//! what the docs warn about) and with the store on the database's clock (it does not).

mod common;

use slot_booking::HoldStore;
use std::time::Duration as StdDuration;

use chrono::{Duration, Utc};
use common::*;
use slot_booking::model::truncate_to_micros;
use slot_booking::{
    BookingEngine, BookingError, Clock, HoldStatus, NewSlot, Scope, SlotId, SystemClock, Timestamp,
};
use slot_booking_postgres::PostgresStore;

/// The system clock moved by a fixed offset: an application server whose clock is off.
#[derive(Debug)]
struct Skewed(Duration);

impl Clock for Skewed {
    fn now(&self) -> Timestamp {
        truncate_to_micros(SystemClock.now() + self.0)
    }
}

const SKEW: i64 = 4;

/// Engines on `store`, one on time, one `SKEW` seconds fast and one `SKEW` seconds slow.
struct Servers {
    on_time: BookingEngine<PostgresStore>,
    fast: BookingEngine<PostgresStore>,
    slow: BookingEngine<PostgresStore>,
}

fn servers(store: &PostgresStore, database_clock: bool, hold_ttl: StdDuration) -> Servers {
    let store = if database_clock {
        store.clone().with_database_clock()
    } else {
        store.clone()
    };
    let engine = |offset: i64| {
        BookingEngine::builder(store.clone())
            .clock(Skewed(Duration::seconds(offset)))
            .hold_ttl(hold_ttl)
            .cache_period(StdDuration::ZERO)
            .build()
    };
    Servers {
        on_time: engine(0),
        fast: engine(SKEW),
        slow: engine(-SKEW),
    }
}

/// The database server's clock.
async fn database_now(store: &PostgresStore) -> Timestamp {
    sqlx::query_scalar("SELECT statement_timestamp()")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// Waits until the database's clock has passed `instant` (it is the authority asked).
async fn until_database_passes(store: &PostgresStore, instant: Timestamp) {
    for _ in 0..10_000 {
        if database_now(store).await > instant {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(5)).await;
    }
    panic!("the database clock never passed {instant}");
}

/// A slot of `capacity` starting `starts_in` after the database's now.
async fn slot_from_now(store: &PostgresStore, capacity: i32, starts_in: Duration) -> SlotId {
    let starts_at = database_now(store).await + starts_in;
    let slot = NewSlot::new(starts_at, starts_at + Duration::hours(1), capacity);
    store
        .create_slot(&slot, chrono::Utc::now())
        .await
        .unwrap()
        .slot_id
}

/// A hold with `2 * SKEW - 2` seconds to live: the fast server takes it back early.
async fn fast_server_reclaims_early(store: &PostgresStore, database_clock: bool) -> bool {
    let s = servers(
        store,
        database_clock,
        StdDuration::from_secs(2 * SKEW as u64 - 2),
    );
    let slot = slot_from_now(store, 1, Duration::hours(1)).await;
    let owners = s
        .slow
        .hold(slot, &key("owner", database_clock))
        .await
        .unwrap()
        .hold;
    // Well before the hold expires by any clock but the fast one, another client tries.
    let rival = s.fast.hold(slot, &key("rival", database_clock)).await;
    let confirm = s.slow.confirm(&Scope::Anonymous, owners.hold_id).await;
    match (rival, confirm) {
        (Err(BookingError::SoldOut { .. }), Ok(hold)) => {
            assert_eq!(hold.status, HoldStatus::Confirmed);
            false
        }
        (Ok(_), Err(BookingError::HoldExpired { .. })) => true,
        other => panic!("unexpected outcome: {other:?}"),
    }
}

/// A hold past its expiry on the database's clock: the slow server still confirms it.
async fn slow_server_confirms_late(store: &PostgresStore, database_clock: bool) -> bool {
    let s = servers(store, database_clock, StdDuration::from_millis(100));
    let slot = slot_from_now(store, 1, Duration::hours(1)).await;
    let hold = s
        .on_time
        .hold(slot, &key("late-confirm", database_clock))
        .await
        .unwrap()
        .hold;
    until_database_passes(store, hold.expires_at).await;
    match s.slow.confirm(&Scope::Anonymous, hold.hold_id).await {
        Ok(hold) => {
            assert_eq!(hold.status, HoldStatus::Confirmed);
            true
        }
        Err(BookingError::HoldExpired { .. }) => false,
        other => panic!("unexpected outcome: {other:?}"),
    }
}

/// A slot that has started on the database's clock: the slow server still sells it.
async fn slow_server_sells_a_started_slot(store: &PostgresStore, database_clock: bool) -> bool {
    let s = servers(store, database_clock, StdDuration::from_secs(300));
    let slot = slot_from_now(store, 1, Duration::milliseconds(100)).await;
    let starts_at = store_slot_start(store, slot).await;
    until_database_passes(store, starts_at).await;
    match s.slow.hold(slot, &key("late-sale", database_clock)).await {
        Ok(_) => true,
        Err(BookingError::SlotClosed { .. }) => false,
        other => panic!("unexpected outcome: {other:?}"),
    }
}

/// An active hold read by the fast server: without the database clock it reads as expired.
async fn fast_server_reads_an_active_hold_as_expired(
    store: &PostgresStore,
    database_clock: bool,
) -> bool {
    // Three seconds to live: less than the fast server's lead.
    let s = servers(store, database_clock, StdDuration::from_secs(3));
    let slot = slot_from_now(store, 1, Duration::hours(1)).await;
    let hold = s
        .on_time
        .hold(slot, &key("read", database_clock))
        .await
        .unwrap()
        .hold;
    match s
        .fast
        .get_hold(&Scope::Anonymous, hold.hold_id)
        .await
        .unwrap()
        .status
    {
        HoldStatus::Expired => true,
        HoldStatus::Held => false,
        other => panic!("unexpected status {other}"),
    }
}

/// A key of its own for each scenario and mode: the scenarios share one schema.
fn key(name: &str, database_clock: bool) -> String {
    format!("{name}-{}", if database_clock { "db" } else { "app" })
}

async fn store_slot_start(store: &PostgresStore, slot: SlotId) -> Timestamp {
    store.get_slot(slot).await.unwrap().unwrap().starts_at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_servers_disagree_on_their_own_clocks_and_agree_on_the_database_clock() {
    let Some(ctx) = setup("skewed_servers").await else {
        return;
    };
    let store = &ctx.store;
    // Sanity: the skew is real and the database clock is this machine's.
    let drift = (database_now(store).await - Utc::now())
        .num_milliseconds()
        .abs();
    assert!(
        drift < 1_000,
        "database and test clocks differ by {drift} ms"
    );

    assert!(fast_server_reclaims_early(store, false).await);
    assert!(!fast_server_reclaims_early(store, true).await);

    assert!(slow_server_confirms_late(store, false).await);
    assert!(!slow_server_confirms_late(store, true).await);

    assert!(slow_server_sells_a_started_slot(store, false).await);
    assert!(!slow_server_sells_a_started_slot(store, true).await);

    assert!(fast_server_reads_an_active_hold_as_expired(store, false).await);
    assert!(!fast_server_reads_an_active_hold_as_expired(store, true).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_database_clock_holds_expire_by_it() {
    let Some(ctx) = setup("database_clock_expiry").await else {
        return;
    };
    // With the fast paths, and placed by the core's rules over the kernel: both decide at the
    // database's instant.
    for (store, tag) in [
        (ctx.store.clone(), "fast"),
        (ctx.store.clone().without_fast_paths(), "composed"),
    ] {
        let s = servers(&store, true, StdDuration::from_millis(100));
        let slot = slot_from_now(&store, 1, Duration::hours(1)).await;
        let before = database_now(&store).await;
        let hold = s.slow.hold(slot, &format!("k-{tag}")).await.unwrap().hold;
        let after = database_now(&store).await;
        // The lifetime is counted from the database's instant, not the slow server's.
        assert!(
            hold.expires_at > before + Duration::milliseconds(100),
            "{tag}"
        );
        assert!(
            hold.expires_at <= after + Duration::milliseconds(100),
            "{tag}"
        );
        until_database_passes(&store, hold.expires_at).await;
        // The unit is free again by the database's clock, whichever server asks.
        assert!(
            s.fast.hold(slot, &format!("next-{tag}")).await.is_ok(),
            "{tag}"
        );
        assert_eq!(
            s.slow
                .get_hold(&Scope::Anonymous, hold.hold_id)
                .await
                .unwrap()
                .status,
            HoldStatus::Expired,
            "{tag}"
        );
        // A slot that has started on the database's clock sells to no server.
        let soon = slot_from_now(&store, 1, Duration::milliseconds(100)).await;
        until_database_passes(&store, store_slot_start(&store, soon).await).await;
        assert!(
            matches!(
                s.slow.hold(soon, &format!("late-{tag}")).await,
                Err(BookingError::SlotClosed { .. })
            ),
            "{tag}"
        );
    }
}
