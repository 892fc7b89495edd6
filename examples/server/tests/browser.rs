//! The page (`GET /`) in a real browser: headless Chromium driven through chromedriver
//! (WebDriver, `fantoccini`), on a server on a real port.
//!
//! Each scenario opens the page in two browser sessions, holds units in the first and sees
//! the slot's free units drop in both (the second within a second, by the change stream,
//! without a reload), watches the hold count down, renews and confirms it (and finds it again
//! after a reload), cancels another hold and sees the units come back, sees a hold cancelled
//! elsewhere leave its list, and meets the readable messages of `sold_out` and
//! `quantity_exceeds_capacity`. It runs at the root and under a `PATH_PREFIX` on SQLite, and
//! at the root on PostgreSQL and on MariaDB/MySQL. A page whose change stream resumes from
//! before what the server keeps reads its holds again on the `reset` (SQLite).
//!
//! Chromium and chromedriver must be installed (Debian: `apt-get install -y chromium
//! chromium-driver`; `CHROME` and `CHROMEDRIVER` name other binaries): without them these
//! tests fail, never skip. With `SCREENSHOTS_DIR` set (relative to the workspace root), the
//! root SQLite scenario saves PNG screenshots there: the page loaded, a hold counting down,
//! an error.

mod common;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use fantoccini::{Client, ClientBuilder, Locator};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};
use slot_booking::SlotId;
use slot_booking_server::Config;
use tower::ServiceExt;

use common::TestServer;

/// The longest any one thing the page should do may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

/// How soon a second session must show a change made in the first.
const LIVE_WITHIN: Duration = Duration::from_secs(1);

/// How long the test polls for that change before it fails.
const SEE_WITHIN: Duration = Duration::from_secs(5);

