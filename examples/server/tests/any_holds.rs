//! `POST /holds`, a hold on any one of several slots, driven through the router with `oneshot`
//! over SQLite, PostgreSQL and MariaDB/MySQL: the first candidate that fits is taken and
//! answered as the seed's hold (six fields, `Location`), replays by `Idempotency-Key` return
//! the slot first taken, strategies, a refusal naming every candidate, bad bodies; nothing
//! changes on a refusal.

#[macro_use]
mod common;

use std::path::PathBuf;

use axum::http::Request;
use chrono::Duration;
use common::{owned, Oneshot as App, Reply};
use serde_json::{json, Value};
use slot_booking::SlotId;
use slot_booking_server::Config;

on_every_backend!(
    open: open, worker_threads: 2;
    a_hold_on_any_candidate_takes_the_first_that_fits_and_replays_it,
    strategies_spread_holds_and_a_refusal_names_every_candidate,
    bad_candidate_bodies_are_refused_and_change_nothing,
);

async fn open(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    App::open(url, sqlite_dir, &Config::default()).await
}

impl App {
    async fn slot(&self, capacity: i32) -> SlotId {
        common::new_slot(&self.engine, capacity, Duration::hours(1)).await
    }

    /// `POST /holds` with `key`, the owner if any, and `body`.
    async fn hold_any(&self, key: &str, owner: Option<&str>, body: Value) -> Reply {
        let request = Request::post("/holds").header("idempotency-key", key);
        self.send(owned(request, owner), &body.to_string()).await
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

async fn a_hold_on_any_candidate_takes_the_first_that_fits_and_replays_it(app: App) {
    let (full, room) = (app.slot(1).await, app.slot(3).await);
    app.hold(full, "fills", None, "").await.hold(201);
    let placed = app
        .hold_any(
            "any-1",
            Some("alice"),
            json!({"candidates": [full.0, room.0], "quantity": 2}),
        )
        .await;
    let body = placed.hold(201).clone();
    assert_eq!(body["slot_id"], json!(room.0));
    let id = body["hold_id"].as_i64().unwrap();
    assert_eq!(placed.headers["location"], format!("/holds/{id}").as_str());
    assert!(!placed.replayed());
    assert_eq!(app.left(&[full, room]).await, vec![0, 1]);
    // Again, in another order: the same hold, nothing more taken.
    let again = app
        .hold_any(
            "any-1",
            Some("alice"),
            json!({"candidates": [room.0, full.0], "quantity": 2, "strategy": "round_robin"}),
        )
        .await;
    assert_eq!(again.hold(201), &body);
    assert!(again.replayed());
    // Another request under the key.
    app.hold_any(
        "any-1",
        Some("alice"),
        json!({"candidates": [full.0, room.0]}),
    )
    .await
    .problem(422, "idempotency_key_reused");
    assert_eq!(app.left(&[full, room]).await, vec![0, 1]);
}

async fn strategies_spread_holds_and_a_refusal_names_every_candidate(app: App) {
    let rooms = [app.slot(2).await, app.slot(2).await];
    let ids = json!([rooms[0].0, rooms[1].0]);
    let mut taken = Vec::new();
    for (i, strategy) in ["round_robin", "round_robin", "least_booked", "least_booked"]
        .into_iter()
        .enumerate()
    {
        let reply = app
            .hold_any(
                &format!("k{i}"),
                None,
                json!({"candidates": ids, "strategy": strategy}),
            )
            .await;
        taken.push(reply.hold(201)["slot_id"].as_i64().unwrap());
    }
    taken.sort_unstable();
    assert_eq!(taken, vec![rooms[0].0, rooms[0].0, rooms[1].0, rooms[1].0]);
    let refused = app
        .hold_any(
            "k-none",
            None,
            json!({"candidates": [rooms[1].0, rooms[0].0, 999_999]}),
        )
        .await;
    refused.problem(409, "no_candidate_available");
    assert_eq!(
        refused.body["candidates"],
        json!([
            {"slot_id": rooms[1].0, "code": "sold_out"},
            {"slot_id": rooms[0].0, "code": "sold_out"},
            {"slot_id": 999_999, "code": "slot_not_found"},
        ])
    );
    assert_eq!(app.left(&rooms).await, vec![0, 0]);
}

async fn bad_candidate_bodies_are_refused_and_change_nothing(app: App) {
    let room = app.slot(2).await;
    for (body, code) in [
        (json!({"candidates": []}), "invalid_candidates"),
        (
            json!({"candidates": [room.0, room.0]}),
            "invalid_candidates",
        ),
        (
            json!({"candidates": (1..=21).collect::<Vec<i64>>()}),
            "invalid_candidates",
        ),
        (
            json!({"candidates": [room.0], "quantity": 0}),
            "invalid_quantity",
        ),
        (
            json!({"candidates": [room.0], "strategy": "fastest"}),
            "invalid_body",
        ),
        (json!({"candidates": [room.0], "extra": 1}), "invalid_body"),
        (json!({"slot_id": room.0}), "invalid_body"),
    ] {
        app.hold_any("bad", None, body).await.problem(400, code);
    }
    assert_eq!(app.left(&[room]).await, vec![2]);
}
