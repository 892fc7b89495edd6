//! The change stream, `GET /changes` (Server-Sent Events), through the router with `oneshot`
//! over SQLite, PostgreSQL and MariaDB/MySQL: every committed change once and in order, whoever
//! made it; resuming after `Last-Event-ID` without a gap or a repeat; a bad id is 400 and a
//! bound on open streams is 503. Over the in-memory store: a stalled client falls behind alone and
//! loses nothing; over a real socket: shutting down ends every stream.

#[macro_use]
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use common::{new_slot, Oneshot as App};
use http_body_util::BodyExt;
use serde_json::Value;
use slot_booking::{BookingEngine, MemoryStore, SlotId};
use slot_booking_server::{router_with_config, Config, Engine, ServerStore};
use tower::ServiceExt;

on_every_backend!(
    open: open, worker_threads: 2;
    each_committed_change_comes_once_in_order,
    a_reconnect_resumes_after_its_last_event_id,
    bad_ids_are_refused_and_streams_are_bounded,
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

/// One open stream, read event by event.
struct Stream {
    body: Body,
    buffer: String,
}

/// One event of a stream: its `id` and its JSON `data`.
#[derive(Debug, Clone, PartialEq)]
struct Change {
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
        Stream {
            body: response.into_body(),
            buffer: String::new(),
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
                let (mut id, mut data) = (None, None);
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id: ") {
                        id = Some(value.to_owned());
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        data = Some(serde_json::from_str(value).unwrap());
                    }
                }
                if let (Some(id), Some(data)) = (id, data) {
                    return Some(Change { id, data });
                }
                continue;
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
/// starts at the present. At most half of `MAX_CONNECTIONS` streams (here one) are open at
/// once: the next is 503 `too_many_streams` with `Retry-After`, until one closes.
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
