//! The hold routes: the seed's `POST /slots/{slot}/hold`, `POST /holds/{hold}/confirm` and
//! `DELETE /holds/{hold}`, and the extensions `GET /holds/{hold}`,
//! `POST /holds/{hold}/renew`, `GET /holds` and `POST /holds` (a hold on any one of several
//! slots). Every hold is answered as a [`HoldBody`] of six fields, except in the owner's
//! listing, which shows all of a hold's fields.

use std::time::Duration;

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use slot_booking::candidates::NewAnyHold;
use slot_booking::{BookingError, HoldId, HoldPage, HoldPlaced, NewHold, SlotId, Strategy};

use utoipa::ToSchema;

use crate::body::{Answer, HoldBody, HoldOptions, JsonObject, OptionalJson, RenewOptions};
use crate::extract::{Caller, IdempotencyKey, On, PathId};
use crate::params::{PageParams, QueryParams};
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// `POST /slots/{slot}/hold`: 201 with the hold and its `Location`; the same
/// `Idempotency-Key` again answers the same hold, with `Idempotent-Replayed: true`.
#[utoipa::path(
    post,
    path = "/slots/{slot}/hold",
    tag = "holds",
    operation_id = "hold",
    summary = "Hold units of a slot",
    params(
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
        IdempotencyKey,
        Caller,
    ),
    request_body(content = Option<HoldOptions>, description = "Optional: an empty body holds one unit for the server's hold lifetime."),
    responses(
        (status = 201, description = "The hold (or, with the same key again, the hold it made).", body = HoldBody,
            headers(
                ("Location" = String, description = "The hold's URL: `{prefix}/holds/{hold}`."),
                ("Idempotent-Replayed" = String, description = "`true` when the key's hold was answered again."),
            )),
        (status = 400, description = "`idempotency_key_required`, `invalid_idempotency_key`, `invalid_owner`, `invalid_quantity`, `invalid_lifetime`, `invalid_body` (not a JSON object of the documented fields)."),
        (status = 404, description = "`slot_not_found` (no such slot, or removed), `not_found` (an id that is not all digits)."),
        (status = 409, description = "`slot_closed` (started or sales closed), `sold_out`."),
        (status = 422, description = "`idempotency_key_reused` (the key belongs to another request's hold), `quantity_exceeds_capacity`."),
    )
)]
pub(crate) async fn hold(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    PathId(slot_id): PathId<SlotId>,
    Caller(owner): Caller,
    IdempotencyKey(key): IdempotencyKey,
    OptionalJson(options): OptionalJson<HoldOptions>,
) -> Result<Response, Problem> {
    let quantity = options.quantity.unwrap_or(1);
    let quantity =
        i32::try_from(quantity).map_err(|_| BookingError::InvalidQuantity { quantity })?;
    let mut request = NewHold::new(slot_id, key).quantity(quantity);
    if let Some(owner) = owner {
        request = request.owner(owner);
    }
    if let Some(seconds) = options.lifetime_seconds {
        request = request.lifetime(Duration::from_secs(seconds));
    }
    let placed = engine.place_hold(request).await?;
    Ok(created(&prefix, placed))
}

/// The body of `POST /holds`: a hold on any one of several slots.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AnyHold)]
pub(crate) struct AnyHoldBody {
    /// The candidate slots, 1 to 20, each once, in order of preference.
    #[schema(value_type = Vec<i64>, min_items = 1, max_items = 20)]
    candidates: Vec<SlotId>,
    /// `listed` (default), `least_booked` or `round_robin`.
    #[serde(default)]
    #[schema(value_type = crate::schemas::Strategy, required = false)]
    strategy: Strategy,
    /// Units of the one slot taken (default 1).
    #[schema(minimum = 1, maximum = 1000)]
    quantity: Option<i64>,
    /// How long the hold lasts, in seconds (default: the server's hold lifetime).
    lifetime_seconds: Option<u64>,
}

/// `POST /holds`: a hold on the first of `candidates` (in the order of `strategy`) that has
/// the units free; answered as `POST /slots/{slot}/hold` answers, the body naming the slot
/// taken. 409 `no_candidate_available` names every candidate with its reason.
#[utoipa::path(
    post,
    path = "/holds",
    tag = "holds",
    operation_id = "hold_any",
    summary = "Hold units of any one of several slots",
    params(IdempotencyKey, Caller),
    request_body(content = AnyHoldBody),
    responses(
        (status = 201, description = "The hold, on the first candidate (in the strategy's order) that had the units.", body = HoldBody,
            headers(
                ("Location" = String, description = "The hold's URL: `{prefix}/holds/{hold}`."),
                ("Idempotent-Replayed" = String, description = "`true` when the key's hold was answered again."),
            )),
        (status = 400, description = "`idempotency_key_required`, `invalid_idempotency_key`, `invalid_owner`, `invalid_candidates` (none, more than 20, one twice), `invalid_quantity`, `invalid_lifetime`, `invalid_body`."),
        (status = 409, description = "`no_candidate_available`, with `candidates`: every candidate and why it could not be had."),
        (status = 422, description = "`idempotency_key_reused`."),
    )
)]
pub(crate) async fn hold_any(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    Caller(owner): Caller,
    IdempotencyKey(key): IdempotencyKey,
    JsonObject(body): JsonObject<AnyHoldBody>,
) -> Result<Response, Problem> {
    let quantity = body.quantity.unwrap_or(1);
    let quantity =
        i32::try_from(quantity).map_err(|_| BookingError::InvalidQuantity { quantity })?;
    let mut request = NewAnyHold::new(body.candidates, key)
        .strategy(body.strategy)
        .quantity(quantity);
    request.owner = owner;
    request.lifetime = body.lifetime_seconds.map(Duration::from_secs);
    let placed = engine.hold_any(request).await?;
    Ok(created(&prefix, placed))
}

