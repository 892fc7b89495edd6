//! The OpenAPI schemas of the bodies the routes write straight from `slot_booking`'s types
//! (a slot, a pool, a page of holds, an availability entry, a refused line or candidate): the
//! library knows nothing of HTTP or OpenAPI, so each is described here, field for field, as
//! its `Serialize` writes it. These types are never built: they only name and shape schemas.
//! The server's own bodies (a hold in six fields, a booking, a waiting entry, a problem) derive
//! their schemas where they are defined.
//!
//! Every response a test gets is checked against these schemas, objects closed (a field the
//! schema lacks fails), so a change to the library's wire format fails the server's tests
//! until this module follows it.

// The fields are read by the schema derive only.
#![allow(dead_code)]

use serde::Serialize;
use utoipa::ToSchema;

/// The status of a hold at the time it was read: `held` until `expires_at` unless confirmed
/// or cancelled, then `expired`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum HoldStatus {
    /// Reserving its units until `expires_at`.
    Held,
    /// Booked for good (until cancelled).
    Confirmed,
    /// Given back by a cancel.
    Cancelled,
    /// Held, but `expires_at` has passed: the units are free again.
    Expired,
}

/// The order in which a hold on any one of several slots tries its candidates.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Strategy {
    /// The order they were listed in (the default).
    Listed,
    /// Fewest units taken first.
    LeastBooked,
    /// Each hold starts one candidate further along than the previous one.
    RoundRobin,
}

/// One slot of the availability listing. `resource` only for a slot that has one, so a slot
/// without keeps the seed's five fields.
#[derive(Serialize, ToSchema)]
pub(crate) struct AvailabilityEntry {
    #[schema(format = Int64)]
    slot_id: i64,
    #[schema(value_type = String, format = DateTime)]
    starts_at: (),
    #[schema(value_type = String, format = DateTime)]
    ends_at: (),
    capacity: i32,
    /// Units a new hold could take when the listing was read.
    remaining: i32,
    /// What the slot is a time of; absent when nothing in particular.
    #[schema(value_type = String, required = false)]
    resource: (),
}

/// A hold with every field: its quantity, its owner and when it was placed (the listings of
/// holds show these; the hold routes answer [`Hold`](crate::body::HoldBody)'s six fields).
#[derive(Serialize, ToSchema)]
pub(crate) struct HoldRecord {
    #[schema(format = Int64)]
    hold_id: i64,
    #[schema(format = Int64)]
    slot_id: i64,
    status: HoldStatus,
    #[schema(value_type = String, format = DateTime)]
    expires_at: (),
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    confirmed_at: (),
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    cancelled_at: (),
    /// Units it takes, all together.
    quantity: i32,
    /// Who it belongs to; `null` for a hold placed without `Owner-Id`.
    #[schema(value_type = Option<String>, required = true)]
    owner: (),
    #[schema(value_type = String, format = DateTime)]
    created_at: (),
}

/// A page of holds, by id.
#[derive(Serialize, ToSchema)]
pub(crate) struct HoldPage {
    holds: Vec<HoldRecord>,
    /// The `after` of the next page; `null` on the last one.
    #[schema(value_type = Option<i64>, format = Int64, required = true)]
    next_after: (),
}

/// A slot as stored, in eight fields.
#[derive(Serialize, ToSchema)]
pub(crate) struct Slot {
    #[schema(format = Int64)]
    slot_id: i64,
    #[schema(value_type = String, format = DateTime)]
    starts_at: (),
    #[schema(value_type = String, format = DateTime)]
    ends_at: (),
    capacity: i32,
    /// The slot row's counter: expired holds not yet reclaimed count as taken.
    stored_remaining: i32,
    #[schema(value_type = Option<String>, required = true)]
    resource: (),
    /// Whether sales are closed.
    closed: bool,
    /// When it was removed (archived), if it was.
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    removed_at: (),
}

/// One slot of the operator's listing, with where each of its units is:
/// `capacity == remaining + held + confirmed`.
#[derive(Serialize, ToSchema)]
pub(crate) struct SlotSummary {
    #[schema(format = Int64)]
    slot_id: i64,
    #[schema(value_type = String, format = DateTime)]
    starts_at: (),
    #[schema(value_type = String, format = DateTime)]
    ends_at: (),
    capacity: i32,
    /// Units a new hold could take (expired holds count as free).
    remaining: i32,
    held: i32,
    confirmed: i32,
    #[schema(value_type = Option<String>, required = true)]
    resource: (),
    closed: bool,
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    removed_at: (),
}

/// A page of the operator's slot listing.
#[derive(Serialize, ToSchema)]
pub(crate) struct SlotPage {
    slots: Vec<SlotSummary>,
    /// The `after` of the next page (`<microseconds>_<slot id>`); `null` on the last one.
    #[schema(value_type = Option<String>, required = true)]
    next_after: (),
}

/// A pool: a capacity its slots share, `capacity == remaining + held + confirmed`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Pool {
    #[schema(format = Int64)]
    pool_id: i64,
    capacity: i32,
    remaining: i32,
    held: i32,
    confirmed: i32,
    /// Its slots, by id.
    #[schema(value_type = Vec<i64>)]
    slots: (),
}

/// One line of a refused booking and why it cannot be had.
#[derive(Serialize, ToSchema)]
pub(crate) struct LineShortfall {
    #[schema(format = Int64)]
    slot_id: i64,
    /// Units the line asked for.
    quantity: i32,
    problem: LineProblem,
}

/// Why one line cannot be had: the code a hold of it alone would have been refused with.
#[derive(Serialize, ToSchema)]
#[serde(tag = "code", rename_all = "snake_case")]
pub(crate) enum LineProblem {
    /// No such slot, or it was removed.
    SlotNotFound,
    /// The slot has started or its sales are closed.
    SlotClosed,
    /// More units than the slot's whole capacity.
    QuantityExceedsCapacity {
        /// The slot's capacity.
        capacity: i32,
    },
    /// Fewer units free than asked.
    SoldOut {
        /// Units that were free.
        free: i32,
    },
}

/// One candidate slot that could not be had, and the code a hold on it alone would have been
/// refused with (`capacity` only with `quantity_exceeds_capacity`).
#[derive(Serialize, ToSchema)]
pub(crate) struct CandidateRefused {
    #[schema(format = Int64)]
    slot_id: i64,
    code: CandidateCode,
    /// The slot's capacity, with `quantity_exceeds_capacity`.
    capacity: Option<i32>,
}

/// Why a candidate slot could not be had.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CandidateCode {
    /// No such slot, or it was removed.
    SlotNotFound,
    /// The slot has started or its sales are closed.
    SlotClosed,
    /// More units than the slot's whole capacity.
    QuantityExceedsCapacity,
    /// Fewer units free than asked.
    SoldOut,
}
