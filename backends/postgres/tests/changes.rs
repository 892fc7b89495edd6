//! Every instance sees every commit: engines following the schema's change notifications.
//!
//! Each test makes a schema of its own. Engines cache availability for an hour, so only an
//! invalidation can refresh them. Delays are printed (run with `--nocapture`), never asserted:
//! every wait has a generous timeout and fails only when a change never shows.

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use common::{pool, setup, Ctx};
use slot_booking::changes::{
    follow_changes, Follower, Following, DEFAULT_COALESCING_WINDOW, DEFAULT_POLL_INTERVAL,
};
use slot_booking::{AvailabilityQuery, BookingEngine, NewBooking, NewSlot, Scope, SlotId};
use slot_booking_postgres::PostgresStore;
use sqlx::postgres::PgPool;
use sqlx::AssertSqlSafe;

/// Long enough that a wait times out only when a change never arrives.
const TIMEOUT: Duration = Duration::from_secs(10);

/// An engine whose cached listing is fresh for an hour: only an invalidation refreshes it.
fn engine(store: PostgresStore) -> BookingEngine<PostgresStore> {
    BookingEngine::builder(store)
        .cache_period(Duration::from_secs(3600))
        .build()
}

/// A slot starting tomorrow.
async fn future_slot(engine: &BookingEngine<PostgresStore>, capacity: i32) -> SlotId {
    let starts_at = Utc::now() + chrono::Duration::days(1);
    engine
        .create_slot(NewSlot::new(
            starts_at,
            starts_at + chrono::Duration::hours(1),
            capacity,
        ))
        .await
        .unwrap()
        .slot_id
}

/// The units `engine` lists for `slot_id` (from its cache when fresh).
async fn listed(engine: &BookingEngine<PostgresStore>, slot_id: SlotId) -> Option<i32> {
    engine
        .availability(AvailabilityQuery::all())
        .await
        .unwrap()
        .entry(slot_id)
        .map(|entry| entry.remaining)
}

