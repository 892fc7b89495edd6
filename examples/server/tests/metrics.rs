//! `GET /metrics` (`oneshot`): Prometheus text with the engine's counters, a hold placed
//! through the API among them, on each backend.

#[macro_use]
mod common;

use std::path::PathBuf;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use slot_booking_server::Config;
use tower::ServiceExt;

use common::{new_slot, Oneshot};

async fn open(url: &str, dir: Option<PathBuf>) -> Oneshot {
    Oneshot::open(url, dir, &Config::default()).await
}

on_every_backend!(open: open, worker_threads: 2;
    metrics_count_a_hold_placed_through_the_api,
);

/// `GET /metrics`: its status, content type and body.
async fn scrape(app: &Oneshot) -> (u16, String, String) {
    let request = Request::get("/metrics").body(Body::empty()).unwrap();
    let response = app.router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

/// The value of the sample `series` (name and labels, as Prometheus writes them), 0 if absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

const HOLDS_PLACED: &str = r#"slot_booking_operations_total{operation="hold",outcome="ok"}"#;
const HOLDS_SOLD_OUT: &str =
    r#"slot_booking_operations_total{operation="hold",outcome="sold_out"}"#;

async fn metrics_count_a_hold_placed_through_the_api(app: Oneshot) {
    // The recorder is the process's: other tests count too, so only increases are asserted.
    let (_, _, before) = scrape(&app).await;
    let slot = new_slot(&app.engine, 1, chrono::Duration::hours(2)).await;

    let placed = app.hold(slot, "metrics-1", None, "").await;
    placed.hold(201);
    app.hold(slot, "metrics-2", None, "")
        .await
        .problem(409, "sold_out");

    let (status, content_type, after) = scrape(&app).await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert!(
        after.contains("# TYPE slot_booking_operations_total counter"),
        "{after}"
    );
    assert!(
        sample(&after, HOLDS_PLACED) >= sample(&before, HOLDS_PLACED) + 1.0,
        "{after}"
    );
    assert!(
        sample(&after, HOLDS_SOLD_OUT) >= sample(&before, HOLDS_SOLD_OUT) + 1.0,
        "{after}"
    );
    // The hold's store call, in the latency histogram's buckets.
    assert!(
        sample(
            &after,
            r#"slot_booking_store_seconds_count{operation="hold"}"#
        ) >= 2.0,
        "{after}"
    );
    assert!(
        after.contains(r#"slot_booking_store_seconds_bucket{operation="hold",le="+Inf"}"#),
        "{after}"
    );

    // Not a JSON route: only GET, and other methods are refused as anywhere else.
    let post = common::send(&app.router, Request::post("/metrics"), "").await;
    post.problem(405, "method_not_allowed");
}