/// One browser scenario at a time: each runs two Chromium instances, and the machine may have
/// only two cores.
static ONE_BROWSER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_at_the_root_on_sqlite() {
    let (url, dir) = common::sqlite_url().await;
    let server = TestServer::start(&url, dir).await;
    scenario(&server, "", 2, screenshots_dir()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_under_a_path_prefix_on_sqlite() {
    let (url, dir) = common::sqlite_url().await;
    let server = TestServer::start(&url, dir).await;
    scenario(&server, "/api", 1, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_at_the_root_on_postgres() {
    let Some(url) = common::postgres_url().await else {
        return;
    };
    let server = TestServer::start(&url, None).await;
    scenario(&server, "", 1, None).await;
    drop(server);
    common::drop_postgres(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_at_the_root_on_mysql() {
    let Some(url) = common::mysql_url().await else {
        return;
    };
    let server = TestServer::start(&url, None).await;
    scenario(&server, "", 1, None).await;
    drop(server);
    common::drop_mysql(&url).await;
}

/// A page whose change stream resumes from before what the server keeps (its last change
/// purged meanwhile) gets a `reset`, and reads its holds again: a hold confirmed elsewhere
/// while the page was cut off shows as confirmed, which no change the page receives says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reset_the_page_reads_its_holds_again() {
    let _one = ONE_BROWSER_AT_A_TIME.lock().await;
    let (url, dir) = common::sqlite_url().await;
    let server = TestServer::start(&url, dir).await;
    server.clock.set(chrono::Utc::now());
    let slot = server.slot(5, chrono::Duration::hours(1)).await;
    let target = server.base.trim_start_matches("http://").parse().unwrap();
    let proxy = Proxy::start(target).await;

    let driver = Driver::start().await;
    let session = driver.session("reset").await;
    session
        .goto(&format!("http://{}/", proxy.address))
        .await
        .unwrap();
    wait(&session, "the page to follow the change stream", LIVE).await;
    // The stream may open before the listing is drawn: the slot's row is there to type in.
    wait(&session, "the slot to be listed", &remaining_is(slot, 5)).await;
    hold(&session, slot, 1).await;
    let held = wait_for_hold(&session, slot, "held").await;
    // A hold placed elsewhere shows only through the stream: the page has its change, and
    // that change's id is the one it resumes from.
    server.hold(slot, "elsewhere").await;
    wait(&session, "the stream's change", &remaining_is(slot, 3)).await;

    // Cut off, the page misses the confirmation of its hold, and every change it saw is
    // purged (older than an hour by the engine's clock; the confirmed hold stays).
    proxy.cut();
    let confirm = server.url(&format!("/holds/{held}/confirm"));
    let (status, _, _) = common::read(server.http.post(confirm).send().await.unwrap()).await;
    assert_eq!(status, 200);
    server.clock.advance(chrono::Duration::hours(2));
    let purged = server.engine.purge(Duration::from_secs(3600), 1000).await;
    assert!(
        purged.unwrap().events >= 4,
        "the slot, two holds, the confirmation"
    );
    proxy.reopen();

    wait(&session, "the page to follow the stream again", LIVE).await;
    wait(
        &session,
        "the hold confirmed while the page was cut off",
        &format!(
            "!!document.querySelector('li[data-hold-id=\"{held}\"][data-status=\"confirmed\"]')"
        ),
    )
    .await;
    session.close().await.unwrap();
    driver.stop();
}

/// A TCP proxy in front of the server whose connections a test can cut (the browser then
/// reconnects its change stream with `Last-Event-ID`), holding new ones until it reopens.
struct Proxy {
    address: std::net::SocketAddr,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    open: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    async fn start(target: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (open, opened) = tokio::sync::watch::channel(true);
        let kept = std::sync::Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut opened = opened.clone();
                // Listed before it can pass the gate: a cut that comes while it starts finds
                // it in the list. (Listed after its spawn, a connection accepted as the cut
                // came could pass the gate before the cut closed it and escape the list: the
                // browser then resumed its stream through it, with nothing missed to reset.)
                let mut connections = kept.lock().unwrap();
                let connection = tokio::spawn(async move {
                    if opened.wait_for(|open| *open).await.is_err() {
                        return;
                    }
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                connections.push(connection);
            }
        });
        Proxy {
            address,
            connections,
            open,
        }
    }

    /// Closes every connection and holds new ones.
    fn cut(&self) {
        self.open.send_replace(false);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// Lets connections through again.
    fn reopen(&self) {
        self.open.send_replace(true);
    }
}

/// Without a browser: the page is HTML with its own content security policy, at the root and
/// at the prefix, with or without its slash (the page finds its routes from its address).
#[tokio::test]
async fn the_page_is_served_at_the_root_and_at_the_prefix() {
    let (url, dir) = common::sqlite_url().await;
    let server = TestServer::start(&url, dir).await;
    for (prefix, path) in [("", "/"), ("/api", "/api"), ("/api", "/api/")] {
        let config = Config {
            path_prefix: prefix.to_owned(),
            ..Config::default()
        };
        let app = slot_booking_server::router_with_config(server.engine.clone(), &config);
        let response = app
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers().clone();
        assert_eq!(headers["content-type"], "text/html; charset=utf-8");
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("default-src 'none'"), "{policy}");
        assert!(policy.contains("script-src 'sha256-"), "{policy}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let html = String::from_utf8(body.to_vec()).unwrap();
        assert!(html.starts_with("<!doctype html>"), "{html}");
        assert!(html.contains("id=\"slot-rows\"") && html.contains("<script>"));
    }
}

/// The browser scenario on `server`'s engine, served under `prefix`, holding `quantity`
/// units first; screenshots into `shots` if given.
async fn scenario(server: &TestServer, prefix: &str, quantity: i64, shots: Option<PathBuf>) {
    let _one = ONE_BROWSER_AT_A_TIME.lock().await;
    // The engine's clock at the real time, so a hold's expiry is minutes from the browser's
    // now (the slots are in 2030, still to come).
    server.clock.set(chrono::Utc::now());
    let big = server.slot(5, chrono::Duration::hours(1)).await;
    let single = server.slot(1, chrono::Duration::hours(2)).await;
    let small = server.slot(3, chrono::Duration::hours(3)).await;
    let large = server.slot(8, chrono::Duration::hours(4)).await;
    let page = serve_page(server, prefix).await;

    let driver = Driver::start().await;
    let first = driver.session("first").await;
    let second = driver.session("second").await;
    for session in [&first, &second] {
        session.goto(&page).await.unwrap();
        wait(session, "the page to follow the change stream", LIVE).await;
        wait(
            session,
            "the four slots to be listed",
            "document.querySelectorAll('#slot-rows tr').length === 4",
        )
        .await;
    }
    let seen = free_units(&first).await;
    assert_eq!(
        seen,
        vec![(big, 5, 5), (single, 1, 1), (small, 3, 3), (large, 8, 8)],
        "slots in order of their start, each with its free units"
    );
    let when = text(&first, &row(big, ".when")).await;
    assert!(
        when.contains("2030") && when.contains("09:00") && when.contains("10:00"),
        "readable times: {when:?}"
    );
    assert_eq!(text(&first, &row(big, ".free-text")).await, "5 of 5 free");
    screenshot(&first, shots.as_deref(), "page.png").await;

    // A hold in the first session: its free units drop there, and in the second, by the
    // change stream, within a second of the click.
    type_quantity(&first, big, quantity).await;
    let left = 5 - quantity;
    // Each browser notes the moment by its own clock (the machine's, shared): the first when
    // the click reaches the page, the second when the row takes the new count (a
    // MutationObserver, so not when the test's polling next looks).
    eval(&first, NOTE_CLICK).await;
    eval(&second, &note_remaining(big, left)).await;
    let started = Instant::now();
    press_hold(&first, big).await;
    wait_within(
        &second,
        "the second session to see the hold",
        &remaining_is(big, left),
        SEE_WITHIN,
    )
    .await;
    let polled = started.elapsed();
    let clicked = eval(&first, "window.clickedAt").await.as_i64().unwrap();
    let shown = eval(&second, "window.remainingAt").await.as_i64().unwrap();
    let observed = Duration::from_millis(u64::try_from(shown - clicked).unwrap());
    eprintln!(
        "{page}: the second session showed the first one's hold {observed:?} after the click \
         ({polled:?} from the WebDriver click command to the poll that saw it)"
    );
    assert!(
        observed < LIVE_WITHIN,
        "the second session showed the first one's hold {observed:?} after the click"
    );
    wait(
        &first,
        "the first session's free units",
        &remaining_is(big, left),
    )
    .await;
    let held = wait_for_hold(&first, big, "held").await;
    assert_eq!(
        text(&first, &row(big, ".free-text")).await,
        format!("{left} of 5 free")
    );

    // Its expiry counts down, each second.
    let before = seconds_left(&first, held).await;
    assert!(before > 60 && before <= 600, "{before} s left");
    wait(
        &first,
        "the countdown to go on",
        &format!("{} < {before}", seconds_left_js(held)),
    )
    .await;
    screenshot(&first, shots.as_deref(), "hold.png").await;

    // Renewed a minute later (by the engine's clock), it has a minute more.
    server.clock.advance(chrono::Duration::seconds(60));
    let ahead = seconds_left(&first, held).await;
    click(&first, &hold_button(held, "renew")).await;
    wait(
        &first,
        "the renewed hold's later expiry",
        &format!("{} > {}", seconds_left_js(held), ahead + 50),
    )
    .await;
    assert_message(&first, "info", "", "Renewed").await;

    // Confirmed, for good: the units stay taken.
    click(&first, &hold_button(held, "confirm")).await;
    wait_for_hold(&first, big, "confirmed").await;
    assert_eq!(hold_status(server, held).await, "confirmed");
    assert_message(&first, "info", "", "Confirmed").await;

    // The tab remembers its holds across a reload (and asks the server how they stand).
    first.refresh().await.unwrap();
    wait(&first, "the reloaded page to follow the changes", LIVE).await;
    wait(
        &first,
        "the confirmed hold after the reload",
        &format!(
            "!!document.querySelector('li[data-hold-id=\"{held}\"][data-status=\"confirmed\"]')"
        ),
    )
    .await;
    wait(
        &first,
        "the slots after the reload",
        &remaining_is(big, left),
    )
    .await;

    // Another hold, cancelled: its unit comes back, in both sessions.
    hold(&first, big, 1).await;
    wait(
        &first,
        "the second hold's unit taken",
        &remaining_is(big, left - 1),
    )
    .await;
    wait(
        &second,
        "the second hold seen",
        &remaining_is(big, left - 1),
    )
    .await;
    let other = wait_for_hold(&first, big, "held").await;
    assert_ne!(other, held);
    click(&first, &hold_button(other, "cancel")).await;
    wait(&first, "the cancelled unit back", &remaining_is(big, left)).await;
    wait(&second, "the cancelled unit back", &remaining_is(big, left)).await;
    wait(
        &first,
        "the cancelled hold gone from the list",
        &format!("!document.querySelector('li[data-hold-id=\"{other}\"]')"),
    )
    .await;
    assert_eq!(hold_status(server, other).await, "cancelled");
    assert_message(&first, "info", "", "went back on sale").await;

    // A hold of the tab's cancelled elsewhere (another client, the back office) leaves its
    // list, and its unit comes back.
    hold(&first, large, 1).await;
    wait(
        &first,
        "the hold on the large slot",
        &remaining_is(large, 7),
    )
    .await;
    let elsewhere = wait_for_hold(&first, large, "held").await;
    let cancel = server
        .http
        .delete(server.url(&format!("/holds/{elsewhere}")));
    assert_eq!(cancel.send().await.unwrap().status(), 200);
    wait(
        &first,
        "the hold cancelled elsewhere gone from the list",
        &format!("!document.querySelector('li[data-hold-id=\"{elsewhere}\"]')"),
    )
    .await;
    wait(&first, "its unit back", &remaining_is(large, 8)).await;
    assert_message(&first, "info", "", "cancelled elsewhere").await;

    // A slot sold out elsewhere shows as full, and a hold on it is refused, readably.
    let (status, code, _) = common::read(server.hold(single, "elsewhere").await).await;
    assert_eq!((status, code), (201, None));
    wait(
        &first,
        "the sold out slot shown full",
        &remaining_is(single, 0),
    )
    .await;
    assert_eq!(
        text(&first, &row(single, ".free-text")).await,
        "Full (1 in all)"
    );
    hold(&first, single, 1).await;
    wait(&first, "the refusal shown", &message_code_is("sold_out")).await;
    assert_message(&first, "error", "sold_out", "Not enough units are free").await;
    screenshot(&first, shots.as_deref(), "error.png").await;

    // More units than the slot has in all.
    hold(&first, small, 4).await;
    wait(
        &first,
        "the capacity refusal shown",
        &message_code_is("quantity_exceeds_capacity"),
    )
    .await;
    assert_message(
        &first,
        "error",
        "quantity_exceeds_capacity",
        "does not have that many units in all",
    )
    .await;
    assert_eq!(free_units(&second).await[2], (small, 3, 3));

    first.close().await.unwrap();
    second.close().await.unwrap();
    driver.stop();
}

/// The page's URL: `server`'s own router when `prefix` is empty, else a router over the same
/// engine under `prefix`, on a port of its own.
async fn serve_page(server: &TestServer, prefix: &str) -> String {
    if prefix.is_empty() {
        return server.url("/");
    }
    let config = Config {
        path_prefix: prefix.to_owned(),
        ..Config::default()
    };
    let app = slot_booking_server::router_with_config(server.engine.clone(), &config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}{prefix}")
}

// ---- The page, as a test reads it -------------------------------------------------------

/// The page follows the change stream.
const LIVE: &str = "document.getElementById('live').dataset.state === 'open'";

/// The message line shows a refusal with `code`.
fn message_code_is(code: &str) -> String {
    format!(
        "!document.getElementById('message').hidden && document.getElementById('message').dataset.code === '{code}'"
    )
}

/// Notes in `window.clickedAt` when the next click reaches the page (`Date.now()`, before
/// any handler of the page's runs).
const NOTE_CLICK: &str = "(() => {
    window.clickedAt = null;
    window.addEventListener('click', () => { window.clickedAt = Date.now(); }, { capture: true, once: true });
    return true;
})()";

/// Notes in `window.remainingAt` when `slot`'s row first shows `remaining` free units.
fn note_remaining(slot: SlotId, remaining: i64) -> String {
    format!(
        "(() => {{
            window.remainingAt = null;
            const observer = new MutationObserver(() => {{
                if ({shows}) {{ window.remainingAt = Date.now(); observer.disconnect(); }}
            }});
            observer.observe(document.getElementById('slot-rows'), {{ attributes: true, subtree: true, childList: true }});
            return true;
        }})()",
        shows = remaining_is(slot, remaining)
    )
}

