//! The HTTP face of `slot_booking`: an axum [`Router`](axum::Router) over a
//! [`BookingEngine`](slot_booking::BookingEngine).
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
//! | GET | /changes | 200 `text/event-stream`: every committed change as it happens, resuming after `Last-Event-ID` as far back as `HISTORY_RETENTION_SECONDS` keeps changes, else after a `reset` event ([`live`]; extension) |
//! | GET | /metrics | 200, Prometheus text (`text/plain; version=0.0.4`): the engine's metrics (observability) |
//! | GET | /openapi.json | 200, the OpenAPI 3.1 document of exactly the routes served ([`openapi`]) |
//! | GET | / | 200, `text/html`: a page to try the API from a browser (the coming slots with their free units, kept current from `/changes`; holds to place, confirm, renew and cancel) |
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
//! * bookings of several lines: `POST /bookings` with `Idempotency-Key` (and `Owner-Id` if
//!   any) and `{"lines": [{"slot_id": 1, "quantity": 2}, {"slot_id": 4}], "lifetime_seconds":
//!   600}` (quantity 1 and the hold lifetime by default) takes every line or none: 201 with the
//!   booking (`booking_id`, `status`, `expires_at`, `confirmed_at`, `cancelled_at`, `owner`,
//!   `created_at`, `lines` of `hold_id`, `slot_id`, `quantity`), or 409 `lines_unavailable`
//!   whose `lines` name every line that cannot be had, each with its `problem` (`code`
//!   `sold_out` with `free`, `quantity_exceeds_capacity` with `capacity`, `slot_closed`,
//!   `slot_not_found`); 400 `invalid_booking` for no lines, more than 50, a slot twice or a
//!   bad quantity. `GET /bookings/{id}`, `POST /bookings/{id}/confirm`,
//!   `DELETE /bookings/{id}` and `POST /bookings/{id}/renew` act on every line at once, and so
//!   do the hold routes on any line's `hold_id` (answering that line in six fields);
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
//! `ends_at`, `capacity`, `stored_remaining` (the slot row's counter, expired holds not yet
//! reclaimed counted as taken), `resource`, `closed`, `removed_at`; the listing's `remaining`
//! counts such holds as free, as availability does. Refusals:
//! `capacity_taken` (409) when lowering a capacity would take held or confirmed units,
//! `slot_in_use` (409) when removing a slot that still has some, `invalid_slot`,
//! `invalid_resource`, `invalid_body`, `invalid_query` and `invalid_page` (400) for bad input.
//! Removal archives: the slot takes no more holds (`slot_not_found`) and leaves availability,
//! while its holds stay readable and the listing still shows it.
//!
//! `/openapi.json` (under the same `PATH_PREFIX`, which the document's `servers` entry names)
//! is the OpenAPI 3.1 document of every route the router serves — administration only when
//! `ADMIN_TOKEN` mounts it — with their parameters, bodies, every status each answers and its
//! schema, errors as `application/problem+json`. It is made from the handlers'
//! `#[utoipa::path]` annotations as `utoipa-axum` registers them: the server adds no route
//! without one. [`openapi`] builds the same document for a [`Config`] without serving it.
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
//! on the same database soon invalidates this one's cached listing), its event log,
//! reclaimer and purger of history older than `HISTORY_RETENTION_SECONDS` ([`events`]), and
//! [`serve()`] with its connection bounds (at `MAX_CONNECTIONS`, the longest-idle keep-alive connection is
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

mod admin;
pub mod availability;
mod bearer;
mod body;
mod bookings;
mod capacity;
pub mod config;
pub mod database;
pub mod events;
mod extract;
mod holds;
mod lifecycle;
pub mod live;
mod middleware;
pub mod observe;
mod openapi;
pub mod owner;
mod page;
mod params;
mod pools;
mod problem;
mod router;
mod schemas;
mod secret;
pub mod serve;
mod state;
mod waitlists;

pub use config::{AdminToken, CommandLineExit, Config, ConfigError};
pub use database::{demo_slots, Database};
pub use lifecycle::{init_logging, main_from_env, open_store, run, shutdown_signal};
pub use middleware::{MAX_BODY_BYTES, MAX_HEADER_BYTES, MAX_URI_BYTES};
pub use observe::install_metrics;
pub use owner::OwnerSecret;
pub use problem::{Problem, RETRY_AFTER_SECONDS};
pub use router::{openapi, router, router_with_config};
pub use serve::{listen, serve};
pub use state::{Engine, ServerStore};
