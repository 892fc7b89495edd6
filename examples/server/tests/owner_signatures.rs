//! `OWNER_SECRET`: with a secret, `Owner-Id` must be `<owner>.<hex HMAC-SHA256 of the owner>`,
//! and a forged or altered value never reaches a hold, on any route; without one, `Owner-Id`
//! is taken as sent, as before. Driven through the router with `oneshot` over SQLite and
//! PostgreSQL. The signatures here are computed with `hmac` and `sha2` directly, not with the
//! server's own `OwnerSecret::sign`.

#[macro_use]
mod common;

use std::path::PathBuf;

use axum::http::{Method, Request};
use common::{owned, Oneshot as App, Reply};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use slot_booking::{Clock, HoldId, Scope, SlotId};
use slot_booking_server::Config;

on_every_backend!(
    open: open_signed, worker_threads: 2;
    a_signed_owner_id_names_the_owner_and_holds_work_as_before,
    forged_or_altered_signatures_never_reach_a_hold,
);

mod unsigned {
    use super::*;

    on_every_backend!(
        open: open_unsigned, worker_threads: 2;
        without_a_secret_owner_ids_are_taken_as_sent,
    );
}

const SECRET: &str = "k3y-0f-th3-app1icat10n-32-chars!";

/// `<owner>.<lowercase hex HMAC-SHA256 of owner keyed with secret>`.
fn sign_with(secret: &str, owner: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(owner.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{owner}.{hex}")
}

fn sign(owner: &str) -> String {
    sign_with(SECRET, owner)
}

/// The configuration the environment `OWNER_SECRET=<SECRET>` gives.
fn signed_config() -> Config {
    Config::from_vars(|name| (name == "OWNER_SECRET").then(|| SECRET.to_owned())).unwrap()
}

async fn open_signed(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    App::open(url, sqlite_dir, &signed_config()).await
}

async fn open_unsigned(url: &str, sqlite_dir: Option<PathBuf>) -> App {
    App::open(url, sqlite_dir, &Config::default()).await
}

/// Every hold route a caller can name an owner on, for `slot` and `hold`, each as (method,
/// path, body).
fn routes(slot: SlotId, hold: i64) -> Vec<(Method, String, &'static str)> {
    vec![
        (Method::POST, format!("/slots/{slot}/hold"), ""),
        (Method::GET, "/holds".to_owned(), ""),
        (Method::GET, format!("/holds/{hold}"), ""),
        (Method::POST, format!("/holds/{hold}/confirm"), ""),
        (
            Method::POST,
            format!("/holds/{hold}/renew"),
            r#"{"lifetime_seconds": 900}"#,
        ),
        (Method::DELETE, format!("/holds/{hold}"), ""),
    ]
}

/// `method path` with `Owner-Id: owner` (when given), a fresh idempotency key and `body`.
async fn call(app: &App, method: Method, path: &str, owner: Option<&str>, body: &str) -> Reply {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("idempotency-key", format!("key-{}", fresh_key()));
    app.send(owned(request, owner), body).await
}

/// A key no other request of the test used.
fn fresh_key() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Everything a request could change: the slot and every hold on it, read from the store.
async fn state(app: &App, slot: SlotId) -> String {
    let slot_row = app.store.get_slot(slot).await.unwrap();
    let mut out = format!("{slot_row:?};");
    for hold in 1..=20 {
        let read = app
            .store
            .get_hold(HoldId(hold), &Scope::BackOffice, app.clock.now())
            .await
            .unwrap();
        out += &format!("{:?};", read.outcome);
    }
    out
}

fn id(body: &Value) -> i64 {
    body["hold_id"].as_i64().unwrap()
}

/// With a secret, the signed value names the owner: the hold is the owner's, listed with the
/// bare owner id, and every route works for it; another owner's signed value is another
/// owner; requests without `Owner-Id` are unchanged.
async fn a_signed_owner_id_names_the_owner_and_holds_work_as_before(app: App) {
    let slot = common::new_slot(&app.engine, 4, chrono::Duration::hours(1)).await;
    let alice = sign("alice");
    // An owner id may contain dots: the value splits at the last one.
    let dotted = sign("team.alice.v2");

    let placed = app
        .hold(slot, "alice-1", Some(&alice), r#"{"quantity": 2}"#)
        .await;
    let hold = id(placed.hold(201));
    let listed = call(&app, Method::GET, "/holds", Some(&alice), "").await;
    assert_eq!(listed.ok(200)["holds"][0]["owner"], "alice");
    assert_eq!(listed.body["holds"][0]["quantity"], 2);
    call(
        &app,
        Method::GET,
        &format!("/holds/{hold}"),
        Some(&alice),
        "",
    )
    .await
    .hold(200);
    // Another owner, properly signed, sees nothing of alice's.
    call(
        &app,
        Method::GET,
        &format!("/holds/{hold}"),
        Some(&sign("bob")),
        "",
    )
    .await
    .problem(404, "hold_not_found");
    call(
        &app,
        Method::POST,
        &format!("/holds/{hold}/renew"),
        Some(&alice),
        "",
    )
    .await
    .hold(200);
    let confirmed = call(
        &app,
        Method::POST,
        &format!("/holds/{hold}/confirm"),
        Some(&alice),
        "",
    )
    .await;
    assert_eq!(confirmed.hold(200)["status"], "confirmed");

    let dotted_hold = id(app.hold(slot, "dotted", Some(&dotted), "").await.hold(201));
    let listed = call(&app, Method::GET, "/holds", Some(&dotted), "").await;
    assert_eq!(listed.ok(200)["holds"][0]["owner"], "team.alice.v2");
    assert_eq!(listed.body["holds"][0]["hold_id"], dotted_hold);

    // No Owner-Id: the seed's anonymous holds, as before.
    let anonymous = app.hold(slot, "anon", None, "").await;
    let _ = id(anonymous.hold(201));
    let sold_out = app.hold(slot, "anon-2", None, "").await;
    sold_out.problem(409, "sold_out");
}

/// With a secret, a value that is not the owner's signature (none, another owner's, one
/// altered anywhere, in upper case, cut short or lengthened, made with another secret) is
/// 400 `invalid_owner` on every route, and the slot and its holds stay exactly as they were.
async fn forged_or_altered_signatures_never_reach_a_hold(app: App) {
    let slot = common::new_slot(&app.engine, 5, chrono::Duration::hours(1)).await;
    let alice = sign("alice");
    let hold = id(app.hold(slot, "alice-1", Some(&alice), "").await.hold(201));
    let before = state(&app, slot).await;

    let signature = &alice["alice.".len()..];
    let bob_signature = &sign("bob")["bob.".len()..];
    let mut forged = vec![
        "alice".to_owned(),
        "alice.".to_owned(),
        signature.to_owned(),
        format!(".{signature}"),
        format!("alice.{bob_signature}"),
        format!("bob.{signature}"),
        format!("Alice.{signature}"),
        format!("alice..{signature}"),
        format!("alice.{}", signature.to_uppercase()),
        format!("alice.{}", &signature[..63]),
        format!("alice.{signature}0"),
        format!("{alice}.{signature}"),
        format!("alice.{}", "0".repeat(64)),
        sign_with("another-secret-also-32-characters", "alice"),
    ];
    // Each hex digit of the signature changed to every other hex digit.
    for at in 0..64 {
        for digit in "0123456789abcdef".chars() {
            let mut altered: Vec<char> = alice.chars().collect();
            let position = "alice.".len() + at;
            if altered[position] != digit {
                altered[position] = digit;
                forged.push(altered.into_iter().collect());
            }
        }
    }
    for (i, value) in forged.iter().enumerate() {
        // Every route for the first few; the cheapest read for the rest.
        let all_routes = routes(slot, hold);
        let routes = if i < 14 {
            &all_routes[..]
        } else {
            &all_routes[2..3]
        };
        for (method, path, body) in routes {
            let reply = call(&app, method.clone(), path, Some(value), body).await;
            reply.problem(400, "invalid_owner");
        }
    }
    assert_eq!(state(&app, slot).await, before);
    // The hold is still alice's, held, and its slot has one unit taken.
    let read = call(
        &app,
        Method::GET,
        &format!("/holds/{hold}"),
        Some(&alice),
        "",
    )
    .await;
    assert_eq!(read.hold(200)["status"], "held");
    let listed = call(&app, Method::GET, "/holds", Some(&alice), "").await;
    assert_eq!(listed.ok(200)["holds"].as_array().unwrap().len(), 1);
    assert_eq!(
        app.store
            .get_slot(slot)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining,
        4
    );
}

/// Without a secret, `Owner-Id` is the owner as sent: a plain id works, and a value that looks
/// signed is just another owner id, dots and all.
async fn without_a_secret_owner_ids_are_taken_as_sent(app: App) {
    let slot = common::new_slot(&app.engine, 3, chrono::Duration::hours(1)).await;
    let plain = id(app.hold(slot, "plain", Some("alice"), "").await.hold(201));
    let signed_looking = sign("alice");
    let other = id(app
        .hold(slot, "signed", Some(&signed_looking), "")
        .await
        .hold(201));
    let listed = call(&app, Method::GET, "/holds", Some("alice"), "").await;
    let holds = listed.ok(200)["holds"].as_array().unwrap().clone();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0]["hold_id"], plain);
    let listed = call(&app, Method::GET, "/holds", Some(&signed_looking), "").await;
    assert_eq!(listed.ok(200)["holds"][0]["owner"], signed_looking.as_str());
    assert_eq!(listed.body["holds"][0]["hold_id"], other);
    call(
        &app,
        Method::GET,
        &format!("/holds/{plain}"),
        Some(&signed_looking),
        "",
    )
    .await
    .problem(404, "hold_not_found");
}
