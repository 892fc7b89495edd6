//! The HTTP face of `slot_booking`: an axum [`Router`] over a [`BookingEngine`].
//!
//! This crate backs the `server` example (`cargo run --example server`) and its end-to-end
//! tests. It is an example of using the library, not part of it: the library knows nothing of
//! HTTP, and every status code below is this crate's choice.
//!
//! | method | path | success |
//! |---|---|---|
//! | GET | /slots/availability?from=&to=&resource=&limit=&after= | 200 `{"slots":[...]}` with `Cache-Control: max-age=N`; at most `AVAILABILITY_PAGE_LIMIT` entries, `Link: <…>; rel="next"` when more remain; with `limit`/`after`, `{"slots":[...],"next_after":cursor}` (extension) |
//! | POST | /slots/{slot}/hold | 201, `Location`, the hold (`Idempotency-Key` header required) |
//! | POST | /holds/{hold}/confirm | 200, the hold |
//! | DELETE | /holds/{hold} | 200, the hold |
//! | GET | /holds/{hold} | 200, the hold |
//! | POST | /holds/{hold}/renew | 200, the hold (extension) |
//! | GET | /holds?after=&limit= | 200 `{"holds":[...],"next_after":id}`: the caller's holds (extension; `Owner-Id` required) |
//! | POST | /admin/slots | 201, `Location`, the slot (administration) |
//! | GET | /admin/slots?resource=&from=&to=&after=&limit= | 200 `{"slots":[...],"next_after":cursor}`: every slot with its units (administration) |
//! | GET | /admin/slots/{slot} | 200, the slot (administration) |
//! | POST | /admin/slots/{slot}/capacity | 200, the slot (administration; `{"capacity": n}`) |
//! | POST | /admin/slots/{slot}/close | 200, the slot (administration) |
//! | POST | /admin/slots/{slot}/reopen | 200, the slot (administration) |
//! | DELETE | /admin/slots/{slot} | 200, the slot with `removed_at` (administration) |
//! | GET | /admin/slots/{slot}/holds?after=&limit= | 200 `{"holds":[...],"next_after":id}`: the slot's roster (administration) |
//! | GET | /metrics | 200, Prometheus text (`text/plain; version=0.0.4`): the engine's metrics (observability) |
//!
//! A hold body is always the same six fields: `hold_id`, `slot_id`, `status`, `expires_at`,
//! `confirmed_at`, `cancelled_at`. Errors are `application/problem+json` with a machine `code`.
//!
//! Extensions a client of the original four routes never meets:
//!
//! * an `Owner-Id` header (1–255 visible ASCII characters) on any hold route: a hold placed
//!   with it belongs to that owner, and every later call on it must present the same header
//!   (without it, or with another, the hold is `hold_not_found`); without the header a client
//!   sees only holds placed without one, as before. **`Owner-Id` is trusted as sent**: put the
//!   server behind the application's authentication, which sets it from the authenticated
//!   user and drops any value a client sent, or use unguessable owner ids, or set
//!   `OWNER_SECRET` ([`Config::owner_secret`]) and `Owner-Id` must be `<owner>.<signature>`
//!   signed by the application ([`owner`]; anything else is 400 `invalid_owner`);
//! * a JSON body on `POST /slots/{slot}/hold`: `{"quantity": 3, "lifetime_seconds": 600}`,
//!   both optional (one unit and the server's hold lifetime by default);
//! * `POST /holds/{hold}/renew`, optionally with `{"lifetime_seconds": 600}`;
//! * `GET /holds`, the `Owner-Id`'s holds in pages by id, with quantity, owner and
//!   `created_at` (`limit` 1–1000, default 100; `after` the `next_after` of the previous
//!   page);
//! * a `resource` query parameter on `GET /slots/availability`: only that resource's slots.
//!   An entry shows `"resource"` only for a slot that has one, so a slot without keeps the
//!   seed's five fields (`slot_id`, `starts_at`, `ends_at`, `capacity`, `remaining`);
//! * pages of `GET /slots/availability` ([`availability`]): no response lists more than
//!   `AVAILABILITY_PAGE_LIMIT` entries (default 1000); when more remain, a
//!   `Link: <…>; rel="next"` header (RFC 8288) gives the next page's URL (with the same
//!   `from`, `to`, `resource` and `limit`). `limit` (1 to that maximum) and `after` (the
//!   previous page's `next_after`, the last entry's `<microseconds>_<slot id>`) ask for a
//!   page, and then the body adds `"next_after"` (`null` on the last page). A bad `limit` is
//!   400 `invalid_page` (out of range) or `invalid_query` (not a number), a bad `after` 400
//!   `invalid_query`. A client that sends neither, over no more slots than the maximum, gets
//!   the seed's body and headers byte for byte.
//!
//! Administration exists only when `ADMIN_TOKEN` is set (without it every `/admin/...` path is
//! `not_found`, like any unknown path), under the same `PATH_PREFIX`, and every route needs
//! `Authorization: Bearer <ADMIN_TOKEN>` (else 401 `unauthorized` with
//! `WWW-Authenticate: Bearer`). A slot body there has eight fields: `slot_id`, `starts_at`,
//! `ends_at`, `capacity`, `remaining`, `resource`, `closed`, `removed_at`. Refusals:
//! `capacity_taken` (409) when lowering a capacity would take held or confirmed units,
//! `slot_in_use` (409) when removing a slot that still has some, `invalid_slot`,
//! `invalid_resource`, `invalid_body`, `invalid_query` and `invalid_page` (400) for bad input.
//! Removal archives: the slot takes no more holds (`slot_not_found`) and leaves availability,
//! while its holds stay readable and the listing still shows it.
//!
//! `/metrics` (under the same `PATH_PREFIX`) serves what `slot_booking` records through the
//! `metrics` facade ([`slot_booking::observe`]): operations by outcome, store latency
//! histograms, availability cache hits, misses, loads and stale serves. The first router
//! built installs the process's Prometheus recorder ([`install_metrics`]). The server logs
//! one line per request through its `tracing` subscriber (`INFO`; `REQUEST_LOG=0` turns it
//! off, see [`Config::request_log`]); the engine's spans are at `DEBUG`.
//!
//! [`run`] is the whole server: [`Config`] from flags and the environment (checked before
//! anything is opened; [`main_from_env`] answers `--help` and `--version` first), the [`Database`] (migrated, demo slots added once), the engine following the
//! database's changes ([`Database::follow_changes`], so a commit by another server process
//! on the same database soon invalidates this one's cached listing), and [`serve()`] with
//! its connection bounds (at `MAX_CONNECTIONS`, the longest-idle keep-alive connection is
//! closed to admit a newcomer; never one in the middle of a request or response). Limits a
//! client meets:
//!
//! | limit | answer |
//! |---|---|
//! | request head not complete within `HEADER_TIMEOUT_SECONDS` | connection closed |
//! | body not complete within `BODY_TIMEOUT_SECONDS` | 408 `body_timeout` |
//! | body over [`MAX_BODY_BYTES`] | 413 `payload_too_large` |
//! | malformed body (bad chunked encoding) | 400 `invalid_body` |
//! | URI over [`MAX_URI_BYTES`] | 414 `uri_too_long` |
//! | headers over [`MAX_HEADER_BYTES`] in all | 431 `headers_too_large` |
//!
//! hyper answers some requests before they reach the router, with an empty body: a request
//! line or header it cannot parse (400), more than 100 headers or a head over its ~400 KiB
//! buffer (431), a URI over 64 KiB (414).
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, LOCATION, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::{Json, Router};
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use slot_booking::model::{rfc3339, ParseIdError};
use slot_booking::{
    BookingEngine, BookingError, Hold, HoldId, HoldPage, HoldStatus, NewHold, OwnerId, PageRequest,
    ResourceId, Scope, SlotId, Store, StoreError,
};
use std::future::Future;

