//! The server's event log (`oneshot`): changes made through the API reach the log consumer
//! after they commit, and a consumer started again (a restart) resumes after what the previous
//! one acknowledged, on each backend.

#[macro_use]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use slot_booking::events::{Event, EventKind, EventPosition};
use slot_booking::{ConsumerId, EventStore};
use slot_booking_server::database::Database;
use slot_booking_server::events::{EventTasks, CONSUMER};
use slot_booking_server::Config;
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
);

/// The events the consumer hands over, and the tasks behind it.
async fn start_log(url: &str) -> (Database, mpsc::UnboundedReceiver<Event>, EventTasks) {
    let database = Database::open(url).await.unwrap();
    let (sink, events) = mpsc::unbounded_channel();
    let tasks = database
        .log_events(move |event: &Event| {
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
