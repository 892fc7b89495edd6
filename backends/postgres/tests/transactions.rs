//! The engine's writes inside a transaction shared with the caller's own rows
//! (`BookingEngine::transaction`, the caller's statements through `EngineTransaction::run`),
//! and the store's writes on a connection the caller owns (`PostgresStore::on`): they commit
//! and roll back with the caller's rows, a refused request leaves the transaction usable, and
//! racing transactions never oversell.

mod common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use common::*;
use slot_booking::{
    BookingEngine, BookingError, EngineTransaction, HoldId, HoldStatus, ManualClock, NewHold,
    NewSlot, Scope, SlotId,
};
use slot_booking_postgres::PostgresStore;
use sqlx::{AssertSqlSafe, Connection, PgPool};

/// An engine on `store` whose clock reads `t0()` until a test moves it.
fn engine(store: &PostgresStore) -> (BookingEngine<PostgresStore>, ManualClock) {
    let clock = ManualClock::new(t0());
    let engine = BookingEngine::builder(store.clone())
        .clock(clock.clone())
        .cache_period(StdDuration::ZERO)
        .build();
    (engine, clock)
}

/// Creates the caller's own table, `"<schema>".orders`, one row per confirmed hold.
async fn orders_table(ctx: &Ctx) {
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE \"{}\".orders (hold_id int8 PRIMARY KEY, note text NOT NULL)",
        ctx.schema()
    )))
    .execute(ctx.pool())
    .await
    .unwrap();
}

fn insert_order(schema: &str) -> String {
    format!("INSERT INTO \"{schema}\".orders (hold_id, note) VALUES ($1, $2)")
}

/// The caller's order row for `hold_id`, written in `tx` through `run`.
async fn order_in(
    tx: &mut EngineTransaction<PostgresStore>,
    schema: &str,
    hold_id: HoldId,
    note: &str,
) {
    let (insert, note) = (insert_order(schema), note.to_owned());
    tx.run(move |tx| {
        Box::pin(async move {
            sqlx::query(AssertSqlSafe(insert))
                .bind(hold_id.get())
                .bind(note)
                .execute(&mut **tx)
                .await
        })
    })
    .await
    .unwrap()
    .unwrap();
}

/// The caller's orders, as committed.
async fn orders(ctx: &Ctx) -> Vec<(i64, String)> {
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT hold_id, note FROM \"{}\".orders ORDER BY hold_id",
        ctx.schema()
    )))
    .fetch_all(ctx.pool())
    .await
    .unwrap()
}

/// A hold's stored status, read with SQL outside any transaction; `None` when there is no
/// such hold.
async fn stored_status(ctx: &Ctx, hold_id: HoldId) -> Option<String> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT status FROM \"{}\".holds WHERE id = $1",
        ctx.schema()
    )))
    .bind(hold_id.get())
    .fetch_optional(ctx.pool())
    .await
    .unwrap()
}

/// Every row of the store's tables, as JSON text in key order: what "exactly as before"
/// compares.
async fn snapshot(pool: &PgPool, schema: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for (table, order) in [
        ("slots", "id"),
        ("holds", "id"),
        ("hold_keys", "idempotency_key"),
    ] {
        let mut table_rows: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT '{table} ' || row_to_json(t)::text FROM \"{schema}\".{table} t \
             ORDER BY {order}"
        )))
        .fetch_all(pool)
        .await
        .unwrap();
        rows.append(&mut table_rows);
    }
    rows
}

/// A slot of `capacity` starting an hour after `t0()`, through the engine.
async fn engine_slot(engine: &BookingEngine<PostgresStore>, capacity: i64) -> SlotId {
    let capacity = i32::try_from(capacity).unwrap();
    engine
        .create_slot(NewSlot::new(at(3600), at(7200), capacity))
        .await
        .unwrap()
        .slot_id
}

