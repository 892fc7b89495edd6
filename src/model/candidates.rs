//! "Any one of these" holds: several candidate slots (the same hour in other rooms, with other
//! practitioners), of which the hold takes the first that fits, in an order a strategy picks.

use serde::{Deserialize, Serialize};

use super::ids::SlotId;

/// The most candidate slots one hold may name.
pub const MAX_CANDIDATES: usize = 20;

/// The order an "any one of these" hold tries its candidates in; the first that fits is taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The order the candidates were listed in: a preference.
    #[default]
    Listed,
    /// Fewest units taken first (capacity less free units, as the engine's cached listing
    /// shows them: its own holds at once, other instances' within the listing's lag); ties in
    /// listed order. Candidates not listed (started, closed, removed) last.
    LeastBooked,
    /// Each call starts one candidate further along the list than the engine's previous one
    /// did, wrapping around: one engine spreads its holds evenly over candidates that all
    /// fit. Each engine instance keeps its own turn.
    RoundRobin,
}

/// Checks a hold's candidate slots: 1 to [`MAX_CANDIDATES`], each slot at most once. Their
/// order is kept: it is the caller's preference.
pub fn check_candidates(candidates: &[SlotId]) -> Result<(), InvalidCandidates> {
    if candidates.is_empty() {
        return Err(InvalidCandidates::None);
    }
    if candidates.len() > MAX_CANDIDATES {
        return Err(InvalidCandidates::TooMany(candidates.len()));
    }
    let mut seen = candidates.to_vec();
    seen.sort_unstable();
    match seen.windows(2).find(|w| w[0] == w[1]) {
        Some(pair) => Err(InvalidCandidates::SlotTwice(pair[0])),
        None => Ok(()),
    }
}

/// Why a hold's candidate slots were refused before any store saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCandidates {
    /// At least one candidate is needed.
    #[error("a hold needs at least one candidate slot")]
    None,
    /// More than [`MAX_CANDIDATES`] candidates.
    #[error("a hold names at most 20 candidate slots, got {0}")]
    TooMany(usize),
    /// The same slot twice.
    #[error("slot {0} is a candidate twice")]
    SlotTwice(SlotId),
}

/// Why one candidate slot could not be had: the code a hold on it alone would have been
/// refused with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum CandidateProblem {
    /// No slot has this id, or it was removed (`slot_not_found`).
    SlotNotFound,
    /// The slot has started or its sales are closed (`slot_closed`).
    SlotClosed,
    /// More units than the slot's whole capacity (`quantity_exceeds_capacity`).
    #[serde(rename = "quantity_exceeds_capacity")]
    ExceedsCapacity {
        /// The slot's capacity.
        capacity: i32,
    },
    /// Fewer units free than asked, even after reclaiming expired holds (`sold_out`).
    SoldOut,
}

impl CandidateProblem {
    /// The code of the same refusal of a hold on this slot alone.
    pub fn code(&self) -> &'static str {
        match self {
            CandidateProblem::SlotNotFound => "slot_not_found",
            CandidateProblem::SlotClosed => "slot_closed",
            CandidateProblem::ExceedsCapacity { .. } => "quantity_exceeds_capacity",
            CandidateProblem::SoldOut => "sold_out",
        }
    }
}

/// One candidate slot that could not be had, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateRefused {
    /// The candidate.
    pub slot_id: SlotId,
    /// Why.
    #[serde(flatten)]
    pub problem: CandidateProblem,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_one_to_twenty_distinct_slots() {
        assert_eq!(check_candidates(&[]), Err(InvalidCandidates::None));
        let many: Vec<SlotId> = (1..=21).map(SlotId).collect();
        assert_eq!(check_candidates(&many), Err(InvalidCandidates::TooMany(21)));
        assert_eq!(check_candidates(&many[..20]), Ok(()));
        assert_eq!(
            check_candidates(&[SlotId(3), SlotId(1), SlotId(3)]),
            Err(InvalidCandidates::SlotTwice(SlotId(3)))
        );
    }

    #[test]
    fn a_refused_candidate_serializes_flat_with_its_code() {
        let refused = CandidateRefused {
            slot_id: SlotId(4),
            problem: CandidateProblem::ExceedsCapacity { capacity: 2 },
        };
        assert_eq!(
            serde_json::to_value(refused).unwrap(),
            serde_json::json!({"slot_id": 4, "code": "quantity_exceeds_capacity", "capacity": 2})
        );
        assert_eq!(
            serde_json::to_value(Strategy::LeastBooked).unwrap(),
            serde_json::json!("least_booked")
        );
    }
}
