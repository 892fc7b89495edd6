//! What the server's test binaries share: fresh SQLite, PostgreSQL and MariaDB/MySQL
//! databases, running each test once per backend ([`on_every_backend!`]), a real server on a
//! real port
//! ([`TestServer`]), the router driven with `oneshot` ([`Oneshot`]), and the checks every
//! response gets (problem bodies, field sets). Each binary uses a part of it.

#![allow(dead_code)]

pub mod contract;

use slot_booking_server::ServerStore;
use std::fmt::Display;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::request::Builder;
use axum::http::{HeaderMap, HeaderValue, Request};
use axum::Router;
use chrono::TimeZone;
use http_body_util::BodyExt;
use serde_json::Value;
use slot_booking::{BookingEngine, ManualClock, NewSlot, SlotId, Timestamp};
use slot_booking_server::{Config, Engine};
use sqlx::{AssertSqlSafe, Connection};
use tower::ServiceExt;

/// Runs each named `async fn(T)` once per backend, in modules `sqlite`, `postgres` and `mysql`,
/// each on a fresh database that `open` (an `async fn(&str, Option<PathBuf>) -> T` named as
/// from the calling module, given the database URL and the SQLite directory to remove
/// afterwards) turns into the test's `T`. A PostgreSQL or MariaDB database is dropped after a
/// passing test.
#[allow(unused_macros)]
macro_rules! on_every_backend {
    (open: $open:path, worker_threads: $threads:tt; $($test:ident),* $(,)?) => {
        mod sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $test() {
                    let (url, dir) = super::common::sqlite_url().await;
                    super::$test($open(&url, dir).await).await;
                }
            )*
        }
        mod postgres {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $test() {
                    let Some(url) = super::common::postgres_url().await else { return };
                    super::$test($open(&url, None).await).await;
                    super::common::drop_postgres(&url).await;
                }
            )*
        }
        mod mysql {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $test() {
                    let Some(url) = super::common::mysql_url().await else { return };
                    super::$test($open(&url, None).await).await;
                    super::common::drop_mysql(&url).await;
                }
            )*
        }
    };
}

pub fn epoch() -> Timestamp {
    chrono::Utc
        .with_ymd_and_hms(2030, 6, 1, 8, 0, 0)
        .single()
        .unwrap()
}

pub struct TestServer {
    pub base: String,
    pub engine: Engine,
    pub clock: ManualClock,
    pub http: reqwest::Client,
    pub store: Arc<dyn ServerStore>,
    _cleanup: Cleanup,
}

/// Removes a SQLite database's directory (if any) when dropped.
struct Cleanup(Option<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh SQLite file in a temp dir of its own.
pub async fn sqlite_url() -> (String, Option<std::path::PathBuf>) {
    let dir = std::env::temp_dir().join(unique("sb_e2e"));
    std::fs::create_dir_all(&dir).unwrap();
    (
        format!("sqlite://{}", dir.join("test.db").display()),
        Some(dir),
    )
}

/// Whether the PostgreSQL tests run, and where: shared with the PostgreSQL store's tests.
#[path = "../../../../backends/postgres/tests/common/gate.rs"]
pub mod gate;

/// A fresh PostgreSQL database on the server `DATABASE_URL` names (PostgreSQL's default local
/// address without it), or `None` (loudly, and counted at exit) when none answers outside CI.
pub async fn postgres_url() -> Option<String> {
    let admin = gate::server_url("PostgreSQL e2e test")?;
    let name = unique("sb_e2e");
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|error| {
            panic!("{error}: these tests make a database each; DATABASE_URL's role needs CREATEDB")
        });
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    Some(format!("{base}/{name}"))
}

/// Where the MariaDB/MySQL tests look when `MYSQL_URL` is unset: the local MariaDB's root,
/// as the MariaDB/MySQL store's tests do.
pub const MYSQL_DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306";

/// Whether the MariaDB/MySQL tests run, and where: the server `MYSQL_URL` names, decided as
/// for PostgreSQL (a loud skip counted at exit without one, a failure under `CI`).
pub static MYSQL: gate::Gate = gate::Gate::new(
    "MariaDB/MySQL",
    "MYSQL_URL",
    MYSQL_DEFAULT_URL,
    gate::probe::<sqlx::MySqlConnection>,
);

