//! The optional booking routes: `POST /bookings` (several lines, all or nothing),
//! `GET /bookings/{booking}`, `POST /bookings/{booking}/confirm`, `DELETE /bookings/{booking}`
//! and `POST /bookings/{booking}/renew`. A booking's id is its first line's hold id; the seed's
//! hold routes on any line act on the whole booking.

use std::time::Duration;

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use slot_booking::model::rfc3339;
use slot_booking::{
    Booking, BookingError, HoldId, HoldStatus, NewBooking, OwnerId, SlotId, Timestamp,
};

use utoipa::ToSchema;

use crate::body::{Answer, JsonObject, OptionalJson, RenewOptions};
use crate::extract::{Caller, IdempotencyKey, On};
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// The body of `POST /bookings`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = BookingRequest)]
pub(crate) struct BookingRequestBody {
    /// The lines: 1 to 50, each slot once.
    #[schema(min_items = 1, max_items = 50)]
    lines: Vec<LineBody>,
    /// How long the booking lasts unconfirmed, in seconds (default: the server's hold
    /// lifetime).
    lifetime_seconds: Option<u64>,
}

/// One line of a booking request.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = BookingRequestLine)]
struct LineBody {
    #[schema(value_type = i64)]
    slot_id: SlotId,
    /// Units of the slot (default 1).
    #[schema(minimum = 1, maximum = 1000)]
    quantity: Option<i64>,
}

/// A booking as the server answers it: the status, expiry and times every line shares, and
/// each line's hold id, slot and units.
#[derive(Serialize, ToSchema)]
#[schema(as = Booking)]
pub(crate) struct BookingBody {
    /// The booking's id: its first line's hold id.
    #[schema(value_type = i64)]
    booking_id: HoldId,
    #[schema(value_type = crate::schemas::HoldStatus)]
    status: HoldStatus,
    #[serde(with = "rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
    #[serde(with = "rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    confirmed_at: Option<Timestamp>,
    #[serde(with = "rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    cancelled_at: Option<Timestamp>,
    /// Who it belongs to; `null` for a booking made without `Owner-Id`.
    #[schema(value_type = Option<String>, required = true)]
    owner: Option<OwnerId>,
    #[serde(with = "rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    lines: Vec<LineOut>,
}

/// One line of a booking as answered.
#[derive(Serialize, ToSchema)]
#[schema(as = BookingLine)]
struct LineOut {
    /// The line's hold: the hold routes act on the whole booking through it.
    #[schema(value_type = i64)]
    hold_id: HoldId,
    #[schema(value_type = i64)]
    slot_id: SlotId,
    quantity: i32,
}

impl From<Booking> for BookingBody {
    fn from(booking: Booking) -> Self {
        let lead = booking.lead().clone();
        BookingBody {
            booking_id: booking.booking_id,
            status: lead.status,
            expires_at: lead.expires_at,
            confirmed_at: lead.confirmed_at,
            cancelled_at: lead.cancelled_at,
            owner: lead.owner,
            created_at: lead.created_at,
            lines: booking
                .lines
                .into_iter()
                .map(|line| LineOut {
                    hold_id: line.hold_id,
                    slot_id: line.slot_id,
                    quantity: line.quantity,
                })
                .collect(),
        }
    }
}

