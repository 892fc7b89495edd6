//! "Any one of these" holds in the store contract: the request (candidates in the order to
//! try), the outcome, and the one rule every store follows, [`first_that_fits`], which
//! [`HoldStore::create_hold_any`](crate::HoldStore::create_hold_any) runs unless a store does better.

use async_trait::async_trait;

use super::error::StoreError;
use super::outcome::{Decided, HoldOutcome, HoldRequest};
use crate::model::{
    CandidateProblem, CandidateRefused, Hold, IdempotencyKey, OwnerId, SlotId, Timestamp,
};

/// A request for a hold on any one of several slots, as the engine hands it to the store:
/// the candidates in the order to try them (the engine's [`Strategy`](crate::model::Strategy)
/// already applied), every field validated.
#[derive(Debug, Clone, Copy)]
pub struct AnyHoldRequest<'a> {
    /// The candidate slots, 1 to [`MAX_CANDIDATES`](crate::model::MAX_CANDIDATES), each once,
    /// in the order to try them.
    pub candidates: &'a [SlotId],
    /// The client's idempotency key.
    pub key: &'a IdempotencyKey,
    /// Who the hold will belong to; `None` for an anonymous hold.
    pub owner: Option<&'a OwnerId>,
    /// Units to take of the one slot, all or none.
    pub quantity: i32,
    /// The engine's current time.
    pub now: Timestamp,
    /// When the new hold will expire.
    pub expires_at: Timestamp,
}

impl<'a> AnyHoldRequest<'a> {
    /// The hold request on one candidate.
    pub fn on(&self, slot_id: SlotId) -> HoldRequest<'a> {
        HoldRequest {
            slot_id,
            key: self.key,
            owner: self.owner,
            quantity: self.quantity,
            now: self.now,
            expires_at: self.expires_at,
        }
    }
}

/// What [`HoldStore::create_hold_any`](crate::HoldStore::create_hold_any) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyHoldOutcome {
    /// A candidate's units were taken and a new hold stored.
    Created(Hold),
    /// The key already belongs to a hold made by this same request: a hold (not a booking of
    /// several lines) on one of the candidates, whichever the first call took and whatever
    /// their order now, of the same quantity and owner. Nothing changed.
    Replayed(Hold),
    /// The key already belongs to a hold made by another request; nothing changed. As in
    /// [`HoldOutcome::KeyReused`], the hold is given only when it has the caller's owner.
    KeyReused(Option<Hold>),
    /// No candidate could be had; nothing was taken. Every candidate, in the order tried,
    /// with the refusal a hold on it alone got.
    Refused(Vec<CandidateRefused>),
}

/// What one candidate's [`HoldOutcome`] means for an "any one of these" hold: the answer, or
/// (`Err`) why the candidate could not be had, so that the next is tried.
pub fn candidate_outcome(
    slot_id: SlotId,
    outcome: HoldOutcome,
) -> Result<AnyHoldOutcome, CandidateRefused> {
    let refused = |problem| CandidateRefused { slot_id, problem };
    match outcome {
        HoldOutcome::Created(hold) => Ok(AnyHoldOutcome::Created(hold)),
        HoldOutcome::Replayed(hold) => Ok(AnyHoldOutcome::Replayed(hold)),
        HoldOutcome::KeyReused(hold) => Ok(AnyHoldOutcome::KeyReused(hold)),
        HoldOutcome::SoldOut => Err(refused(CandidateProblem::SoldOut)),
        HoldOutcome::ExceedsCapacity { capacity } => {
            Err(refused(CandidateProblem::ExceedsCapacity { capacity }))
        }
        HoldOutcome::SlotNotFound => Err(refused(CandidateProblem::SlotNotFound)),
        HoldOutcome::SlotClosed => Err(refused(CandidateProblem::SlotClosed)),
    }
}

/// Placing one hold: what [`first_that_fits`] needs of a store. Every [`HoldStore`](crate::HoldStore) is one by
/// reference; a store whose operations run on one connection for the call can make that
/// runner one, so that every attempt of a call uses that connection.
#[async_trait]
pub trait PlaceOne: Send {
    /// [`HoldStore::create_hold`](crate::HoldStore::create_hold).
    async fn place_one(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError>;
}

#[async_trait]
impl<P: PlaceOne + ?Sized> PlaceOne for &mut P {
    async fn place_one(
        &mut self,
        request: HoldRequest<'_>,
    ) -> Result<Decided<HoldOutcome>, StoreError> {
        (**self).place_one(request).await
    }
}

/// One candidate's attempt: [`PlaceOne::place_one`] on `slot_id`, as
/// [`candidate_outcome`] reads it. When the key turns out to belong to a hold on another
/// candidate, that candidate is asked too, so that the same request made again is a replay
/// (the store decides whether it is: the same quantity and owner, a hold and not a booking of
/// several lines) and anything else is `KeyReused`.
pub async fn try_candidate<P: PlaceOne + ?Sized>(
    store: &mut P,
    request: &AnyHoldRequest<'_>,
    slot_id: SlotId,
) -> Result<Decided<Result<AnyHoldOutcome, CandidateRefused>>, StoreError> {
    let decided = store.place_one(request.on(slot_id)).await?;
    match decided.outcome {
        HoldOutcome::KeyReused(Some(holder))
            if holder.slot_id != slot_id && request.candidates.contains(&holder.slot_id) =>
        {
            let on = holder.slot_id;
            let again = store.place_one(request.on(on)).await?;
            Ok(again.map(|outcome| candidate_outcome(on, outcome)))
        }
        outcome => Ok(Decided::new(
            decided.at,
            candidate_outcome(slot_id, outcome),
        )),
    }
}

/// The rule of an "any one of these" hold, on any store: each candidate in turn gets
/// [`try_candidate`] (its own atomic step, decided by rows affected), until one stores a
/// hold, replays, or the key turns out to be in use; a candidate that refuses changed
/// nothing, so the next is tried. No unit is taken twice: each attempt is a whole hold or
/// nothing.
pub async fn first_that_fits<P: PlaceOne>(
    mut store: P,
    request: AnyHoldRequest<'_>,
) -> Result<Decided<AnyHoldOutcome>, StoreError> {
    let mut refused = Vec::with_capacity(request.candidates.len());
    let mut at = request.now;
    for &slot_id in request.candidates {
        let decided = try_candidate(&mut store, &request, slot_id).await?;
        at = decided.at;
        match decided.outcome {
            Ok(outcome) => return Ok(Decided::new(at, outcome)),
            Err(why) => refused.push(why),
        }
    }
    Ok(Decided::new(at, AnyHoldOutcome::Refused(refused)))
}
