//! `GET /slots/availability` in pages (`oneshot`, no socket): walking the `Link` headers or
//! the `next_after` cursors visits every slot once, in order; the page maximum holds for a
//! client that asks for no page; a seed client's body and headers are as before; bad
//! `limit`s and cursors are 400 problems that change nothing.

use slot_booking_server::ServerStore;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use chrono::{Duration, SecondsFormat, SubsecRound, Utc};
use http_body_util::BodyExt;
use serde_json::Value;
use slot_booking::{
    Availability, AvailabilityEntry, AvailabilityQuery, BookingEngine, MemoryStore, NewSlot,
    ResourceId,
};
use slot_booking_server::{router_with_config, Config, Engine};
use tower::ServiceExt;

/// An engine over `count` slots: starts in groups of three sharing a time (so the order
/// needs the id too), created out of start order, every other one of resource `room-a`.
async fn engine_with_slots(count: usize) -> Engine {
    let store: Arc<dyn ServerStore> = Arc::new(MemoryStore::new());
    let engine: Engine = BookingEngine::new(store);
    let base = Utc::now() + Duration::days(1);
    for i in (0..count).rev() {
        let starts_at = base + Duration::hours((i / 3) as i64);
        let mut slot = NewSlot::new(starts_at, starts_at + Duration::hours(1), 5);
        if i % 2 == 0 {
            slot = slot.resource(ResourceId::new("room-a").unwrap());
        }
        engine.create_slot(slot).await.unwrap();
    }
    engine
}

fn router(engine: &Engine, max: u32) -> axum::Router {
    let config = Config {
        availability_page_limit: max,
        ..Config::default()
    };
    router_with_config(engine.clone(), &config)
}

async fn get(app: &axum::Router, uri: &str) -> Response {
    app.clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap()
}

/// Status, the `Link` target (between `<` and `>`, checked to be `rel="next"`), the body.
async fn page(app: &axum::Router, uri: &str) -> (StatusCode, Option<String>, Value) {
    let response = get(app, uri).await;
    let status = response.status();
    let link = response.headers().get("link").map(|link| {
        let link = link.to_str().unwrap();
        let (target, rel) = link
            .strip_prefix('<')
            .and_then(|rest| rest.split_once('>'))
            .unwrap_or_else(|| panic!("not a link: {link}"));
        assert_eq!(rel, "; rel=\"next\"", "{link}");
        target.to_owned()
    });
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, link, serde_json::from_slice(&body).unwrap())
}

fn ids(body: &Value) -> Vec<i64> {
    body["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["slot_id"].as_i64().unwrap())
        .collect()
}

/// The engine's own listing for `query`, as ids, in its order.
async fn listing(engine: &Engine, query: AvailabilityQuery) -> Vec<i64> {
    let listing = engine.availability(query).await.unwrap();
    let entries: &[AvailabilityEntry] = listing.entries();
    entries.iter().map(|entry| entry.slot_id.get()).collect()
}

/// Follows `Link` from `first` to the end; every page within `limit`, its `next_after`
/// naming the next page exactly when there is one. Returns every id seen, in order.
async fn walk_links(app: &axum::Router, first: &str, limit: usize) -> Vec<i64> {
    let mut seen = Vec::new();
    let mut next = Some(first.to_owned());
    while let Some(uri) = next.take() {
        let (status, link, body) = page(app, &uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        let page_ids = ids(&body);
        assert!(page_ids.len() <= limit, "{uri}: {} entries", page_ids.len());
        assert!(!page_ids.is_empty(), "{uri}: an empty page");
        match (&link, &body["next_after"]) {
            (Some(link), Value::String(cursor)) => {
                assert!(
                    link.ends_with(&format!("after={cursor}")),
                    "{link} {cursor}"
                )
            }
            (None, Value::Null) => {}
            other => panic!("{uri}: link and next_after disagree: {other:?}"),
        }
        seen.extend(page_ids);
        next = link;
        assert!(seen.len() <= 1000, "the walk does not end");
    }
    seen
}

#[tokio::test]
async fn walking_pages_visits_every_slot_once_in_order() {
    let engine = engine_with_slots(23).await;
    let app = router(&engine, 1000);
    let all = listing(&engine, AvailabilityQuery::all()).await;
    assert_eq!(all.len(), 23);
    for limit in [1, 2, 3, 5, 22, 23, 24, 1000] {
        let walked = walk_links(&app, &format!("/slots/availability?limit={limit}"), limit).await;
        assert_eq!(walked, all, "limit {limit}");
    }

    // The link keeps the narrowing: a resource and a window of starts.
    let from = (Utc::now() + Duration::days(1) + Duration::minutes(90)).trunc_subsecs(0);
    let to = from + Duration::hours(4);
    let (from_text, to_text) = (
        from.to_rfc3339_opts(SecondsFormat::Secs, true),
        to.to_rfc3339_opts(SecondsFormat::Secs, true),
    );
    let query = AvailabilityQuery::all()
        .from(from)
        .to(to)
        .resource(ResourceId::new("room-a").unwrap());
    let expected = listing(&engine, query).await;
    assert!(expected.len() >= 3, "{expected:?}");
    let first = format!(
        "/slots/availability?resource=room-a&from={}&to={}&limit=2",
        urlencode(&from_text),
        urlencode(&to_text)
    );
    assert_eq!(walk_links(&app, &first, 2).await, expected);

    // The cursors of the bodies walk the same way as the links.
    let mut seen = Vec::new();
    let mut uri = "/slots/availability?limit=4".to_owned();
    loop {
        let (status, _, body) = page(&app, &uri).await;
        assert_eq!(status, StatusCode::OK);
        seen.extend(ids(&body));
        match &body["next_after"] {
            Value::String(cursor) => uri = format!("/slots/availability?limit=4&after={cursor}"),
            Value::Null => break,
            other => panic!("next_after is {other}"),
        }
    }
    assert_eq!(seen, all);
}

/// `+` and `:` as a query value needs them.
fn urlencode(text: &str) -> String {
    text.replace(':', "%3A").replace('+', "%2B")
}

#[tokio::test]
async fn the_page_maximum_holds_without_parameters() {
    let engine = engine_with_slots(5).await;
    let app = router(&engine, 3);
    let all = listing(&engine, AvailabilityQuery::all()).await;
    let (status, link, body) = page(&app, "/slots/availability").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&body), all[..3]);
    // A client that asked for no page gets the seed's body shape: no `next_after`.
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    let link = link.expect("a Link to the rest");
    assert!(link.starts_with("/slots/availability?after="), "{link}");
    let (status, next_link, rest) = page(&app, &link).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&rest), all[3..]);
    assert_eq!(next_link, None);
    assert_eq!(rest["next_after"], Value::Null, "{rest}");

    // Under a path prefix the link is under it too.
    let config = Config {
        availability_page_limit: 3,
        path_prefix: "/api".to_owned(),
        ..Config::default()
    };
    let app = router_with_config(engine.clone(), &config);
    let (_, link, _) = page(&app, "/api/slots/availability").await;
    let link = link.unwrap();
    assert!(link.starts_with("/api/slots/availability?after="), "{link}");
    let (status, _, rest) = page(&app, &link).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&rest), all[3..]);
}

