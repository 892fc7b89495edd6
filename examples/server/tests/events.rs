//! The server's event log (`oneshot`): changes made through the API reach the log consumer
//! after they commit, and a consumer started again (a restart) resumes after what the previous
//! one acknowledged, on each backend. Under a history retention the log stays bounded: what
//! the consumer acknowledged is purged once older than the retention, unless another consumer
//! registered in the database holds it back (which the purger reports).

#[macro_use]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use axum::http::Request;
use slot_booking::events::{Event, EventKind, EventPosition};
use slot_booking::{ConsumerId, EventStore};
use slot_booking_server::database::Database;
use slot_booking_server::events::{EventTasks, Purger, Purging, CONSUMER};
use slot_booking_server::{Config, Engine};
use tokio::sync::mpsc;

use common::{new_slot, Oneshot};

/// How long an event may take to reach the consumer before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

struct App {
    api: Oneshot,
    url: String,
}

async fn open(url: &str, dir: Option<PathBuf>) -> App {
    App {
        api: Oneshot::open(url, dir, &Config::default()).await,
        url: url.to_owned(),
    }
}

on_every_backend!(open: open, worker_threads: 2;
    changes_through_the_api_reach_the_log_and_a_restart_resumes,
    two_servers_log_each_event_once_and_hand_over_on_stop,
    the_retention_purges_what_the_server_logged_once_it_is_older,
    another_consumer_behind_holds_the_log_back_and_is_reported,
);

/// The events the consumer hands over, and the tasks behind it.
async fn start_log(url: &str) -> (Database, mpsc::UnboundedReceiver<Event>, EventTasks) {
    let database = Database::open(url).await.unwrap();
    let (sink, events) = mpsc::unbounded_channel();
    let purging = Config::default().history_retention.map(Purging::keeping);
    let tasks = database
        .log_events(purging, move |event: &Event| {
            let _ = sink.send(event.clone());
        })
        .unwrap();
    (database, events, tasks)
}

async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    tokio::time::timeout(DEADLINE, events.recv())
        .await
        .expect("an event within the deadline")
        .expect("the consumer is running")
}