/// The MariaDB/MySQL server's URL without a database (`MYSQL_URL` may name one or not).
fn mysql_server(url: &str) -> &str {
    let url = url.trim_end_matches('/');
    match url.split_once("://") {
        Some((_, rest)) if rest.contains('/') => url.rsplit_once('/').map_or(url, |(b, _)| b),
        _ => url,
    }
}

/// A fresh database on the MariaDB/MySQL server `MYSQL_URL` names (the local MariaDB without
/// it), or `None` (loudly, and counted at exit) when none answers outside CI.
pub async fn mysql_url() -> Option<String> {
    let admin = MYSQL.server_url("MariaDB/MySQL e2e test")?;
    let server = mysql_server(&admin);
    let name = unique("sb_e2e");
    let mut conn = sqlx::MySqlConnection::connect(&admin).await.unwrap();
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|error| {
            panic!("{error}: these tests make a database each; MYSQL_URL's user needs CREATE")
        });
    Some(format!("{server}/{name}"))
}

/// Drops a database made by [`mysql_url`] (after a passing test; a failing one leaves it
/// behind for a look).
pub async fn drop_mysql(url: &str) {
    let Some(admin) = MYSQL.known_url() else {
        return;
    };
    let Some((_, name)) = url.rsplit_once('/') else {
        return;
    };
    if let Ok(mut conn) = sqlx::MySqlConnection::connect(&admin).await {
        let _ = sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
            .execute(&mut conn)
            .await;
    }
}

impl TestServer {
    pub async fn start(database_url: &str, cleanup_dir: Option<std::path::PathBuf>) -> Self {
        let store = slot_booking_server::open_store(database_url).await.unwrap();
        Self::with_store(store, cleanup_dir).await
    }

    pub async fn with_store(
        store: Arc<dyn ServerStore>,
        cleanup_dir: Option<std::path::PathBuf>,
    ) -> Self {
        let clock = ManualClock::new(epoch());
        let engine: Engine = BookingEngine::builder(Arc::clone(&store))
            .clock(clock.clone())
            .build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        // Each response says which method it answers, for [`read`]'s check against the
        // document (a `reqwest::Response` does not keep its request's method).
        let app = slot_booking_server::router(engine.clone()).layer(axum::middleware::from_fn(
            |request: axum::extract::Request, next: axum::middleware::Next| async move {
                let method = HeaderValue::from_str(request.method().as_str()).unwrap();
                let mut response = next.run(request).await;
                response.headers_mut().insert(METHOD_HEADER, method);
                response
            },
        ));
        tokio::spawn(async move { axum::serve(listener, app).await });
        TestServer {
            base,
            engine,
            clock,
            http: reqwest::Client::new(),
            store,
            _cleanup: Cleanup(cleanup_dir),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn slot(&self, capacity: i32, starts_in: chrono::Duration) -> SlotId {
        new_slot(&self.engine, capacity, starts_in).await
    }

    pub async fn hold(&self, slot: SlotId, key: &str) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/slots/{slot}/hold")))
            .header("Idempotency-Key", key)
            .send()
            .await
            .unwrap()
    }

    pub async fn remaining(&self, slot: SlotId) -> i32 {
        self.store
            .get_slot(slot)
            .await
            .unwrap()
            .unwrap()
            .stored_remaining
    }
}

/// A slot of `capacity` units, from `starts_in` after the epoch for an hour.
pub async fn new_slot(engine: &Engine, capacity: i32, starts_in: chrono::Duration) -> SlotId {
    let starts_at = epoch() + starts_in;
    let slot = NewSlot::new(starts_at, starts_at + chrono::Duration::hours(1), capacity);
    engine.create_slot(slot).await.unwrap().slot_id
}

/// Whether `headers` say `application/problem+json`.
fn is_problem(headers: &HeaderMap) -> bool {
    headers
        .get("content-type")
        .is_some_and(|v| v == "application/problem+json")
}

/// The JSON body in `text` (`null` when it is none) and, for a problem, its code, having
/// checked that a problem body has `type`, the response's `status`, `title` and `detail`.
fn parse_body(status: u16, is_problem: bool, text: &str) -> (Option<String>, Value) {
    let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    if is_problem {
        assert_eq!(body["type"], "about:blank", "{text}");
        assert_eq!(body["status"], status, "{text}");
        assert!(
            body["title"].is_string() && body["detail"].is_string(),
            "{text}"
        );
    }
    let code = is_problem.then(|| body["code"].as_str().unwrap_or_default().to_owned());
    (code, body)
}

/// The header a [`TestServer`] adds to every response: the request's method.
const METHOD_HEADER: &str = "x-test-request-method";

/// Status, problem code (if any) and JSON body of a response from a [`TestServer`], having
/// checked it against the document the server serves ([`contract`]).
pub async fn read(response: reqwest::Response) -> (u16, Option<String>, Value) {
    let status = response.status().as_u16();
    let is_problem = is_problem(response.headers());
    let method = response.headers()[METHOD_HEADER]
        .to_str()
        .unwrap()
        .to_owned();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|value| value.to_str().unwrap().to_owned());
    let url = response.url().clone();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.unwrap();
    let exchange = contract::Exchange {
        method: &method,
        path: url.path(),
        status,
        content_type: content_type.as_deref(),
        headers: &headers,
        body: &bytes,
    };
    check_served(&exchange, |prefix| {
        let url = url.join(&format!("{prefix}/openapi.json")).unwrap();
        async move {
            static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
            let response = HTTP
                .get_or_init(reqwest::Client::new)
                .get(url)
                .send()
                .await
                .ok()?;
            let json = response.status() == 200
                && response
                    .headers()
                    .get("content-type")
                    .is_some_and(|v| v == "application/json");
            json.then_some(())?;
            response.bytes().await.ok().map(|bytes| bytes.to_vec())
        }
    })
    .await;
    let text = String::from_utf8_lossy(&bytes);
    let (code, body) = parse_body(status, is_problem, &text);
    (status, code, body)
}

