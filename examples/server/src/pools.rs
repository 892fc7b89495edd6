//! The pool administration routes (capacities shared by several slots), mounted with the
//! other administration routes behind `ADMIN_TOKEN`:
//!
//! | method | path | success |
//! |---|---|---|
//! | POST | /admin/pools `{"capacity": n}` | 201, `Location`, the pool |
//! | GET | /admin/pools/{pool} | 200, the pool |
//! | POST | /admin/pools/{pool}/capacity `{"capacity": n}` | 200, the pool |
//! | PUT | /admin/pools/{pool}/slots/{slot} | 200, the pool with the slot attached |
//! | DELETE | /admin/pools/{pool}/slots/{slot} | 200, the pool without it |
//!
//! A pool reads `{"pool_id", "capacity", "remaining", "held", "confirmed", "slots"}`; its
//! refusals are `pool_not_found` (404), `pool_in_use` and `too_many_pools` (409) and
//! `invalid_pool` (400).

use axum::extract::{FromRequestParts, Path, State};
use axum::http::header::LOCATION;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use slot_booking::{NewPool, PoolId, PoolSummary, SlotId};
use utoipa::ToSchema;
use utoipa_axum::routes;

use crate::body::{Answer, JsonObject};
use crate::capacity::{invalid_pool, whole, CapacityChangeBody};
use crate::extract::{parse_id, On};
use crate::openapi::Documented;
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// The pool routes, for [`admin::routes`](crate::admin) to mount behind its token.
pub(crate) fn routes() -> Documented {
    Documented::group()
        .path(routes!(create_pool))
        .path(routes!(get_pool))
        .path(routes!(change_capacity))
        .path(routes!(attach_slot, detach_slot))
}

/// The body of `POST /admin/pools` and `POST /admin/pools/{pool}/capacity`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PoolCapacity)]
struct CapacityBody {
    /// Units the pool's slots may take together, 0 to 2147483647.
    #[schema(value_type = i64, minimum = 0, maximum = 2147483647)]
    capacity: serde_json::Number,
}

/// `POST /admin/pools`: 201 with the pool and its `Location`.
#[utoipa::path(
    post,
    path = "/admin/pools",
    tag = "administration",
    operation_id = "create_pool",
    summary = "Create a pool",
    request_body(content = CapacityBody),
    responses(
        (status = 201, description = "The pool, with no slots yet.", body = crate::schemas::Pool,
            headers(("Location" = String, description = "The pool's URL: `{prefix}/admin/pools/{pool}`."))),
        (status = 400, description = "`invalid_pool` (a capacity out of range or not a whole number), `invalid_body`."),
    )
)]
async fn create_pool(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    JsonObject(body): JsonObject<CapacityBody>,
) -> Result<Response, Problem> {
    let pool = engine
        .create_pool(NewPool::new(whole(&body.capacity, invalid_pool)?))
        .await?;
    let location = format!("{prefix}/admin/pools/{}", pool.pool_id);
    Ok((StatusCode::CREATED, [(LOCATION, location)], Json(pool)).into_response())
}

/// `GET /admin/pools/{pool}`.
#[utoipa::path(
    get,
    path = "/admin/pools/{pool}",
    tag = "administration",
    operation_id = "get_pool",
    summary = "Read a pool",
    params(
        ("pool" = i64, Path, description = "The pool (digits; anything else is 404 `not_found`)."),
    ),
    responses(
        (status = 200, description = "The pool and where its units are.", body = crate::schemas::Pool),
        (status = 404, description = "`pool_not_found`, `not_found`."),
    )
)]
async fn get_pool(pool: On<PoolId>) -> Answer<PoolSummary> {
    Ok(Json(pool.engine.get_pool(pool.id).await?))
}

/// `POST /admin/pools/{pool}/capacity` with `{"capacity": n}`, `{"add": n}` or
/// `{"capacity": n, "expected": m}` ([`CapacityChangeBody`]).
#[utoipa::path(
    post,
    path = "/admin/pools/{pool}/capacity",
    tag = "administration",
    operation_id = "change_pool_capacity",
    summary = "Change a pool's capacity",
    params(
        ("pool" = i64, Path, description = "The pool (digits; anything else is 404 `not_found`)."),
    ),
    request_body(content = CapacityChangeBody),
    responses(
        (status = 200, description = "The pool.", body = crate::schemas::Pool),
        (status = 400, description = "`invalid_pool` (a capacity out of range, before or after an `add`), `invalid_body` (both or neither of `capacity` and `add`, or `expected` without `capacity`)."),
        (status = 404, description = "`pool_not_found`, `not_found`."),
        (status = 409, description = "`pool_in_use`: lower than the units its slots hold or confirmed. `pool_capacity_changed`: the capacity is no longer the `expected` one; nothing changed."),
    )
)]
async fn change_capacity(
    pool: On<PoolId>,
    JsonObject(body): JsonObject<CapacityChangeBody>,
) -> Answer<PoolSummary> {
    let change = body.change(invalid_pool)?;
    Ok(Json(
        pool.engine.change_pool_capacity(pool.id, change).await?,
    ))
}

/// `PUT /admin/pools/{pool}/slots/{slot}`: the slot draws from the pool too.
#[utoipa::path(
    put,
    path = "/admin/pools/{pool}/slots/{slot}",
    tag = "administration",
    operation_id = "attach_slot",
    summary = "Make a slot draw from a pool",
    params(
        ("pool" = i64, Path, description = "The pool (digits; anything else is 404 `not_found`)."),
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
    ),
    responses(
        (status = 200, description = "The pool with the slot (idempotent).", body = crate::schemas::Pool),
        (status = 404, description = "`pool_not_found`, `slot_not_found`, `not_found`."),
        (status = 409, description = "`pool_in_use` (the slot's units held or confirmed do not fit the pool), `too_many_pools` (the slot is in as many pools as it may be)."),
    )
)]
async fn attach_slot(State(engine): State<Engine>, ids: PoolSlot) -> Answer<PoolSummary> {
    Ok(Json(engine.attach_slot(ids.pool, ids.slot).await?))
}

/// `DELETE /admin/pools/{pool}/slots/{slot}`.
#[utoipa::path(
    delete,
    path = "/admin/pools/{pool}/slots/{slot}",
    tag = "administration",
    operation_id = "detach_slot",
    summary = "Stop a slot drawing from a pool",
    params(
        ("pool" = i64, Path, description = "The pool (digits; anything else is 404 `not_found`)."),
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
    ),
    responses(
        (status = 200, description = "The pool without the slot (idempotent).", body = crate::schemas::Pool),
        (status = 404, description = "`pool_not_found`, `slot_not_found`, `not_found`."),
    )
)]
async fn detach_slot(State(engine): State<Engine>, ids: PoolSlot) -> Answer<PoolSummary> {
    Ok(Json(engine.detach_slot(ids.pool, ids.slot).await?))
}

/// The path's `{pool}` and `{slot}`: anything but digits matches no route (404); digits too
/// large for an id are `pool_not_found` or `slot_not_found`.
struct PoolSlot {
    pool: PoolId,
    slot: SlotId,
}

impl<S: Send + Sync> FromRequestParts<S> for PoolSlot {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        let Ok(Path((pool, slot))) =
            Path::<(String, String)>::from_request_parts(parts, state).await
        else {
            return Err(Problem::not_found());
        };
        Ok(PoolSlot {
            pool: parse_id(&pool)?,
            slot: parse_id(&slot)?,
        })
    }
}
