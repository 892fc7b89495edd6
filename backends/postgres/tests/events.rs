//! The event log on PostgreSQL beyond the core's suite: a consumer resuming on a new pool
//! after a crash, writes in a caller's transaction that commit or roll back their events with
//! it, readers that never skip an event whose transaction commits after a later one, and
//! sweepers racing holds, cancels and each other over the same slots without a deadlock or a
//! hold reported twice.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration as StdDuration;

use chrono::Duration;
use common::*;
use slot_booking::{
    ConsumerId, Event, EventKind, EventPosition, EventStore, HoldId, HoldOutcome, HoldRequest,
    Scope, SlotId, Store, Timestamp, TransactionWrites,
};
use slot_booking_postgres::PostgresStore;
use sqlx::postgres::PgPool;

fn consumer(name: &str) -> ConsumerId {
    ConsumerId::new(name).unwrap()
}

/// A hold of one unit at `now` that expires `ttl` seconds later.
async fn hold_for(
    store: &PostgresStore,
    slot: SlotId,
    k: &str,
    now: Timestamp,
    ttl: i64,
) -> HoldId {
    let k = key(k);
    let request = HoldRequest {
        expires_at: now + Duration::seconds(ttl),
        ..request(slot, &k, now)
    };
    match store.create_hold(request).await.unwrap().outcome {
        HoldOutcome::Created(hold) => hold.hold_id,
        other => panic!("{other:?}"),
    }
}

/// Every event after `name`'s cursor, acknowledged.
async fn drain(store: &PostgresStore, name: &ConsumerId) -> Vec<Event> {
    let mut all = Vec::new();
    loop {
        let batch = store.read_events(name, 1000).await.unwrap();
        let Some(last) = batch.last() else {
            return all;
        };
        store.acknowledge(name, last.position).await.unwrap();
        all.extend(batch);
    }
}

fn kinds(events: &[Event]) -> Vec<(EventKind, Option<HoldId>)> {
    events.iter().map(|e| (e.kind, e.hold_id)).collect()
}

