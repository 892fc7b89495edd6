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

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::header::{AUTHORIZATION, LOCATION};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use slot_booking::model::InvalidSlot;
use slot_booking::{
    BookingError, HoldPage, NewSlot, Slot, SlotCursor, SlotFilter, SlotPage, SlotPageRequest,
    Timestamp,
};

use crate::config::AdminToken;
use crate::{
    hold_page, json_body, parse_resource, parse_time, Engine, PageParams, PathPrefix, Problem,
    SlotPath,
};

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
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send Authorization: Bearer <ADMIN_TOKEN>",
        )
        .into_response()
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
fn capacity(number: &serde_json::Number) -> Result<i64, Problem> {
    let Some(capacity) = number.as_i64() else {
        return Err(Problem::bad_request(
            "invalid_slot",
            format!("invalid slot: capacity must be a whole number between 1 and 2147483647, got {number}"),
        ));
    };
    Ok(capacity)
}

async fn create_slot(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    body: Bytes,
) -> Result<Response, Problem> {
    let body: NewSlotBody = json_body(&body)?;
    let capacity = capacity(&body.capacity)?;
    let capacity = i32::try_from(capacity)
        .map_err(|_| BookingError::InvalidSlot(InvalidSlot::Capacity(capacity)))?;
    let mut slot = NewSlot::new(body.starts_at, body.ends_at, capacity);
    if let Some(resource) = body.resource.as_deref() {
        slot = slot.resource(parse_resource(resource)?);
    }
    let slot = engine.create_slot(slot).await?;
    let location = format!("{prefix}/admin/slots/{}", slot.slot_id);
    Ok((StatusCode::CREATED, [(LOCATION, location)], Json(slot)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    resource: Option<String>,
    from: Option<String>,
    to: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
}

async fn list_slots(
    State(engine): State<Engine>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<SlotPage>, Problem> {
    let Query(params) = params.map_err(|e| Problem::invalid_query(e.body_text()))?;
    let filter = SlotFilter {
        resource: params.resource.as_deref().map(parse_resource).transpose()?,
        from: parse_time("from", params.from.as_deref())?,
        to: parse_time("to", params.to.as_deref())?,
    };
    let after = params
        .after
        .map(|raw| raw.parse::<SlotCursor>())
        .transpose()
        .map_err(|error| Problem::invalid_query(format!("`after`: {error}")))?;
    let page = SlotPageRequest {
        after,
        limit: params.limit.unwrap_or(SlotPageRequest::default().limit),
    };
    Ok(Json(engine.list_slots(&filter, page).await?))
}

async fn get_slot(
    State(engine): State<Engine>,
    SlotPath(slot_id): SlotPath,
) -> Result<Json<Slot>, Problem> {
    Ok(Json(engine.get_slot(slot_id).await?))
}

async fn change_capacity(
    State(engine): State<Engine>,
    SlotPath(slot_id): SlotPath,
    body: Bytes,
) -> Result<Json<Slot>, Problem> {
    let body: CapacityBody = json_body(&body)?;
    let capacity = capacity(&body.capacity)?;
    Ok(Json(engine.change_capacity(slot_id, capacity).await?))
}

async fn close_sales(
    State(engine): State<Engine>,
    SlotPath(slot_id): SlotPath,
) -> Result<Json<Slot>, Problem> {
    Ok(Json(engine.close_sales(slot_id).await?))
}

async fn reopen_sales(
    State(engine): State<Engine>,
    SlotPath(slot_id): SlotPath,
) -> Result<Json<Slot>, Problem> {
    Ok(Json(engine.reopen_sales(slot_id).await?))
}

async fn remove_slot(
    State(engine): State<Engine>,
    SlotPath(slot_id): SlotPath,
) -> Result<Json<Slot>, Problem> {
    Ok(Json(engine.remove_slot(slot_id).await?))
}

/// The slot's holds, every owner's and every status (removed slots included); an unknown slot
/// is `slot_not_found` rather than an empty page.
async fn roster(
    State(engine): State<Engine>,
    SlotPath(slot_id): SlotPath,
    params: Result<Query<PageParams>, QueryRejection>,
) -> Result<Json<HoldPage>, Problem> {
    let Query(params) = params.map_err(|e| Problem::invalid_query(e.body_text()))?;
    let page = hold_page(params)?;
    engine.get_slot(slot_id).await?;
    Ok(Json(engine.slot_holds(slot_id, page).await?))
}