mod admin;
pub mod availability;
pub mod config;
pub mod database;
pub mod events;
pub mod observe;
pub mod owner;
pub mod serve;

pub use config::{AdminToken, CommandLineExit, Config, ConfigError};
pub use database::{demo_slots, Database};
pub use observe::install_metrics;
pub use owner::OwnerSecret;
pub use serve::{listen, serve};

/// The engine the router serves: any store behind a trait object.
pub type Engine = BookingEngine<Arc<dyn Store>>;

/// Largest request body accepted; larger ones get 413.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Longest request URI accepted (path and query); longer ones get 414.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Most bytes of header names and values accepted in one request; more get 431.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Seconds a client is told to wait after a 503.
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// The routes, at the root of the path space, with the default limits.
pub fn router(engine: Engine) -> Router {
    router_with_config(engine, &Config::default())
}

/// 405 for a route that exists without the request's method.
async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this method is not allowed on this resource",
    )
}

/// Where the routes are mounted, for the `Location` of a new hold or slot.
#[derive(Debug, Clone)]
struct PathPrefix(Arc<str>);

/// The routes under `config.path_prefix` (validated by [`Config`]), with its body timeout, and
/// the administration routes when `config.admin_token` is set (without it they do not exist:
/// `/admin/...` is `not_found` like any unknown path), and `/metrics` (installing the
/// process's Prometheus recorder if no router has yet: [`install_metrics`]).
pub fn router_with_config(engine: Engine, config: &Config) -> Router {
    install_metrics();
    let prefix = config.path_prefix.trim_end_matches('/');
    let pages = Arc::new(availability::Pages::new(
        config.availability_page_limit,
        prefix,
    ));
    let mut routes = Router::new()
        .route(
            "/slots/availability",
            get(move |engine, params| {
                availability::availability(engine, Arc::clone(&pages), params)
            }),
        )
        .route("/slots/{slot}/hold", post(hold))
        .route("/holds/{hold}/confirm", post(confirm))
        .route("/holds/{hold}", get(get_hold).delete(cancel))
        .route("/holds/{hold}/renew", post(renew))
        .route("/holds", get(list_holds))
        .route("/metrics", get(observe::metrics));
    if let Some(token) = &config.admin_token {
        routes = routes.merge(admin::routes(token.clone(), method_not_allowed));
    }
    let routes = routes
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(engine);
    let app = if prefix.is_empty() {
        routes
    } else {
        Router::new().nest(prefix, routes)
    };
    let (body_timeout, request_log) = (config.body_timeout, config.request_log);
    // One middleware for the log line, the head limits and the body: each `from_fn` layer
    // costs a boxed future and a clone of the service behind it on every request.
    app.fallback(|| async { Problem::not_found() })
        .layer(middleware::from_fn(move |request, next| {
            front(request, next, body_timeout, request_log)
        }))
        .layer(Extension(PathPrefix(Arc::from(prefix))))
        .layer(Extension(OwnerSigning(
            config.owner_secret.clone().map(Arc::new),
        )))
}

