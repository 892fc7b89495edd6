//! The optional booking routes, driven through the router with `oneshot` over SQLite and
//! PostgreSQL: `POST /bookings` (several lines, all or nothing, every short line named),
//! `GET /bookings/{id}`, confirm, cancel and renew of the whole booking, replays by
//! `Idempotency-Key`, owners, bad bodies; the seed's hold routes on a line act on the whole
//! booking and keep their six-field body.

#[macro_use]
mod common;

use std::path::PathBuf;

use axum::http::{Method, Request};
use chrono::Duration;
use common::{owned, Oneshot as App, Reply};
use serde_json::{json, Value};
use slot_booking::SlotId;
use slot_booking_server::Config;

on_every_backend!(
    open: open, worker_threads: 2;
    a_booking_takes_every_line_or_none_and_names_every_short_line,
    a_booking_changes_whole_by_its_routes_and_by_a_lines_hold_routes,
    a_booking_replays_by_key_and_belongs_to_its_owner,
    bad_booking_bodies_are_refused_and_change_nothing,
);

async fn open(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    App::open(url, sqlite_dir, &Config::default()).await
}

/// A booking body's sorted fields.
const BOOKING_FIELDS: [&str; 8] = [
    "booking_id",
    "cancelled_at",
    "confirmed_at",
    "created_at",
    "expires_at",
    "lines",
    "owner",
    "status",
];

impl App {
    async fn slot(&self, capacity: i32) -> SlotId {
        common::new_slot(&self.engine, capacity, Duration::hours(1)).await
    }

    /// `POST /bookings` with `key`, the owner if any, and `lines` as (slot, quantity).
    async fn book(&self, key: &str, owner: Option<&str>, lines: &[(SlotId, i64)]) -> Reply {
        let lines: Vec<Value> = lines
            .iter()
            .map(|(slot, q)| json!({"slot_id": slot.0, "quantity": q}))
            .collect();
        self.book_body(key, owner, &json!({ "lines": lines }).to_string())
            .await
    }

    async fn book_body(&self, key: &str, owner: Option<&str>, body: &str) -> Reply {
        let request = Request::post("/bookings").header("idempotency-key", key);
        self.send(owned(request, owner), body).await
    }

    async fn call(&self, method: Method, path: &str, owner: Option<&str>) -> Reply {
        let request = Request::builder().method(method).uri(path);
        self.send(owned(request, owner), "").await
    }

    /// Each slot's stored remaining.
    async fn left(&self, slots: &[SlotId]) -> Vec<i32> {
        let mut left = Vec::new();
        for slot in slots {
            let stored = self.store.get_slot(*slot).await.unwrap().unwrap();
            left.push(stored.stored_remaining);
        }
        left
    }
}

/// Asserts a booking body with every field, and returns it.
fn booking(reply: &Reply, status: u16) -> &Value {
    let body = reply.ok(status);
    common::assert_fields(body, &BOOKING_FIELDS);
    body
}

async fn a_booking_takes_every_line_or_none_and_names_every_short_line(app: App) {
    let (a, b, c) = (app.slot(3).await, app.slot(1).await, app.slot(2).await);
    let placed = app.book("first", None, &[(c, 1), (a, 2)]).await;
    let body = booking(&placed, 201);
    let id = body["booking_id"].as_i64().unwrap();
    assert_eq!(
        placed.headers["location"],
        format!("/bookings/{id}").as_str()
    );
    assert_eq!(body["status"], "held");
    let lines = body["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (&lines[0]["slot_id"], &lines[0]["quantity"]),
        (&json!(a.0), &json!(2))
    );
    assert_eq!(
        lines[0]["hold_id"], id,
        "the booking's id is its first line's"
    );
    assert_eq!(app.left(&[a, b, c]).await, vec![1, 1, 1]);

    app.book("taken", None, &[(b, 1)]).await.ok(201);
    let refused = app.book("second", None, &[(a, 2), (b, 1), (c, 3)]).await;
    refused.problem(409, "lines_unavailable");
    assert_eq!(
        refused.body["lines"],
        json!([
            {"slot_id": a.0, "quantity": 2, "problem": {"code": "sold_out", "free": 1}},
            {"slot_id": b.0, "quantity": 1, "problem": {"code": "sold_out", "free": 0}},
            {"slot_id": c.0, "quantity": 3,
             "problem": {"code": "quantity_exceeds_capacity", "capacity": 2}},
        ])
    );
    assert_eq!(app.left(&[a, b, c]).await, vec![1, 0, 1], "nothing taken");
    // A booking of one line is a hold: the hold's own refusals, each one the operation's
    // document names (the contract checks every answer's code against it).
    app.book("one", None, &[(b, 1)])
        .await
        .problem(409, "sold_out");
    app.book("unknown", None, &[(SlotId(b.0 + 1000), 1)])
        .await
        .problem(404, "slot_not_found");
    app.book("too-many", None, &[(c, 3)])
        .await
        .problem(422, "quantity_exceeds_capacity");
    app.engine.close_sales(c).await.unwrap();
    app.book("closed", None, &[(c, 1)])
        .await
        .problem(409, "slot_closed");
}

