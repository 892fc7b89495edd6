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
//! enough for a page to know which slot's free units to read again. It never names a hold, a
//! booking or an owner: the stream is public, and a hold id (a booking's id is its first
//! line's) is what lets a client act on a hold. A change of a line of a booking of several
//! lines says so instead (`booking_line`: `first` on the booking's first line, `next` on the
//! others), so a client counts a booking once: the changes without `booking_line` or with
//! `first`. The
//! OpenAPI document describes each event (`ChangeEvent`: the `data` of a change is a
//! `Change`, of a reset a `StreamReset`).
//!
//! Without `Last-Event-ID` a stream starts at the present. A client that reconnects with the
//! `Last-Event-ID` it last saw (browsers' `EventSource` sends it by itself) gets every change
//! after it, once and in order, then the live ones — as far back as the log keeps changes:
//! the server deletes those older than `HISTORY_RETENTION_SECONDS` (a week by default; see
//! [`crate::events`]). A client whose id is before the oldest change kept (it was away longer
//! than that, or it sent `0_0`), or past the end of the log (a database made anew), may have
//! missed changes that no log holds any more: its stream starts with a `reset` event
//! (`event: reset`, the `id` of the log's end, `data` a `StreamReset`) and goes on from the
//! present, so the client reads the state again (availability, its holds) and follows the
//! changes from there. A resume thus replays at most the retention's worth of changes.
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
use serde_json::json;
use slot_booking::{BookingError, Event, EventKind, EventPosition, Timestamp};
use tokio::sync::{broadcast, mpsc, OwnedSemaphorePermit, Semaphore};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

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

/// A change as the stream writes it: the `data` of each event without a name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Change {
    /// Where the change sits in the log: the event's `id`, what `Last-Event-ID` resumes
    /// after.
    #[schema(schema_with = position_schema)]
    position: String,
    /// What happened (more kinds may come in later versions).
    #[schema(schema_with = kind_schema)]
    kind: &'static str,
    /// The slot it happened to (a hold's slot for a hold's change).
    #[schema(format = Int64, minimum = 1)]
    slot_id: i64,
    /// A hold's change: the hold's units. A slot's change: the slot's capacity after it.
    #[schema(minimum = 0)]
    quantity: i32,
    /// A change of a line of a booking of several lines: `first` for the booking's first line,
    /// `next` for its others (each change of a booking comes as one change per line). Absent
    /// for a hold placed alone and for a slot's change.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = booking_line_schema)]
    booking_line: Option<&'static str>,
    /// When it happened.
    #[serde(with = "slot_booking::model::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
}

/// The `data` of a `reset` event, the first event of a stream whose `Last-Event-ID` is
/// before the oldest change the log keeps or past its end: changes after that id may be gone
/// for good, so the client should read the state again; the stream goes on from `position`,
/// the log's end, which is also the event's `id`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct StreamReset {
    /// The log's end, where the stream goes on from: the event's `id`.
    #[schema(schema_with = position_schema)]
    position: String,
    /// Always `reset`.
    #[schema(schema_with = reset_kind_schema)]
    kind: &'static str,
}

/// An event position: `<epoch>_<sequence>`.
fn position_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(POSITION_PATTERN))
        .into()
}

/// What an event position looks like.
const POSITION_PATTERN: &str = "^[0-9]+_[0-9]+$";

/// Every kind of change the log has.
fn kind_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(EventKind::ALL.map(EventKind::as_str)))
        .into()
}

/// `first` or `next`.
fn booking_line_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["first", "next"]))
        .into()
}

/// `reset`.
fn reset_kind_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["reset"]))
        .into()
}

/// The name of the event that starts a stream resuming from before what the log keeps.
const RESET: &str = "reset";

/// One event of the stream, the schema of the `text/event-stream` body: the body is a
/// sequence of such events (each its fields, one per line, and a blank line; comment lines
/// in between keep a quiet stream open), as OpenAPI 3.2's `itemSchema` would say. `data` is
/// JSON text whose schema is `contentSchema`. Never built: it only names and shapes the
/// schema.
pub(crate) struct ChangeEvent;

impl ChangeEvent {
    /// The `id` field: the event's position.
    fn id() -> Schema {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(POSITION_PATTERN))
            .description(Some(
                "The position: send it back as `Last-Event-ID` to resume after this event.",
            ))
            .into()
    }

    /// The `data` field: JSON text of the schema `content`.
    fn data(content: &str) -> Schema {
        let mut data = ObjectBuilder::new()
            .schema_type(Type::String)
            .content_media_type("application/json")
            .description(Some(format!("JSON text: a `{content}`.")))
            .build();
        let reference = format!("#/components/schemas/{content}");
        data.extensions = Some(Extensions::from_iter([(
            "contentSchema",
            json!({ "$ref": reference }),
        )]));
        data.into()
    }
}

