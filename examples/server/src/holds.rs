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

use crate::body::{Answer, HoldBody, HoldOptions, JsonObject, OptionalJson, RenewOptions};
use crate::extract::{Caller, IdempotencyKey, On, PathId};
use crate::params::{PageParams, QueryParams};
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// `POST /slots/{slot}/hold`: 201 with the hold and its `Location`; the same
/// `Idempotency-Key` again answers the same hold, with `Idempotent-Replayed: true`.
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
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnyHoldBody {
    /// The candidate slots, 1 to 20, each once, in order of preference.
    candidates: Vec<SlotId>,
    /// `listed` (default), `least_booked` or `round_robin`.
    #[serde(default)]
    strategy: Strategy,
    /// Units of the one slot taken (default 1).
    quantity: Option<i64>,
    /// How long the hold lasts (default: the server's hold lifetime).
    lifetime_seconds: Option<u64>,
}

/// `POST /holds`: a hold on the first of `candidates` (in the order of `strategy`) that has
/// the units free; answered as `POST /slots/{slot}/hold` answers, the body naming the slot
/// taken. 409 `no_candidate_available` names every candidate with its reason.
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
pub(crate) async fn confirm(hold: On<HoldId>, caller: Caller) -> Answer<HoldBody> {
    let confirmed = hold.engine.confirm_as(&caller.scope(), hold.id).await?;
    Ok(Json(confirmed.into()))
}

/// `DELETE /holds/{hold}`: cancels it.
pub(crate) async fn cancel(hold: On<HoldId>, caller: Caller) -> Answer<HoldBody> {
    let cancelled = hold.engine.cancel_as(&caller.scope(), hold.id).await?;
    Ok(Json(cancelled.into()))
}

/// `GET /holds/{hold}`.
pub(crate) async fn get_hold(hold: On<HoldId>, caller: Caller) -> Answer<HoldBody> {
    let found = hold.engine.get_hold_as(&caller.scope(), hold.id).await?;
    Ok(Json(found.into()))
}

/// `POST /holds/{hold}/renew`, with an optional `{"lifetime_seconds": n}`.
pub(crate) async fn renew(
    hold: On<HoldId>,
    caller: Caller,
    OptionalJson(options): OptionalJson<RenewOptions>,
) -> Answer<HoldBody> {
    let lifetime = options.lifetime_seconds.map(Duration::from_secs);
    let renewed = hold
        .engine
        .renew_as(&caller.scope(), hold.id, lifetime)
        .await?;
    Ok(Json(renewed.into()))
}

/// `GET /holds?after=&limit=`: a page of the caller's holds; each entry is a
/// [`Hold`](slot_booking::Hold) with all its fields.
pub(crate) async fn list_holds(
    State(engine): State<Engine>,
    Caller(owner): Caller,
    QueryParams(params): QueryParams<PageParams>,
) -> Answer<HoldPage> {
    let detail = "send the Owner-Id header whose holds to list";
    let owner = owner.ok_or_else(|| Problem::bad_request("owner_required", detail))?;
    Ok(Json(engine.owner_holds(&owner, params.page()?).await?))
}