#[tokio::test]
async fn a_confirm_and_the_callers_order_commit_together() {
    let Some(ctx) = setup("a_confirm_and_the_callers_order_commit_together").await else {
        return;
    };
    orders_table(&ctx).await;
    let (engine, _clock) = engine(&ctx.store);
    let slot_id = engine_slot(&engine, 2).await;
    let placed = engine.hold(slot_id, "order-1").await.unwrap().hold;

    let mut tx = engine.transaction().await.unwrap();
    let confirmed = tx.confirm(&Scope::Anonymous, placed.hold_id).await.unwrap();
    assert_eq!(confirmed.status, HoldStatus::Confirmed);
    // The caller's row, on the same connection, between the engine's writes.
    order_in(&mut tx, ctx.schema(), confirmed.hold_id, "paid").await;
    // A second hold and its order in the same transaction.
    let second = tx.hold(slot_id, "order-2").await.unwrap().hold;
    tx.confirm(&Scope::Anonymous, second.hold_id).await.unwrap();
    order_in(&mut tx, ctx.schema(), second.hold_id, "paid too").await;

    // Nothing is visible outside before the commit.
    assert_eq!(
        stored_status(&ctx, placed.hold_id).await.as_deref(),
        Some("held")
    );
    assert_eq!(stored_status(&ctx, second.hold_id).await, None);
    assert!(orders(&ctx).await.is_empty());

    tx.commit().await.unwrap();
    assert_eq!(
        stored_status(&ctx, placed.hold_id).await.as_deref(),
        Some("confirmed")
    );
    assert_eq!(
        stored_status(&ctx, second.hold_id).await.as_deref(),
        Some("confirmed")
    );
    assert_eq!(
        orders(&ctx).await,
        vec![
            (placed.hold_id.get(), "paid".to_owned()),
            (second.hold_id.get(), "paid too".to_owned()),
        ]
    );
    assert_eq!(counts(&ctx.store, slot_id).await, (2, 0, 0, 2));
    assert_invariant(&ctx.store, slot_id).await;
}

