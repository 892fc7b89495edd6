//! The administration routes, driven through the router with `oneshot` (no socket), over
//! SQLite, PostgreSQL and MariaDB/MySQL: mounted only with `ADMIN_TOKEN`, guarded by it, and
//! what each does to availability, holds and the operator's listing. Bad input is a 4xx
//! problem that changes nothing, and a client of the seed's routes sees nothing new.
//!
//! Every test runs once per backend (modules `sqlite`, `postgres` and `mysql`), on a fresh
//! database, with a manual clock and no availability cache, so `GET /slots/availability` shows
//! each change at once.

#[macro_use]
mod common;

use std::path::PathBuf;

use axum::http::{Method, Request};
use chrono::Duration;
use common::{assert_fields, numbers_in, owned, send, wire_at, Oneshot as App, Reply, UNKNOWN};
use serde_json::{json, Value};
use slot_booking_server::{AdminToken, Config};

on_every_backend!(
    open: open, worker_threads: 2;
    admin_routes_do_not_exist_without_a_token,
    admin_routes_refuse_a_missing_or_wrong_token,
    admin_routes_live_under_the_path_prefix,
    created_slot_is_listed_in_availability_and_the_listing,
    resource_filters_availability_and_the_listing,
    raising_capacity_adds_free_units,
    lowering_capacity_is_refused_while_units_are_taken,
    capacity_moves_by_units_and_by_compare_and_set,
    closed_slot_refuses_holds_and_leaves_availability_until_reopened,
    removal_waits_until_nothing_is_held_or_confirmed,
    listing_pages_through_every_slot,
    roster_shows_every_owners_holds,
    bad_admin_input_is_refused_and_changes_nothing,
    seed_clients_see_nothing_new,
    extreme_times_are_never_a_server_error,
);

// ---- harness --------------------------------------------------------------------------------

/// The token the administration routes are configured with.
const TOKEN: &str = "test-admin-token-0123456789";

/// The seed's availability entry, sorted.
const ENTRY_FIELDS: [&str; 5] = ["capacity", "ends_at", "remaining", "slot_id", "starts_at"];

/// An administration slot body, sorted.
const SLOT_FIELDS: [&str; 8] = [
    "capacity",
    "closed",
    "ends_at",
    "removed_at",
    "resource",
    "slot_id",
    "starts_at",
    "stored_remaining",
];

/// A listing entry, sorted: the slot's fields plus its units held and confirmed.
const SUMMARY_FIELDS: [&str; 10] = [
    "capacity",
    "closed",
    "confirmed",
    "ends_at",
    "held",
    "remaining",
    "removed_at",
    "resource",
    "slot_id",
    "starts_at",
];

/// The router (with [`TOKEN`] configured) over a fresh database, and the engine behind it on a
/// manual clock (starting at [`common::epoch`]) without an availability cache.
async fn open(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    App::open(url, sqlite_dir, &with_token("")).await
}

impl Reply {
    /// Asserts a success with `status` whose body is an eight-field slot, and returns it.
    fn slot(&self, status: u16) -> &Value {
        assert_fields(self.ok(status), &SLOT_FIELDS);
        &self.body
    }

    /// Asserts 401 `unauthorized` with `WWW-Authenticate: Bearer`.
    fn unauthorized(&self) {
        self.problem(401, "unauthorized");
        assert_eq!(
            self.headers["www-authenticate"], "Bearer",
            "{:?}",
            self.headers
        );
    }
}