/// The server, configured from the command line and the environment
/// ([`Config::from_command_line`]): `--help` and `--version` print and exit 0; an argument it
/// does not take exits 2 with one line on stderr; an invalid setting (before anything is
/// opened) or a failure to start exits 1 with one line on stderr.
pub async fn main_from_env() -> ExitCode {
    let config = match Config::from_command_line(std::env::args_os()) {
        Ok(config) => config,
        Err(CommandLineExit::Print(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(CommandLineExit::Usage(line)) => {
            eprintln!("{line}");
            return ExitCode::from(2);
        }
        Err(CommandLineExit::Invalid(error)) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match run(config, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the database, adds the demo slots (once, across processes), follows the database's
/// changes (from every process on it) for as long as it serves, and serves until `shutdown`
/// completes. Logs `following changes in the … database` once following, then
/// `serving on http://<address>` when it accepts connections. Failing to follow is a startup
/// error, like an unreachable database.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), String> {
    // Before the database is opened, so that the demo slots are counted too.
    install_metrics();
    let scheme = config.database_url.split(':').next().unwrap_or_default();
    let database = Database::open(&config.database_url)
        .await
        .map_err(|e| format!("cannot open the {scheme} database: {e}"))?
        .on_database_clock();
    if config.demo_slots {
        let added = database
            .seed(&demo_slots(chrono::Utc::now()), chrono::Utc::now())
            .await
            .map_err(|e| format!("cannot add demo slots: {e}"))?;
        if added > 0 {
            tracing::info!("added {added} demo slots");
        }
    }
    let engine: Engine = BookingEngine::builder(database.store())
        .hold_ttl(config.hold_ttl)
        .cache_period(config.cache_period)
        .build();
    // Other processes on this database commit too: their changes invalidate this engine's
    // listing soon after, instead of when its cache period ends. Kept for the server's life.
    let follower = database
        .follow_changes(engine.invalidator())
        .await
        .map_err(|e| format!("cannot follow changes in the {scheme} database: {e}"))?;
    tracing::info!(
        "following changes in the {scheme} database ({})",
        match &database {
            Database::Postgres(_) => "LISTEN/NOTIFY",
            Database::Sqlite(_) => "data_version polling",
        }
    );
    // Every committed change is logged from the database's event log, and expired holds are
    // swept so their `hold_expired` events come soon.
    let events = database
        .log_events(events::log)
        .map_err(|e| format!("cannot start the event log: {e}"))?;
    let listener = serve::listen(&config.bind)
        .map_err(|e| format!("cannot listen on {}: {e}", config.bind))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(
        max_connections = config.max_connections,
        "serving on http://{address} ({scheme})"
    );
    let app = router_with_config(engine, &config);
    let left_open = serve(listener, app, &config, shutdown).await;
    follower.stop().await;
    events.stop().await;
    tracing::info!(left_open, "shut down");
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {},
        _ = terminate => {},
    }
}

/// Opens the store a `DATABASE_URL` names (`sqlite:` or `postgres:`/`postgresql:`) and applies
/// its migrations. Time comes from the engine's clock (see [`Database::on_database_clock`]).
pub async fn open_store(database_url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Database::open(database_url).await?.store())
}

// ---- handlers -------------------------------------------------------------------------------

fn parse_resource(raw: &str) -> Result<ResourceId, Problem> {
    ResourceId::new(raw)
        .map_err(|error| Problem::bad_request("invalid_resource", error.to_string()))
}

fn parse_time(name: &str, raw: Option<&str>) -> Result<Option<slot_booking::Timestamp>, Problem> {
    raw.map(|raw| {
        rfc3339::parse(raw).map_err(|_| {
            Problem::invalid_query(format!(
                "`{name}` must be an RFC 3339 timestamp, got {raw:?}"
            ))
        })
    })
    .transpose()
}

/// A hold as the seed's clients know it: exactly six fields, whatever the hold's quantity or
/// owner.
#[derive(Serialize)]
struct HoldBody {
    hold_id: HoldId,
    slot_id: SlotId,
    status: HoldStatus,
    #[serde(with = "rfc3339")]
    expires_at: slot_booking::Timestamp,
    #[serde(with = "rfc3339::option")]
    confirmed_at: Option<slot_booking::Timestamp>,
    #[serde(with = "rfc3339::option")]
    cancelled_at: Option<slot_booking::Timestamp>,
}

impl From<Hold> for HoldBody {
    fn from(hold: Hold) -> Self {
        HoldBody {
            hold_id: hold.hold_id,
            slot_id: hold.slot_id,
            status: hold.status,
            expires_at: hold.expires_at,
            confirmed_at: hold.confirmed_at,
            cancelled_at: hold.cancelled_at,
        }
    }
}

/// The secret `Owner-Id` values must be signed with, if any ([`Config::owner_secret`]).
#[derive(Clone)]
struct OwnerSigning(Option<Arc<OwnerSecret>>);

/// Who is calling: the owner named by the `Owner-Id` header (signed, when the server has an
/// [`OwnerSecret`]), or an anonymous client.
struct Caller(Option<OwnerId>);

impl Caller {
    fn scope(&self) -> Scope {
        Scope::of(self.0.clone())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        let mut values = parts.headers.get_all("owner-id").iter();
        let value = match (values.next(), values.next()) {
            (None, _) => return Ok(Caller(None)),
            (Some(value), None) => value,
            (Some(_), Some(_)) => {
                return Err(Problem::bad_owner("send at most one Owner-Id header"))
            }
        };
        let raw = value
            .to_str()
            .map_err(|_| Problem::bad_owner("the Owner-Id header must be visible ASCII"))?;
        let owner = match parts.extensions.get::<OwnerSigning>() {
            Some(OwnerSigning(Some(secret))) => secret
                .verify(raw)
                .map_err(|error| Problem::bad_owner(&error.to_string()))?,
            _ => OwnerId::new(raw).map_err(|error| Problem::bad_owner(&error.to_string()))?,
        };
        Ok(Caller(Some(owner)))
    }
}

/// The optional JSON body of a hold request.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HoldOptions {
    quantity: Option<i64>,
    lifetime_seconds: Option<u64>,
}

/// The optional JSON body of a renewal.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RenewOptions {
    lifetime_seconds: Option<u64>,
}