/// The CSS selector of `inner` in `slot`'s row.
fn row(slot: SlotId, inner: &str) -> String {
    format!("tr[data-slot-id=\"{slot}\"] {inner}")
}

fn remaining_is(slot: SlotId, remaining: i64) -> String {
    format!(
        "(document.querySelector('tr[data-slot-id=\"{slot}\"]') || {{dataset: {{}}}}).dataset.remaining === '{remaining}'"
    )
}

fn hold_button(hold: i64, action: &str) -> String {
    format!("li[data-hold-id=\"{hold}\"] button[data-action=\"{action}\"]")
}

fn seconds_left_js(hold: i64) -> String {
    format!(
        "Number(document.querySelector('li[data-hold-id=\"{hold}\"] .countdown').dataset.secondsLeft)"
    )
}

/// Runs `expression` in the page and returns its value.
async fn eval(session: &Client, expression: &str) -> Value {
    session
        .execute(&format!("return ({expression});"), vec![])
        .await
        .unwrap_or_else(|error| panic!("{expression}: {error}"))
}

/// Polls the page until `expression` is true (a signal, not a sleep: every 10 ms, up to
/// [`DEADLINE`]); fails naming `what` and what the page shows.
async fn wait(session: &Client, what: &str, expression: &str) {
    wait_within(session, what, expression, DEADLINE).await;
}