/// The seed's body, as the server wrote it before pages.
#[derive(serde::Serialize)]
struct Seed<'a> {
    slots: &'a Availability,
}

#[tokio::test]
async fn a_seed_client_under_the_maximum_sees_the_same_bytes_and_headers() {
    let engine = engine_with_slots(5).await;
    for max in [5, 1000] {
        let app = router(&engine, max);
        let listing = engine.availability(AvailabilityQuery::all()).await.unwrap();
        let expected = serde_json::to_vec(&Seed { slots: &listing }).unwrap();
        // Twice: serialized, then kept.
        for _ in 0..2 {
            let response = get(&app, "/slots/availability").await;
            assert_eq!(response.status(), StatusCode::OK);
            let names: Vec<&str> = response.headers().keys().map(|k| k.as_str()).collect();
            assert_eq!(names, ["content-type", "cache-control", "content-length"]);
            assert_eq!(response.headers()["content-type"], "application/json");
            assert_eq!(
                response.headers()["content-length"],
                expected.len().to_string().as_str()
            );
            let max_age = response.headers()["cache-control"].to_str().unwrap();
            assert!(max_age.starts_with("max-age="), "{max_age}");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, expected, "max {max}");
        }
    }
}

#[tokio::test]
async fn bad_limits_and_cursors_are_400_and_change_nothing() {
    let engine = engine_with_slots(5).await;
    let app = router(&engine, 3);
    let before = listing(&engine, AvailabilityQuery::all()).await;
    for (query, code) in [
        ("limit=0", "invalid_page"),
        ("limit=4", "invalid_page"),
        ("limit=4294967296", "invalid_query"),
        ("limit=-1", "invalid_query"),
        ("limit=abc", "invalid_query"),
        ("limit=", "invalid_query"),
        ("after=", "invalid_query"),
        ("after=abc", "invalid_query"),
        ("after=1", "invalid_query"),
        ("after=_1", "invalid_query"),
        ("after=1_", "invalid_query"),
        ("after=1_x", "invalid_query"),
        ("limit=2&after=12.5_1", "invalid_query"),
    ] {
        let response = get(&app, &format!("/slots/availability?{query}")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{query}"
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], code, "{query}: {body}");
        assert_eq!(body["status"], 400, "{query}");
    }
    assert_eq!(listing(&engine, AvailabilityQuery::all()).await, before);
    // The largest limit is fine, and a cursor past the end is an empty last page.
    let (status, link, body) = page(&app, "/slots/availability?limit=3").await;
    assert_eq!(
        (status, ids(&body).len(), link.is_some()),
        (StatusCode::OK, 3, true)
    );
    let far = (Utc::now() + Duration::days(3650)).timestamp_micros();
    let (status, link, body) = page(&app, &format!("/slots/availability?after={far}_1")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((ids(&body).len(), link), (0, None));
    assert_eq!(body["next_after"], Value::Null);
}