/// Polls `condition` (yielding briefly between tries) until it holds; panics with `what`
/// after [`TIMEOUT`]. Returns how long it took.
async fn wait_for<F, Fut>(what: &str, mut condition: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if condition().await {
            return started.elapsed();
        }
        assert!(started.elapsed() < TIMEOUT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
}

/// Waits until `follower` has received `notices` notices.
async fn wait_for_notices(follower: &Follower, notices: u64) {
    wait_for(&format!("notice {notices}"), || async {
        follower.stats().notices >= notices
    })
    .await;
}

/// An operator's SQL change that notifies: one more unit of capacity on `slot_id`.
fn raise_capacity(schema: &str) -> String {
    format!(
        "UPDATE \"{schema}\".slots SET capacity = capacity + 1, remaining = remaining + 1 \
         WHERE id = $1"
    )
}

async fn execute(pool: &PgPool, sql: &str, slot_id: SlotId) {
    sqlx::query(AssertSqlSafe(sql))
        .bind(slot_id.get())
        .execute(pool)
        .await
        .unwrap();
}

/// The backends listening on `store`'s channel.
async fn listeners(ctx: &Ctx, store: &PostgresStore) -> Vec<i32> {
    sqlx::query_scalar(
        // `LISTEN "<channel>"` when the feed listened, with a `;` when sqlx listened again.
        "SELECT pid FROM pg_stat_activity \
         WHERE starts_with(query, 'LISTEN \"' || $1 || '\"') ORDER BY pid",
    )
    .bind(store.change_channel())
    .fetch_all(ctx.pool())
    .await
    .unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// (a) Three instances, each with its own pool, following one schema: a cancel committed
/// through one shows on the other two, in every one of 200 trials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_one_instance_shows_on_the_others() {
    let Some(ctx) = setup("a_cancel_through_one_instance_shows_on_the_others").await else {
        return;
    };
    let a = engine(ctx.store.clone());
    let b = engine(ctx.second_store().await);
    let c = engine(ctx.second_store().await);
    let mut followers = Vec::new();
    for e in [&a, &b, &c] {
        followers.push(e.store().follow_changes(e.invalidator()).await.unwrap());
    }
    let slot = future_slot(&a, 1).await;
    const TRIALS: usize = 200;
    // Spaced trials, back-to-back trials.
    let mut delays = [Vec::with_capacity(TRIALS), Vec::with_capacity(TRIALS)];
    for trial in 0..TRIALS {
        let placed = a.hold(slot, &format!("trial-{trial}")).await.unwrap();
        a.confirm(&Scope::Anonymous, placed.hold.hold_id)
            .await
            .unwrap();
        // A hold does not notify: make B and C list the slot as taken before the cancel.
        for e in [&b, &c] {
            e.invalidate_availability();
            assert_eq!(listed(e, slot).await, Some(0), "trial {trial}: taken");
        }
        // Even trials wait a window first, so the followers' coalescing is idle and the delay
        // is delivery and reload; odd ones follow the previous cancel within a window, as
        // under load, and may wait for the window's end.
        let spaced = trial % 2 == 0;
        if spaced {
            tokio::time::sleep(DEFAULT_COALESCING_WINDOW + Duration::from_millis(5)).await;
        }
        a.cancel(&Scope::Anonymous, placed.hold.hold_id)
            .await
            .unwrap();
        // From the cancel's commit (it has returned) to each instance serving the unit.
        let committed = Instant::now();
        let mut pending = vec![&b, &c];
        while !pending.is_empty() {
            let mut still = Vec::new();
            for e in pending {
                if listed(e, slot).await == Some(1) {
                    delays[usize::from(!spaced)].push(committed.elapsed());
                } else {
                    still.push(e);
                }
            }
            pending = still;
            assert!(
                committed.elapsed() < TIMEOUT,
                "trial {trial}: the cancel never showed"
            );
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
    }
    let all: Vec<Duration> = delays.concat();
    let [spaced, back_to_back] = delays;
    let total = all.len();
    for (what, mut delays) in [
        ("spaced a window apart", spaced),
        ("back to back", back_to_back),
        ("all", all),
    ] {
        delays.sort();
        eprintln!(
            "changes (a): {what}: {} convergences (2 instances per cancel): \
             p50 {:?}, p99 {:?}, max {:?} (window {:?})",
            delays.len(),
            percentile(&delays, 0.50),
            percentile(&delays, 0.99),
            delays[delays.len() - 1],
            DEFAULT_COALESCING_WINDOW,
        );
    }
    assert_eq!(total, 2 * TRIALS);
    for (name, follower) in ["A", "B", "C"].iter().zip(&followers) {
        let stats = follower.stats();
        eprintln!("changes (a): follower {name}: {stats:?}");
        assert_eq!(stats.unsure, 0, "no connection was lost");
    }
}

/// (a2) Holds and bookings notify nobody (their commits stay off PostgreSQL's notification
/// lock), yet one placed through one instance shows on the two others that follow changes:
/// their followers read the event log too. Delays from the commit to each instance serving it,
/// over 100 trials (half holds, half bookings of two lines), with caches fresh for an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_through_one_instance_shows_on_the_others() {
    let Some(ctx) = setup("a_hold_through_one_instance_shows_on_the_others").await else {
        return;
    };
    let a = engine(ctx.store.clone());
    let b = engine(ctx.second_store().await);
    let c = engine(ctx.second_store().await);
    let mut followers = Vec::new();
    for e in [&a, &b, &c] {
        followers.push(e.store().follow_changes(e.invalidator()).await.unwrap());
    }
    const TRIALS: i32 = 100;
    let first = future_slot(&a, TRIALS).await;
    let second = future_slot(&a, TRIALS).await;
    for e in [&b, &c] {
        wait_for("the slots", || async {
            listed(e, second).await == Some(TRIALS)
        })
        .await;
    }
    let mut delays = Vec::new();
    for trial in 0..TRIALS {
        if trial % 2 == 0 {
            a.hold(first, &format!("hold-{trial}")).await.unwrap();
        } else {
            let stay = NewBooking::new(format!("stay-{trial}"))
                .line(first, 1)
                .line(second, 1);
            a.book(stay).await.unwrap();
        }
        let committed = Instant::now();
        let taken = TRIALS - 1 - trial;
        let mut pending = vec![&b, &c];
        while !pending.is_empty() {
            let mut still = Vec::new();
            for e in pending {
                if listed(e, first).await == Some(taken) {
                    delays.push(committed.elapsed());
                } else {
                    still.push(e);
                }
            }
            pending = still;
            assert!(
                committed.elapsed() < TIMEOUT,
                "trial {trial}: the hold never showed"
            );
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
    }
    delays.sort();
    eprintln!(
        "changes (a2): {} convergences of holds and bookings (2 instances each): p50 {:?}, \
         p99 {:?}, max {:?} (log read every {:?}, window {:?})",
        delays.len(),
        percentile(&delays, 0.50),
        percentile(&delays, 0.99),
        delays[delays.len() - 1],
        DEFAULT_POLL_INTERVAL,
        DEFAULT_COALESCING_WINDOW,
    );
    assert_eq!(delays.len(), 2 * TRIALS as usize);
    for follower in &followers {
        assert_eq!(follower.stats().unsure, 0, "no poll failed");
    }
}

/// (b) A change made inside a caller's transaction is notified at its commit, not before;
/// a rolled-back one never. The notifications alone (the store's feed, without the event
/// log's): what the triggers send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_in_a_callers_transaction_shows_at_commit_and_never_on_rollback() {
    let Some(ctx) =
        setup("a_change_in_a_callers_transaction_shows_at_commit_and_never_on_rollback").await
    else {
        return;
    };
    let e = engine(ctx.second_store().await);
    let feed = e.store().change_feed().await.unwrap();
    let follower = follow_changes(feed, e.invalidator(), DEFAULT_COALESCING_WINDOW);
    let slot = future_slot(&e, 3).await;
    let marker = future_slot(&e, 3).await;
    assert_eq!(listed(&e, slot).await, Some(3));
    let raise = raise_capacity(ctx.schema());
    // The two inserts notify too: count from after them.
    wait_for_notices(&follower, 2).await;
    let base = follower.stats().notices;
    assert_eq!(base, 2);

    // Changed in an open transaction: a later commit elsewhere is notified, this one is not.
    let mut tx = ctx.pool().begin().await.unwrap();
    sqlx::query(AssertSqlSafe(raise.as_str()))
        .bind(slot.get())
        .execute(&mut *tx)
        .await
        .unwrap();
    execute(ctx.pool(), &raise, marker).await;
    wait_for_notices(&follower, base + 1).await;
    assert_eq!(
        follower.stats().notices,
        base + 1,
        "only the marker's commit"
    );
    wait_for("the marker to show", || async {
        listed(&e, marker).await == Some(4)
    })
    .await;
    assert_eq!(
        listed(&e, slot).await,
        Some(3),
        "the uncommitted change is not served"
    );

    tx.commit().await.unwrap();
    wait_for_notices(&follower, base + 2).await;
    wait_for("the committed change to show", || async {
        listed(&e, slot).await == Some(4)
    })
    .await;

    // Rolled back: nothing is sent. Notifications arrive in commit order, so once the
    // marker's has arrived, one from the rolled-back transaction could not still come.
    let mut tx = ctx.pool().begin().await.unwrap();
    sqlx::query(AssertSqlSafe(raise.as_str()))
        .bind(slot.get())
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    execute(ctx.pool(), &raise, marker).await;
    wait_for_notices(&follower, base + 3).await;
    assert_eq!(
        follower.stats().notices,
        base + 3,
        "the rollback sent nothing"
    );
    assert_eq!(listed(&e, slot).await, Some(4));

    // A hold's decrement and a confirm notify nothing either.
    let placed = e.hold(slot, "quiet").await.unwrap();
    e.confirm(&Scope::Anonymous, placed.hold.hold_id)
        .await
        .unwrap();
    execute(ctx.pool(), &raise, marker).await;
    wait_for_notices(&follower, base + 4).await;
    assert_eq!(
        follower.stats().notices,
        base + 4,
        "hold and confirm sent nothing"
    );
    eprintln!("changes (b): {:?}", follower.stats());
}

/// (c) The listener's connection is killed and a change commits meanwhile: the feed reports
/// Unsure once it listens again, and the engine ends up serving the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listener_connection_invalidates_once_it_listens_again() {
    let Some(ctx) = setup("a_lost_listener_connection_invalidates_once_it_listens_again").await
    else {
        return;
    };
    let e = engine(ctx.second_store().await);
    let follower = e.store().follow_changes(e.invalidator()).await.unwrap();
    let slot = future_slot(&e, 3).await;
    assert_eq!(listed(&e, slot).await, Some(3));
    let before = listeners(&ctx, e.store()).await;
    assert_eq!(before.len(), 1, "one listening backend: {before:?}");

    // Terminate it and wait until it has exited (PostgreSQL 14+), then commit at once, before
    // the listener can have connected and listened again (or just after: either way the
    // engine must end up serving the change).
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(before[0])
        .fetch_one(ctx.pool())
        .await
        .unwrap();
    assert!(terminated);
    execute(ctx.pool(), &raise_capacity(ctx.schema()), slot).await;

    let took = wait_for("the change after the reconnection", || async {
        listed(&e, slot).await == Some(4)
    })
    .await;
    wait_for("an unsure notice", || async {
        follower.stats().unsure >= 1
    })
    .await;
    let after = listeners(&ctx, e.store()).await;
    assert_eq!(after.len(), 1, "listening again: {after:?}");
    assert_ne!(after, before, "on a new connection");
    eprintln!(
        "changes (c): served {took:?} after the commit; {:?}",
        follower.stats()
    );

    // And it keeps following on the new connection.
    execute(ctx.pool(), &raise_capacity(ctx.schema()), slot).await;
    wait_for("a change on the new connection", || async {
        listed(&e, slot).await == Some(5)
    })
    .await;
}