#[tokio::test]
async fn a_confirm_and_the_callers_order_roll_back_together() {
    let Some(ctx) = setup("a_confirm_and_the_callers_order_roll_back_together").await else {
        return;
    };
    orders_table(&ctx).await;
    let (engine, _clock) = engine(&ctx.store);
    let slot_id = engine_slot(&engine, 2).await;
    let placed = engine.hold(slot_id, "order-1").await.unwrap().hold;

    let mut tx = engine.transaction().await.unwrap();
    let confirmed = tx.confirm(&Scope::Anonymous, placed.hold_id).await.unwrap();
    assert_eq!(confirmed.status, HoldStatus::Confirmed);
    order_in(&mut tx, ctx.schema(), confirmed.hold_id, "paid").await;
    tx.rollback().await.unwrap();

    assert_eq!(
        stored_status(&ctx, placed.hold_id).await.as_deref(),
        Some("held")
    );
    assert!(orders(&ctx).await.is_empty());
    assert_eq!(counts(&ctx.store, slot_id).await, (2, 1, 1, 0));
    assert_invariant(&ctx.store, slot_id).await;
    // Still confirmable afterwards, outside any transaction.
    assert_eq!(
        engine
            .confirm(&Scope::Anonymous, placed.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Confirmed
    );
}

#[tokio::test]
async fn a_rolled_back_transaction_leaves_the_tables_as_they_were() {
    let Some(ctx) = setup("a_rolled_back_transaction_leaves_the_tables_as_they_were").await else {
        return;
    };
    let (engine, _clock) = engine(&ctx.store);
    let slot_id = engine_slot(&engine, 3).await;
    let spare = engine_slot(&engine, 1).await;
    let booked = engine.hold(slot_id, "booked").await.unwrap().hold;
    engine
        .confirm(&Scope::Anonymous, booked.hold_id)
        .await
        .unwrap();
    let before = snapshot(ctx.pool(), ctx.schema()).await;

    let mut tx = engine.transaction().await.unwrap();
    let placed = tx
        .place_hold(NewHold::new(slot_id, "rolled-back").quantity(2))
        .await
        .unwrap()
        .hold;
    let made = tx
        .create_slot(NewSlot::new(at(7200), at(9000), 4))
        .await
        .unwrap();
    tx.hold(made.slot_id, "on-the-new-slot").await.unwrap();
    assert_eq!(tx.change_capacity(slot_id, 10).await.unwrap().capacity, 10);
    assert!(tx.close_sales(slot_id).await.unwrap().closed);
    assert!(tx.remove_slot(spare).await.unwrap().removed_at.is_some());
    assert_eq!(
        tx.cancel(&Scope::Anonymous, booked.hold_id)
            .await
            .unwrap()
            .status,
        HoldStatus::Cancelled
    );
    tx.rollback().await.unwrap();

    assert_eq!(snapshot(ctx.pool(), ctx.schema()).await, before);
    // The key is free again: a new hold, not a replay of the rolled-back one.
    let again = engine
        .place_hold(NewHold::new(slot_id, "rolled-back").quantity(2))
        .await
        .unwrap();
    assert!(!again.replayed);
    assert_ne!(again.hold.hold_id, placed.hold_id);
    assert_eq!(stored_status(&ctx, placed.hold_id).await, None);
    assert_eq!(counts(&ctx.store, slot_id).await, (3, 0, 2, 1));
    assert_invariant(&ctx.store, slot_id).await;
    assert_invariant(&ctx.store, spare).await;
}

#[tokio::test]
async fn a_refused_request_leaves_the_transaction_usable() {
    let Some(ctx) = setup("a_refused_request_leaves_the_transaction_usable").await else {
        return;
    };
    let (engine, clock) = engine(&ctx.store);
    let full = engine_slot(&engine, 1).await;
    let other = engine_slot(&engine, 1).await;
    let spare = engine_slot(&engine, 2).await;
    let taken = engine.hold(full, "taken").await.unwrap().hold;
    let short = engine
        .place_hold(NewHold::new(other, "short").lifetime(StdDuration::from_secs(60)))
        .await
        .unwrap()
        .hold;
    clock.advance(Duration::seconds(61));

    let mut tx = engine.transaction().await.unwrap();
    // A hold of the transaction's own, then refusals of every kind.
    let mine = tx.hold(spare, "mine").await.unwrap().hold;
    let replay = tx.hold(spare, "mine").await.unwrap();
    assert!(replay.replayed, "a replay inside the transaction");
    assert_eq!(replay.hold.hold_id, mine.hold_id);
    assert!(matches!(
        tx.hold(other, "taken").await,
        Err(BookingError::IdempotencyKeyReused { .. })
    ));
    assert!(matches!(
        tx.hold(other, "mine").await,
        Err(BookingError::IdempotencyKeyReused { .. })
    ));
    assert!(matches!(
        tx.hold(full, "x").await,
        Err(BookingError::SoldOut { .. })
    ));
    assert!(matches!(
        tx.hold(SlotId(full.get() + 1000), "y").await,
        Err(BookingError::SlotNotFound { .. })
    ));
    assert!(matches!(
        tx.confirm(&Scope::Anonymous, short.hold_id).await,
        Err(BookingError::HoldExpired { .. })
    ));
    assert!(matches!(
        tx.remove_slot(full).await,
        Err(BookingError::SlotInUse { held: 1, .. })
    ));
    // Still usable: a later write succeeds, and the transaction commits.
    let fine = tx.hold(other, "fine").await.unwrap().hold;
    tx.confirm(&Scope::Anonymous, fine.hold_id).await.unwrap();
    tx.commit().await.unwrap();

    assert_eq!(
        stored_status(&ctx, mine.hold_id).await.as_deref(),
        Some("held")
    );
    assert_eq!(
        stored_status(&ctx, fine.hold_id).await.as_deref(),
        Some("confirmed")
    );
    assert_eq!(
        stored_status(&ctx, short.hold_id).await.as_deref(),
        Some("expired"),
        "reclaimed by the later hold, not by the refused one"
    );
    assert_eq!(
        stored_status(&ctx, taken.hold_id).await.as_deref(),
        Some("held")
    );
    assert_eq!(counts(&ctx.store, full).await, (1, 0, 1, 0));
    assert_eq!(counts(&ctx.store, other).await, (1, 0, 0, 1));
    assert_eq!(counts(&ctx.store, spare).await, (2, 1, 1, 0));
    for slot_id in [full, other, spare] {
        assert_invariant(&ctx.store, slot_id).await;
    }
}

/// A refused hold undoes its savepoint, and the slot row lock its reclaiming statement took
/// goes with it: another request for the slot does not wait for the caller's commit.
#[tokio::test]
async fn a_refused_hold_keeps_no_lock_on_its_slot() {
    let Some(ctx) = setup("a_refused_hold_keeps_no_lock_on_its_slot").await else {
        return;
    };
    let (engine, _clock) = engine(&ctx.store);
    let full = engine_slot(&engine, 1).await;
    engine.hold(full, "taken").await.unwrap();

    let mut tx = engine.transaction().await.unwrap();
    assert!(matches!(
        tx.hold(full, "x").await,
        Err(BookingError::SoldOut { .. })
    ));
    // The transaction is still open: a change of the slot outside it goes through at once.
    let raised = tokio::time::timeout(StdDuration::from_secs(10), engine.change_capacity(full, 2))
        .await
        .expect("the refused hold left the slot row locked")
        .unwrap();
    assert_eq!((raised.capacity, raised.stored_remaining), (2, 1));
    tx.commit().await.unwrap();
    assert_invariant(&ctx.store, full).await;
}

/// On a connection outside any transaction block each write commits by itself (there is no
/// savepoint to open), and a refused hold is refused as on the pool.
#[tokio::test]
async fn writes_on_a_connection_outside_a_transaction_commit_by_themselves() {
    let Some(ctx) =
        setup("writes_on_a_connection_outside_a_transaction_commit_by_themselves").await
    else {
        return;
    };
    use slot_booking::{HoldOutcome, TransactionWrites};
    let (engine, _clock) = engine(&ctx.store);
    let slot_id = engine_slot(&engine, 2).await;
    let mut conn = ctx.pool().acquire().await.unwrap();
    let (plain, second, other) = (key("plain"), key("second"), key("other"));
    let mut writes = ctx.store.on(&mut conn);
    let placed = match writes
        .create_hold(request(slot_id, &plain, at(0)))
        .await
        .unwrap()
        .outcome
    {
        HoldOutcome::Created(hold) => hold,
        outcome => panic!("not placed: {outcome:?}"),
    };
    // A unit is free, and the statement finds the key in use before it takes it.
    let replay = writes
        .create_hold(request(slot_id, &plain, at(0)))
        .await
        .unwrap();
    assert!(
        matches!(&replay.outcome, HoldOutcome::Replayed(hold) if hold.hold_id == placed.hold_id),
        "{replay:?}"
    );
    let next = writes
        .create_hold(request(slot_id, &second, at(0)))
        .await
        .unwrap();
    assert!(matches!(next.outcome, HoldOutcome::Created(_)), "{next:?}");
    let refused = writes
        .create_hold(request(slot_id, &other, at(0)))
        .await
        .unwrap();
    assert!(
        matches!(refused.outcome, HoldOutcome::SoldOut),
        "{refused:?}"
    );
    drop(writes);
    // Already committed, seen from another connection while this one is still held.
    assert_eq!(
        stored_status(&ctx, placed.hold_id).await.as_deref(),
        Some("held")
    );
    assert_eq!(counts(&ctx.store, slot_id).await, (2, 0, 2, 0));
}

/// A transaction opened with a plain `BEGIN`, which sqlx does not track, gets the same
/// savepoint: a refusal leaves it usable, and its `ROLLBACK` undoes everything.
#[tokio::test]
async fn a_transaction_opened_with_a_plain_begin_is_protected_too() {
    use slot_booking::{HoldOutcome, TransactionWrites, Transition};
    let Some(ctx) = setup("a_transaction_opened_with_a_plain_begin_is_protected_too").await else {
        return;
    };
    let (engine, _clock) = engine(&ctx.store);
    let slot_id = engine_slot(&engine, 2).await;
    let free = engine_slot(&engine, 1).await;
    engine.hold(slot_id, "outside").await.unwrap();
    let before = snapshot(ctx.pool(), ctx.schema()).await;

    let mut conn = sqlx::PgConnection::connect(&ctx.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    let (inside_key, outside_key) = (key("inside"), key("outside"));
    let mut writes = ctx.store.on(&mut conn);
    let inside = match writes
        .create_hold(request(slot_id, &inside_key, at(0)))
        .await
        .unwrap()
        .outcome
    {
        HoldOutcome::Created(hold) => hold,
        outcome => panic!("not placed: {outcome:?}"),
    };
    // A unit is free there: the statement meets the key's unique violation.
    let reused = writes
        .create_hold(request(free, &outside_key, at(0)))
        .await
        .unwrap();
    assert!(
        matches!(reused.outcome, HoldOutcome::KeyReused(_)),
        "{reused:?}"
    );
    let confirmed = writes
        .confirm_hold(inside.hold_id, &Scope::Anonymous, at(0))
        .await
        .unwrap();
    assert!(
        matches!(&confirmed.outcome, Transition::Applied(hold) if hold.status == HoldStatus::Confirmed),
        "{confirmed:?}"
    );
    drop(writes);
    // Still in the caller's transaction: nothing visible outside, and a rollback undoes all.
    assert_eq!(stored_status(&ctx, inside.hold_id).await, None);
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
    assert_eq!(snapshot(ctx.pool(), ctx.schema()).await, before);
    conn.close().await.unwrap();
}

/// Transactions racing for one slot of five units, each placing a hold and confirming it (and
/// writing an order of its own); every fourth rolls back. Never more than five units are
/// taken, a rolled-back transaction leaves nothing behind, and the invariant holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_transactions_never_oversell() {
    let Some(ctx) = setup("racing_transactions_never_oversell").await else {
        return;
    };
    orders_table(&ctx).await;
    // One engine on each store: each transaction is begun on its engine's store's pool.
    let engines = [
        Arc::new(engine(&ctx.store).0),
        Arc::new(engine(&ctx.second_store().await).0),
    ];
    let slot_id = engine_slot(&engines[0], 5).await;
    let schema = ctx.schema().to_owned();

    let tasks: Vec<_> = (0..48)
        .map(|i| {
            let engine = Arc::clone(&engines[i % 2]);
            let schema = schema.clone();
            tokio::spawn(async move {
                let key = format!("tx-{i}");
                let mut tx = engine.transaction().await.unwrap();
                let placed = match tx.hold(slot_id, &key).await {
                    Ok(placed) => placed.hold,
                    Err(BookingError::SoldOut { .. }) => {
                        tx.rollback().await.unwrap();
                        return (key, None);
                    }
                    Err(other) => panic!("unexpected {other:?}"),
                };
                tx.confirm(&Scope::Anonymous, placed.hold_id).await.unwrap();
                order_in(&mut tx, &schema, placed.hold_id, &key).await;
                // Give the others time to queue on the slot row.
                tokio::time::sleep(StdDuration::from_millis(5)).await;
                let commit = i % 4 != 0;
                if commit {
                    tx.commit().await.unwrap();
                } else {
                    tx.rollback().await.unwrap();
                }
                (key, Some((placed.hold_id, commit)))
            })
        })
        .collect();

    let (mut committed, mut rolled_back) = (Vec::new(), Vec::new());
    for task in tasks {
        match task.await.unwrap() {
            (_, Some((hold_id, true))) => committed.push(hold_id),
            (key, Some((hold_id, false))) => rolled_back.push((key, hold_id)),
            (_, None) => {}
        }
    }
    assert!(
        (1..=5).contains(&committed.len()),
        "{} committed",
        committed.len()
    );
    for &hold_id in &committed {
        assert_eq!(
            stored_status(&ctx, hold_id).await.as_deref(),
            Some("confirmed")
        );
    }
    let keys: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{schema}\".hold_keys WHERE idempotency_key = ANY($1)"
    )))
    .bind(
        rolled_back
            .iter()
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>(),
    )
    .fetch_one(ctx.pool())
    .await
    .unwrap();
    assert_eq!(keys, 0, "a rolled-back transaction's key stays free");
    for (_, hold_id) in &rolled_back {
        assert_eq!(stored_status(&ctx, *hold_id).await, None);
    }
    let mut ordered: Vec<i64> = orders(&ctx).await.into_iter().map(|(id, _)| id).collect();
    let mut expected: Vec<i64> = committed.iter().map(|id| id.get()).collect();
    ordered.sort_unstable();
    expected.sort_unstable();
    assert_eq!(
        ordered, expected,
        "an order exactly for each committed hold"
    );
    let (capacity, remaining, held, confirmed) = counts(&ctx.store, slot_id).await;
    assert_eq!((capacity, held), (5, 0));
    assert_eq!(confirmed, i64::try_from(committed.len()).unwrap());
    assert_eq!(remaining, 5 - confirmed);
    assert_invariant(&ctx.store, slot_id).await;
}

