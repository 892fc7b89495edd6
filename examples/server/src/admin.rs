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

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use slot_booking::{
    AvailabilityQuery, HoldPage, NewSlot, PageRequest, Slot, SlotId, SlotPage, Timestamp,
};

use utoipa::{IntoParams, ToSchema};
use utoipa_axum::routes;

use crate::body::{Answer, JsonObject};
use crate::capacity::{invalid_slot, whole, CapacityChangeBody};
use crate::config::AdminToken;
use crate::extract::On;
use crate::openapi::Documented;
use crate::params::{parse_cursor, parse_resource, parse_time, PageParams, QueryParams};
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// The administration routes, each requiring `token`, answering a method a route lacks with
/// `method_not_allowed` — also only with the token, so that nobody learns without it that
/// the routes exist ([`Documented::behind_token`]).
pub(crate) fn routes(token: AdminToken) -> Documented {
    Documented::group()
        .path(routes!(list_slots, create_slot))
        .path(routes!(get_slot, remove_slot))
        .path(routes!(change_capacity))
        .path(routes!(close_sales))
        .path(routes!(reopen_sales))
        .path(routes!(roster))
        .merge(crate::pools::routes())
        .behind_token(token)
}

/// The body of `POST /admin/slots`. Times that are not RFC 3339 are `invalid_body`; the
/// capacity and the resource are read as they came, for their own codes.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewSlot)]
struct NewSlotBody {
    #[serde(with = "slot_booking::model::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    starts_at: Timestamp,
    /// After `starts_at`.
    #[serde(with = "slot_booking::model::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    ends_at: Timestamp,
    /// Units to sell, 1 to 2147483647.
    #[schema(value_type = i64, minimum = 1, maximum = 2147483647)]
    capacity: serde_json::Number,
    /// What the slot is a time of (1–255 visible ASCII characters).
    #[serde(default)]
    resource: Option<String>,
}

/// `POST /admin/slots`: 201 with the slot and its `Location`.
#[utoipa::path(
    post,
    path = "/admin/slots",
    tag = "administration",
    operation_id = "create_slot",
    summary = "Create a slot",
    request_body(content = NewSlotBody),
    responses(
        (status = 201, description = "The slot.", body = crate::schemas::Slot,
            headers(("Location" = String, description = "The slot's URL: `{prefix}/admin/slots/{slot}`."))),
        (status = 400, description = "`invalid_slot` (`ends_at` not after `starts_at`, a capacity out of range or not a whole number), `invalid_resource`, `invalid_body`."),
    )
)]
async fn create_slot(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    JsonObject(body): JsonObject<NewSlotBody>,
) -> Result<Response, Problem> {
    let capacity = whole(&body.capacity, invalid_slot)?;
    let mut slot = NewSlot::new(body.starts_at, body.ends_at, capacity);
    if let Some(resource) = body.resource.as_deref() {
        slot = slot.resource(parse_resource(resource)?);
    }
    let slot = engine.create_slot(slot).await?;
    let location = format!("{prefix}/admin/slots/{}", slot.slot_id);
    Ok((StatusCode::CREATED, [(LOCATION, location)], Json(slot)).into_response())
}

/// `?resource=&from=&to=&after=&limit=` of the slot listing (another parameter is
/// `invalid_query`).
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListParams {
    /// Only this resource's slots.
    resource: Option<String>,
    /// Only slots starting at or after this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    from: Option<String>,
    /// Only slots starting before this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    to: Option<String>,
    /// The `next_after` of the previous page (`<microseconds>_<slot id>`).
    after: Option<String>,
    /// Slots in the page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
}

/// `GET /admin/slots`: a page of every slot, removed ones included.
#[utoipa::path(
    get,
    path = "/admin/slots",
    tag = "administration",
    operation_id = "list_slots",
    summary = "Every slot, with its units",
    params(ListParams),
    responses(
        (status = 200, description = "A page of every slot (closed and removed ones included), by `starts_at` then `slot_id`.", body = crate::schemas::SlotPage),
        (status = 400, description = "`invalid_query` (an unknown parameter, a time or cursor that cannot be read), `invalid_page`, `invalid_resource`."),
    )
)]
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
#[utoipa::path(
    get,
    path = "/admin/slots/{slot}",
    tag = "administration",
    operation_id = "get_slot",
    summary = "Read a slot",
    params(
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
    ),
    responses(
        (status = 200, description = "The slot (a removed one too).", body = crate::schemas::Slot),
        (status = 404, description = "`slot_not_found`, `not_found`."),
    )
)]
async fn get_slot(slot: On<SlotId>) -> Answer<Slot> {
    Ok(Json(slot.engine.get_slot(slot.id).await?))
}