/// An optional JSON body: empty is the default, anything else must parse.
fn options<T: Default + serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Problem> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    json_body(body)
}

/// A JSON object of the documented fields, else `invalid_body`.
fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Problem> {
    // An object only: serde would also read a JSON array by position.
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body)
        .and_then(|object| serde_json::from_value(serde_json::Value::Object(object)))
        .map_err(|error| {
            Problem::bad_request(
                "invalid_body",
                format!("the request body must be a JSON object of the documented fields: {error}"),
            )
        })
}

async fn hold(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    SlotPath(slot_id): SlotPath,
    Caller(owner): Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Problem> {
    let key = idempotency_key(&headers)?;
    let options: HoldOptions = options(&body)?;
    let mut request = NewHold::new(slot_id, key).quantity(options.quantity.unwrap_or(1));
    if let Some(owner) = owner {
        request = request.owner(owner);
    }
    if let Some(seconds) = options.lifetime_seconds {
        request = request.lifetime(Duration::from_secs(seconds));
    }
    let placed = engine.place_hold(request).await?;
    let location = format!("{prefix}/holds/{}", placed.hold.hold_id);
    let mut response = (
        StatusCode::CREATED,
        [(LOCATION, location)],
        Json(HoldBody::from(placed.hold)),
    )
        .into_response();
    if placed.replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

async fn confirm(
    State(engine): State<Engine>,
    HoldPath(hold_id): HoldPath,
    caller: Caller,
) -> Result<Json<HoldBody>, Problem> {
    Ok(Json(
        engine.confirm_as(&caller.scope(), hold_id).await?.into(),
    ))
}

async fn cancel(
    State(engine): State<Engine>,
    HoldPath(hold_id): HoldPath,
    caller: Caller,
) -> Result<Json<HoldBody>, Problem> {
    Ok(Json(
        engine.cancel_as(&caller.scope(), hold_id).await?.into(),
    ))
}

async fn get_hold(
    State(engine): State<Engine>,
    HoldPath(hold_id): HoldPath,
    caller: Caller,
) -> Result<Json<HoldBody>, Problem> {
    Ok(Json(
        engine.get_hold_as(&caller.scope(), hold_id).await?.into(),
    ))
}

async fn renew(
    State(engine): State<Engine>,
    HoldPath(hold_id): HoldPath,
    caller: Caller,
    body: Bytes,
) -> Result<Json<HoldBody>, Problem> {
    let options: RenewOptions = options(&body)?;
    let lifetime = options.lifetime_seconds.map(Duration::from_secs);
    Ok(Json(
        engine
            .renew_as(&caller.scope(), hold_id, lifetime)
            .await?
            .into(),
    ))
}

/// `?after=&limit=` of a page of holds.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PageParams {
    after: Option<String>,
    limit: Option<u32>,
}

/// A page of holds by id from `?after=&limit=` (`limit` checked by the engine).
fn hold_page(params: PageParams) -> Result<PageRequest, Problem> {
    let after = params
        .after
        .map(|raw| {
            raw.parse::<HoldId>().map_err(|_| {
                Problem::invalid_query(format!("`after` must be a hold id, got {raw:?}"))
            })
        })
        .transpose()?;
    Ok(PageRequest {
        after,
        limit: params.limit.unwrap_or(PageRequest::default().limit),
    })
}

/// A page of the caller's holds; each entry is a [`Hold`] with all its fields.
async fn list_holds(
    State(engine): State<Engine>,
    Caller(owner): Caller,
    params: Result<Query<PageParams>, QueryRejection>,
) -> Result<Json<HoldPage>, Problem> {
    let Query(params) = params.map_err(|e| Problem::invalid_query(e.body_text()))?;
    let owner = owner.ok_or_else(|| {
        Problem::bad_request(
            "owner_required",
            "send the Owner-Id header whose holds to list",
        )
    })?;
    Ok(Json(engine.owner_holds(&owner, hold_page(params)?).await?))
}

/// The `{slot}` of a path.
struct SlotPath(SlotId);

/// The `{hold}` of a path.
struct HoldPath(HoldId);

impl<S: Send + Sync> FromRequestParts<S> for SlotPath {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        path_id(parts, state, "slot_not_found", "slot")
            .await
            .map(SlotPath)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for HoldPath {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        path_id(parts, state, "hold_not_found", "hold")
            .await
            .map(HoldPath)
    }
}

/// The path's one id: anything but digits matches no route (the generic 404); digits too
/// large for an id are a 404 of the resource itself (`slot_not_found` / `hold_not_found`).
async fn path_id<Id, S>(
    parts: &mut Parts,
    state: &S,
    code: &'static str,
    resource: &str,
) -> Result<Id, Problem>
where
    Id: std::str::FromStr<Err = ParseIdError>,
    S: Send + Sync,
{
    let Ok(Path(raw)) = Path::<String>::from_request_parts(parts, state).await else {
        return Err(Problem::not_found());
    };
    raw.parse::<Id>().map_err(|error| match error {
        ParseIdError::NotDigits => Problem::not_found(),
        ParseIdError::TooLarge => Problem::new(
            StatusCode::NOT_FOUND,
            code,
            format!("{resource} {raw} not found"),
        ),
    })
}

/// The `Idempotency-Key` header, bare (`abc`) or as a structured-field string (`"abc"`).
fn idempotency_key(headers: &HeaderMap) -> Result<String, Problem> {
    let mut values = headers.get_all("idempotency-key").iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        let problem = if headers.contains_key("idempotency-key") {
            Problem::bad_key("send exactly one Idempotency-Key header")
        } else {
            Problem::bad_request(
                "idempotency_key_required",
                "the Idempotency-Key header is required",
            )
        };
        return Err(problem);
    };
    let raw = value
        .to_str()
        .map_err(|_| Problem::bad_key("the Idempotency-Key header must be visible ASCII"))?;
    match raw.strip_prefix('"') {
        None => Ok(raw.to_owned()),
        Some(quoted) => unquote(quoted)
            .ok_or_else(|| Problem::bad_key("the quoted Idempotency-Key is not a valid string")),
    }
}