/// A hold change of any line of a booking of several lines, in the caller's transaction, acts
/// on the whole booking: rolled back, every line is as it was (units and all); committed, every
/// line changed. A hold's key that is a booking's is refused in the transaction, which stays
/// usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_changed_in_a_transaction_changes_its_whole_booking() {
    use slot_booking::NewBooking;
    let Some(ctx) = setup("tx_booking_lines").await else {
        return;
    };
    let (engine, _clock) = engine(&ctx.store);
    let (x, y) = (slot(&ctx.store, 3).await, slot(&ctx.store, 3).await);
    let booking = engine
        .book(NewBooking::new("cart").line(x, 1).line(y, 2))
        .await
        .unwrap()
        .booking;
    let (first, second) = (booking.lines[0].hold_id, booking.lines[1].hold_id);
    let scope = Scope::Anonymous;
    let remaining = |slot| {
        let store = ctx.store.clone();
        async move {
            slot_booking::HoldStore::get_slot(&store, slot)
                .await
                .unwrap()
                .unwrap()
                .stored_remaining
        }
    };

    // Cancelled by its second line, then rolled back: nothing changed.
    let mut tx = engine.transaction().await.unwrap();
    let cancelled = tx.cancel(&scope, second).await.unwrap();
    assert_eq!(cancelled.status, HoldStatus::Cancelled);
    let line = tx.get_hold(&scope, first).await.unwrap();
    assert_eq!(line.status, HoldStatus::Cancelled, "the first line too");
    assert!(matches!(
        tx.hold(x, "cart").await,
        Err(BookingError::IdempotencyKeyReused { .. })
    ));
    tx.rollback().await.unwrap();
    for line in [first, second] {
        assert_eq!(stored_status(&ctx, line).await.as_deref(), Some("held"));
    }
    assert_eq!((remaining(x).await, remaining(y).await), (2, 1));

    // Renewed and confirmed by its second line, committed: every line changed.
    let mut tx = engine.transaction().await.unwrap();
    let renewed = tx.renew(&scope, second, None).await.unwrap();
    let confirmed = tx.confirm(&scope, second).await.unwrap();
    assert_eq!(confirmed.status, HoldStatus::Confirmed);
    tx.commit().await.unwrap();
    let whole = engine.get_booking(&scope, first).await.unwrap();
    assert!(whole
        .lines
        .iter()
        .all(|h| h.status == HoldStatus::Confirmed && h.expires_at == renewed.expires_at));
    assert_eq!((remaining(x).await, remaining(y).await), (2, 1));
    assert_invariant(&ctx.store, x).await;
    assert_invariant(&ctx.store, y).await;
}

