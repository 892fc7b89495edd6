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

use utoipa::ToSchema;

use crate::body::{Answer, HoldBody, OptionalJson};
use crate::extract::{Caller, IdempotencyKey, On, PathId};
use crate::state::{Engine, PathPrefix};
use crate::Problem;

/// The optional body of `POST /slots/{slot}/waitlist`.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = JoinWaitlist)]
pub(crate) struct JoinBody {
    /// Units wanted together (default 1).
    #[schema(minimum = 1, maximum = 1000)]
    quantity: Option<i64>,
    /// The offer window, in seconds: how long an offer lasts unconfirmed (default: the hold
    /// lifetime).
    lifetime_seconds: Option<u64>,
    /// Higher is served first (default 0).
    priority: Option<i32>,
}

/// A waiting entry as answered: its fields, its place in line (`null` once it left) and
/// where its offer will be.
#[derive(Serialize, ToSchema)]
#[schema(as = WaitlistEntry)]
pub(crate) struct EntryBody {
    /// The entry; its offer, when it comes, is the hold of the same number.
    #[schema(value_type = i64)]
    entry_id: EntryId,
    #[schema(value_type = i64)]
    slot_id: SlotId,
    quantity: i32,
    #[schema(value_type = Option<String>, required = true)]
    owner: Option<OwnerId>,
    priority: i32,
    #[serde(with = "rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    joined_at: Timestamp,
    /// Its place in the slot's line (1 is next); `null` once it left.
    #[schema(required = true, minimum = 1)]
    position: Option<u32>,
    /// Where its offer will be: `{prefix}/holds/{entry}`.
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
#[utoipa::path(
    post,
    path = "/slots/{slot}/waitlist",
    tag = "waitlist",
    operation_id = "join_waitlist",
    summary = "Hold units of a slot, or wait in its line",
    params(
        ("slot" = i64, Path, description = "The slot (digits; anything else is 404 `not_found`)."),
        IdempotencyKey,
        Caller,
    ),
    request_body(content = Option<JoinBody>, description = "Optional: an empty body waits for one unit, priority 0."),
    responses(
        (status = 201, description = "Held at once: nobody waited and the units were free.", body = HoldBody,
            headers(
                ("Location" = String, description = "The hold's URL: `{prefix}/holds/{hold}`."),
                ("Idempotent-Replayed" = String, description = "`true` when the key's answer was given again."),
            )),
        (status = 202, description = "Waiting: the entry and its place in line.", body = EntryBody,
            headers(
                ("Location" = String, description = "The entry's URL: `{prefix}/waitlist/{entry}`."),
                ("Idempotent-Replayed" = String, description = "`true` when the key's answer was given again."),
            )),
        (status = 400, description = "`idempotency_key_required`, `invalid_idempotency_key`, `invalid_owner`, `invalid_quantity`, `invalid_lifetime`, `invalid_body`."),
        (status = 404, description = "`slot_not_found`, `not_found`."),
        (status = 409, description = "`slot_closed`."),
        (status = 422, description = "`idempotency_key_reused`, `quantity_exceeds_capacity`."),
    )
)]
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
#[utoipa::path(
    get,
    path = "/waitlist/{entry}",
    tag = "waitlist",
    operation_id = "get_waitlist_entry",
    summary = "A waiting entry and its place",
    params(
        ("entry" = i64, Path, description = "The entry (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    responses(
        (status = 200, description = "The entry, still waiting, and its place.", body = EntryBody),
        (status = 400, description = "`invalid_owner`."),
        (status = 404, description = "`entry_not_found` (no such entry, another owner's, or it left or was offered its units: read `/holds/{entry}`), `not_found`."),
    )
)]
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
#[utoipa::path(
    delete,
    path = "/waitlist/{entry}",
    tag = "waitlist",
    operation_id = "leave_waitlist",
    summary = "Leave a slot's line",
    params(
        ("entry" = i64, Path, description = "The entry (digits; anything else is 404 `not_found`)."),
        Caller,
    ),
    responses(
        (status = 200, description = "The entry as it was, `position` `null`. Its `Idempotency-Key` is free again: the same join makes a new entry, at the back of the line.", body = EntryBody),
        (status = 400, description = "`invalid_owner`."),
        (status = 404, description = "`entry_not_found`, `not_found`."),
    )
)]
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
