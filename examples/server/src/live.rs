//! The change stream, `GET /changes`: every change committed to the database — through this
//! server, another one on the same database, or an application's own transaction — as a
//! Server-Sent Event, from the database's event log.
//!
//! ```text
//! id: 0_17
//! data: {"position":"0_17","kind":"hold_placed","slot_id":3,"quantity":2,"at":"2030-06-01T08:00:00Z"}
//! ```
//!
//! A change names its kind (`hold_placed`, `hold_confirmed`, `hold_cancelled`,
//! `hold_expired`, `slot_capacity_changed`, …), its slot, its units and when it happened:
//! enough for a page to know which slot's free units to read again. It never names a hold or
//! an owner: the stream is public, and a hold id is what lets a client act on a hold.
//!
//! Without `Last-Event-ID` a stream starts at the present. A client that reconnects with the
//! `Last-Event-ID` it last saw (browsers' `EventSource` sends it by itself) gets every change
//! after it, once and in order, then the live ones; an id past the end of the log (a database
//! made anew) starts at the present. Changes older than the server's event purge are not
//! replayed.
//!
//! One feed per server reads the log every [`POLL`] while anyone is listening and hands each
//! batch to every stream through a bounded broadcast. A stream writes through a buffer of
//! [`BUFFER`] changes; a client too slow to keep up falls behind alone: its stream drops the
//! feed's batches it missed and reads them again from the log (by its own position), and no
//! other stream or the feed ever waits for it. At most half of `MAX_CONNECTIONS` streams are
//! open at once (the rest of the connections stay for the API): past that, 503
//! `too_many_streams`. Every stream ends when the server starts shutting down, so draining
//! never waits for one.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Serialize;
use slot_booking::{BookingError, Event, EventPosition, Timestamp};
use tokio::sync::{broadcast, mpsc, OwnedSemaphorePermit, Semaphore};

use crate::extract::LastEventId;
use crate::serve::Shutdown;
use crate::state::Engine;
use crate::Problem;

/// How often the feed reads the log while a stream is open.
pub const POLL: Duration = Duration::from_millis(100);

/// Changes a stream holds for its client before it stops taking more from the feed.
pub const BUFFER: usize = 64;

/// Batches the feed keeps for a stream that has not taken them yet; a stream further behind
/// reads the log instead.
const FEED_BATCHES: usize = 64;

/// Events read from the log at a time.
const BATCH: u32 = 500;

/// A comment line this often keeps idle proxies from closing a quiet stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One change as the stream writes it.
#[derive(Debug, Clone, Serialize)]
struct Change {
    position: String,
    kind: &'static str,
    slot_id: i64,
    quantity: i32,
    #[serde(with = "slot_booking::model::rfc3339")]
    at: Timestamp,
}

impl Change {
    fn of(event: &Event) -> (EventPosition, Change) {
        let change = Change {
            position: event.position.to_string(),
            kind: event.kind.as_str(),
            slot_id: event.slot_id.get(),
            quantity: event.quantity,
            at: event.at,
        };
        (event.position, change)
    }
}

/// What the feed read in one go: every change after `after` up to the last one's position.
#[derive(Debug)]
struct Batch {
    after: EventPosition,
    changes: Vec<(EventPosition, Change)>,
}

/// The server's change feed and its bound on open streams (a request extension the router
/// adds).
#[derive(Clone)]
pub(crate) struct Changes(Arc<Shared>);

struct Shared {
    feed: broadcast::Sender<Arc<Batch>>,
    /// Whether the feed's task runs; it stops when no stream is left.
    running: Mutex<bool>,
    streams: Arc<Semaphore>,
}

impl Changes {
    /// A feed for at most `streams` open streams (at least one).
    pub(crate) fn new(streams: usize) -> Changes {
        Changes(Arc::new(Shared {
            feed: broadcast::channel(FEED_BATCHES).0,
            running: Mutex::new(false),
            streams: Arc::new(Semaphore::new(streams.max(1))),
        }))
    }

    /// A receiver of the feed's batches, starting the feed's task after `end` (a position
    /// the caller read as the log's end before this call) if it is not running: a feed that
    /// started after a later end could have read changes the caller would never get.
    fn subscribe(&self, engine: &Engine, end: EventPosition) -> broadcast::Receiver<Arc<Batch>> {
        let mut running = self
            .0
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let receiver = self.0.feed.subscribe();
        if !*running {
            *running = true;
            tokio::spawn(feed(engine.clone(), Arc::clone(&self.0), end));
        }
        receiver
    }
}