/// Decodes the rest of an RFC 8941 string after its opening quote: `\"` and `\\` are the only
/// escapes, and the closing quote must end the value.
fn unquote(rest: &str) -> Option<String> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                escaped @ ('"' | '\\') => out.push(escaped),
                _ => return None,
            },
            '"' => return chars.as_str().is_empty().then_some(out),
            c => out.push(c),
        }
    }
    None
}

// ---- errors ---------------------------------------------------------------------------------

/// An `application/problem+json` error response (RFC 9457) with a machine `code`.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    code: &'static str,
    detail: String,
}

#[derive(Serialize)]
struct ProblemBody<'a> {
    r#type: &'static str,
    title: &'a str,
    status: u16,
    detail: &'a str,
    code: &'a str,
}

impl Problem {
    /// A problem with the given status, code and human-readable detail.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Problem {
            status,
            code,
            detail: detail.into(),
        }
    }

    /// A 400 problem with the given code and detail.
    fn bad_request(code: &'static str, detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, code, detail)
    }

    fn not_found() -> Self {
        Problem::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
    }

    fn invalid_query(detail: impl Into<String>) -> Self {
        Problem::bad_request("invalid_query", detail)
    }

    fn bad_key(detail: &str) -> Self {
        Problem::bad_request("invalid_idempotency_key", detail)
    }

    fn bad_owner(detail: &str) -> Self {
        Problem::bad_request("invalid_owner", detail)
    }
}