/// `epoch + hours` as a client writes it.
fn at(hours: i64) -> String {
    (common::epoch() + Duration::hours(hours))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `epoch + hours` as the server writes it.
fn wire(hours: i64) -> String {
    wire_at(Duration::hours(hours))
}

/// The `slot_id` of a slot body.
fn id(body: &Value) -> i64 {
    body["slot_id"].as_i64().unwrap()
}

/// Every administration route on `slot`: (method, path, a body it accepts).
fn admin_routes(slot: i64) -> Vec<(Method, String, String)> {
    let create = json!({"starts_at": at(5), "ends_at": at(6), "capacity": 2}).to_string();
    vec![
        (Method::POST, "/admin/slots".into(), create),
        (Method::GET, "/admin/slots".into(), String::new()),
        (Method::GET, format!("/admin/slots/{slot}"), String::new()),
        (
            Method::POST,
            format!("/admin/slots/{slot}/capacity"),
            r#"{"capacity": 9}"#.into(),
        ),
        (
            Method::POST,
            format!("/admin/slots/{slot}/close"),
            String::new(),
        ),
        (
            Method::POST,
            format!("/admin/slots/{slot}/reopen"),
            String::new(),
        ),
        (
            Method::DELETE,
            format!("/admin/slots/{slot}"),
            String::new(),
        ),
        (
            Method::GET,
            format!("/admin/slots/{slot}/holds"),
            String::new(),
        ),
    ]
}

/// A configuration with [`TOKEN`] and `path_prefix`.
fn with_token(path_prefix: &str) -> Config {
    Config {
        path_prefix: path_prefix.to_owned(),
        admin_token: Some(AdminToken::new(TOKEN).unwrap()),
        ..Config::default()
    }
}

impl App {
    /// `method path` with `body` and the right token.
    async fn admin(&self, method: Method, path: &str, body: &str) -> Reply {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {TOKEN}"));
        self.send(request, body).await
    }

    /// `method path` with `body` and no token.
    async fn call(&self, method: Method, path: &str, body: &str) -> Reply {
        let request = Request::builder().method(method).uri(path);
        self.send(request, body).await
    }

    /// `POST /admin/slots` of `capacity` units from `epoch + starts_in` hours for an hour.
    async fn create(&self, capacity: i64, starts_in: i64, resource: Option<&str>) -> Value {
        let mut body =
            json!({"starts_at": at(starts_in), "ends_at": at(starts_in + 1), "capacity": capacity});
        if let Some(resource) = resource {
            body["resource"] = resource.into();
        }
        self.admin(Method::POST, "/admin/slots", &body.to_string())
            .await
            .slot(201)
            .clone()
    }

    /// `GET /admin/slots?{query}`, asserting 200.
    async fn listing(&self, query: &str) -> Value {
        let reply = self
            .admin(Method::GET, &format!("/admin/slots?{query}"), "")
            .await;
        let body = reply.ok(200).clone();
        for entry in body["slots"].as_array().unwrap() {
            assert_fields(entry, &SUMMARY_FIELDS);
        }
        body
    }

    /// The listing entry of `slot`.
    async fn summary(&self, slot: i64) -> Value {
        let listing = self.listing("limit=1000").await;
        let entry = listing["slots"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["slot_id"] == slot)
            .cloned();
        entry.unwrap_or_else(|| panic!("slot {slot} not listed: {listing}"))
    }

    /// `GET /slots/availability?{query}`'s entries, asserting 200.
    async fn availability(&self, query: &str) -> Vec<Value> {
        let reply = self
            .call(Method::GET, &format!("/slots/availability?{query}"), "")
            .await;
        reply.ok(200)["slots"].as_array().unwrap().clone()
    }

    /// The ids in availability (for `query`).
    async fn available_ids(&self, query: &str) -> Vec<i64> {
        self.availability(query).await.iter().map(id).collect()
    }

    /// The slot's free units as availability reports them, `None` when it is not listed.
    async fn remaining(&self, slot: i64) -> Option<i64> {
        let entries = self.availability("").await;
        let entry = entries.iter().find(|e| e["slot_id"] == slot)?;
        entry["remaining"].as_i64()
    }

    /// Places a hold and returns its id.
    async fn held(&self, slot: i64, key: &str, owner: Option<&str>, body: &str) -> i64 {
        let reply = self.hold(slot, key, owner, body).await;
        reply.hold(201)["hold_id"].as_i64().unwrap()
    }

    /// A slot of `capacity` units (from `epoch + 2` hours) with two units held by alice (key
    /// `held`, body `{"quantity": 2}`) and one confirmed by an anonymous client (key `booked`):
    /// the slot's id and the two holds' ids.
    async fn taken(&self, capacity: i64) -> (i64, i64, i64) {
        let slot = id(&self.create(capacity, 2, None).await);
        let held = self
            .held(slot, "held", Some("alice"), r#"{"quantity": 2}"#)
            .await;
        let booked = self.held(slot, "booked", None, "").await;
        self.on_hold(Method::POST, booked, "/confirm", None)
            .await
            .hold(200);
        (slot, held, booked)
    }

    /// `method /holds/{hold}{suffix}` as `owner`.
    async fn on_hold(&self, method: Method, hold: i64, suffix: &str, owner: Option<&str>) -> Reply {
        let request = Request::builder()
            .method(method)
            .uri(format!("/holds/{hold}{suffix}"));
        self.send(owned(request, owner), "").await
    }

    /// Everything the administration routes could change: the whole listing and availability.
    async fn state(&self) -> String {
        format!(
            "{}\n{:?}",
            self.listing("limit=1000").await,
            self.availability("").await
        )
    }
}

// ---- mounting and the token -----------------------------------------------------------------

/// Without `ADMIN_TOKEN` no administration route exists: each answers exactly like a path
/// nobody serves, with or without an `Authorization` header, and changes nothing.
async fn admin_routes_do_not_exist_without_a_token(app: App) {
    let slot = id(&app.create(3, 2, None).await);
    let bare = slot_booking_server::router(app.engine.clone());
    let unknown = send(&bare, Request::get("/no/such/route"), "").await;
    unknown.problem(404, "not_found");
    let before = app.state().await;

    for (method, path, body) in admin_routes(slot) {
        for authorization in [
            None,
            Some(format!("Bearer {TOKEN}")),
            Some("Bearer x".into()),
        ] {
            let mut request = Request::builder().method(method.clone()).uri(&path);
            if let Some(value) = &authorization {
                request = request.header("authorization", value);
            }
            let reply = send(&bare, request, &body).await;
            reply.problem(404, "not_found");
            assert_eq!(reply.body, unknown.body, "{method} {path}");
            assert!(
                !reply.headers.contains_key("www-authenticate"),
                "{method} {path}"
            );
        }
    }
    assert_eq!(app.state().await, before);
}

/// A missing, wrong or malformed `Authorization` is 401 `unauthorized` with
/// `WWW-Authenticate: Bearer` on every route, before the path or body is looked at, and
/// changes nothing; the scheme is case-insensitive.
async fn admin_routes_refuse_a_missing_or_wrong_token(app: App) {
    let slot = id(&app.create(3, 2, None).await);
    let before = app.state().await;
    let wrong_last = format!("{}X", &TOKEN[..TOKEN.len() - 1]);
    let bad_headers: Vec<Vec<String>> = vec![
        vec![],
        vec![String::new()],
        vec!["Bearer".into()],
        vec!["Bearer ".into()],
        vec![format!("Bearer {wrong_last}")],
        vec![format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])],
        vec![format!("Bearer {TOKEN}x")],
        vec![format!("Bearer {}", TOKEN.to_uppercase())],
        vec![format!("Basic {TOKEN}")],
        vec![TOKEN.into()],
        vec![format!("Bearer{TOKEN}")],
        vec![format!("Bearer {TOKEN}"), format!("Bearer {TOKEN}")],
        vec![format!("Bearer {TOKEN}"), "Bearer nope".into()],
    ];
    let mut routes = admin_routes(slot);
    // The token is checked before the path id: unknown and malformed ids are 401 too.
    routes.push((
        Method::POST,
        format!("/admin/slots/{UNKNOWN}/close"),
        String::new(),
    ));
    routes.push((
        Method::GET,
        "/admin/slots/99999999999999999999".into(),
        String::new(),
    ));
    // A method a route lacks is 401 too, not 405: without the token nothing says the routes
    // exist.
    for (method, path) in [
        (Method::PUT, "/admin/slots".to_owned()),
        (Method::GET, format!("/admin/slots/{slot}/capacity")),
        (Method::PATCH, format!("/admin/slots/{slot}")),
    ] {
        routes.push((method, path, String::new()));
    }
    for (method, path, body) in &routes {
        for headers in &bad_headers {
            let mut request = Request::builder().method(method.clone()).uri(path);
            for value in headers {
                request = request.header("authorization", value);
            }
            let reply = app.send(request, body).await;
            assert_eq!(reply.status, 401, "{method} {path} with {headers:?}");
            reply.unauthorized();
        }
    }
    assert_eq!(app.state().await, before);

    for scheme in ["Bearer", "bearer", "BEARER"] {
        let request = Request::get(format!("/admin/slots/{slot}"))
            .header("authorization", format!("{scheme} {TOKEN}"));
        app.send(request, "").await.slot(200);
    }
    // A seed route never asks for the token.
    app.call(Method::GET, "/slots/availability", "")
        .await
        .ok(200);
}