/// Checks `exchange` against the document its server serves, which `fetch(prefix)` reads at
/// `{prefix}/openapi.json`, trying each prefix the request's path could be under; a path under
/// none is outside the server's prefix, and must be the router's `not_found`.
async fn check_served<F, Fut>(exchange: &contract::Exchange<'_>, fetch: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Option<Vec<u8>>>,
{
    let mut found = None;
    for prefix in contract::candidate_prefixes(exchange.path) {
        if let Some(text) = fetch(prefix.clone()).await {
            let contract = contract::Contract::of(&text);
            if contract.prefix == prefix {
                found = Some(contract);
                break;
            }
        }
    }
    let checked = match found {
        Some(contract) => contract.check(exchange),
        None => contract::Contract::default_document().check_outside(exchange),
    };
    if let Err(drift) = checked {
        panic!("the response is not what the OpenAPI document says: {drift}");
    }
}

/// The seed's hold body, sorted: nothing more, nothing less.
pub const HOLD_FIELDS: [&str; 6] = [
    "cancelled_at",
    "confirmed_at",
    "expires_at",
    "hold_id",
    "slot_id",
    "status",
];

/// An id no slot or hold has.
pub const UNKNOWN: i64 = 987_654;

/// Asserts that `body` is an object with exactly `fields` (sorted).
pub fn assert_fields(body: &Value, fields: &[&str]) {
    let mut keys: Vec<&str> = body
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {body}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, fields, "{body}");
}

/// `epoch + offset` as the server writes timestamps.
pub fn wire_at(offset: chrono::Duration) -> String {
    (epoch() + offset)
        .format("%Y-%m-%dT%H:%M:%S%.6f+00:00")
        .to_string()
}

/// Every integer written in `text`.
pub fn numbers_in(text: &str) -> Vec<i64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter_map(|digits| digits.parse().ok())
        .collect()
}

/// `request` with `Owner-Id: owner` when given.
pub fn owned(request: Builder, owner: Option<&str>) -> Builder {
    match owner {
        Some(owner) => request.header("owner-id", owner),
        None => request,
    }
}

