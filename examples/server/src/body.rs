//! Request and response bodies: the JSON object extractors ([`JsonObject`], and
//! [`OptionalJson`] for a body that may be empty), the hold routes' options, and the hold
//! as the seed's clients know it ([`HoldBody`]).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use slot_booking::model::rfc3339;
use slot_booking::{Hold, HoldId, HoldStatus, SlotId, Timestamp};
use utoipa::ToSchema;

use crate::Problem;

/// A body that must be a JSON object of `T`'s fields; anything else is 400 `invalid_body`.
pub(crate) struct JsonObject<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonObject<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let body = bytes(request, state).await?;
        parse(&body)
            .map(JsonObject)
            .map_err(IntoResponse::into_response)
    }
}

/// A body that may be empty (or blank), for `T::default()`, or else is read as a
/// [`JsonObject`].
pub(crate) struct OptionalJson<T>(pub(crate) T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let body = bytes(request, state).await?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        parse(&body)
            .map(OptionalJson)
            .map_err(IntoResponse::into_response)
    }
}

/// The body, already read (and limited) by the middleware.
async fn bytes<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, Response> {
    Bytes::from_request(request, state)
        .await
        .map_err(IntoResponse::into_response)
}

/// A JSON object of the documented fields, else `invalid_body`.
fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, Problem> {
    // An object only: serde would also read a JSON array by position.
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body)
        .and_then(|object| serde_json::from_value(serde_json::Value::Object(object)))
        .map_err(|error| {
            Problem::invalid_body(format!(
                "the request body must be a JSON object of the documented fields: {error}"
            ))
        })
}

/// The optional JSON body of a hold request (an empty body takes every default).
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HoldOptions {
    /// Units held, all together (default 1; at most 1000 and the slot's capacity).
    #[schema(minimum = 1, maximum = 1000)]
    pub(crate) quantity: Option<i64>,
    /// How long the hold lasts, in seconds (default: the server's hold lifetime; outside the
    /// engine's bounds, 400 `invalid_lifetime`).
    pub(crate) lifetime_seconds: Option<u64>,
}

/// The optional JSON body of a renewal (an empty body takes the default).
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RenewOptions {
    /// How long the hold lasts from now, in seconds (default: the server's hold lifetime;
    /// outside the engine's bounds, 400 `invalid_lifetime`).
    pub(crate) lifetime_seconds: Option<u64>,
}

/// A hold as the seed's clients know it: exactly six fields, whatever the hold's quantity or
/// owner.
#[derive(Serialize, ToSchema)]
#[schema(as = Hold)]
pub(crate) struct HoldBody {
    #[schema(value_type = i64)]
    hold_id: HoldId,
    #[schema(value_type = i64)]
    slot_id: SlotId,
    #[schema(value_type = crate::schemas::HoldStatus)]
    status: HoldStatus,
    /// When an unconfirmed hold stops reserving its units.
    #[serde(with = "rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
    #[serde(with = "rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    confirmed_at: Option<Timestamp>,
    #[serde(with = "rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    cancelled_at: Option<Timestamp>,
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

/// A route's answer: its body as JSON, or a problem.
pub(crate) type Answer<T> = Result<Json<T>, Problem>;