impl PartialSchema for ChangeEvent {
    fn schema() -> RefOr<Schema> {
        let change = ObjectBuilder::new()
            .title(Some("change"))
            .description(Some(
                "A committed change: an event without a name (`message`).",
            ))
            .property("id", ChangeEvent::id())
            .required("id")
            .property("data", ChangeEvent::data("Change"))
            .required("data");
        let reset = ObjectBuilder::new()
            .title(Some("reset"))
            .description(Some(
                "First, and only then, on a stream whose `Last-Event-ID` is before the oldest \
                 change the log keeps (`HISTORY_RETENTION_SECONDS`) or past its end: changes \
                 after it may be gone, so read the state again; the stream goes on from the \
                 present.",
            ))
            .property(
                "event",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some([RESET])),
            )
            .required("event")
            .property("id", ChangeEvent::id())
            .required("id")
            .property("data", ChangeEvent::data("StreamReset"))
            .required("data");
        OneOfBuilder::new()
            .description(Some(
                "One event of the stream (the body is a sequence of them, as OpenAPI 3.2's \
                 `itemSchema` would say): its fields `event` (absent for a change), `id` and \
                 `data`, JSON text whose schema is `contentSchema`.",
            ))
            .item(change)
            .item(reset)
            .into()
    }
}

impl ToSchema for ChangeEvent {
    fn name() -> std::borrow::Cow<'static, str> {
        "ChangeEvent".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Change::name().into_owned(), Change::schema()));
        schemas.push((StreamReset::name().into_owned(), StreamReset::schema()));
    }
}

impl Change {
    fn of(event: &Event) -> (EventPosition, Change) {
        let change = Change {
            position: event.position.to_string(),
            kind: event.kind.as_str(),
            slot_id: event.slot_id.get(),
            quantity: event.quantity,
            booking_line: event.booking_id.map(|booking| {
                if Some(booking) == event.hold_id {
                    "first"
                } else {
                    "next"
                }
            }),
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
                   `slot_removed`, …), `slot_id`, `quantity` and `at` (`Change`). Never a hold \
                   id or an owner. A comment line every 15 seconds keeps a quiet stream open; \
                   the stream ends when the server shuts down (reconnect with \
                   `Last-Event-ID`).\n\nResuming is bounded by the server's history \
                   retention (`HISTORY_RETENTION_SECONDS`, a week by default): changes older \
                   than that are deleted. A `Last-Event-ID` before the oldest change kept (a \
                   client away longer than that, or `0_0`), or past the end of the log (a \
                   database made anew), gets a `reset` event first (`event: reset`, `id` the \
                   log's end, `data` a `StreamReset`): changes after that id may be gone for \
                   good, so read the state again; the stream goes on from the present.",
    params(LastEventId),
    responses(
        (status = 200, description = "The stream of changes: a sequence of `ChangeEvent`s.", body = ChangeEvent, content_type = "text/event-stream"),
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
    let (out, written) = mpsc::channel(BUFFER);
    let from = match start(&engine, last_seen, end).await? {
        Start::At(from) => from,
        Start::Reset => {
            let reset = StreamReset {
                position: end.to_string(),
                kind: RESET,
            };
            let event = SseEvent::default()
                .event(RESET)
                .id(end.to_string())
                .json_data(&reset)
                .map_err(|_| Problem::internal("the stream's reset event cannot be written"))?;
            // The channel is new and empty: the reset goes first, before any change.
            out.try_send(event)
                .map_err(|_| Problem::internal("the stream's reset event cannot be queued"))?;
            end
        }
    };
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

/// Where a stream starts.
#[derive(Debug, PartialEq, Eq)]
enum Start {
    /// After this position.
    At(EventPosition),
    /// At the log's end, after a `reset` event.
    Reset,
}

/// Where the stream of a client that last saw `last_seen` starts, the log's end being `end`:
/// at the end without an id; after the id when the log still holds what came after it (the
/// id is at or after the oldest change kept); otherwise at the end, after a `reset`: an id
/// before the oldest change kept (changes after it may have been purged) or past the end (an
/// id of another log, a database made anew). With nothing kept, only an id at the end has
/// missed nothing.
async fn start(
    engine: &Engine,
    last_seen: Option<EventPosition>,
    end: EventPosition,
) -> Result<Start, BookingError> {
    let Some(seen) = last_seen else {
        return Ok(Start::At(end));
    };
    if seen > end {
        return Ok(Start::Reset);
    }
    let oldest = engine.read_events_after(EventPosition::START, 1).await?;
    let kept = match oldest.first() {
        Some(oldest) => seen >= oldest.position,
        None => seen == end,
    };
    Ok(if kept { Start::At(seen) } else { Start::Reset })
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
