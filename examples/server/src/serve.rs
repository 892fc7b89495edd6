//! Serving HTTP/1.1 connections within bounds a hostile or broken client cannot stretch:
//!
//! * a connection that has not sent a whole request head within the header timeout is closed,
//!   whether it is new or idle between requests;
//! * at most `max_connections` are served at once. At the limit the server still accepts the
//!   next client and makes room for it by closing the connection that has been idle between
//!   requests the longest (a keep-alive connection whose last response has been written and
//!   that has sent nothing since). A connection in the middle of a request or a response is
//!   never closed for a newcomer, nor is one that has not finished its first request (a
//!   stalled client is cut off by the header timeout, as before): when every connection is
//!   busy, the newcomer waits, and further clients wait in the kernel's backlog (no
//!   `Too many open files` spin). An accept error backs off instead of retrying at once;
//! * on shutdown the listener closes, idle connections are closed, requests in flight get the
//!   grace period to finish, and whatever is still open after it is closed.
//!
//! Body timeouts and the size limits on the URI, headers and body are the router's
//! ([`router_with_config`](crate::router_with_config)).
//!
//! One edge of "idle" is left to HTTP's own rules: a pipelining client whose next request
//! arrived in the same read as the end of the previous one is not known to have started it.
//! Such a connection can be closed after its response, and the client retries the request it
//! had pipelined, as RFC 9112 §9.3.2 asks pipelining clients to do.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::config::Config;

/// The pause after a failed accept (out of file descriptors, say) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Connections the kernel queues for `accept` (capped by the system, `net.core.somaxconn` on
/// Linux): room for a crowd of clients arriving at once, so that a newcomer's connection is
/// queued rather than dropped and retried a second later.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `address` (`ip:port`) with a backlog of [`LISTEN_BACKLOG`] (tokio's `bind`
/// uses 1024).
pub fn listen(address: &str) -> io::Result<TcpListener> {
    let address: std::net::SocketAddr = address.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an address like 127.0.0.1:3000",
        )
    })?;
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As tokio's `bind` does: a restarted server can listen at once on its port.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `app` on `listener` until `shutdown` completes, then drains within the grace period.
/// Returns how many connections were still open when the grace period ran out.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: &Config,
    shutdown: impl Future<Output = ()>,
) -> usize {
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let connections = Arc::new(Connections::default());
    let (stage, _) = watch::channel(Stage::Serving);
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout);
    tokio::pin!(shutdown);

    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed; backing off");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // At the limit, this waits for room (closing an idle connection if there is one),
        // without accepting anyone else meanwhile: later clients wait in the backlog.
        let permit = tokio::select! {
            permit = connections.room_for_one(&permits) => permit,
            () = &mut shutdown => break,
        };
        let activity = connections.register();
        let io = TokioIo::new(Tracked {
            stream,
            activity: Arc::clone(&activity),
            connections: Arc::clone(&connections),
        });
        let service = TrackedService {
            app: TowerToHyperService::new(app.clone()),
            activity: Arc::clone(&activity),
        };
        let connection = http.serve_connection(io, service);
        let mut stage = stage.subscribe();
        let connections = Arc::clone(&connections);
        tokio::spawn(async move {
            tokio::pin!(connection);
            let mut closing = false;
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(error) = result {
                            tracing::debug!(%error, "connection ended with an error");
                        }
                        break;
                    }
                    // Idle and chosen to make room, or the server is shutting down: hyper
                    // closes an idle connection at once and lets a request in flight finish.
                    () = activity.close.notified(), if !closing => {
                        closing = true;
                        connection.as_mut().graceful_shutdown();
                    }
                    // Draining: close like an idle connection; closing: drop it now.
                    Ok(now) = next_stage(&mut stage, closing) => {
                        if now == Stage::Closing {
                            break;
                        }
                        closing = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
            connections.deregister(activity.id);
            drop(permit);
        });
    }

    drop(listener);
    tracing::info!(
        grace_seconds = config.shutdown_grace.as_secs(),
        "shutting down: no new connections, letting requests in flight finish"
    );
    stage.send_replace(Stage::Draining);
    tokio::select! {
        () = connections.all_closed() => 0,
        () = tokio::time::sleep(config.shutdown_grace) => {
            let open = connections.open();
            tracing::warn!(open, "grace period over; closing the connections still open");
            stage.send_replace(Stage::Closing);
            open
        }
    }
}

