//! What every request goes through before its route ([`front`]): the limits on its head and
//! body, and the one log line after it is answered.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::Request;
use axum::http::header::CONTENT_LENGTH;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use crate::Problem;

/// Largest request body accepted; larger ones get 413.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Longest request URI accepted (path and query); longer ones get 414.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Most bytes of header names and values accepted in one request; more get 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The head limits ([`limit_head`]), then the body ([`read_body`]), then the route; the log
/// line (`INFO`, `request`, with method, path, status and microseconds) is written for every
/// answer, refusals included, unless `log` is off
/// ([`Config::request_log`](crate::Config::request_log)).
///
/// One middleware for all three: each `from_fn` layer costs a boxed future and a clone of
/// the service behind it on every request.
pub(crate) async fn front(
    request: Request,
    next: Next,
    body_timeout: Duration,
    log: bool,
) -> Response {
    // A clone of the URI shares its bytes: the path is read from it for the log line.
    let logged = log.then(|| {
        (
            Instant::now(),
            request.method().clone(),
            request.uri().clone(),
        )
    });
    let response = match limit_head(&request) {
        Some(refusal) => refusal.into_response(),
        None => read_body(request, next, body_timeout).await,
    };
    if let Some((started, method, uri)) = logged {
        tracing::info!(
            %method,
            path = %uri.path(),
            status = response.status().as_u16(),
            micros = started.elapsed().as_micros() as u64,
            "request"
        );
    }
    response
}

/// Refuses a URI over [`MAX_URI_BYTES`] (414) and headers over [`MAX_HEADER_BYTES`] (431)
/// with a problem body; hyper's own, larger limits answer without one.
fn limit_head(request: &Request) -> Option<Problem> {
    let uri_bytes = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if uri_bytes > MAX_URI_BYTES {
        return Some(Problem::uri_too_long());
    }
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    (header_bytes > MAX_HEADER_BYTES).then(Problem::headers_too_large)
}

/// Reads the body before routing, within `timeout` and [`MAX_BODY_BYTES`]: too large is 413
/// (announced by `Content-Length` or found while streaming), too slow 408, malformed (a
/// broken chunked encoding) 400. The small accepted body is passed on as is, for the routes
/// that take one. A request that has no body (most: no `Content-Length`, or 0, and not
/// chunked) goes on at once, without a timer.
async fn read_body(request: Request, next: Next, timeout: Duration) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let announced = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Problem::payload_too_large().into_response();
    }
    let (parts, body) = request.into_parts();
    let limited = http_body_util::Limited::new(body, MAX_BODY_BYTES);
    let bytes: Bytes = match tokio::time::timeout(timeout, limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => {
            return Problem::payload_too_large().into_response()
        }
        Ok(Err(error)) => {
            return Problem::invalid_body(format!("the request body could not be read: {error}"))
                .into_response()
        }
        Err(_) => return Problem::body_timeout(timeout).into_response(),
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