/// Under `PATH_PREFIX` the administration routes move with the others, and `Location` of a
/// new slot names it there.
async fn admin_routes_live_under_the_path_prefix(app: App) {
    let router = slot_booking_server::router_with_config(app.engine.clone(), &with_token("/api"));
    let body = json!({"starts_at": at(2), "ends_at": at(3), "capacity": 4}).to_string();
    let post = |path: &str| {
        Request::post(path.to_owned()).header("authorization", format!("Bearer {TOKEN}"))
    };
    let created = send(&router, post("/api/admin/slots"), &body).await;
    let slot = id(created.slot(201));
    let location = created.headers["location"].to_str().unwrap().to_owned();
    assert_eq!(location, format!("/api/admin/slots/{slot}"));
    let get = Request::get(&location).header("authorization", format!("Bearer {TOKEN}"));
    let fetched = send(&router, get, "").await;
    assert_eq!(fetched.slot(200), &created.body);

    send(&router, post("/admin/slots"), &body)
        .await
        .problem(404, "not_found");
    send(&router, Request::post("/api/admin/slots"), &body)
        .await
        .unauthorized();
    assert_eq!(app.listing("").await["slots"].as_array().unwrap().len(), 1);
}

// ---- creating and listing -------------------------------------------------------------------

/// A created slot is 201 with `Location` and its eight fields, sells at once (in availability,
/// with `resource` when it has one) and is in the listing with its units.
async fn created_slot_is_listed_in_availability_and_the_listing(app: App) {
    let body = json!({
        "starts_at": "2030-06-01T12:00:00+02:00",
        "ends_at": at(5),
        "capacity": 6,
        "resource": "room-1",
    });
    let created = app
        .admin(Method::POST, "/admin/slots", &body.to_string())
        .await;
    let slot = created.slot(201).clone();
    let slot_id = id(&slot);
    assert_eq!(
        created.headers["location"],
        format!("/admin/slots/{slot_id}").as_str()
    );
    assert_eq!(
        slot,
        json!({
            "slot_id": slot_id,
            "starts_at": wire(2),
            "ends_at": wire(5),
            "capacity": 6,
            "stored_remaining": 6,
            "resource": "room-1",
            "closed": false,
            "removed_at": null,
        })
    );
    let location = created.headers["location"].to_str().unwrap();
    assert_eq!(app.admin(Method::GET, location, "").await.slot(200), &slot);

    let plain = app.create(2, 3, None).await;
    assert_eq!(plain["resource"], Value::Null);

    let entries = app.availability("").await;
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(
        entries[0],
        json!({"slot_id": slot_id, "starts_at": wire(2), "ends_at": wire(5), "capacity": 6, "remaining": 6, "resource": "room-1"})
    );
    assert_fields(&entries[1], &ENTRY_FIELDS);
    assert_eq!(entries[1]["slot_id"], plain["slot_id"]);

    let listing = app.listing("").await;
    assert_eq!(listing["next_after"], Value::Null);
    // The listing entry is the slot (as checked above) with no unit held or confirmed, its
    // `remaining` resolved (expired holds free) where the slot body shows the stored counter.
    let mut summary = slot.clone();
    summary["remaining"] = summary["stored_remaining"].take();
    summary.as_object_mut().unwrap().remove("stored_remaining");
    summary["held"] = json!(0);
    summary["confirmed"] = json!(0);
    assert_eq!(listing["slots"][0], summary);
    assert_eq!(listing["slots"][1]["slot_id"], plain["slot_id"]);

    // Units show up in the listing as they are held and confirmed.
    let hold = app.held(slot_id, "two", None, r#"{"quantity": 2}"#).await;
    app.held(slot_id, "one", Some("alice"), "").await;
    app.on_hold(Method::POST, hold, "/confirm", None)
        .await
        .hold(200);
    let summary = app.summary(slot_id).await;
    assert_eq!(
        (
            &summary["remaining"],
            &summary["held"],
            &summary["confirmed"]
        ),
        (&json!(3), &json!(1), &json!(2))
    );
}

/// `resource` narrows both availability and the listing to one resource's slots; a resource
/// nobody uses lists nothing.
async fn resource_filters_availability_and_the_listing(app: App) {
    let a1 = id(&app.create(1, 2, Some("room-a")).await);
    let b1 = id(&app.create(1, 3, Some("room-b")).await);
    let none = id(&app.create(1, 4, None).await);
    let a2 = id(&app.create(1, 5, Some("room-a")).await);

    assert_eq!(app.available_ids("").await, [a1, b1, none, a2]);
    assert_eq!(app.available_ids("resource=room-a").await, [a1, a2]);
    assert_eq!(app.available_ids("resource=room-b").await, [b1]);
    assert_eq!(
        app.available_ids("resource=room-c").await,
        Vec::<i64>::new()
    );
    assert_eq!(
        app.available_ids(&format!("resource=room-a&from={}", at(3)))
            .await,
        [a2]
    );
    // Resource ids are case-sensitive.
    assert_eq!(
        app.available_ids("resource=Room-A").await,
        Vec::<i64>::new()
    );

    let listed = |listing: Value| -> Vec<i64> {
        listing["slots"]
            .as_array()
            .unwrap()
            .iter()
            .map(id)
            .collect()
    };
    assert_eq!(listed(app.listing("").await), [a1, b1, none, a2]);
    assert_eq!(listed(app.listing("resource=room-a").await), [a1, a2]);
    assert_eq!(listed(app.listing("resource=room-b").await), [b1]);
    assert_eq!(
        listed(app.listing("resource=room-c").await),
        Vec::<i64>::new()
    );
    assert_eq!(
        listed(app.listing(&format!("resource=room-a&to={}", at(5))).await),
        [a1]
    );
    assert_eq!(
        listed(app.listing(&format!("from={}&to={}", at(3), at(5))).await),
        [b1, none]
    );

    // The listing shows closed and removed slots, availability does not.
    app.admin(Method::POST, &format!("/admin/slots/{a1}/close"), "")
        .await
        .slot(200);
    app.admin(Method::DELETE, &format!("/admin/slots/{a2}"), "")
        .await
        .slot(200);
    assert_eq!(
        app.available_ids("resource=room-a").await,
        Vec::<i64>::new()
    );
    assert_eq!(listed(app.listing("resource=room-a").await), [a1, a2]);
}

// ---- capacity -------------------------------------------------------------------------------

/// Raising a capacity adds free units at once, held units staying held.
async fn raising_capacity_adds_free_units(app: App) {
    let slot = id(&app.create(2, 2, None).await);
    app.held(slot, "one", None, "").await;
    app.held(slot, "two", None, "").await;
    app.hold(slot, "three", None, "")
        .await
        .problem(409, "sold_out");

    let path = format!("/admin/slots/{slot}/capacity");
    let raised = app.admin(Method::POST, &path, r#"{"capacity": 5}"#).await;
    let raised = raised.slot(200);
    assert_eq!(
        (&raised["capacity"], &raised["stored_remaining"]),
        (&json!(5), &json!(3))
    );
    assert_eq!(app.remaining(slot).await, Some(3));
    app.held(slot, "three", None, "").await;
    assert_eq!(app.remaining(slot).await, Some(2));

    // The same capacity again changes nothing; the largest is accepted.
    let same = app.admin(Method::POST, &path, r#"{"capacity": 5}"#).await;
    assert_eq!(same.slot(200)["stored_remaining"], 2);
    let largest = app
        .admin(Method::POST, &path, r#"{"capacity": 2147483647}"#)
        .await;
    assert_eq!(largest.slot(200)["stored_remaining"], 2147483647 - 3);
    let summary = app.summary(slot).await;
    assert_eq!(
        (&summary["capacity"], &summary["held"]),
        (&json!(2147483647), &json!(3))
    );
}

/// Lowering a capacity below the units held and confirmed is 409 `capacity_taken`, saying how
/// many are taken, and changes nothing; it takes free units only, and once a hold is cancelled
/// (or has expired) its units can go.
async fn lowering_capacity_is_refused_while_units_are_taken(app: App) {
    let (slot, two, _) = app.taken(6).await;
    let path = format!("/admin/slots/{slot}/capacity");

    let before = app.state().await;
    for capacity in [1, 2] {
        let body = format!(r#"{{"capacity": {capacity}}}"#);
        let reply = app.admin(Method::POST, &path, &body).await;
        let detail = reply.problem(409, "capacity_taken");
        assert_eq!(numbers_in(detail), [slot, 3, capacity], "{detail}");
        assert_eq!(app.state().await, before);
    }

    // Down to exactly the units taken: no free unit left.
    let lowered = app.admin(Method::POST, &path, r#"{"capacity": 3}"#).await;
    assert_eq!(lowered.slot(200)["stored_remaining"], 0);
    assert_eq!(app.remaining(slot).await, Some(0));
    app.hold(slot, "more", None, "")
        .await
        .problem(409, "sold_out");

    app.on_hold(Method::DELETE, two, "", Some("alice"))
        .await
        .hold(200);
    assert_eq!(app.remaining(slot).await, Some(2));
    let lowered = app.admin(Method::POST, &path, r#"{"capacity": 1}"#).await;
    let lowered = lowered.slot(200);
    assert_eq!(
        (&lowered["capacity"], &lowered["stored_remaining"]),
        (&json!(1), &json!(0))
    );
    let summary = app.summary(slot).await;
    assert_eq!(
        (&summary["held"], &summary["confirmed"]),
        (&json!(0), &json!(1))
    );

    // An expired hold's units do not stand in the way.
    app.admin(Method::POST, &path, r#"{"capacity": 3}"#)
        .await
        .slot(200);
    app.held(slot, "expiring", None, r#"{"quantity": 2}"#).await;
    app.admin(Method::POST, &path, r#"{"capacity": 1}"#)
        .await
        .problem(409, "capacity_taken");
    app.clock.advance(Duration::minutes(5));
    let lowered = app.admin(Method::POST, &path, r#"{"capacity": 1}"#).await;
    assert_eq!(lowered.slot(200)["capacity"], 1);
    assert_eq!(app.summary(slot).await["confirmed"], 1);
}

/// `{"add": n}` moves the capacity by `n` units, concurrent moves adding up (twenty at once);
/// `{"capacity": n, "expected": m}` sets it only while it is `m`, else 409 `capacity_changed`
/// naming the capacity found; a body with both or neither of `capacity` and `add` is 400
/// `invalid_body`. None of the refusals changes anything.
async fn capacity_moves_by_units_and_by_compare_and_set(app: App) {
    let slot = id(&app.create(4, 2, None).await);
    let path = format!("/admin/slots/{slot}/capacity");
    let moves: Vec<_> = (0..20)
        .map(|_| app.admin(Method::POST, &path, r#"{"add": 1}"#))
        .collect();
    for reply in futures::future::join_all(moves).await {
        reply.slot(200);
    }
    let moved = app.admin(Method::POST, &path, r#"{"add": -2}"#).await;
    assert_eq!(moved.slot(200)["capacity"], 22, "4 + 20 - 2: no move lost");

    let set = app
        .admin(Method::POST, &path, r#"{"capacity": 30, "expected": 22}"#)
        .await;
    assert_eq!(set.slot(200)["capacity"], 30);
    let before = app.state().await;
    let stale = app
        .admin(Method::POST, &path, r#"{"capacity": 40, "expected": 22}"#)
        .await;
    let detail = stale.problem(409, "capacity_changed");
    assert_eq!(numbers_in(detail), [slot, 30, 22], "{detail}");
    for bad in [
        r#"{"capacity": 5, "add": 1}"#,
        r#"{"add": 1, "expected": 30}"#,
        r#"{"expected": 30}"#,
        r#"{}"#,
    ] {
        app.admin(Method::POST, &path, bad)
            .await
            .problem(400, "invalid_body");
    }
    app.admin(Method::POST, &path, r#"{"add": -30}"#)
        .await
        .problem(400, "invalid_slot");
    app.admin(Method::POST, &path, r#"{"add": 2147483648}"#)
        .await
        .problem(400, "invalid_slot");
    assert_eq!(app.state().await, before);

    // A pool's, the same way, with codes of its own.
    let pool = app
        .admin(Method::POST, "/admin/pools", r#"{"capacity": 3}"#)
        .await
        .ok(201)["pool_id"]
        .as_i64()
        .unwrap();
    let path = format!("/admin/pools/{pool}/capacity");
    let moved = app.admin(Method::POST, &path, r#"{"add": 2}"#).await;
    assert_eq!(moved.ok(200)["capacity"], 5);
    let stale = app
        .admin(Method::POST, &path, r#"{"capacity": 7, "expected": 3}"#)
        .await;
    let detail = stale.problem(409, "pool_capacity_changed");
    assert_eq!(numbers_in(detail), [pool, 5, 3], "{detail}");
    app.admin(Method::POST, &path, r#"{"add": -6}"#)
        .await
        .problem(400, "invalid_pool");
}

// ---- closing and removing -------------------------------------------------------------------

/// A closed slot refuses new holds (409 `slot_closed`) and leaves availability, while its
/// holds can still be confirmed and cancelled; reopening brings it back.
async fn closed_slot_refuses_holds_and_leaves_availability_until_reopened(app: App) {
    let slot = id(&app.create(3, 2, None).await);
    let other = id(&app.create(3, 3, None).await);
    let held = app.held(slot, "before", None, "").await;
    let kept = app.held(slot, "kept", Some("bob"), "").await;

    let closed = app
        .admin(Method::POST, &format!("/admin/slots/{slot}/close"), "")
        .await;
    assert_eq!(closed.slot(200)["closed"], true);
    assert_eq!(app.available_ids("").await, [other]);
    app.hold(slot, "after", None, "")
        .await
        .problem(409, "slot_closed");
    // The refused key was not spent: it works on another slot.
    app.held(other, "after", None, "").await;
    // Closing again is no change.
    let again = app
        .admin(Method::POST, &format!("/admin/slots/{slot}/close"), "")
        .await;
    assert_eq!(again.slot(200)["closed"], true);

    let confirmed = app.on_hold(Method::POST, held, "/confirm", None).await;
    assert_eq!(confirmed.hold(200)["status"], "confirmed");
    let renewed = app.on_hold(Method::POST, kept, "/renew", Some("bob")).await;
    assert_eq!(renewed.hold(200)["status"], "held");
    let cancelled = app.on_hold(Method::DELETE, kept, "", Some("bob")).await;
    assert_eq!(cancelled.hold(200)["status"], "cancelled");
    let summary = app.summary(slot).await;
    assert_eq!(
        (
            &summary["closed"],
            &summary["remaining"],
            &summary["confirmed"]
        ),
        (&json!(true), &json!(2), &json!(1))
    );

    let reopened = app
        .admin(Method::POST, &format!("/admin/slots/{slot}/reopen"), "")
        .await;
    assert_eq!(reopened.slot(200)["closed"], false);
    assert_eq!(app.available_ids("").await, [slot, other]);
    assert_eq!(app.remaining(slot).await, Some(2));
    app.held(slot, "reopened", None, "").await;
    assert_eq!(app.remaining(slot).await, Some(1));
}

/// Removal is 409 `slot_in_use` (saying how many units are held and confirmed) until nothing
/// is; then the slot takes no holds (`slot_not_found`) and leaves availability, while the
/// listing, the slot itself, its roster and its old holds stay readable.
async fn removal_waits_until_nothing_is_held_or_confirmed(app: App) {
    let (slot, held, booked) = app.taken(5).await;
    let path = format!("/admin/slots/{slot}");

    let before = app.state().await;
    // The detail names the slot, then its units held and confirmed.
    let in_use = || async {
        let reply = app.admin(Method::DELETE, &path, "").await;
        let detail = reply.problem(409, "slot_in_use");
        (numbers_in(detail), detail.to_owned())
    };
    let (numbers, detail) = in_use().await;
    assert_eq!(numbers, [slot, 2, 1], "{detail}");
    assert_eq!(app.state().await, before);

    app.on_hold(Method::DELETE, held, "", Some("alice"))
        .await
        .hold(200);
    let (numbers, detail) = in_use().await;
    assert_eq!(numbers, [slot, 0, 1], "{detail}");
    app.on_hold(Method::DELETE, booked, "", None)
        .await
        .hold(200);

    // An expired hold does not keep the slot.
    let expiring = app.held(slot, "expiring", None, "").await;
    app.clock.advance(Duration::minutes(5));

    let removed = app.admin(Method::DELETE, &path, "").await;
    let removed = removed.slot(200).clone();
    assert_eq!(removed["removed_at"], wire_at(Duration::minutes(5)));
    assert_eq!(app.available_ids("").await, Vec::<i64>::new());
    app.hold(slot, "late", None, "")
        .await
        .problem(404, "slot_not_found");
    // A key used before the removal still replays its hold.
    let replay = app
        .hold(slot, "held", Some("alice"), r#"{"quantity": 2}"#)
        .await;
    assert_eq!(replay.hold(201)["status"], "cancelled");

    let summary = app.summary(slot).await;
    assert_eq!(summary["removed_at"], removed["removed_at"]);
    assert_eq!(app.admin(Method::GET, &path, "").await.slot(200), &removed);
    for (hold, owner, status) in [
        (held, Some("alice"), "cancelled"),
        (booked, None, "cancelled"),
        (expiring, None, "expired"),
    ] {
        let read = app.on_hold(Method::GET, hold, "", owner).await;
        assert_eq!(read.hold(200)["status"], status);
    }
    let roster = app.admin(Method::GET, &format!("{path}/holds"), "").await;
    assert_eq!(roster.ok(200)["holds"].as_array().unwrap().len(), 3);

    // A removed slot cannot be changed or removed again.
    let after = app.state().await;
    for (method, suffix, body) in [
        (Method::DELETE, "", ""),
        (Method::POST, "/capacity", r#"{"capacity": 9}"#),
        (Method::POST, "/close", ""),
        (Method::POST, "/reopen", ""),
    ] {
        app.admin(method, &format!("{path}{suffix}"), body)
            .await
            .problem(404, "slot_not_found");
    }
    assert_eq!(app.state().await, after);
}

/// The listing pages by `starts_at` then id, `next_after` leading from each full page to the
/// next and `null` after the last; it reads the same under filters.
async fn listing_pages_through_every_slot(app: App) {
    // Seven slots, two pairs starting together, created out of order.
    let mut expected = Vec::new();
    for (starts_in, resource) in [
        (4, Some("r")),
        (2, None),
        (4, None),
        (1, Some("r")),
        (3, Some("r")),
        (2, Some("r")),
        (5, None),
    ] {
        let slot = app.create(1, starts_in, resource).await;
        expected.push((starts_in, id(&slot), resource.is_some()));
    }
    expected.sort();
    let all: Vec<i64> = expected.iter().map(|e| e.1).collect();

    for limit in [1, 2, 3, 6, 7, 100] {
        let mut seen = Vec::new();
        let mut query = format!("limit={limit}");
        let mut pages = 0;
        loop {
            let page = app.listing(&query).await;
            pages += 1;
            let slots = page["slots"].as_array().unwrap();
            assert!(slots.len() <= limit, "{page}");
            seen.extend(slots.iter().map(id));
            match page["next_after"].as_str() {
                Some(cursor) => {
                    assert_eq!(slots.len(), limit, "a page before the last is full: {page}");
                    let last = slots.last().unwrap();
                    let micros =
                        chrono::DateTime::parse_from_rfc3339(last["starts_at"].as_str().unwrap())
                            .unwrap()
                            .timestamp_micros();
                    assert_eq!(cursor, format!("{micros}_{}", id(last)));
                    query = format!("limit={limit}&after={cursor}");
                }
                None => break,
            }
            assert!(pages <= 8, "no end in sight");
        }
        assert_eq!(seen, all, "limit {limit}");
        // A full last page leads to an empty one.
        assert_eq!(
            pages,
            7usize.div_ceil(limit) + usize::from(7 % limit == 0 && limit <= 7)
        );
    }

    // The default limit holds them all; pages of one resource follow the same order.
    assert_eq!(app.listing("").await["slots"].as_array().unwrap().len(), 7);
    let of_r: Vec<i64> = expected.iter().filter(|e| e.2).map(|e| e.1).collect();
    let first = app.listing("resource=r&limit=2").await;
    let cursor = first["next_after"].as_str().unwrap().to_owned();
    let second = app
        .listing(&format!("resource=r&limit=2&after={cursor}"))
        .await;
    let paged: Vec<i64> = [first, second]
        .iter()
        .flat_map(|page| {
            page["slots"]
                .as_array()
                .unwrap()
                .iter()
                .map(id)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(paged, of_r);
}

/// The roster lists a slot's holds of every owner and status, by id, in pages; an unknown
/// slot is 404 `slot_not_found`, not an empty page.
async fn roster_shows_every_owners_holds(app: App) {
    let slot = id(&app.create(10, 2, None).await);
    let other = id(&app.create(10, 3, None).await);
    let alice = app
        .held(slot, "a", Some("alice"), r#"{"quantity": 3}"#)
        .await;
    let bob = app.held(slot, "b", Some("bob"), "").await;
    app.held(other, "elsewhere", None, "").await;
    let anon = app.held(slot, "c", None, "").await;
    app.on_hold(Method::POST, bob, "/confirm", Some("bob"))
        .await
        .hold(200);
    app.on_hold(Method::DELETE, anon, "", None).await.hold(200);

    let path = format!("/admin/slots/{slot}/holds");
    let roster = app.admin(Method::GET, &path, "").await;
    let roster = roster.ok(200);
    assert_eq!(roster["next_after"], Value::Null);
    let holds = roster["holds"].as_array().unwrap();
    let seen: Vec<(i64, &str, &Value, i64)> = holds
        .iter()
        .map(|h| {
            (
                h["hold_id"].as_i64().unwrap(),
                h["status"].as_str().unwrap(),
                &h["owner"],
                h["quantity"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (alice, "held", &json!("alice"), 3),
            (bob, "confirmed", &json!("bob"), 1),
            (anon, "cancelled", &Value::Null, 1),
        ]
    );
    assert!(holds[0]["created_at"].is_string());

    let first = app.admin(Method::GET, &format!("{path}?limit=2"), "").await;
    let first = first.ok(200);
    assert_eq!(first["holds"].as_array().unwrap().len(), 2);
    assert_eq!(first["next_after"], bob);
    let rest = app
        .admin(Method::GET, &format!("{path}?limit=2&after={bob}"), "")
        .await;
    assert_eq!(rest.ok(200)["holds"][0]["hold_id"], anon);
    assert_eq!(rest.body["next_after"], Value::Null);

    let empty = id(&app.create(1, 4, None).await);
    let none = app
        .admin(Method::GET, &format!("/admin/slots/{empty}/holds"), "")
        .await;
    assert_eq!(none.ok(200), &json!({"holds": [], "next_after": null}));
    app.admin(Method::GET, &format!("/admin/slots/{UNKNOWN}/holds"), "")
        .await
        .problem(404, "slot_not_found");
}

// ---- bad input ------------------------------------------------------------------------------

/// Every malformed request gets its 4xx problem and leaves the listing and availability as
/// they were.
async fn bad_admin_input_is_refused_and_changes_nothing(app: App) {
    let slot = id(&app.create(4, 2, Some("room-1")).await);
    app.held(slot, "one", None, "").await;
    let before = app.state().await;
    let long = "r".repeat(256);
    let slot_body = |fields: Value| -> String {
        let mut body = json!({"starts_at": at(5), "ends_at": at(6), "capacity": 2});
        for (k, v) in fields.as_object().unwrap() {
            body[k] = v.clone();
        }
        body.to_string()
    };

    let create = "/admin/slots".to_owned();
    let capacity = format!("/admin/slots/{slot}/capacity");
    let cases: Vec<(Method, String, String, u16, &str)> = vec![
        // Creating: capacity, times, resource, shape.
        (Method::POST, create.clone(), slot_body(json!({"capacity": 0})), 400, "invalid_slot"),
        (Method::POST, create.clone(), slot_body(json!({"capacity": -1})), 400, "invalid_slot"),
        (Method::POST, create.clone(), r#"{"starts_at": "2030-06-01T13:00:00Z", "ends_at": "2030-06-01T14:00:00Z", "capacity": 1e12}"#.into(), 400, "invalid_slot"),
        (Method::POST, create.clone(), slot_body(json!({"capacity": 2147483648_i64})), 400, "invalid_slot"),
        (Method::POST, create.clone(), slot_body(json!({"capacity": 9223372036854775808_u64})), 400, "invalid_slot"),
        (Method::POST, create.clone(), r#"{"starts_at": "2030-06-01T13:00:00Z", "ends_at": "2030-06-01T14:00:00Z", "capacity": 100000000000000000000000}"#.into(), 400, "invalid_slot"),
        (Method::POST, create.clone(), slot_body(json!({"capacity": 2.5})), 400, "invalid_slot"),
        (Method::POST, create.clone(), slot_body(json!({"ends_at": at(5)})), 400, "invalid_slot"),
        (Method::POST, create.clone(), slot_body(json!({"ends_at": at(4)})), 400, "invalid_slot"),
        (Method::POST, create.clone(), slot_body(json!({"ends_at": "2030-06-01T15:00:00+02:00"})), 400, "invalid_slot"),
        (Method::POST, create.clone(), slot_body(json!({"resource": ""})), 400, "invalid_resource"),
        (Method::POST, create.clone(), slot_body(json!({"resource": "room 1"})), 400, "invalid_resource"),
        (Method::POST, create.clone(), slot_body(json!({"resource": "raum-ü"})), 400, "invalid_resource"),
        (Method::POST, create.clone(), slot_body(json!({"resource": long})), 400, "invalid_resource"),
        (Method::POST, create.clone(), slot_body(json!({"resource": 7})), 400, "invalid_body"),
        (Method::POST, create.clone(), slot_body(json!({"colour": "red"})), 400, "invalid_body"),
        (Method::POST, create.clone(), slot_body(json!({"remaining": 1})), 400, "invalid_body"),
        (Method::POST, create.clone(), slot_body(json!({"capacity": "2"})), 400, "invalid_body"),
        (Method::POST, create.clone(), slot_body(json!({"starts_at": "tomorrow"})), 400, "invalid_body"),
        (Method::POST, create.clone(), slot_body(json!({"starts_at": 1_900_000_000})), 400, "invalid_body"),
        (Method::POST, create.clone(), slot_body(json!({"ends_at": null})), 400, "invalid_body"),
        (Method::POST, create.clone(), r#"{"starts_at": "2030-06-01T13:00:00Z", "capacity": 1}"#.into(), 400, "invalid_body"),
        (Method::POST, create.clone(), String::new(), 400, "invalid_body"),
        (Method::POST, create.clone(), "{}".into(), 400, "invalid_body"),
        (Method::POST, create.clone(), "{".into(), 400, "invalid_body"),
        (Method::POST, create.clone(), r#"["2030-06-01T13:00:00Z", "2030-06-01T14:00:00Z", 2]"#.into(), 400, "invalid_body"),
        (Method::POST, create.clone(), r#""slot""#.into(), 400, "invalid_body"),
        (Method::POST, create.clone(), "null".into(), 400, "invalid_body"),
        (Method::POST, create.clone(), format!("{} {}", slot_body(json!({})), slot_body(json!({}))), 400, "invalid_body"),
        (Method::PUT, create.clone(), slot_body(json!({})), 405, "method_not_allowed"),
        // Changing the capacity.
        (Method::POST, capacity.clone(), r#"{"capacity": 0}"#.into(), 400, "invalid_slot"),
        (Method::POST, capacity.clone(), r#"{"capacity": -5}"#.into(), 400, "invalid_slot"),
        (Method::POST, capacity.clone(), r#"{"capacity": 1e12}"#.into(), 400, "invalid_slot"),
        (Method::POST, capacity.clone(), r#"{"capacity": 2147483648}"#.into(), 400, "invalid_slot"),
        (Method::POST, capacity.clone(), r#"{"capacity": 18446744073709551616}"#.into(), 400, "invalid_slot"),
        (Method::POST, capacity.clone(), r#"{"capacity": 3.0}"#.into(), 400, "invalid_slot"),
        (Method::POST, capacity.clone(), r#"{"capacity": "3"}"#.into(), 400, "invalid_body"),
        (Method::POST, capacity.clone(), r#"{"capacity": null}"#.into(), 400, "invalid_body"),
        (Method::POST, capacity.clone(), r#"{"capacity": 3, "remaining": 3}"#.into(), 400, "invalid_body"),
        (Method::POST, capacity.clone(), "{}".into(), 400, "invalid_body"),
        (Method::POST, capacity.clone(), String::new(), 400, "invalid_body"),
        (Method::POST, capacity.clone(), "[3]".into(), 400, "invalid_body"),
        (Method::POST, capacity.clone(), "3".into(), 400, "invalid_body"),
        (Method::POST, format!("/admin/slots/{UNKNOWN}/capacity"), r#"{"capacity": 3}"#.into(), 404, "slot_not_found"),
        (Method::POST, "/admin/slots/99999999999999999999/capacity".into(), r#"{"capacity": 3}"#.into(), 404, "slot_not_found"),
        (Method::POST, "/admin/slots/abc/capacity".into(), r#"{"capacity": 3}"#.into(), 404, "not_found"),
        (Method::POST, "/admin/slots/-1/capacity".into(), r#"{"capacity": 3}"#.into(), 404, "not_found"),
        (Method::GET, capacity.clone(), String::new(), 405, "method_not_allowed"),
        // Unknown slots elsewhere.
        (Method::GET, format!("/admin/slots/{UNKNOWN}"), String::new(), 404, "slot_not_found"),
        (Method::POST, format!("/admin/slots/{UNKNOWN}/close"), String::new(), 404, "slot_not_found"),
        (Method::POST, format!("/admin/slots/{UNKNOWN}/reopen"), String::new(), 404, "slot_not_found"),
        (Method::DELETE, format!("/admin/slots/{UNKNOWN}"), String::new(), 404, "slot_not_found"),
        (Method::DELETE, "/admin/slots/+1".into(), String::new(), 404, "not_found"),
        (Method::GET, "/admin/nothing".into(), String::new(), 404, "not_found"),
        // The listing's query.
        (Method::GET, "/admin/slots?limit=0".into(), String::new(), 400, "invalid_page"),
        (Method::GET, "/admin/slots?limit=1001".into(), String::new(), 400, "invalid_page"),
        (Method::GET, "/admin/slots?limit=-1".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?limit=ten".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?limit=99999999999".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?after=abc".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?after=12".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?after=12_".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?after=_12".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?after=1_-2".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?after=99999999999999999999_1".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?from=yesterday".into(), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?to=2030-06-01".into(), String::new(), 400, "invalid_query"),
        (Method::GET, format!("/admin/slots?from={}&to={}", at(3), at(2)), String::new(), 400, "invalid_query"),
        (Method::GET, "/admin/slots?resource=".into(), String::new(), 400, "invalid_resource"),
        (Method::GET, "/admin/slots?resource=room%201".into(), String::new(), 400, "invalid_resource"),
        (Method::GET, format!("/admin/slots?resource={long}"), String::new(), 400, "invalid_resource"),
        (Method::GET, "/admin/slots?colour=red".into(), String::new(), 400, "invalid_query"),
        // The roster's query.
        (Method::GET, format!("/admin/slots/{slot}/holds?limit=0"), String::new(), 400, "invalid_page"),
        (Method::GET, format!("/admin/slots/{slot}/holds?limit=1001"), String::new(), 400, "invalid_page"),
        (Method::GET, format!("/admin/slots/{slot}/holds?after=x"), String::new(), 400, "invalid_query"),
        (Method::GET, format!("/admin/slots/{slot}/holds?after=-1"), String::new(), 400, "invalid_query"),
        (Method::GET, format!("/admin/slots/{slot}/holds?colour=red"), String::new(), 400, "invalid_query"),
    ];
    for (method, path, body, status, code) in &cases {
        let reply = app.admin(method.clone(), path, body).await;
        assert_eq!(
            (reply.status, reply.code.as_deref()),
            (*status, Some(*code)),
            "{method} {path} {body}: {}",
            reply.body
        );
        assert_eq!(app.state().await, before, "{method} {path} {body}");
    }

    // Availability's new parameter, on the seed's route.
    for query in [
        "resource=",
        "resource=room%201",
        "resource=%C3%BC",
        &format!("resource={long}"),
    ] {
        let reply = app
            .call(Method::GET, &format!("/slots/availability?{query}"), "")
            .await;
        reply.problem(400, "invalid_resource");
    }
    assert_eq!(app.state().await, before);
}

// ---- the seed's view ------------------------------------------------------------------------

/// Whatever the administration does, a seed client sees the seed's bodies: availability
/// entries of slots without a resource have exactly five fields and hold bodies six.
async fn seed_clients_see_nothing_new(app: App) {
    let plain = id(&app.create(3, 2, None).await);
    let roomed = id(&app.create(3, 3, Some("room-1")).await);
    let entries = app.availability("").await;
    assert_fields(&entries[0], &ENTRY_FIELDS);
    let mut with_resource: Vec<&str> = ENTRY_FIELDS.to_vec();
    with_resource.push("resource");
    with_resource.sort_unstable();
    assert_fields(&entries[1], &with_resource);

    for slot in [plain, roomed] {
        let hold = app.held(slot, &format!("k-{slot}"), None, "").await;
        app.admin(
            Method::POST,
            &format!("/admin/slots/{slot}/capacity"),
            r#"{"capacity": 5}"#,
        )
        .await
        .slot(200);
        app.admin(Method::POST, &format!("/admin/slots/{slot}/close"), "")
            .await
            .slot(200);
        app.on_hold(Method::GET, hold, "", None).await.hold(200);
        app.on_hold(Method::POST, hold, "/confirm", None)
            .await
            .hold(200);
        app.admin(Method::POST, &format!("/admin/slots/{slot}/reopen"), "")
            .await
            .slot(200);
        app.held(slot, &format!("k2-{slot}"), None, "").await;
        app.on_hold(Method::DELETE, hold, "", None).await.hold(200);
    }
    for entry in app.availability("").await {
        let expected: &[&str] = if entry["slot_id"] == plain {
            &ENTRY_FIELDS
        } else {
            &with_resource
        };
        assert_fields(&entry, expected);
        assert_eq!(entry["remaining"], 4);
    }
}

/// Times at the ends of what RFC 3339 can write, and cursors far beyond what a store keeps,
/// are stored, listed or refused like any others: never a 5xx.
async fn extreme_times_are_never_a_server_error(app: App) {
    // (starts_at, ends_at, status)
    for (starts_at, ends_at, status) in [
        ("0000-01-01T00:00:00Z", "0000-01-01T01:00:00Z", 201),
        ("9999-12-31T22:00:00Z", "9999-12-31T23:59:59.999999Z", 201),
        ("2030-06-30T23:59:60Z", "2030-07-01T01:00:00Z", 201),
        // 2030-06-02T08:59Z to 2030-06-01T09:01Z.
        (
            "2030-06-01T09:00:00-23:59",
            "2030-06-02T09:00:00+23:59",
            400,
        ),
    ] {
        let body = json!({"starts_at": starts_at, "ends_at": ends_at, "capacity": 1});
        let reply = app
            .admin(Method::POST, "/admin/slots", &body.to_string())
            .await;
        assert_eq!(reply.status, status, "{starts_at}: {}", reply.body);
    }
    // (query, slots listed by the operator's listing, or None for 400 `invalid_query`)
    for (query, listed) in [
        ("after=-8000000000000000000_1", Some(3)),
        ("after=8000000000000000000_1", Some(0)),
        ("after=-9223372036854775808_1", None),
        ("after=9223372036854775807_1", None),
        ("from=0000-01-01T00:00:00Z&to=9999-12-31T23:59:59Z", Some(3)),
        ("to=0000-01-01T00:00:00Z", Some(0)),
    ] {
        let reply = app
            .admin(Method::GET, &format!("/admin/slots?{query}"), "")
            .await;
        match listed {
            Some(n) => assert_eq!(
                reply.ok(200)["slots"].as_array().unwrap().len(),
                n,
                "{query}"
            ),
            None => _ = reply.problem(400, "invalid_query"),
        }
    }
    for query in [
        "from=0000-01-01T00:00:00Z&to=9999-12-31T23:59:59Z",
        "to=0000-01-01T00:00:00Z",
        "from=9999-12-31T23:59:59.999999Z",
    ] {
        let reply = app
            .call(Method::GET, &format!("/slots/availability?{query}"), "")
            .await;
        reply.ok(200);
    }
}
