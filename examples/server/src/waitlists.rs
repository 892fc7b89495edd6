//! The optional waitlist routes: `POST /slots/{slot}/waitlist` (held at once when nobody
//! waits and the units are free, or else a place in the slot's line), `GET /waitlist/{entry}`
//! (its place) and `DELETE /waitlist/{entry}` (leave). An entry offered its units is a hold:
//! `/holds/{entry}` (the same number).

use std::time::Duration;

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use slot_booking::model::rfc3339;
use slot_booking::waitlists::Joined;
use slot_booking::{BookingError, EntryId, NewHold, OwnerId, SlotId, Timestamp, WaitlistEntry};

use crate::body::{Answer, HoldBody, OptionalJson};
use crate::extract::{Caller, IdempotencyKey, On, PathId};
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// The optional body of `POST /slots/{slot}/waitlist`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct JoinBody {
    /// Units wanted together (default 1).
    quantity: Option<i64>,
    /// The offer window: how long an offer lasts unconfirmed (default: the hold lifetime).
    lifetime_seconds: Option<u64>,
    /// Higher is served first (default 0).
    priority: Option<i32>,
}

/// A waiting entry as answered: its fields, its place in line (`null` once it left) and
/// where its offer will be.
#[derive(Serialize)]
pub(crate) struct EntryBody {
    entry_id: EntryId,
    slot_id: SlotId,
    quantity: i32,
    owner: Option<OwnerId>,
    priority: i32,
    #[serde(with = "rfc3339")]
    joined_at: Timestamp,
    position: Option<u32>,
    offer: String,
}

impl EntryBody {
    fn new(prefix: &str, entry: WaitlistEntry, position: Option<u32>) -> Self {
        EntryBody {
            offer: format!("{prefix}/holds/{}", entry.offer_id()),
            entry_id: entry.entry_id,
            slot_id: entry.slot_id,
            quantity: entry.quantity,
            owner: entry.owner,
            priority: entry.priority,
            joined_at: entry.joined_at,
            position,
        }
    }
}

/// `POST /slots/{slot}/waitlist`: 201 with the hold (six fields) and its `Location` when held
/// at once; 202 with the entry, its place and its `Location` when it waits. The same
/// `Idempotency-Key` again answers the same, with `Idempotent-Replayed: true`.
pub(crate) async fn join(
    State(engine): State<Engine>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    PathId(slot_id): PathId<SlotId>,
    Caller(owner): Caller,
    IdempotencyKey(key): IdempotencyKey,
    OptionalJson(body): OptionalJson<JoinBody>,
) -> Result<Response, Problem> {
    let quantity = body.quantity.unwrap_or(1);
    let quantity =
        i32::try_from(quantity).map_err(|_| BookingError::InvalidQuantity { quantity })?;
    let mut request = NewHold::new(slot_id, key).quantity(quantity);
    request.owner = owner;
    request.lifetime = body.lifetime_seconds.map(Duration::from_secs);
    let joined = engine
        .join_waitlist(request, body.priority.unwrap_or(0))
        .await?;
    let (mut response, replayed) = match joined {
        Joined::Held { hold, replayed } => {
            let location = format!("{prefix}/holds/{}", hold.hold_id);
            let body = Json(HoldBody::from(hold));
            (
                (StatusCode::CREATED, [(LOCATION, location)], body).into_response(),
                replayed,
            )
        }
        Joined::Waiting {
            entry,
            position,
            replayed,
        } => {
            let location = format!("{prefix}/waitlist/{}", entry.entry_id);
            let body = Json(EntryBody::new(&prefix, entry, Some(position)));
            (
                (StatusCode::ACCEPTED, [(LOCATION, location)], body).into_response(),
                replayed,
            )
        }
    };
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// `GET /waitlist/{entry}`: the waiting entry and its place; 404 `entry_not_found` once it
/// left or was offered its units (then read `/holds/{entry}`).
pub(crate) async fn get_entry(
    entry: On<EntryId>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    caller: Caller,
) -> Answer<EntryBody> {
    let (found, position) = entry
        .engine
        .waitlist_entry(&caller.scope(), entry.id)
        .await?;
    Ok(Json(EntryBody::new(&prefix, found, Some(position))))
}

/// `DELETE /waitlist/{entry}`: leaves the line; the entry as it was, with no place.
pub(crate) async fn leave(
    entry: On<EntryId>,
    Extension(PathPrefix(prefix)): Extension<PathPrefix>,
    caller: Caller,
) -> Answer<EntryBody> {
    let left = entry
        .engine
        .leave_waitlist(&caller.scope(), entry.id)
        .await?;
    Ok(Json(EntryBody::new(&prefix, left, None)))
}