/// (d) A burst of commits, three instances reading all the while: each instance reloads far
/// less often than once per commit. The coalescer spaces invalidations at least a window
/// apart, so over `elapsed` an instance invalidates at most `elapsed / window + 1` times, and
/// reloads at most once per invalidation; both are checked as counts, not times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_commits_reloads_each_instance_at_most_once_per_window() {
    let Some(ctx) = setup("a_burst_of_commits_reloads_each_instance_at_most_once_per_window").await
    else {
        return;
    };
    let mut engines = Vec::new();
    let mut followers = Vec::new();
    for _ in 0..3 {
        let e = Arc::new(engine(ctx.second_store().await));
        followers.push(e.store().follow_changes(e.invalidator()).await.unwrap());
        engines.push(e);
    }
    let slot = future_slot(&engines[0], 1).await;
    for (e, follower) in engines.iter().zip(&followers) {
        // The insert's notices (its notification, and its `slot_created` in the log), before
        // counting the burst's: plain SQL appends no event, so the burst's are notifications.
        wait_for_notices(follower, 2).await;
        assert_eq!(listed(e, slot).await, Some(1));
    }

    // Readers: each counts the snapshots it is served that differ from the previous one
    // (holding the previous one, so a new one can never reuse its address).
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = engines
        .iter()
        .map(|e| {
            let e = Arc::clone(e);
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let reloads = AtomicU64::new(0);
                let mut previous = e
                    .availability(AvailabilityQuery::all())
                    .await
                    .unwrap()
                    .snapshot()
                    .clone();
                while !stop.load(Ordering::Relaxed) {
                    let read = e.availability(AvailabilityQuery::all()).await.unwrap();
                    if !Arc::ptr_eq(read.snapshot(), &previous) {
                        reloads.fetch_add(1, Ordering::Relaxed);
                        previous = read.snapshot().clone();
                    }
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                reloads.into_inner()
            })
        })
        .collect();

    const COMMITS: u64 = 200;
    let base: Vec<u64> = followers.iter().map(|f| f.stats().notices).collect();
    let invalidations_before: Vec<u64> =
        followers.iter().map(|f| f.stats().invalidations).collect();
    let writer = pool(&ctx.url).await;
    let raise = raise_capacity(ctx.schema());
    let started = Instant::now();
    for _ in 0..COMMITS {
        execute(&writer, &raise, slot).await;
    }
    let burst = started.elapsed();
    for (follower, base) in followers.iter().zip(&base) {
        wait_for_notices(follower, base + COMMITS).await;
    }
    // The last commit shows everywhere (the pending invalidation at the window's end).
    for e in &engines {
        wait_for("the last commit", || async {
            listed(e, slot).await == Some(1 + COMMITS as i32)
        })
        .await;
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut reloads = Vec::new();
    for reader in readers {
        reloads.push(reader.await.unwrap());
    }
    let windows = elapsed.as_micros() / DEFAULT_COALESCING_WINDOW.as_micros() + 1;
    for (i, follower) in followers.iter().enumerate() {
        let stats = follower.stats();
        let invalidations = stats.invalidations - invalidations_before[i];
        eprintln!(
            "changes (d): instance {i}: {COMMITS} commits in {burst:?} ({elapsed:?} until \
             served), {} notices, {invalidations} invalidations, {} reloads: {:.3} reloads \
             per commit",
            stats.notices - base[i],
            reloads[i],
            reloads[i] as f64 / COMMITS as f64,
        );
        assert_eq!(stats.notices - base[i], COMMITS, "one notice per commit");
        assert!(
            u128::from(invalidations) <= windows,
            "at most one invalidation per window: {invalidations} in {windows} windows"
        );
        assert!(
            reloads[i] <= invalidations,
            "a reload only after an invalidation: {} > {invalidations}",
            reloads[i]
        );
        assert!(reloads[i] >= 1, "the burst was served");
    }
}

