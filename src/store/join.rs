//! Joining and leaving a slot's waiting line, the one rule every store follows:
//! [`join_line`] and [`leave_line`] over the store's [`WaitKernel`], in one unit of work.
//!
//! **A join** locks its slot's accounts (the slot, then its pools), then inserts the entry
//! ([`WaitKernel::insert_entry`]): a statement that stores it only where the slot sells and
//! the quantity fits the slot's capacity and every pool's, no hold has the key (another
//! entry's is the unique key's), and counts it in its slot's line and its pools'. Stored, the
//! lines of its slot and pools are served in the same unit ([`Kernel::serve`](super::Kernel::serve)): an entry
//! served at once answers its offer ([`JoinOutcome::Held`]), any other its place in line. Not
//! stored, reads in the unit say why, in the order every store answers: the key's waiting
//! entry ([`JoinOutcome::key_waits`]), the key's hold or booking
//! ([`JoinOutcome::key_taken`]), then the slot's limits with its pools' least capacity
//! ([`HoldOutcome::refused`]). The unique key refusing the entry answers
//! [`Joining::KeyTaken`]: the unit is undone and the key's holder read after it
//! ([`join_key_answer`]).
//!
//! **A leave** reads the entry in the caller's scope, locks its slot's accounts, deletes it
//! if it still waits (counted out of its lines) and serves its slot's lines and its pools'.

use async_trait::async_trait;

use super::error::StoreError;
use super::outcome::{HoldOutcome, SlotLimits};
use super::place::{KeyHolder, PlaceKernel};
use super::serve::Lines;
use super::step::Step;
use super::waitlists::{JoinOutcome, JoinRequest};
use crate::model::{EntryId, HoldId, SlotId, Timestamp, WaitlistEntry};
use crate::scope::Scope;

/// What inserting a waiting entry did ([`WaitKernel::insert_entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Stored, with this id, and counted in its lines.
    Stored(EntryId),
    /// Not stored: the slot does not sell or the quantity exceeds a capacity, or a hold has
    /// the key.
    NotStored,
    /// The key's unique constraint refused it.
    KeyTaken,
}

/// What a join's unit of work came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joining {
    /// The answer.
    Done(JoinOutcome),
    /// The key's unique constraint refused the entry: undo the unit, then answer from the
    /// key's holder read after it ([`join_key_answer`]).
    KeyTaken,
}

/// The primitives a join and a leave need of a store's unit of work, beside a
/// [`PlaceKernel`]'s.
#[async_trait]
pub trait WaitKernel: PlaceKernel {
    /// Inserts `request`'s entry, held to the guards of the module's docs, and counts it in
    /// its slot's line and its pools' lines.
    async fn insert_entry(&mut self, request: &JoinRequest<'_>) -> Result<Enqueued, StoreError>;

    /// The limits of slot `slot_id`, its capacity the least of its own and its pools' (more
    /// than a pool's capacity exceeds it as the slot's own would); `None` when no slot has the
    /// id.
    async fn join_limits(&mut self, slot_id: SlotId) -> Result<Option<SlotLimits>, StoreError>;

    /// The entry `entry_id` still waiting, if `scope` admits it, with its place in line.
    async fn entry_in_scope(
        &mut self,
        entry_id: EntryId,
        scope: &Scope,
    ) -> Result<Option<(WaitlistEntry, u32)>, StoreError>;

    /// Deletes `entry` if it still waits and `scope` admits it, counted out of its lines (its
    /// key freed): whether it did.
    async fn delete_entry(
        &mut self,
        entry: &WaitlistEntry,
        scope: &Scope,
    ) -> Result<bool, StoreError>;
}

/// A join, as the module's docs say.
pub async fn join_line<K: WaitKernel + ?Sized>(
    kernel: &mut K,
    request: &JoinRequest<'_>,
) -> Result<Step<Joining>, StoreError> {
    let hold = &request.hold;
    kernel.lock_accounts(&[hold.slot_id]).await?;
    let entry_id = match kernel.insert_entry(request).await? {
        Enqueued::Stored(entry_id) => entry_id,
        Enqueued::KeyTaken => return Ok(Step::undo(Joining::KeyTaken)),
        Enqueued::NotStored => {
            let holder = kernel.key_holder(hold.key.as_str()).await?;
            let refused = match key_answer(request, holder) {
                Some(answer) => answer,
                None => {
                    let limits = kernel.join_limits(hold.slot_id).await?;
                    match HoldOutcome::refused(hold, None, limits) {
                        HoldOutcome::SoldOut => {
                            return Err(StoreError::failed(
                                "a waitlist entry that its slot admits was not stored",
                            ))
                        }
                        refused => JoinOutcome::Refused(refused),
                    }
                }
            };
            return Ok(Step::undo(Joining::Done(refused)));
        }
    };
    let offers = kernel
        .serve(&Lines::of_slot(hold.slot_id), hold.now)
        .await?;
    let offer_id = HoldId(entry_id.0);
    if let Some(hold) = offers.into_iter().find(|offer| offer.hold_id == offer_id) {
        let held = JoinOutcome::Held {
            hold,
            replayed: false,
        };
        return Ok(Step::keep(Joining::Done(held)));
    }
    let (entry, position) = kernel
        .entry_in_scope(entry_id, &Scope::BackOffice)
        .await?
        .ok_or_else(|| StoreError::failed("a new waitlist entry is gone"))?;
    let waiting = JoinOutcome::Waiting {
        entry,
        position,
        replayed: false,
    };
    Ok(Step::keep(Joining::Done(waiting)))
}

/// The answer to a join whose key the unique constraint refused, from the key's holder read
/// after the unit was undone (a holder gone since leaves the key reused by nobody to show).
pub fn join_key_answer(request: &JoinRequest<'_>, holder: KeyHolder) -> JoinOutcome {
    key_answer(request, holder).unwrap_or(JoinOutcome::Refused(HoldOutcome::KeyReused(None)))
}

/// A join's answer when its key is in use: `None` when nobody has it.
fn key_answer(request: &JoinRequest<'_>, holder: KeyHolder) -> Option<JoinOutcome> {
    let now = request.hold.now;
    match holder {
        KeyHolder::Waiting(entry, position) => {
            Some(JoinOutcome::key_waits(request, entry, position, now))
        }
        KeyHolder::Booking(holder) => Some(JoinOutcome::key_taken(&request.hold, holder)),
        KeyHolder::Free => None,
    }
}

/// A leave, as the module's docs say: the entry that left, `None` when none waited in
/// `scope`.
pub async fn leave_line<K: WaitKernel + ?Sized>(
    kernel: &mut K,
    entry_id: EntryId,
    scope: &Scope,
    now: Timestamp,
) -> Result<Step<Option<WaitlistEntry>>, StoreError> {
    let Some((entry, _)) = kernel.entry_in_scope(entry_id, scope).await? else {
        return Ok(Step::keep(None));
    };
    kernel.lock_accounts(&[entry.slot_id]).await?;
    if !kernel.delete_entry(&entry, scope).await? {
        // Offered (or left) since it was read.
        return Ok(Step::keep(None));
    }
    kernel.serve(&Lines::of_slot(entry.slot_id), now).await?;
    Ok(Step::keep(Some(entry)))
}
