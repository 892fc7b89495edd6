//! The administration routes, mounted only when `ADMIN_TOKEN` is set, every one behind
//! `Authorization: Bearer <ADMIN_TOKEN>` (checked once, by a `route_layer` on this router).
//!
//! | method | path | success |
//! |---|---|---|
//! | POST | /admin/slots | 201, `Location`, the slot |
//! | GET | /admin/slots?resource=&from=&to=&after=&limit= | 200 `{"slots":[...],"next_after":cursor}` |
//! | GET | /admin/slots/{slot} | 200, the slot |
//! | POST | /admin/slots/{slot}/capacity | 200, the slot |
//! | POST | /admin/slots/{slot}/close | 200, the slot |
//! | POST | /admin/slots/{slot}/reopen | 200, the slot |
//! | DELETE | /admin/slots/{slot} | 200, the slot with `removed_at` |
//! | GET | /admin/slots/{slot}/holds?after=&limit= | 200 `{"holds":[...],"next_after":id}` |
//!
//! And the pool routes of [`pools`](crate::pools) (`/admin/pools…`).

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, LOCATION};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use slot_booking::model::InvalidSlot;
use slot_booking::{
    AvailabilityQuery, BookingError, HoldPage, NewSlot, PageRequest, Slot, SlotId, SlotPage,
    Timestamp,
};

use crate::body::{Answer, JsonObject};
use crate::config::AdminToken;
use crate::extract::On;
use crate::params::{parse_cursor, parse_resource, parse_time, PageParams, QueryParams};
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// The administration routes, each requiring `token`, answering a method a route lacks with
/// `method_not_allowed` — also only with the token, so that nobody learns without it that
/// the routes exist.
pub(crate) fn routes<H, T>(token: AdminToken, method_not_allowed: H) -> Router<Engine>
where
    H: axum::handler::Handler<T, Engine>,
    T: 'static,
{
    Router::new()
        .route("/admin/slots", get(list_slots).post(create_slot))
        .route("/admin/slots/{slot}", get(get_slot).delete(remove_slot))
        .route("/admin/slots/{slot}/capacity", post(change_capacity))
        .route("/admin/slots/{slot}/close", post(close_sales))
        .route("/admin/slots/{slot}/reopen", post(reopen_sales))
        .route("/admin/slots/{slot}/holds", get(roster))
        .merge(crate::pools::routes())
        .method_not_allowed_fallback(method_not_allowed)
        // `layer`, not `route_layer`: the token is checked before the 405 fallback too.
        .layer(middleware::from_fn_with_state(token, require_token))
}

/// Lets a request through only with `Authorization: Bearer <token>` (scheme in any case);
/// anything else is 401 `unauthorized` with `WWW-Authenticate: Bearer`.
async fn require_token(State(token): State<AdminToken>, request: Request, next: Next) -> Response {
    if presented_token(request.headers()).is_some_and(|presented| token.matches(presented)) {
        next.run(request).await
    } else {
        Problem::unauthorized().into_response()
    }
}

/// The token of the one `Authorization: Bearer <token>` header, if there is exactly one.
fn presented_token(headers: &HeaderMap) -> Option<&[u8]> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let value = value.as_bytes();
    let (scheme, token) = value.split_at_checked(b"Bearer ".len())?;
    scheme
        .eq_ignore_ascii_case(b"Bearer ")
        .then(|| token.trim_ascii_start())
}

/// The body of `POST /admin/slots`. Times that are not RFC 3339 are `invalid_body`; the
/// capacity and the resource are read as they came, for their own codes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewSlotBody {
    #[serde(with = "slot_booking::model::rfc3339")]
    starts_at: Timestamp,
    #[serde(with = "slot_booking::model::rfc3339")]
    ends_at: Timestamp,
    capacity: serde_json::Number,
    #[serde(default)]
    resource: Option<String>,
}

/// The body of `POST /admin/slots/{slot}/capacity`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CapacityBody {
    capacity: serde_json::Number,
}