/// (e) The follower ends with its engine, and its connection with it; the listener never
/// takes a connection from the store's pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_and_its_connection_end_with_the_engine() {
    let Some(ctx) = setup("the_follower_and_its_connection_end_with_the_engine").await else {
        return;
    };
    // A pool of one connection: a listener holding it would leave the store none.
    let store = common::one_connection_store(&ctx).await;
    let e = engine(store.clone());
    let follower = store.follow_changes(e.invalidator()).await.unwrap();
    // The pool still serves (it would wait for its only connection otherwise), from a
    // backend that is not the listener's.
    assert_eq!(listed(&e, future_slot(&e, 1).await).await, Some(1));
    let pool_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let listening = listeners(&ctx, &store).await;
    assert_eq!(listening.len(), 1, "{listening:?}");
    assert_ne!(
        listening[0], pool_pid,
        "the listener's connection is not the pool's"
    );
    assert_eq!(store.pool().size(), 1);

    drop(e);
    wait_for("the follower to end", || async { follower.is_finished() }).await;
    let gone = wait_for("the listener's backend to exit", || async {
        let alive: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                .bind(listening[0])
                .fetch_one(ctx.pool())
                .await
                .unwrap();
        !alive
    })
    .await;
    eprintln!("changes (e): the listener's backend exited {gone:?} after the follower ended");
}

