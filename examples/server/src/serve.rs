//! Serving HTTP/1.1 connections within bounds a hostile or broken client cannot stretch:
//!
//! * a connection that has not sent a whole request head within the header timeout is closed,
//!   whether it is new or idle between requests;
//! * at most `max_connections` are served at once: at the limit the server stops accepting and
//!   new clients wait in the kernel's backlog (no `Too many open files` spin), and an accept
//!   error backs off instead of retrying at once;
//! * on shutdown the listener closes, requests in flight get the grace period to finish, and
//!   whatever is still open after it is closed.
//!
//! Body timeouts and the size limits on the URI, headers and body are the router's
//! ([`router_with_config`](crate::router_with_config)).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::Config;

/// The pause after a failed accept (out of file descriptors, say) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `shutdown` completes, then drains within the grace period.
/// Returns how many connections were still open when the grace period ran out.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: &Config,
    shutdown: impl Future<Output = ()>,
) -> usize {
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout);
    tokio::pin!(shutdown);

    loop {
        // A permit before accepting: at the limit, clients wait in the backlog.
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // never closed; stop serving if it were
            },
            () = &mut shutdown => break,
        };
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
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(permit);
        });
    }

    drop(listener);
    tracing::info!(
        grace_seconds = config.shutdown_grace.as_secs(),
        "shutting down: no new connections, letting requests in flight finish"
    );
    tokio::select! {
        () = graceful.shutdown() => 0,
        () = tokio::time::sleep(config.shutdown_grace) => {
            let open = config.max_connections - permits.available_permits();
            tracing::warn!(open, "grace period over; closing the connections still open");
            open
        }
    }
}