/// Where the server is in its life, as every connection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Serving,
    /// Shutting down: idle connections close, requests in flight finish.
    Draining,
    /// The grace period is over: every connection still open is dropped.
    Closing,
}

/// The stage a connection has yet to act on: draining (unless it is closing already), then
/// closing. An error only once `serve` has returned.
async fn next_stage(
    stage: &mut watch::Receiver<Stage>,
    closing: bool,
) -> Result<Stage, watch::error::RecvError> {
    let wanted = if closing {
        Stage::Closing
    } else {
        Stage::Draining
    };
    stage.wait_for(|now| *now >= wanted).await.map(|now| *now)
}

/// Every connection being served, for finding the longest-idle one at the limit.
#[derive(Default)]
struct Connections {
    live: Mutex<HashMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
    /// Ticks at every connection going idle: a smaller `idle_since` has been idle longer.
    idle_clock: AtomicU64,
    /// Whether a newcomer is waiting for room (connections going idle then say so).
    waiting: AtomicBool,
    went_idle: Notify,
    /// Signalled whenever a connection ends.
    ended: Notify,
}

impl Connections {
    fn live(&self) -> MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        // Nothing panics while holding the lock; a poisoned map is still a valid map.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self) -> Arc<Activity> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity::new(id));
        self.live().insert(id, Arc::clone(&activity));
        activity
    }

    fn deregister(&self, id: u64) {
        self.live().remove(&id);
        self.ended.notify_waiters();
    }

    fn open(&self) -> usize {
        self.live().len()
    }

    async fn all_closed(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before looking, so an end between the look and the wait is not lost.
            ended.as_mut().enable();
            if self.open() == 0 {
                return;
            }
            ended.await;
        }
    }

    /// A permit to serve one more connection: at once below the limit; at the limit, after
    /// asking the longest-idle connection to close (when there is one, or as soon as one goes
    /// idle) and waiting for a connection to end.
    async fn room_for_one(&self, permits: &Arc<Semaphore>) -> OwnedSemaphorePermit {
        if let Ok(permit) = Arc::clone(permits).try_acquire_owned() {
            return permit;
        }
        self.waiting.store(true, Ordering::SeqCst);
        let mut asked = false;
        let permit = loop {
            let went_idle = self.went_idle.notified();
            asked = asked || self.close_longest_idle();
            tokio::select! {
                permit = Arc::clone(permits).acquire_owned() => match permit {
                    Ok(permit) => break permit,
                    // The semaphore is never closed.
                    Err(_) => std::future::pending().await,
                },
                () = went_idle => {}
            }
        };
        self.waiting.store(false, Ordering::SeqCst);
        permit
    }

    /// Asks the connection idle the longest to close; false when none is idle.
    fn close_longest_idle(&self) -> bool {
        let live = self.live();
        loop {
            let Some(victim) = live
                .values()
                .filter(|activity| activity.phase.load(Ordering::SeqCst) == IDLE)
                .min_by_key(|activity| activity.idle_since.load(Ordering::SeqCst))
            else {
                return false;
            };
            // It may have started a request since the look: then look again.
            if victim
                .phase
                .compare_exchange(IDLE, CLOSING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                tracing::debug!(
                    connection = victim.id,
                    "at the connection limit: closing the longest-idle keep-alive connection"
                );
                victim.close.notify_one();
                return true;
            }
        }
    }

    /// Called by a connection that just went idle.
    fn on_idle(&self) {
        if self.waiting.load(Ordering::SeqCst) {
            self.went_idle.notify_one();
        }
    }
}

/// In a request or response, or not yet through its first one.
const BUSY: u8 = 0;
/// The last response written, nothing received since.
const IDLE: u8 = 1;
/// Chosen to make room: closing.
const CLOSING: u8 = 2;

