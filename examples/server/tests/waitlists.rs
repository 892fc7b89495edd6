//! The optional waitlist routes, driven through the router with `oneshot` over SQLite and
//! PostgreSQL: `POST /slots/{slot}/waitlist` holds at once (201, six-field hold) or waits in
//! line (202, the entry and its place), replays by `Idempotency-Key`; a cancel offers the unit
//! to the head (`/holds/{entry}`), in the same request; `GET` and `DELETE /waitlist/{entry}`;
//! newcomers are refused while the line waits; a pool's freed units go to its line on another
//! slot; bad bodies change nothing.

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
    a_full_slot_lines_up_and_a_cancel_offers_the_head,
    entries_are_read_left_and_replayed_by_their_owner,
    a_pools_units_freed_on_one_slot_go_to_its_line_on_another,
    bad_waitlist_requests_change_nothing,
);

async fn open(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    App::open(url, sqlite_dir, &Config::default()).await
}

/// An entry body's sorted fields.
const ENTRY_FIELDS: [&str; 8] = [
    "entry_id",
    "joined_at",
    "offer",
    "owner",
    "position",
    "priority",
    "quantity",
    "slot_id",
];

impl App {
    async fn slot(&self, capacity: i32) -> SlotId {
        common::new_slot(&self.engine, capacity, Duration::hours(1)).await
    }

    async fn join(&self, slot: SlotId, key: &str, owner: Option<&str>, body: Value) -> Reply {
        let request =
            Request::post(format!("/slots/{slot}/waitlist")).header("idempotency-key", key);
        self.send(owned(request, owner), &body.to_string()).await
    }

    async fn call(&self, method: Method, path: &str, owner: Option<&str>) -> Reply {
        let request = Request::builder().method(method).uri(path);
        self.send(owned(request, owner), "").await
    }
}

fn entry(reply: &Reply, status: u16) -> &Value {
    let body = reply.ok(status);
    common::assert_fields(body, &ENTRY_FIELDS);
    body
}

async fn a_full_slot_lines_up_and_a_cancel_offers_the_head(app: App) {
    let slot = app.slot(1).await;
    // Nobody waits and the unit is free: held at once, as the seed's hold.
    let held = app.join(slot, "first", None, json!({})).await;
    let hold = held.hold(201).clone();
    let hold_id = hold["hold_id"].as_i64().unwrap();
    assert_eq!(
        held.headers["location"],
        format!("/holds/{hold_id}").as_str()
    );
    // Full now: the next waits in line.
    let waiting = app
        .join(slot, "second", None, json!({"lifetime_seconds": 120}))
        .await;
    let body = entry(&waiting, 202).clone();
    let entry_id = body["entry_id"].as_i64().unwrap();
    assert_eq!(body["position"], 1);
    assert_eq!(body["offer"], format!("/holds/{entry_id}"));
    assert_eq!(
        waiting.headers["location"],
        format!("/waitlist/{entry_id}").as_str()
    );
    // Newcomers are refused while the line waits.
    app.hold(slot, "newcomer", None, "")
        .await
        .problem(409, "sold_out");
    // The cancel offers the unit to the head in the same request.
    app.call(Method::DELETE, &format!("/holds/{hold_id}"), None)
        .await
        .hold(200);
    let offer = app
        .call(Method::GET, &format!("/holds/{entry_id}"), None)
        .await;
    assert_eq!(offer.hold(200)["status"], "held");
    app.call(Method::GET, &format!("/waitlist/{entry_id}"), None)
        .await
        .problem(404, "entry_not_found");
    app.call(Method::POST, &format!("/holds/{entry_id}/confirm"), None)
        .await
        .hold(200);
}

async fn entries_are_read_left_and_replayed_by_their_owner(app: App) {
    let slot = app.slot(1).await;
    app.hold(slot, "full", None, "").await.hold(201);
    let first = app
        .join(slot, "a", Some("ann"), json!({"quantity": 1}))
        .await;
    let a = entry(&first, 202)["entry_id"].as_i64().unwrap();
    let vip = app
        .join(slot, "b", Some("bob"), json!({"priority": 5}))
        .await;
    let b = entry(&vip, 202).clone();
    assert_eq!(b["position"], 1, "higher priority goes first");
    let again = app
        .join(slot, "b", Some("bob"), json!({"priority": 5}))
        .await;
    assert_eq!(entry(&again, 202), &b);
    assert!(again.replayed());
    app.join(slot, "b", Some("bob"), json!({"priority": 1}))
        .await
        .problem(422, "idempotency_key_reused");
    let read = app
        .call(Method::GET, &format!("/waitlist/{a}"), Some("ann"))
        .await;
    assert_eq!(entry(&read, 200)["position"], 2);
    app.call(Method::GET, &format!("/waitlist/{a}"), Some("bob"))
        .await
        .problem(404, "entry_not_found");
    let b_id = b["entry_id"].as_i64().unwrap();
    let left = app
        .call(Method::DELETE, &format!("/waitlist/{b_id}"), Some("bob"))
        .await;
    assert_eq!(entry(&left, 200)["position"], Value::Null);
    let read = app
        .call(Method::GET, &format!("/waitlist/{a}"), Some("ann"))
        .await;
    assert_eq!(entry(&read, 200)["position"], 1);
}

/// A slot in a full pool lines up though the slot has room; a cancel on another slot of the
/// pool offers the unit to it in the same request; newcomers on any slot of the pool wait.
async fn a_pools_units_freed_on_one_slot_go_to_its_line_on_another(app: App) {
    let (a, b) = (app.slot(3).await, app.slot(3).await);
    let pool = app
        .engine
        .create_pool(slot_booking::NewPool::new(1))
        .await
        .unwrap();
    for slot in [a, b] {
        app.engine.attach_slot(pool.pool_id, slot).await.unwrap();
    }
    let held = app.hold(a, "full", None, "").await;
    let hold_id = held.hold(201)["hold_id"].as_i64().unwrap();
    let waiting = app.join(b, "on-b", None, json!({})).await;
    let entry_id = entry(&waiting, 202)["entry_id"].as_i64().unwrap();
    app.hold(a, "newcomer", None, "")
        .await
        .problem(409, "sold_out");
    app.call(Method::DELETE, &format!("/holds/{hold_id}"), None)
        .await
        .hold(200);
    let offer = app
        .call(Method::GET, &format!("/holds/{entry_id}"), None)
        .await;
    let offer = offer.hold(200);
    assert_eq!(
        (offer["status"].as_str(), offer["slot_id"].as_i64()),
        (Some("held"), Some(b.0))
    );
}

async fn bad_waitlist_requests_change_nothing(app: App) {
    let slot = app.slot(2).await;
    for (body, status, code) in [
        (json!({"quantity": 0}), 400, "invalid_quantity"),
        (json!({"quantity": 3}), 422, "quantity_exceeds_capacity"),
        (json!({"priority": "high"}), 400, "invalid_body"),
        (json!({"extra": 1}), 400, "invalid_body"),
    ] {
        app.join(slot, "bad", None, body)
            .await
            .problem(status, code);
    }
    app.join(SlotId(987_654_321), "bad", None, json!({}))
        .await
        .problem(404, "slot_not_found");
    app.call(Method::GET, "/waitlist/987654321", None)
        .await
        .problem(404, "entry_not_found");
    let stored = app.store.get_slot(slot).await.unwrap().unwrap();
    assert_eq!(stored.stored_remaining, 2);
}
