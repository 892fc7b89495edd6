//! The body of a capacity change, a slot's (`POST /admin/slots/{slot}/capacity`) or a pool's
//! (`POST /admin/pools/{pool}/capacity`): to a number, by a number, or compare-and-set.

use serde::Deserialize;
use slot_booking::{BookingError, CapacityChange};
use utoipa::ToSchema;

use crate::Problem;

/// How a capacity changes: `{"capacity": n}` sets it; `{"add": n}` moves it by `n` units
/// (negative: fewer) in one conditional update, so concurrent additions all count;
/// `{"capacity": n, "expected": m}` sets it only while it is still `m`, the capacity the
/// caller read (else 409 `capacity_changed` / `pool_capacity_changed`, naming the capacity
/// found). Exactly one of `capacity` and `add`; `expected` only with `capacity`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CapacityChange)]
pub(crate) struct CapacityChangeBody {
    /// The new capacity: a slot's 1 to 2147483647, a pool's 0 to 2147483647.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 2147483647)]
    capacity: Option<serde_json::Number>,
    /// Units to add (negative: to take away); the capacity after it must be in range.
    #[schema(value_type = Option<i64>, minimum = -2147483648, maximum = 2147483647)]
    add: Option<serde_json::Number>,
    /// With `capacity`: the capacity the caller read; the change applies only while it is.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 2147483647)]
    expected: Option<serde_json::Number>,
}

impl CapacityChangeBody {
    /// The change asked for; a number that is not a whole `i32` is `out_of_range(number)`, a
    /// body with both or neither of `capacity` and `add` (or `expected` with `add`)
    /// `invalid_body`.
    pub(crate) fn change(
        &self,
        out_of_range: fn(&serde_json::Number) -> Problem,
    ) -> Result<CapacityChange, Problem> {
        let number = |n: &serde_json::Number| whole(n, out_of_range);
        match (&self.capacity, &self.add, &self.expected) {
            (Some(to), None, None) => Ok(CapacityChange::To(number(to)?)),
            (Some(to), None, Some(expected)) => Ok(CapacityChange::Replace {
                expected: number(expected)?,
                to: number(to)?,
            }),
            (None, Some(units), None) => Ok(CapacityChange::By(number(units)?)),
            _ => Err(Problem::bad_request(
                "invalid_body",
                "send exactly one of `capacity` and `add`, and `expected` only with `capacity`",
            )),
        }
    }
}

/// A capacity from a body: a whole number that fits the crate's `i32` counts of units (the
/// engine checks the bounds), else `out_of_range(number)`.
pub(crate) fn whole(
    number: &serde_json::Number,
    out_of_range: fn(&serde_json::Number) -> Problem,
) -> Result<i32, Problem> {
    number
        .as_i64()
        .and_then(|wide| i32::try_from(wide).ok())
        .ok_or_else(|| out_of_range(number))
}

/// A slot's capacity that is not a whole number of units: `invalid_slot`.
pub(crate) fn invalid_slot(number: &serde_json::Number) -> Problem {
    match number.as_i64() {
        Some(wide) => {
            BookingError::InvalidSlot(slot_booking::model::InvalidSlot::Capacity(wide)).into()
        }
        None => Problem::bad_request(
            "invalid_slot",
            format!(
                "invalid slot: capacity must be a whole number between 1 and 2147483647, got \
                 {number}"
            ),
        ),
    }
}

/// A pool's capacity that is not a whole number of units: `invalid_pool`.
pub(crate) fn invalid_pool(number: &serde_json::Number) -> Problem {
    match number.as_i64() {
        Some(wide) => BookingError::InvalidPool { capacity: wide }.into(),
        None => Problem::bad_request(
            "invalid_pool",
            format!(
                "a pool's capacity must be a whole number between 0 and 2147483647, got {number}"
            ),
        ),
    }
}