/// One connection's progress, kept by its socket ([`Tracked`]), its service and bodies
/// ([`TrackedService`]), read by the acceptor at the limit. One request at a time: hyper
/// serves HTTP/1.1 requests in order.
struct Activity {
    id: u64,
    phase: AtomicU8,
    idle_since: AtomicU64,
    /// The current request has been received whole (head and body).
    request_received: AtomicBool,
    /// Bytes have arrived since then: the next request has begun.
    read_since_request: AtomicBool,
    /// The current response's body has ended (written once the socket is flushed).
    response_ended: AtomicBool,
    close: Notify,
}

impl Activity {
    fn new(id: u64) -> Activity {
        Activity {
            id,
            phase: AtomicU8::new(BUSY),
            idle_since: AtomicU64::new(0),
            request_received: AtomicBool::new(false),
            read_since_request: AtomicBool::new(false),
            response_ended: AtomicBool::new(false),
            close: Notify::new(),
        }
    }

    /// The socket gave bytes: a request (or its body) is arriving.
    fn on_bytes(&self) {
        if self.request_received.load(Ordering::Relaxed) {
            self.read_since_request.store(true, Ordering::Relaxed);
        }
        // Idle no more; a connection already chosen to close stays so (hyper lets a request
        // it has read the head of finish first).
        let _ = self
            .phase
            .compare_exchange(IDLE, BUSY, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// hyper has a request head and calls the service.
    fn on_request(&self, body_ended: bool) {
        self.read_since_request.store(false, Ordering::Relaxed);
        self.response_ended.store(false, Ordering::Relaxed);
        self.request_received.store(body_ended, Ordering::Relaxed);
    }

    fn on_request_body_end(&self) {
        self.request_received.store(true, Ordering::Relaxed);
    }

    fn on_response_end(&self) {
        self.response_ended.store(true, Ordering::Relaxed);
    }

    /// Everything hyper had to write has been written: idle if the response ended, the
    /// request was received whole and nothing has arrived since.
    fn on_flushed(&self, connections: &Connections) {
        if !self.response_ended.load(Ordering::Relaxed)
            || !self.request_received.load(Ordering::Relaxed)
            || self.read_since_request.load(Ordering::Relaxed)
        {
            return;
        }
        let tick = connections.idle_clock.fetch_add(1, Ordering::Relaxed);
        self.idle_since.store(tick, Ordering::SeqCst);
        if self
            .phase
            .compare_exchange(BUSY, IDLE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            connections.on_idle();
        }
    }
}

/// A connection's socket, telling its [`Activity`] when bytes arrive and when everything
/// written has been flushed.
struct Tracked {
    stream: TcpStream,
    activity: Arc<Activity>,
    connections: Arc<Connections>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_bytes();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    /// hyper flushes the socket once its own buffer has been written out whole.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_flush(cx);
        if matches!(polled, Poll::Ready(Ok(()))) {
            self.activity.on_flushed(&self.connections);
        }
        polled
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The router, telling the connection's [`Activity`] when a request arrives, when its body
/// has been received and when the response's body ends.
struct TrackedService {
    app: TowerToHyperService<Router>,
    activity: Arc<Activity>,
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<Signalling<Body>>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for TrackedService {
    type Response = Response<Signalling<Body>>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.activity.on_request(request.body().is_end_stream());
        let activity = Arc::clone(&self.activity);
        let request = request.map(|body| Signalling {
            body,
            activity: Arc::clone(&activity),
            ended: Activity::on_request_body_end,
        });
        let response = self.app.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Signalling {
                body,
                activity,
                ended: Activity::on_response_end,
            }))
        })
    }
}

/// A body that tells its connection's [`Activity`] when it has ended (`ended`): a request's
/// when it has been received whole, a response's when hyper has it all.
struct Signalling<B> {
    body: B,
    activity: Arc<Activity>,
    ended: fn(&Activity),
}

impl<B: HttpBody + Unpin> HttpBody for Signalling<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.body.is_end_stream() {
            (self.ended)(&self.activity);
        }
        polled
    }

    /// hyper asks before polling (an empty body is never polled) and after each frame.
    fn is_end_stream(&self) -> bool {
        let ended = self.body.is_end_stream();
        if ended {
            (self.ended)(&self.activity);
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
