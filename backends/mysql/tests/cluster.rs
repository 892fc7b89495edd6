//! The store on the three-node Galera cluster `.ci/galera` starts: what a cluster adds to a
//! single server — causal reads, holds raced from every node, one event order across nodes,
//! changes followed from another node.

mod common;

use slot_booking_mysql::sqlx;

/// `MySqlStore::connect` gives a Galera node's connections causal reads and writes, so a
/// client's next call on another node finds its own writes.
#[tokio::test]
async fn connections_to_a_node_wait_for_the_cluster() {
    let (_guard, stores) = common::cluster_database("causal").await;
    for store in &stores {
        let wait: i64 = sqlx::query_scalar("SELECT CAST(@@SESSION.wsrep_sync_wait AS SIGNED)")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(wait, 15);
        let isolation: String = sqlx::query_scalar("SELECT @@SESSION.tx_isolation")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(isolation, "READ-COMMITTED");
    }
}

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{at, key, t0};
use slot_booking::{
    AvailabilityQuery, BookingEngine, ConsumerId, EventPosition, EventStore, HoldOutcome,
    HoldRequest, HoldStore, NewSlot, Scope,
};

/// Holds on one slot from every node at once: exactly its capacity is sold, every node agrees,
/// and the conflicts certification found were retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_raced_from_three_nodes_sell_exactly_the_capacity() {
    let (_guard, stores) = common::cluster_database("race").await;
    let capacity = 20;
    let slot_id = common::slot(&stores[0], capacity).await;
    let mut tasks = Vec::new();
    for n in 0..90 {
        let store = stores[n % 3].clone();
        tasks.push(tokio::spawn(async move {
            let k = key(&format!("race-{n}"));
            let request = HoldRequest {
                slot_id,
                key: &k,
                owner: None,
                quantity: 1,
                now: t0(),
                expires_at: at(600),
            };
            store.create_hold(request).await.map(|d| d.outcome)
        }));
    }
    let mut created = 0;
    for task in tasks {
        match task.await.unwrap().unwrap() {
            HoldOutcome::Created(_) => created += 1,
            HoldOutcome::SoldOut => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(created, capacity);
    for store in &stores {
        let (remaining, held): (i32, i64) = sqlx::query_as(
            "SELECT s.remaining, CAST((SELECT COUNT(*) FROM slot_booking_holds h \
             WHERE h.slot_id = s.id AND h.status = 'held') AS SIGNED) \
             FROM slot_booking_slots s WHERE s.id = ?",
        )
        .bind(slot_id.get())
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert_eq!((remaining, held), (0, i64::from(capacity)));
    }
    let retried: u64 = stores.iter().map(|s| s.conflicts_retried()).sum();
    eprintln!("holds raced from three nodes: {created} of 90 sold, {retried} conflicts retried");
}

/// Writers on every node and a consumer on one: the consumer, acknowledging as it reads, gets
/// every event of the log once, in one increasing order, whichever node wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_from_three_nodes_reach_a_consumer_once_in_order() {
    let (_guard, stores) = common::cluster_database("order").await;
    let start = stores[0].event_log_end().await.unwrap();
    let writers: Vec<_> = (0..3)
        .map(|n| {
            let store = stores[n].clone();
            tokio::spawn(async move {
                let slot_id = common::slot(&store, 5).await;
                for i in 0..25 {
                    let k = key(&format!("order-{n}-{i}"));
                    let request = HoldRequest {
                        slot_id,
                        key: &k,
                        owner: None,
                        quantity: 1,
                        now: t0(),
                        expires_at: at(600),
                    };
                    let HoldOutcome::Created(hold) =
                        store.create_hold(request).await.unwrap().outcome
                    else {
                        panic!("refused");
                    };
                    store
                        .cancel_hold(hold.hold_id, &Scope::Anonymous, at(1))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    let consumer = ConsumerId::new("order-consumer").unwrap();
    let reader = stores[2].clone();
    reader.acknowledge(&consumer, start).await.unwrap();
    let mut seen: Vec<EventPosition> = Vec::new();
    let mut writers_done = false;
    loop {
        let events = reader.read_events(&consumer, 40).await.unwrap();
        if let Some(last) = events.last() {
            reader.acknowledge(&consumer, last.position).await.unwrap();
        }
        let empty = events.is_empty();
        seen.extend(events.iter().map(|e| e.position));
        if writers_done && empty {
            break;
        }
        if !writers_done && writers.iter().all(|w| w.is_finished()) {
            writers_done = true;
        }
        if empty {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for writer in writers {
        writer.await.unwrap();
    }
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "positions out of order"
    );
    let whole: Vec<EventPosition> = stores[0]
        .read_events_after(start, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.position)
        .collect();
    // 3 slots created, 75 holds placed and cancelled.
    assert_eq!(whole.len(), 3 + 75 * 2);
    assert_eq!(seen, whole, "the consumer skipped or repeated an event");
    let unique: BTreeSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len());
}

/// A cancel through an engine on node 1 shows in the cached availability of an engine on
/// node 3 that follows the log: the delay is measured from the cancel's answer to the first
/// read of node 3's engine that shows the unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_on_one_node_shows_on_another_through_the_log() {
    let (_guard, stores) = common::cluster_database("follow").await;
    let writer = BookingEngine::new(stores[0].clone());
    let follower = BookingEngine::builder(stores[2].clone())
        .cache_period(Duration::from_secs(600))
        .max_age(Duration::from_secs(1200))
        .build();
    let _following = stores[2]
        .follow_changes(follower.invalidator())
        .await
        .unwrap();
    let start = chrono::Utc::now() + chrono::Duration::days(1);
    let slot = writer
        .create_slot(NewSlot::new(start, start + chrono::Duration::hours(1), 1))
        .await
        .unwrap();
    let free = |availability: &slot_booking::Availability| {
        availability
            .entries()
            .iter()
            .find(|e| e.slot_id == slot.slot_id)
            .map(|e| e.remaining)
    };
    let mut delays = Vec::new();
    for trial in 0..40 {
        let placed = writer
            .hold(slot.slot_id, &format!("follow-{trial}"))
            .await
            .unwrap();
        // The hold shows first (so the next change seen is the cancel).
        while free(
            &follower
                .availability(AvailabilityQuery::all())
                .await
                .unwrap(),
        ) != Some(0)
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        writer
            .cancel(&Scope::Anonymous, placed.hold.hold_id)
            .await
            .unwrap();
        let cancelled = Instant::now();
        while free(
            &follower
                .availability(AvailabilityQuery::all())
                .await
                .unwrap(),
        ) != Some(1)
        {
            assert!(
                cancelled.elapsed() < Duration::from_secs(5),
                "the cancel never showed"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        delays.push(cancelled.elapsed());
    }
    delays.sort();
    let p50 = delays[delays.len() / 2];
    let p99 = delays[delays.len() * 99 / 100];
    eprintln!(
        "a cancel on node 1 showed on node 3 after p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} trials)",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        delays[delays.len() - 1].as_secs_f64() * 1e3,
        delays.len()
    );
}