/// 201 with the hold and its `Location`, and `Idempotent-Replayed: true` on a replay.
fn created(prefix: &str, placed: HoldPlaced) -> Response {
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
    response
}

/// `POST /holds/{hold}/confirm`.
#[utoipa::path(
    post,
    path = "/holds/{hold}/confirm",
    tag = "holds",
    operation_id = "confirm",
    summary = "Confirm a hold",
    params(
        ("hold" = i64, Path, description = "The hold (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    responses(
        (status = 200, description = "The hold, `confirmed` (a confirmed one is answered unchanged).", body = HoldBody),
        (status = 400, description = "`invalid_owner`."),
        (status = 404, description = "`hold_not_found` (no such hold, or another owner's), `not_found`."),
        (status = 409, description = "`hold_cancelled`, `hold_expired`."),
    )
)]
pub(crate) async fn confirm(hold: On<HoldId>, caller: Caller) -> Answer<HoldBody> {
    let confirmed = hold.engine.confirm(&caller.scope(), hold.id).await?;
    Ok(Json(confirmed.into()))
}

/// `DELETE /holds/{hold}`: cancels it.
#[utoipa::path(
    delete,
    path = "/holds/{hold}",
    tag = "holds",
    operation_id = "cancel",
    summary = "Cancel a hold",
    params(
        ("hold" = i64, Path, description = "The hold (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    responses(
        (status = 200, description = "The hold, `cancelled`, its units given back (a cancelled one is answered unchanged).", body = HoldBody),
        (status = 400, description = "`invalid_owner`."),
        (status = 404, description = "`hold_not_found`, `not_found`."),
        (status = 409, description = "`hold_expired`."),
    )
)]
pub(crate) async fn cancel(hold: On<HoldId>, caller: Caller) -> Answer<HoldBody> {
    let cancelled = hold.engine.cancel(&caller.scope(), hold.id).await?;
    Ok(Json(cancelled.into()))
}

/// `GET /holds/{hold}`.
#[utoipa::path(
    get,
    path = "/holds/{hold}",
    tag = "holds",
    operation_id = "get_hold",
    summary = "Read a hold",
    params(
        ("hold" = i64, Path, description = "The hold (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    responses(
        (status = 200, description = "The hold, its status as of now.", body = HoldBody),
        (status = 400, description = "`invalid_owner`."),
        (status = 404, description = "`hold_not_found`, `not_found`."),
    )
)]
pub(crate) async fn get_hold(hold: On<HoldId>, caller: Caller) -> Answer<HoldBody> {
    let found = hold.engine.get_hold(&caller.scope(), hold.id).await?;
    Ok(Json(found.into()))
}

/// `POST /holds/{hold}/renew`, with an optional `{"lifetime_seconds": n}`.
#[utoipa::path(
    post,
    path = "/holds/{hold}/renew",
    tag = "holds",
    operation_id = "renew",
    summary = "Extend a held hold",
    params(
        ("hold" = i64, Path, description = "The hold (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    request_body(content = Option<RenewOptions>, description = "Optional: an empty body renews for the server's hold lifetime."),
    responses(
        (status = 200, description = "The hold, `expires_at` now plus the lifetime (never shortened, capped by the engine's maximum hold life; a confirmed hold unchanged).", body = HoldBody),
        (status = 400, description = "`invalid_owner`, `invalid_lifetime`, `invalid_body`."),
        (status = 404, description = "`hold_not_found`, `not_found`."),
        (status = 409, description = "`hold_cancelled`, `hold_expired`."),
    )
)]
pub(crate) async fn renew(
    hold: On<HoldId>,
    caller: Caller,
    OptionalJson(options): OptionalJson<RenewOptions>,
) -> Answer<HoldBody> {
    let lifetime = options.lifetime_seconds.map(Duration::from_secs);
    let renewed = hold
        .engine
        .renew(&caller.scope(), hold.id, lifetime)
        .await?;
    Ok(Json(renewed.into()))
}

/// `GET /holds?after=&limit=`: a page of the caller's holds; each entry is a
/// [`Hold`](slot_booking::Hold) with all its fields.
#[utoipa::path(
    get,
    path = "/holds",
    tag = "holds",
    operation_id = "list_holds",
    summary = "The caller's holds",
    params(
        ("Owner-Id" = String, Header, min_length = 1, pattern = "^[!-~]+$", description = "Whose holds: an owner id of 1 to 255 visible ASCII characters, required here (without it 400 `owner_required`), signed as `<owner>.<signature>` when `OWNER_SECRET` is set."),
        PageParams,
    ),
    responses(
        (status = 200, description = "A page of the owner's holds by id, each with all its fields.", body = crate::schemas::HoldPage),
        (status = 400, description = "`owner_required`, `invalid_owner`, `invalid_query` (an unknown parameter, an `after` that is not a hold id), `invalid_page` (`limit` outside 1–1000)."),
    )
)]
pub(crate) async fn list_holds(
    State(engine): State<Engine>,
    Caller(owner): Caller,
    QueryParams(params): QueryParams<PageParams>,
) -> Answer<HoldPage> {
    let detail = "send the Owner-Id header whose holds to list";
    let owner = owner.ok_or_else(|| Problem::bad_request("owner_required", detail))?;
    Ok(Json(engine.owner_holds(&owner, params.page()?).await?))
}
