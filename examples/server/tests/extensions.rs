//! The server's optional extensions, driven through the router with `oneshot` (no socket),
//! over SQLite, PostgreSQL and MariaDB/MySQL: the `Owner-Id` header, the hold request body
//! (`quantity`, `lifetime_seconds`), `POST /holds/{hold}/renew`, `GET /holds`, and the
//! idempotency-key rule across them. Every hold body must keep the seed's six fields whatever
//! the extensions do.
//!
//! Every test runs once per backend (modules `sqlite`, `postgres` and `mysql`), on a fresh
//! database, with a manual clock and no availability cache, so `GET /slots/availability` shows
//! each change at once.

#[macro_use]
mod common;

use std::path::PathBuf;

use axum::http::{Method, Request};
use chrono::Duration;
use common::{
    assert_fields, numbers_in, owned, wire_at, Oneshot as App, Reply, HOLD_FIELDS, UNKNOWN,
};
use serde_json::Value;
use slot_booking::{Clock, HoldId, Scope, SlotId};
use slot_booking_server::Config;

on_every_backend!(
    open: open, worker_threads: 2;
    owned_hold_is_hidden_from_other_owners_and_anonymous_clients,
    anonymous_hold_is_hidden_from_owners,
    quantity_takes_that_many_units_and_gives_them_all_back,
    bad_hold_bodies_are_refused_and_change_nothing,
    requested_lifetime_sets_expires_at,
    bad_owner_ids_are_refused_on_every_route_and_change_nothing,
    renew_moves_expires_at_forward,
    renewal_stops_at_the_maximum_hold_life,
    renew_refuses_expired_cancelled_and_unknown_holds,
    list_pages_through_the_owners_holds_only,
    list_refuses_a_missing_owner_and_bad_pages,
    key_reuse_is_a_replay_only_for_the_same_slot_quantity_and_owner,
    every_hold_body_has_exactly_six_fields,
);

// ---- harness --------------------------------------------------------------------------------

/// A `GET /holds` entry, sorted: the six fields plus quantity, owner and creation time.
const LISTED_FIELDS: [&str; 9] = [
    "cancelled_at",
    "confirmed_at",
    "created_at",
    "expires_at",
    "hold_id",
    "owner",
    "quantity",
    "slot_id",
    "status",
];

/// The router (default configuration) over a fresh database, an engine on a manual clock
/// (starting at [`common::epoch`]) without an availability cache, and the store for looking
/// underneath.
async fn open(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    App::open(url, sqlite_dir, &Config::default()).await
}

impl Reply {
    /// Asserts a fresh `201 Created` hold (not a replay), and returns the body.
    fn created(&self) -> &Value {
        assert!(
            !self.replayed(),
            "a fresh hold, not a replay: {}",
            self.body
        );
        self.hold(201)
    }
}

/// The `hold_id` of a hold body.
fn id(body: &Value) -> i64 {
    body["hold_id"].as_i64().unwrap()
}

/// The four routes on one existing hold, each as (method, path).
fn hold_routes(hold: i64) -> [(Method, String); 4] {
    [
        (Method::GET, format!("/holds/{hold}")),
        (Method::POST, format!("/holds/{hold}/confirm")),
        (Method::POST, format!("/holds/{hold}/renew")),
        (Method::DELETE, format!("/holds/{hold}")),
    ]
}

impl App {
    /// A slot of `capacity` units, from one hour after the epoch for an hour.
    async fn slot(&self, capacity: i32) -> SlotId {
        self.slot_starting(capacity, Duration::hours(1)).await
    }

    /// A slot of `capacity` units, from `starts_in` after the epoch for an hour.
    async fn slot_starting(&self, capacity: i32, starts_in: Duration) -> SlotId {
        common::new_slot(&self.engine, capacity, starts_in).await
    }

    /// `method path`, with `Owner-Id: owner` when given, and `body`.
    async fn call(&self, method: Method, path: &str, owner: Option<&str>, body: &str) -> Reply {
        let request = Request::builder().method(method).uri(path);
        self.send(owned(request, owner), body).await
    }

    /// `GET /holds/{hold}` as `owner`.
    async fn get(&self, hold: i64, owner: Option<&str>) -> Reply {
        self.call(Method::GET, &format!("/holds/{hold}"), owner, "")
            .await
    }

    /// `POST /holds/{hold}/renew` as `owner`, with `body`.
    async fn renew(&self, hold: i64, owner: Option<&str>, body: &str) -> Reply {
        self.call(Method::POST, &format!("/holds/{hold}/renew"), owner, body)
            .await
    }

    /// `GET /holds?{query}` as `owner`.
    async fn list(&self, owner: Option<&str>, query: &str) -> Reply {
        self.call(Method::GET, &format!("/holds?{query}"), owner, "")
            .await
    }

