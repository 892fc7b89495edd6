//! The event log on PostgreSQL beyond the core's suite: a consumer resuming on a new pool
//! after a crash, writes in a caller's transaction that commit or roll back their events with
//! it, readers that never skip an event whose transaction commits after a later one, and
//! reclaimers racing holds, cancels and each other over the same slots without a deadlock or a
//! hold reported twice.

mod common;

use slot_booking::{HoldStore, SlotAdmin};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration as StdDuration;

use chrono::Duration;
use common::*;
use slot_booking::{
    ConsumerId, Event, EventKind, EventPosition, EventStore, HoldId, HoldOutcome, HoldRequest,
    Scope, SlotId, Timestamp, TransactionWrites,
};
use slot_booking_postgres::PostgresStore;
use sqlx::postgres::PgPool;
use sqlx::AssertSqlSafe;

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

/// A hold of one unit at `at(0)` placed on the caller's connection `conn` (its transaction).
async fn hold_in(
    store: &PostgresStore,
    conn: &mut sqlx::PgConnection,
    slot: SlotId,
    k: &str,
) -> HoldId {
    let k = key(k);
    match store
        .on(conn)
        .create_hold(request(slot, &k, at(0)))
        .await
        .unwrap()
        .outcome
    {
        HoldOutcome::Created(hold) => hold.hold_id,
        other => panic!("{other:?}"),
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
        writes.change_capacity(slot, 3.into(), at(1)).await.unwrap();
    }
    let in_flight: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{}\".events WHERE tx = pg_current_xact_id()",
        ctx.schema()
    )))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(in_flight, 3, "the transaction sees its own events");
    tx.rollback().await.unwrap();
    assert_eq!(drain(store, &log).await, []);
    assert_eq!(counts(store, slot).await, (2, 2, 0, 0));

    // Committed: the events come with the transaction, all in one horizon, in the order of
    // the writes; a refused hold inside it (its key taken) appends nothing.
    let mut tx = store.pool().begin().await.unwrap();
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
    let early = store.read_events(&log, 10).await.unwrap();
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
    let epoch = events[0].position.epoch();
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
/// Either way the store's reader delivers B's event at once, without waiting for A, and A's
/// with the first read after A commits, at a higher position: a consumer acknowledging as it
/// goes skips neither. A rolled-back A delivers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_never_skips_an_event_that_commits_after_a_later_one() {
    let Some(ctx) = setup("a_reader_never_skips_an_event_that_commits_after_a_later_one").await
    else {
        return;
    };
    let s = format!("\"{}\"", ctx.schema());
    let store = &ctx.store;
    let follower = consumer("follower");
    let (one, two) = (slot(store, 5).await, slot(store, 5).await);
    assert_eq!(drain(store, &follower).await.len(), 2);

    // 1. A appends first and commits last.
    let (mut a, _) = running_transaction(store.pool()).await;
    let a_hold = hold_in(store, &mut a, one, "a-1").await;
    let b_hold = hold_for(store, two, "b-1", at(0), 300).await; // B commits here.
    let by_id: Vec<(i64, Option<i64>)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, hold_id FROM {s}.events ORDER BY id DESC LIMIT 1"
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(by_id[0].1, Some(b_hold.get()), "B's event is visible by id");
    // The trap, shown: A's event has the lower id but is not visible yet.
    let a_id: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT id FROM {s}.events WHERE hold_id = $1"
    )))
    .bind(a_hold.get())
    .fetch_one(&mut *a)
    .await
    .unwrap();
    assert!(a_id < by_id[0].0);
    // B's event is delivered while A runs, and acknowledged.
    let read = drain(store, &follower).await;
    assert_eq!(kinds(&read), [(EventKind::HoldPlaced, Some(b_hold))]);
    let b_position = read[0].position;
    a.commit().await.unwrap();
    // A's event comes with the next read, above B's: not skipped.
    let read = drain(store, &follower).await;
    assert_eq!(kinds(&read), [(EventKind::HoldPlaced, Some(a_hold))]);
    assert!(read[0].position > b_position);
    assert!(read[0].position.sequence() < b_position.sequence());

    // 2. A starts first (the lower tx) and appends after B committed (the higher id).
    let (mut a, a_tx) = running_transaction(store.pool()).await;
    let b_hold = hold_for(store, two, "b-2", at(0), 300).await;
    let read = drain(store, &follower).await;
    assert_eq!(kinds(&read), [(EventKind::HoldPlaced, Some(b_hold))]);
    let b_position = read[0].position;
    let a_hold = hold_in(store, &mut a, one, "a-2").await;
    let b_tx: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT tx::text::int8 FROM {s}.events WHERE hold_id = $1"
    )))
    .bind(b_hold.get())
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(a_tx < b_tx, "A's transaction id is the lower one");
    assert_eq!(store.read_events(&follower, 10).await.unwrap(), []);
    a.commit().await.unwrap();
    let read = drain(store, &follower).await;
    assert_eq!(kinds(&read), [(EventKind::HoldPlaced, Some(a_hold))]);
    assert!(read[0].position > b_position);

    // 3. A rolled back: B's event is delivered at once, A's never.
    let (mut a, _) = running_transaction(store.pool()).await;
    let k = key("a-3");
    store
        .on(&mut a)
        .create_hold(request(one, &k, at(0)))
        .await
        .unwrap();
    let b_hold = hold_for(store, two, "b-3", at(0), 300).await;
    assert_eq!(
        kinds(&drain(store, &follower).await),
        [(EventKind::HoldPlaced, Some(b_hold))]
    );
    a.rollback().await.unwrap();
    assert_eq!(drain(store, &follower).await, []);
    // A fresh consumer reads the same events in the same positions.
    let fresh = drain(store, &consumer("fresh")).await;
    assert_eq!(fresh.len(), 2 + 5);
}

