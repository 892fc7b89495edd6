//! End-to-end: the router on a real port, driven by an HTTP client, over SQLite, PostgreSQL and
//! MariaDB/MySQL.
//! Every test runs once per backend (modules `sqlite`, `postgres` and `mysql`).

#[macro_use]
mod common;

use std::collections::HashSet;

use chrono::Duration;
use common::{assert_fields, read, TestServer, HOLD_FIELDS};
use reqwest::Method;
use slot_booking::HoldId;

on_every_backend!(
    open: common::TestServer::start, worker_threads: 4;
    availability_lists_slots_with_cache_control,
    hold_confirm_cancel_walkthrough,
    replay_is_201_with_idempotent_replayed,
    quoted_and_bare_keys_are_the_same_key,
    hold_errors_follow_the_outcome_table,
    confirm_and_cancel_errors_follow_the_outcome_table,
    malformed_requests_get_4xx_problems_and_change_nothing,
    concurrent_holds_over_http_take_exactly_capacity,
    concurrent_holds_with_one_key_make_one_hold,
    cancel_shows_in_availability_at_once,
);

async fn availability_lists_slots_with_cache_control(server: TestServer) {
    let later = server.slot(2, Duration::hours(2)).await;
    let sooner = server.slot(5, Duration::hours(1)).await;
    let response = server
        .http
        .get(server.url("/slots/availability"))
        .send()
        .await
        .unwrap();
    // Seconds of freshness left, rounded down: 10 for a listing loaded a moment ago.
    let max_age = response.headers()["cache-control"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        max_age == "max-age=10" || max_age == "max-age=9",
        "{max_age}"
    );
    assert_eq!(response.headers()["content-type"], "application/json");
    let (status, code, body) = read(response).await;
    assert_eq!((status, code), (200, None));
    let slots = body["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[0]["slot_id"], sooner.0);
    assert_eq!(slots[1]["slot_id"], later.0);
    assert_eq!(slots[0]["starts_at"], "2030-06-01T09:00:00.000000+00:00");
    assert_eq!(slots[0]["ends_at"], "2030-06-01T10:00:00.000000+00:00");
    assert_eq!(
        (
            slots[0]["capacity"].as_i64(),
            slots[0]["remaining"].as_i64()
        ),
        (Some(5), Some(5))
    );

    let narrowed = server
        .http
        .get(server.url("/slots/availability?from=2030-06-01T09:30:00Z&to=2030-06-01T12:00:00Z"))
        .send()
        .await
        .unwrap();
    let (_, _, body) = read(narrowed).await;
    let ids: Vec<_> = body["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["slot_id"].clone())
        .collect();
    assert_eq!(ids, [later.0]);
}

async fn hold_confirm_cancel_walkthrough(server: TestServer) {
    let slot = server.slot(3, Duration::hours(1)).await;
    let response = server.hold(slot, "walk-1").await;
    assert!(response.headers().get("idempotent-replayed").is_none());
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let (status, _, hold) = read(response).await;
    assert_eq!(status, 201);
    assert_fields(&hold, &HOLD_FIELDS);
    assert_eq!(location, format!("/holds/{}", hold["hold_id"]));
    assert_eq!(hold["status"], "held");
    assert_eq!(hold["expires_at"], "2030-06-01T08:05:00.000000+00:00");
    assert_eq!(hold["confirmed_at"], serde_json::Value::Null);
    assert_eq!(server.remaining(slot).await, 2);

    let (status, _, fetched) =
        read(server.http.get(server.url(&location)).send().await.unwrap()).await;
    assert_eq!((status, &fetched), (200, &hold));

    server.clock.advance(Duration::seconds(30));
    let confirm = server
        .http
        .post(server.url(&format!("{location}/confirm")))
        .send()
        .await
        .unwrap();
    let (status, _, confirmed) = read(confirm).await;
    assert_eq!(status, 200);
    assert_eq!(confirmed["status"], "confirmed");
    assert_eq!(
        confirmed["confirmed_at"],
        "2030-06-01T08:00:30.000000+00:00"
    );

    let cancel = server
        .http
        .delete(server.url(&location))
        .send()
        .await
        .unwrap();
    let (status, _, cancelled) = read(cancel).await;
    assert_eq!(status, 200);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(
        cancelled["cancelled_at"],
        "2030-06-01T08:00:30.000000+00:00"
    );
    assert_eq!(server.remaining(slot).await, 3);

    // Both repeats are idempotent.
    let again = server
        .http
        .delete(server.url(&location))
        .send()
        .await
        .unwrap();
    let (status, _, body) = read(again).await;
    assert_eq!((status, &body), (200, &cancelled));
    assert_eq!(server.remaining(slot).await, 3);
}

async fn replay_is_201_with_idempotent_replayed(server: TestServer) {
    let slot = server.slot(1, Duration::hours(1)).await;
    let first = server.hold(slot, "replay-me").await;
    let location = first.headers()["location"].clone();
    let (_, _, hold) = read(first).await;
    let second = server.hold(slot, "replay-me").await;
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    assert_eq!(second.headers()["location"], location);
    let (status, _, replayed) = read(second).await;
    assert_eq!((status, &replayed), (201, &hold));
    assert_eq!(
        server.remaining(slot).await,
        0,
        "one unit, even though the slot is now full"
    );
}

async fn quoted_and_bare_keys_are_the_same_key(server: TestServer) {
    let slot = server.slot(4, Duration::hours(1)).await;
    let (_, _, bare) = read(server.hold(slot, "order-42").await).await;
    let quoted = server.hold(slot, "\"order-42\"").await;
    assert_eq!(quoted.headers()["idempotent-replayed"], "true");
    let (_, _, quoted) = read(quoted).await;
    assert_eq!(bare["hold_id"], quoted["hold_id"]);
    let escaped = server.hold(slot, r#""a\"b""#).await;
    assert_eq!(escaped.status(), 201);
    let bare_escaped = server.hold(slot, r#"a"b"#).await;
    assert_eq!(bare_escaped.headers()["idempotent-replayed"], "true");
}

async fn hold_errors_follow_the_outcome_table(server: TestServer) {
    let slot = server.slot(1, Duration::hours(1)).await;
    let other = server.slot(1, Duration::hours(2)).await;
    read(server.hold(slot, "taken").await).await;

    let cases = [
        (
            server.hold(other, "taken").await,
            422,
            "idempotency_key_reused",
        ),
        (server.hold(slot, "second").await, 409, "sold_out"),
        (
            server.hold(slot_booking::SlotId(other.0 + 100), "x").await,
            404,
            "slot_not_found",
        ),
        (
            server.hold(slot, "bad key").await,
            400,
            "invalid_idempotency_key",
        ),
    ];
    for (response, status, code) in cases {
        let (got_status, got_code, body) = read(response).await;
        assert_eq!(
            (got_status, got_code.as_deref()),
            (status, Some(code)),
            "{body}"
        );
    }
    let missing = server
        .http
        .post(server.url(&format!("/slots/{slot}/hold")))
        .send()
        .await
        .unwrap();
    let (status, code, _) = read(missing).await;
    assert_eq!(
        (status, code.as_deref()),
        (400, Some("idempotency_key_required"))
    );

    server.clock.advance(Duration::hours(1));
    let (status, code, _) = read(server.hold(other, "late").await).await;
    assert_eq!((status, code.as_deref()), (201, None), "other starts later");
    let (status, code, _) = read(server.hold(slot, "closed").await).await;
    assert_eq!((status, code.as_deref()), (409, Some("slot_closed")));
    assert_eq!(server.remaining(slot).await, 0);
    assert_eq!(server.remaining(other).await, 0);
}

async fn confirm_and_cancel_errors_follow_the_outcome_table(server: TestServer) {
    let slot = server.slot(3, Duration::hours(1)).await;
    let id = |body: serde_json::Value| body["hold_id"].as_i64().unwrap();
    let cancelled = id(read(server.hold(slot, "c").await).await.2);
    let expiring = id(read(server.hold(slot, "e").await).await.2);
    server
        .http
        .delete(server.url(&format!("/holds/{cancelled}")))
        .send()
        .await
        .unwrap();
    server.clock.advance(Duration::minutes(5));

    let expect = |method: Method, path: String, status: u16, code: &'static str| {
        let request = server.http.request(method, server.url(&path));
        async move {
            let (got_status, got_code, body) = read(request.send().await.unwrap()).await;
            assert_eq!(
                (got_status, got_code.as_deref()),
                (status, Some(code)),
                "{path}: {body}"
            );
        }
    };
    expect(
        Method::POST,
        format!("/holds/{cancelled}/confirm"),
        409,
        "hold_cancelled",
    )
    .await;
    expect(
        Method::POST,
        format!("/holds/{expiring}/confirm"),
        409,
        "hold_expired",
    )
    .await;
    expect(
        Method::DELETE,
        format!("/holds/{expiring}"),
        409,
        "hold_expired",
    )
    .await;
    expect(
        Method::POST,
        "/holds/987654/confirm".into(),
        404,
        "hold_not_found",
    )
    .await;
    expect(
        Method::DELETE,
        "/holds/987654".into(),
        404,
        "hold_not_found",
    )
    .await;
    expect(Method::GET, "/holds/987654".into(), 404, "hold_not_found").await;
    let (status, _, body) = read(
        server
            .http
            .get(server.url(&format!("/holds/{expiring}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("expired")));
}

/// A fingerprint of everything a request could change, read from the store directly (the
/// availability listing is cached and would hide a change).
async fn fingerprint(
    server: &TestServer,
    slots: &[slot_booking::SlotId],
    holds: &[HoldId],
) -> String {
    let mut out = String::new();
    for &slot in slots {
        out += &format!("{:?};", server.store.get_slot(slot).await.unwrap());
    }
    for &hold in holds {
        let stored = server
            .store
            .get_hold(hold, &slot_booking::Scope::BackOffice, chrono::Utc::now())
            .await;
        out += &format!("{:?};", stored.unwrap().outcome);
    }
    out
}

/// (method, path, headers, body, expected status, expected problem code)
type Malformed<'a> = (
    &'a str,
    String,
    Vec<(&'a str, &'a [u8])>,
    Option<String>,
    u16,
    &'a str,
);

async fn malformed_requests_get_4xx_problems_and_change_nothing(server: TestServer) {
    let slot = server.slot(5, Duration::hours(1)).await;
    let (_, _, hold) = read(server.hold(slot, "existing").await).await;
    let hold_id = HoldId(hold["hold_id"].as_i64().unwrap());
    let before = fingerprint(&server, &[slot], &[hold_id]).await;

    let big = "x".repeat(17 * 1024);
    let long_key = "k".repeat(256);
    let s = slot.0;
    let h = hold_id.0;
    // (method, path, headers, body, status, code)
    let cases: Vec<Malformed> = vec![
        (
            "POST",
            "/slots/abc/hold".into(),
            vec![("idempotency-key", b"k1")],
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/slots/+5/hold".into(),
            vec![("idempotency-key", b"k2")],
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/slots/-1/hold".into(),
            vec![("idempotency-key", b"k3")],
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/slots/1a/hold".into(),
            vec![("idempotency-key", b"k4")],
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/slots/1.0/hold".into(),
            vec![("idempotency-key", b"k5")],
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/slots/%20/hold".into(),
            vec![("idempotency-key", b"k6")],
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/slots/99999999999999999999/hold".into(),
            vec![("idempotency-key", b"k7")],
            None,
            404,
            "slot_not_found",
        ),
        (
            "POST",
            "/holds/abc/confirm".into(),
            vec![],
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/holds/+5/confirm".into(),
            vec![],
            None,
            404,
            "not_found",
        ),
        ("DELETE", "/holds/1a".into(), vec![], None, 404, "not_found"),
        ("GET", "/holds/-1".into(), vec![], None, 404, "not_found"),
        (
            "GET",
            "/holds/99999999999999999999".into(),
            vec![],
            None,
            404,
            "hold_not_found",
        ),
        (
            "DELETE",
            "/holds/99999999999999999999".into(),
            vec![],
            None,
            404,
            "hold_not_found",
        ),
        ("GET", "/nope".into(), vec![], None, 404, "not_found"),
        ("GET", "/index.html".into(), vec![], None, 404, "not_found"),
        (
            "GET",
            format!("/holds/{h}/extra"),
            vec![],
            None,
            404,
            "not_found",
        ),
        (
            "PUT",
            format!("/holds/{h}"),
            vec![],
            None,
            405,
            "method_not_allowed",
        ),
        (
            "PATCH",
            format!("/holds/{h}/confirm"),
            vec![],
            None,
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            format!("/holds/{h}/confirm"),
            vec![],
            None,
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            format!("/slots/{s}/hold"),
            vec![],
            None,
            405,
            "method_not_allowed",
        ),
        (
            "DELETE",
            "/slots/availability".into(),
            vec![],
            None,
            405,
            "method_not_allowed",
        ),
        (
            "POST",
            "/slots/availability".into(),
            vec![],
            None,
            405,
            "method_not_allowed",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![],
            None,
            400,
            "idempotency_key_required",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", b"has space")],
            None,
            400,
            "invalid_idempotency_key",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", long_key.as_bytes())],
            None,
            400,
            "invalid_idempotency_key",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", b"")],
            None,
            400,
            "invalid_idempotency_key",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", b"\"unterminated")],
            None,
            400,
            "invalid_idempotency_key",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", b"\"bad\\nescape\"")],
            None,
            400,
            "invalid_idempotency_key",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", b"caf\xe9")],
            None,
            400,
            "invalid_idempotency_key",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", b"a"), ("idempotency-key", b"b")],
            None,
            400,
            "invalid_idempotency_key",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", b"\"\"")],
            None,
            400,
            "invalid_idempotency_key",
        ),
        (
            "GET",
            "/slots/availability?from=yesterday".into(),
            vec![],
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/slots/availability?to=2030-13-01T00:00:00Z".into(),
            vec![],
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/slots/availability?from=2030-06-02T00:00:00Z&to=2030-06-01T00:00:00Z".into(),
            vec![],
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/slots/availability?from=2030-06-01T00:00:00Z&from=2030-06-02T00:00:00Z".into(),
            vec![],
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/slots/availability?from=".into(),
            vec![],
            None,
            400,
            "invalid_query",
        ),
        (
            "POST",
            format!("/holds/{h}/confirm"),
            vec![],
            Some(big.clone()),
            413,
            "payload_too_large",
        ),
        (
            "POST",
            format!("/slots/{s}/hold"),
            vec![("idempotency-key", b"big-body")],
            Some(big.clone()),
            413,
            "payload_too_large",
        ),
        (
            "DELETE",
            format!("/holds/{h}"),
            vec![],
            Some(big),
            413,
            "payload_too_large",
        ),
    ];
    assert!(cases.len() >= 30);
    for (method, path, headers, body, status, code) in cases {
        let mut request = server.http.request(
            Method::from_bytes(method.as_bytes()).unwrap(),
            server.url(&path),
        );
        for (name, value) in headers {
            request = request.header(
                name,
                reqwest::header::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await.unwrap();
        if status == 405 {
            assert!(
                response.headers().contains_key("allow"),
                "{method} {path}: 405 without Allow"
            );
        }
        let (got_status, got_code, problem) = read(response).await;
        assert_eq!(
            (got_status, got_code.as_deref()),
            (status, Some(code)),
            "{method} {path}: {problem}"
        );
        assert_eq!(
            fingerprint(&server, &[slot], &[hold_id]).await,
            before,
            "{method} {path} changed state"
        );
    }
}

async fn concurrent_holds_over_http_take_exactly_capacity(server: TestServer) {
    let slot = server.slot(7, Duration::hours(1)).await;
    let server = std::sync::Arc::new(server);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let server = std::sync::Arc::clone(&server);
            tokio::spawn(async move {
                let (status, code, _) =
                    read(server.hold(slot, &format!("http-race-{i}")).await).await;
                (status, code)
            })
        })
        .collect();
    let (mut created, mut sold_out) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            (201, None) => created += 1,
            (409, Some(code)) if code == "sold_out" => sold_out += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((created, sold_out), (7, 193));
    assert_eq!(server.remaining(slot).await, 0);
}