/// [`wait`] with a deadline of its own.
async fn wait_within(session: &Client, what: &str, expression: &str, deadline: Duration) {
    let started = Instant::now();
    loop {
        if eval(session, expression).await == Value::Bool(true) {
            return;
        }
        if started.elapsed() > deadline {
            panic!(
                "waited {deadline:?} for {what} ({expression}); the page shows: {}",
                eval(session, PAGE_SUMMARY).await
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a failing wait reports of the page.
const PAGE_SUMMARY: &str = "JSON.stringify({
    live: document.getElementById('live').textContent,
    message: document.getElementById('message').hidden ? null : document.getElementById('message-text').textContent,
    slots: [...document.querySelectorAll('#slot-rows tr')].map((r) => r.dataset.slotId + ': ' + r.dataset.remaining + '/' + r.dataset.capacity),
    holds: [...document.querySelectorAll('#holds li')].map((h) => h.dataset.holdId + ' ' + h.dataset.status + ' on ' + h.dataset.slotId),
})";

/// Each listed slot's id, free units and capacity, in the page's order.
async fn free_units(session: &Client) -> Vec<(SlotId, i64, i64)> {
    let listed = eval(
        session,
        "[...document.querySelectorAll('#slot-rows tr')].map((r) => [Number(r.dataset.slotId), Number(r.dataset.remaining), Number(r.dataset.capacity)])",
    )
    .await;
    serde_json::from_value::<Vec<(i64, i64, i64)>>(listed)
        .unwrap()
        .into_iter()
        .map(|(slot, remaining, capacity)| (SlotId(slot), remaining, capacity))
        .collect()
}

async fn text(session: &Client, selector: &str) -> String {
    let found = session.find(Locator::Css(selector)).await;
    found
        .unwrap_or_else(|error| panic!("{selector}: {error}"))
        .text()
        .await
        .unwrap()
}

async fn click(session: &Client, selector: &str) {
    session
        .find(Locator::Css(selector))
        .await
        .unwrap_or_else(|error| panic!("{selector}: {error}"))
        .click()
        .await
        .unwrap();
}

/// Types `quantity` into `slot`'s row and presses its Hold button.
async fn hold(session: &Client, slot: SlotId, quantity: i64) {
    type_quantity(session, slot, quantity).await;
    press_hold(session, slot).await;
}

/// Types `quantity` into `slot`'s row.
async fn type_quantity(session: &Client, slot: SlotId, quantity: i64) {
    let field = session
        .find(Locator::Css(&row(slot, "input.quantity")))
        .await
        .unwrap();
    field.clear().await.unwrap();
    field.send_keys(&quantity.to_string()).await.unwrap();
}

/// Presses the Hold button of `slot`'s row.
async fn press_hold(session: &Client, slot: SlotId) {
    click(session, &row(slot, "button[data-action=\"hold\"]")).await;
}

/// Waits for the newest hold on `slot` in the page's list to have `status`; its id.
async fn wait_for_hold(session: &Client, slot: SlotId, status: &str) -> i64 {
    let selector = format!("#holds li[data-slot-id=\"{slot}\"][data-status=\"{status}\"]");
    wait(
        session,
        &format!("a {status} hold on slot {slot}"),
        &format!("!!document.querySelector('{selector}')"),
    )
    .await;
    let id = eval(
        session,
        &format!("Number(document.querySelector('{selector}').dataset.holdId)"),
    )
    .await;
    id.as_i64().unwrap()
}

async fn seconds_left(session: &Client, hold: i64) -> i64 {
    eval(session, &seconds_left_js(hold))
        .await
        .as_i64()
        .unwrap()
}

/// Asserts the message line shows a message of `kind` with `code` whose text contains
/// `words`, and no JSON.
async fn assert_message(session: &Client, kind: &str, code: &str, words: &str) {
    let shown = eval(
        session,
        "(() => { const m = document.getElementById('message'); return [m.hidden, m.dataset.kind, m.dataset.code, document.getElementById('message-text').textContent]; })()",
    )
    .await;
    let (hidden, shown_kind, shown_code, text): (bool, String, String, String) =
        serde_json::from_value(shown).unwrap();
    assert!(!hidden, "no message shown");
    assert_eq!(
        (shown_kind.as_str(), shown_code.as_str()),
        (kind, code),
        "{text}"
    );
    assert!(text.contains(words), "{text:?} does not say {words:?}");
    assert!(
        !text.contains('{') && !text.contains("\"code\""),
        "a raw body: {text}"
    );
}

/// The server's own view of a hold's status.
async fn hold_status(server: &TestServer, hold: i64) -> String {
    let response = server
        .http
        .get(server.url(&format!("/holds/{hold}")))
        .send()
        .await
        .unwrap();
    let (status, _, body) = common::read(response).await;
    assert_eq!(status, 200, "{body}");
    body["status"].as_str().unwrap().to_owned()
}

/// `SCREENSHOTS_DIR`, relative to the workspace root, if set.
fn screenshots_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("SCREENSHOTS_DIR")?);
    Some(if dir.is_absolute() {
        dir
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(dir)
    })
}