impl From<BookingError> for Problem {
    fn from(error: BookingError) -> Self {
        let status = match &error {
            BookingError::SlotNotFound { .. } | BookingError::HoldNotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            BookingError::SlotClosed { .. }
            | BookingError::SoldOut { .. }
            | BookingError::HoldCancelled { .. }
            | BookingError::HoldExpired { .. }
            | BookingError::CapacityTaken { .. }
            | BookingError::SlotInUse { .. } => StatusCode::CONFLICT,
            BookingError::IdempotencyKeyReused { .. }
            | BookingError::QuantityExceedsCapacity { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            BookingError::InvalidIdempotencyKey(_)
            | BookingError::InvalidSlot(_)
            | BookingError::InvalidQuery
            | BookingError::InvalidQuantity { .. }
            | BookingError::InvalidLifetime { .. }
            | BookingError::InvalidOwner(_)
            | BookingError::InvalidPage { .. } => StatusCode::BAD_REQUEST,
            // A transient failure is worth a retry (503 + Retry-After); anything else is a
            // fault a retry only repeats (500, no Retry-After).
            BookingError::Store(store) if store.is_transient() => {
                tracing::warn!(error = %store, "store unavailable");
                StatusCode::SERVICE_UNAVAILABLE
            }
            BookingError::Store(store) => {
                tracing::error!(error = %store, "store failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let detail = match &error {
            // Store details (addresses, SQL) stay in the log.
            BookingError::Store(store) if store.is_transient() => {
                "the booking store is unavailable; retry shortly".to_owned()
            }
            BookingError::Store(_) => "the booking store failed; see the server log".to_owned(),
            other => other.to_string(),
        };
        Problem::new(status, error.code(), detail)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = ProblemBody {
            r#type: "about:blank",
            title: self.status.canonical_reason().unwrap_or("Error"),
            status: self.status.as_u16(),
            detail: &self.detail,
            code: self.code,
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = (self.status, json).into_response();
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

// ---- middleware -----------------------------------------------------------------------------

/// What every request goes through before its route, and the one log line after it: the
/// head limits ([`limit_head`]), then the body ([`read_body`]), then the route; the line
/// (`INFO`, `request`, with method, path, status and microseconds) is written for every
/// answer, refusals included, unless `log` is off ([`Config::request_log`]).
async fn front(request: Request, next: Next, body_timeout: Duration, log: bool) -> Response {
    // A clone of the URI shares its bytes: the path is read from it for the log line.
    let logged = log.then(|| {
        (
            Instant::now(),
            request.method().clone(),
            request.uri().clone(),
        )
    });
    let response = match limit_head(&request) {
        Some(refusal) => refusal,
        None => read_body(request, next, body_timeout).await,
    };
    if let Some((started, method, uri)) = logged {
        tracing::info!(
            %method,
            path = %uri.path(),
            status = response.status().as_u16(),
            micros = started.elapsed().as_micros() as u64,
            "request"
        );
    }
    response
}

/// Refuses a URI over [`MAX_URI_BYTES`] (414) and headers over [`MAX_HEADER_BYTES`] (431)
/// with a problem body; hyper's own, larger limits answer without one.
fn limit_head(request: &Request) -> Option<Response> {
    let uri_bytes = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if uri_bytes > MAX_URI_BYTES {
        return Some(
            Problem::new(
                StatusCode::URI_TOO_LONG,
                "uri_too_long",
                format!("request URIs are limited to {MAX_URI_BYTES} bytes"),
            )
            .into_response(),
        );
    }
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if header_bytes > MAX_HEADER_BYTES {
        return Some(
            Problem::new(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers_too_large",
                format!("request headers are limited to {MAX_HEADER_BYTES} bytes in all"),
            )
            .into_response(),
        );
    }
    None
}

/// Reads the body before routing, within `timeout` and [`MAX_BODY_BYTES`]: too large is 413
/// (announced by `Content-Length` or found while streaming), too slow 408, malformed (a
/// broken chunked encoding) 400. The small accepted body is passed on as is, for the routes
/// that take one. A request that has no body (most: no `Content-Length`, or 0, and not
/// chunked) goes on at once, without a timer.
async fn read_body(request: Request, next: Next, timeout: Duration) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let too_large = || {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request bodies are limited to {MAX_BODY_BYTES} bytes"),
        )
        .into_response()
    };
    let announced = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let (parts, body) = request.into_parts();
    let limited = http_body_util::Limited::new(body, MAX_BODY_BYTES);
    let bytes: Bytes = match tokio::time::timeout(timeout, limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => return too_large(),
        Ok(Err(error)) => {
            return Problem::bad_request(
                "invalid_body",
                format!("the request body could not be read: {error}"),
            )
            .into_response()
        }
        Err(_) => {
            return Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} seconds",
                    timeout.as_secs()
                ),
            )
            .into_response()
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::unquote;

    #[test]
    fn quoted_keys_follow_rfc_8941_strings() {
        assert_eq!(unquote(r#"abc""#), Some("abc".into()));
        assert_eq!(unquote(r#"a\"b\\c""#), Some(r#"a"b\c"#.into()));
        assert_eq!(unquote(r#"abc"#), None, "no closing quote");
        assert_eq!(unquote(r#"ab"c"#), None, "text after the closing quote");
        assert_eq!(unquote(r#"a\nb""#), None, "unknown escape");
        assert_eq!(unquote(r#"""#), Some(String::new()));
    }
}