/// `GET /changes`: the stream, from after `Last-Event-ID` or from the present.
#[utoipa::path(
    get,
    path = "/changes",
    tag = "changes",
    operation_id = "changes",
    summary = "Follow every committed change as it happens",
    description = "Server-Sent Events: each change committed to the database (through this \
                   server, another one, or an application's own transaction) as `id: \
                   <position>` and `data:` a JSON object of `position`, `kind` (`hold_placed`, \
                   `hold_confirmed`, `hold_cancelled`, `hold_renewed`, `hold_expired`, \
                   `slot_created`, `slot_capacity_changed`, `slot_closed`, `slot_reopened`, \
                   `slot_removed`, …), `slot_id`, `quantity` and `at`. Never a hold id or an \
                   owner. A comment line every 15 seconds keeps a quiet stream open; the \
                   stream ends when the server shuts down (reconnect with `Last-Event-ID`).",
    params(LastEventId),
    responses(
        (status = 200, description = "The stream of changes.", body = String, content_type = "text/event-stream"),
        (status = 400, description = "`invalid_last_event_id`."),
        (status = 503, description = "`too_many_streams`: as many streams are open as the server allows (half of `MAX_CONNECTIONS`); retry after `Retry-After`."),
    )
)]
pub(crate) async fn changes(
    State(engine): State<Engine>,
    Extension(changes): Extension<Changes>,
    shutdown: Option<Extension<Shutdown>>,
    LastEventId(last_seen): LastEventId,
) -> Result<Response, Problem> {
    let Ok(permit) = Arc::clone(&changes.0.streams).try_acquire_owned() else {
        return Err(Problem::too_many_streams());
    };
    // The end first, then the subscription: whatever the feed reads from now on comes
    // through the receiver, whatever it read before, the stream's own reads of the log see,
    // and a feed this starts reads on from this end, so nothing falls between them.
    let end = engine.event_log_end().await?;
    let feed = changes.subscribe(&engine, end);
    let from = last_seen.filter(|seen| *seen <= end).unwrap_or(end);
    let (out, written) = mpsc::channel(BUFFER);
    tokio::spawn(pump(
        engine,
        feed,
        from,
        out,
        shutdown.map(|Extension(shutdown)| shutdown),
        permit,
    ));
    let events = futures::stream::unfold(written, |mut written| async move {
        let event = written.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(event), written))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// Writes the changes after `from` to `out` until the client leaves (`out` closes), the
/// server shuts down, or the log cannot be read (the stream ends; the client reconnects with
/// its `Last-Event-ID`). Holds one of the open streams' permits meanwhile.
async fn pump(
    engine: Engine,
    mut feed: broadcast::Receiver<Arc<Batch>>,
    mut from: EventPosition,
    out: mpsc::Sender<SseEvent>,
    shutdown: Option<Shutdown>,
    _permit: OwnedSemaphorePermit,
) {
    let shutting_down = async {
        match shutdown {
            Some(mut shutdown) => shutdown.started().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = shutting_down => {}
        () = out.closed() => {}
        result = follow(&engine, &mut feed, &mut from, &out) => {
            if let Err(error) = result {
                tracing::warn!(%error, "a change stream cannot read the event log; it ends");
            }
        }
    }
}

/// The changes after `from` from the log, then from the feed, moving `from` along; back to
/// the log whenever the feed has gone past what this stream has written (it fell behind, or
/// the feed started after it). Ends when the client leaves.
async fn follow(
    engine: &Engine,
    feed: &mut broadcast::Receiver<Arc<Batch>>,
    from: &mut EventPosition,
    out: &mpsc::Sender<SseEvent>,
) -> Result<(), BookingError> {
    loop {
        loop {
            let events = engine.read_events_after(*from, BATCH).await?;
            let full = events.len() == BATCH as usize;
            for event in &events {
                let (position, change) = Change::of(event);
                if !write(out, position, &change).await {
                    return Ok(());
                }
                *from = position;
            }
            if !full {
                break;
            }
        }
        loop {
            let batch = match feed.recv().await {
                Ok(batch) if batch.after <= *from => batch,
                // A gap between what this stream wrote and the batch: read the log.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            };
            for (position, change) in &batch.changes {
                if *position > *from {
                    if !write(out, *position, change).await {
                        return Ok(());
                    }
                    *from = *position;
                }
            }
        }
    }
}

/// Writes one change; `false` once the client has left.
async fn write(out: &mpsc::Sender<SseEvent>, position: EventPosition, change: &Change) -> bool {
    let event = match SseEvent::default()
        .id(position.to_string())
        .json_data(change)
    {
        Ok(event) => event,
        // A change always serializes; were it not to, the stream would skip it rather than end.
        Err(error) => {
            tracing::warn!(%error, "a change cannot be written");
            return true;
        }
    };
    out.send(event).await.is_ok()
}

/// The feed: while any stream listens, reads the log after the last change it read (from
/// `start` at first) every [`POLL`], at once again after a full batch, and broadcasts what it
/// read. Stops when no stream is left.
async fn feed(engine: Engine, shared: Arc<Shared>, start: EventPosition) {
    let mut last = start;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        {
            let mut running = shared
                .running
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if shared.feed.receiver_count() == 0 {
                *running = false;
                return;
            }
        }
        let after = last;
        match engine.read_events_after(after, BATCH).await {
            Ok(events) => {
                let Some(newest) = events.last().map(|event| event.position) else {
                    continue;
                };
                if events.len() == BATCH as usize {
                    tick.reset_immediately();
                }
                let changes = events.iter().map(Change::of).collect();
                // No receiver left: the next tick stops the feed.
                let _ = shared.feed.send(Arc::new(Batch { after, changes }));
                last = newest;
            }
            Err(error) => tracing::warn!(%error, "the change feed cannot read the log; retrying"),
        }
    }
}