async fn screenshot(session: &Client, dir: Option<&Path>, name: &str) {
    let Some(dir) = dir else { return };
    let png = session.screenshot().await.unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), png).unwrap();
}

// ---- chromedriver -----------------------------------------------------------------------

/// A chromedriver of the test's own on a free port, in a process group of its own with the
/// browsers it starts, all killed when it stops or is dropped (a failing test too); its
/// browsers' profiles and its log in a temporary directory, removed then.
struct Driver {
    child: Child,
    url: String,
    chrome: PathBuf,
    dir: PathBuf,
}

/// How to install what the browser tests need.
const INSTALL: &str = "install Chromium and its WebDriver (Debian: `apt-get install -y chromium \
                       chromium-driver`), or name them with CHROME and CHROMEDRIVER";

impl Driver {
    async fn start() -> Driver {
        let chromedriver = binary("CHROMEDRIVER", &["chromedriver"]);
        let chrome = binary(
            "CHROME",
            &["chromium", "chromium-browser", "google-chrome", "chrome"],
        );
        let dir = std::env::temp_dir().join(format!(
            "sb_browser_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("chromedriver.log");
        let mut last_error = String::new();
        // A port found free may be taken before chromedriver binds it: a few tries.
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = Command::new(&chromedriver)
                .arg(format!("--port={port}"))
                .arg(format!("--log-path={}", log.display()))
                .env("TZ", "UTC")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap_or_else(|error| panic!("{}: {error}; {INSTALL}", chromedriver.display()));
            let mut driver = Driver {
                child,
                url: format!("http://127.0.0.1:{port}"),
                chrome: chrome.clone(),
                dir: dir.clone(),
            };
            match driver.ready().await {
                Ok(()) => return driver,
                Err(error) => {
                    last_error = error;
                    driver.kill_group();
                    std::mem::forget(driver);
                }
            }
        }
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        panic!("chromedriver did not start: {last_error}\n{log}");
    }

    /// Waits for `GET /status` to say ready.
    async fn ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let status = format!("{}/status", self.url);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        while started.elapsed() < DEADLINE {
            if let Ok(Some(exit)) = self.child.try_wait() {
                return Err(format!("chromedriver exited: {exit}"));
            }
            if let Ok(response) = http.get(&status).send().await {
                let text = response.text().await.unwrap_or_default();
                let body: Value = serde_json::from_str(&text).unwrap_or_default();
                if body["value"]["ready"] == true {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!("{status} not ready within {DEADLINE:?}"))
    }

    /// A new browser session (a Chromium of its own, headless, with a fresh profile).
    async fn session(&self, name: &str) -> Client {
        let profile = self.dir.join(name);
        let options = json!({
            "binary": self.chrome,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--window-size=1000,860",
                format!("--user-data-dir={}", profile.display()),
            ],
        });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".to_owned(), options);
        ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "no browser session from chromedriver at {}: {error}; {INSTALL}",
                    self.url
                )
            })
    }

    /// Stops chromedriver and every browser it started.
    fn stop(self) {
        // Drop does it all.
    }

    fn kill_group(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.kill_group();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The binary the environment variable `variable` names, else the first of `names` on `PATH`;
/// fails, saying how to install it, when there is none.
fn binary(variable: &str, names: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{variable}={} is not a file; {INSTALL}",
            path.display()
        );
        return path;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!("none of {names:?} is on PATH: the browser tests need it, and never skip; {INSTALL}");
}