/// A schema that has not been migrated to change notifications cannot be followed: the
/// error says so rather than a follower that never hears anything.
#[tokio::test]
async fn following_an_unmigrated_schema_fails() {
    let Some(ctx) = setup("following_an_unmigrated_schema_fails").await else {
        return;
    };
    let s = ctx.schema();
    sqlx::query(AssertSqlSafe(format!(
        "DROP TRIGGER slots_notify_update ON \"{s}\".slots"
    )))
    .execute(ctx.pool())
    .await
    .unwrap();
    let e = engine(ctx.store.clone());
    let error = ctx.store.follow_changes(e.invalidator()).await.unwrap_err();
    assert!(error.to_string().contains("migrate"), "{error}");
}

/// The channel is the schema's: a change in one schema wakes no follower of another (the
/// notifications alone, without the event log's feed, which reads its own schema's log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_in_other_schemas_are_not_woken() {
    let Some(one) = setup("stores_in_other_schemas_are_not_woken").await else {
        return;
    };
    let Some(other) = setup("stores_in_other_schemas_are_not_woken").await else {
        return;
    };
    assert_ne!(one.store.change_channel(), other.store.change_channel());
    let e1 = engine(one.store.clone());
    let e2 = engine(other.store.clone());
    let f1 = follow_changes(
        one.store.change_feed().await.unwrap(),
        e1.invalidator(),
        DEFAULT_COALESCING_WINDOW,
    );
    let f2 = follow_changes(
        other.store.change_feed().await.unwrap(),
        e2.invalidator(),
        DEFAULT_COALESCING_WINDOW,
    );
    let s1 = future_slot(&e1, 2).await;
    let s2 = future_slot(&e2, 2).await;
    wait_for_notices(&f1, 1).await;
    wait_for_notices(&f2, 1).await;
    // A change in `one`, then a marker in `other`. PostgreSQL keeps one notification queue
    // for all channels, which every listening backend reads in commit order: had `other`'s
    // listener been woken by `one`'s change, that notice would have come before the marker's.
    execute(one.pool(), &raise_capacity(one.schema()), s1).await;
    wait_for_notices(&f1, 2).await;
    execute(other.pool(), &raise_capacity(other.schema()), s2).await;
    wait_for_notices(&f2, 2).await;
    assert_eq!(f2.stats().notices, 2, "only its own schema's commits");
    assert_eq!(f1.stats().notices, 2);
}