/// The database `slot_booking_elsewhere` on the same server (created when missing): a place
/// for transactions that touch nothing of the store's.
async fn elsewhere(url: &str) -> PgPool {
    let admin = one_connection(url).await;
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'slot_booking_elsewhere')",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    if !exists {
        match sqlx::query("CREATE DATABASE slot_booking_elsewhere")
            .execute(&admin)
            .await
        {
            Ok(_) => {}
            // Created by a concurrent test meanwhile.
            Err(sqlx::Error::Database(e))
                if matches!(e.code().as_deref(), Some("42P04") | Some("23505")) => {}
            Err(other) => panic!("CREATE DATABASE slot_booking_elsewhere: {other}"),
        }
    }
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    sqlx::postgres::PgPoolOptions::new()
        .idle_timeout(None)
        .max_lifetime(None)
        .max_connections(1)
        .connect_with(options.database("slot_booking_elsewhere"))
        .await
        .unwrap()
}

/// The defect of the cluster-wide horizon: a transaction that wrote nothing of the store's and
/// stays open — in another database of the server, or on another table of this one — held
/// every consumer back until it ended (19 s in the report, for a `pg_sleep(20)`). Each such
/// transaction is opened, given an id, and kept open while holds, a cancel and a slot change
/// commit; the consumer's next read delivers every one of them while it is still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_that_write_no_event_here_hold_no_consumer_back() {
    let Some(ctx) = setup("transactions_that_write_no_event_here_hold_no_consumer_back").await
    else {
        return;
    };
    let store = &ctx.store;
    let mailer = consumer("mailer");
    let slot_id = slot(store, 5).await;
    drain(store, &mailer).await;
    let other_db = elsewhere(&ctx.url).await;
    let other_table = format!("\"{}\".orders", ctx.schema());
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {other_table} (id BIGINT)"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    for place in ["another database", "another table of this one"] {
        let mut open = match place {
            "another database" => {
                let mut tx = other_db.begin().await.unwrap();
                xact_id(&mut tx).await;
                tx
            }
            _ => {
                let mut tx = store.pool().begin().await.unwrap();
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO {other_table} VALUES (1)"
                )))
                .execute(&mut *tx)
                .await
                .unwrap();
                tx
            }
        };
        let held: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::int8")
            .fetch_one(&mut *open)
            .await
            .unwrap();
        let tag = place.replace(' ', "-");
        let hold = hold_for(store, slot_id, &format!("{tag}-1"), at(0), 300).await;
        hold_for(store, slot_id, &format!("{tag}-2"), at(0), 300).await;
        store
            .cancel_hold(hold, &Scope::BackOffice, at(1))
            .await
            .unwrap();
        let read = drain(store, &mailer).await;
        assert_eq!(read.len(), 3, "{place}: every committed event, at once");
        // The open transaction was there all along: it is the oldest one running.
        let oldest: Option<i64> = sqlx::query_scalar(
            "SELECT min(backend_xid::text::int8) FROM pg_stat_activity \
             WHERE backend_xid IS NOT NULL",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert!(
            oldest.is_some_and(|oldest| oldest <= held),
            "{place}: still open"
        );
        open.rollback().await.unwrap();
    }
}