/// Two transactions placing holds with one key: the second one's statement waits for the
/// first's slot row and then meets the first's key, committed after its snapshot. Its failure
/// aborts its transaction, so it gets a transient error (not a refusal that would pretend the
/// transaction is usable); run again, the key replays. Outside a transaction block the same
/// race is answered as on the pool: the statement undid only itself, and the key replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_raced_by_another_transaction_aborts_the_loser_with_a_transient_error() {
    use slot_booking::{HoldOutcome, TransactionWrites};
    let Some(ctx) = setup("tx_key_race").await else {
        return;
    };
    let (engine, _clock) = engine(&ctx.store);
    let slot_id = engine_slot(&engine, 5).await;
    for in_transaction in [true, false] {
        let k = key(if in_transaction {
            "raced-in-tx"
        } else {
            "raced-outside"
        });
        let mut first = ctx.pool().begin().await.unwrap();
        let placed = ctx
            .store
            .on(&mut first)
            .create_hold(request(slot_id, &k, at(0)))
            .await
            .unwrap();
        assert!(matches!(placed.outcome, HoldOutcome::Created(_)));
        let second = {
            let (store, pool, k) = (ctx.store.clone(), ctx.pool().clone(), k.clone());
            tokio::spawn(async move {
                let mut conn = pool.acquire().await.unwrap();
                if in_transaction {
                    let mut tx = conn.begin().await.unwrap();
                    let answer = store
                        .on(&mut tx)
                        .create_hold(request(slot_id, &k, at(1)))
                        .await;
                    let aborted = sqlx::query("SELECT 1").execute(&mut *tx).await.is_err();
                    tx.rollback().await.unwrap();
                    (answer, aborted)
                } else {
                    let answer = store
                        .on(&mut conn)
                        .create_hold(request(slot_id, &k, at(1)))
                        .await;
                    (answer, false)
                }
            })
        };
        // The second waits for the first's slot row.
        let s = ctx.schema();
        let watcher = ctx.url_pool().await;
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE NOT l.granted AND a.query LIKE '%' || $1 || '%'",
            )
            .bind(format!("\"{s}\".slots SET remaining"))
            .fetch_one(&watcher)
            .await
            .unwrap();
            if waiting > 0 {
                break;
            }
            tokio::time::sleep(StdDuration::from_millis(5)).await;
        }
        first.commit().await.unwrap();
        let (answer, aborted) = second.await.unwrap();
        if in_transaction {
            let error = answer.expect_err("the loser's transaction is aborted");
            assert!(error.is_transient(), "{error}");
            assert!(aborted, "the transaction was aborted indeed");
        } else {
            assert!(
                matches!(answer.unwrap().outcome, HoldOutcome::Replayed(_)),
                "outside a transaction block the race replays"
            );
        }
        // Run again: the key replays.
        let mut again = ctx.pool().begin().await.unwrap();
        let replayed = ctx
            .store
            .on(&mut again)
            .create_hold(request(slot_id, &k, at(2)))
            .await
            .unwrap();
        assert!(matches!(replayed.outcome, HoldOutcome::Replayed(_)));
        again.commit().await.unwrap();
    }
    assert_eq!(counts(&ctx.store, slot_id).await, (5, 3, 2, 0));
    assert_invariant(&ctx.store, slot_id).await;
}
