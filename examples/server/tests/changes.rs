//! The change stream, `GET /changes` (Server-Sent Events), through the router with `oneshot`
//! over SQLite, PostgreSQL and MariaDB/MySQL: every committed change once and in order, whoever
//! made it; resuming after `Last-Event-ID` without a gap or a repeat, and, from before the
//! oldest change the log keeps, with a `reset` first; a bad id is 400 and a bound on open
//! streams is 503. Over the in-memory store: a stalled client falls behind alone and loses
//! nothing, and every kind of change is an event the document describes; over a real socket:
//! shutting down ends every stream.
//!
//! Every event a test reads is checked against the schema the OpenAPI document served by the
//! same router gives the stream's events (`common::contract`).

#[macro_use]
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use common::contract::Contract;
use common::{new_slot, Oneshot as App};
use http_body_util::BodyExt;
use serde_json::Value;
use slot_booking::{BookingEngine, EventKind, ManualClock, MemoryStore, NewHold, Scope, SlotId};
use slot_booking_server::{router_with_config, Config, Engine, ServerStore};
use tower::ServiceExt;

on_every_backend!(
    open: open, worker_threads: 2;
    each_committed_change_comes_once_in_order,
    a_reconnect_resumes_after_its_last_event_id,
    bad_ids_are_refused_and_streams_are_bounded,
    a_resume_from_before_what_the_log_keeps_starts_with_a_reset,
);

async fn open(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    let config = Config {
        max_connections: 2,
        ..Config::default()
    };
    App::open(url, sqlite_dir, &config).await
}

/// How long a test waits for a change it expects.
const PATIENCE: Duration = Duration::from_secs(20);

/// One open stream, read event by event, each checked against the document of the router
/// that serves it.
struct Stream {
    body: Body,
    buffer: String,
    contract: Arc<Contract>,
}

/// One event of a stream: its name (`None` for a change), its `id` and its JSON `data`.
#[derive(Debug, Clone, PartialEq)]
struct Change {
    event: Option<String>,
    id: String,
    data: Value,
}

impl Change {
    fn kind(&self) -> &str {
        self.data["kind"].as_str().unwrap_or_default()
    }
}

impl Stream {
    /// `GET /changes` through `router`, with `Last-Event-ID: last` if given.
    async fn open(router: &axum::Router, last: Option<&str>) -> Stream {
        let mut request = Request::get("/changes");
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        let response = router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let request = Request::get("/openapi.json").body(Body::empty()).unwrap();
        let document = router.clone().oneshot(request).await.unwrap();
        let document = document.into_body().collect().await.unwrap().to_bytes();
        Stream {
            body: response.into_body(),
            buffer: String::new(),
            contract: Contract::of(&document),
        }
    }

    /// The next event (comments skipped); panics after [`PATIENCE`] or if the stream ends.
    async fn next(&mut self) -> Change {
        tokio::time::timeout(PATIENCE, self.next_or_end())
            .await
            .expect("a change within the test's patience")
            .expect("the stream ended")
    }

    /// The next `n` events.
    async fn take(&mut self, n: usize) -> Vec<Change> {
        let mut changes = Vec::with_capacity(n);
        for _ in 0..n {
            changes.push(self.next().await);
        }
        changes
    }

    async fn next_or_end(&mut self) -> Option<Change> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                // The event's fields (a comment line, `:…`, is none), as the document's
                // schema of one event has them; `data` lines joined by newlines.
                let mut fields = serde_json::Map::new();
                let lines = block
                    .lines()
                    .filter(|l| !l.is_empty() && !l.starts_with(':'));
                for line in lines {
                    let (name, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value);
                    let joined = match (name, fields.get(name)) {
                        ("data", Some(Value::String(before))) => format!("{before}\n{value}"),
                        _ => value.to_owned(),
                    };
                    fields.insert(name.to_owned(), Value::String(joined));
                }
                if fields.is_empty() {
                    continue;
                }
                let fields = Value::Object(fields);
                if let Err(drift) = self.contract.check_event("GET", "/changes", 200, &fields) {
                    panic!(
                        "the stream sent an event the OpenAPI document does not describe: {drift}"
                    );
                }
                return Some(Change {
                    event: fields["event"].as_str().map(str::to_owned),
                    id: fields["id"].as_str().unwrap().to_owned(),
                    data: serde_json::from_str(fields["data"].as_str().unwrap()).unwrap(),
                });
            }
            let frame = self.body.frame().await?.unwrap();
            if let Ok(bytes) = frame.into_data() {
                self.buffer.push_str(std::str::from_utf8(&bytes).unwrap());
            }
        }
    }
}