/// Waits until the log consumer's cursor reaches `position` (it acknowledges right after
/// handing a batch over).
async fn acknowledged(database: &Database, position: EventPosition) {
    let consumer = ConsumerId::new(CONSUMER).unwrap();
    let reached = tokio::time::timeout(DEADLINE, async {
        loop {
            let at = database.store().consumer_position(&consumer).await;
            if at.unwrap().is_some_and(|at| at >= position) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    reached
        .await
        .expect("the consumer acknowledged within the deadline");
}

async fn changes_through_the_api_reach_the_log_and_a_restart_resumes(app: App) {
    let (database, mut events, tasks) = start_log(&app.url).await;
    let slot = new_slot(&app.api.engine, 2, chrono::Duration::hours(2)).await;
    let created = next(&mut events).await;
    assert_eq!(
        (created.kind, created.slot_id),
        (EventKind::SlotCreated, slot)
    );

    let hold = app.api.hold(slot, "order-1", None, "").await;
    let hold_id = hold.hold(201)["hold_id"].as_i64().unwrap();
    let placed = next(&mut events).await;
    assert_eq!(placed.kind, EventKind::HoldPlaced);
    assert_eq!(placed.hold_id.map(|id| id.get()), Some(hold_id));
    // A replay through the API commits nothing and logs nothing; the next event is the
    // confirmation.
    let replay = app.api.hold(slot, "order-1", None, "").await;
    replay.hold(201);
    assert!(replay.replayed());
    let confirm = axum::http::Request::post(format!("/holds/{hold_id}/confirm"));
    app.api.send(confirm, "").await.hold(200);
    let confirmed = next(&mut events).await;
    assert_eq!(
        (confirmed.kind, confirmed.hold_id.map(|id| id.get())),
        (EventKind::HoldConfirmed, Some(hold_id))
    );
    acknowledged(&database, confirmed.position).await;
    // A server that stops releases the log's lease: the next one takes over at once.
    tasks.stop().await;
    drop(events);

    // While no consumer runs, a cancel commits; a new consumer (a restarted server) starts
    // with it, not with what was acknowledged before.
    let cancel = axum::http::Request::delete(format!("/holds/{hold_id}"));
    app.api.send(cancel, "").await.hold(200);
    let (_database, mut events, _tasks) = start_log(&app.url).await;
    let first = next(&mut events).await;
    assert_eq!(
        (first.kind, first.hold_id.map(|id| id.get())),
        (EventKind::HoldCancelled, Some(hold_id))
    );
    assert!(first.position > confirmed.position);
}

/// Two servers on one database run the log consumer under one name: one logs while it holds
/// the lease, every event exactly once between them; when it stops, the other takes over at
/// once and logs what comes next, from where the first acknowledged.
async fn two_servers_log_each_event_once_and_hand_over_on_stop(app: App) {
    let (database, mut one, one_tasks) = start_log(&app.url).await;
    let (_other, mut two, two_tasks) = start_log(&app.url).await;
    let slot = new_slot(&app.api.engine, 10, chrono::Duration::hours(2)).await;
    for i in 0..5 {
        app.api
            .hold(slot, &format!("order-{i}"), None, "")
            .await
            .hold(201);
    }
    // Six events: the slot and five holds, all from whichever server holds the lease.
    let first = tokio::select! {
        event = next(&mut one) => (event, true),
        event = next(&mut two) => (event, false),
    };
    let (holder, other) = if first.1 {
        (&mut one, &mut two)
    } else {
        (&mut two, &mut one)
    };
    let mut seen = vec![first.0];
    while seen.len() < 6 {
        seen.push(next(holder).await);
    }
    assert!(seen
        .windows(2)
        .all(|pair| pair[0].position < pair[1].position));
    assert_eq!(seen[0].kind, EventKind::SlotCreated);
    acknowledged(&database, seen[5].position).await;
    assert!(other.try_recv().is_err(), "the other server logged nothing");
    // The holder stops; the other takes the log over and logs the next change, only it.
    let (stopping, staying_events) = if first.1 {
        (one_tasks, &mut two)
    } else {
        (two_tasks, &mut one)
    };
    stopping.stop().await;
    app.api
        .hold(slot, "after-the-handover", None, "")
        .await
        .hold(201);
    let next_event = next(staying_events).await;
    assert_eq!(next_event.kind, EventKind::HoldPlaced);
    assert!(next_event.position > seen[5].position);
}

/// The server's event tasks on `engine` (the app's, on its manual clock) keeping history for
/// `keep` and purging every few milliseconds of real time, and the events they log.
fn start_purging(engine: &Engine, keep: Duration) -> (EventTasks, mpsc::UnboundedReceiver<Event>) {
    let (sink, events) = mpsc::unbounded_channel();
    let purging = Purging {
        keep,
        every: Duration::from_millis(10),
    };
    let tasks = EventTasks::start(engine.clone(), Some(purging), move |event: &Event| {
        let _ = sink.send(event.clone());
    })
    .unwrap();
    (tasks, events)
}

/// Every event the log holds.
async fn log_length(engine: &Engine) -> usize {
    let events = engine.read_events_after(EventPosition::START, 1000).await;
    events.unwrap().len()
}

/// Two more rounds of `purger`: the first of them may have started before the caller's last
/// change, the second did not.
async fn two_more_rounds(purger: &mut Purger) -> slot_booking_server::events::PurgeStats {
    let rounds = purger.stats().rounds;
    purger.wait_for_rounds(rounds + 2).await
}

/// `HISTORY_RETENTION_SECONDS=3600` as the server reads it.
fn an_hour() -> Duration {
    let config =
        Config::from_vars(|name| (name == "HISTORY_RETENTION_SECONDS").then(|| "3600".to_owned()));
    config.unwrap().history_retention.unwrap()
}

/// A slot, a hold confirmed and a hold cancelled, through the API: five changes, each logged
/// and acknowledged by the server's consumer before this returns. The hold ids and the last
/// change's position.
async fn some_history(
    app: &App,
    tasks: &EventTasks,
    events: &mut mpsc::UnboundedReceiver<Event>,
) -> (i64, i64) {
    let slot = new_slot(&app.api.engine, 5, chrono::Duration::hours(2)).await;
    let kept = app.api.hold(slot, "kept", None, "").await.hold(201)["hold_id"]
        .as_i64()
        .unwrap();
    let confirm = Request::post(format!("/holds/{kept}/confirm"));
    app.api.send(confirm, "").await.hold(200);
    let gone = app.api.hold(slot, "gone", None, "").await.hold(201)["hold_id"]
        .as_i64()
        .unwrap();
    app.api
        .send(Request::delete(format!("/holds/{gone}")), "")
        .await
        .hold(200);
    let mut last = next(events).await;
    for _ in 1..5 {
        last = next(events).await;
    }
    assert_eq!(last.kind, EventKind::HoldCancelled);
    let mut acknowledged = tasks.acknowledged();
    let reached = acknowledged.wait_for(|at| at.is_some_and(|at| at >= last.position));
    tokio::time::timeout(DEADLINE, reached)
        .await
        .expect("the consumer acknowledged within the deadline")
        .unwrap();
    (kept, gone)
}

/// Under the retention the server reads from `HISTORY_RETENTION_SECONDS`, its purger deletes
/// nothing younger than the retention; once the clock passes it, every change the server's
/// consumer logged goes, and so does the hold cancelled that long ago (its id is then
/// `hold_not_found`, its key free again), while the confirmed hold stays. What comes after is
/// kept until it is as old: the log holds at most the retention's worth.
async fn the_retention_purges_what_the_server_logged_once_it_is_older(app: App) {
    let keep = an_hour();
    let (mut tasks, mut events) = start_purging(&app.api.engine, keep);
    let (kept, gone) = some_history(&app, &tasks, &mut events).await;
    let purger = tasks.purger().expect("a purger under a retention");
    let within = two_more_rounds(purger).await;
    assert_eq!(
        (within.events, within.holds, within.held_back),
        (0, 0, None)
    );
    assert_eq!(log_length(&app.api.engine).await, 5);

    app.api
        .clock
        .advance(chrono::Duration::from_std(keep).unwrap() + chrono::Duration::seconds(1));
    let past = two_more_rounds(purger).await;
    assert_eq!((past.events, past.holds, past.held_back), (5, 1, None));
    assert_eq!(past.failures, 0);
    assert_eq!(log_length(&app.api.engine).await, 0);
    let read = |hold: i64| Request::get(format!("/holds/{hold}"));
    app.api
        .send(read(gone), "")
        .await
        .problem(404, "hold_not_found");
    assert_eq!(
        app.api.send(read(kept), "").await.hold(200)["status"],
        "confirmed"
    );
    // The purged hold's key places a new hold (not a replay of the cancelled one).
    let slot = app.api.send(read(kept), "").await.body["slot_id"]
        .as_i64()
        .unwrap();
    let again = app.api.hold(slot, "gone", None, "").await;
    assert!(!again.replayed());
    assert_eq!(again.hold(201)["status"], "held");

    // The new hold's change is logged and kept: younger than the retention.
    let placed = next(&mut events).await;
    assert_eq!(placed.kind, EventKind::HoldPlaced);
    let mut acknowledged = tasks.acknowledged();
    let reached = acknowledged.wait_for(|at| at.is_some_and(|at| at >= placed.position));
    tokio::time::timeout(DEADLINE, reached)
        .await
        .unwrap()
        .unwrap();
    let purger = tasks.purger().unwrap();
    let after = two_more_rounds(purger).await;
    assert_eq!((after.events, after.held_back), (5, None));
    assert_eq!(log_length(&app.api.engine).await, 1);
    tasks.stop().await;
}

/// The core deletes only what every registered consumer acknowledged: a consumer of the
/// application's that has read nothing keeps the whole log past the retention, and the purger
/// reports the oldest change it had to keep; once that consumer catches up, the next round
/// purges.
async fn another_consumer_behind_holds_the_log_back_and_is_reported(app: App) {
    let mailer = ConsumerId::new("mailer").unwrap();
    app.api
        .engine
        .acknowledge_events(&mailer, EventPosition::START)
        .await
        .unwrap();
    let keep = an_hour();
    let (mut tasks, mut events) = start_purging(&app.api.engine, keep);
    some_history(&app, &tasks, &mut events).await;
    app.api
        .clock
        .advance(chrono::Duration::from_std(keep).unwrap() + chrono::Duration::seconds(1));
    let log = app
        .api
        .engine
        .read_events_after(EventPosition::START, 10)
        .await
        .unwrap();
    assert_eq!(log.len(), 5);
    let purger = tasks.purger().unwrap();
    let held = two_more_rounds(purger).await;
    assert_eq!(held.events, 0);
    assert_eq!(held.held_back, Some(log[0].position));
    assert_eq!(log_length(&app.api.engine).await, 5);

    app.api
        .engine
        .acknowledge_events(&mailer, log[4].position)
        .await
        .unwrap();
    let caught_up = two_more_rounds(purger).await;
    assert_eq!((caught_up.events, caught_up.held_back), (5, None));
    assert_eq!(log_length(&app.api.engine).await, 0);
    tasks.stop().await;
}
