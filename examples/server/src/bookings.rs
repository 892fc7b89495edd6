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

use crate::body::{Answer, JsonObject, OptionalJson, RenewOptions};
use crate::extract::{Caller, IdempotencyKey, On};
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// The body of `POST /bookings`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BookingRequestBody {
    /// The lines: 1 to 50, each slot once.
    lines: Vec<LineBody>,
    /// How long the booking lasts unconfirmed (default: the server's hold lifetime).
    lifetime_seconds: Option<u64>,
}

/// One line of a booking request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LineBody {
    slot_id: SlotId,
    /// Units of the slot (default 1).
    quantity: Option<i64>,
}

/// A booking as the server answers it: the status, expiry and times every line shares, and
/// each line's hold id, slot and units.
#[derive(Serialize)]
pub(crate) struct BookingBody {
    booking_id: HoldId,
    status: HoldStatus,
    #[serde(with = "rfc3339")]
    expires_at: Timestamp,
    #[serde(with = "rfc3339::option")]
    confirmed_at: Option<Timestamp>,
    #[serde(with = "rfc3339::option")]
    cancelled_at: Option<Timestamp>,
    owner: Option<OwnerId>,
    #[serde(with = "rfc3339")]
    created_at: Timestamp,
    lines: Vec<LineOut>,
}

/// One line of a booking as answered.
#[derive(Serialize)]
struct LineOut {
    hold_id: HoldId,
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
pub(crate) async fn get_booking(booking: On<HoldId>, caller: Caller) -> Answer<BookingBody> {
    let found = booking
        .engine
        .get_booking_as(&caller.scope(), booking.id)
        .await?;
    Ok(Json(found.into()))
}

/// `POST /bookings/{booking}/confirm`: every line at once.
pub(crate) async fn confirm(booking: On<HoldId>, caller: Caller) -> Answer<BookingBody> {
    let confirmed = booking
        .engine
        .confirm_booking_as(&caller.scope(), booking.id)
        .await?;
    Ok(Json(confirmed.into()))
}

/// `DELETE /bookings/{booking}`: cancels every line at once.
pub(crate) async fn cancel(booking: On<HoldId>, caller: Caller) -> Answer<BookingBody> {
    let cancelled = booking
        .engine
        .cancel_booking_as(&caller.scope(), booking.id)
        .await?;
    Ok(Json(cancelled.into()))
}

/// `POST /bookings/{booking}/renew`, with an optional `{"lifetime_seconds": n}`.
pub(crate) async fn renew(
    booking: On<HoldId>,
    caller: Caller,
    OptionalJson(options): OptionalJson<RenewOptions>,
) -> Answer<BookingBody> {
    let lifetime = options.lifetime_seconds.map(Duration::from_secs);
    let renewed = booking
        .engine
        .renew_booking_as(&caller.scope(), booking.id, lifetime)
        .await?;
    Ok(Json(renewed.into()))
}