    /// The slot's free units as `GET /slots/availability` reports them.
    async fn remaining(&self, slot: SlotId) -> i64 {
        let reply = self
            .call(Method::GET, "/slots/availability", None, "")
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let slots = reply.body["slots"].as_array().unwrap();
        let entry = slots
            .iter()
            .find(|s| s["slot_id"] == slot.0)
            .unwrap_or_else(|| panic!("slot {slot} not listed: {}", reply.body));
        entry["remaining"].as_i64().unwrap()
    }

    /// Everything a request could change about these slots and holds, read from the store
    /// (holds in the back office's scope, whoever owns them).
    async fn state(&self, slots: &[SlotId], holds: &[i64]) -> String {
        let mut out = String::new();
        for &slot in slots {
            out += &format!("{:?};", self.store.get_slot(slot).await.unwrap());
        }
        for &hold in holds {
            let read = self
                .store
                .get_hold(HoldId(hold), &Scope::BackOffice, self.clock.now())
                .await
                .unwrap();
            out += &format!("{:?};", read.outcome);
        }
        out
    }
}

// ---- Owner-Id -------------------------------------------------------------------------------

/// A hold placed with `Owner-Id` answers another owner, or a caller without the header, on
/// every route exactly like an id nobody holds; the hold and the slot stay as they were, and
/// the owner still has it.
async fn owned_hold_is_hidden_from_other_owners_and_anonymous_clients(app: App) {
    let slot = app.slot(4).await;
    let hold = app
        .hold(slot, "alice-1", Some("alice"), "")
        .await
        .created()
        .clone();
    let hold_id = id(&hold);
    assert_eq!(app.remaining(slot).await, 3);
    let before = app.state(&[slot], &[hold_id]).await;

    for (method, path) in hold_routes(hold_id) {
        let unknown_path = path.replace(&hold_id.to_string(), &UNKNOWN.to_string());
        let unknown = app.call(method.clone(), &unknown_path, None, "").await;
        unknown.problem(404, "hold_not_found");
        // The same problem as for the unknown id, but for this id.
        let mut expected = unknown.body.clone();
        expected["detail"] = Value::from(
            expected["detail"]
                .as_str()
                .unwrap()
                .replace(&UNKNOWN.to_string(), &hold_id.to_string()),
        );
        // Owner ids are case-sensitive: "Alice" is somebody else.
        for caller in [None, Some("bob"), Some("Alice")] {
            let reply = app.call(method.clone(), &path, caller, "").await;
            reply.problem(404, "hold_not_found");
            assert_eq!(reply.body, expected, "{method} {path} as {caller:?}");
        }
    }
    assert_eq!(app.state(&[slot], &[hold_id]).await, before);
    assert_eq!(app.remaining(slot).await, 3);
    assert_eq!(
        app.list(Some("bob"), "").await.body["holds"],
        Value::Array(vec![])
    );

    // The owner still sees, confirms and cancels it.
    assert_eq!(app.get(hold_id, Some("alice")).await.hold(200), &hold);
    let confirm = format!("/holds/{hold_id}/confirm");
    let confirmed = app.call(Method::POST, &confirm, Some("alice"), "").await;
    assert_eq!(confirmed.hold(200)["status"], "confirmed");
    let path = format!("/holds/{hold_id}");
    app.call(Method::DELETE, &path, None, "")
        .await
        .problem(404, "hold_not_found");
    assert_eq!(app.remaining(slot).await, 3, "still confirmed");
    let cancelled = app.call(Method::DELETE, &path, Some("alice"), "").await;
    assert_eq!(cancelled.hold(200)["status"], "cancelled");
    assert_eq!(app.remaining(slot).await, 4);
}

/// A hold placed without `Owner-Id` is the anonymous clients' alone: an owner gets
/// `hold_not_found` on every route, and does not find it in `GET /holds`.
async fn anonymous_hold_is_hidden_from_owners(app: App) {
    let slot = app.slot(2).await;
    let hold = app.hold(slot, "anon-1", None, "").await.created().clone();
    let hold_id = id(&hold);
    let before = app.state(&[slot], &[hold_id]).await;

    for (method, path) in hold_routes(hold_id) {
        let reply = app.call(method.clone(), &path, Some("alice"), "").await;
        reply.problem(404, "hold_not_found");
    }
    assert_eq!(app.state(&[slot], &[hold_id]).await, before);
    assert_eq!(app.remaining(slot).await, 1);
    assert_eq!(
        app.list(Some("alice"), "").await.body["holds"],
        Value::Array(vec![])
    );
    assert_eq!(app.get(hold_id, None).await.hold(200), &hold);
}

// ---- the hold body: quantity and lifetime ---------------------------------------------------