/// A caller's transaction that appended events and stays open holds back its own events only:
/// events other transactions commit meanwhile are delivered at once, and its own come with the
/// consumer's first read after it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_callers_transaction_holds_back_only_its_own_events() {
    let Some(ctx) = setup("an_open_callers_transaction_holds_back_only_its_own_events").await
    else {
        return;
    };
    let store = &ctx.store;
    let mailer = consumer("mailer");
    let (one, two) = (slot(store, 5).await, slot(store, 5).await);
    drain(store, &mailer).await;
    let mut tx = store.pool().begin().await.unwrap();
    let mine = hold_in(store, &mut tx, one, "in-the-transaction").await;
    let mut others = Vec::new();
    for i in 0..3 {
        others.push(hold_for(store, two, &format!("other-{i}"), at(0), 300).await);
        let read = drain(store, &mailer).await;
        assert_eq!(
            kinds(&read),
            [(EventKind::HoldPlaced, Some(others[i]))],
            "delivered while the caller's transaction is open"
        );
    }
    tx.commit().await.unwrap();
    let read = store.read_events(&mailer, 10).await.unwrap();
    assert_eq!(kinds(&read), [(EventKind::HoldPlaced, Some(mine))]);
}

/// Where a reclaimer waits: for a slot row a caller's transaction holds, while it holds the
/// rows of lower slots and no hold row. The transaction then reclaims that slot's expired
/// holds itself (a hold on a full slot): had the reclaimer locked those holds first, the two
/// would wait for each other. It does not: the transaction commits, and the reclaimer then
/// reclaims the other slot's holds and reports none of the ones the transaction reclaimed;
/// each expired hold has exactly one event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_waits_for_slot_rows_and_never_holds_hold_rows_first() {
    let Some(ctx) = setup("a_reclaim_waits_for_slot_rows_and_never_holds_hold_rows_first").await
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
    // The reclaimer locks the low slot, then waits for the high one.
    let reclaimer = {
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
    assert!(waiting, "the reclaimer waits for the high slot's row");
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
    let swept: BTreeSet<HoldId> = reclaimer
        .await
        .unwrap()
        .expect("no deadlock")
        .into_iter()
        .map(|h| h.hold_id)
        .collect();
    assert_eq!(
        swept, low_expiring,
        "the reclaimer reports the low slot's holds only"
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

/// Reclaimers on pools of their own race holds (which reclaim lazily on full slots), cancels
/// and capacity changes (which lock the slot, then its holds) over the same slots, round after
/// round: no statement fails (a deadlock would), no hold is reported by two reclaimers, and
/// every expired hold has exactly one `hold_expired` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reclaimers_race_holds_and_each_other_without_deadlock_or_double_report() {
    let Some(ctx) =
        setup("reclaimers_race_holds_and_each_other_without_deadlock_or_double_report").await
    else {
        return;
    };
    let log = consumer("log");
    let mut reclaimers = Vec::new();
    for _ in 0..4 {
        reclaimers.push(ctx.second_store().await);
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
        for reclaimer in &reclaimers {
            let reclaimer = reclaimer.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let batch = reclaimer.reclaim_expired(now, 3).await.expect("reclaim");
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
                        .change_capacity(slot, (12 + k % 2).into(), now)
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
        // Whatever the holds and changes did not reclaim, one more reclaim does.
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

/// Exactly once across instances: three instances (each a pool of its own, an engine on a
/// shared manual clock) share the consumer `mailer` while writers place and cancel holds.
/// Each takes the lease before every read, then records the batch in the application's own
/// table `handled` (through `EngineTransaction::run`) and acknowledges it through
/// `EngineTransaction::acknowledge_leased` in one transaction, committed only when the
/// acknowledgement succeeded. Now and then an instance crashes (its transaction dropped
/// uncommitted, its lease left to lapse) or stalls past its lease before acknowledging, so
/// another takes over. Every event lands in `handled` exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_handle_every_event_once_with_the_acknowledgement_in_their_transaction() {
    use slot_booking::{BookingEngine, BookingError, LeaseHolder, ManualClock};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let Some(ctx) = setup(
        "three_instances_handle_every_event_once_with_the_acknowledgement_in_their_transaction",
    )
    .await
    else {
        return;
    };
    let handled_table = format!("\"{}\".handled", ctx.schema());
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {handled_table} (epoch BIGINT NOT NULL, sequence BIGINT NOT NULL, \
         holder TEXT NOT NULL)"
    )))
    .execute(ctx.pool())
    .await
    .unwrap();
    let clock = ManualClock::new(t0());
    let lease = StdDuration::from_secs(10);
    let lapse = Duration::seconds(11);
    let mailer = consumer("mailer");
    let writer = BookingEngine::builder(ctx.store.clone())
        .clock(clock.clone())
        .build();
    let mut slots = Vec::new();
    for _ in 0..3 {
        let starts = t0() + Duration::days(30);
        slots.push(
            writer
                .create_slot(slot_booking::NewSlot::new(
                    starts,
                    starts + Duration::hours(1),
                    1000,
                ))
                .await
                .unwrap()
                .slot_id,
        );
    }
    let goal = Arc::new(AtomicUsize::new(usize::MAX));
    let mut instances = Vec::new();
    for i in 0..3 {
        let store = ctx.second_store().await;
        let engine = BookingEngine::builder(store.clone())
            .clock(clock.clone())
            .build();
        let (clock, mailer, goal) = (clock.clone(), mailer.clone(), Arc::clone(&goal));
        let handled_table = handled_table.clone();
        instances.push(tokio::spawn(async move {
            let mut me = LeaseHolder::unique();
            let mut turns = 0_u32;
            loop {
                let done: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT count(*) FROM {handled_table}"
                )))
                .fetch_one(store.pool())
                .await
                .unwrap();
                if usize::try_from(done).unwrap() >= goal.load(Ordering::SeqCst) {
                    return;
                }
                turns += 1;
                assert!(turns < 50_000, "instance {i} made no progress");
                if !engine.lease_consumer(&mailer, &me, lease).await.unwrap() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let batch = engine.read_events(&mailer, 4).await.unwrap();
                let Some(last) = batch.last().map(|e| e.position) else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let mut tx = engine.transaction().await.unwrap();
                let insert = format!("INSERT INTO {handled_table} VALUES ($1, $2, $3)");
                let positions: Vec<(i64, i64)> = batch
                    .iter()
                    .map(|event| (event.position.epoch(), event.position.sequence()))
                    .collect();
                let holder = me.as_str().to_owned();
                tx.run(move |tx| {
                    Box::pin(async move {
                        for (epoch, sequence) in positions {
                            sqlx::query(AssertSqlSafe(insert.as_str()))
                                .bind(epoch)
                                .bind(sequence)
                                .bind(holder.as_str())
                                .execute(&mut **tx)
                                .await?;
                        }
                        Ok::<_, sqlx::Error>(())
                    })
                })
                .await
                .unwrap()
                .unwrap();
                match turns % 5 {
                    // A crash: the transaction is dropped (rolled back), the lease never
                    // released; the clock moves on past it.
                    2 => {
                        drop(tx);
                        clock.advance(lapse);
                        me = LeaseHolder::unique();
                        continue;
                    }
                    // A stall past the lease before acknowledging.
                    4 => {
                        clock.advance(lapse);
                        tokio::task::yield_now().await;
                    }
                    _ => {}
                }
                match tx.acknowledge_leased(&mailer, &me, last).await {
                    Ok(()) => tx.commit().await.unwrap(),
                    Err(BookingError::LeaseLost { .. }) => tx.rollback().await.unwrap(),
                    Err(other) => panic!("acknowledge: {other}"),
                }
            }
        }));
    }
    let mut writers = Vec::new();
    for w in 0..3 {
        let engine = writer.clone();
        let slots = slots.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..30 {
                let hold = engine
                    .hold(slots[(w + i) % slots.len()], &format!("w{w}-{i}"))
                    .await
                    .unwrap()
                    .hold;
                if i % 3 == 0 {
                    engine
                        .cancel(&Scope::Anonymous, hold.hold_id)
                        .await
                        .unwrap();
                }
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let all = drain(&ctx.store, &consumer("auditor")).await;
    assert_eq!(all.len(), 3 + 90 + 30);
    goal.store(all.len(), Ordering::SeqCst);
    for instance in instances {
        instance.await.unwrap();
    }
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT epoch, sequence, count(*) FROM {handled_table} GROUP BY epoch, sequence \
         ORDER BY epoch, sequence"
    )))
    .fetch_all(ctx.pool())
    .await
    .unwrap();
    assert!(
        rows.iter().all(|&(_, _, n)| n == 1),
        "an event was handled twice"
    );
    let handled: Vec<EventPosition> = rows
        .iter()
        .map(|&(epoch, sequence, _)| EventPosition::new(epoch, sequence))
        .collect();
    let expected: Vec<EventPosition> = all.iter().map(|e| e.position).collect();
    assert_eq!(handled, expected);
    let holders: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(DISTINCT holder) FROM {handled_table}"
    )))
    .fetch_one(ctx.pool())
    .await
    .unwrap();
    assert!(holders >= 2, "the lease passed from holder to holder");
}