/// One response: status, problem code (for `application/problem+json`), headers, JSON body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub code: Option<String>,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    /// Asserts a success with `status`, and returns the body.
    pub fn ok(&self, status: u16) -> &Value {
        assert_eq!((self.status, &self.code), (status, &None), "{}", self.body);
        &self.body
    }

    /// Asserts a success with `status` whose body is a hold with exactly the seed's six
    /// fields, and returns the body.
    pub fn hold(&self, status: u16) -> &Value {
        assert_fields(self.ok(status), &HOLD_FIELDS);
        &self.body
    }

    /// Asserts a problem with `status` and `code`, and returns its detail.
    pub fn problem(&self, status: u16, code: &str) -> &str {
        assert_eq!(
            (self.status, self.code.as_deref()),
            (status, Some(code)),
            "{}",
            self.body
        );
        self.body["detail"].as_str().unwrap_or_default()
    }

    /// Whether it was an idempotent replay (`Idempotent-Replayed: true`).
    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }
}

/// Sends `request` with `body` through `router` (no socket), and checks the response: a
/// problem body is a complete problem, any other is `application/json`, and every 4xx or 5xx
/// is a problem.
pub async fn send(router: &Router, request: Builder, body: &str) -> Reply {
    let request = request.body(Body::from(body.to_owned())).unwrap();
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let exchange = contract::Exchange {
        method: method.as_str(),
        path: &path,
        status,
        content_type: headers.get("content-type").and_then(|v| v.to_str().ok()),
        headers: &headers,
        body: &bytes,
    };
    check_served(&exchange, |prefix| async move {
        let request = Request::get(format!("{prefix}/openapi.json"))
            .body(Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let json = response.status() == 200
            && response
                .headers()
                .get("content-type")
                .is_some_and(|v| v == "application/json");
        json.then_some(())?;
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        Some(bytes.to_vec())
    })
    .await;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let is_problem = is_problem(&headers);
    let (code, body) = parse_body(status, is_problem, &text);
    if !is_problem {
        assert_eq!(headers["content-type"], "application/json", "{text}");
    }
    if status >= 400 {
        assert!(is_problem, "{status} without a problem body: {text}");
    }
    Reply {
        status,
        code,
        headers,
        body,
    }
}

/// The router (with a configuration of the test's) over a fresh database, driven with
/// `oneshot`; the engine behind it on a manual clock (starting at [`epoch`]) without an
/// availability cache; and the store, for looking underneath.
pub struct Oneshot {
    pub router: Router,
    pub engine: Engine,
    pub clock: ManualClock,
    pub store: Arc<dyn ServerStore>,
    _cleanup: Cleanup,
}

impl Oneshot {
    /// Opens the database at `url` (removing `sqlite_dir` when dropped) and routes with
    /// `config`.
    pub async fn open(url: &str, sqlite_dir: Option<PathBuf>, config: &Config) -> Oneshot {
        let store = slot_booking_server::open_store(url).await.unwrap();
        let clock = ManualClock::new(epoch());
        let engine: Engine = BookingEngine::builder(Arc::clone(&store))
            .clock(clock.clone())
            .cache_period(std::time::Duration::ZERO)
            .build();
        Oneshot {
            router: slot_booking_server::router_with_config(engine.clone(), config),
            engine,
            clock,
            store,
            _cleanup: Cleanup(sqlite_dir),
        }
    }

    /// Sends `request` with `body` through the app's router (see [`send`]).
    pub async fn send(&self, request: Builder, body: &str) -> Reply {
        send(&self.router, request, body).await
    }

    /// `POST /slots/{slot}/hold` with `Idempotency-Key: key`, the owner if any, and `body`.
    pub async fn hold(
        &self,
        slot: impl Display,
        key: &str,
        owner: Option<&str>,
        body: &str,
    ) -> Reply {
        let request = Request::post(format!("/slots/{slot}/hold")).header("idempotency-key", key);
        self.send(owned(request, owner), body).await
    }
}

/// Drops a database made by [`postgres_url`] (after a passing test; a failing one leaves it
/// behind for a look).
pub async fn drop_postgres(url: &str) {
    let Some(admin) = gate::known_url() else {
        return;
    };
    let Some((_, name)) = url.rsplit_once('/') else {
        return;
    };
    if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
        let _ = sqlx::query(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await;
    }
}