/// The id of the current transaction of `conn`, as an event's epoch.
async fn xact_id(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar("SELECT pg_current_xact_id()::text::int8")
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_resumes_after_a_crash_on_a_new_pool() {
    let Some(ctx) = setup("a_consumer_resumes_after_a_crash_on_a_new_pool").await else {
        return;
    };
    let mailer = consumer("mailer");
    let slot = slot(&ctx.store, 5).await;
    let mut held = Vec::new();
    for k in ["a", "b", "c"] {
        held.push(hold_for(&ctx.store, slot, k, at(0), 300).await);
    }
    let (first, unacknowledged) = {
        // The first process reads four events, handles two, acknowledges them and dies.
        let store = ctx.second_store().await;
        let read = store.read_events(&mailer, 4).await.unwrap();
        assert_eq!(read.len(), 4);
        store.acknowledge(&mailer, read[1].position).await.unwrap();
        store.pool().close().await;
        (read[..2].to_vec(), read[2..].to_vec())
    };
    assert_eq!(
        kinds(&first),
        [
            (EventKind::SlotCreated, None),
            (EventKind::HoldPlaced, Some(held[0]))
        ]
    );
    // A new process, a new pool on the same schema: from the first unacknowledged event on.
    let store = ctx.second_store().await;
    assert_eq!(
        store.consumer_position(&mailer).await.unwrap(),
        Some(first[1].position)
    );
    let again = store.read_events(&mailer, 10).await.unwrap();
    assert_eq!(&again[..2], &unacknowledged[..]);
    assert_eq!(again.len(), 2);
    store.acknowledge(&mailer, again[1].position).await.unwrap();
    // Acknowledging an earlier position (a late retry of the crashed process) changes nothing.
    store.acknowledge(&mailer, first[0].position).await.unwrap();
    store
        .acknowledge(&mailer, EventPosition::START)
        .await
        .unwrap();
    assert_eq!(
        store.consumer_position(&mailer).await.unwrap(),
        Some(again[1].position)
    );
    assert_eq!(store.read_events(&mailer, 10).await.unwrap(), []);
    store.pool().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_in_a_caller_transaction_append_with_it_or_not_at_all() {
    let Some(ctx) = setup("writes_in_a_caller_transaction_append_with_it_or_not_at_all").await
    else {
        return;
    };
    let store = &ctx.store;
    let log = consumer("log");
    let slot = slot(store, 2).await;
    drain(store, &log).await;

    // Rolled back: a hold, its confirmation and a capacity change, and no event of theirs.
    let mut tx = store.pool().begin().await.unwrap();
    {
        let mut writes = store.on(&mut tx);
        let k = key("rolled-back");
        let hold = match writes
            .create_hold(request(slot, &k, at(0)))
            .await
            .unwrap()
            .outcome
        {
            HoldOutcome::Created(hold) => hold,
            other => panic!("{other:?}"),
        };
        writes
            .confirm_hold(hold.hold_id, &Scope::BackOffice, at(1))
            .await
            .unwrap();
        writes.change_capacity(slot, 3, at(1)).await.unwrap();
    }
    let in_flight: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{}\".events WHERE tx = pg_current_xact_id()",
        ctx.schema()
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(in_flight, 3, "the transaction sees its own events");
    tx.rollback().await.unwrap();
    assert_eq!(drain(store, &log).await, []);
    assert_eq!(counts(store, slot).await, (2, 2, 0, 0));

    // Committed: the events come with the transaction, all with its id as their epoch, in
    // the order of the writes; a refused hold inside it (its key taken) appends nothing.
    let mut tx = store.pool().begin().await.unwrap();
    let epoch = xact_id(&mut tx).await;
    let placed = {
        let mut writes = store.on(&mut tx);
        let k = key("committed");
        let hold = match writes
            .create_hold(request(slot, &k, at(0)))
            .await
            .unwrap()
            .outcome
        {
            HoldOutcome::Created(hold) => hold,
            other => panic!("{other:?}"),
        };
        let other = slot_booking::IdempotencyKey::new("committed").unwrap();
        let mut reused = request(slot, &other, at(0));
        reused.quantity = 2;
        assert!(matches!(
            writes.create_hold(reused).await.unwrap().outcome,
            HoldOutcome::KeyReused(_)
        ));
        writes
            .cancel_hold(hold.hold_id, &Scope::BackOffice, at(2))
            .await
            .unwrap();
        writes.set_closed(slot, true, at(3)).await.unwrap();
        hold.hold_id
    };
    // Not visible to a reader before the commit.
    let early = store
        .clone()
        .with_event_read_wait(StdDuration::from_millis(20))
        .read_events(&log, 10)
        .await
        .unwrap();
    assert_eq!(early, []);
    tx.commit().await.unwrap();
    let events = drain(store, &log).await;
    assert_eq!(
        kinds(&events),
        [
            (EventKind::HoldPlaced, Some(placed)),
            (EventKind::HoldCancelled, Some(placed)),
            (EventKind::SlotClosed, None),
        ]
    );
    assert!(events.iter().all(|e| e.position.epoch() == epoch));
    assert_eq!(
        events.iter().map(|e| e.at).collect::<Vec<_>>(),
        [at(0), at(2), at(3)]
    );
}

/// Begins a transaction on `pool` whose id is assigned at once (it is then "running" for
/// every snapshot taken until it ends), returning it and its id.
async fn running_transaction(pool: &PgPool) -> (sqlx::Transaction<'static, sqlx::Postgres>, i64) {
    let mut tx = pool.begin().await.unwrap();
    let id = xact_id(&mut tx).await;
    (tx, id)
}

/// The trap of an outbox ordered by sequence numbers: a sequence number is drawn when a row is
/// written, not when its transaction commits. Transaction A appends first (the lower `id`) and
/// commits last; B appends and commits in between. A reader that paged by `id` alone would
/// read B's event, acknowledge it and never see A's. Also the other way round: A's
/// transaction started first (the lower tx) but appends after B committed (the higher `id`).
/// Either way the store's reader holds B back until A ends and then delivers both, in
/// (tx, id) order, and a consumer acknowledging as it goes skips neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_never_skips_an_event_that_commits_after_a_later_one() {
    let Some(ctx) = setup("a_reader_never_skips_an_event_that_commits_after_a_later_one").await
    else {
        return;
    };
    let s = format!("\"{}\"", ctx.schema());
    let store = &ctx.store;
    // A reader that does not wait: it answers at once with what it may deliver.
    let impatient = store.clone().with_event_read_wait(StdDuration::ZERO);
    let follower = consumer("follower");
    let (one, two) = (slot(store, 5).await, slot(store, 5).await);
    assert_eq!(drain(store, &follower).await.len(), 2);

    // 1. A appends first and commits last.
    let (mut a, a_tx) = running_transaction(store.pool()).await;
    let k = key("a-1");
    let a_hold = match store
        .on(&mut a)
        .create_hold(request(one, &k, at(0)))
        .await
        .unwrap()
        .outcome
    {
        HoldOutcome::Created(hold) => hold.hold_id,
        other => panic!("{other:?}"),
    };
    let b_hold = hold_for(store, two, "b-1", at(0), 300).await; // B commits here.
    let by_id: Vec<(i64, Option<i64>)> = sqlx::query_as(&format!(
        "SELECT id, hold_id FROM {s}.events ORDER BY id DESC LIMIT 1"
    ))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(by_id[0].1, Some(b_hold.get()), "B's event is visible by id");
    // The trap, shown: A's event has the lower id but is not visible yet; a reader by id
    // would acknowledge B's id and never come back for A's.
    let a_id: i64 = sqlx::query_scalar(&format!("SELECT id FROM {s}.events WHERE hold_id = $1"))
        .bind(a_hold.get())
        .fetch_one(&mut *a)
        .await
        .unwrap();
    assert!(a_id < by_id[0].0);
    // The store's reader returns nothing while A runs: B's event waits behind it.
    for _ in 0..3 {
        assert_eq!(impatient.read_events(&follower, 10).await.unwrap(), []);
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }
    // A patient reader, started now, returns both once A commits.
    let patient = {
        let store = store
            .clone()
            .with_event_read_wait(StdDuration::from_secs(30));
        let follower = follower.clone();
        tokio::spawn(async move { store.read_events(&follower, 10).await.unwrap() })
    };
    tokio::time::sleep(StdDuration::from_millis(100)).await;
    assert!(!patient.is_finished(), "the reader waits for A");
    a.commit().await.unwrap();
    let read = patient.await.unwrap();
    assert_eq!(
        kinds(&read),
        [
            (EventKind::HoldPlaced, Some(a_hold)),
            (EventKind::HoldPlaced, Some(b_hold)),
        ]
    );
    assert_eq!(read[0].position.epoch(), a_tx);
    assert!(read[0].position < read[1].position);
    store
        .acknowledge(&follower, read[1].position)
        .await
        .unwrap();

    // 2. A starts first (the lower tx) and appends after B committed (the higher id).
    let (mut a, a_tx) = running_transaction(store.pool()).await;
    let b_hold = hold_for(store, two, "b-2", at(0), 300).await;
    let read = impatient.read_events(&follower, 10).await.unwrap();
    assert_eq!(read, [], "B is held back while A may still append below it");
    let k = key("a-2");
    let a_hold = match store
        .on(&mut a)
        .create_hold(request(one, &k, at(0)))
        .await
        .unwrap()
        .outcome
    {
        HoldOutcome::Created(hold) => hold.hold_id,
        other => panic!("{other:?}"),
    };
    assert_eq!(impatient.read_events(&follower, 10).await.unwrap(), []);
    a.commit().await.unwrap();
    let read = drain(store, &follower).await;
    assert_eq!(
        kinds(&read),
        [
            (EventKind::HoldPlaced, Some(a_hold)),
            (EventKind::HoldPlaced, Some(b_hold)),
        ]
    );
    assert_eq!(read[0].position.epoch(), a_tx);
    assert!(
        read[0].position.sequence() > read[1].position.sequence(),
        "A's id is the higher one, yet it comes first"
    );

    // 3. A rolled back: B's event is delivered once A is gone, A's never.
    let (mut a, _) = running_transaction(store.pool()).await;
    let k = key("a-3");
    store
        .on(&mut a)
        .create_hold(request(one, &k, at(0)))
        .await
        .unwrap();
    let b_hold = hold_for(store, two, "b-3", at(0), 300).await;
    assert_eq!(impatient.read_events(&follower, 10).await.unwrap(), []);
    a.rollback().await.unwrap();
    assert_eq!(
        kinds(&drain(store, &follower).await),
        [(EventKind::HoldPlaced, Some(b_hold))]
    );
}

/// Where a sweeper waits: for a slot row a caller's transaction holds, while it holds the
/// rows of lower slots and no hold row. The transaction then reclaims that slot's expired
/// holds itself (a hold on a full slot): had the sweeper locked those holds first, the two
/// would wait for each other. It does not: the transaction commits, and the sweeper then
/// reclaims the other slot's holds and reports none of the ones the transaction reclaimed;
/// each expired hold has exactly one event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweeper_waits_for_slot_rows_and_never_holds_hold_rows_first() {
    let Some(ctx) = setup("a_sweeper_waits_for_slot_rows_and_never_holds_hold_rows_first").await
    else {
        return;
    };
    let store = &ctx.store;
    let log = consumer("log");
    let low = slot(store, 2).await;
    let high = slot(store, 3).await;
    let mut low_expiring = BTreeSet::new();
    let mut high_expiring = BTreeSet::new();
    for i in 0..2 {
        low_expiring.insert(hold_for(store, low, &format!("l{i}"), at(0), 60).await);
        high_expiring.insert(hold_for(store, high, &format!("h{i}"), at(0), 60).await);
    }
    drain(store, &log).await;
    let later = at(120);

    // The caller's transaction takes the high slot's last unit: it holds its row.
    let mut tx = store.pool().begin().await.unwrap();
    let k = key("t-1");
    let first = match store
        .on(&mut tx)
        .create_hold(request(high, &k, later))
        .await
        .unwrap()
        .outcome
    {
        HoldOutcome::Created(hold) => hold.hold_id,
        other => panic!("{other:?}"),
    };
    // The sweeper locks the low slot, then waits for the high one.
    let sweeper = {
        let store = store.clone();
        tokio::spawn(async move { store.reclaim_expired(later, 10).await })
    };
    let mut waiting = false;
    for _ in 0..500 {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE '%cand AS%' AND query LIKE $1",
        )
        .bind(format!("%{}%", ctx.schema()))
        .fetch_one(&ctx.url_pool().await)
        .await
        .unwrap();
        if n == 1 {
            waiting = true;
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    assert!(waiting, "the sweeper waits for the high slot's row");
    // Now the transaction needs the high slot's expired holds: it reclaims them itself.
    let k = key("t-2");
    let second = match store
        .on(&mut tx)
        .create_hold(request(high, &k, later))
        .await
        .unwrap()
        .outcome
    {
        HoldOutcome::Created(hold) => hold.hold_id,
        other => panic!("{other:?}"),
    };
    tx.commit().await.unwrap();
    let swept: BTreeSet<HoldId> = sweeper
        .await
        .unwrap()
        .expect("no deadlock")
        .into_iter()
        .map(|h| h.hold_id)
        .collect();
    assert_eq!(
        swept, low_expiring,
        "the sweeper reports the low slot's holds only"
    );
    let events = drain(store, &log).await;
    let expired: Vec<HoldId> = events
        .iter()
        .filter(|e| e.kind == EventKind::HoldExpired)
        .filter_map(|e| e.hold_id)
        .collect();
    let unique: BTreeSet<HoldId> = expired.iter().copied().collect();
    assert_eq!(unique.len(), expired.len(), "one event per expired hold");
    assert_eq!(
        unique,
        low_expiring.union(&high_expiring).copied().collect(),
        "every expired hold has its event"
    );
    let placed: Vec<HoldId> = events
        .iter()
        .filter(|e| e.kind == EventKind::HoldPlaced)
        .filter_map(|e| e.hold_id)
        .collect();
    assert_eq!(placed, [first, second]);
    for slot in [low, high] {
        assert_invariant(store, slot).await;
    }
    assert_eq!(counts(store, low).await, (2, 2, 0, 0));
    assert_eq!(counts(store, high).await, (3, 1, 2, 0));
}

/// Sweepers on pools of their own race holds (which reclaim lazily on full slots), cancels
/// and capacity changes (which lock the slot, then its holds) over the same slots, round after
/// round: no statement fails (a deadlock would), no hold is reported by two sweepers, and
/// every expired hold has exactly one `hold_expired` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sweepers_race_holds_and_each_other_without_deadlock_or_double_report() {
    let Some(ctx) =
        setup("sweepers_race_holds_and_each_other_without_deadlock_or_double_report").await
    else {
        return;
    };
    let log = consumer("log");
    let mut sweepers = Vec::new();
    for _ in 0..4 {
        sweepers.push(ctx.second_store().await);
    }
    let store = ctx.store.clone();
    let mut expiring = BTreeSet::new();
    let mut lazily = BTreeSet::new();
    let mut reported = Vec::new();
    for round in 0..3_i64 {
        let base = at(round * 1000);
        let mut slots = Vec::new();
        let mut confirmed = Vec::new();
        for s in 0..4 {
            let slot = slot(&store, 12).await;
            slots.push(slot);
            for h in 0..10 {
                expiring
                    .insert(hold_for(&store, slot, &format!("x{round}-{s}-{h}"), base, 60).await);
            }
            let kept = hold_for(&store, slot, &format!("c{round}-{s}"), base, 600).await;
            store
                .confirm_hold(kept, &Scope::BackOffice, base)
                .await
                .unwrap();
            confirmed.push(kept);
        }
        let now = base + Duration::seconds(120);
        let mut tasks = Vec::new();
        for sweeper in &sweepers {
            let sweeper = sweeper.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let batch = sweeper.reclaim_expired(now, 3).await.expect("sweep");
                    if batch.is_empty() {
                        return (mine, Vec::new());
                    }
                    mine.extend(batch.into_iter().map(|h| h.hold_id));
                }
            }));
        }
        for (i, slot) in slots.iter().copied().enumerate() {
            let store = store.clone();
            let confirmed = confirmed[i];
            tasks.push(tokio::spawn(async move {
                let mut placed = Vec::new();
                for k in 0..4 {
                    let key = key(&format!("n{round}-{i}-{k}"));
                    // Long-lived: these never expire within the test's later rounds.
                    let request = HoldRequest {
                        expires_at: now + Duration::days(30),
                        ..request(slot, &key, now)
                    };
                    if let HoldOutcome::Created(h) =
                        store.create_hold(request).await.expect("hold").outcome
                    {
                        placed.push(h.hold_id);
                    }
                    if k == 1 {
                        store
                            .cancel_hold(confirmed, &Scope::BackOffice, now)
                            .await
                            .expect("cancel");
                    }
                    store
                        .change_capacity(slot, 12 + k % 2, now)
                        .await
                        .expect("capacity");
                }
                (Vec::new(), placed)
            }));
        }
        for task in tasks {
            let (mine, placed) = task.await.unwrap();
            reported.extend(mine);
            lazily.extend(placed);
        }
        // Whatever the holds and changes did not reclaim, one more sweep does.
        while !store.reclaim_expired(now, 50).await.unwrap().is_empty() {}
        for slot in slots {
            assert_invariant(&store, slot).await;
        }
    }
    let unique: BTreeSet<HoldId> = reported.iter().copied().collect();
    assert_eq!(unique.len(), reported.len(), "a hold reported twice");
    assert!(unique.is_subset(&expiring));
    let events = drain(&store, &log).await;
    let mut expired_events: BTreeMap<HoldId, usize> = BTreeMap::new();
    for event in &events {
        if event.kind == EventKind::HoldExpired {
            *expired_events.entry(event.hold_id.unwrap()).or_default() += 1;
        }
    }
    assert!(
        expired_events.values().all(|&n| n == 1),
        "two events for a hold"
    );
    assert_eq!(
        expired_events.keys().copied().collect::<BTreeSet<_>>(),
        expiring,
        "every expired hold has its event"
    );
    assert!(!lazily.is_empty());
}