async fn a_booking_changes_whole_by_its_routes_and_by_a_lines_hold_routes(app: App) {
    let (a, b) = (app.slot(4).await, app.slot(4).await);
    let placed = app.book("pair", None, &[(a, 1), (b, 2)]).await;
    let body = booking(&placed, 201).clone();
    let id = body["booking_id"].as_i64().unwrap();
    let second = body["lines"][1]["hold_id"].as_i64().unwrap();

    let read = app
        .call(Method::GET, &format!("/bookings/{id}"), None)
        .await;
    assert_eq!(booking(&read, 200), &body);
    app.call(Method::GET, &format!("/bookings/{second}"), None)
        .await
        .problem(404, "hold_not_found");
    app.clock.advance(Duration::minutes(1));
    let renewed = app
        .call(Method::POST, &format!("/bookings/{id}/renew"), None)
        .await;
    assert!(booking(&renewed, 200)["expires_at"].as_str() > body["expires_at"].as_str());
    let confirmed = app
        .call(Method::POST, &format!("/bookings/{id}/confirm"), None)
        .await;
    assert_eq!(booking(&confirmed, 200)["status"], "confirmed");
    // The seed's hold route on the second line cancels the whole booking, answering the line
    // with the seed's six fields.
    let line = app
        .call(Method::DELETE, &format!("/holds/{second}"), None)
        .await;
    assert_eq!(line.hold(200)["status"], "cancelled");
    let whole = app
        .call(Method::GET, &format!("/bookings/{id}"), None)
        .await;
    assert_eq!(booking(&whole, 200)["status"], "cancelled");
    assert_eq!(app.left(&[a, b]).await, vec![4, 4]);
    app.call(Method::POST, &format!("/bookings/{id}/confirm"), None)
        .await
        .problem(409, "hold_cancelled");
    let again = app
        .call(Method::DELETE, &format!("/bookings/{id}"), None)
        .await;
    assert_eq!(booking(&again, 200)["status"], "cancelled");
}

async fn a_booking_replays_by_key_and_belongs_to_its_owner(app: App) {
    let (a, b) = (app.slot(5).await, app.slot(5).await);
    let first = app.book("cart", Some("alice"), &[(a, 1), (b, 1)]).await;
    let body = booking(&first, 201).clone();
    assert!(!first.replayed());
    assert_eq!(body["owner"], "alice");
    let again = app.book("cart", Some("alice"), &[(b, 1), (a, 1)]).await;
    assert!(again.replayed());
    assert_eq!(booking(&again, 201), &body);
    app.book("cart", Some("alice"), &[(a, 2), (b, 1)])
        .await
        .problem(422, "idempotency_key_reused");
    app.book("cart", Some("bob"), &[(a, 1), (b, 1)])
        .await
        .problem(422, "idempotency_key_reused");
    let id = body["booking_id"].as_i64().unwrap();
    for owner in [None, Some("bob")] {
        for (method, path) in [
            (Method::GET, format!("/bookings/{id}")),
            (Method::POST, format!("/bookings/{id}/confirm")),
            (Method::DELETE, format!("/bookings/{id}")),
        ] {
            app.call(method, &path, owner)
                .await
                .problem(404, "hold_not_found");
        }
    }
    let confirmed = app
        .call(
            Method::POST,
            &format!("/bookings/{id}/confirm"),
            Some("alice"),
        )
        .await;
    assert_eq!(booking(&confirmed, 200)["status"], "confirmed");
    assert_eq!(app.left(&[a, b]).await, vec![4, 4]);
}

async fn bad_booking_bodies_are_refused_and_change_nothing(app: App) {
    let (a, b) = (app.slot(5).await, app.slot(5).await);
    let many: Vec<Value> = (0..51).map(|i| json!({"slot_id": a.0 + i})).collect();
    let line = |slot: SlotId, q: Value| json!({"slot_id": slot.0, "quantity": q});
    for (body, code) in [
        ("".to_owned(), "invalid_body"),
        ("[]".to_owned(), "invalid_body"),
        (json!({}).to_string(), "invalid_body"),
        (json!({"lines": [], "extra": 1}).to_string(), "invalid_body"),
        (json!({"lines": "a"}).to_string(), "invalid_body"),
        (json!({"lines": [{"slot": 1}]}).to_string(), "invalid_body"),
        (
            json!({"lines": [line(a, json!("2"))]}).to_string(),
            "invalid_body",
        ),
        (json!({"lines": []}).to_string(), "invalid_booking"),
        (json!({ "lines": many }).to_string(), "invalid_booking"),
        (
            json!({"lines": [line(a, json!(1)), line(a, json!(1))]}).to_string(),
            "invalid_booking",
        ),
        (
            json!({"lines": [line(a, json!(0)), line(b, json!(1))]}).to_string(),
            "invalid_booking",
        ),
        (
            json!({"lines": [line(a, json!(2147483648_i64))]}).to_string(),
            "invalid_quantity",
        ),
        (
            json!({"lines": [line(a, json!(1)), line(b, json!(1))], "lifetime_seconds": 0})
                .to_string(),
            "invalid_lifetime",
        ),
    ] {
        let reply = app.book_body("k", None, &body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert_eq!(reply.code.as_deref(), Some(code), "{body}");
    }
    let request = Request::post("/bookings");
    let body = json!({"lines": [{"slot_id": a.0}, {"slot_id": b.0}]}).to_string();
    app.send(request, &body)
        .await
        .problem(400, "idempotency_key_required");
    assert_eq!(app.left(&[a, b]).await, vec![5, 5]);
}