/// `quantity` takes that many units together or none; cancelling or expiring gives them all
/// back.
async fn quantity_takes_that_many_units_and_gives_them_all_back(app: App) {
    let slot = app.slot(5).await;
    assert_eq!(app.remaining(slot).await, 5);

    let three = app
        .hold(slot, "three", Some("alice"), r#"{"quantity": 3}"#)
        .await;
    let three = id(three.created());
    assert_eq!(app.remaining(slot).await, 2);
    assert_eq!(
        app.list(Some("alice"), "").await.body["holds"][0]["quantity"],
        3
    );

    // Three more do not fit in the two left: nothing is taken.
    app.hold(slot, "three-more", None, r#"{"quantity": 3}"#)
        .await
        .problem(409, "sold_out");
    assert_eq!(app.remaining(slot).await, 2);

    let two = app
        .hold(slot, "two", Some("bob"), r#"{"quantity": 2}"#)
        .await;
    let two = id(two.created());
    assert_eq!(app.remaining(slot).await, 0);
    app.hold(slot, "one-more", None, "")
        .await
        .problem(409, "sold_out");

    // Cancelling the three-unit hold gives all three back; confirming the other keeps two.
    let cancel = format!("/holds/{three}");
    let cancelled = app.call(Method::DELETE, &cancel, Some("alice"), "").await;
    assert_eq!(cancelled.hold(200)["status"], "cancelled");
    assert_eq!(app.remaining(slot).await, 3);
    let confirm = format!("/holds/{two}/confirm");
    app.call(Method::POST, &confirm, Some("bob"), "")
        .await
        .hold(200);
    assert_eq!(app.remaining(slot).await, 3);

    // An expired three-unit hold gives all three back too.
    let expiring = app
        .hold(slot, "expiring", Some("alice"), r#"{"quantity": 3}"#)
        .await;
    let expiring = id(expiring.created());
    assert_eq!(app.remaining(slot).await, 0);
    app.clock.advance(Duration::minutes(5));
    assert_eq!(
        app.get(expiring, Some("alice")).await.hold(200)["status"],
        "expired"
    );
    assert_eq!(app.remaining(slot).await, 3);

    // The last three units can be taken together.
    let rest = app.hold(slot, "rest", None, r#"{"quantity": 3}"#).await;
    assert_eq!(rest.created()["status"], "held");
    assert_eq!(app.remaining(slot).await, 0);
}

/// A body that is not valid JSON, has an unknown field, or asks for a quantity or lifetime
/// out of bounds gets its 4xx problem; nothing changes, and its key stays unused.
async fn bad_hold_bodies_are_refused_and_change_nothing(app: App) {
    let slot = app.slot(5).await;
    let existing = app
        .hold(slot, "existing", Some("alice"), r#"{"quantity": 2}"#)
        .await;
    let existing = id(existing.created());
    let before = app.state(&[slot], &[existing]).await;

    // (body, status, code)
    let cases: [(&str, u16, &str); 22] = [
        ("{", 400, "invalid_body"),
        ("[3, 600]", 400, "invalid_body"),
        ("quantity=3", 400, "invalid_body"),
        (r#"{"quantity": 2, "colour": "red"}"#, 400, "invalid_body"),
        (r#"{"owner": "bob"}"#, 400, "invalid_body"),
        (r#"{"quantity": "2"}"#, 400, "invalid_body"),
        (r#"{"quantity": 2.5}"#, 400, "invalid_body"),
        (r#"{"lifetime_seconds": -1}"#, 400, "invalid_body"),
        (r#"{"lifetime_seconds": "600"}"#, 400, "invalid_body"),
        (r#"{"quantity": 2} {"quantity": 3}"#, 400, "invalid_body"),
        (r#"{"quantity": 0}"#, 400, "invalid_quantity"),
        (r#"{"quantity": 1001}"#, 400, "invalid_quantity"),
        (r#"{"quantity": -1}"#, 400, "invalid_quantity"),
        (r#"{"quantity": 2147483648}"#, 400, "invalid_quantity"),
        (
            r#"{"quantity": -9223372036854775808}"#,
            400,
            "invalid_quantity",
        ),
        (r#"{"quantity": 6}"#, 422, "quantity_exceeds_capacity"),
        (r#"{"quantity": 1000}"#, 422, "quantity_exceeds_capacity"),
        (r#"{"lifetime_seconds": 0}"#, 400, "invalid_lifetime"),
        (r#"{"lifetime_seconds": 3601}"#, 400, "invalid_lifetime"),
        (
            r#"{"lifetime_seconds": 18446744073709551615}"#,
            400,
            "invalid_lifetime",
        ),
        (
            r#"{"quantity": 2, "lifetime_seconds": 86400}"#,
            400,
            "invalid_lifetime",
        ),
        (
            r#"{"quantity": 1001, "lifetime_seconds": 600}"#,
            400,
            "invalid_quantity",
        ),
    ];
    for (i, (body, status, code)) in cases.iter().enumerate() {
        for owner in [None, Some("alice")] {
            let key = format!("bad-{i}-{}", owner.is_some());
            let reply = app.hold(slot, &key, owner, body).await;
            assert_eq!(
                (reply.status, reply.code.as_deref()),
                (*status, Some(*code)),
                "{body} as {owner:?}: {}",
                reply.body
            );
            assert_eq!(app.state(&[slot], &[existing]).await, before, "{body}");
            assert_eq!(app.remaining(slot).await, 3, "{body}");
        }
    }

    // No refused request left its key behind: each is fresh on another slot.
    let roomy = app.slot(100).await;
    for i in 0..cases.len() {
        for owner in [None, Some("alice")] {
            let key = format!("bad-{i}-{}", owner.is_some());
            app.hold(roomy, &key, owner, "").await.created();
        }
    }
    assert_eq!(app.remaining(slot).await, 3);
}

/// `lifetime_seconds` sets `expires_at` (1 s to 1 h); without it, or with an empty or
/// whitespace body, the hold lasts the server's five minutes.
async fn requested_lifetime_sets_expires_at(app: App) {
    let slot = app.slot(10).await;
    let expiry = |reply: Reply| reply.created()["expires_at"].clone();
    // Ten units: the seven holds below take 1 + 1 + 1 + 2 + 1 + 1 + 3.

    for (key, body) in [("none", ""), ("empty", "{}"), ("blank", " \r\n\t ")] {
        let reply = app.hold(slot, key, None, body).await;
        assert_eq!(expiry(reply), wire_at(Duration::minutes(5)), "{body:?}");
    }
    let quantity_only = app
        .hold(slot, "q", Some("alice"), r#"{"quantity": 2}"#)
        .await;
    assert_eq!(expiry(quantity_only), wire_at(Duration::minutes(5)));
    let shortest = app
        .hold(slot, "1s", Some("alice"), r#"{"lifetime_seconds": 1}"#)
        .await;
    let shortest = shortest.created().clone();
    assert_eq!(shortest["expires_at"], wire_at(Duration::seconds(1)));
    let longest = app
        .hold(slot, "1h", None, r#"{"lifetime_seconds": 3600}"#)
        .await;
    assert_eq!(expiry(longest), wire_at(Duration::hours(1)));
    let both = app
        .hold(
            slot,
            "both",
            Some("bob"),
            r#"{"quantity": 3, "lifetime_seconds": 600}"#,
        )
        .await;
    let both = both.created().clone();
    assert_eq!(both["expires_at"], wire_at(Duration::minutes(10)));
    assert_eq!(app.remaining(slot).await, 0);

    // One second later the shortest hold has expired, and its unit is free again.
    app.clock.advance(Duration::seconds(1));
    let shortest_id = id(&shortest);
    assert_eq!(
        app.get(shortest_id, Some("alice")).await.hold(200)["status"],
        "expired"
    );
    let confirm = format!("/holds/{shortest_id}/confirm");
    app.call(Method::POST, &confirm, Some("alice"), "")
        .await
        .problem(409, "hold_expired");
    assert_eq!(
        app.get(id(&both), Some("bob")).await.hold(200)["status"],
        "held"
    );
    assert_eq!(app.remaining(slot).await, 1);
}

/// A bad `Owner-Id` (not 1–255 visible ASCII, or sent twice) is 400 `invalid_owner` on every
/// hold route, before anything is read or changed; its idempotency key stays unused.
async fn bad_owner_ids_are_refused_on_every_route_and_change_nothing(app: App) {
    let slot = app.slot(3).await;
    let hold_id = id(app.hold(slot, "mine", Some("alice"), "").await.created());
    let before = app.state(&[slot], &[hold_id]).await;
    let too_long = "o".repeat(256);

    let bad_owners: [&[&[u8]]; 7] = [
        &[b"has space"],
        &[b""],
        &[b"tab\there"],
        &[b"caf\xe9"],
        &[too_long.as_bytes()],
        &[b"alice", b"alice"],
        &[b"alice", b"bob"],
    ];
    for (i, owner) in bad_owners.iter().enumerate() {
        let hold_path = format!("/slots/{slot}/hold");
        let mut routes = vec![
            (Method::POST, hold_path),
            (Method::GET, "/holds".to_owned()),
        ];
        routes.extend(hold_routes(hold_id));
        for (method, path) in routes {
            let mut request = Request::builder()
                .method(method.clone())
                .uri(&path)
                .header("idempotency-key", format!("bad-owner-{i}"));
            for value in *owner {
                request = request.header("owner-id", *value);
            }
            let reply = app.send(request, r#"{"quantity": 1}"#).await;
            reply.problem(400, "invalid_owner");
            assert_eq!(
                app.state(&[slot], &[hold_id]).await,
                before,
                "{method} {path} {owner:?}"
            );
        }
    }
    assert_eq!(app.remaining(slot).await, 2);
    assert_eq!(
        app.get(hold_id, Some("alice")).await.hold(200)["status"],
        "held"
    );

    // Their keys are still free, and 255 characters is a valid owner id.
    let longest = "o".repeat(255);
    let placed = app.hold(slot, "bad-owner-0", Some(&longest), "").await;
    let placed = id(placed.created());
    assert_eq!(
        app.get(placed, Some(&longest)).await.hold(200)["status"],
        "held"
    );
    assert_eq!(
        app.list(Some(&longest), "").await.body["holds"][0]["owner"],
        longest
    );
}

// ---- renew ----------------------------------------------------------------------------------

/// Renewing moves `expires_at` to now plus the lifetime (the server's five minutes, or
/// `lifetime_seconds`), never earlier than it was; it takes no units. A bad body changes
/// nothing. A confirmed hold has nothing to renew and comes back unchanged.
async fn renew_moves_expires_at_forward(app: App) {
    let slot = app.slot(2).await;
    let owned = app.hold(slot, "owned", Some("alice"), "").await;
    let owned = id(owned.created());
    let anonymous = id(app.hold(slot, "anon", None, "").await.created());
    assert_eq!(app.remaining(slot).await, 0);

    app.clock.advance(Duration::minutes(4));
    let renewed = app.renew(owned, Some("alice"), "").await;
    let renewed = renewed.hold(200).clone();
    assert_eq!(renewed["status"], "held");
    assert_eq!(renewed["expires_at"], wire_at(Duration::minutes(9)));
    assert_eq!(app.get(owned, Some("alice")).await.hold(200), &renewed);
    let anon_renewed = app
        .renew(anonymous, None, r#"{"lifetime_seconds": 1200}"#)
        .await;
    assert_eq!(
        anon_renewed.hold(200)["expires_at"],
        wire_at(Duration::minutes(24))
    );

    let longer = app
        .renew(owned, Some("alice"), r#"{"lifetime_seconds": 600}"#)
        .await;
    assert_eq!(
        longer.hold(200)["expires_at"],
        wire_at(Duration::minutes(14))
    );
    // A shorter lifetime does not pull the expiry back.
    let shorter = app
        .renew(owned, Some("alice"), r#"{"lifetime_seconds": 60}"#)
        .await;
    assert_eq!(
        shorter.hold(200)["expires_at"],
        wire_at(Duration::minutes(14))
    );
    let whitespace = app.renew(owned, Some("alice"), "\n").await;
    assert_eq!(
        whitespace.hold(200)["expires_at"],
        wire_at(Duration::minutes(14))
    );
    assert_eq!(app.remaining(slot).await, 0, "renewal takes no units");

    let before = app.state(&[slot], &[owned, anonymous]).await;
    for (body, code) in [
        (r#"{"lifetime_seconds": 0}"#, "invalid_lifetime"),
        (r#"{"lifetime_seconds": 3601}"#, "invalid_lifetime"),
        (r#"{"quantity": 2}"#, "invalid_body"),
        (
            r#"{"lifetime_seconds": 600, "extra": true}"#,
            "invalid_body",
        ),
        (r#"{"lifetime_seconds": -600}"#, "invalid_body"),
        ("{", "invalid_body"),
        ("[600]", "invalid_body"),
    ] {
        app.renew(owned, Some("alice"), body)
            .await
            .problem(400, code);
        assert_eq!(
            app.state(&[slot], &[owned, anonymous]).await,
            before,
            "{body}"
        );
    }

    // Past the first expiry (08:05) the renewed hold still holds, and can be confirmed.
    app.clock.advance(Duration::minutes(6));
    assert_eq!(
        app.get(owned, Some("alice")).await.hold(200)["status"],
        "held"
    );
    assert_eq!(app.remaining(slot).await, 0);
    let confirm = format!("/holds/{owned}/confirm");
    let confirmed = app.call(Method::POST, &confirm, Some("alice"), "").await;
    let confirmed = confirmed.hold(200).clone();
    let again = app
        .renew(owned, Some("alice"), r#"{"lifetime_seconds": 600}"#)
        .await;
    assert_eq!(again.hold(200), &confirmed);
}

/// However often a hold is renewed, it never lives past its creation plus two hours (the
/// engine's default maximum hold life).
async fn renewal_stops_at_the_maximum_hold_life(app: App) {
    let slot = app.slot_starting(1, Duration::days(1)).await;
    let hour = r#"{"lifetime_seconds": 3600}"#;
    let hold_id = id(app.hold(slot, "long", Some("alice"), hour).await.created());

    app.clock.advance(Duration::minutes(50));
    let renewed = app.renew(hold_id, Some("alice"), hour).await;
    assert_eq!(
        renewed.hold(200)["expires_at"],
        wire_at(Duration::minutes(110))
    );
    app.clock.advance(Duration::minutes(50));
    let capped = app.renew(hold_id, Some("alice"), hour).await;
    assert_eq!(capped.hold(200)["expires_at"], wire_at(Duration::hours(2)));
    app.clock.advance(Duration::minutes(20));
    assert_eq!(
        app.get(hold_id, Some("alice")).await.hold(200)["status"],
        "expired"
    );
    assert_eq!(app.remaining(slot).await, 1);
}

/// An expired hold cannot be renewed (409 `hold_expired`), nor a cancelled one (409
/// `hold_cancelled`); an unknown id is 404. None of them changes.
async fn renew_refuses_expired_cancelled_and_unknown_holds(app: App) {
    let slot = app.slot(4).await;
    let mut holds = Vec::new();
    for owner in [Some("alice"), None] {
        let key = format!("expiring-{}", owner.is_some());
        let expiring = id(app.hold(slot, &key, owner, "").await.created());
        let key = format!("cancelled-{}", owner.is_some());
        let cancelled = id(app.hold(slot, &key, owner, "").await.created());
        let path = format!("/holds/{cancelled}");
        app.call(Method::DELETE, &path, owner, "").await.hold(200);
        holds.push((owner, expiring, cancelled));
    }
    app.clock.advance(Duration::minutes(5));
    let ids: Vec<i64> = holds.iter().flat_map(|&(_, e, c)| [e, c]).collect();
    let before = app.state(&[slot], &ids).await;

    for (owner, expiring, cancelled) in holds {
        for body in ["", r#"{"lifetime_seconds": 600}"#] {
            app.renew(expiring, owner, body)
                .await
                .problem(409, "hold_expired");
            app.renew(cancelled, owner, body)
                .await
                .problem(409, "hold_cancelled");
            app.renew(UNKNOWN, owner, body)
                .await
                .problem(404, "hold_not_found");
        }
        assert_eq!(
            app.get(expiring, owner).await.hold(200)["status"],
            "expired"
        );
    }
    assert_eq!(app.state(&[slot], &ids).await, before);
    assert_eq!(app.remaining(slot).await, 4);
}

// ---- GET /holds -----------------------------------------------------------------------------

/// `GET /holds` lists the caller's holds only, by id, with all nine fields and each status
/// resolved now; `limit` pages them, `next_after` is set exactly when a page is full, and
/// following it visits every hold once.
async fn list_pages_through_the_owners_holds_only(app: App) {
    let a = app.slot(10).await;
    let b = app.slot(10).await;
    // Alice's five holds, with others' in between; one second apart.
    let mut alice = Vec::new();
    let steps: [(&str, Option<&str>, SlotId, &str); 8] = [
        ("a1", Some("alice"), a, ""),
        ("b1", Some("bob"), a, ""),
        ("a2", Some("alice"), b, r#"{"quantity": 3}"#),
        ("n1", None, a, ""),
        ("a3", Some("alice"), a, r#"{"quantity": 2}"#),
        ("a4", Some("alice"), b, ""),
        ("n2", None, b, ""),
        ("a5", Some("alice"), a, r#"{"lifetime_seconds": 5}"#),
    ];
    for (key, owner, slot, body) in steps {
        let hold_id = id(app.hold(slot, key, owner, body).await.created());
        if owner == Some("alice") {
            alice.push(hold_id);
        }
        app.clock.advance(Duration::seconds(1));
    }
    let confirm = format!("/holds/{}/confirm", alice[2]);
    app.call(Method::POST, &confirm, Some("alice"), "")
        .await
        .hold(200);
    let cancel = format!("/holds/{}", alice[3]);
    app.call(Method::DELETE, &cancel, Some("alice"), "")
        .await
        .hold(200);
    app.clock.advance(Duration::seconds(10)); // alice's last hold expires

    let everything = app.list(Some("alice"), "").await;
    assert_eq!((everything.status, &everything.code), (200, &None));
    let mut keys: Vec<&str> = everything
        .body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["holds", "next_after"]);
    assert_eq!(
        everything.body["next_after"],
        Value::Null,
        "default limit 100, not full"
    );
    let holds = everything.body["holds"].as_array().unwrap();
    let ids: Vec<i64> = holds.iter().map(id).collect();
    assert_eq!(ids, alice);

    let expected = [
        (a, "held", 1, 0),
        (b, "held", 3, 2),
        (a, "confirmed", 2, 4),
        (b, "cancelled", 1, 5),
        (a, "expired", 1, 7),
    ];
    for (hold, (slot, status, quantity, second)) in holds.iter().zip(expected) {
        assert_fields(hold, &LISTED_FIELDS);
        assert_eq!(hold["slot_id"], slot.0, "{hold}");
        assert_eq!(hold["status"], status, "{hold}");
        assert_eq!(hold["quantity"], quantity, "{hold}");
        assert_eq!(hold["owner"], "alice", "{hold}");
        assert_eq!(
            hold["created_at"],
            wire_at(Duration::seconds(second)),
            "{hold}"
        );
        // The six fields agree with GET /holds/{hold}.
        let single = app.get(id(hold), Some("alice")).await;
        let single = single.hold(200);
        for field in HOLD_FIELDS {
            assert_eq!(hold[field], single[field], "{field} of {hold}");
        }
    }

    // Pages of two: 2, 2, 1, each `next_after` the last id of a full page.
    let mut pages = Vec::new();
    let mut query = "limit=2".to_owned();
    loop {
        let page = app.list(Some("alice"), &query).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let ids: Vec<i64> = page.body["holds"]
            .as_array()
            .unwrap()
            .iter()
            .map(id)
            .collect();
        let next = page.body["next_after"].as_i64();
        assert_eq!(
            next,
            (ids.len() == 2).then(|| *ids.last().unwrap()),
            "{}",
            page.body
        );
        pages.push(ids);
        match next {
            Some(after) => query = format!("after={after}&limit=2"),
            None => break,
        }
        assert!(pages.len() < 10, "paging does not end");
    }
    assert_eq!(
        pages,
        [
            alice[0..2].to_vec(),
            alice[2..4].to_vec(),
            alice[4..].to_vec()
        ]
    );

    // A page that is exactly full points on; the page after it is empty and ends.
    let full = app.list(Some("alice"), "limit=5").await;
    assert_eq!(full.body["holds"].as_array().unwrap().len(), 5);
    assert_eq!(full.body["next_after"], alice[4]);
    let after_last = app
        .list(Some("alice"), &format!("after={}", alice[4]))
        .await;
    assert_eq!(after_last.body["holds"], Value::Array(vec![]));
    assert_eq!(after_last.body["next_after"], Value::Null);
    // `after` need not be one of the caller's ids.
    let mid = app
        .list(Some("alice"), &format!("after={}&limit=1", alice[0] + 1))
        .await;
    assert_eq!(mid.body["holds"][0]["hold_id"], alice[1]);
    assert_eq!(mid.body["next_after"], alice[1]);

    // Bob sees his one hold; a stranger sees none.
    let bob = app.list(Some("bob"), "").await;
    let bob_holds = bob.body["holds"].as_array().unwrap();
    assert_eq!(bob_holds.len(), 1);
    assert_eq!(bob_holds[0]["owner"], "bob");
    let stranger = app.list(Some("carol"), "").await;
    assert_eq!(stranger.body["holds"], Value::Array(vec![]));
    assert_eq!(stranger.body["next_after"], Value::Null);
}

/// `GET /holds` needs an `Owner-Id` (400 `owner_required`), a `limit` of 1 to 1000 (400
/// `invalid_page`) and a numeric `after` (400 `invalid_query`).
async fn list_refuses_a_missing_owner_and_bad_pages(app: App) {
    let slot = app.slot(3).await;
    let first = id(app.hold(slot, "one", Some("alice"), "").await.created());
    let second = id(app.hold(slot, "two", Some("alice"), "").await.created());

    app.list(None, "").await.problem(400, "owner_required");
    app.list(None, "limit=10")
        .await
        .problem(400, "owner_required");
    for (query, code) in [
        ("limit=0", "invalid_page"),
        ("limit=1001", "invalid_page"),
        ("limit=4294967295", "invalid_page"),
        ("limit=-1", "invalid_query"),
        ("limit=ten", "invalid_query"),
        ("after=abc", "invalid_query"),
        ("after=-1", "invalid_query"),
    ] {
        app.list(Some("alice"), query).await.problem(400, code);
    }

    for (query, len, next) in [
        ("limit=1", 1, Some(first)),
        ("limit=1000", 2, None),
        ("limit=2", 2, Some(second)),
    ] {
        let page = app.list(Some("alice"), query).await;
        assert_eq!(page.status, 200, "{query}: {}", page.body);
        assert_eq!(page.body["holds"].as_array().unwrap().len(), len, "{query}");
        assert_eq!(page.body["next_after"].as_i64(), next, "{query}");
    }
}

// ---- idempotency keys -----------------------------------------------------------------------

/// The same key with the same slot, quantity and owner is a replay (201,
/// `Idempotent-Replayed: true`, the same hold, nothing more taken); with any of them
/// different it is 422 `idempotency_key_reused`, and when the key's hold is somebody else's
/// the problem does not give its id away.
async fn key_reuse_is_a_replay_only_for_the_same_slot_quantity_and_owner(app: App) {
    let slot = app.slot(10).await;
    let other = app.slot(10).await;
    // A few holds first, so the hold under test has an id no slot or status shares.
    for key in ["fill-1", "fill-2", "fill-3"] {
        app.hold(other, key, None, "").await.created();
    }
    let body = r#"{"quantity": 2}"#;
    let placed = app.hold(slot, "shared", Some("alice"), body).await;
    let hold = placed.created().clone();
    let hold_id = id(&hold);
    assert!(
        ![slot.0, other.0, 422].contains(&hold_id),
        "ids must differ"
    );
    let anon = app.hold(slot, "anon-key", None, "").await;
    let anon_id = id(anon.created());
    assert!(
        ![slot.0, other.0, 422].contains(&anon_id),
        "ids must differ"
    );
    let before = app.state(&[slot, other], &[hold_id, anon_id]).await;
    assert_eq!(app.remaining(slot).await, 7);

    // Replays: the same request, or the same one asking for another lifetime.
    for body in [body, r#"{"quantity": 2, "lifetime_seconds": 60}"#] {
        let replay = app.hold(slot, "shared", Some("alice"), body).await;
        assert!(replay.replayed(), "{body}");
        assert_eq!(replay.hold(201), &hold, "{body}");
    }
    let anon_replay = app.hold(slot, "anon-key", None, r#"{"quantity": 1}"#).await;
    assert!(anon_replay.replayed());
    assert_eq!(id(anon_replay.hold(201)), anon_id);
    assert_eq!(app.state(&[slot, other], &[hold_id, anon_id]).await, before);

    // The owner's own key for something else: 422, and the problem may name the hold.
    for (target, body) in [(slot, ""), (slot, r#"{"quantity": 3}"#), (other, body)] {
        let reply = app.hold(target, "shared", Some("alice"), body).await;
        reply.problem(422, "idempotency_key_reused");
        assert!(!reply.replayed());
        assert!(
            numbers_in(&reply.body.to_string()).contains(&hold_id),
            "{}",
            reply.body
        );
    }

    // Somebody else's key: 422 whatever the request, and no trace of the hold's id.
    let strangers = [
        ("shared", Some("bob"), body),
        ("shared", Some("bob"), r#"{"quantity": 1}"#),
        ("shared", None, body),
        ("shared", Some("Alice"), body),
        ("anon-key", Some("alice"), ""),
        ("anon-key", Some("alice"), r#"{"quantity": 2}"#),
    ];
    for (key, owner, body) in strangers {
        let reply = app.hold(slot, key, owner, body).await;
        reply.problem(422, "idempotency_key_reused");
        assert!(!reply.replayed());
        let numbers = numbers_in(&reply.body.to_string());
        assert!(
            !numbers.contains(&hold_id) && !numbers.contains(&anon_id),
            "{key} as {owner:?} reveals a hold id: {}",
            reply.body
        );
    }
    assert_eq!(app.state(&[slot, other], &[hold_id, anon_id]).await, before);
    assert_eq!(app.remaining(slot).await, 7);

    // A replay returns the hold as it is now.
    let confirm = format!("/holds/{hold_id}/confirm");
    app.call(Method::POST, &confirm, Some("alice"), "")
        .await
        .hold(200);
    let replay = app.hold(slot, "shared", Some("alice"), body).await;
    assert!(replay.replayed());
    assert_eq!(replay.hold(201)["status"], "confirmed");
}

// ---- the seed's six fields ------------------------------------------------------------------

/// Every hold body, on every route, for an owned three-unit hold with its own lifetime as for
/// an anonymous one-unit hold, is exactly the six seed fields.
async fn every_hold_body_has_exactly_six_fields(app: App) {
    let slot = app.slot(5).await;
    for (owner, body) in [
        (Some("alice"), r#"{"quantity": 3, "lifetime_seconds": 600}"#),
        (None, ""),
    ] {
        let key = format!("six-{}", owner.is_some());
        let placed = app.hold(slot, &key, owner, body).await;
        let hold_id = id(placed.created());
        assert!(app.hold(slot, &key, owner, body).await.replayed());
        app.hold(slot, &key, owner, body).await.hold(201);
        app.get(hold_id, owner).await.hold(200);
        app.renew(hold_id, owner, "").await.hold(200);
        app.renew(hold_id, owner, r#"{"lifetime_seconds": 900}"#)
            .await
            .hold(200);
        let confirm = format!("/holds/{hold_id}/confirm");
        app.call(Method::POST, &confirm, owner, "").await.hold(200);
        app.call(Method::POST, &confirm, owner, "").await.hold(200);
        app.renew(hold_id, owner, "").await.hold(200);
        let cancel = format!("/holds/{hold_id}");
        app.call(Method::DELETE, &cancel, owner, "").await.hold(200);
        app.call(Method::DELETE, &cancel, owner, "").await.hold(200);
        let cancelled = app.get(hold_id, owner).await;
        assert_eq!(cancelled.hold(200)["status"], "cancelled");
    }
    // An expired hold reads with six fields too.
    let expiring = app
        .hold(slot, "six-expiring", Some("bob"), r#"{"quantity": 5}"#)
        .await;
    let expiring = id(expiring.created());
    app.clock.advance(Duration::minutes(5));
    assert_eq!(
        app.get(expiring, Some("bob")).await.hold(200)["status"],
        "expired"
    );
    assert_eq!(app.remaining(slot).await, 5);
}