async fn concurrent_holds_with_one_key_make_one_hold(server: TestServer) {
    let slot = server.slot(50, Duration::hours(1)).await;
    let server = std::sync::Arc::new(server);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let server = std::sync::Arc::clone(&server);
            tokio::spawn(async move {
                let response = server.hold(slot, "one-key-over-http").await;
                let replayed = response.headers().contains_key("idempotent-replayed");
                let (status, _, body) = read(response).await;
                (status, replayed, body["hold_id"].as_i64())
            })
        })
        .collect();
    let mut ids = HashSet::new();
    let mut fresh = 0;
    for task in tasks {
        let (status, replayed, id) = task.await.unwrap();
        assert_eq!(status, 201);
        fresh += usize::from(!replayed);
        ids.insert(id);
    }
    assert_eq!((fresh, ids.len()), (1, 1));
    assert_eq!(server.remaining(slot).await, 49);
}

async fn cancel_shows_in_availability_at_once(server: TestServer) {
    let slot = server.slot(1, Duration::hours(1)).await;
    let (_, _, hold) = read(server.hold(slot, "r3").await).await;
    let remaining = || async {
        let (_, _, body) = read(
            server
                .http
                .get(server.url("/slots/availability"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        body["slots"][0]["remaining"].as_i64()
    };
    assert_eq!(remaining().await, Some(0));
    let cancel = server
        .http
        .delete(server.url(&format!("/holds/{}", hold["hold_id"])))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 200);
    assert_eq!(
        remaining().await,
        Some(1),
        "within the 10 s cache period, the unit is back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_gives_503_with_retry_after() {
    let (url, dir) = common::sqlite_url().await;
    let sqlite = slot_booking_sqlite::SqliteStore::connect(&url)
        .await
        .unwrap();
    sqlite.migrate().await.unwrap();
    let pool = sqlite.pool().clone();
    let server = TestServer::with_store(std::sync::Arc::new(sqlite), dir).await;
    let slot = server.slot(1, Duration::hours(1)).await;
    pool.close().await;
    for response in [
        server.hold(slot, "k").await,
        server
            .http
            .get(server.url("/holds/1"))
            .send()
            .await
            .unwrap(),
        server
            .http
            .get(server.url("/slots/availability"))
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(response.headers()["retry-after"], "1");
        let (status, code, _) = read(response).await;
        assert_eq!((status, code.as_deref()), (503, Some("store_unavailable")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_schema_gives_500_without_retry_after() {
    let (url, dir) = common::sqlite_url().await;
    let sqlite = slot_booking_sqlite::SqliteStore::connect(&url)
        .await
        .unwrap();
    sqlite.migrate().await.unwrap();
    let pool = sqlite.pool().clone();
    let server = TestServer::with_store(std::sync::Arc::new(sqlite), dir).await;
    let slot = server.slot(1, Duration::hours(1)).await;
    // An operator's mistake: the table the store needs is gone. Retrying cannot help.
    sqlx::query("DROP TABLE slot_booking_holds")
        .execute(&pool)
        .await
        .unwrap();
    for response in [
        server.hold(slot, "k").await,
        server
            .http
            .get(server.url("/holds/1"))
            .send()
            .await
            .unwrap(),
    ] {
        assert!(response.headers().get("retry-after").is_none());
        let (status, code, _) = read(response).await;
        assert_eq!((status, code.as_deref()), (500, Some("store_failed")));
    }
}
