//! The engine's error type.

use crate::model::{
    CandidateProblem, CandidateRefused, ConsumerId, EntryId, HoldId, InvalidBooking,
    InvalidCandidates, InvalidIdempotencyKey, InvalidOwnerId, InvalidSlot, LineProblem,
    LineShortfall, PoolId, SlotId,
};
use crate::store::StoreError;

/// Everything a [`BookingEngine`](crate::BookingEngine) call can fail with.
///
/// Each variant has a stable machine-readable [`code`](BookingError::code); an HTTP layer maps
/// codes to statuses (the example server shows one mapping).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BookingError {
    /// No slot has this id.
    #[error("slot {slot_id} not found")]
    SlotNotFound {
        /// The slot asked for.
        slot_id: SlotId,
    },
    /// The slot has started or its sales are closed; no holds can be placed on it.
    #[error("slot {slot_id} is closed to new holds (it has started or its sales are closed)")]
    SlotClosed {
        /// The slot asked for.
        slot_id: SlotId,
    },
    /// Every unit of the slot is held or booked.
    #[error("slot {slot_id} is sold out")]
    SoldOut {
        /// The slot asked for.
        slot_id: SlotId,
    },
    /// The idempotency key already belongs to a hold placed by another request (another slot,
    /// quantity or owner).
    #[error("{}", key_reused_message(*.slot_id, *.existing_hold_id, *.existing_slot_id))]
    IdempotencyKeyReused {
        /// The slot the caller asked for.
        slot_id: SlotId,
        /// The hold the key belongs to, when it is the caller's own (same owner, or both
        /// anonymous); `None` when it belongs to somebody else, who is never revealed.
        existing_hold_id: Option<HoldId>,
        /// The slot of that hold, under the same condition.
        existing_slot_id: Option<SlotId>,
    },
    /// The slot has fewer units in all than the hold asked for.
    #[error("slot {slot_id} has {capacity} units in all; {quantity} were asked for")]
    QuantityExceedsCapacity {
        /// The slot asked for.
        slot_id: SlotId,
        /// Units asked for.
        quantity: i32,
        /// The slot's capacity.
        capacity: i32,
    },
    /// A hold's quantity outside `1..=`[`MAX_QUANTITY`](crate::model::MAX_QUANTITY).
    #[error("quantity must be between 1 and 1000, got {quantity}")]
    InvalidQuantity {
        /// The quantity asked for.
        quantity: i64,
    },
    /// A requested hold lifetime outside the engine's bounds.
    #[error("hold lifetime must be between {min:?} and {max:?}, got {requested:?}")]
    InvalidLifetime {
        /// The lifetime asked for.
        requested: std::time::Duration,
        /// The shortest the engine allows.
        min: std::time::Duration,
        /// The longest the engine allows.
        max: std::time::Duration,
    },
    /// The owner id is not 1–255 visible ASCII characters.
    #[error(transparent)]
    InvalidOwner(#[from] InvalidOwnerId),
    /// A page size outside `1..=`[`MAX_PAGE_SIZE`](crate::model::MAX_PAGE_SIZE).
    #[error("page limit must be between 1 and 1000, got {limit}")]
    InvalidPage {
        /// The limit asked for.
        limit: u32,
    },
    /// The idempotency key is not 1–255 visible ASCII characters.
    #[error("invalid idempotency key: {0}")]
    InvalidIdempotencyKey(#[from] InvalidIdempotencyKey),
    /// The slot to create is not valid.
    #[error("invalid slot: {0}")]
    InvalidSlot(#[from] InvalidSlot),
    /// The availability query is not valid (`from` after `to`).
    #[error("invalid availability query: `from` is after `to`")]
    InvalidQuery,
    /// Lowering the capacity would take units that are held or confirmed; nothing changed.
    #[error("slot {slot_id} has {taken} units held or confirmed; its capacity cannot go down to {requested}")]
    CapacityTaken {
        /// The slot asked for.
        slot_id: SlotId,
        /// The capacity asked for.
        requested: i32,
        /// Units held by active holds or confirmed.
        taken: i32,
    },
    /// A [`CapacityChange::Replace`](crate::CapacityChange::Replace) found another capacity
    /// than the one the caller read: a concurrent change came first; nothing changed.
    #[error("slot {slot_id} has capacity {actual}, not the {expected} the change expected")]
    CapacityChanged {
        /// The slot asked for.
        slot_id: SlotId,
        /// The capacity the caller read.
        expected: i32,
        /// The capacity found.
        actual: i32,
    },
    /// The slot still has active held or confirmed units, so it cannot be removed; nothing
    /// changed.
    #[error("slot {slot_id} has {held} units held and {confirmed} confirmed; cancel them before removing it")]
    SlotInUse {
        /// The slot asked for.
        slot_id: SlotId,
        /// Units held by active holds.
        held: i32,
        /// Units confirmed.
        confirmed: i32,
    },
    /// No hold has this id.
    #[error("hold {hold_id} not found")]
    HoldNotFound {
        /// The hold asked for.
        hold_id: HoldId,
    },
    /// The hold was cancelled; it cannot be confirmed or renewed.
    #[error("hold {hold_id} was cancelled")]
    HoldCancelled {
        /// The hold asked for.
        hold_id: HoldId,
    },
    /// The hold expired before it was confirmed or renewed.
    #[error("hold {hold_id} has expired")]
    HoldExpired {
        /// The hold asked for.
        hold_id: HoldId,
    },
    /// The booking's lines are not valid: none, more than
    /// [`MAX_LINES`](crate::model::MAX_LINES), a slot twice, or a quantity out of bounds.
    #[error("invalid booking: {0}")]
    InvalidBooking(#[from] InvalidBooking),
    /// At least one line of a booking of several lines cannot be had; nothing was taken.
    /// Every such line is named, by slot id, each with the code a hold on it alone would have
    /// been refused with.
    #[error("{}", lines_unavailable_message(.lines))]
    LinesUnavailable {
        /// Every line that cannot be had, by slot id.
        lines: Vec<LineShortfall>,
    },
    /// The candidate slots of an "any one of these" hold are not valid: none, more than
    /// [`MAX_CANDIDATES`](crate::model::MAX_CANDIDATES), or a slot twice.
    #[error("invalid candidates: {0}")]
    InvalidCandidates(#[from] InvalidCandidates),
    /// No candidate of an "any one of these" hold could be had; nothing was taken. Every
    /// candidate is named, in the order tried, with the code a hold on it alone got.
    #[error("{}", no_candidate_message(.candidates))]
    NoCandidateAvailable {
        /// Every candidate, in the order tried, and why it could not be had.
        candidates: Vec<CandidateRefused>,
    },
    /// No entry with this id waits in the caller's scope (an entry offered its units is a
    /// hold now).
    #[error("waitlist entry {entry_id} not found")]
    EntryNotFound {
        /// The entry asked for.
        entry_id: EntryId,
    },
    /// No pool has this id.
    #[error("pool {pool_id} not found")]
    PoolNotFound {
        /// The pool asked for.
        pool_id: PoolId,
    },
    /// The pool change would take units held or confirmed on its slots (a capacity below
    /// them, or a slot whose taken units the pool has not free); nothing changed.
    #[error("pool {pool_id} has {taken} units held or confirmed on its slots; {requested} units in all cannot hold them")]
    PoolInUse {
        /// The pool asked for.
        pool_id: PoolId,
        /// Units the pool would have to hold: the capacity asked for, or the units held and
        /// confirmed on the slot to attach plus those already on the pool.
        requested: i32,
        /// Units held by active holds or confirmed that stand in the way.
        taken: i32,
    },
    /// A [`CapacityChange::Replace`](crate::CapacityChange::Replace) of a pool found another
    /// capacity than the one the caller read: a concurrent change came first; nothing changed.
    #[error("pool {pool_id} has capacity {actual}, not the {expected} the change expected")]
    PoolCapacityChanged {
        /// The pool asked for.
        pool_id: PoolId,
        /// The capacity the caller read.
        expected: i32,
        /// The capacity found.
        actual: i32,
    },
    /// The slot already belongs to [`MAX_POOLS_PER_SLOT`](crate::model::MAX_POOLS_PER_SLOT)
    /// pools; nothing changed.
    #[error("slot {slot_id} already belongs to the most pools a slot may have")]
    TooManyPools {
        /// The slot asked for.
        slot_id: SlotId,
    },
    /// A pool's capacity below zero.
    #[error("a pool's capacity must be between 0 and 2147483647, got {capacity}")]
    InvalidPool {
        /// The capacity asked for.
        capacity: i64,
    },
    /// The consumer's lease is held by another holder (it took the lease over after this
    /// holder's lapsed): nothing was acknowledged. Stop handling the consumer's events and
    /// roll back what was done for the unacknowledged ones; the new holder delivers them.
    #[error("the lease of event consumer `{consumer}` is held by another reader")]
    LeaseLost {
        /// The consumer.
        consumer: ConsumerId,
    },
    /// The store failed or could not be reached; nothing was half done. Its
    /// [`code`](BookingError::code) says whether retrying may help.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The [`code`](BookingError::code) of a transient store failure.
pub(crate) const STORE_UNAVAILABLE: &str = "store_unavailable";
/// The [`code`](BookingError::code) of a store failure that retrying only repeats.
pub(crate) const STORE_FAILED: &str = "store_failed";

/// The code of a store failure: [`STORE_UNAVAILABLE`] when it may go away on retry,
/// [`STORE_FAILED`] otherwise.
pub(crate) fn store_code(error: &StoreError) -> &'static str {
    if error.is_transient() {
        STORE_UNAVAILABLE
    } else {
        STORE_FAILED
    }
}

impl BookingError {
    /// Every code [`code`](BookingError::code) returns, each once, in the order of its
    /// variants (a store failure has two). Metrics have a static key for each
    /// ([`observe`](crate::observe)).
    pub const CODES: &'static [&'static str] = &[
        "slot_not_found",
        "slot_closed",
        "sold_out",
        "idempotency_key_reused",
        "quantity_exceeds_capacity",
        "capacity_taken",
        "capacity_changed",
        "slot_in_use",
        "invalid_quantity",
        "invalid_lifetime",
        "invalid_owner",
        "invalid_page",
        "invalid_idempotency_key",
        "invalid_slot",
        "invalid_query",
        "hold_not_found",
        "hold_cancelled",
        "hold_expired",
        "invalid_booking",
        "lines_unavailable",
        "invalid_candidates",
        "no_candidate_available",
        "entry_not_found",
        "pool_not_found",
        "pool_in_use",
        "pool_capacity_changed",
        "too_many_pools",
        "invalid_pool",
        "lease_lost",
        STORE_UNAVAILABLE,
        STORE_FAILED,
    ];

    /// A stable snake_case code for the error, for machines (HTTP bodies, metrics, logs).
    ///
    /// A store failure is `store_unavailable` when it may go away on retry (connection lost,
    /// pool exhausted, database busy) and `store_failed` otherwise (a broken schema, data the
    /// store cannot decode, a store that panicked): retrying those only repeats the failure.
    pub fn code(&self) -> &'static str {
        match self {
            BookingError::SlotNotFound { .. } => "slot_not_found",
            BookingError::SlotClosed { .. } => "slot_closed",
            BookingError::SoldOut { .. } => "sold_out",
            BookingError::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            BookingError::QuantityExceedsCapacity { .. } => "quantity_exceeds_capacity",
            BookingError::CapacityTaken { .. } => "capacity_taken",
            BookingError::CapacityChanged { .. } => "capacity_changed",
            BookingError::SlotInUse { .. } => "slot_in_use",
            BookingError::InvalidQuantity { .. } => "invalid_quantity",
            BookingError::InvalidLifetime { .. } => "invalid_lifetime",
            BookingError::InvalidOwner(_) => "invalid_owner",
            BookingError::InvalidPage { .. } => "invalid_page",
            BookingError::InvalidIdempotencyKey(_) => "invalid_idempotency_key",
            BookingError::InvalidSlot(_) => "invalid_slot",
            BookingError::InvalidQuery => "invalid_query",
            BookingError::HoldNotFound { .. } => "hold_not_found",
            BookingError::HoldCancelled { .. } => "hold_cancelled",
            BookingError::HoldExpired { .. } => "hold_expired",
            BookingError::InvalidBooking(_) => "invalid_booking",
            BookingError::LinesUnavailable { .. } => "lines_unavailable",
            BookingError::InvalidCandidates(_) => "invalid_candidates",
            BookingError::NoCandidateAvailable { .. } => "no_candidate_available",
            BookingError::EntryNotFound { .. } => "entry_not_found",
            BookingError::PoolNotFound { .. } => "pool_not_found",
            BookingError::PoolInUse { .. } => "pool_in_use",
            BookingError::PoolCapacityChanged { .. } => "pool_capacity_changed",
            BookingError::TooManyPools { .. } => "too_many_pools",
            BookingError::InvalidPool { .. } => "invalid_pool",
            BookingError::LeaseLost { .. } => "lease_lost",
            BookingError::Store(error) => store_code(error),
        }
    }

    /// Whether the same call may succeed if retried later unchanged: only for a transient
    /// store failure. Every other error says something about the request or the data.
    pub fn is_transient(&self) -> bool {
        matches!(self, BookingError::Store(error) if error.is_transient())
    }
}

fn lines_unavailable_message(lines: &[LineShortfall]) -> String {
    let each: Vec<String> = lines
        .iter()
        .map(|line| {
            let slot = line.slot_id;
            match line.problem {
                LineProblem::SoldOut { free } => {
                    format!("slot {slot}: {free} free, {} asked", line.quantity)
                }
                LineProblem::ExceedsCapacity { capacity } => {
                    format!("slot {slot}: {capacity} in all, {} asked", line.quantity)
                }
                problem => format!("slot {slot}: {}", problem.code()),
            }
        })
        .collect();
    format!(
        "no unit was taken; lines that cannot be had: {}",
        each.join("; ")
    )
}

fn no_candidate_message(candidates: &[CandidateRefused]) -> String {
    let each: Vec<String> = candidates
        .iter()
        .map(|c| match c.problem {
            CandidateProblem::ExceedsCapacity { capacity } => {
                format!("slot {}: {capacity} in all", c.slot_id)
            }
            problem => format!("slot {}: {}", c.slot_id, problem.code()),
        })
        .collect();
    format!(
        "no unit was taken; no candidate could be had: {}",
        each.join("; ")
    )
}

fn key_reused_message(
    slot_id: SlotId,
    existing_hold_id: Option<HoldId>,
    existing_slot_id: Option<SlotId>,
) -> String {
    match (existing_hold_id, existing_slot_id) {
        (Some(hold), Some(slot)) => format!(
            "idempotency key already used for hold {hold} on slot {slot}; this request for slot {slot_id} differs in slot or quantity"
        ),
        _ => format!("idempotency key already used by another request (this one for slot {slot_id})"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;
    use crate::model::ConsumerId;

    /// One value of each variant, a store failure of each kind.
    fn one_of_each() -> Vec<BookingError> {
        let (slot_id, hold_id) = (SlotId(1), HoldId(2));
        vec![
            BookingError::SlotNotFound { slot_id },
            BookingError::SlotClosed { slot_id },
            BookingError::SoldOut { slot_id },
            BookingError::IdempotencyKeyReused {
                slot_id,
                existing_hold_id: None,
                existing_slot_id: None,
            },
            BookingError::QuantityExceedsCapacity {
                slot_id,
                quantity: 3,
                capacity: 2,
            },
            BookingError::InvalidQuantity { quantity: 0 },
            BookingError::InvalidLifetime {
                requested: Duration::ZERO,
                min: Duration::from_secs(1),
                max: Duration::from_secs(2),
            },
            BookingError::InvalidOwner(InvalidOwnerId(InvalidIdempotencyKey::Empty)),
            BookingError::InvalidPage { limit: 0 },
            BookingError::InvalidIdempotencyKey(InvalidIdempotencyKey::TooLong(256)),
            BookingError::InvalidSlot(InvalidSlot::EndsBeforeStart),
            BookingError::InvalidQuery,
            BookingError::CapacityTaken {
                slot_id,
                requested: 1,
                taken: 2,
            },
            BookingError::CapacityChanged {
                slot_id,
                expected: 3,
                actual: 4,
            },
            BookingError::SlotInUse {
                slot_id,
                held: 1,
                confirmed: 0,
            },
            BookingError::HoldNotFound { hold_id },
            BookingError::HoldCancelled { hold_id },
            BookingError::HoldExpired { hold_id },
            BookingError::InvalidBooking(InvalidBooking::NoLines),
            BookingError::LinesUnavailable {
                lines: vec![LineShortfall {
                    slot_id,
                    quantity: 2,
                    problem: LineProblem::SoldOut { free: 1 },
                }],
            },
            BookingError::InvalidCandidates(InvalidCandidates::None),
            BookingError::NoCandidateAvailable {
                candidates: vec![CandidateRefused {
                    slot_id,
                    problem: CandidateProblem::SoldOut,
                }],
            },
            BookingError::EntryNotFound {
                entry_id: EntryId(3),
            },
            BookingError::PoolNotFound { pool_id: PoolId(1) },
            BookingError::PoolInUse {
                pool_id: PoolId(1),
                requested: 1,
                taken: 2,
            },
            BookingError::PoolCapacityChanged {
                pool_id: PoolId(1),
                expected: 3,
                actual: 4,
            },
            BookingError::TooManyPools { slot_id },
            BookingError::InvalidPool { capacity: -1 },
            BookingError::LeaseLost {
                consumer: ConsumerId::new("mailer").unwrap(),
            },
            BookingError::Store(StoreError::unavailable("down")),
            BookingError::Store(StoreError::failed("broken")),
        ]
    }

    /// The variant's place among the enum's; with no wildcard, a new variant does not compile
    /// until it has a place here (and a value in `one_of_each`).
    fn variant(error: &BookingError) -> usize {
        match error {
            BookingError::SlotNotFound { .. } => 0,
            BookingError::SlotClosed { .. } => 1,
            BookingError::SoldOut { .. } => 2,
            BookingError::IdempotencyKeyReused { .. } => 3,
            BookingError::QuantityExceedsCapacity { .. } => 4,
            BookingError::InvalidQuantity { .. } => 5,
            BookingError::InvalidLifetime { .. } => 6,
            BookingError::InvalidOwner(_) => 7,
            BookingError::InvalidPage { .. } => 8,
            BookingError::InvalidIdempotencyKey(_) => 9,
            BookingError::InvalidSlot(_) => 10,
            BookingError::InvalidQuery => 11,
            BookingError::CapacityTaken { .. } => 12,
            BookingError::CapacityChanged { .. } => 13,
            BookingError::SlotInUse { .. } => 14,
            BookingError::HoldNotFound { .. } => 15,
            BookingError::HoldCancelled { .. } => 16,
            BookingError::HoldExpired { .. } => 17,
            BookingError::InvalidBooking(_) => 18,
            BookingError::LinesUnavailable { .. } => 19,
            BookingError::InvalidCandidates(_) => 20,
            BookingError::NoCandidateAvailable { .. } => 21,
            BookingError::EntryNotFound { .. } => 22,
            BookingError::PoolNotFound { .. } => 23,
            BookingError::PoolInUse { .. } => 24,
            BookingError::PoolCapacityChanged { .. } => 25,
            BookingError::TooManyPools { .. } => 26,
            BookingError::InvalidPool { .. } => 27,
            BookingError::LeaseLost { .. } => 28,
            BookingError::Store(_) => 29,
        }
    }

    #[test]
    fn codes_lists_every_code_once_and_nothing_else() {
        let errors = one_of_each();
        let variants: BTreeSet<usize> = errors.iter().map(variant).collect();
        assert_eq!(variants, (0..=29).collect(), "a value of every variant");

        for error in &errors {
            assert!(
                BookingError::CODES.contains(&error.code()),
                "{error:?} has code {} missing from CODES",
                error.code()
            );
        }
        let returned: BTreeSet<&str> = errors.iter().map(BookingError::code).collect();
        let listed: BTreeSet<&str> = BookingError::CODES.iter().copied().collect();
        assert_eq!(
            listed.len(),
            BookingError::CODES.len(),
            "no code listed twice"
        );
        assert_eq!(returned, listed, "no code listed that none returns");
    }
}