/// Every change's id is its position, in ascending order, with exactly the five fields.
fn assert_well_formed(changes: &[Change]) {
    let mut previous: Option<(i64, i64)> = None;
    for change in changes {
        assert_eq!(change.event, None, "{change:?}");
        let mut fields: Vec<&str> = change
            .data
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(fields, ["at", "kind", "position", "quantity", "slot_id"]);
        assert_eq!(change.data["position"], change.id.as_str());
        let (epoch, sequence) = change.id.split_once('_').unwrap();
        let position = (epoch.parse().unwrap(), sequence.parse().unwrap());
        assert!(previous < Some(position), "{changes:?}");
        previous = Some(position);
    }
}

async fn hold(app: &App, slot: SlotId, key: &str, quantity: i32) -> i64 {
    let request = Request::post(format!("/slots/{slot}/hold")).header("idempotency-key", key);
    let reply = app
        .send(request, &format!(r#"{{"quantity": {quantity}}}"#))
        .await;
    reply.hold(201)["hold_id"].as_i64().unwrap()
}

/// Holds, a confirm and a cancel through the routes, and a slot made by the engine directly
/// (as another server on the database would): each comes once, in order, as committed, and
/// never names a hold or an owner.
async fn each_committed_change_comes_once_in_order(app: App) {
    let slot = new_slot(&app.engine, 10, chrono::Duration::hours(2)).await;
    let mut stream = Stream::open(&app.router, None).await;
    let mut watcher = Stream::open_second(&app).await;
    let first = hold(&app, slot, "a", 2).await;
    let request = Request::post(format!("/holds/{first}/confirm"));
    app.send(request, "").await.ok(200);
    let second = hold(&app, slot, "b", 1).await;
    app.send(Request::delete(format!("/holds/{second}")), "")
        .await
        .ok(200);
    let other = new_slot(&app.engine, 3, chrono::Duration::hours(4)).await;
    let changes = stream.take(5).await;
    assert_well_formed(&changes);
    let seen: Vec<(&str, Value, Value)> = changes
        .iter()
        .map(|c| {
            (
                c.kind(),
                c.data["slot_id"].clone(),
                c.data["quantity"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("hold_placed", slot.get().into(), 2.into()),
            ("hold_confirmed", slot.get().into(), 2.into()),
            ("hold_placed", slot.get().into(), 1.into()),
            ("hold_cancelled", slot.get().into(), 1.into()),
            ("slot_created", other.get().into(), 3.into()),
        ]
    );
    // A second stream open meanwhile saw the same.
    assert_eq!(watcher.take(5).await, changes);
}

impl Stream {
    /// A second stream on `app`'s router (its bound is one stream: see [`open`]), through a
    /// router of its own over the same engine.
    async fn open_second(app: &App) -> Stream {
        let router = router_with_config(app.engine.clone(), &Config::default());
        Stream::open(&router, None).await
    }
}

/// A client that read two changes and left gets, back with the first one's id, the second
/// and everything after, once each, then the live changes; without an id, only what comes
/// next.
async fn a_reconnect_resumes_after_its_last_event_id(app: App) {
    let slot = new_slot(&app.engine, 20, chrono::Duration::hours(2)).await;
    let mut stream = Stream::open(&app.router, None).await;
    hold(&app, slot, "a", 1).await;
    hold(&app, slot, "b", 1).await;
    let before = stream.take(2).await;
    drop(stream);
    for key in ["c", "d", "e"] {
        hold(&app, slot, key, 1).await;
    }
    let router = router_with_config(app.engine.clone(), &Config::default());
    let mut again = Stream::open(&router, Some(&before[0].id)).await;
    let mut fresh = Stream::open(&router, None).await;
    hold(&app, slot, "f", 3).await;
    let resumed = again.take(5).await;
    assert_well_formed(&resumed);
    assert_eq!(resumed[0], before[1]);
    assert_eq!(
        resumed
            .iter()
            .map(|c| c.data["quantity"].clone())
            .collect::<Vec<_>>(),
        [1, 1, 1, 1, 3].map(Value::from)
    );
    let live = fresh.next().await;
    assert_eq!(
        live, resumed[4],
        "a stream without an id starts at the present"
    );
}

/// A `Last-Event-ID` that is no position is 400 and opens nothing; one past the log's end
/// (another log's) starts at the present after a `reset`. At most half of `MAX_CONNECTIONS`
/// streams (here one) are open at once: the next is 503 `too_many_streams` with
/// `Retry-After`, until one closes.
async fn bad_ids_are_refused_and_streams_are_bounded(app: App) {
    for bad in ["abc", "1_", "-1_2", "1_2_3"] {
        let request = Request::get("/changes").header("last-event-id", bad);
        app.send(request, "")
            .await
            .problem(400, "invalid_last_event_id");
    }
    let request = Request::builder()
        .method(Method::GET)
        .uri("/changes")
        .header("last-event-id", "a")
        .header("last-event-id", "b");
    app.send(request, "")
        .await
        .problem(400, "invalid_last_event_id");
    let slot = new_slot(&app.engine, 5, chrono::Duration::hours(2)).await;
    let mut ahead = Stream::open(&app.router, Some("922337203685477580_0")).await;
    let refused = app.send(Request::get("/changes"), "").await;
    refused.problem(503, "too_many_streams");
    assert_eq!(refused.headers["retry-after"], "1");
    hold(&app, slot, "a", 2).await;
    assert_reset(&ahead.next().await);
    assert_eq!(ahead.next().await.kind(), "hold_placed");
    drop(ahead);
    // The closed stream's place is free once its writer has seen the client leave.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let request = Request::get("/changes").body(Body::empty()).unwrap();
        let response = app.router.clone().oneshot(request).await.unwrap();
        if response.status() == 200 {
            break;
        }
        assert_eq!(response.status(), 503);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place never came back"
        );
        tokio::task::yield_now().await;
    }
}

/// A client that reads nothing while over a thousand changes commit in many batches: another
/// client gets each batch meanwhile (the first never holds the feed back), and the stalled
/// one, once it reads, gets every change in order, the ones the feed dropped for it read
/// again from the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_falls_behind_alone_and_loses_nothing() {
    let store: Arc<dyn ServerStore> = Arc::new(MemoryStore::new());
    let engine: Engine = BookingEngine::new(store);
    let router = router_with_config(engine.clone(), &Config::default());
    let slot = new_slot(&engine, 100_000, chrono::Duration::hours(2)).await;
    let mut stalled = Stream::open(&router, None).await;
    let mut reader = Stream::open(&router, None).await;
    let mut read = Vec::new();
    // More rounds than the feed keeps batches for a stream, each its own batch: the reader
    // has each round's changes before the next round starts.
    for round in 0..80 {
        for i in 0..15 {
            engine.hold(slot, &format!("{round}-{i}")).await.unwrap();
        }
        read.extend(reader.take(15).await);
    }
    let all = stalled.take(read.len()).await;
    assert_well_formed(&all);
    assert_eq!(all, read);
    engine.hold(slot, "last").await.unwrap();
    assert_eq!(stalled.next().await, reader.next().await);
}

/// Over a real socket: once the server starts shutting down, an open stream ends, so
/// draining does not wait out its grace period for it (`serve` reports no connection left
/// open, where an unended stream would have been one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_ends_every_stream() {
    let store: Arc<dyn ServerStore> = Arc::new(MemoryStore::new());
    let engine: Engine = BookingEngine::new(store);
    let config = Config {
        shutdown_grace: Duration::from_secs(60),
        ..Config::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = router_with_config(engine.clone(), &config);
    let served = tokio::spawn(async move {
        slot_booking_server::serve(listener, app, &config, async {
            let _ = stopped.await;
        })
        .await
    });
    let mut response = reqwest::get(format!("http://{address}/changes"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    new_slot(&engine, 1, chrono::Duration::hours(1)).await;
    let mut text = String::new();
    while !text.contains("slot_created") {
        let chunk = tokio::time::timeout(PATIENCE, response.chunk())
            .await
            .expect("the change within the test's patience")
            .unwrap()
            .expect("the stream is open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    stop.send(()).unwrap();
    loop {
        let chunk = tokio::time::timeout(PATIENCE, response.chunk())
            .await
            .expect("the stream ends once shutting down starts");
        match chunk {
            Ok(Some(_)) => continue,
            Ok(None) => break,
            Err(error) => panic!("the stream broke instead of ending: {error}"),
        }
    }
    assert_eq!(served.await.unwrap(), 0);
}

/// A `reset` event: named `reset`, its id the position its data names.
fn assert_reset(change: &Change) {
    assert_eq!(change.event.as_deref(), Some("reset"), "{change:?}");
    assert_eq!(change.data["kind"], "reset", "{change:?}");
    assert_eq!(change.data["position"], change.id.as_str(), "{change:?}");
}

/// An event id as the position it is, to compare.
fn position(id: &str) -> (i64, i64) {
    let (epoch, sequence) = id.split_once('_').unwrap();
    (epoch.parse().unwrap(), sequence.parse().unwrap())
}

/// Changes older than the history kept are purged (by the engine's purge on a manual clock,
/// as the server's purger does): a client whose `Last-Event-ID` is one of them, or `0_0`,
/// gets a `reset` first and then the changes from the present on, not the ones the log kept
/// after its id; a client whose id is still kept (the oldest kept included) resumes as usual,
/// and so does one that resumes with the reset's id.
async fn a_resume_from_before_what_the_log_keeps_starts_with_a_reset(app: App) {
    let router = router_with_config(app.engine.clone(), &Config::default());
    let slot = new_slot(&app.engine, 20, chrono::Duration::hours(4)).await;
    let mut stream = Stream::open(&router, None).await;
    hold(&app, slot, "a", 1).await;
    hold(&app, slot, "b", 2).await;
    let old = stream.take(2).await;
    drop(stream);
    app.clock.advance(chrono::Duration::hours(2));
    hold(&app, slot, "c", 3).await;
    // No consumer is registered in this database: every change older than an hour goes.
    let purged = app.engine.purge(Duration::from_secs(3600), 1000).await;
    assert_eq!(
        purged.unwrap().events,
        3,
        "the slot and the first two holds"
    );
    let kept = app.engine.read_events_after(Default::default(), 10).await;
    let kept = kept.unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let oldest_kept = kept[0].position.to_string();

    let mut from_purged = Stream::open(&router, Some(&old[0].id)).await;
    let mut from_start = Stream::open(&router, Some("0_0")).await;
    let mut from_kept = Stream::open(&router, Some(&oldest_kept)).await;
    hold(&app, slot, "d", 4).await;
    let mut reset_id = String::new();
    for stream in [&mut from_purged, &mut from_start] {
        let reset = stream.next().await;
        assert_reset(&reset);
        // Not the change kept after its id ("c", 3 units): the present on.
        let next = stream.next().await;
        assert_eq!(next.kind(), "hold_placed");
        assert_eq!(next.data["quantity"], 4);
        assert!(position(&next.id) > position(&reset.id));
        reset_id = reset.id;
    }
    let resumed = from_kept.next().await;
    assert_eq!(resumed.event, None, "no reset for an id the log keeps");
    assert_eq!(resumed.data["quantity"], 4);

    // The reset's id is a position like any other: resuming with it misses nothing.
    drop((from_purged, from_start, from_kept));
    let mut again = Stream::open(&router, Some(&reset_id)).await;
    let first = again.next().await;
    assert_eq!(
        (first.event.as_deref(), first.kind()),
        (None, "hold_placed")
    );
    assert_eq!(first.data["quantity"], 4);
}

/// Every kind of change the log has reaches the stream as an event the OpenAPI document
/// describes ([`Stream`] checks each against it), a `reset` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_change_is_an_event_the_document_describes() {
    let clock = ManualClock::new(common::epoch());
    let store: Arc<dyn ServerStore> = Arc::new(MemoryStore::new());
    let engine: Engine = BookingEngine::builder(store).clock(clock.clone()).build();
    let router = router_with_config(engine.clone(), &Config::default());
    let mut stream = Stream::open(&router, None).await;
    let slot = new_slot(&engine, 2, chrono::Duration::hours(2)).await;
    let first = engine.hold(slot, "a").await.unwrap().hold.hold_id;
    let longer = Some(Duration::from_secs(600));
    engine
        .renew(&Scope::Anonymous, first, longer)
        .await
        .unwrap();
    engine.confirm(&Scope::Anonymous, first).await.unwrap();
    let second = engine.hold(slot, "b").await.unwrap().hold.hold_id;
    // Sold out: "c" waits in line, and is offered the unit "b" gives back.
    engine
        .join_waitlist(NewHold::new(slot, "c"), 0)
        .await
        .unwrap();
    engine.cancel(&Scope::Anonymous, second).await.unwrap();
    engine.change_capacity(slot, 5).await.unwrap();
    let short = NewHold::new(slot, "d").lifetime(Duration::from_secs(60));
    engine.place_hold(short).await.unwrap();
    clock.advance(chrono::Duration::seconds(61));
    engine.reclaim_expired(100).await.unwrap();
    engine.close_sales(slot).await.unwrap();
    engine.reopen_sales(slot).await.unwrap();
    let other = new_slot(&engine, 1, chrono::Duration::hours(3)).await;
    engine.remove_slot(other).await.unwrap();

    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < EventKind::ALL.len() {
        let change = tokio::time::timeout(PATIENCE, stream.next_or_end()).await;
        let change = change.unwrap_or_else(|_| panic!("only {seen:?} came"));
        seen.insert(change.unwrap().kind().to_owned());
    }
    let all: std::collections::BTreeSet<String> = EventKind::ALL
        .iter()
        .map(|kind| kind.as_str().to_owned())
        .collect();
    assert_eq!(seen, all);
    // And a reset, for an id before the oldest change kept.
    drop(stream);
    let mut reset = Stream::open(&router, Some("0_0")).await;
    assert_reset(&reset.next().await);
}