/// A booking logs each line's event exactly as a hold does, in the statement that changes it:
/// one `hold_placed` per line (by hold id), then, for a hold change of its second line, one
/// `hold_confirmed` per line, and one `hold_renewed`/`hold_cancelled` per line for the
/// booking's own changes. A booking refused for a short line logs nothing but the expired
/// holds it reclaimed on the way, and a refused change logs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_logs_every_line_like_a_hold() {
    use slot_booking::{BookingLine, BookingOutcome, BookingRequest, BookingStore, RenewRequest};
    let Some(ctx) = setup("booking_events").await else {
        return;
    };
    let store = &ctx.store;
    let (x, y) = (slot(store, 2).await, slot(store, 1).await);
    let log = consumer("log");
    drain(store, &log).await;
    // An expired hold on `y`, reclaimed by the refused booking below.
    let brief = hold_for(store, y, "brief", at(0), 10).await;
    drain(store, &log).await;

    let lines = [BookingLine::new(x, 2), BookingLine::new(y, 2)];
    let k = key("too-much");
    let refused = BookingRequest {
        key: &k,
        owner: None,
        lines: &lines,
        now: at(60),
        expires_at: at(360),
    };
    assert!(matches!(
        store.create_booking(refused).await.unwrap().outcome,
        BookingOutcome::Refused(_)
    ));
    let kinds = |events: Vec<Event>| {
        events
            .into_iter()
            .map(|e| (e.kind, e.hold_id, e.slot_id))
            .collect::<Vec<_>>()
    };
    // The short line's slot (capacity 1) cannot fit 2 even after reclaiming: nothing reclaimed.
    assert_eq!(kinds(drain(store, &log).await), []);

    let lines = [BookingLine::new(x, 2), BookingLine::new(y, 1)];
    let k = key("cart");
    let request = BookingRequest {
        key: &k,
        owner: None,
        lines: &lines,
        now: at(60),
        expires_at: at(360),
    };
    let booking = match store.create_booking(request).await.unwrap().outcome {
        BookingOutcome::Created(booking) => booking,
        other => panic!("expected a booking, got {other:?}"),
    };
    let (first, second) = (booking.lines[0].hold_id, booking.lines[1].hold_id);
    assert_eq!(
        kinds(drain(store, &log).await),
        [
            (EventKind::HoldExpired, Some(brief), y),
            (EventKind::HoldPlaced, Some(first), x),
            (EventKind::HoldPlaced, Some(second), y),
        ]
    );

    let renew = RenewRequest {
        hold_id: first,
        scope: &Scope::Anonymous,
        now: at(120),
        lifetime: Duration::minutes(5),
        max_life: Duration::minutes(30),
    };
    store.renew_booking(renew).await.unwrap();
    store
        .confirm_hold(second, &Scope::Anonymous, at(130))
        .await
        .unwrap();
    // Refused: confirmed already; nothing logged.
    store
        .confirm_booking(first, &Scope::Anonymous, at(140))
        .await
        .unwrap();
    store
        .cancel_booking(first, &Scope::Anonymous, at(150))
        .await
        .unwrap();
    assert_eq!(
        kinds(drain(store, &log).await),
        [
            (EventKind::HoldRenewed, Some(first), x),
            (EventKind::HoldRenewed, Some(second), y),
            (EventKind::HoldConfirmed, Some(first), x),
            (EventKind::HoldConfirmed, Some(second), y),
            (EventKind::HoldCancelled, Some(first), x),
            (EventKind::HoldCancelled, Some(second), y),
        ]
    );
    assert_invariant(store, x).await;
    assert_invariant(store, y).await;
}
