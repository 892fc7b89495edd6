//! The pool administration routes, driven through the router with `oneshot` over SQLite and
//! PostgreSQL: create, read, resize, attach and detach, each refusal with its code and
//! status; a pool caps the seed's hold route and the booking route across its slots, and the
//! seed's routes keep their codes and six-field hold body.

#[macro_use]
mod common;

use std::path::PathBuf;

use axum::http::{Method, Request};
use chrono::Duration;
use common::{Oneshot as App, Reply};
use serde_json::{json, Value};
use slot_booking::SlotId;
use slot_booking_server::config::AdminToken;
use slot_booking_server::Config;

on_every_backend!(
    open: open, worker_threads: 2;
    pools_cap_holds_and_bookings_across_their_slots,
    pool_refusals_carry_their_codes_and_change_nothing,
);

const TOKEN: &str = "pool-admin-token";

async fn open(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    let config = Config {
        admin_token: Some(AdminToken::new(TOKEN).unwrap()),
        ..Config::default()
    };
    App::open(url, sqlite_dir, &config).await
}

/// A pool body's sorted fields.
const POOL_FIELDS: [&str; 6] = [
    "capacity",
    "confirmed",
    "held",
    "pool_id",
    "remaining",
    "slots",
];

impl App {
    async fn slot(&self, capacity: i32, hours: i64) -> SlotId {
        common::new_slot(&self.engine, capacity, Duration::hours(hours)).await
    }

    async fn admin(&self, method: Method, path: &str, body: &str) -> Reply {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {TOKEN}"));
        self.send(request, body).await
    }

    /// A pool answer with `status`, its fields checked.
    async fn pool(&self, method: Method, path: &str, body: &str, status: u16) -> Value {
        let reply = self.admin(method, path, body).await;
        let pool = reply.ok(status).clone();
        let mut fields: Vec<&str> = pool
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(fields, POOL_FIELDS, "{pool}");
        pool
    }
}

async fn pools_cap_holds_and_bookings_across_their_slots(app: App) {
    let (a, b) = (app.slot(4, 1).await, app.slot(4, 2).await);
    let reply = app
        .admin(Method::POST, "/admin/pools", r#"{"capacity": 5}"#)
        .await;
    let created = reply.ok(201).clone();
    let id = created["pool_id"].as_i64().unwrap();
    assert_eq!(reply.headers["location"], format!("/admin/pools/{id}"));
    assert_eq!(created["slots"], json!([]));
    for slot in [a, b] {
        app.pool(
            Method::PUT,
            &format!("/admin/pools/{id}/slots/{slot}"),
            "",
            200,
        )
        .await;
    }
    let hold = app.hold(a, "k1", None, r#"{"quantity": 4}"#).await;
    let hold = hold.hold(201).clone();
    assert_eq!(
        hold.as_object().unwrap().len(),
        6,
        "the seed's six fields: {hold}"
    );
    app.hold(b, "k2", None, r#"{"quantity": 2}"#)
        .await
        .problem(409, "sold_out");
    let booking = Request::post("/bookings").header("idempotency-key", "k3");
    let body =
        json!({"lines": [{"slot_id": b.0, "quantity": 2}, {"slot_id": a.0 + 1000, "quantity": 1}]});
    let refused = app.send(booking, &body.to_string()).await;
    refused.problem(409, "lines_unavailable");
    let lines = refused.body["lines"].as_array().unwrap().clone();
    assert_eq!(
        lines.len(),
        2,
        "the short pooled line and the missing slot: {lines:?}"
    );
    let pool = app
        .pool(Method::GET, &format!("/admin/pools/{id}"), "", 200)
        .await;
    assert_eq!(
        (
            pool["remaining"].clone(),
            pool["held"].clone(),
            pool["slots"].clone()
        ),
        (json!(1), json!(4), json!([a.0, b.0]))
    );
    let listing = app.send(Request::get("/slots/availability"), "").await;
    let entries = listing.ok(200)["slots"].as_array().unwrap().clone();
    let shown = |slot: SlotId| {
        entries
            .iter()
            .find(|e| e["slot_id"] == slot.0)
            .map(|e| e["remaining"].clone())
    };
    assert_eq!((shown(a), shown(b)), (Some(json!(0)), Some(json!(1))));
    let detached = app
        .pool(
            Method::DELETE,
            &format!("/admin/pools/{id}/slots/{b}"),
            "",
            200,
        )
        .await;
    assert_eq!(detached["slots"], json!([a.0]));
    app.hold(b, "k4", None, r#"{"quantity": 2}"#)
        .await
        .hold(201);
    let resized = app
        .pool(
            Method::POST,
            &format!("/admin/pools/{id}/capacity"),
            r#"{"capacity": 4}"#,
            200,
        )
        .await;
    assert_eq!(
        (resized["capacity"].clone(), resized["remaining"].clone()),
        (json!(4), json!(0))
    );
}

async fn pool_refusals_carry_their_codes_and_change_nothing(app: App) {
    let a = app.slot(4, 1).await;
    for (body, code) in [
        (r#"{"capacity": -1}"#, "invalid_pool"),
        (r#"{"capacity": 2147483648}"#, "invalid_pool"),
        (r#"{"capacity": 1.5}"#, "invalid_pool"),
        (r#"{"capacity": 1, "x": 2}"#, "invalid_body"),
    ] {
        app.admin(Method::POST, "/admin/pools", body)
            .await
            .problem(400, code);
    }
    let id = app
        .pool(Method::POST, "/admin/pools", r#"{"capacity": 2}"#, 201)
        .await["pool_id"]
        .as_i64()
        .unwrap();
    app.hold(a, "k", None, r#"{"quantity": 3}"#).await.hold(201);
    app.admin(Method::PUT, &format!("/admin/pools/{id}/slots/{a}"), "")
        .await
        .problem(409, "pool_in_use");
    app.admin(Method::GET, "/admin/pools/999999", "")
        .await
        .problem(404, "pool_not_found");
    app.admin(Method::GET, "/admin/pools/99999999999999999999", "")
        .await
        .problem(404, "pool_not_found");
    app.admin(Method::PUT, &format!("/admin/pools/{id}/slots/999999"), "")
        .await
        .problem(404, "slot_not_found");
    app.admin(
        Method::POST,
        &format!("/admin/pools/{id}/capacity"),
        r#"{"capacity": -3}"#,
    )
    .await
    .problem(400, "invalid_pool");
    let pool = app
        .pool(Method::GET, &format!("/admin/pools/{id}"), "", 200)
        .await;
    assert_eq!(
        (pool["capacity"].clone(), pool["slots"].clone()),
        (json!(2), json!([]))
    );
    // Without the token the pool routes do not answer.
    let anonymous = app
        .send(Request::get(format!("/admin/pools/{id}")), "")
        .await;
    assert_eq!(anonymous.status, 401);
}