/// A capacity as sent: a whole number (range checked by the engine), else `invalid_slot`.
/// A capacity from a body: a whole number that fits the crate's `i32` counts of units (the
/// engine checks the lower bound); anything else is `invalid_slot` with what was sent.
fn capacity(number: &serde_json::Number) -> Result<i32, Problem> {
    match number.as_i64() {
        Some(wide) => i32::try_from(wide)
            .map_err(|_| BookingError::InvalidSlot(InvalidSlot::Capacity(wide)).into()),
        None => Err(Problem::bad_request(
            "invalid_slot",
            format!(
                "invalid slot: capacity must be a whole number between 1 and 2147483647, got \
                 {number}"
            ),
        )),
    }
}

/// `POST /admin/slots`: 201 with the slot and its `Location`.
async fn create_slot(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    JsonObject(body): JsonObject<NewSlotBody>,
) -> Result<Response, Problem> {
    let capacity = capacity(&body.capacity)?;
    let mut slot = NewSlot::new(body.starts_at, body.ends_at, capacity);
    if let Some(resource) = body.resource.as_deref() {
        slot = slot.resource(parse_resource(resource)?);
    }
    let slot = engine.create_slot(slot).await?;
    let location = format!("{prefix}/admin/slots/{}", slot.slot_id);
    Ok((StatusCode::CREATED, [(LOCATION, location)], Json(slot)).into_response())
}

/// `?resource=&from=&to=&after=&limit=` of the slot listing.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    resource: Option<String>,
    from: Option<String>,
    to: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
}

/// `GET /admin/slots`: a page of every slot, removed ones included.
async fn list_slots(
    State(engine): State<Engine>,
    QueryParams(params): QueryParams<ListParams>,
) -> Answer<SlotPage> {
    let filter = AvailabilityQuery {
        resource: params.resource.as_deref().map(parse_resource).transpose()?,
        from: parse_time("from", params.from.as_deref())?,
        to: parse_time("to", params.to.as_deref())?,
    };
    let page = PageRequest {
        after: parse_cursor(params.after.as_deref())?,
        limit: params
            .limit
            .unwrap_or(slot_booking::model::DEFAULT_PAGE_SIZE),
    };
    Ok(Json(engine.list_slots(&filter, page).await?))
}

/// `GET /admin/slots/{slot}`.
async fn get_slot(slot: On<SlotId>) -> Answer<Slot> {
    Ok(Json(slot.engine.get_slot(slot.id).await?))
}

/// `POST /admin/slots/{slot}/capacity` with `{"capacity": n}`.
async fn change_capacity(
    slot: On<SlotId>,
    JsonObject(body): JsonObject<CapacityBody>,
) -> Answer<Slot> {
    let capacity = capacity(&body.capacity)?;
    Ok(Json(slot.engine.change_capacity(slot.id, capacity).await?))
}

/// `POST /admin/slots/{slot}/close`: no more holds on it.
async fn close_sales(slot: On<SlotId>) -> Answer<Slot> {
    Ok(Json(slot.engine.close_sales(slot.id).await?))
}

/// `POST /admin/slots/{slot}/reopen`.
async fn reopen_sales(slot: On<SlotId>) -> Answer<Slot> {
    Ok(Json(slot.engine.reopen_sales(slot.id).await?))
}

/// `DELETE /admin/slots/{slot}`: archives it (its holds stay readable).
async fn remove_slot(slot: On<SlotId>) -> Answer<Slot> {
    Ok(Json(slot.engine.remove_slot(slot.id).await?))
}

/// `GET /admin/slots/{slot}/holds`: the slot's holds, every owner's and every status (removed
/// slots included); an unknown slot is `slot_not_found` rather than an empty page.
async fn roster(
    slot: On<SlotId>,
    QueryParams(params): QueryParams<PageParams>,
) -> Answer<HoldPage> {
    let page = params.page()?;
    slot.engine.get_slot(slot.id).await?;
    Ok(Json(slot.engine.slot_holds(slot.id, page).await?))
}