/// `POST /admin/slots/{slot}/capacity` with `{"capacity": n}`, `{"add": n}` or
/// `{"capacity": n, "expected": m}` ([`CapacityChangeBody`]).
#[utoipa::path(
    post,
    path = "/admin/slots/{slot}/capacity",
    tag = "administration",
    operation_id = "change_slot_capacity",
    summary = "Change a slot's capacity",
    params(
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
    ),
    request_body(content = CapacityChangeBody),
    responses(
        (status = 200, description = "The slot, its free units moved by the same amount.", body = crate::schemas::Slot),
        (status = 400, description = "`invalid_slot` (a capacity out of range or not a whole number, before or after an `add`), `invalid_body` (both or neither of `capacity` and `add`, or `expected` without `capacity`)."),
        (status = 404, description = "`slot_not_found` (no such slot, or removed), `not_found`."),
        (status = 409, description = "`capacity_taken`: lower than the units held or confirmed. `capacity_changed`: the capacity is no longer the `expected` one (the problem's detail names it); nothing changed."),
    )
)]
async fn change_capacity(
    slot: On<SlotId>,
    JsonObject(body): JsonObject<CapacityChangeBody>,
) -> Answer<Slot> {
    let change = body.change(invalid_slot)?;
    Ok(Json(slot.engine.change_capacity(slot.id, change).await?))
}

/// `POST /admin/slots/{slot}/close`: no more holds on it.
#[utoipa::path(
    post,
    path = "/admin/slots/{slot}/close",
    tag = "administration",
    operation_id = "close_sales",
    summary = "Close a slot's sales",
    params(
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
    ),
    responses(
        (status = 200, description = "The slot, `closed` (idempotent).", body = crate::schemas::Slot),
        (status = 404, description = "`slot_not_found` (no such slot, or removed), `not_found`."),
    )
)]
async fn close_sales(slot: On<SlotId>) -> Answer<Slot> {
    Ok(Json(slot.engine.close_sales(slot.id).await?))
}

/// `POST /admin/slots/{slot}/reopen`.
#[utoipa::path(
    post,
    path = "/admin/slots/{slot}/reopen",
    tag = "administration",
    operation_id = "reopen_sales",
    summary = "Reopen a slot's sales",
    params(
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
    ),
    responses(
        (status = 200, description = "The slot, not `closed` (idempotent).", body = crate::schemas::Slot),
        (status = 404, description = "`slot_not_found` (no such slot, or removed), `not_found`."),
    )
)]
async fn reopen_sales(slot: On<SlotId>) -> Answer<Slot> {
    Ok(Json(slot.engine.reopen_sales(slot.id).await?))
}

/// `DELETE /admin/slots/{slot}`: archives it (its holds stay readable).
#[utoipa::path(
    delete,
    path = "/admin/slots/{slot}",
    tag = "administration",
    operation_id = "remove_slot",
    summary = "Remove (archive) a slot",
    params(
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
    ),
    responses(
        (status = 200, description = "The slot with `removed_at`; its holds stay readable.", body = crate::schemas::Slot),
        (status = 404, description = "`slot_not_found` (no such slot, or removed already), `not_found`."),
        (status = 409, description = "`slot_in_use`: units are still held or confirmed."),
    )
)]
async fn remove_slot(slot: On<SlotId>) -> Answer<Slot> {
    Ok(Json(slot.engine.remove_slot(slot.id).await?))
}

/// `GET /admin/slots/{slot}/holds`: the slot's holds, every owner's and every status (removed
/// slots included); an unknown slot is `slot_not_found` rather than an empty page.
#[utoipa::path(
    get,
    path = "/admin/slots/{slot}/holds",
    tag = "administration",
    operation_id = "slot_holds",
    summary = "A slot's holds",
    params(
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
        PageParams,
    ),
    responses(
        (status = 200, description = "A page of the slot's holds by id, every owner's and every status.", body = crate::schemas::HoldPage),
        (status = 400, description = "`invalid_query`, `invalid_page`."),
        (status = 404, description = "`slot_not_found`, `not_found`."),
    )
)]
async fn roster(
    slot: On<SlotId>,
    QueryParams(params): QueryParams<PageParams>,
) -> Answer<HoldPage> {
    let page = params.page()?;
    slot.engine.get_slot(slot.id).await?;
    Ok(Json(slot.engine.slot_holds(slot.id, page).await?))
}