/// `POST /bookings` with `Idempotency-Key`: 201 with the booking and its `Location`; the same
/// key and lines again answer the same booking with `Idempotent-Replayed: true`. A refusal
/// names every line that cannot be had (409 `lines_unavailable`, with `lines`).
#[utoipa::path(
    post,
    path = "/bookings",
    tag = "bookings",
    operation_id = "book",
    summary = "Hold several lines, all or none",
    params(IdempotencyKey, Caller),
    request_body(content = BookingRequestBody),
    responses(
        (status = 201, description = "The booking (or, with the same key and lines again, the booking it made).", body = BookingBody,
            headers(
                ("Location" = String, description = "The booking's URL: `{prefix}/bookings/{booking}`."),
                ("Idempotent-Replayed" = String, description = "`true` when the key's booking was answered again."),
            )),
        (status = 400, description = "`idempotency_key_required`, `invalid_idempotency_key`, `invalid_owner`, `invalid_booking` (no lines, more than 50, a slot twice, a bad quantity), `invalid_quantity`, `invalid_lifetime`, `invalid_body`."),
        (status = 404, description = "`slot_not_found`: a booking of one line is a hold, and answers as one; its slot is not there (or removed)."),
        (status = 409, description = "`lines_unavailable`, with `lines`: every line of a booking of several lines that cannot be had and why. A booking of one line is a hold, and answers as one: `sold_out`, `slot_closed`."),
        (status = 422, description = "`idempotency_key_reused`; `quantity_exceeds_capacity` for a booking of one line (a hold)."),
    )
)]
pub(crate) async fn book(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    Caller(owner): Caller,
    IdempotencyKey(key): IdempotencyKey,
    JsonObject(body): JsonObject<BookingRequestBody>,
) -> Result<Response, Problem> {
    let mut request = NewBooking::new(key);
    for line in body.lines {
        let quantity = line.quantity.unwrap_or(1);
        let quantity =
            i32::try_from(quantity).map_err(|_| BookingError::InvalidQuantity { quantity })?;
        request = request.line(line.slot_id, quantity);
    }
    request.owner = owner;
    request.lifetime = body.lifetime_seconds.map(Duration::from_secs);
    let placed = engine.book(request).await?;
    let location = format!("{prefix}/bookings/{}", placed.booking.booking_id);
    let mut response = (
        StatusCode::CREATED,
        [(LOCATION, location)],
        Json(BookingBody::from(placed.booking)),
    )
        .into_response();
    if placed.replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// `GET /bookings/{booking}`.
#[utoipa::path(
    get,
    path = "/bookings/{booking}",
    tag = "bookings",
    operation_id = "get_booking",
    summary = "Read a booking",
    params(
        ("booking" = i64, Path, description = "The booking: its `booking_id`, or any line's `hold_id` (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    responses(
        (status = 200, description = "The booking, its status as of now.", body = BookingBody),
        (status = 400, description = "`invalid_owner`."),
        (status = 404, description = "`hold_not_found`, `not_found`."),
    )
)]
pub(crate) async fn get_booking(booking: On<HoldId>, caller: Caller) -> Answer<BookingBody> {
    let found = booking
        .engine
        .get_booking(&caller.scope(), booking.id)
        .await?;
    Ok(Json(found.into()))
}

/// `POST /bookings/{booking}/confirm`: every line at once.
#[utoipa::path(
    post,
    path = "/bookings/{booking}/confirm",
    tag = "bookings",
    operation_id = "confirm_booking",
    summary = "Confirm every line of a booking",
    params(
        ("booking" = i64, Path, description = "The booking: its `booking_id`, or any line's `hold_id` (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    responses(
        (status = 200, description = "The booking, `confirmed`.", body = BookingBody),
        (status = 400, description = "`invalid_owner`."),
        (status = 404, description = "`hold_not_found`, `not_found`."),
        (status = 409, description = "`hold_cancelled`, `hold_expired`."),
    )
)]
pub(crate) async fn confirm(booking: On<HoldId>, caller: Caller) -> Answer<BookingBody> {
    let confirmed = booking
        .engine
        .confirm_booking(&caller.scope(), booking.id)
        .await?;
    Ok(Json(confirmed.into()))
}

/// `DELETE /bookings/{booking}`: cancels every line at once.
#[utoipa::path(
    delete,
    path = "/bookings/{booking}",
    tag = "bookings",
    operation_id = "cancel_booking",
    summary = "Cancel every line of a booking",
    params(
        ("booking" = i64, Path, description = "The booking: its `booking_id`, or any line's `hold_id` (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    responses(
        (status = 200, description = "The booking, `cancelled`.", body = BookingBody),
        (status = 400, description = "`invalid_owner`."),
        (status = 404, description = "`hold_not_found`, `not_found`."),
        (status = 409, description = "`hold_expired`."),
    )
)]
pub(crate) async fn cancel(booking: On<HoldId>, caller: Caller) -> Answer<BookingBody> {
    let cancelled = booking
        .engine
        .cancel_booking(&caller.scope(), booking.id)
        .await?;
    Ok(Json(cancelled.into()))
}

/// `POST /bookings/{booking}/renew`, with an optional `{"lifetime_seconds": n}`.
#[utoipa::path(
    post,
    path = "/bookings/{booking}/renew",
    tag = "bookings",
    operation_id = "renew_booking",
    summary = "Extend every line of a booking",
    params(
        ("booking" = i64, Path, description = "The booking: its `booking_id`, or any line's `hold_id` (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    request_body(content = Option<RenewOptions>, description = "Optional: an empty body renews for the server's hold lifetime."),
    responses(
        (status = 200, description = "The booking, its new `expires_at`.", body = BookingBody),
        (status = 400, description = "`invalid_owner`, `invalid_lifetime`, `invalid_body`."),
        (status = 404, description = "`hold_not_found`, `not_found`."),
        (status = 409, description = "`hold_cancelled`, `hold_expired`."),
    )
)]
pub(crate) async fn renew(
    booking: On<HoldId>,
    caller: Caller,
    OptionalJson(options): OptionalJson<RenewOptions>,
) -> Answer<BookingBody> {
    let lifetime = options.lifetime_seconds.map(Duration::from_secs);
    let renewed = booking
        .engine
        .renew_booking(&caller.scope(), booking.id, lifetime)
        .await?;
    Ok(Json(renewed.into()))
}