/// A slot's line forming or emptying changes what availability lists (a slot whose line waits
/// has no unit for anyone else): another instance's cached listing follows both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waitlist_forming_and_leaving_shows_on_the_others() {
    use slot_booking::waitlists::Joined;
    use slot_booking::NewHold;
    let Some(ctx) = setup("a_waitlist_forming_and_leaving_shows_on_the_others").await else {
        return;
    };
    let a = engine(ctx.store.clone());
    let b = engine(ctx.second_store().await);
    let _follower = b.store().follow_changes(b.invalidator()).await.unwrap();
    let slot = future_slot(&a, 3).await;
    a.place_hold(NewHold::new(slot, "two").quantity(2))
        .await
        .unwrap();
    b.invalidate_availability();
    assert_eq!(listed(&b, slot).await, Some(1));
    // The head wants two: it waits, and the unit free is no one else's.
    let Ok(Joined::Waiting { entry, .. }) = a
        .join_waitlist(NewHold::new(slot, "head").quantity(2), 0)
        .await
    else {
        panic!("the head waits")
    };
    wait_for("the line to show", || async {
        listed(&b, slot).await == Some(0)
    })
    .await;
    a.leave_waitlist(&Scope::Anonymous, entry.entry_id)
        .await
        .unwrap();
    wait_for("the empty line to show", || async {
        listed(&b, slot).await == Some(1)
    })
    .await;
}

/// `follow_changes_with` reads the event log's commits every `poll_every` and coalesces within
/// `coalesce_within`: holds (which notify nobody) reach a follower reading every 20 ms, not one
/// reading once an hour, and a follower whose window is an hour invalidates once for two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_honours_its_poll_interval_and_window() {
    let Some(ctx) = setup("following_honours_its_poll_interval_and_window").await else {
        return;
    };
    let a = engine(ctx.store.clone());
    let b = engine(ctx.second_store().await);
    let slot = future_slot(&a, 5).await;
    let hour = Duration::from_secs(3600);
    let hourly = b
        .store()
        .follow_changes_with(b.invalidator(), Following::default().with_poll_every(hour))
        .await
        .unwrap();
    let windowed = b
        .store()
        .follow_changes_with(
            b.invalidator(),
            Following::default()
                .with_poll_every(DEFAULT_POLL_INTERVAL)
                .with_coalesce_within(hour),
        )
        .await
        .unwrap();
    for n in 1..=2 {
        a.hold(slot, &format!("hold-{n}")).await.unwrap();
        wait_for_notices(&windowed, n).await;
    }
    assert_eq!(
        windowed.stats().invalidations,
        1,
        "the second hold waits for the window's end, an hour away"
    );
    assert_eq!(
        hourly.stats().notices,
        0,
        "no read of the log within the hour"
    );
}
