//! Router behaviour that needs no socket (`oneshot`): the `Location` of a new hold under a
//! path prefix, and problem bodies for URIs and headers over the limits.

use slot_booking_server::ServerStore;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::{Duration, Utc};
use http_body_util::BodyExt;
use slot_booking::{BookingEngine, MemoryStore, NewSlot};
use slot_booking_server::{router_with_config, Config, Engine, MAX_HEADER_BYTES, MAX_URI_BYTES};
use tower::ServiceExt;

fn engine() -> Engine {
    let store: Arc<dyn ServerStore> = Arc::new(MemoryStore::new());
    BookingEngine::new(store)
}

async fn problem_code(response: axum::response::Response) -> (StatusCode, String, String) {
    let status = response.status();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    (
        status,
        content_type,
        json["code"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn location_includes_the_path_prefix_and_resolves() {
    let engine = engine();
    let starts_at = Utc::now() + Duration::hours(1);
    let slot = engine
        .create_slot(NewSlot::new(starts_at, starts_at + Duration::hours(1), 1))
        .await
        .unwrap();
    let config = Config {
        path_prefix: "/api/v1".to_owned(),
        ..Config::default()
    };
    let app = router_with_config(engine, &config);
    let created = app
        .clone()
        .oneshot(
            Request::post(format!("/api/v1/slots/{}/hold", slot.slot_id))
                .header("idempotency-key", "k")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with("/api/v1/holds/"), "{location}");
    let fetched = app
        .oneshot(Request::get(&location).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(fetched.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_overlong_uri_is_414_problem_json() {
    let app = router_with_config(engine(), &Config::default());
    let uri = format!("/slots/availability?from={}", "a".repeat(MAX_URI_BYTES));
    let response = app
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(
        problem_code(response).await,
        (
            StatusCode::URI_TOO_LONG,
            "application/problem+json".to_owned(),
            "uri_too_long".to_owned()
        )
    );
}

#[tokio::test]
async fn overlarge_headers_are_431_problem_json() {
    let app = router_with_config(engine(), &Config::default());
    let mut request = Request::get("/slots/availability");
    for i in 0..4 {
        request = request.header(format!("x-filler-{i}"), "b".repeat(MAX_HEADER_BYTES / 4));
    }
    let response = app
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(
        problem_code(response).await,
        (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "application/problem+json".to_owned(),
            "headers_too_large".to_owned()
        )
    );
}

#[tokio::test]
async fn requests_within_the_limits_are_routed() {
    let app = router_with_config(engine(), &Config::default());
    let uri = format!("/slots/availability?x={}", "a".repeat(MAX_URI_BYTES - 40));
    let response = app
        .oneshot(
            Request::get(uri)
                .header("x-filler", "b".repeat(MAX_HEADER_BYTES - 100))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}
