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

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::{Extension, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::config::Config;

mod connections;
mod tracked;

use connections::Connections;
use tracked::{Tracked, TrackedService};

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
    // Responses that would never end by themselves (the change streams) end on this.
    let app = app.layer(Extension(Shutdown(stage.subscribe())));
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

/// The server's shutdown as a request sees it: [`serve`] adds it to every request, so that a
/// response that would never end by itself (a change stream) ends when draining starts.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown(watch::Receiver<Stage>);

impl Shutdown {
    /// Completes once the server has started shutting down (or has stopped).
    pub(crate) async fn started(&mut self) {
        let _ = self.0.wait_for(|now| *now >= Stage::Draining).await;
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
